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

import statistics
from typing import Iterable, Mapping, Sequence

from core.graph import Operation, Tensor
from core.ops import TensorSpec, nbytes

__all__ = ["CostModel", "StaticCostModel", "MeasuredCostModel", "MissingCost", "tensor_bytes"]


class MissingCost(KeyError):
    """The cost model has no figure for an op on a device (``op``, ``device``)."""

    def __init__(self, op: str, device: str, detail: str = ""):
        self.op, self.device = op, device
        super().__init__(f"the cost model has no figure for op {op!r} on {device}"
                         + (f": {detail}" if detail else ""))

    def __str__(self) -> str:
        return self.args[0]


def tensor_bytes(tensor: Tensor) -> int:
    """Bytes of a tensor; an unknown dimension counts as 1 (estimates only)."""
    shape = tuple(1 if d is None else d for d in tensor.shape)
    return nbytes(TensorSpec(tensor.dtype, shape))


class CostModel:
    """The interface: op time on a device and transfer time over a route of links.

    Subclasses override :meth:`op_time`; :meth:`transfer_time` charges every link's
    latency and the slowest link's bandwidth (a tensor is pipelined through the route).
    """

    def op_time(self, op: Operation, device) -> float:
        """Seconds ``op`` takes on ``device`` (a :class:`core.cluster.Device`)."""
        raise NotImplementedError

    def transfer_time(self, nbytes: int, route: Sequence) -> float:
        """Seconds to move ``nbytes`` over ``route`` (a sequence of links) when alone on it."""
        if not route:
            return 0.0
        return sum(link.latency for link in route) + nbytes / min(link.bandwidth for link in route)

    def tensor_bytes(self, tensor: Tensor) -> int:
        return tensor_bytes(tensor)


class StaticCostModel(CostModel):
    """Roofline estimates from the op table and the device's rates.

    ``time = overhead + max(flops / rate, bytes / memory bandwidth)`` where ``rate`` is
    the device's single-thread ``peak_flops``, times its ``intra_op_speedup`` when the op's
    kernel is multithreaded.  Ops with neither flops nor bytes (``NoOp``, ``Variable``)
    cost the overhead alone.
    """

    def op_time(self, op: Operation, device) -> float:
        op_def = op.op_def
        ins = [t.spec for t in op.inputs]
        outs = [t.spec for t in op.outputs]
        flops = op_def.flops(ins, outs, op.attrs)
        moved = op_def.bytes_read(ins, op.attrs) + op_def.bytes_written(outs, op.attrs)
        rate = device.peak_flops * (device.intra_op_speedup if op_def.multithreaded else 1.0)
        bandwidth = device.mem_bandwidth
        return device.op_overhead + max(flops / rate, moved / bandwidth)


class MeasuredCostModel(CostModel):
    """Op times measured in traces of real runs.

    Built with :meth:`from_traces`: the median duration of each (op name, device) pair.
    An op measured on another device of the same type (``by_type``: (op name, device
    type) -> seconds) takes that time there too, so a profile of one placement predicts
    others on a cluster of alike devices.  An op without a measurement falls back to
    ``fallback`` (another cost model, e.g. a :class:`StaticCostModel` on a calibrated
    cluster) or raises :class:`MissingCost`.

    >>> from core.trace import OpRecord, Trace
    >>> t = Trace(ops=[OpRecord("a", "NoOp", "/job:w/replica:0/task:0/device:CPU:0", 0, 0.0, 2.0)])
    >>> m = MeasuredCostModel.from_traces([t])
    >>> m.by_type
    {('a', 'CPU'): 2.0}
    """

    def __init__(self, times: Mapping[tuple[str, str], float], fallback: CostModel | None = None,
                 by_type: Mapping[tuple[str, str], float] | None = None,
                 dispatch: bool = False):
        self.times = dict(times)
        self.fallback = fallback
        self.by_type = dict(by_type or {})
        # A runtime trace times the kernel call alone; with ``dispatch`` a measured time
        # also pays the device's ``op_overhead`` (the executor's work between kernels).
        self.dispatch = dispatch

    @classmethod
    def from_traces(cls, traces: Iterable, fallback: CostModel | None = None, *,
                    dispatch: bool = False) -> "MeasuredCostModel":
        """Median duration per (op, device), and per (op, device type), over the op
        records of ``traces`` (:class:`core.trace.Trace` objects)."""
        samples: dict[tuple[str, str], list[float]] = {}
        typed: dict[tuple[str, str], list[float]] = {}
        for trace in traces:
            for rec in trace.ops:
                samples.setdefault((rec.op, rec.device), []).append(rec.end - rec.start)
                typed.setdefault((rec.op, _device_type(rec.device)), []).append(rec.end - rec.start)
        return cls({k: statistics.median(v) for k, v in samples.items()}, fallback,
                   {k: statistics.median(v) for k, v in typed.items()}, dispatch)

    def op_time(self, op: Operation, device) -> float:
        t = self.times.get((op.name, device.name))
        if t is None:
            t = self.by_type.get((op.name, device.device_type))
        if t is not None:
            return t + device.op_overhead if self.dispatch else t
        if self.fallback is not None:
            return self.fallback.op_time(op, device)
        raise MissingCost(op.name, device.name, "not measured and no fallback given")


def _device_type(name: str) -> str:
    """``/job:w/replica:0/task:0/device:CPU:0`` -> ``CPU`` (``""`` if it has none)."""
    tail = name.rsplit("/device:", 1)
    return tail[1].rsplit(":", 1)[0].upper() if len(tail) == 2 else ""
