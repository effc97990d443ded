"""Settings of a simulated run, passed explicitly (no globals)."""

from __future__ import annotations

from dataclasses import dataclass

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
    serial_dispatch : each task dispatches one op at a time, as a runtime whose executor
        runs in one Python interpreter does (its GIL): an op's first part, the device's
        ``op_overhead`` plus its kernel type's fixed cost (``Device.kernel_cost``; the
        call into the kernel, made holding the lock), waits for the task's dispatcher
        and holds it; the rest of the op (the kernel's work) runs in parallel.  A
        transfer (or a control edge's message) between tasks costs its route's
        latency as work on the two ends' dispatchers, half each (sending and taking in
        a tensor is Python work on both sides; the latency is the whole crossing, as
        ``runtime.calibrate`` measures it): the sender's dispatcher sends it, then it
        occupies its links for the rest of the cost model's transfer time (the bytes
        over the bandwidth: so crossings pipeline on a link, where a link held for the
        latency too would serialise every small crossing of a host), then the
        receiver's dispatcher takes it in, and only then are its consumers ready.
    dispatch_cores : with ``serial_dispatch``, the dispatchers' work (an op's first part,
        a crossing's ends) also needs one of its host's cores: the interpreters of more
        server processes than a host has cores do not all run at once (three on two
        cores: at most two), nor on a core a kernel holds: a CPU kernel's cores are
        booked too, from the end of its op's first part to its end (one host's CPU is
        shared by its tasks' interpreters and kernels alike).  Kernels themselves wait
        only for each other (``HostCores``).  False (default): every task's dispatcher
        runs whenever it is free.
    copies_on_cores : with ``serial_dispatch``, a crossing between two tasks of one host
        (a route of ``memcpy`` links only) is work of its two ends' dispatchers for its
        whole transfer time, half each, instead of the route's latency there and the
        bytes on the link: the runtime copies a tensor between processes with the
        host's cores (shared memory or a local socket), no DMA engine, so its copying
        competes with the kernels and the other interpreters (with ``dispatch_cores``)
        and a link of the host never carries a byte on its own.  Measured: the server
        processes' CPU time per step (``/proc``) matched the work the model booked only
        with the copies counted.
    step_costs_on_cores : with ``serial_dispatch``, a step's fixed costs (the tasks'
        ``step_overhead`` and ``part_overhead``, :func:`sim.engine.step_start_times`)
        are dispatcher work, not only a delay: the master's dispatcher works from time 0
        until its own part starts (the client's call, then its calls to the other
        tasks), and each called task's dispatcher takes its call during the last
        ``part_overhead`` before its part starts; with ``dispatch_cores`` that work
        needs cores of the host too, so on a busy host the parts start later.  (A tiny
        step over three server processes here: 1.9 ms of CPU for a 1.1 ms step.)
    inline_elements : with ``serial_dispatch``, the thread that finished an op goes on
        with the ops it made ready on its device, as the runtime's executor does: those
        whose every input and output tensor has at most this many elements (cheap ops;
        a ``Variable`` too) and one other; it runs them one after another (the last made
        ready first) and takes the cores its op freed first, while the ops of its task
        waiting for cores wait on (it holds the interpreter's lock, a waiting thread
        wakes later; other tasks' ops take the cores left).  The other ready ops queue
        for the pool; at a part's start one thread runs the cheap ready ops.  None
        (default): every ready op queues for the pool and freed cores go to the waiting
        ops first.

    >>> SimConfig(per_process_gpu_memory_fraction=0.4).record_oom
    False
    """

    per_process_gpu_memory_fraction: float | None = None
    allow_growth: bool = False
    record_oom: bool = False
    inter_op_threads: int | None = None
    intra_op_threads: int | None = None
    link_order: str = "static"
    serial_dispatch: bool = False
    dispatch_cores: bool = False
    copies_on_cores: bool = False
    step_costs_on_cores: bool = False
    inline_elements: int | None = None

    def __post_init__(self):
        f = self.per_process_gpu_memory_fraction
        if f is not None and not 0 < f <= 1:
            raise ValueError(f"per_process_gpu_memory_fraction must be in (0, 1], not {f!r}")
        for name in ("inter_op_threads", "intra_op_threads"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or v < 1):
                raise ValueError(f"{name} must be a positive integer or None, not {v!r}")
        if self.inline_elements is not None and (
                not isinstance(self.inline_elements, int) or self.inline_elements < 0):
            raise ValueError("inline_elements must be a non-negative integer or None, not "
                             f"{self.inline_elements!r}")
        if self.link_order not in LINK_ORDERS:
            raise ValueError(f"link_order must be one of {LINK_ORDERS}, not {self.link_order!r}")
