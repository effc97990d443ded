"""Settings of a simulated run, passed explicitly (no globals)."""

from __future__ import annotations

from dataclasses import dataclass

from core.runtime_model import RuntimeModel, get_runtime_model

__all__ = ["SimConfig", "LINK_ORDERS"]

LINK_ORDERS = ("static", "ready")


@dataclass(frozen=True)
class SimConfig:
    """How :func:`sim.simulate` runs a step.

    Attributes
    ----------
    per_process_gpu_memory_fraction : cap every GPU's capacity at this fraction of its
        memory, as TensorFlow's ``GPUOptions`` does (None: the whole card).
    allow_growth : accepted for symmetry with ``GPUOptions``; it changes when a real
        process reserves memory, not what a step needs, so the model ignores it.
    record_oom : when an allocation would exceed a device's capacity, record an
        :class:`core.trace.OOMEvent` and go on instead of raising :class:`sim.OutOfMemory`.
    inter_op_threads, intra_op_threads : override every device's pool sizes (None: the
        cluster's).  A new intra-op size rescales ``intra_op_speedup`` by Amdahl's law
        (see :mod:`sim.pools`).
    link_order : the order in which a link serves the transfers that wait for it.
        ``"static"`` (default): one fixed order for the whole step, by the time each
        tensor would be ready if ops never waited for threads or transfers, then by
        transfer index; a link may wait for an earlier-ordered tensor that is late.
        Step times are then monotone in every link's bandwidth (see :mod:`sim.links`).
        ``"ready"``: first come, first served by (ready time, transfer index); never idle
        while a ready transfer waits, but faster links can make a step slower.
    runtime : the runtime the step is predicted for, a :class:`core.runtime_model.
        RuntimeModel` or its name (``"ideal"``, ``"interpreter"``); None (default): the
        cluster's own (``Cluster.runtime_model``: the runtime it was calibrated for, the
        ideal one for a preset).

    >>> SimConfig(per_process_gpu_memory_fraction=0.4).record_oom
    False
    >>> SimConfig(runtime="interpreter").runtime.serial_dispatch
    True
    """

    per_process_gpu_memory_fraction: float | None = None
    allow_growth: bool = False
    record_oom: bool = False
    inter_op_threads: int | None = None
    intra_op_threads: int | None = None
    link_order: str = "static"
    runtime: "RuntimeModel | str | None" = None

    def __post_init__(self):
        f = self.per_process_gpu_memory_fraction
        if f is not None and not 0 < f <= 1:
            raise ValueError(f"per_process_gpu_memory_fraction must be in (0, 1], not {f!r}")
        for name in ("inter_op_threads", "intra_op_threads"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or v < 1):
                raise ValueError(f"{name} must be a positive integer or None, not {v!r}")
        if self.runtime is not None:
            object.__setattr__(self, "runtime", get_runtime_model(self.runtime))
        if self.link_order not in LINK_ORDERS:
            raise ValueError(f"link_order must be one of {LINK_ORDERS}, not {self.link_order!r}")
