"""Clusters: which tasks exist (:class:`ClusterSpec`) and what hardware they run on
(:class:`Cluster`).

A :class:`ClusterSpec` is TensorFlow's ``tf.train.ClusterSpec``: job names mapped to
``host:port`` addresses, ``/job:ps/task:1`` being the second address of job ``ps``.

A :class:`Cluster` is the hardware view the placers, the simulator and the runtime share:
hosts (machines), tasks (server processes, each on one host), devices (a task's CPU and
GPUs, with speed, memory and thread pools) and links (shared resources a transfer
occupies).  All times are in seconds, rates in FLOP/s and bytes/s, sizes in bytes.

Links are found by name, so a cluster is plain data that round-trips through JSON:

==========================  =========  ===============================================
name                        kind       used by
==========================  =========  ===============================================
``memcpy:<host>``           memcpy     transfers between two tasks of the host
``network:<host>``          network    transfers leaving or entering the host
``pcie:<device full name>`` pcie       transfers to or from that GPU
``nvlink:<host>``           nvlink     GPU to GPU inside one task (``nvlink=True``)
==========================  =========  ===============================================

>>> spec = ClusterSpec({"ps": ["127.0.0.1:2221"], "worker": ["127.0.0.1:2223"]})
>>> cluster = Cluster.from_spec(spec, gpus_per_task={"worker": 1})
>>> cluster.default_device("worker", 0).name
'/job:worker/replica:0/task:0/device:GPU:0'
>>> [link.name for link in cluster.route("/job:ps/task:0/cpu:0", "/job:worker/task:0/gpu:0")]
['network:host0', 'network:host1', 'pcie:/job:worker/replica:0/task:0/device:GPU:0']
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import MISSING, asdict, dataclass, fields, replace
from pathlib import Path
from typing import Iterable, Mapping

# One rule for job names, shared with device names.
from core.devices import _JOB_NAME as JOB_NAME_RE
from core.devices import DeviceSpec, InvalidDeviceSpec, full_name
from core.runtime_model import RuntimeModel, get_runtime_model

__all__ = [
    "ClusterSpec", "InvalidClusterSpec", "UnknownTask", "split_address",
    "Host", "Task", "Device", "Link", "LINK_KINDS", "Cluster", "InvalidCluster",
    "UnknownDevice", "HardwareFigures", "DEFAULT_FIGURES", "FORMAT", "usable_cpu_cores",
    "bandwidth_at",
]

FORMAT = "placement-lab.cluster/1"
LINK_KINDS = ("memcpy", "pcie", "nvlink", "network")
GiB = 1 << 30


# ======================================================================================
# Errors
# ======================================================================================

class InvalidClusterSpec(ValueError):
    """A malformed cluster spec.

    Attributes: ``reason``, and the culprit where there is one: ``job``, ``task``,
    ``address``; for a duplicate address, ``other`` is the ``(job, task)`` that has it first.
    """

    def __init__(self, reason: str, *, job=None, task=None, address=None, other=None):
        self.reason, self.job, self.task, self.address, self.other = reason, job, task, address, other
        where = ""
        if job is not None:
            where = f"job {job!r}" + (f" task {task}" if task is not None else "") + ": "
        super().__init__(f"invalid cluster spec: {where}{reason}")


class UnknownTask(KeyError):
    """A job or task the cluster does not have (``job``, ``task``, ``known``)."""

    def __init__(self, job, task=None, known: Iterable = ()):
        self.job, self.task, self.known = job, task, list(known)
        what = f"job {job!r}" if task is None else f"task {task} of job {job!r}"
        super().__init__(f"unknown {what}; the cluster has {self.known}")

    def __str__(self) -> str:  # KeyError would print the message quoted
        return self.args[0]


class InvalidCluster(ValueError):
    """A cluster that breaks an invariant, or a cluster file that cannot be read.

    Attributes: ``reason``, ``culprit`` (the name of the host, task, device or link at
    fault, or None) and ``path`` (the file, when loading).
    """

    def __init__(self, reason: str, culprit=None, path=None):
        self.reason, self.culprit, self.path = reason, culprit, path
        prefix = f"{path}: " if path is not None else ""
        where = f"{culprit}: " if culprit is not None else ""
        super().__init__(f"{prefix}invalid cluster: {where}{reason}")


class UnknownDevice(KeyError):
    """A device name the cluster does not have (``name``, ``known``)."""

    def __init__(self, name, known: Iterable = (), reason: str = ""):
        self.name, self.known = name, list(known)
        why = f" ({reason})" if reason else ""
        super().__init__(f"unknown device {name!r}{why}; the cluster has {self.known}")

    def __str__(self) -> str:
        return self.args[0]


# ======================================================================================
# ClusterSpec
# ======================================================================================

# host:port where host is a name, an IPv4 address or a bracketed IPv6 address.
_ADDRESS = re.compile(r"(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._\-]+):(?P<port>[0-9]{1,5})\Z")


def split_address(address: str) -> tuple[str, int]:
    """``"host:port"`` -> ``(host, port)``; raise :class:`InvalidClusterSpec` if malformed.

    Port 0 is allowed: it asks the server to pick a free (ephemeral) port.

    >>> split_address("127.0.0.1:2222")
    ('127.0.0.1', 2222)
    """
    match = _ADDRESS.match(address) if isinstance(address, str) else None
    if not match or int(match["port"]) > 65535:
        raise InvalidClusterSpec(f"malformed address {address!r}; expected host:port with "
                                 "an integer port in 0..65535", address=address)
    return match["host"], int(match["port"])


class ClusterSpec:
    """Job names mapped to task addresses, as ``tf.train.ClusterSpec``.

    ``jobs`` maps each job name to a list of ``"host:port"`` strings (task ``i`` is the
    ``i``-th) or, for a sparse job, to a dict task index -> address.

    >>> spec = ClusterSpec({"ps": ["127.0.0.1:2221", "127.0.0.1:2222"],
    ...                     "worker": ["127.0.0.1:2223"]})
    >>> spec.task_address("ps", 1), spec.num_tasks("ps"), spec.jobs
    ('127.0.0.1:2222', 2, ['ps', 'worker'])
    >>> ClusterSpec(spec.as_dict()) == spec
    True
    """

    def __init__(self, jobs: "Mapping | ClusterSpec"):
        if isinstance(jobs, ClusterSpec):
            jobs = jobs.as_dict()
        if not isinstance(jobs, Mapping) or not jobs:
            raise InvalidClusterSpec("a cluster spec needs at least one job")
        for job in jobs:
            if not isinstance(job, str) or not JOB_NAME_RE.match(job):
                raise InvalidClusterSpec(f"bad job name {job!r}: a job name starts with a letter "
                                         "and holds only letters, digits, '_' and '-'", job=job)
        self._jobs: dict[str, dict[int, str]] = {}
        owner: dict[str, tuple[str, int]] = {}  # address -> the first task that has it
        for job in sorted(jobs):
            tasks = _task_items(job, jobs[job])
            for task, address in tasks.items():
                try:
                    _, port = split_address(address)
                except InvalidClusterSpec as e:
                    raise InvalidClusterSpec(e.reason, job=job, task=task, address=address) from None
                # Port 0 means "any free port", so two tasks may both ask for it.
                if port != 0 and address in owner:
                    first = owner[address]
                    raise InvalidClusterSpec(
                        f"address {address!r} is used by both /job:{first[0]}/task:{first[1]} "
                        f"and /job:{job}/task:{task}", job=job, task=task, address=address, other=first)
                owner.setdefault(address, (job, task))
            self._jobs[job] = tasks

    # -- lookups ---------------------------------------------------------------------
    @property
    def jobs(self) -> list[str]:
        """The job names, sorted."""
        return list(self._jobs)

    def _tasks_of(self, job: str) -> dict[int, str]:
        if job not in self._jobs:
            raise UnknownTask(job, None, self.jobs)
        return self._jobs[job]

    def num_tasks(self, job: str) -> int:
        """How many tasks ``job`` has."""
        return len(self._tasks_of(job))

    def task_indices(self, job: str) -> list[int]:
        """The task indices of ``job``, sorted (``0..n-1`` unless the job is sparse)."""
        return list(self._tasks_of(job))

    def task_address(self, job: str, task: int) -> str:
        """The address of task ``task`` of ``job``."""
        tasks = self._tasks_of(job)
        if task not in tasks:
            raise UnknownTask(job, task, [f"/job:{job}/task:{t}" for t in tasks])
        return tasks[task]

    def job_tasks(self, job: str) -> list[str | None]:
        """The addresses of ``job``, where position ``i`` is task ``i``; as in TensorFlow,
        a sparse job has ``None`` at the indices it lacks."""
        tasks = self._tasks_of(job)
        return [tasks.get(i) for i in range(max(tasks) + 1)]

    def tasks(self) -> list[tuple[str, int]]:
        """Every ``(job, task)``, sorted."""
        return [(job, task) for job, tasks in self._jobs.items() for task in tasks]

    def as_dict(self) -> dict[str, "list[str] | dict[int, str]"]:
        """Jobs -> list of addresses (dense jobs) or dict index -> address (sparse ones)."""
        out: dict = {}
        for job, tasks in self._jobs.items():
            dense = list(tasks) == list(range(len(tasks)))
            out[job] = list(tasks.values()) if dense else dict(tasks)
        return out

    def __eq__(self, other) -> bool:
        return isinstance(other, ClusterSpec) and self._jobs == other._jobs

    def __hash__(self) -> int:
        return hash(tuple((job, tuple(tasks.items())) for job, tasks in self._jobs.items()))

    def __repr__(self) -> str:
        return f"ClusterSpec({self.as_dict()!r})"


def _task_items(job: str, tasks) -> dict[int, str]:
    """A job's tasks as a dict index -> address, sorted by index."""
    if isinstance(tasks, Mapping):
        for task in tasks:
            if not isinstance(task, int) or isinstance(task, bool) or task < 0:
                raise InvalidClusterSpec(f"task index {task!r} is not a non-negative integer", job=job)
        items = dict(sorted(tasks.items()))
    elif isinstance(tasks, (list, tuple)):
        items = dict(enumerate(tasks))
    else:  # a bare string is the usual mistake: {"worker": "host:2222"}
        raise InvalidClusterSpec(f"the tasks must be a list of addresses or a dict "
                                 f"index -> address, not {tasks!r}", job=job)
    if not items:
        raise InvalidClusterSpec("the job has no tasks", job=job)
    return items


# ======================================================================================
# Hardware records
# ======================================================================================

@dataclass(frozen=True)
class Host:
    """A machine: its CPU cores are shared by every task on it, and so is its memory's
    bandwidth.

    ``shared_bandwidth`` holds measured ``(working set bytes, bytes/s)`` points: the
    rate at which the host's memory serves the CPU kernels running at once, by their
    working sets added up (:func:`runtime.calibrate.measure_shared_bandwidth`: two
    elementwise kernels at once).  Kernels that fit the cores' own caches barely slow
    each other; two that stream from main memory share it.  Empty: kernels never slow
    each other (the presets).  See :func:`bandwidth_at` for how the points are read.

    >>> Host("host0", cpu_cores=8, memory_bytes=32 * 2**30).cpu_cores
    8
    >>> h = Host("h", 2, 2**30, shared_bandwidth=[(1 << 26, 40e9), (1 << 20, 150e9)])
    >>> h.shared_bandwidth
    ((1048576, 150000000000.0), (67108864, 40000000000.0))
    """

    name: str
    cpu_cores: int
    memory_bytes: int
    shared_bandwidth: tuple = ()

    def __post_init__(self):
        object.__setattr__(self, "shared_bandwidth",
                           _curve(self.shared_bandwidth, "shared_bandwidth", self.name))


def _curve(points, what: str, owner: str) -> tuple:
    """``points`` as a sorted tuple of ``(bytes, bytes/s)`` pairs, checked."""
    try:
        curve = tuple(sorted((int(n), float(rate)) for n, rate in points))
    except (TypeError, ValueError):
        raise InvalidCluster(f"{what} must be (bytes, bytes/s) pairs, not {points!r}",
                             owner) from None
    sizes = [n for n, _ in curve]
    if len(set(sizes)) != len(sizes):
        raise InvalidCluster(f"{what} has two points for one size: {sizes}", owner)
    for n, rate in curve:
        if n <= 0 or not rate > 0 or rate == math.inf:
            raise InvalidCluster(f"{what}: ({n}, {rate}) must be positive bytes and a "
                                 "positive finite rate", owner)
    return curve


def bandwidth_at(curve: tuple, nbytes: float) -> float:
    """The rate of ``curve`` (sorted ``(bytes, bytes/s)`` points) at ``nbytes``: straight
    between two points on a logarithmic axis of sizes (the caches' sizes go by powers of
    two), the first point's below it and the last's beyond it.

    >>> curve = ((1 << 10, 60e9), (1 << 20, 80e9), (1 << 30, 20e9))
    >>> [bandwidth_at(curve, n) / 1e9 for n in (1, 1 << 15, 1 << 25, 1 << 40)]
    [60.0, 70.0, 50.0, 20.0]
    """
    n0, r0 = curve[0]
    if nbytes <= n0:
        return r0
    for n1, r1 in curve[1:]:
        if nbytes <= n1:
            return r0 + (r1 - r0) * math.log(nbytes / n0) / math.log(n1 / n0)
        n0, r0 = n1, r1
    return r0


@dataclass(frozen=True)
class Task:
    """A server process: ``/job:<job>/replica:0/task:<index>`` running on ``host``.

    ``step_overhead`` and ``part_overhead`` are the fixed costs of a distributed step
    (seconds, measured by :func:`runtime.calibrate.measure_step_overheads`; 0 by default):
    a step whose master is this task pays ``step_overhead`` before any op runs (the
    client's RunStep call and its reply); a step that runs a part on this task from a
    master on another task pays ``part_overhead`` more for it (the master's RunGraph
    call; the master starts the remote parts one after another, then its own).

    >>> Task("ps", 0, "host0", "127.0.0.1:2221").name
    '/job:ps/replica:0/task:0'
    """

    job: str
    index: int
    host: str
    address: str | None = None
    step_overhead: float = 0.0
    part_overhead: float = 0.0

    @property
    def name(self) -> str:
        return f"/job:{self.job}/replica:0/task:{self.index}"


@dataclass(frozen=True)
class Device:
    """One device of a task, with the figures the cost models and the simulator use.

    ``peak_flops`` is the rate of a single-threaded kernel (one core of a CPU, the whole
    card of a GPU); a multithreaded kernel runs ``intra_op_speedup`` times faster (it is
    a measured or assumed figure, not ``intra_op_threads``).  ``op_overhead`` is the
    fixed launch/dispatch cost of every op.  ``inter_op_threads`` ops run at once.
    ``kernel_costs`` holds calibrated figures per op type, ``{type: (fixed, factor)}``: a
    kernel of that type takes ``fixed`` seconds more (the call, argument checks, the
    output's allocation: what it takes on a tiny input) and its roofline time scaled by
    ``factor`` (how far the kernel is from the device's peak rates); a type it lacks takes
    the entry ``"*"`` if there is one, else ``(0, 1)``.  ``parallel_min_elements``
    (0: none) is where the device's multithreaded kernels switch to their parallel path
    (the largest input or output of at least that many elements): there the entry
    ``"<type>|parallel"`` holds the kernel's cost, if calibrated
    (:meth:`kernel_cost` with ``parallel=True``).  See :class:`core.costs.StaticCostModel`.
    ``dtype_flops`` holds the peak rate per dtype where it differs from ``peak_flops``
    (a GPU's float16 tensor cores, its float64 units), ``{dtype name: FLOP/s}``;
    :meth:`flops_for` reads it, falling back to ``peak_flops``.
    ``bandwidth_curve`` holds measured ``(working set bytes, bytes/s)`` points of one
    kernel's memory rate by the bytes it moves (:func:`runtime.calibrate.
    measure_bandwidth_curve`): a kernel whose arrays fit the caches runs several times
    faster per byte than one that streams from main memory.  :meth:`bandwidth_at` reads
    it (:func:`bandwidth_at`), falling back to ``mem_bandwidth``.

    >>> d = Cluster.single_host().devices[0].replace_kernel_costs({"Add": (2e-6, 1.5)})
    >>> d.kernel_cost("Add"), d.kernel_cost("Mul")
    ((2e-06, 1.5), (0.0, 1.0))
    >>> d = replace(d, dtype_flops={"float16": 1e12})
    >>> d.flops_for("float16"), d.flops_for("float32") == d.peak_flops
    (1000000000000.0, True)
    >>> d = Cluster.single_host(gpus=1).device("/job:localhost/replica:0/task:0/gpu:0")
    >>> d.name, d.task_name, d.spec.device_type
    ('/job:localhost/replica:0/task:0/device:GPU:0', '/job:localhost/replica:0/task:0', 'GPU')
    """

    name: str
    job: str
    task: int
    device_type: str
    index: int
    host: str
    peak_flops: float
    mem_bandwidth: float
    memory_bytes: int
    inter_op_threads: int
    intra_op_threads: int
    intra_op_speedup: float
    op_overhead: float
    kernel_costs: tuple = ()
    parallel_min_elements: int = 0
    dtype_flops: tuple = ()
    bandwidth_curve: tuple = ()

    def __post_init__(self):
        if isinstance(self.device_type, str):  # "gpu" and "GPU" are one type, as in names
            object.__setattr__(self, "device_type", self.device_type.upper())
        items = self.kernel_costs
        try:
            if isinstance(items, Mapping):
                items = [(k, *v) for k, v in items.items()]
            items = tuple(sorted((str(k), fixed, factor) for k, fixed, factor in items))
        except (TypeError, ValueError):
            raise InvalidCluster(f"kernel_costs must map op types to (fixed seconds, roofline "
                                 f"factor), not {self.kernel_costs!r}", self.name) from None
        object.__setattr__(self, "kernel_costs", items)
        rates = self.dtype_flops
        try:
            if isinstance(rates, Mapping):
                rates = rates.items()
            rates = tuple(sorted((str(k), v) for k, v in rates))
        except (TypeError, ValueError):
            raise InvalidCluster(f"dtype_flops must map dtype names to FLOP/s, not "
                                 f"{self.dtype_flops!r}", self.name) from None
        object.__setattr__(self, "dtype_flops", rates)
        object.__setattr__(self, "bandwidth_curve",
                           _curve(self.bandwidth_curve, "bandwidth_curve", self.name))

    def bandwidth_at(self, working_set: float) -> float:
        """The memory rate (bytes/s) of a kernel here that moves ``working_set`` bytes:
        from ``bandwidth_curve``, else ``mem_bandwidth``."""
        if not self.bandwidth_curve:
            return self.mem_bandwidth
        return bandwidth_at(self.bandwidth_curve, working_set)

    def flops_for(self, dtype: "str | None") -> float:
        """The peak FLOP/s of a kernel on ``dtype`` (a dtype name, or anything with a
        ``name``): its ``dtype_flops`` entry, else ``peak_flops``."""
        if dtype is None or not self.dtype_flops:
            return self.peak_flops
        name = getattr(dtype, "name", dtype)
        for key, rate in self.dtype_flops:
            if key == name:
                return rate
        return self.peak_flops

    def kernel_cost(self, op_type: str, parallel: bool = False) -> tuple[float, float]:
        """``(fixed seconds, roofline factor)`` of ``op_type``'s kernel here; with
        ``parallel``, on its parallel path (``"<type>|parallel"``, else as without)."""
        table = self.__dict__.get("_kernel_table")
        if table is None:  # a dict once per device: the cost models ask per op
            table = {k: (fixed, factor) for k, fixed, factor in self.kernel_costs}
            object.__setattr__(self, "_kernel_table", table)
        cost = table.get(op_type + "|parallel") if parallel else None
        if cost is None:
            cost = table.get(op_type)
        return table.get("*", (0.0, 1.0)) if cost is None else cost

    def replace_kernel_costs(self, costs: Mapping[str, tuple]) -> "Device":
        """A copy with ``costs`` merged into ``kernel_costs``."""
        table = {k: (fixed, factor) for k, fixed, factor in self.kernel_costs}
        return replace(self, kernel_costs={**table, **costs})

    @property
    def spec(self) -> DeviceSpec:
        return DeviceSpec(self.job, 0, self.task, self.device_type, self.index)

    @property
    def task_name(self) -> str:
        return f"/job:{self.job}/replica:0/task:{self.task}"

    @property
    def is_cpu(self) -> bool:
        return self.device_type == "CPU"


@dataclass(frozen=True)
class Link:
    """A shared transfer resource; a transfer occupies every link of its route.

    A transfer of ``n`` bytes alone on the link takes ``latency + n / bandwidth``
    seconds, unless ``size_costs`` holds measured ``(bytes, seconds)`` points
    (:func:`runtime.calibrate.calibrate_distributed` writes them for the link between
    processes of a host): then :meth:`time` follows those points, straight between two
    of them, and at the bandwidth past the last.  A runtime moves tensors of different
    sizes by different paths (between the processes of a host: a small one inside a
    socket message, copied three times; a large one through shared memory, copied once),
    so the time is not one straight line over all sizes: on this machine a 64 KiB
    tensor took longer than a 512 KiB one.

    >>> Link("pcie:/job:localhost/replica:0/task:0/device:GPU:0", "pcie", 12e9, 10e-6).kind
    'pcie'

    ``wait`` (0 by default) is the part of the latency that is a wait and holds no link:
    a runtime whose crossings are many RPCs in flight at once (TensorFlow's) keeps the
    link, here the host's CPU that copies and serialises the tensors, only for each
    crossing's own work, and the rest of its latency overlaps other crossings.  The
    simulator starts such a transfer on its links ``wait`` after it was sent and holds
    them for the rest of its time (unless the runtime model dispatches serially, which
    makes the whole latency the ends' work).

    >>> link = Link("memcpy:h", "memcpy", 1e9, 1e-4, size_costs=[(4, 1e-4), (1000, 3e-4)])
    >>> round(link.time(500), 6), round(link.time(2000), 6)
    (0.0002, 0.000301)
    >>> Link("memcpy:h", "memcpy", 1e9, 1e-4, wait=2e-4)
    Traceback (most recent call last):
    ...
    core.cluster.InvalidCluster: invalid cluster: memcpy:h: wait must be between 0 and the latency (0.0001 s), not 0.0002
    """

    name: str
    kind: str
    bandwidth: float
    latency: float
    size_costs: tuple = ()
    wait: float = 0.0

    def __post_init__(self):
        try:
            points = tuple(sorted((int(n), float(t)) for n, t in self.size_costs))
        except (TypeError, ValueError):
            raise InvalidCluster("size_costs must be (bytes, seconds) pairs, not "
                                 f"{self.size_costs!r}", self.name) from None
        object.__setattr__(self, "size_costs", points)
        if not 0 <= self.wait <= self.latency:
            raise InvalidCluster(f"wait must be between 0 and the latency ({self.latency} s), "
                                 f"not {self.wait}", self.name)

    def time(self, nbytes: int) -> float:
        """Seconds to move ``nbytes`` over this link alone."""
        points = self.size_costs
        if not points:
            return self.latency + nbytes / self.bandwidth
        n0, t0 = points[0]
        if nbytes <= n0:
            return t0
        for n1, t1 in points[1:]:
            if nbytes <= n1:
                return t0 + (t1 - t0) * (nbytes - n0) / (n1 - n0)
            n0, t0 = n1, t1
        return t0 + (nbytes - n0) / self.bandwidth

    def fixed_time(self, nbytes: int) -> float:
        """What a transfer of ``nbytes`` takes here beyond its bytes at the bandwidth:
        the latency, or what the measured ``size_costs`` add."""
        if not self.size_costs:
            return self.latency
        return self.time(nbytes) - nbytes / self.bandwidth


def device_sort_key(device: Device) -> tuple:
    """The order of a cluster's devices: job, task, CPU before GPU (before any other
    type), index.  Placers break ties in this order, so it must not depend on input order."""
    type_rank = {"CPU": 0, "GPU": 1}.get(device.device_type, 2)
    return (device.job, device.task, type_rank, device.device_type, device.index)


def memcpy_link_name(host: str) -> str:
    return f"memcpy:{host}"


def network_link_name(host: str) -> str:
    return f"network:{host}"


def pcie_link_name(device_name: str) -> str:
    return f"pcie:{device_name}"


def nvlink_link_name(host: str) -> str:
    return f"nvlink:{host}"


# ======================================================================================
# Default figures for the presets
# ======================================================================================

@dataclass(frozen=True)
class HardwareFigures:
    """The figures the presets give devices and links, until a calibration run measures
    real ones.  Round numbers for a commodity server: one CPU core runs ~50 GFLOP/s,
    memory ~20 GB/s; a GPU ~10 TFLOP/s with 16 GiB at 900 GB/s; PCIe 3 x16 ~12 GB/s;
    host memcpy between processes ~8 GB/s; 10 GbE ~1.25 GB/s.

    A CPU with ``n`` cores gets ``intra_op_speedup = 1 + cpu_parallel_efficiency * (n-1)``
    (1.8 for 2 cores).  ``None`` thread counts mean "the host's cores".
    """

    cpu_flops: float = 50e9
    cpu_mem_bandwidth: float = 20e9
    cpu_op_overhead: float = 5e-6
    cpu_parallel_efficiency: float = 0.8
    cpu_inter_op_threads: int | None = None
    cpu_intra_op_threads: int | None = None
    host_memory_bytes: int = 16 * GiB
    gpu_flops: float = 10e12
    gpu_mem_bandwidth: float = 900e9
    gpu_memory_bytes: int = 16 * GiB
    gpu_op_overhead: float = 10e-6
    # TensorFlow launches all of a GPU's kernels on one compute stream: one at a time.
    gpu_inter_op_threads: int = 1
    gpu_intra_op_threads: int = 1
    pcie_bandwidth: float = 12e9
    pcie_latency: float = 10e-6
    nvlink_bandwidth: float = 50e9
    nvlink_latency: float = 5e-6
    memcpy_bandwidth: float = 8e9
    memcpy_latency: float = 5e-6
    network_bandwidth: float = 1.25e9
    network_latency: float = 50e-6

    def with_(self, **overrides) -> "HardwareFigures":
        """A copy with some figures changed; an unknown name raises TypeError listing them."""
        known = [f.name for f in fields(self)]
        unknown = sorted(set(overrides) - set(known))
        if unknown:
            raise TypeError(f"unknown hardware figure(s) {unknown}; known: {known}")
        return replace(self, **overrides)


DEFAULT_FIGURES = HardwareFigures()


# ======================================================================================
# Cluster
# ======================================================================================

class Cluster:
    """Hosts, tasks, devices and links; immutable, validated when built.

    ``devices`` is kept sorted by :func:`device_sort_key` whatever order it is given in;
    ``hosts`` by name and ``tasks`` by ``(job, index)``.  ``master`` is the ``(job, task)``
    of the session's master; by default the first task of job ``localhost``, else of job
    ``worker``, else the first task.  Link names follow the table in the module docstring.

    >>> cluster = Cluster.single_host(gpus=2, cpu_cores=4)
    >>> [d.name for d in cluster.devices]  # doctest: +NORMALIZE_WHITESPACE
    ['/job:localhost/replica:0/task:0/device:CPU:0',
     '/job:localhost/replica:0/task:0/device:GPU:0',
     '/job:localhost/replica:0/task:0/device:GPU:1']
    >>> cluster.master, cluster.default_device("localhost", 0).device_type
    (('localhost', 0), 'GPU')
    >>> Cluster.from_dict(cluster.to_dict()) == cluster
    True
    """

    def __init__(self, hosts: Iterable[Host], tasks: Iterable[Task], devices: Iterable[Device],
                 links: "Mapping[str, Link] | Iterable[Link]", master=None, nvlink: bool = False,
                 runtime_model: "RuntimeModel | str | None" = None):
        self._hosts = tuple(sorted(hosts, key=lambda h: h.name))
        self._tasks = tuple(sorted(tasks, key=lambda t: (t.job, t.index)))
        self._devices = tuple(sorted(devices, key=device_sort_key))
        link_list = list(links.values()) if isinstance(links, Mapping) else list(links)
        self._links = {link.name: link for link in sorted(link_list, key=lambda l: l.name)}
        self._link_count = len(link_list)  # to catch two links with one name
        self._nvlink = bool(nvlink)
        self._runtime_model = get_runtime_model(runtime_model)
        self._master = tuple(master) if master is not None else _default_master(self._tasks)
        # Lookups; validate() reports the duplicates these would hide.
        self._host_by_name = {h.name: h for h in self._hosts}
        self._task_by_key = {(t.job, t.index): t for t in self._tasks}
        self._device_by_name = {d.name: d for d in self._devices}
        self.validate()

    # -- plain views -------------------------------------------------------------------
    @property
    def hosts(self) -> tuple[Host, ...]:
        return self._hosts

    @property
    def runtime_model(self) -> RuntimeModel:
        """The runtime the cluster's figures describe (:mod:`core.runtime_model`): what
        ``sim.simulate`` predicts by default.  A preset's is :data:`~core.runtime_model.IDEAL`;
        a calibration records the runtime it measured."""
        return self._runtime_model

    def with_runtime_model(self, model: "RuntimeModel | str") -> "Cluster":
        """The same cluster with another runtime model.

        >>> Cluster.single_host().with_runtime_model("interpreter").runtime_model.name
        'interpreter'
        """
        return Cluster(self._hosts, self._tasks, self._devices, self._links, self._master,
                       self._nvlink, model)

    @property
    def tasks(self) -> tuple[Task, ...]:
        return self._tasks

    @property
    def devices(self) -> tuple[Device, ...]:
        return self._devices

    @property
    def links(self) -> dict[str, Link]:
        return dict(self._links)

    @property
    def master(self) -> tuple[str, int]:
        return self._master

    @property
    def nvlink(self) -> bool:
        return self._nvlink

    @property
    def job_names(self) -> list[str]:
        """The jobs, sorted."""
        return sorted({t.job for t in self._tasks})

    # -- lookups -------------------------------------------------------------------------
    def host(self, name: str) -> Host:
        """The host called ``name`` (KeyError if none)."""
        if name not in self._host_by_name:
            raise KeyError(f"unknown host {name!r}; the cluster has {list(self._host_by_name)}")
        return self._host_by_name[name]

    def task(self, job: str, index: int) -> Task:
        """The task ``(job, index)``; :class:`UnknownTask` if none."""
        task = self._task_by_key.get((job, index))
        if task is None:
            raise UnknownTask(job, index, [t.name for t in self._tasks])
        return task

    def device(self, name: "str | DeviceSpec | Device") -> Device:
        """The device a full name denotes, in any spelling (``/job:j/task:0/cpu:0`` and
        ``/job:j/replica:0/task:0/device:CPU:0`` are one device); a missing replica is 0.
        Raises :class:`UnknownDevice` naming it and listing the devices."""
        if isinstance(name, Device):
            name = name.name
        known = list(self._device_by_name)
        try:
            spec = DeviceSpec.from_string(name)
        except InvalidDeviceSpec as e:
            raise UnknownDevice(name, known, str(e)) from None
        if None in (spec.job, spec.task, spec.device_type, spec.device_index):
            raise UnknownDevice(name, known, "not a full device name")
        key = full_name(spec.job, spec.task, spec.device_type, spec.device_index, spec.replica or 0)
        if key not in self._device_by_name:
            raise UnknownDevice(name, known)
        return self._device_by_name[key]

    def devices_of_task(self, job: str, task: int) -> tuple[Device, ...]:
        """The devices of one task, in cluster order (CPU first)."""
        self.task(job, task)  # raises UnknownTask
        return tuple(d for d in self._devices if d.job == job and d.task == task)

    def default_device(self, job: str, task: int) -> Device:
        """GPU:0 of the task if it has one, else its CPU:0 (TensorFlow's default)."""
        devices = {(d.device_type, d.index): d for d in self.devices_of_task(job, task)}
        return devices.get(("GPU", 0)) or devices[("CPU", 0)]

    def host_of(self, device_name: "str | Device") -> Host:
        """The :class:`Host` the device is on."""
        return self._host_by_name[self.device(device_name).host]

    def cluster_spec(self) -> ClusterSpec:
        """The tasks' addresses as a :class:`ClusterSpec`; every task needs an address."""
        missing = [t.name for t in self._tasks if t.address is None]
        if missing:
            raise InvalidCluster("tasks without an address cannot form a cluster spec",
                                 culprit=", ".join(missing))
        jobs: dict[str, dict[int, str]] = {}
        for t in self._tasks:
            jobs.setdefault(t.job, {})[t.index] = t.address
        return ClusterSpec(jobs)

    # -- routes ----------------------------------------------------------------------------
    def route(self, src: "str | Device", dst: "str | Device") -> tuple[Link, ...]:
        """The links a tensor crosses from ``src`` to ``dst``, in order.

        - same device, or two CPUs of one task (one address space): no link;
        - CPU <-> GPU of one task: the GPU's PCIe link;
        - GPU <-> GPU of one task: the host's NVLink with ``nvlink=True``, else both
          GPUs' PCIe links (staged through host memory);
        - two tasks of one host: the host's memcpy link (plus the PCIe of GPU ends);
        - two hosts: the source host's network link then the destination host's
          (plus the PCIe of GPU ends).
        """
        a, b = self.device(src), self.device(dst)
        if a.name == b.name:
            return ()
        names: list[str] = []
        if (a.job, a.task) == (b.job, b.task):
            if not a.is_cpu and not b.is_cpu and self._nvlink:
                names = [nvlink_link_name(a.host)]
            else:
                names = [pcie_link_name(d.name) for d in (a, b) if not d.is_cpu]
        else:
            middle = ([memcpy_link_name(a.host)] if a.host == b.host
                      else [network_link_name(a.host), network_link_name(b.host)])
            names = ([pcie_link_name(a.name)] if not a.is_cpu else []) + middle + \
                    ([pcie_link_name(b.name)] if not b.is_cpu else [])
        return tuple(self._link(name) for name in names)

    def _link(self, name: str) -> Link:
        if name not in self._links:
            raise InvalidCluster("a route needs this link, which the cluster does not have",
                                 culprit=name)
        return self._links[name]

    def _needed_links(self) -> dict[str, str]:
        """Link name -> the device or host that needs it, for every route there can be."""
        needed: dict[str, str] = {}
        for d in self._devices:
            if not d.is_cpu:
                needed[pcie_link_name(d.name)] = d.name
        tasks_per_host: dict[str, int] = {}
        for t in self._tasks:
            tasks_per_host[t.host] = tasks_per_host.get(t.host, 0) + 1
            gpus = [d for d in self._devices if (d.job, d.task) == (t.job, t.index) and not d.is_cpu]
            if self._nvlink and len(gpus) >= 2:
                needed[nvlink_link_name(t.host)] = t.name
        for host, count in tasks_per_host.items():
            if count >= 2:
                needed[memcpy_link_name(host)] = f"host {host}"
            if len(tasks_per_host) >= 2:
                needed[network_link_name(host)] = f"host {host}"
        return needed

    # -- invariants -------------------------------------------------------------------------
    def validate(self) -> None:
        """Raise :class:`InvalidCluster` naming the first culprit of a broken invariant:
        no tasks or devices; duplicate host, task, device, link names or addresses; a
        device on an unknown task or host, or whose name disagrees with its fields; a task
        on an unknown host or without a CPU; non-positive rates, capacities or threads; a
        link of an unknown kind; a link some route needs but the cluster lacks; an unknown
        master."""
        if not self._tasks:
            raise InvalidCluster("the cluster has no tasks")
        if not self._devices:
            raise InvalidCluster("the cluster has no devices")
        _no_duplicates("host", [h.name for h in self._hosts])
        _no_duplicates("task", [t.name for t in self._tasks])
        _no_duplicates("device", [d.name for d in self._devices])
        if self._link_count != len(self._links):
            raise InvalidCluster("two links share one name")
        for h in self._hosts:
            _positive_int(h.name, "cpu_cores", h.cpu_cores)
            _positive_int(h.name, "memory_bytes", h.memory_bytes)
        self._validate_tasks()
        for d in self._devices:
            self._validate_device(d)
        for t in self._tasks:  # after the devices, so that a misnamed CPU is named itself
            if full_name(t.job, t.index, "CPU", 0) not in self._device_by_name:
                raise InvalidCluster("the task has no CPU:0 device", t.name)
        for name, link in self._links.items():
            if link.kind not in LINK_KINDS:
                raise InvalidCluster(f"link kind {link.kind!r} is not one of {LINK_KINDS}", name)
            _positive(name, "bandwidth", link.bandwidth)
            _non_negative(name, "latency", link.latency)
            sizes = [n for n, _ in link.size_costs]
            if len(set(sizes)) != len(sizes):
                raise InvalidCluster(f"size_costs has two points for one size: {sizes}", name)
            for n, t in link.size_costs:
                _non_negative(name, "size_costs bytes", n)
                _non_negative(name, f"size_costs seconds at {n} bytes", t)
        for name, user in self._needed_links().items():
            if name not in self._links:
                raise InvalidCluster(f"link {name!r} is missing; routes of {user} need it",
                                     culprit=name)
        if self._master not in self._task_by_key:
            raise InvalidCluster(f"the master is not a task of the cluster "
                                 f"(tasks: {[t.name for t in self._tasks]})", culprit=self._master)

    def _validate_tasks(self) -> None:
        owner: dict[str, str] = {}
        for t in self._tasks:
            if not isinstance(t.job, str) or not JOB_NAME_RE.match(t.job):
                raise InvalidCluster(f"bad job name {t.job!r}", t.name)
            _non_negative_int(t.name, "index", t.index)
            _non_negative(t.name, "step_overhead", t.step_overhead)
            _non_negative(t.name, "part_overhead", t.part_overhead)
            if t.host not in self._host_by_name:
                raise InvalidCluster(f"the task is on unknown host {t.host!r}", t.name)
            if t.address is not None:
                try:
                    _, port = split_address(t.address)
                except InvalidClusterSpec as e:
                    raise InvalidCluster(e.reason, t.name) from None
                if port != 0 and t.address in owner:
                    raise InvalidCluster(f"address {t.address!r} is used by both "
                                         f"{owner[t.address]} and {t.name}", t.name)
                owner.setdefault(t.address, t.name)

    def _validate_device(self, d: Device) -> None:
        task = self._task_by_key.get((d.job, d.task))
        if task is None:
            raise InvalidCluster("the device is on an unknown task", d.name)
        if d.host not in self._host_by_name:
            raise InvalidCluster(f"the device is on unknown host {d.host!r}", d.name)
        if d.host != task.host:
            raise InvalidCluster(f"the device is on host {d.host!r} but its task is on "
                                 f"{task.host!r}", d.name)
        _non_negative_int(d.name, "index", d.index)
        expected = full_name(d.job, d.task, str(d.device_type), d.index)
        if d.name != expected:
            raise InvalidCluster("the name disagrees with job, task, device_type and index "
                                 f"(expected {expected!r})", d.name)
        for attr in ("peak_flops", "mem_bandwidth"):
            _positive(d.name, attr, getattr(d, attr))
        for attr in ("memory_bytes", "inter_op_threads", "intra_op_threads"):
            _positive_int(d.name, attr, getattr(d, attr))
        if not _is_number(d.intra_op_speedup) or d.intra_op_speedup < 1:
            raise InvalidCluster(f"intra_op_speedup must be >= 1, not {d.intra_op_speedup!r}", d.name)
        _non_negative(d.name, "op_overhead", d.op_overhead)
        _non_negative_int(d.name, "parallel_min_elements", d.parallel_min_elements)
        for op_type, fixed, factor in d.kernel_costs:
            _non_negative(d.name, f"kernel_costs[{op_type!r}] fixed seconds", fixed)
            _positive(d.name, f"kernel_costs[{op_type!r}] factor", factor)
        for dtype, rate in d.dtype_flops:
            _positive(d.name, f"dtype_flops[{dtype!r}]", rate)

    # -- copies with changes ------------------------------------------------------------------
    def replace_device(self, name: "str | Device", **changes) -> "Cluster":
        """A new cluster where one device has some fields changed (validated).

        >>> c = Cluster.single_host().replace_device("/job:localhost/task:0/cpu:0", memory_bytes=1024)
        >>> c.device("/job:localhost/task:0/cpu:0").memory_bytes
        1024
        """
        old = self.device(name)
        devices = [replace(d, **changes) if d.name == old.name else d for d in self._devices]
        return Cluster(self._hosts, self._tasks, devices, self._links, self._master, self._nvlink,
                       self._runtime_model)

    def replace_host(self, name: str, **changes) -> "Cluster":
        """A new cluster where one host has some fields changed (validated).

        >>> c = Cluster.single_host().replace_host("host0", shared_bandwidth=[(1 << 20, 9e10)])
        >>> c.host("host0").shared_bandwidth
        ((1048576, 90000000000.0),)
        """
        old = self.host(name)
        hosts = [replace(h, **changes) if h.name == old.name else h for h in self._hosts]
        return Cluster(hosts, self._tasks, self._devices, self._links, self._master, self._nvlink,
                       self._runtime_model)

    def replace_link(self, name: str, **changes) -> "Cluster":
        """A new cluster where one link has some fields changed (validated)."""
        if name not in self._links:
            raise KeyError(f"unknown link {name!r}; the cluster has {list(self._links)}")
        links = [replace(l, **changes) if l.name == name else l for l in self._links.values()]
        return Cluster(self._hosts, self._tasks, self._devices, links, self._master, self._nvlink,
                       self._runtime_model)

    # -- JSON ---------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        """A JSON-ready dict with a ``"format"`` key; :meth:`from_dict` reads it back."""
        return {
            "format": FORMAT,
            "master": list(self._master),
            "nvlink": self._nvlink,
            "hosts": [asdict(h) for h in self._hosts],
            "tasks": [asdict(t) for t in self._tasks],
            "devices": [{**asdict(d), "kernel_costs": {k: [fixed, factor] for k, fixed, factor
                                                       in d.kernel_costs},
                         "dtype_flops": dict(d.dtype_flops)}
                        for d in self._devices],
            "links": [asdict(l) for l in self._links.values()],
            "runtime_model": self._runtime_model.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Mapping) -> "Cluster":
        """Build and validate a cluster from :meth:`to_dict`'s output; a malformed dict
        raises :class:`InvalidCluster` saying what is wrong and where."""
        if not isinstance(data, Mapping):
            raise InvalidCluster(f"expected a JSON object, got {type(data).__name__}")
        if data.get("format") != FORMAT:
            raise InvalidCluster(f"\"format\" must be {FORMAT!r}, not {data.get('format')!r}")
        keys = {"format", "master", "nvlink", "hosts", "tasks", "devices", "links"}
        optional = {"runtime_model"}  # clusters saved before it was recorded: the ideal one
        if not keys <= set(data) <= keys | optional:
            raise InvalidCluster(f"expected the keys {sorted(keys)}; missing "
                                 f"{sorted(keys - set(data))}, unexpected {sorted(set(data) - keys)}")
        master = data["master"]
        if not (isinstance(master, list) and len(master) == 2 and isinstance(master[0], str)
                and _is_int(master[1])):
            raise InvalidCluster(f"\"master\" must be [job, task], not {master!r}")
        if not isinstance(data["nvlink"], bool):
            raise InvalidCluster(f"\"nvlink\" must be true or false, not {data['nvlink']!r}")
        records = {key: [_record(kind, item, f"{key}[{i}]") for i, item in enumerate(_list(data, key))]
                   for key, kind in (("hosts", Host), ("tasks", Task), ("devices", Device),
                                     ("links", Link))}
        try:
            runtime_model = RuntimeModel.from_dict(data.get("runtime_model", "ideal"))
        except (TypeError, ValueError) as e:
            raise InvalidCluster(f"\"runtime_model\": {e}") from None
        return cls(records["hosts"], records["tasks"], records["devices"], records["links"],
                   master=tuple(master), nvlink=data["nvlink"], runtime_model=runtime_model)

    def save(self, path: "str | os.PathLike") -> None:
        """Write the cluster as JSON (see :meth:`to_dict`)."""
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, path: "str | os.PathLike") -> "Cluster":
        """Read a cluster saved by :meth:`save`; :class:`InvalidCluster` names the path and
        the problem when the file is malformed."""
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise InvalidCluster(f"cannot read a cluster: {e}", path=str(path)) from e
        try:
            return cls.from_dict(data)
        except InvalidCluster as e:
            raise InvalidCluster(e.reason, e.culprit, path=str(path)) from e

    # -- value semantics ------------------------------------------------------------------------
    def _key(self) -> tuple:
        return (self._hosts, self._tasks, self._devices, tuple(self._links.values()),
                self._master, self._nvlink, self._runtime_model)

    def __eq__(self, other) -> bool:
        return isinstance(other, Cluster) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (f"Cluster({len(self._hosts)} hosts, {len(self._tasks)} tasks, "
                f"devices={[d.name for d in self._devices]})")

    # -- presets ----------------------------------------------------------------------------------
    @classmethod
    def single_host(cls, gpus: int = 0, cpu_cores: int = 2, job: str = "localhost", *,
                    nvlink: bool = False, **overrides) -> "Cluster":
        """One task ``/job:<job>/replica:0/task:0`` on host ``host0``, with a CPU and
        ``gpus`` GPUs; figures from :data:`DEFAULT_FIGURES`, changed by ``overrides``
        (names of :class:`HardwareFigures` fields, e.g. ``gpu_memory_bytes=8 * 2**30``).

        >>> [d.name for d in Cluster.single_host(gpus=1).devices]
        ['/job:localhost/replica:0/task:0/device:CPU:0', '/job:localhost/replica:0/task:0/device:GPU:0']
        """
        figures = DEFAULT_FIGURES.with_(**overrides)
        return _build([Task(job, 0, "host0")], {(job, 0): gpus}, cpu_cores, figures, nvlink)

    @classmethod
    def from_spec(cls, cluster_spec: "ClusterSpec | Mapping",
                  gpus_per_task: "int | Mapping[str, int]" = 0, hosts: Mapping | None = None,
                  cpu_cores: int = 2, *, nvlink: bool = False, **overrides) -> "Cluster":
        """One task per ``(job, task)`` of the spec, with its address.

        Each task gets its own host (``host0``, ``host1``, ... in task order) unless
        ``hosts`` maps ``(job, task)`` or ``"job/task"`` to a host name: tasks mapped to
        one host share its ``cpu_cores`` (each task's CPU gets all of them as threads,
        and the simulator charges the host).  ``gpus_per_task`` is an int or a dict
        job -> int (absent jobs: 0).  ``overrides`` change :class:`HardwareFigures`.

        >>> c = Cluster.from_spec({"ps": ["a:1"], "worker": ["b:1", "c:1"]},
        ...                       hosts={("worker", 0): "big", "worker/1": "big"})
        >>> [(t.name, t.host) for t in c.tasks]  # doctest: +NORMALIZE_WHITESPACE
        [('/job:ps/replica:0/task:0', 'host0'), ('/job:worker/replica:0/task:0', 'big'),
         ('/job:worker/replica:0/task:1', 'big')]
        """
        spec = ClusterSpec(cluster_spec)
        figures = DEFAULT_FIGURES.with_(**overrides)
        chosen = _host_choice(spec, hosts or {})
        if not isinstance(gpus_per_task, int):
            for job in gpus_per_task:  # a misspelt job would silently get no GPU
                spec.num_tasks(job)  # raises UnknownTask
        used = set(chosen.values())
        fresh = (f"host{i}" for i in range(len(spec.tasks()) + len(used) + 1)
                 if f"host{i}" not in used)
        tasks, gpus = [], {}
        for job, index in spec.tasks():
            host = chosen.get((job, index)) or next(fresh)
            tasks.append(Task(job, index, host, spec.task_address(job, index)))
            gpus[(job, index)] = (gpus_per_task if isinstance(gpus_per_task, int)
                                  else gpus_per_task.get(job, 0))
        return _build(tasks, gpus, cpu_cores, figures, nvlink)

    @classmethod
    def preset(cls, name: str, hosts: int = 1, gpu_memory_fraction: float | None = None,
               network: str | None = None) -> "Cluster":
        """A real machine with its published figures (``hosts`` of them, joined by
        ``network``); ``gpu_memory_fraction`` keeps that share of each GPU's memory.  See
        :func:`core.presets.build` for the machines, their sources and the errors.

        >>> c = Cluster.preset("dgx-a100", hosts=2)
        >>> len(c.devices), c.devices[1].flops_for("float16") / 1e12
        (18, 312.0)
        """
        from core import presets  # core.presets builds on this module
        return presets.build(name, hosts, gpu_memory_fraction, network)

    @classmethod
    def presets(cls) -> list[str]:
        """The names :meth:`preset` knows, sorted.

        >>> Cluster.presets()
        ['dgx-a100', 'dgx1-v100', 'pcie-1080ti-x4']
        """
        from core import presets
        return presets.names()

    @classmethod
    def this_machine(cls, job: str = "localhost", gpus: int | None = None, **overrides) -> "Cluster":
        """A single-host cluster for the machine this runs on: its usable CPU cores
        (``os.sched_getaffinity``), its memory, and its GPUs (``gpus=None`` detects them
        with numba, imported only here; any failure, or ``CUDA_VISIBLE_DEVICES=""``, means
        none).  Rates are the default figures until a calibration run measures them.

        Detection initialises the CUDA driver in this process; a program that forks
        processes which use CUDA should pass ``gpus`` or detect in a child.
        """
        cores = usable_cpu_cores()
        overrides.setdefault("host_memory_bytes", _memory_bytes())
        return cls.single_host(gpus=_detect_gpu_count() if gpus is None else gpus,
                               cpu_cores=cores, job=job, **overrides)


# ======================================================================================
# Helpers
# ======================================================================================

def _default_master(tasks: tuple[Task, ...]) -> tuple[str, int] | None:
    for job in ("localhost", "worker"):
        for t in tasks:
            if t.job == job:
                return (t.job, t.index)
    return (tasks[0].job, tasks[0].index) if tasks else None


def _host_choice(spec: ClusterSpec, hosts: Mapping) -> dict[tuple[str, int], str]:
    """Normalise the ``hosts`` argument of :meth:`Cluster.from_spec` to (job, task) -> host."""
    chosen = {}
    for key, host in hosts.items():
        if isinstance(key, str) and key.count("/") == 1 and key.split("/")[1].isdigit():
            job, task = key.split("/")[0], int(key.split("/")[1])
        elif isinstance(key, tuple) and len(key) == 2:
            job, task = key
        else:
            raise TypeError(f"a hosts key must be (job, task) or 'job/task', not {key!r}")
        spec.task_address(job, task)  # raises UnknownTask
        chosen[(job, task)] = host
    return chosen


def _build(tasks: list[Task], gpus: Mapping[tuple[str, int], int], cpu_cores: int,
           figures: HardwareFigures, nvlink: bool) -> Cluster:
    """The devices and links of the presets, from the tasks and the figures."""
    f = figures
    host_names = sorted({t.host for t in tasks})
    hosts = [Host(name, cpu_cores, f.host_memory_bytes) for name in host_names]
    devices, links = [], []
    for t in tasks:
        cpu_name = full_name(t.job, t.index, "CPU", 0)
        devices.append(Device(
            cpu_name, t.job, t.index, "CPU", 0, t.host, f.cpu_flops, f.cpu_mem_bandwidth,
            f.host_memory_bytes,
            inter_op_threads=f.cpu_inter_op_threads or cpu_cores,
            intra_op_threads=f.cpu_intra_op_threads or cpu_cores,
            intra_op_speedup=1 + f.cpu_parallel_efficiency * (cpu_cores - 1),
            op_overhead=f.cpu_op_overhead))
        for i in range(gpus.get((t.job, t.index), 0)):
            gpu_name = full_name(t.job, t.index, "GPU", i)
            devices.append(Device(
                gpu_name, t.job, t.index, "GPU", i, t.host, f.gpu_flops, f.gpu_mem_bandwidth,
                f.gpu_memory_bytes, f.gpu_inter_op_threads, f.gpu_intra_op_threads,
                intra_op_speedup=1.0, op_overhead=f.gpu_op_overhead))
            links.append(Link(pcie_link_name(gpu_name), "pcie", f.pcie_bandwidth, f.pcie_latency))
        if nvlink and gpus.get((t.job, t.index), 0) >= 2 and \
                nvlink_link_name(t.host) not in {l.name for l in links}:
            links.append(Link(nvlink_link_name(t.host), "nvlink", f.nvlink_bandwidth, f.nvlink_latency))
    # Every host has host memory and a network card, whether a route uses them or not.
    for name in host_names:
        links.append(Link(memcpy_link_name(name), "memcpy", f.memcpy_bandwidth, f.memcpy_latency))
        links.append(Link(network_link_name(name), "network", f.network_bandwidth, f.network_latency))
    return Cluster(hosts, tasks, devices, links, nvlink=nvlink)


def usable_cpu_cores() -> int:
    """The cores this process may run on (its affinity; all of them where that is not
    known), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def _memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        pass
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return DEFAULT_FIGURES.host_memory_bytes


def _detect_gpu_count() -> int:
    """How many CUDA GPUs this process sees; 0 on any failure."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return 0
    try:
        from numba import cuda  # lazily: core must not import numba at import time
        return len(cuda.gpus) if cuda.is_available() else 0
    except Exception:  # no numba, no driver, no device: all mean "no GPU"
        return 0


def _no_duplicates(what: str, names: list[str]) -> None:
    seen = set()
    for name in names:
        if name in seen:
            raise InvalidCluster(f"two {what}s share this name", name)
        seen.add(name)


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _positive(culprit: str, attr: str, value) -> None:
    # `not value > 0` also rejects NaN.
    if not _is_number(value) or not value > 0 or value == float("inf"):
        raise InvalidCluster(f"{attr} must be a positive number, not {value!r}", culprit)


def _non_negative(culprit: str, attr: str, value) -> None:
    if not _is_number(value) or not value >= 0 or value == float("inf"):
        raise InvalidCluster(f"{attr} must be a non-negative number, not {value!r}", culprit)


def _positive_int(culprit: str, attr: str, value) -> None:
    if not _is_int(value) or value <= 0:
        raise InvalidCluster(f"{attr} must be a positive integer, not {value!r}", culprit)


def _non_negative_int(culprit: str, attr: str, value) -> None:
    if not _is_int(value) or value < 0:
        raise InvalidCluster(f"{attr} must be a non-negative integer, not {value!r}", culprit)


def _list(data: Mapping, key: str) -> list:
    if not isinstance(data[key], list):
        raise InvalidCluster(f"\"{key}\" must be a list, not {type(data[key]).__name__}")
    return data[key]


# Record fields a cluster file may leave out (added after the format's first version).
_ADDED_FIELDS = {"step_overhead", "part_overhead", "kernel_costs", "parallel_min_elements",
                 "size_costs", "dtype_flops", "bandwidth_curve", "shared_bandwidth", "wait"}

# JSON types of the record fields, by their annotation.
_JSON_TYPES = {"str": (str,), "int": (int,), "float": (int, float), "str | None": (str, type(None)),
               "tuple": (dict, tuple, list),
               "bool": (bool,)}


def _record(cls, item, where: str):
    """One Host/Task/Device/Link from its JSON object, checking keys and value types."""
    if not isinstance(item, Mapping):
        raise InvalidCluster(f"{where} must be an object, not {item!r}")
    names = [f.name for f in fields(cls)]
    # Fields added later have defaults: files written before them still load.
    optional = {f.name for f in fields(cls) if f.default is not MISSING and f.name in _ADDED_FIELDS}
    if not set(names) - optional <= set(item) or not set(item) <= set(names):
        missing = sorted(set(names) - optional - set(item))
        unexpected = sorted(set(item) - set(names))
        raise InvalidCluster(f"{where}: expected the keys {names}; missing {missing}, "
                             f"unexpected {unexpected}")
    item = {**{f.name: f.default for f in fields(cls) if f.name in optional}, **item}
    for f in fields(cls):
        value = item[f.name]
        wanted = _JSON_TYPES[f.type]
        if not isinstance(value, wanted) or (isinstance(value, bool) and bool not in wanted):
            raise InvalidCluster(f"{where}.{f.name} must be {f.type}, not {value!r}")
    return cls(**{name: item[name] for name in names})
