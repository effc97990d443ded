"""The hardware records of a :class:`core.cluster.Cluster`: hosts (machines), tasks
(server processes), devices (a task's CPU and GPUs, with speed, memory and thread pools)
and links (shared resources a transfer occupies), with the checks that keep each one
valid and the defaults the presets give them.  All times are in seconds, rates in FLOP/s
and bytes/s, sizes in bytes.
"""

from __future__ import annotations

import math
from dataclasses import MISSING, dataclass, fields, replace
from typing import Iterable, Mapping

from core.devices import DeviceSpec
from core.gemm import GemmCosts

__all__ = ["Host", "Task", "Device", "Link", "LINK_KINDS", "InvalidCluster", "UnknownDevice",
           "HardwareFigures", "DEFAULT_FIGURES", "bandwidth_at", "alloc_time_at", "device_sort_key",
           "memcpy_link_name", "network_link_name", "pcie_link_name", "nvlink_link_name"]

LINK_KINDS = ("memcpy", "pcie", "nvlink", "network")
GiB = 1 << 30


# ======================================================================================
# Errors
# ======================================================================================

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


def _pairs(table, attr: str, what: str, culprit: str) -> tuple:
    """``table`` (a mapping, or ``(key, value)`` pairs) as sorted ``(str key, value)``
    pairs; :class:`InvalidCluster` naming ``attr`` when it is neither."""
    try:
        items = table.items() if isinstance(table, Mapping) else table
        return tuple(sorted((str(k), v) for k, v in items))
    except (TypeError, ValueError):
        raise InvalidCluster(f"{attr} must map {what}, not {table!r}", culprit) from None


def _curve(points, what: str, owner: str, unit: str = "bytes/s",
           zero_ok: bool = False) -> tuple:
    """``points`` as a sorted tuple of ``(bytes, value)`` pairs, checked: one point per
    positive size, each value finite and positive (non-negative with ``zero_ok``)."""
    try:
        curve = tuple(sorted((int(n), float(value)) for n, value in points))
    except (TypeError, ValueError):
        raise InvalidCluster(f"{what} must be (bytes, {unit}) pairs, not {points!r}",
                             owner) from None
    sizes = [n for n, _ in curve]
    if len(set(sizes)) != len(sizes):
        raise InvalidCluster(f"{what} has two points for one size: {sizes}", owner)
    for n, value in curve:
        if n <= 0 or not (value >= 0 if zero_ok else value > 0) or value == math.inf:
            raise InvalidCluster(f"{what}: ({n}, {value}) must be positive bytes and a "
                                 f"{'non-negative' if zero_ok else 'positive'} finite "
                                 f"{unit}", owner)
    return curve


def bandwidth_at(curve: tuple, nbytes: float) -> float:
    """The rate of ``curve`` (sorted ``(bytes, bytes/s)`` points) at ``nbytes``: straight
    between two points on a logarithmic axis of sizes (the caches' sizes go by powers of
    two), the first point's below it and the last's beyond it.

    >>> curve = ((1 << 10, 60e9), (1 << 20, 80e9), (1 << 30, 20e9))
    >>> [bandwidth_at(curve, n) / 1e9 for n in (1, 1 << 15, 1 << 25, 1 << 40)]
    [60.0, 70.0, 50.0, 20.0]
    """
    return _on_log_sizes(curve, nbytes)


def alloc_time_at(costs: tuple, nbytes: float) -> float:
    """The seconds of ``costs`` (sorted ``(bytes, seconds)`` points, a device's
    ``alloc_costs``) to allocate a buffer of ``nbytes``, read as :func:`bandwidth_at`
    reads a curve.

    >>> alloc_time_at(((1 << 12, 0.0), (1 << 16, 80e-6)), 1 << 14) * 1e6
    40.0
    """
    return _on_log_sizes(costs, nbytes)


def _on_log_sizes(curve: tuple, nbytes: float) -> float:
    """The value of sorted ``(bytes, value)`` points at ``nbytes``: straight between
    two points on a logarithmic axis of sizes, the first's below and the last's beyond."""
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

    ``lock_wakeup`` (seconds, 0 by default) is how long a thread of this process that
    waits for its interpreter's lock takes to wake once the lock is given up
    (:func:`runtime.calibrate.measure_lock_wakeup`).  A runtime that dispatches from one
    interpreter (``RuntimeModel.serial_dispatch``) hands the lock on only that late: a
    thread back from its kernel while another dispatches gets the lock when the other
    gives it up for longer than that (a longer kernel, or no work left), not at once.

    >>> Task("ps", 0, "host0", "127.0.0.1:2221").name
    '/job:ps/replica:0/task:0'
    """

    job: str
    index: int
    host: str
    address: str | None = None
    step_overhead: float = 0.0
    part_overhead: float = 0.0
    lock_wakeup: float = 0.0

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
    ``window_copy_costs`` is ``(seconds per tap, seconds per element)`` of the kernels
    that gather windows one tap at a time (``OpDef.window_copies``: a convolution's
    im2col), or ``()`` where they cost nothing beyond their roofline (the default).
    ``alloc_costs`` holds measured ``(bytes, seconds)`` points of what allocating a
    kernel's output buffer of that size costs beyond a tiny one's (a GPU's: each output
    is a fresh device allocation, whose cost steps up with its size; measured by
    :func:`runtime.calibrate_gpu.measure_gpu_alloc_costs`), read by
    :func:`alloc_time_at`; ``()``: allocation costs nothing beyond the kernel's fixed
    cost (the default; a CPU's heap keeps freed buffers, :mod:`runtime.allocator`).
    ``warm_kernel_costs`` holds, per op type, the fixed cost of its kernel run right
    after one of its own type, ``{type: seconds}``, where ``kernel_costs`` holds it
    where the calibration graph runs it, dozens of other types after the last one (its
    code and data out of the caches: :mod:`core.kernel_warmth`); a kernel whose device
    ran ``d`` other types since its type's last kernel pays ``fixed - (fixed - warm) *
    (1 - min(d, warm_span) / warm_span)``.  ``()`` (the default): every kernel at its
    fixed cost.
    ``gemm_costs`` holds a CPU's float matrix product by its BLAS's paths, the figures
    of a :class:`core.gemm.GemmCosts` in field order (:meth:`gemm` reads them;
    :func:`runtime.calibrate_gemm.measure_gemm_costs` measures them): where they are
    set, that model's time stands for a float32 ``MatMul``'s roofline (its kernel's
    fixed cost and factor still apply).  ``()`` (the default): the roofline.
    ``products_split`` says whether a big float product (``core.opdef.BLAS_PRODUCTS``)
    splits its work over the intra-op pool (the default, True), as the runtime's kernels
    do unless their process fixed its BLAS at one thread (``OPENBLAS_NUM_THREADS=1``):
    there each product is one gemm call on one core, and takes one core
    (:meth:`core.opdef.OpDef.splits`; the calibration records the process's choice).

    >>> from core.cluster import Cluster
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
    window_copy_costs: tuple = ()
    alloc_costs: tuple = ()
    warm_kernel_costs: tuple = ()
    warm_span: int = 0
    gemm_costs: tuple = ()
    products_split: bool = True

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
        object.__setattr__(self, "dtype_flops", _pairs(self.dtype_flops, "dtype_flops",
                                                       "dtype names to FLOP/s", self.name))
        object.__setattr__(self, "warm_kernel_costs",
                           _pairs(self.warm_kernel_costs, "warm_kernel_costs",
                                  "op types to seconds", self.name))
        object.__setattr__(self, "bandwidth_curve",
                           _curve(self.bandwidth_curve, "bandwidth_curve", self.name))
        copies = tuple(self.window_copy_costs)
        if copies and (len(copies) != 2 or not all(
                isinstance(c, (int, float)) and not isinstance(c, bool) and 0 <= c < math.inf
                for c in copies)):
            raise InvalidCluster(f"window_copy_costs must be () or (seconds per tap, seconds "
                                 f"per element), both finite and non-negative, not "
                                 f"{self.window_copy_costs!r}", self.name)
        object.__setattr__(self, "window_copy_costs", tuple(float(c) for c in copies))
        object.__setattr__(self, "alloc_costs", _curve(self.alloc_costs, "alloc_costs", self.name,
                                                       "seconds", zero_ok=True))
        gemm = self.gemm_costs or None  # a GemmCosts, or its figures (a list from JSON)
        if gemm is not None and not isinstance(gemm, GemmCosts):
            try:
                gemm = GemmCosts.from_tuple(gemm)
            except (TypeError, ValueError) as e:
                raise InvalidCluster(f"gemm_costs: {e}", self.name) from None
        object.__setattr__(self, "gemm_costs", gemm.as_tuple() if gemm else ())

    @property
    def gemm(self) -> "GemmCosts | None":
        """The :class:`core.gemm.GemmCosts` of ``gemm_costs``, or None where unset."""
        if not self.gemm_costs:
            return None
        gemm = self.__dict__.get("_gemm")
        if gemm is None:  # made once per device, as kernel_cost's table: asked per op
            gemm = GemmCosts.from_tuple(self.gemm_costs)
            object.__setattr__(self, "_gemm", gemm)
        return gemm

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

    def warm_kernel_cost(self, op_type: str) -> float | None:
        """The fixed cost of ``op_type``'s kernel right after one of its type
        (``warm_kernel_costs``), or None where it is not known."""
        table = self.__dict__.get("_warm_table")
        if table is None:
            table = dict(self.warm_kernel_costs)
            object.__setattr__(self, "_warm_table", table)
        return table.get(op_type)

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
    them for the rest of its time (unless the runtime model dispatches serially: see
    ``cpu_costs``).

    ``cpu_costs`` (empty by default) holds measured ``(bytes, sent, taken)`` points: the
    CPU seconds the sender's process and the receiver's spend on one crossing of that
    size among many at once (encoding and writing it; reading, decoding and handing it
    on: :func:`runtime.calibrate.measure_crossing_cpu`).  :meth:`crossing_cpu` reads
    them.  A runtime whose ends dispatch serially holds them for that much when
    crossings come in a burst, and the receiver for the rest of a crossing's time when
    it comes alone, to wake its reader
    (:meth:`core.runtime_model.RuntimeModel.crossing_work`).

    >>> link = Link("memcpy:h", "memcpy", 1e9, 1e-4, size_costs=[(4, 1e-4), (1000, 3e-4)],
    ...             cpu_costs=[(4, 2e-5, 4e-5), (1000, 3e-5, 5e-5)])
    >>> [tuple(round(x, 7) for x in link.crossing_cpu(n)) for n in (0, 502, 2000)]
    [(2e-05, 4e-05), (2.5e-05, 4.5e-05), (3.1e-05, 5e-05)]
    >>> Link("memcpy:h", "memcpy", 1e9, 1e-4).crossing_cpu(10) is None
    True

    ``busy_cores`` (0 by default: none) is how many of its host's cores a crossing
    keeps busy while it holds the link: its ends' CPU over its time, where a runtime
    copies, encodes and decodes each tensor with the host's cores at both ends at once
    (TensorFlow's servers: :func:`experiments.tf_calibrate.measure_crossing_cores`).  A
    runtime model with ``crossing_cores`` makes such a crossing hold them, queued with
    the host's kernels (:meth:`core.runtime_model.RuntimeModel.crossing_cores_of`).
    """

    name: str
    kind: str
    bandwidth: float
    latency: float
    size_costs: tuple = ()
    wait: float = 0.0
    cpu_costs: tuple = ()
    busy_cores: float = 0.0

    def __post_init__(self):
        try:
            points = tuple(sorted((int(n), float(t)) for n, t in self.size_costs))
        except (TypeError, ValueError):
            raise InvalidCluster("size_costs must be (bytes, seconds) pairs, not "
                                 f"{self.size_costs!r}", self.name) from None
        object.__setattr__(self, "size_costs", points)
        try:
            cpu = tuple(sorted((int(n), float(s), float(t)) for n, s, t in self.cpu_costs))
        except (TypeError, ValueError):
            raise InvalidCluster("cpu_costs must be (bytes, sent seconds, taken seconds) "
                                 f"triples, not {self.cpu_costs!r}", self.name) from None
        for point in cpu:
            if point[0] < 0 or not all(0 <= t < math.inf for t in point[1:]):
                raise InvalidCluster(f"cpu_costs: {point} must be non-negative bytes and "
                                     "non-negative finite times", self.name)
        if len({n for n, _, _ in cpu}) != len(cpu):
            raise InvalidCluster(f"cpu_costs has two points for one size: {cpu}", self.name)
        object.__setattr__(self, "cpu_costs", cpu)
        if not 0 <= self.busy_cores < math.inf:
            raise InvalidCluster(f"busy_cores must be a non-negative finite number, not "
                                 f"{self.busy_cores!r}", self.name)
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

    def crossing_cpu(self, nbytes: int) -> "tuple[float, float] | None":
        """``(sent, taken)``: the CPU seconds of the sender's and the receiver's process
        for a crossing of ``nbytes`` here in a burst, from ``cpu_costs`` (straight
        between two points; past the last, the sender copies the further bytes at the
        bandwidth); None when they were not measured."""
        points = self.cpu_costs
        if not points:
            return None
        n0, s0, t0 = points[0]
        if nbytes <= n0:
            return s0, t0
        for n1, s1, t1 in points[1:]:
            if nbytes <= n1:
                f = (nbytes - n0) / (n1 - n0)
                return s0 + (s1 - s0) * f, t0 + (t1 - t0) * f
            n0, s0, t0 = n1, s1, t1
        return s0 + (nbytes - n0) / self.bandwidth, t0

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
# Checks
# ======================================================================================

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


# Record fields a cluster file may leave out (added after the format's first version).
_ADDED_FIELDS = {"step_overhead", "part_overhead", "lock_wakeup", "kernel_costs",
                 "parallel_min_elements", "size_costs", "dtype_flops", "bandwidth_curve",
                 "window_copy_costs", "alloc_costs", "warm_kernel_costs", "warm_span",
                 "gemm_costs", "products_split", "shared_bandwidth", "wait", "cpu_costs",
                 "busy_cores"}

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
