"""A simulated run's trace, by column: the lists the run filled, made into
:class:`core.trace.OpRecord`, :class:`~core.trace.TransferRecord` and
:class:`~core.trace.MemoryRecord` lists only when a trace's records are first read
(:meth:`core.trace.Trace.lazy`), with the cyclic garbage collector paused
(:func:`without_gc`)."""

from __future__ import annotations

import gc

from core.trace import MemoryRecord, OpRecord, TransferRecord
from sim.memory import memory_records

__all__ = ["TraceColumns", "without_gc"]


class TraceColumns:
    """What a run recorded, by column; makes the record lists on demand.  Holds only
    what the records need (not the simulation), so a kept trace keeps little alive."""

    def __init__(self, plan, device_names, link_names, route_ids, pair_of, op_start, op_end,
                 op_thread, op_cores, x_start, x_time, x_end, log, op_alloc):
        self.plan, self.log, self.op_alloc = plan, log, op_alloc  # (columns read when needed)
        self.device_names, self.link_names = device_names, link_names
        self.route_ids, self.pair_of = route_ids, pair_of
        self.op_start, self.op_end, self.op_thread, self.op_cores = op_start, op_end, op_thread, op_cores
        self.x_start, self.x_time, self._x_end = x_start, x_time, x_end

    @property
    def x_end(self) -> list:
        """Each transfer's end (None: never started), made on first use: its start
        plus its time, the very sum its end event was scheduled at (so the run stores
        no end per transfer).  A run that stopped early passes its own list."""
        if self._x_end is None:
            self._x_end = [None if start is None else start + time
                           for start, time in zip(self.x_start, self.x_time)]
        return self._x_end

    def step_time(self) -> float:
        """Trace.step_time from the columns (the last end of an op or a transfer), with
        no record made."""
        ends = [e for e in self.op_end if e is not None]
        ends += [e for e in self.x_end if e is not None]
        return max(ends, default=0.0)

    def ops(self) -> list:
        make = tuple.__new__  # a record straight from its fields (no per-record Python call)
        names = self.device_names
        plan = self.plan
        op_names, ops, op_device = plan.op_names, plan.ops, plan.op_device
        op_start, op_end, op_thread, op_cores = self.op_start, self.op_end, self.op_thread, self.op_cores
        return [make(OpRecord, (op_names[i], ops[i].type, names[op_device[i]], op_thread[i],
                                op_start[i], op_end[i], op_cores[i]))
                for i in range(len(ops)) if op_end[i] is not None]

    def transfers(self) -> list:
        make = tuple.__new__
        names, link_names = self.device_names, self.link_names
        route_names = [tuple(link_names[l] for l in route) for route in self.route_ids]
        tensor_names = {}  # tensor -> "op:k", for the tensors sent
        plan = self.plan
        op_names, tensor_op, tensor_base = plan.op_names, plan.tensor_op, plan.tensor_base

        def tensor_name(t):
            name = tensor_names.get(t)
            if name is None:
                i = tensor_op[t]
                name = tensor_names[t] = f"{op_names[i]}:{t - tensor_base[i]}"
            return name

        tensor_bytes, transfer_tensor = plan.tensor_bytes, plan.transfer_tensor
        transfer_src, transfer_dst, pair_of = plan.transfer_src, plan.transfer_dst, self.pair_of.tolist()
        x_start, x_end = self.x_start, self.x_end
        return [make(TransferRecord, (tensor_name(transfer_tensor[k]), names[transfer_src[k]],
                                      names[transfer_dst[k]], route_names[pair_of[k]],
                                      tensor_bytes[transfer_tensor[k]], x_start[k], x_end[k]))
                for k in range(len(transfer_tensor)) if x_end[k] is not None]

    def memory(self) -> list:
        make, names = tuple.__new__, self.device_names
        device, time, use = memory_records(self.plan, self.log, self.op_alloc,
                                           self.op_end + self.x_end + self.op_start + self.x_start)
        return [make(MemoryRecord, (names[d], t, b)) for d, t, b in zip(device, time, use)]


def without_gc(make):
    """``make`` with the cyclic garbage collector paused: a run, or the making of ~350k
    records, would otherwise trigger collections that walk the whole graph again and
    again (they took a third of a run's time, and tripled the records', at 100k ops);
    nothing made needs the collector before ``make`` returns."""
    def made():
        collecting = gc.isenabled()
        gc.disable()
        try:
            return make()
        finally:
            if collecting:
                gc.enable()
    return made
