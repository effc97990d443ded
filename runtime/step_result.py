"""What one run of a task's part of a step produced (:class:`StepResult`) and its trace
records, made from what the executor noted while the step ran (:func:`add_records`).

>>> r = StepResult({"y:0": 1.0}, start=10.0, end=10.5)
>>> r.step_time, r.to_trace().ops
(0.5, [])
"""

from __future__ import annotations

from dataclasses import dataclass, field

from core.trace import MemoryRecord, OOMEvent, OpRecord, Trace

__all__ = ["StepResult", "add_records"]


@dataclass
class StepResult:
    """What one :meth:`runtime.executor.Executor.run_step` produced (see that module's
    contract, item 7)."""

    values: dict
    ops: list = field(default_factory=list)
    transfers: list = field(default_factory=list)
    memory: list = field(default_factory=list)
    oom: list = field(default_factory=list)
    start: float = 0.0
    end: float = 0.0
    sent: list = field(default_factory=list)
    capacity: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)

    @property
    def step_time(self) -> float:
        return self.end - self.start

    def to_trace(self, origin: float | None = None) -> Trace:
        """A :class:`core.trace.Trace` with times shifted so ``origin`` (default: this
        step's start) is 0."""
        o = self.start if origin is None else origin
        return Trace(
            ops=[r._replace(start=r.start - o, end=r.end - o) for r in self.ops],
            transfers=[r._replace(start=r.start - o, end=r.end - o) for r in self.transfers],
            memory=[r._replace(time=r.time - o) for r in self.memory],
            oom_events=[r._replace(time=r.time - o) for r in self.oom],
            capacity=dict(self.capacity), meta=dict(self.meta))


def add_records(result: StepResult, xp, op_times: dict, transfers: list, mem_events: list,
                trace: bool) -> None:
    """Fill ``result``'s records of a step of plan ``xp`` (a
    :class:`runtime.exec_plan.ExecPlan`) and reserve its devices' peak memory.

    ``op_times``: op index -> ``(start, end, inter-op slot, cores)``; ``transfers``:
    the step's transfer records (:class:`core.trace.TransferRecord`); ``mem_events``:
    ``(time, sequence number, device name, bytes allocated (> 0) or freed (< 0), op,
    tensor)``.  With ``trace``: the op, transfer and memory records, and the
    allocations past a device's capacity (``result.capacity``) as OOM events
    (:class:`core.trace.OOMEvent`).  Always: each local device's peak use is reported
    to its memory (``device.memory.used``).
    """
    plan = xp.plan
    if trace:
        ops = []
        for i, (t0, t1, slot, cores) in op_times.items():
            node = xp.nodes[i]
            ops.append(OpRecord(node.name, node.type, plan.devices[plan.op_device[i]], slot,
                                t0, t1, cores))
        ops.sort(key=lambda r: (r.start, r.op))
        result.ops = ops
        result.transfers = sorted(transfers, key=lambda r: (r.start, r.tensor))
    events = sorted(mem_events, key=lambda e: (e[0], e[1]))
    in_use: dict[str, int] = {}
    peak: dict[str, int] = {}
    capacity = result.capacity
    memory, oom = [], []
    for t, _, dname, delta, op, tensor in events:
        before = in_use.get(dname, 0)
        now = before + delta
        in_use[dname] = now
        if now > peak.get(dname, 0):
            peak[dname] = now
        if trace:
            cap = capacity.get(dname)
            if delta > 0 and cap is not None and now > cap and op is not None:
                oom.append(OOMEvent(t, dname, op, tensor, delta, before, cap))
            memory.append(MemoryRecord(dname, t, now))
    result.memory, result.oom = memory, oom
    for d in xp.dev_objs:
        if d is not None:
            d.memory.used(peak.get(d.name, 0))
