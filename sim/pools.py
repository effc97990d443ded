"""Thread pools and cores: the resources an op holds while it runs.

- :class:`InterOpPool` — a device's inter-op thread pool: ``threads`` slots; ready ops
  wait in a heap keyed ``(ready time, topological index)``, so among ops waiting for a
  thread the one ready first, then the one earlier in topological order, goes first.
- :class:`DispatchCalendar` — a host's cores as its tasks' dispatchers book them
  (``RuntimeModel.dispatch_cores``): Python work of several server processes on one host
  runs on at most its cores at once.
- :class:`HostCores` — a host's CPU cores, shared by the CPU ops of every task on it.
  A single-threaded CPU kernel holds one core; a multithreaded one holds the device's
  ``intra_op_threads`` cores, or fewer if fewer are free (at least one), and runs
  slower in proportion (:func:`amdahl_speedup`).  An op that got a thread but no core
  keeps its thread and waits, by ``(time it asked, topological index)``.
- :class:`HostMemory` — a host's memory bandwidth, shared by the CPU kernels running
  at once (:attr:`core.cluster.Host.shared_bandwidth`).

Both are SimPy-clock resources granted synchronously: the simulator's event callbacks
take and give slots and never create request/release events, which would cost two
scheduled events per grant (SimPy's ``Resource`` reaches about 200k request/release
cycles a second, the whole simulator has to beat that per op).

>>> pool = InterOpPool(threads=2)
>>> pool.free
[0, 1]
>>> round(amdahl_speedup(4, total_speedup=2.5, threads=4), 6), amdahl_speedup(1, 2.5, 4)
(2.5, 1.0)
"""

from __future__ import annotations

from bisect import insort
from heapq import heappop

from core.cluster import bandwidth_at

__all__ = ["InterOpPool", "HostCores", "HostMemory", "DispatchCalendar", "amdahl_speedup",
           "rescale_speedup", "slowdown_table"]


class InterOpPool:
    """A device's inter-op pool: ``free`` is a heap of free thread slots (the lowest slot
    is taken first), ``waiting`` a heap of ``(ready time, op index)``."""

    __slots__ = ("threads", "free", "waiting")

    def __init__(self, threads: int):
        if threads < 1:
            raise ValueError(f"an inter-op pool needs at least one thread, not {threads}")
        self.threads = threads
        self.free = list(range(threads))
        self.waiting: list = []


class HostCores:
    """A host's cores: ``free`` count and ``waiting`` heap of ``(time, op, thread)``."""

    __slots__ = ("cores", "free", "waiting")

    def __init__(self, cores: int):
        if cores < 1:
            raise ValueError(f"a host needs at least one core, not {cores}")
        self.cores = cores
        self.free = cores
        self.waiting: list = []

    def hand_out(self, cores: int, want_cores, start) -> None:
        """Freed ``cores`` go to the work waiting for them, first come first served,
        each taking what it wants (``want_cores[j]``) of what is free and starting
        (``start(j, thread, got)``)."""
        free, waiting = self.free + cores, self.waiting
        while free and waiting:
            _, j, slot = heappop(waiting)
            got = want_cores[j]
            if got > free:
                got = free
            free -= got
            start(j, slot, got)
        self.free = free


class HostMemory:
    """A host's memory bandwidth, shared by the CPU kernels running at once on it.

    Each kernel that moves memory asks, while it moves it, for its own rate alone:
    ``bytes / seconds`` of :meth:`core.costs.CostModel.memory_traffic`.  The host
    serves at most ``curve`` at the working sets of the kernels running, added up
    (:attr:`core.cluster.Host.shared_bandwidth`: caches are shared, so two kernels
    whose arrays fit them alone may not fit them together).  When a kernel starts and
    the rates asked add up to more than that, its memory part runs slower by their
    ratio: ``duration + seconds * (asked / served - 1)``.  The rate is fixed when the
    kernel starts, as its cores are (kernels already running are not slowed by a
    later one; in a steady stream of kernels each starts beside the others, so each
    is slowed once).  A kernel alone is never slowed: its own rate by working set is
    in its time already (:meth:`core.cluster.Device.bandwidth_at`).

    >>> m = HostMemory(((1 << 20, 100e9), (1 << 24, 40e9)))
    >>> m.start(0, 8 << 20, 2e-4, 3e-4)     # alone: as it is
    0.0003
    >>> round(m.start(1, 8 << 20, 2e-4, 3e-4) * 1e6, 1)  # two ask 84 GB/s of 40
    ...                                                   # doctest: +NORMALIZE_WHITESPACE
    519.4
    >>> m.end(0); m.end(1); m.running
    0
    """

    __slots__ = ("curve", "running", "asked", "working_set", "_held")

    def __init__(self, curve: tuple):
        self.curve = curve
        self.running = 0
        self.asked = 0.0
        self.working_set = 0
        self._held: dict = {}

    def start(self, op: int, nbytes: int, seconds: float, duration: float) -> float:
        """Kernel ``op`` starts, moving ``nbytes`` in ``seconds`` of its ``duration``
        when alone: its duration beside the kernels running."""
        if seconds <= 0.0 or nbytes <= 0:
            return duration
        rate = nbytes / seconds
        self.running += 1
        self.asked += rate
        self.working_set += nbytes
        self._held[op] = (rate, nbytes)
        if self.running > 1:
            ratio = self.asked / bandwidth_at(self.curve, self.working_set)
            if ratio > 1.0:
                duration += seconds * (ratio - 1.0)
        return duration

    def end(self, op: int) -> None:
        """Kernel ``op`` ended (nothing when it moved no memory)."""
        held = self._held.pop(op, None)
        if held is not None:
            self.running -= 1
            self.asked -= held[0]
            self.working_set -= held[1]


def amdahl_speedup(cores: int, total_speedup: float, threads: int) -> float:
    """The speed-up of a multithreaded kernel on ``cores`` cores, when on all ``threads``
    of its intra-op pool it runs ``total_speedup`` times faster than on one.

    Amdahl's law (G. Amdahl, "Validity of the single processor approach to achieving
    large scale computing capabilities", AFIPS 1967): ``S(k) = 1 / ((1 - p) + p / k)``,
    with the parallel fraction ``p`` chosen so that ``S(threads) = total_speedup``.  A
    super-linear ``total_speedup >= threads`` scales linearly instead.
    """
    cores = max(1, min(cores, threads))
    if threads <= 1 or total_speedup <= 1.0:
        return 1.0
    if total_speedup >= threads:
        return total_speedup * cores / threads
    p = (1.0 - 1.0 / total_speedup) / (1.0 - 1.0 / threads)
    return 1.0 / ((1.0 - p) + p / cores)


def slowdown_table(total_speedup: float, threads: int) -> list[float]:
    """``table[k]`` = how many times longer a multithreaded kernel takes on ``k`` cores
    than on its whole pool (``table[threads] == 1``; index 0 unused)."""
    full = amdahl_speedup(threads, total_speedup, threads)
    return [1.0] + [full / amdahl_speedup(k, total_speedup, threads) for k in range(1, threads + 1)]


def rescale_speedup(total_speedup: float, threads: int, new_threads: int) -> float:
    """The whole-pool speed-up on ``new_threads`` threads of a kernel that runs
    ``total_speedup`` times faster on ``threads`` (same Amdahl parallel fraction).

    >>> round(rescale_speedup(1.8, 2, 2), 6), round(rescale_speedup(1.8, 2, 4), 6)
    (1.8, 3.0)
    """
    if new_threads <= 1 or total_speedup <= 1.0:
        return 1.0
    if threads <= 1:
        return 1.0
    if total_speedup >= threads:
        return total_speedup * new_threads / threads
    p = (1.0 - 1.0 / total_speedup) / (1.0 - 1.0 / threads)
    return 1.0 / ((1.0 - p) + p / new_threads)


class DispatchCalendar:
    """The cores of one host as its tasks' dispatchers book them.

    A dispatcher books its work when it is asked for it, often for a later time (it is
    busy until then), so the calendar keeps each core's future bookings, in order, and
    a booking takes the earliest gap long enough on any core: the work of several
    processes' interpreters overlaps on at most ``cores`` cores.  The kernels running
    on the host hold cores here too (:meth:`occupy`; :class:`HostCores` decides when
    they run), so an interpreter's work waits for a core no kernel holds.

    >>> cal = DispatchCalendar(cores=2)
    >>> [cal.book(0.0, now=0.0, work=1.0) for _ in range(3)]  # the third waits for a core
    [0.0, 0.0, 1.0]
    >>> cal.book(0.0, now=0.0, work=0.5)  # a gap none of them left before 1.0
    1.0
    """

    def __init__(self, cores: int):
        self.bookings: list[list[tuple[float, float]]] = [[] for _ in range(cores)]

    def book(self, earliest: float, now: float, work: float) -> float:
        """Book ``work`` seconds from ``earliest`` on (``now``: the clock; bookings that
        ended by then are forgotten); returns when the work begins."""
        self._forget(now)
        best = best_core = None
        for core in self.bookings:
            begin = earliest
            for start, end in core:
                if start >= begin + work:
                    break  # the gap before this booking is long enough
                if end > begin:
                    begin = end
            if best is None or begin < best:
                best, best_core = begin, core
        insort(best_core, (best, best + work))
        return best

    def occupy(self, start: float, end: float, cores: int, now: float) -> None:
        """A kernel holds ``cores`` cores over ``[start, end)`` (the host's
        :class:`HostCores` granted them; it does not wait here): each goes on the core
        whose bookings overlap it least, so later bookings find it taken.

        >>> cal = DispatchCalendar(cores=1)
        >>> cal.occupy(0.0, 2.0, cores=1, now=0.0)
        >>> cal.book(0.5, now=0.0, work=0.1)  # the only core is the kernel's until 2.0
        2.0
        """
        self._forget(now)
        for _ in range(min(cores, len(self.bookings))):
            best = best_core = None
            for core in self.bookings:
                overlap = 0.0
                for s, e in core:
                    if s >= end:
                        break
                    if e > start:
                        overlap += min(e, end) - max(s, start)
                if best is None or overlap < best:
                    best, best_core = overlap, core
            insort(best_core, (start, end))

    def _forget(self, now: float) -> None:
        """Drop the bookings that ended by ``now`` (each core's are in order)."""
        for core in self.bookings:
            while core and core[0][1] <= now:
                del core[0]
