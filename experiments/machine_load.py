"""How much of the machine other programs took while an experiment measured.

Timings on a shared machine are only as good as the quiet around them: on this 2-core
VM another program's load makes every kernel slower (its cores, caches and memory
bandwidth are shared), and no statistic over repeats (the fastest step) removes a load
that lasts through them.  :class:`OtherLoad` measures it instead, so a report can say
when its figures were taken on a busy machine: the cores that processes outside this
experiment (this process and its descendants, the servers included) kept busy during a
block of code, and the cores the hypervisor took (``steal``), from ``/proc`` (Linux;
elsewhere the figures are NaN).

>>> with OtherLoad() as load:
...     pass
>>> load.other_cores >= 0 or load.other_cores != load.other_cores  # a number, or NaN
True
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

__all__ = ["OtherLoad", "cpu_seconds_of_tree", "machine_cpu_seconds", "wait_until_quiet"]

_PROC = Path("/proc")


def _ticks_per_second() -> float:
    try:
        return float(os.sysconf("SC_CLK_TCK"))
    except (AttributeError, ValueError, OSError):
        return 100.0


def machine_cpu_seconds() -> tuple[float, float] | None:
    """``(busy, steal)``: CPU seconds all cores spent busy (user, nice, system, irq,
    softirq) and stolen by the hypervisor since boot, from ``/proc/stat``; None where
    there is none."""
    try:
        fields = (_PROC / "stat").read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    ticks = [int(v) for v in fields[1:]]
    ticks += [0] * (8 - len(ticks))
    user, nice, system, _idle, _iowait, irq, softirq, steal = ticks[:8]
    hz = _ticks_per_second()
    return (user + nice + system + irq + softirq) / hz, steal / hz


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = (_PROC / str(pid) / "stat").read_text()
    except OSError:  # gone meanwhile
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its end.
    return text[text.rfind(")") + 2:].split()


def cpu_seconds_of_tree(root: int | None = None) -> float | None:
    """CPU seconds used by process ``root`` (default: this one), its children it
    waited for, and every live descendant (with theirs); None without ``/proc``."""
    root = os.getpid() if root is None else root
    children: dict[int, list[int]] = {}
    used: dict[int, float] = {}
    try:
        entries = [int(p.name) for p in _PROC.iterdir() if p.name.isdigit()]
    except OSError:
        return None
    for pid in entries:
        fields = _stat_fields(pid)
        if fields is None:
            continue
        # After the name: state(3) ppid(4) ... utime(14) stime(15) cutime(16) cstime(17).
        children.setdefault(int(fields[1]), []).append(pid)
        used[pid] = sum(int(v) for v in fields[11:15])
    if root not in used:
        return None
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += used.get(pid, 0)
        todo.extend(children.get(pid, ()))
    return total / _ticks_per_second()


class OtherLoad:
    """A context manager: the load of other programs during its block.

    After the block, ``other_cores`` is the average number of cores that processes
    outside this one's tree kept busy, ``steal_cores`` the average the hypervisor took,
    and ``seconds`` the block's wall time (NaN where ``/proc`` is missing).  Both are
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
    ``timeout`` seconds passed; return the last window's figure (NaN without ``/proc``,
    at once).  An experiment calls it before measuring, on a machine it shares."""
    deadline = time.monotonic() + timeout
    while True:
        with OtherLoad() as load:
            sleep(window)
        if not load.other_cores >= below or time.monotonic() >= deadline:
            return load.other_cores
