"""Cost models: how long an op takes on a device and a tensor takes over a route.

:class:`StaticCostModel` estimates from the op table (a roofline: the slower of compute
and memory traffic, plus a fixed per-op overhead); :class:`MeasuredCostModel` uses the
durations observed in traces of real runs.  Placers and the simulator take a cost model
as an argument; none is global.

>>> from core.ops import TensorSpec
>>> StaticCostModel().transfer_time(1_000_000, ())
0.0
"""

from __future__ import annotations

import copy
import math
import statistics
from typing import Iterable, Mapping, Sequence

from core.gemm import product_dims
from core.graph import Operation, Tensor
from core.hardware import alloc_time_at
from core.opdef import UnknownDimension
from core.ops import TensorSpec, nbytes
from core.shapes import ShapeHints

__all__ = ["CostModel", "StaticCostModel", "MeasuredCostModel", "MissingCost", "tensor_bytes",
           "planning_bytes", "dispatch_gaps", "window_copy_time", "allocation_time",
           "beside_roofline", "on_parallel_path", "kernel_speedup", "ShapeHints",
           "UnknownDimension"]


class MissingCost(KeyError):
    """The cost model has no figure for an op on a device (``op``, ``device``)."""

    def __init__(self, op: str, device: str, detail: str = ""):
        self.op, self.device = op, device
        super().__init__(f"the cost model has no figure for op {op!r} on {device}"
                         + (f": {detail}" if detail else ""))

    def __str__(self) -> str:
        return self.args[0]


def tensor_bytes(tensor: Tensor, shape_hints: ShapeHints | None = None) -> int:
    """Bytes of a tensor, its unknown dimensions taken from ``shape_hints``; raises
    :class:`UnknownDimension` naming the tensor when one is still unknown.

    >>> import core as tf
    >>> g = tf.Graph()
    >>> with g.as_default():
    ...     x = tf.placeholder(tf.float32, [None, 4], name="x")
    >>> tensor_bytes(x, ShapeHints(batch=8))
    128
    """
    if None in tensor.shape:
        if shape_hints is None:
            raise UnknownDimension(tensor.op.name, tensor.name, tensor.shape)
        return nbytes(shape_hints.spec(tensor))
    return nbytes(tensor.spec)


tensor_bytes.by_spec = True  # depends only on (dtype, shape): StepPlan sizes each spec once


def planning_bytes(tensor: Tensor) -> int:
    """Bytes of a tensor for bookkeeping that real sizes replace as a run goes (the
    executor's plan): unknown dimensions count as 0.  Never a cost: costs use
    :func:`tensor_bytes`."""
    n = 1
    for d in tensor.shape:
        n *= 0 if d is None else d
    return n * tensor.dtype.itemsize


planning_bytes.by_spec = True


class CostModel:
    """The interface: op time on a device and transfer time over a route of links.

    Subclasses override :meth:`op_time`; :meth:`transfer_time` charges every link's
    latency and the slowest link's bandwidth (a tensor is pipelined through the route);
    a link with measured ``size_costs`` charges, in place of its latency, what its
    measured time adds to the bytes at its bandwidth (:meth:`core.cluster.Link.fixed_time`).

    ``shape_hints`` (a :class:`core.shapes.ShapeHints`, None by default) states the sizes
    of dimensions unknown until run time; a figure that needs one that no hint states
    raises :class:`UnknownDimension` naming the op and the tensor.
    """

    shape_hints: ShapeHints | None = None

    def with_shape_hints(self, shape_hints: ShapeHints | Mapping | int | None) -> "CostModel":
        """A copy of this model with ``shape_hints`` (a :class:`ShapeHints`, a mapping
        tensor -> shape, or an int: the batch).

        >>> StaticCostModel().with_shape_hints(32).shape_hints
        ShapeHints(shapes={}, batch=32)
        """
        if isinstance(shape_hints, int):
            shape_hints = ShapeHints(batch=shape_hints)
        elif shape_hints is not None and not isinstance(shape_hints, ShapeHints):
            shape_hints = ShapeHints(shape_hints)
        model = copy.copy(self)
        model.shape_hints = shape_hints
        return model

    def specs(self, tensors: Sequence[Tensor]) -> list[TensorSpec]:
        """The tensors' specs with the hinted sizes (dimensions no hint states stay
        unknown; :func:`core.opdef.known_shape` raises when a figure needs them)."""
        hints = self.shape_hints
        out = []
        for t in tensors:
            if hints is None or None not in t.shape:
                out.append(t.spec)
            else:
                out.append(hints.specs(t.graph).get(t.name, t.spec))
        return out

    def op_time(self, op: Operation, device) -> float:
        """Seconds ``op`` takes on ``device`` (a :class:`core.cluster.Device`)."""
        raise NotImplementedError

    def memory_traffic(self, op: Operation, device) -> tuple[int, float]:
        """``(bytes, seconds)``: the bytes ``op`` moves through its device's memory and
        the part of :meth:`op_time` that moving them takes; ``(0, 0.0)`` (the default)
        when the model cannot tell, and then kernels at once never slow it."""
        return 0, 0.0

    def copy_time(self, op: Operation, device) -> float:
        """Seconds ``op``, one that ``OpDef.forwards_input`` marks (an Identity, a
        Reshape), takes on ``device`` where its kernel copies its input rather than
        handing the buffer on (:attr:`core.runtime_model.RuntimeModel.
        copies_forwarding_ops`).  By default :meth:`op_time`: a model that measured the
        op has its time whatever the kernel did."""
        return self.op_time(op, device)

    def copy_traffic(self, op: Operation, device) -> tuple[int, float]:
        """:meth:`memory_traffic` of such an op where its kernel copies its input
        (by default the same)."""
        return self.memory_traffic(op, device)

    def transfer_time(self, nbytes: int, route: Sequence) -> float:
        """Seconds to move ``nbytes`` over ``route`` (a sequence of links) when alone on it."""
        if not route:
            return 0.0
        return (sum(link.fixed_time(nbytes) for link in route)
                + nbytes / min(link.bandwidth for link in route))

    def tensor_bytes(self, tensor: Tensor) -> int:
        """Bytes of ``tensor`` with this model's :attr:`shape_hints`."""
        return tensor_bytes(tensor, self.shape_hints)


class StaticCostModel(CostModel):
    """Roofline estimates from the op table and the device's rates.

    ``time = op_overhead + fixed + factor * (flops / rate + bytes / memory bandwidth)``:
    the arithmetic and the bytes moved add up rather than overlap (a roofline's
    ``max``), because on a CPU they mostly do not overlap: a BLAS gemm packs its
    operands and writes its result in passes of their own, so a product whose weights
    are large beside its batch, ``[32, 1024] @ [1024, 1024]``, ran at 64% of a square
    product's rate per flop on this machine (a ``max`` predicts it at the square's);
    for elementwise ops the bytes dominate either way.  ``rate`` is the device's
    single-thread peak rate for the op's dtype (:meth:`core.cluster.Device.flops_for`:
    its ``dtype_flops`` entry, else ``peak_flops``) times its ``intra_op_speedup``
    when the op's kernel is multithreaded, ``memory bandwidth`` the device's rate for
    a kernel moving that many bytes (:meth:`core.cluster.Device.bandwidth_at`: its
    measured curve over working sets, else ``mem_bandwidth``), and ``(fixed, factor)``
    is the device's calibrated cost of the op type's kernel
    (:meth:`core.cluster.Device.kernel_cost`; ``(0, 1)`` when not calibrated), on its
    parallel path when the kernel is multithreaded, the device has more than one
    intra-op thread and the op's largest tensor has at least the device's
    ``parallel_min_elements`` (a second regime: waking the kernel's thread team costs
    what a serial loop does not).  A kernel that gathers windows one tap at a time (a
    convolution's im2col) also pays its device's price of the copies, beside the
    roofline (:func:`window_copy_time`), and a kernel on a device that prices its
    outputs' allocation pays that (:func:`allocation_time`).  Ops with neither flops nor bytes (``NoOp``,
    ``Variable``) cost the overheads alone, and so do ops that forward their input's
    buffer as their output (``OpDef.forwards_input``: ``Identity``, ``Reshape``, a
    variable's read), which move no bytes.
    """

    def __init__(self, shape_hints: ShapeHints | None = None):
        self.shape_hints = shape_hints

    def op_time(self, op: Operation, device) -> float:
        return self._parts(op, device)[0]

    def memory_traffic(self, op: Operation, device) -> tuple[int, float]:
        """``(bytes, seconds)``: what ``op`` moves through memory, and the part of its
        time spent moving it (its roofline's bytes term, times the kernel's factor).
        The simulator stretches that part when kernels at once share a host's memory
        (:attr:`core.cluster.Host.shared_bandwidth`)."""
        _, seconds, moved = self._parts(op, device)
        return moved, seconds

    def copy_time(self, op: Operation, device) -> float:
        """The op's time as a kernel that reads its input and writes it out again: its
        bytes' roofline, as any kernel's, instead of the overheads alone.

        >>> import core as tf
        >>> from core.cluster import Cluster
        >>> g = tf.Graph()
        >>> with g.as_default():
        ...     y = tf.identity(tf.zeros([1024, 1024]), name="y")
        >>> cpu, model = Cluster.single_host().devices[0], StaticCostModel()
        >>> model.copy_time(y.op, cpu) > model.op_time(y.op, cpu)
        True
        """
        return self._parts(op, device, copies=True)[0]

    def copy_traffic(self, op: Operation, device) -> tuple[int, float]:
        _, seconds, moved = self._parts(op, device, copies=True)
        return moved, seconds

    def _parts(self, op: Operation, device, copies: bool = False) -> tuple[float, float, int]:
        """``(time, memory seconds, bytes moved)`` of ``op`` on ``device`` (``copies``:
        an op that forwards its input copies it instead, see :meth:`copy_time`)."""
        op_def = op.op_def
        ins, outs = self.specs(op.inputs), self.specs(op.outputs)
        try:
            if op_def.forwards_input and not copies:  # its output is its input's buffer
                flops = moved = 0
            else:
                flops = op_def.flops(ins, outs, op.attrs)
                moved = op_def.bytes_read(ins, op.attrs) + op_def.bytes_written(outs, op.attrs)
        except UnknownDimension as e:
            unknown = [t for t, s in zip(op.inputs + op.outputs, ins + outs) if None in s.shape]
            raise UnknownDimension(op.name, unknown[0].name if unknown else None,
                                   unknown[0].shape if unknown else e.shape) from None
        peak = device.flops_for(op_def.kernel_dtype(ins, outs)) if device.dtype_flops else device.peak_flops
        speedup = kernel_speedup(op_def, ins, outs, op.attrs, device)
        memory = moved / device.bandwidth_at(moved)
        roofline = flops / (peak * speedup) + memory
        product = gemm_parts(op_def, ins, op.attrs, device.gemm) if device.gemm else None
        if product is not None:  # the BLAS's paths, measured, instead of a roofline
            roofline, memory = product[0] / speedup, product[1] / speedup
        beside = beside_roofline(op_def, ins, outs, op.attrs, device, copies)
        if device.kernel_costs:
            fixed, factor = device.kernel_cost(
                op.type, on_parallel_path(op_def, ins, outs, op.attrs, device))
            return (device.op_overhead + fixed + beside + factor * roofline, factor * memory,
                    moved)
        return device.op_overhead + beside + roofline, memory, moved


def gemm_parts(op_def, ins, attrs, gemm) -> tuple[float, float] | None:
    """``(seconds, memory seconds)`` of a float ``MatMul`` on one core by ``gemm`` (a
    device's :class:`core.gemm.GemmCosts`), beside its fixed cost; None for any other op
    (and for a product of another dtype or rank than the figures were measured on).

    >>> from core.gemm import GemmCosts
    >>> from core.ops import get_op_def
    >>> from core.dtypes import float32
    >>> gemm = GemmCosts(1e6, 1e11, 0, 1e11, 3e-10, 1e-10)
    >>> a, b = TensorSpec(float32, (16, 128)), TensorSpec(float32, (512, 128))
    >>> [round(x * 1e6, 2) for x in gemm_parts(get_op_def("MatMul"), [a, b],
    ...                                        {"transpose_b": True}, gemm)]
    [41.45, 20.48]
    """
    if op_def.type != "MatMul" or len(ins) != 2:
        return None
    a, b = ins
    if (len(a.shape) != 2 or len(b.shape) != 2 or a.dtype.name not in _BLAS_DTYPES
            or b.dtype != a.dtype):
        return None
    m, k, n = product_dims(a.shape, b.shape, attrs)
    transposed = bool(attrs.get("transpose_b"))
    return gemm.seconds(m, k, n, transposed), gemm.memory_seconds(m, k, n, transposed)


#: The dtypes whose products :class:`core.gemm.GemmCosts` was measured on (a float64
#: product runs at another rate: the roofline's, on the device's ``dtype_flops``).
_BLAS_DTYPES = ("float32",)


def beside_roofline(op_def, ins, outs, attrs, device, copies: bool = False) -> float:
    """Seconds :class:`StaticCostModel` adds to a kernel's time beside its roofline,
    unscaled by the kernel's calibrated factor: its window gathering
    (:func:`window_copy_time`, over the device's ``intra_op_speedup`` for a
    multithreaded kernel) and its outputs' allocation (:func:`allocation_time`; with
    ``copies``, an op that forwards its input allocates the copy its kernel makes).  The
    kernel calibration takes the same out of a measured time before it fits the fixed
    cost and the factor (:func:`runtime.calibrate_kernels.kernel_costs_from_traces`)."""
    copying = window_copy_time(op_def, ins, outs, attrs, device)
    if copying:  # (most ops gather nothing: no speed-up to work out)
        copying /= kernel_speedup(op_def, ins, outs, attrs, device)
    return copying + allocation_time(op_def, outs, device, copies)


def on_parallel_path(op_def, ins, outs, attrs, device) -> bool:
    """Whether the op's kernel runs on its parallel path on ``device``, priced by the
    ``"<type>|parallel"`` entry of its kernel costs: a multithreaded kernel on a CPU
    with more than one intra-op thread that knows where its kernels split
    (``parallel_min_elements`` set), on tensors where it splits
    (:meth:`core.opdef.OpDef.splits`: the rule the executor and the simulator give an
    op its cores by, so that the price and the cores agree).

    >>> from dataclasses import replace
    >>> from core.cluster import Cluster
    >>> from core.ops import get_op_def
    >>> from core.dtypes import float32
    >>> cpu = replace(Cluster.single_host().devices[0], intra_op_threads=2,
    ...               parallel_min_elements=1 << 21)
    >>> mm, s = get_op_def("MatMul"), TensorSpec(float32, (512, 512))
    >>> on_parallel_path(mm, [s, s], [s], {}, cpu)
    True
    >>> on_parallel_path(mm, [s, s], [s], {}, replace(cpu, products_split=False))
    False
    """
    return (op_def.multithreaded and device.is_cpu and device.parallel_min_elements > 0
            and device.intra_op_threads > 1
            and op_def.splits(ins, outs, attrs, device.parallel_min_elements,
                              device.products_split))


def kernel_speedup(op_def, ins, outs, attrs, device) -> float:
    """How many times faster than on one thread the op's kernel runs on ``device``: its
    ``intra_op_speedup`` where the kernel spreads its work over the intra-op threads,
    else 1.  A multithreaded kernel spreads it on tensors where it splits
    (:meth:`core.opdef.OpDef.splits` at the device's ``parallel_min_elements``, as the
    executor and the simulator decide its cores: on a device that knows its kernels'
    thresholds, ``parallel_min_elements`` set, a float ``MatMul`` splits from two blocks
    of :data:`core.gemm.MIN_ROWS_PER_BLOCK` rows).  Otherwise the kernel runs on one
    thread: with the speed-up on every multithreaded kernel, a CPU whose products split
    1.85x faster fitted MatMul's factor at 1.71 to make up for its few-rows products,
    which run on one.

    >>> from core.cluster import Cluster
    >>> from core.ops import get_op_def
    >>> from core.dtypes import float32
    >>> from dataclasses import replace
    >>> cpu = replace(Cluster.single_host().devices[0], intra_op_threads=2,
    ...               intra_op_speedup=1.8, parallel_min_elements=1 << 21)
    >>> mm = get_op_def("MatMul")
    >>> def speedup(m, k, n):
    ...     a, b, y = TensorSpec(float32, (m, k)), TensorSpec(float32, (k, n)), TensorSpec(float32, (m, n))
    ...     return kernel_speedup(mm, [a, b], [y], {}, cpu)
    >>> speedup(512, 512, 512), speedup(64, 2048, 512), speedup(128, 128, 128)
    (1.8, 1.0, 1.0)
    >>> cpu = replace(cpu, intra_op_threads=1)   # one thread: nothing to split over
    >>> speedup(512, 512, 512)
    1.0
    """
    if not op_def.multithreaded or device.intra_op_speedup == 1.0 or device.intra_op_threads < 2:
        return 1.0
    if not op_def.splits(ins, outs, attrs, device.parallel_min_elements, device.products_split):
        return 1.0
    return device.intra_op_speedup


def window_copy_time(op_def, ins, outs, attrs, device) -> float:
    """Seconds the kernel of an op spends gathering windows one tap at a time
    (``op_def.window_copies`` priced by ``device.window_copy_costs``; 0 for ops and
    devices without them), on one thread.  Beside the roofline, not scaled by the
    kernel's factor: a tap of a few channels costs its loop's work, not its bytes, so
    the first convolution of a network (three input channels) ran several times its
    roofline.

    >>> from dataclasses import replace
    >>> from core.cluster import Cluster
    >>> from core.ops import TensorSpec, get_op_def
    >>> from core.dtypes import float32
    >>> conv = get_op_def("Conv2D")
    >>> x, f = TensorSpec(float32, (1, 8, 8, 3)), TensorSpec(float32, (3, 3, 3, 4))
    >>> y = conv.infer([x, f], {"strides": [1, 1, 1, 1], "padding": "SAME"})
    >>> dev = replace(Cluster.single_host().devices[0], window_copy_costs=(1e-9, 1e-10))
    >>> round(window_copy_time(conv, [x, f], y, {"strides": [1, 1, 1, 1]}, dev) * 1e9, 1)
    748.8
    >>> conv.window_copies([x, f], y, {"strides": [1, 1, 1, 1]})   # 8 * 8 pixels, 9 taps each
    (576, 1728)
    """
    costs = device.window_copy_costs
    if not costs or op_def.window_copies is None:
        return 0.0
    taps, elements = op_def.window_copies(ins, outs, attrs)
    return taps * costs[0] + elements * costs[1]


def allocation_time(op_def, outs, device, copies: bool = False) -> float:
    """Seconds a kernel spends allocating its outputs beyond what tiny outputs cost
    (``device.alloc_costs`` at each output's bytes; 0 for devices without them and for
    ops that forward their input's buffer, unless ``copies``: a runtime whose kernel
    copies it, :meth:`StaticCostModel.copy_time`).  Beside the roofline, not scaled by the
    kernel's factor: on a GPU an output of 4 MiB cost about 100 us more to allocate
    than a small one, whatever the kernel did with it.

    >>> from dataclasses import replace
    >>> from core.cluster import Cluster
    >>> from core.ops import get_op_def
    >>> from core.dtypes import float32
    >>> dev = replace(Cluster.single_host(gpus=1).devices[1],
    ...               alloc_costs=((1 << 12, 0.0), (1 << 16, 1e-4)))
    >>> out = TensorSpec(float32, (128, 128))              # 64 KiB
    >>> allocation_time(get_op_def("Add"), [out], dev), allocation_time(get_op_def("Identity"), [out], dev)
    (0.0001, 0.0)
    """
    costs = device.alloc_costs
    if not costs or (op_def.forwards_input and not copies):
        return 0.0
    return sum(alloc_time_at(costs, spec.dtype.itemsize * math.prod(
        1 if d is None else d for d in spec.shape)) for spec in outs)


class MeasuredCostModel(CostModel):
    """Op times measured in traces of real runs.

    Built with :meth:`from_traces`: the median duration of each (op name, device) pair.
    An op measured on another device of the same type (``by_type``: (op name, device
    type) -> seconds) takes that time there too, so a profile of one placement predicts
    others on a cluster of alike devices.  An op without a measurement falls back to
    ``fallback`` (another cost model, e.g. a :class:`StaticCostModel` on a calibrated
    cluster) or raises :class:`MissingCost`.

    A runtime trace times the kernel call alone.  With ``dispatch`` a measured time also
    pays the work of the executor between kernels: the device's measured
    ``overheads`` (device name -> seconds, see :func:`dispatch_gaps`; by device type for
    a device the traces did not use), else the device's ``op_overhead``.
    :meth:`with_overheads` puts the measured figures into a cluster, where the simulator
    reads them (its serial dispatch charges each op's overhead to its task's one Python
    dispatcher).

    >>> from core.trace import OpRecord, Trace
    >>> t = Trace(ops=[OpRecord("a", "NoOp", "/job:w/replica:0/task:0/device:CPU:0", 0, 0.0, 2.0)])
    >>> m = MeasuredCostModel.from_traces([t])
    >>> m.by_type
    {('a', 'CPU'): 2.0}
    """

    def __init__(self, times: Mapping[tuple[str, str], float], fallback: CostModel | None = None,
                 by_type: Mapping[tuple[str, str], float] | None = None,
                 dispatch: bool = False, overheads: Mapping[str, float] | None = None,
                 shape_hints: ShapeHints | None = None):
        self.shape_hints = shape_hints if shape_hints is not None else getattr(
            fallback, "shape_hints", None)
        self.times = dict(times)
        self.fallback = fallback
        self.by_type = dict(by_type or {})
        self.dispatch = dispatch
        self.overheads = dict(overheads or {})

    @classmethod
    def from_traces(cls, traces: Iterable, fallback: CostModel | None = None, *,
                    dispatch: bool = False, graph=None,
                    statistic=statistics.median) -> "MeasuredCostModel":
        """The ``statistic`` (median by default; ``min`` for the undisturbed time on a
        shared machine) of the durations per (op, device), and per (op, device type),
        over the op records of ``traces`` (:class:`core.trace.Trace` objects).  With
        ``dispatch``, also each device's dispatch overhead (:func:`dispatch_gaps`;
        ``graph``, the traced graph, lets it keep only the gaps before ops that were
        already ready)."""
        traces = list(traces)
        samples: dict[tuple[str, str], list[float]] = {}
        typed: dict[tuple[str, str], list[float]] = {}
        for trace in traces:
            for rec in trace.ops:
                samples.setdefault((rec.op, rec.device), []).append(rec.end - rec.start)
                typed.setdefault((rec.op, _device_type(rec.device)), []).append(rec.end - rec.start)
        overheads = dispatch_gaps(traces, graph) if dispatch else {}
        return cls({k: statistic(v) for k, v in samples.items()}, fallback,
                   {k: statistic(v) for k, v in typed.items()}, dispatch, overheads)

    def overhead(self, device) -> float:
        """The dispatch overhead this model charges per op on ``device``."""
        t = self.overheads.get(device.name)
        if t is None:
            t = self.overheads.get(device.device_type, device.op_overhead)
        return t

    def with_overheads(self, cluster):
        """``cluster`` with every device's ``op_overhead`` set to :meth:`overhead` (the
        cluster itself when the model has no measured overheads)."""
        if not (self.dispatch and self.overheads):
            return cluster
        for device in cluster.devices:
            cluster = cluster.replace_device(device.name, op_overhead=self.overhead(device))
        return cluster

    def op_time(self, op: Operation, device) -> float:
        t = self.times.get((op.name, device.name))
        if t is None:
            t = self.by_type.get((op.name, device.device_type))
        if t is not None:
            return t + self.overhead(device) if self.dispatch else t
        if self.fallback is not None:
            return self.fallback.op_time(op, device)
        raise MissingCost(op.name, device.name, "not measured and no fallback given")


def dispatch_gaps(traces: Iterable, graph=None) -> dict[str, float]:
    """Per device (and per device type), the median time from one kernel's end to the
    next kernel's start on the same executor thread: what the executor spends between
    kernels (storing outputs, counting dependencies, handing ready ops out, gathering
    inputs).  With ``graph``, only the gaps before an op that was ready when the previous
    one ended count (its data and control inputs had finished, or arrived from another
    device, by then), so that waiting for work is not taken for overhead.

    >>> from core.trace import OpRecord, Trace
    >>> cpu = "/job:w/replica:0/task:0/device:CPU:0"
    >>> t = Trace(ops=[OpRecord("a", "NoOp", cpu, 0, 0.0, 1.0), OpRecord("b", "NoOp", cpu, 0, 1.5, 2.0),
    ...                OpRecord("c", "NoOp", cpu, 0, 2.5, 3.0)])
    >>> dispatch_gaps([t])
    {'/job:w/replica:0/task:0/device:CPU:0': 0.5, 'CPU': 0.5}
    """
    gaps: dict[str, list[float]] = {}
    for trace in traces:
        ready = _ready_times(trace, graph) if graph is not None else None
        threads: dict[tuple, list] = {}
        for rec in trace.ops:
            threads.setdefault((rec.device, rec.thread), []).append(rec)
        for (device, _), recs in threads.items():
            recs.sort(key=lambda r: r.start)
            for a, b in zip(recs, recs[1:]):
                if ready is not None and ready.get(b.op, float("inf")) > a.end:
                    continue
                gaps.setdefault(device, []).append(max(0.0, b.start - a.end))
    out = {device: statistics.median(v) for device, v in gaps.items()}
    typed: dict[str, list[float]] = {}
    for device, v in gaps.items():
        typed.setdefault(_device_type(device), []).extend(v)
    out.update({kind: statistics.median(v) for kind, v in typed.items()})
    return out


def _ready_times(trace, graph) -> dict[str, float]:
    """When each traced op's last input was available on its device: a producer's end on
    the same device, or the arrival of the tensor's transfer to it."""
    end = {rec.op: rec.end for rec in trace.ops}
    device = {rec.op: rec.device for rec in trace.ops}
    arrival = {(x.tensor, x.dst): x.end for x in trace.transfers}
    ready = {}
    for rec in trace.ops:
        try:
            op = graph.get_operation_by_name(rec.op)
        except (KeyError, ValueError):
            continue
        t = 0.0
        for tensor in op.inputs:
            src = tensor.op.name
            if src not in end:
                continue
            when = end[src] if device[src] == rec.device else arrival.get((tensor.name, rec.device), end[src])
            t = max(t, when)
        for c in op.control_inputs:
            t = max(t, end.get(c.name, 0.0))
        ready[rec.op] = t
    return ready


def _device_type(name: str) -> str:
    """``/job:w/replica:0/task:0/device:CPU:0`` -> ``CPU`` (``""`` if it has none)."""
    tail = name.rsplit("/device:", 1)
    return tail[1].rsplit(":", 1)[0].upper() if len(tail) == 2 else ""
