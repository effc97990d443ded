"""Device memory as the memory-aware placers count it: the simulator's rules, replayed in
placement order.

The simulator (:mod:`sim.memory`) allocates, on each device: the outputs of persistent
ops (variables) from time 0 for good; an op's outputs when it starts (an output aliasing
a ref input, as ``Assign``'s, takes nothing), freed once their last reader and last
outgoing transfer are done; a received copy from its transfer's start until its last
reader there is done.  Gradients and activations are plain op outputs.  A placer knows
no times, so :class:`MemoryLedger` replays these rules in the order the placer commits
ops, which is a topological order: an op's outputs (and each copy of them another device
receives) are held until every reader of the op has been committed, and a colocation
group's variables are reserved on its device when the group is placed, as if from time
0 (so they also count against every earlier peak).  The ledger's sizes come from the
same model the cost-model placer uses (:class:`placers.cost_model._Model`:
``core.costs.tensor_bytes`` per output, nothing for ref-aliasing outputs; an op that
forwards its input, as a variable's read or ``Identity``, allocates nothing on its
input's device and keeps that buffer alive while it is read, as ``StepPlan`` counts it).

The replay is sequential, the simulator concurrent: ops that overlap in time there hold
their outputs at once, so the simulator's peak can exceed the replay's; ``headroom``
keeps that fraction of each device free for it.

>>> import core as tf
>>> from core.cluster import Cluster
>>> from core.costs import StaticCostModel
>>> from placers.cost_model import _Model
>>> g = tf.Graph()
>>> with g.as_default():
...     a = tf.constant([1.0] * 256, name="a")
...     b = tf.relu(a, name="b")
>>> model = _Model(g.get_operations(), Cluster.single_host(), StaticCostModel())
>>> ledger = MemoryLedger(model, [10_000], {})
>>> ledger.fits(0, 0), ledger.commit(0, 0), ledger.in_use[0]
(True, None, 1024)
>>> ledger.commit(1, 0); ledger.in_use[0], ledger.peak[0]  # both freed: b has no reader
(0, 2048)
"""

from __future__ import annotations

from core.costs import tensor_bytes
from core.graph import Tensor, ops_needed
from core.placement import PlacementError
from placers.base import BasePlacer

__all__ = ["MemoryLedger", "step_mask", "SimulatorChecked"]


def step_mask(model, fetches) -> list[bool] | None:
    """Which of ``model``'s ops a step computing ``fetches`` runs (None: every op)."""
    if fetches is None:
        return None
    needed = {op.name for op in ops_needed([f.op if isinstance(f, Tensor) else f
                                            for f in fetches])}
    return [op.name in needed for op in model.ops]


class MemoryLedger:
    """Bytes per device under a placement made op by op (see the module docstring).

    ``model``: a :class:`placers.cost_model._Model`; ``capacity``: bytes per device
    index; ``group_of``: op index -> colocation group id (ops absent are alone);
    ``headroom``: the fraction of each capacity kept free; ``step[i]``: whether op ``i``
    runs in the step (default: every op; the others take no memory).  ``in_use[k]`` is what device
    ``k`` holds now (resident plus live), ``peak[k]`` the most it has held.
    """

    def __init__(self, model, capacity: list[int], group_of: dict | list, headroom: float = 0.0,
                 step: list[bool] | None = None):
        if not 0 <= headroom < 1:
            raise ValueError(f"headroom must be a fraction in [0, 1), not {headroom!r}")
        self.model = model
        n = len(model.ops)
        # Only the ops of the step hold memory (the simulator runs only those).
        self.step = step if step is not None else [True] * n
        self.out_bytes = [b if s else 0 for b, s in zip(model.out_bytes, self.step)]
        self.capacity = [int(c * (1 - headroom)) for c in capacity]
        self.device = [-1] * n
        self.in_use = [0] * len(capacity)
        self.peak = [0] * len(capacity)
        self.resident = [0] * len(capacity)
        # Readers per op (distinct ops reading any of its outputs): when the last is
        # committed the op's buffers, and every copy of them, are let go of.
        self.readers = [0] * n
        for i in range(n):
            if self.step[i]:
                for j in {j for j, _ in model.data_inputs[i]}:
                    self.readers[j] += 1
        self.left = list(self.readers)
        self.copies: dict[int, dict[int, int]] = {}  # op -> {device: bytes of its copies}
        self._copied: set = set()  # (id(tensor), device) already received
        # The variables of each group, reserved together when its first op is placed.
        self._group = group_of
        self._group_resident: dict = {}
        self._group_largest: dict = {}  # the group's largest output, checked up front
        for i in range(n):
            g = self._group_key(i)
            if model.persistent[i]:
                self._group_resident[g] = self._group_resident.get(g, 0) + self.out_bytes[i]
            elif self.out_bytes[i] > self._group_largest.get(g, 0):
                self._group_largest[g] = self.out_bytes[i]
        self._reserved: set = set()
        self._placed: set = set()  # groups with a device
        # Room promised to the groups of variables placed but not yet read (their
        # largest output), so that other groups do not take it meanwhile.
        self.promised = [0] * len(capacity)
        self._promise_of: dict = {}
        # Each op's distinct input tensors as (producer, tensor id, bytes), sized once;
        # ``inputs`` only for the step's ops (what holds memory).
        self.tensors: list[list[tuple[int, int, int]]] = []
        for i in range(n):
            seen, mine = set(), []
            for j, t in model.data_inputs[i]:
                if id(t) not in seen:
                    seen.add(id(t))
                    mine.append((j, id(t), tensor_bytes(t)))
            self.tensors.append(mine)
        self.inputs = [ts if s else [] for ts, s in zip(self.tensors, self.step)]
        # Ops that forward input 0's buffer (a variable's read, Identity, Reshape): on
        # the input's device their output 0 is that buffer (nothing allocated), which
        # then lives as long as either is read (StepPlan.buffer_parent).
        self.source = [-1] * n
        self.forwarded = [0] * n
        for i, op in enumerate(model.ops):
            if self.step[i] and op.op_def.forwards_input and op.inputs and op.outputs:
                j = model.index.get(op.inputs[0].op.name)
                if j is not None:
                    self.source[i] = j
                    self.forwarded[i] = tensor_bytes(op.outputs[0])
        self.held = [0] * n  # bytes each op's outputs hold on its device
        self.parent = [-1] * n  # the op whose buffer a forwarding op keeps alive

    def _group_key(self, i: int):
        g = self._group[i] if isinstance(self._group, list) else self._group.get(i)
        return ("op", i) if g is None else g

    def need(self, i: int, k: int) -> tuple[int, int]:
        """``(resident, transient)`` bytes placing op ``i`` on ``k`` adds now: its group's
        variables (if not yet reserved) and its outputs plus copies of inputs from other
        devices (not yet received on ``k``)."""
        model = self.model
        g = self._group_key(i)
        resident = 0 if g in self._reserved else self._group_resident.get(g, 0)
        transient = 0 if model.persistent[i] else self._own_bytes(i, k)
        device, copied = self.device, self._copied
        for j, tid, nbytes in self.inputs[i]:
            if device[j] != k and (tid, k) not in copied:
                transient += nbytes
        return resident, transient

    def _own_bytes(self, i: int, k: int) -> int:
        """What op ``i``'s outputs allocate on ``k`` (less a forwarded buffer)."""
        j = self.source[i]
        if j >= 0 and self.device[j] == k:
            return max(0, self.out_bytes[i] - self.forwarded[i])
        return self.out_bytes[i]

    def free_on(self, k: int) -> int:
        """Bytes a transient allocation may still take on ``k`` now."""
        return self.capacity[k] - self.in_use[k]

    def fits(self, i: int, k: int) -> bool:
        """Whether op ``i`` fits on device ``k`` now, beside what the groups placed on
        ``k`` are promised; for the first op of a group, also its group's variables
        (for good: against the device's peak so far too) with the group's largest
        output beside them (as a variable's read)."""
        resident, transient = self.need(i, k)
        cap = self.capacity[k]
        g = self._group_key(i)
        promised = self.promised[k]
        own = self._promise_of.get(g)
        if own is not None and own[0] == k:
            promised -= own[1]
        if g not in self._placed:
            largest = self._group_largest.get(g, 0)
            if self.peak[k] + resident > cap or \
                    self.in_use[k] + promised + resident + largest > cap:
                return False
        return self.in_use[k] + promised + resident + transient <= cap

    def commit(self, i: int, k: int) -> None:
        """Place op ``i`` on ``k``: allocate, then free what its placement lets go of."""
        model = self.model
        resident, _ = self.need(i, k)
        g = self._group_key(i)
        if resident:
            self._reserved.add(g)
            self.resident[k] += resident
            self.in_use[k] += resident
            self.peak[k] += resident
        if g not in self._placed:
            self._placed.add(g)
            largest = self._group_largest.get(g, 0)
            if resident and largest:  # a variable's read is promised room beside it
                self.promised[k] += largest
                self._promise_of[g] = (k, largest)
        if not model.persistent[i] and self.out_bytes[i] and g in self._promise_of:
            pk, nbytes = self._promise_of.pop(g)  # the promise is kept: let it go
            self.promised[pk] -= nbytes
        self.device[i] = k
        for j, tid, nbytes in self.inputs[i]:
            key = (tid, k)
            if self.device[j] != k and key not in self._copied:
                self._copied.add(key)
                by_device = self.copies.setdefault(j, {})
                by_device[k] = by_device.get(k, 0) + nbytes
                self._alloc(k, nbytes)
        if not model.persistent[i]:
            self.held[i] = self._own_bytes(i, k)
            self._alloc(k, self.held[i])
        j = self.source[i]
        if j >= 0 and self.device[j] == k:
            self.parent[i] = j  # i's readers keep j's buffer: j's read ends with i's
        for j in {j for j, _, _ in self.inputs[i]}:
            if j != self.parent[i]:
                self._read(j)
        if self.readers[i] == 0:  # nobody reads it: freed when the op ends
            self._release(i)

    def _alloc(self, k: int, nbytes: int) -> None:
        self.in_use[k] += nbytes
        if self.in_use[k] > self.peak[k]:
            self.peak[k] = self.in_use[k]

    def _read(self, j: int) -> None:
        """One reader of op ``j`` committed: at the last, its buffers go (and then a
        forwarded buffer's source loses a reader in turn)."""
        self.left[j] -= 1
        if self.left[j] == 0:
            self._release(j)

    def _release(self, j: int) -> None:
        while j >= 0:
            self.in_use[self.device[j]] -= self.held[j]
            for k, nbytes in self.copies.pop(j, {}).items():
                self.in_use[k] -= nbytes
            j = self.parent[j]
            if j >= 0:
                self.left[j] -= 1
                if self.left[j]:
                    return

    def fail(self, i: int, candidates: list[int], group_ops: list) -> PlacementError:
        """The error for op ``i`` that fits on none of ``candidates``: its group, the
        bytes it needs and the largest free memory among them."""
        model = self.model
        best = max(candidates, key=lambda k: (self.free_on(k), -k)) if candidates else None
        resident, transient = self.need(i, best) if best is not None else (0, 0)
        names = [op.name for op in group_ops]
        shown = ", ".join(names[:4]) + (f", ... ({len(names)} ops)" if len(names) > 4 else "")
        free = (f"the largest free memory is {self.free_on(best)} bytes, on "
                f"{model.devices[best].name}" if best is not None else "no device is feasible")
        return PlacementError(model.ops[i].name, None,
                              f"its colocation group [{shown}] needs {resident + transient} bytes "
                              f"on one device ({resident} resident, {transient} for its outputs "
                              f"and inputs) and {free}")


class SimulatorChecked(BasePlacer):
    """The memory-aware placers' last step: the simulator checks the placement's memory.

    The sequential count of :class:`MemoryLedger` can fall short of what the
    simulator's concurrent step holds (a copy is received when its producer ends, not
    when its reader runs).  So with ``check_memory`` (default), when some device's
    count came within half of its capacity, the placement is simulated once
    (:func:`placers.objective.simulated_peaks`, the simulator imported at call time);
    if a device's simulated peak passes its capacity, the placer runs again with that
    device's capacity scaled down by the overshoot, up to ``memory_retries`` times
    (``memory_tries`` tells how many runs it took).  Subclasses call
    :meth:`capacities` for their ledger and set ``self._ledger``.
    """

    check_memory = True
    memory_retries = 5
    headroom = 0.0
    fetches = None

    def capacities(self, devices) -> list[int]:
        scale = getattr(self, "_scale", None) or {}
        return [int(d.memory_bytes * scale.get(d.name, 1.0)) for d in devices]

    def place(self, graph, cluster, *, previous=None):
        from placers.objective import simulated_peaks  # reaches the simulator at call time
        self._scale = {}
        try:
            for tries in range(1, self.memory_retries + 2):
                self.memory_tries = tries
                placement = super().place(graph, cluster, previous=previous)
                ledger = self._ledger
                if not self.check_memory or tries > self.memory_retries or all(
                        peak <= cap / 2 for peak, cap in zip(ledger.peak, ledger.capacity)):
                    return placement
                peaks = simulated_peaks(graph, placement, cluster, fetches=self.fetches)
                over = {}
                for d in cluster.devices:
                    capacity = d.memory_bytes * (1 - self.headroom)
                    if peaks.get(d.name, 0) > capacity:
                        over[d.name] = capacity / peaks[d.name]
                if not over:
                    return placement
                for name, ratio in over.items():
                    self._scale[name] = self._scale.get(name, 1.0) * ratio * 0.9
            return placement
        finally:
            self._scale = {}
