"""The simulator's errors: each names the op and device at fault."""

from __future__ import annotations

from core.cluster import UnknownDevice

__all__ = ["OutOfMemory", "UnknownPlacedDevice", "InvalidCost", "SimulationStalled"]


class OutOfMemory(RuntimeError):
    """An allocation would exceed a device's capacity.

    Attributes: ``op`` (whose outputs, or received copy of ``tensor``, were allocated),
    ``device``, ``requested``, ``in_use`` (bytes held before), ``capacity``, ``time``
    (simulated seconds), ``tensor`` (None for an op's outputs) and ``trace`` (the
    :class:`core.trace.Trace` up to the failure, with the OOM event).
    """

    def __init__(self, op: str, device: str, requested: int, capacity: int, in_use: int = 0,
                 time: float = 0.0, tensor: str | None = None):
        self.op, self.device, self.requested, self.capacity = op, device, requested, capacity
        self.in_use, self.time, self.tensor = in_use, time, tensor
        self.trace = None
        what = f"a received copy of {tensor!r} for op {op!r}" if tensor else f"the outputs of op {op!r}"
        super().__init__(f"out of memory on {device} at t={time:.6g}s: {what} need {requested} "
                         f"bytes, {in_use} of {capacity} are in use")


class UnknownPlacedDevice(UnknownDevice):
    """The placement puts ``op`` on ``device``, which the cluster does not have."""

    def __init__(self, op: str, device: str, known=()):
        self.op = op
        super().__init__(device, known, f"op {op!r} is placed there")


class InvalidCost(ValueError):
    """A cost model gave a negative, infinite or non-numeric time for ``op`` on ``device``."""

    def __init__(self, op: str, device: str, value):
        self.op, self.device, self.value = op, device, value
        super().__init__(f"the cost model gave op {op!r} on {device} the time {value!r}; "
                         "expected a finite number >= 0")


class SimulationStalled(RuntimeError):
    """The event queue ran dry with ops left (a bug in the model, never expected):
    ``waiting`` names them."""

    def __init__(self, waiting: list[str]):
        self.waiting = waiting
        super().__init__(f"the simulation stalled with {len(waiting)} ops never run, e.g. "
                         f"{waiting[:5]}")
