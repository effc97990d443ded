"""How much of the machine other programs took while an experiment measured.

Timings on a shared machine are only as good as the quiet around them: on this 2-core
VM another program's load makes every kernel slower (its cores, caches and memory
bandwidth are shared), and no statistic over repeats (the fastest step) removes a load
that lasts through them.  :class:`OtherLoad` measures it instead, so a report can say
when its figures were taken on a busy machine: the cores that processes outside this
experiment (this process and its descendants, the servers included) kept busy during a
block of code, and the cores the hypervisor took (``steal``, Linux), through
:mod:`psutil` (Linux, macOS, Windows).

>>> with OtherLoad() as load:
...     pass
>>> load.other_cores >= 0 or load.other_cores != load.other_cores  # a number, or NaN
True
"""

from __future__ import annotations

import math
import os
import time

import psutil

__all__ = ["OtherLoad", "cpu_seconds_of_tree", "machine_cpu_seconds", "wait_until_quiet"]


def machine_cpu_seconds() -> tuple[float, float] | None:
    """``(busy, steal)``: CPU seconds all cores spent busy (user, nice, system, irq,
    softirq, as the system reports them) and stolen by the hypervisor (Linux) since
    boot, by :func:`psutil.cpu_times`; None where the system tells nothing."""
    try:
        t = psutil.cpu_times()
    except (OSError, psutil.Error, NotImplementedError):
        return None
    busy = sum(getattr(t, name, 0.0) for name in ("user", "nice", "system", "irq", "softirq"))
    return busy, getattr(t, "steal", 0.0)


def _cpu_seconds(process: psutil.Process) -> float | None:
    """A process's CPU seconds, its waited-for children's included; None if it is gone."""
    try:
        t = process.cpu_times()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None
    return t.user + t.system + getattr(t, "children_user", 0.0) + getattr(t, "children_system", 0.0)


def cpu_seconds_of_tree(root: int | None = None) -> float | None:
    """CPU seconds used by process ``root`` (default: this one), its children it
    waited for, and every live descendant (with theirs); None if ``root`` is gone."""
    try:
        process = psutil.Process(os.getpid() if root is None else root)
        descendants = process.children(recursive=True)
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None
    total = _cpu_seconds(process)
    if total is None:
        return None
    # A descendant that ended meanwhile counts as nothing (or in its parent's children's).
    return total + sum(_cpu_seconds(p) or 0.0 for p in descendants)


class OtherLoad:
    """A context manager: the load of other programs during its block.

    After the block, ``other_cores`` is the average number of cores that processes
    outside this one's tree kept busy, ``steal_cores`` the average the hypervisor took,
    and ``seconds`` the block's wall time (NaN where the system reports no CPU times).  Both are
    averages: a burst of load within a long block reads as a small figure.  Processes
    of this tree that ended during the block without being waited for (by this process
    or their parent in the tree) count as other load.
    """

    def __init__(self):
        self.other_cores = self.steal_cores = self.seconds = math.nan

    def __enter__(self) -> "OtherLoad":
        self._t0 = time.perf_counter()
        self._machine0 = machine_cpu_seconds()
        self._ours0 = cpu_seconds_of_tree()
        return self

    def __exit__(self, *exc) -> None:
        self.seconds = time.perf_counter() - self._t0
        machine, ours = machine_cpu_seconds(), cpu_seconds_of_tree()
        if None in (machine, ours, self._machine0, self._ours0) or self.seconds <= 0:
            return
        busy = machine[0] - self._machine0[0]
        mine = ours - self._ours0
        self.other_cores = max(0.0, busy - mine) / self.seconds
        self.steal_cores = max(0.0, machine[1] - self._machine0[1]) / self.seconds


def wait_until_quiet(below: float, *, window: float = 1.0, timeout: float = 120.0,
                     sleep=time.sleep) -> float:
    """Wait until other programs kept fewer than ``below`` cores busy over a ``window``
    of seconds (measured by :class:`OtherLoad` while this process sleeps), or until
    ``timeout`` seconds passed; return the last window's figure (NaN, at once, where the
    system reports no CPU times).  An experiment calls it before measuring, on a machine it shares."""
    deadline = time.monotonic() + timeout
    while True:
        with OtherLoad() as load:
            sleep(window)
        if not load.other_cores >= below or time.monotonic() >= deadline:
            return load.other_cores
