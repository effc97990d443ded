"""OtherLoad counts the CPU time of programs outside this process tree, not ours."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time

import pytest

from experiments.backends import Measurement
from experiments.machine_load import OtherLoad, cpu_seconds_of_tree, machine_cpu_seconds

pytestmark = pytest.mark.skipif(machine_cpu_seconds() is None,
                                reason="the system reports no CPU times to psutil")

BUSY = "import time\nt = time.perf_counter()\nwhile time.perf_counter() - t < {s}: pass"
BURN = "import time\nwhile time.process_time() < {s}: pass"


def test_our_own_child_counts_as_ours():
    before = cpu_seconds_of_tree()
    with OtherLoad() as ours:
        # One CPU second, however long the machine's other load makes it take.
        child = subprocess.Popen([sys.executable, "-c", BURN.format(s=1.0)])
        deadline = time.monotonic() + 30
        while cpu_seconds_of_tree() - before < 0.3 and time.monotonic() < deadline:
            time.sleep(0.05)
        # A live descendant counts...
        assert cpu_seconds_of_tree() - before >= 0.3
        child.wait()
    # ...and once waited for, its CPU time is in this process's own (cutime): OtherLoad
    # takes this tree's time out of the machine's busy time.
    assert cpu_seconds_of_tree() - before >= 0.9
    assert ours.seconds >= 0.9 and ours.other_cores >= 0


@pytest.mark.skipif(shutil.which("setsid") is None, reason="needs setsid")
def test_a_detached_busy_process_is_other_load():
    # setsid -f: a process outside this tree (its parent exits at once).
    subprocess.run(["setsid", "-f", sys.executable, "-c", BUSY.format(s=2.0)], check=True)
    time.sleep(0.2)
    with OtherLoad() as busy:
        time.sleep(1.0)
    # It ran on a core of its own while this process slept (with more load around,
    # that load counts too).
    assert busy.other_cores >= 0.7
    assert busy.steal_cores >= 0


def test_halves_spread_compares_the_fastest_of_each_half():
    m = Measurement(step_time=1.0, steps=[1.2, 1.0, 1.5, 1.1], traces=[])
    assert m.halves_spread == pytest.approx(0.1)  # 1.0 against 1.1
    assert Measurement(1.0, [1.0], []).halves_spread != Measurement(1.0, [1.0], []).halves_spread


def test_wait_until_quiet_returns_once_below_or_at_the_timeout():
    from experiments.machine_load import wait_until_quiet
    waited = []
    # Below any load: at once, after one window.
    other = wait_until_quiet(below=1e9, window=0.05, sleep=lambda s: (waited.append(s), time.sleep(s)))
    assert waited == [0.05] and other >= 0
    # Never quiet enough (no load is below 0): gives up at the timeout.
    t0 = time.monotonic()
    wait_until_quiet(below=0.0, window=0.05, timeout=0.3)
    assert 0.3 <= time.monotonic() - t0 < 2.0
