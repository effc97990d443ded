"""The devices of one task, as the executor uses them: thread pools, cores and memory.

Contract (the worker service builds one per task, an in-process session one per session):

1. :meth:`LocalDevices.for_task` ``(cluster, job, task, config)`` takes every
   :class:`core.cluster.Device` of that task and gives it
   - an *inter-op pool* of ``config.inter_op_parallelism_threads`` threads (0: the
     device's ``inter_op_threads``; the setting applies to CPU devices, a GPU keeps the
     cluster's figure, 1 by default, as its kernels queue on one stream anyway);
   - an *intra-op* thread count, ``config.intra_op_parallelism_threads`` or the device's
     (CPU devices; 1 on a GPU);
   - *memory accounting*: a capacity (``memory_bytes``; a GPU's times
     ``per_process_gpu_memory_fraction`` when set) and the bytes *reserved* from it:
     without ``allow_growth`` a GPU reserves its whole capacity on first use (TF's
     default, the process takes all it sees), with it the reservation grows to the
     peak in use and is never given back.  CPUs reserve as they use.
2. Pools are shared as in TensorFlow: a process-wide registry keyed by
   ``(device name, pool size)`` hands the pools created by the first session to later
   ones, unless ``config.use_per_session_threads``, which gives private pools that
   :meth:`LocalDevices.close` stops.  Shared pools live as long as the process.
3. The CPU cores of a host are a process-wide resource (:class:`HostCores`, keyed by
   host and its core count: a cluster that gives the host fewer cores, as a
   calibration's one-core cluster does, gets a count of its own rather than leaving
   later sessions that many): a CPU op holds one core, a multithreaded one up to its
   intra-op threads (fewer if fewer are free, at least one, waiting while none is), the
   rule the simulator follows, so that a measured trace never shows more cores busy
   than the host has.
4. A GPU device needs :func:`runtime.kernels.cuda_available`; :meth:`LocalDevice.check_usable`
   raises :class:`runtime.errors.InvalidArgument` naming the op and the device when an op
   is placed on a GPU this process cannot use.

:meth:`LocalDevices.effective_cluster` is the cluster with the thread counts the
config set, so that a measured trace validates against it.

>>> from core.cluster import Cluster
>>> from runtime.config import SessionConfig
>>> devs = LocalDevices.for_task(Cluster.single_host(cpu_cores=2), "localhost", 0,
...                              SessionConfig(inter_op_parallelism_threads=3))
>>> d = devs["/job:localhost/replica:0/task:0/cpu:0"]
>>> d.inter_op_threads, d.intra_op_threads, d.pool.threads
(3, 2, 3)
>>> devs.close()
"""

from __future__ import annotations

import queue
import threading
from typing import Callable, Iterator

from core.cluster import Cluster, Device
from core.devices import DeviceSpec
from runtime.errors import InvalidArgument, NotFound

__all__ = ["LocalDevices", "LocalDevice", "InterOpPool", "HostCores", "MemoryAccount"]


class InterOpPool:
    """``threads`` daemon threads taking ``(fn, arg)`` items from one queue and calling
    ``fn(slot, arg)``, ``slot`` being an inter-op thread slot (0..threads-1) that no
    other op holds meanwhile.

    A thread that would otherwise wait (the caller of a step, a recv helper) may run an
    op itself in a free slot (:meth:`try_slot` ... :meth:`release`) instead of handing
    it to a pool thread: TensorFlow's executor runs cheap ready ops inline the same way.
    Slots are handed out dynamically, so at most ``threads`` ops run at once and no slot
    runs two at once, whichever threads run them (the trace invariants).

    >>> pool = InterOpPool("example", 2)
    >>> done = threading.Event()
    >>> pool.submit(lambda slot, arg: done.set(), None)
    >>> done.wait(5)
    True
    >>> slot = pool.try_slot(); slot in (0, 1)
    True
    >>> pool.release(slot)
    >>> pool.close()
    """

    def __init__(self, name: str, threads: int):
        if threads < 1:
            raise InvalidArgument(f"an inter-op pool needs at least one thread, not {threads}")
        self.name, self.threads = name, threads
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._closed = False
        self._free = list(range(threads - 1, -1, -1))  # a stack: slot 0 is reused first
        self._slot_freed = threading.Condition(threading.Lock())
        self._workers = [threading.Thread(target=self._work, daemon=True,
                                          name=f"inter-op {i} {name}")
                         for i in range(threads)]
        for w in self._workers:
            w.start()

    def submit(self, fn: Callable[[int, object], None], arg) -> None:
        """Queue ``fn(slot, arg)``; ``fn`` must not raise (the executor catches inside)."""
        self._queue.put((fn, arg))

    def try_slot(self) -> int | None:
        """A free slot for the calling thread to run an op in, or None (all busy)."""
        with self._slot_freed:
            return self._free.pop() if self._free else None

    def release(self, slot: int) -> None:
        """Give back a slot from :meth:`try_slot`."""
        with self._slot_freed:
            self._free.append(slot)
            self._slot_freed.notify()

    def _work(self) -> None:
        get = self._queue.get
        cond, free = self._slot_freed, self._free
        while True:
            fn, arg = get()
            if fn is None:
                return
            with cond:
                while not free:  # a thread running an op inline holds the slot
                    cond.wait()
                slot = free.pop()
            try:
                fn(slot, arg)
            finally:
                # Not kept while waiting for the next item: fn is a step's bound method,
                # and the step would live on (its values, its error) until then.
                fn = arg = None
                self.release(slot)

    def close(self) -> None:
        """Stop the threads once the queued items ran (idempotent)."""
        if self._closed:
            return
        self._closed = True
        for _ in self._workers:
            self._queue.put((None, None))

    @property
    def closed(self) -> bool:
        return self._closed

    def __repr__(self) -> str:
        return f"<InterOpPool {self.name} threads={self.threads}>"


class HostCores:
    """The CPU cores of one host, taken by CPU ops while they run (see contract item 3).

    >>> cores = HostCores("h", 2)
    >>> cores.take(4), cores.free
    (2, 0)
    >>> cores.give(2); cores.free
    2
    """

    def __init__(self, host: str, cores: int):
        self.host, self.cores, self.free = host, cores, cores
        # Entered as the plain lock, not the Condition: Condition.__enter__/__exit__ are
        # Python calls, and take/give run around every CPU kernel (~15% of a small-op
        # step in a profile).  The Condition shares the lock, for the waits.
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._waiting = 0

    def take(self, want: int) -> int:
        """Take ``want`` cores, or as many as are free (at least one, waiting for it)."""
        with self._lock:
            while self.free <= 0:
                self._waiting += 1
                self._cond.wait()
                self._waiting -= 1
            k = want if want <= self.free else self.free
            self.free -= k
            return k

    def give(self, k: int) -> None:
        with self._lock:
            self.free += k
            if self._waiting:
                self._cond.notify_all()


class MemoryAccount:
    """A device's memory: ``capacity``, ``reserved`` (taken from the system), ``peak``
    (most bytes in use by one step).  Thread-safe; see contract item 1."""

    def __init__(self, capacity: int, reserve_all: bool):
        self.capacity, self.reserve_all = int(capacity), reserve_all
        self.reserved = 0
        self.peak = 0
        self._lock = threading.Lock()

    def used(self, peak_in_use: int) -> None:
        """A step on the device held at most ``peak_in_use`` bytes."""
        with self._lock:
            if peak_in_use > self.peak:
                self.peak = peak_in_use
            self.reserved = max(self.reserved, self.capacity if self.reserve_all else peak_in_use)

    def stats(self) -> dict:
        return {"capacity": self.capacity, "reserved": self.reserved, "peak": self.peak}


class LocalDevice:
    """One device of this task: its cluster :class:`Device`, pool, threads and memory."""

    def __init__(self, device: Device, pool: InterOpPool, inter_op_threads: int,
                 intra_op_threads: int, memory: MemoryAccount, cores: HostCores | None,
                 private_pool: bool):
        self.device = device
        self.name = device.name
        self.device_type = device.device_type
        self.index = device.index
        self.is_cpu = device.is_cpu
        self.pool = pool
        self.inter_op_threads = inter_op_threads
        self.intra_op_threads = intra_op_threads
        self.memory = memory
        self.cores = cores
        self.private_pool = private_pool

    def check_usable(self, op_name: str = "") -> None:
        """Raise :class:`InvalidArgument` when this is a GPU and no CUDA (nor numba's
        simulator) is available in this process."""
        if self.is_cpu:
            return
        from runtime.kernels import cuda_available
        if not cuda_available():
            who = f"op {op_name!r} is placed on {self.name}" if op_name else f"device {self.name}"
            raise InvalidArgument(
                f"{who}, but this process cannot run CUDA kernels: no CUDA GPU is visible "
                "(CUDA_VISIBLE_DEVICES?) and numba's simulator is off (NUMBA_ENABLE_CUDASIM=1 "
                "before numba.cuda is imported)")

    def __repr__(self) -> str:
        return (f"<LocalDevice {self.name} inter_op={self.inter_op_threads} "
                f"intra_op={self.intra_op_threads}>")


# Process-wide registries: pools shared between sessions (TF's global pools), host cores.
_SHARED_POOLS: dict[tuple[str, int], InterOpPool] = {}
_HOST_CORES: dict[tuple[str, int], HostCores] = {}
_REGISTRY_LOCK = threading.Lock()


def _shared_pool(name: str, size: int) -> InterOpPool:
    with _REGISTRY_LOCK:
        pool = _SHARED_POOLS.get((name, size))
        if pool is None or pool.closed:
            pool = _SHARED_POOLS[(name, size)] = InterOpPool(name, size)
        return pool


def host_cores(host: str, cores: int) -> HostCores:
    """The process-wide :class:`HostCores` of ``host`` with ``cores`` cores.

    Keyed by both: a session of a cluster that says the host has one core (as
    :func:`runtime.calibrate.measure_op_overhead`'s does) must not leave every later
    session of this process one core.

    >>> host_cores("h", 1) is host_cores("h", 1), host_cores("h", 2).cores
    (True, 2)
    """
    with _REGISTRY_LOCK:
        hc = _HOST_CORES.get((host, cores))
        if hc is None:
            hc = _HOST_CORES[(host, cores)] = HostCores(host, cores)
        return hc


class LocalDevices:
    """The devices of one task (see the module docstring for the contract).

    Indexable by any spelling of a device's full name; iterates in cluster order.
    """

    def __init__(self, cluster: Cluster, job: str, task: int, devices: list[LocalDevice]):
        self.cluster, self.job, self.task = cluster, job, task
        self._devices = devices
        self._by_name = {d.name: d for d in devices}
        self._closed = False

    @classmethod
    def for_task(cls, cluster: Cluster, job: str, task: int, config=None) -> "LocalDevices":
        from runtime.config import SessionConfig
        config = config or SessionConfig()
        out = []
        for dev in cluster.devices_of_task(job, task):
            if dev.is_cpu:
                inter = config.inter_op_parallelism_threads or dev.inter_op_threads
                intra = config.intra_op_parallelism_threads or dev.intra_op_threads
                capacity = dev.memory_bytes
                reserve_all = False
                cores = host_cores(dev.host, cluster.host(dev.host).cpu_cores)
            else:
                inter, intra = dev.inter_op_threads, 1
                fraction = config.per_process_gpu_memory_fraction
                capacity = int(dev.memory_bytes * fraction) if fraction else dev.memory_bytes
                reserve_all = not config.allow_growth
                cores = None
            private = config.use_per_session_threads
            pool = InterOpPool(dev.name, inter) if private else _shared_pool(dev.name, inter)
            out.append(LocalDevice(dev, pool, inter, intra, MemoryAccount(capacity, reserve_all),
                                   cores, private))
        return cls(cluster, job, task, out)

    def __getitem__(self, name: str) -> LocalDevice:
        d = self._by_name.get(name)
        if d is None:
            try:
                d = self._by_name.get(DeviceSpec.from_string(name).replace(
                    replica=DeviceSpec.from_string(name).replica or 0).to_string())
            except Exception:
                d = None
            if d is None:
                raise NotFound(f"device {name!r} is not a device of task /job:{self.job}/"
                               f"replica:0/task:{self.task}; it has {list(self._by_name)}")
        return d

    def get(self, name: str, default=None):
        return self._by_name.get(name, default)

    def __contains__(self, name: str) -> bool:
        return name in self._by_name

    def __iter__(self) -> Iterator[LocalDevice]:
        return iter(self._devices)

    def __len__(self) -> int:
        return len(self._devices)

    @property
    def names(self) -> list[str]:
        return [d.name for d in self._devices]

    def effective_cluster(self) -> Cluster:
        """The cluster with this task's devices carrying the thread counts in use."""
        cluster = self.cluster
        for d in self._devices:
            if (d.device.inter_op_threads, d.device.intra_op_threads) != (
                    d.inter_op_threads, d.intra_op_threads) and d.is_cpu:
                cluster = cluster.replace_device(d.name, inter_op_threads=d.inter_op_threads,
                                                 intra_op_threads=d.intra_op_threads)
        return cluster

    def capacities(self) -> dict[str, int]:
        return {d.name: d.memory.capacity for d in self._devices}

    def memory_stats(self) -> dict[str, dict]:
        """Device -> ``{"capacity", "reserved", "peak"}`` bytes."""
        return {d.name: d.memory.stats() for d in self._devices}

    def close(self) -> None:
        """Stop the private pools (shared ones stay for later sessions); idempotent."""
        if self._closed:
            return
        self._closed = True
        for d in self._devices:
            if d.private_pool:
                d.pool.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def __repr__(self) -> str:
        return f"<LocalDevices of /job:{self.job}/task:{self.task}: {self.names}>"
