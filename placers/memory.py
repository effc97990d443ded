"""Device memory as the memory-aware placers count it: the simulator's rules, replayed in
placement order.

The simulator (:mod:`sim.memory`) allocates, on each device: the outputs of persistent
ops (variables) from time 0 for good; an op's outputs when it starts (an output aliasing
a ref input, as ``Assign``'s, takes nothing), freed once their last reader and last
outgoing transfer are done; a received copy from its transfer's start until its last
reader there is done.  Gradients and activations are plain op outputs.  A placer knows
no times, so :class:`MemoryLedger` replays these rules in the order the placer commits
ops, which is a topological order: an op's outputs (and each copy of them another device
receives) are held until every reader of the op has been committed, a copy counted from
its producer's commit on (the simulator sends a tensor when it is made, so a reader
committed long after, as the sum of a weight's gradients over every time step, holds
what it receives over that whole span: :meth:`MemoryLedger._fits_past`), and a colocation
group's variables are reserved on its device when the group is placed, as if from time
0 (so they also count against every earlier peak).  A group's device is fixed by its
first op, and its later ops (a variable's read, the gradients colocated with a forward
op) may only go there, when the forward pass may have filled it: so each device keeps
free the *room* the largest of its groups' ops still to come takes (outputs and inputs
from other groups), which only those groups' ops may use; and a new group may not take
the last device with room for the largest group still to place (its first op and what
it keeps after).  A placer whose every next op waits for room lets it go (``fits(...,
relaxed=True)``), and :class:`SimulatorChecked` places again keeping the whole room of
a group that still ran out (``kept_whole``).  The ledger's sizes come from the
same model the cost-model placer uses (:class:`placers.cost_model._Model`:
``core.costs.tensor_bytes`` per output, nothing for ref-aliasing outputs; an op that
forwards its input, as a variable's read or ``Identity``, allocates nothing on its
input's device and keeps that buffer alive while it is read, as ``StepPlan`` counts it).

The replay is sequential, the simulator concurrent: ops that overlap in time there hold
their outputs at once, so the simulator's peak can exceed the replay's; ``headroom``
keeps that fraction of each device free for it.  Where that is not enough (devices
running at once, each sending one device what its sequential replay received one after
another: gnmt's layers sending their weight gradients to the device that sums them),
the simulator's check (:class:`SimulatorChecked`) places again with the ledger also
counting every buffer over the simulated step's schedule (:class:`ScheduleProfile`).

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

import bisect
import heapq

import numpy as np

from core.costs import tensor_bytes
from core.graph import Tensor, ops_needed
from core.placement import PlacementError
from placers.base import BasePlacer

__all__ = ["MemoryLedger", "ScheduleProfile", "step_mask", "SimulatorChecked"]


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
    ``feasible``: group id -> the device indices it may go to (default: all);
    ``kept_whole``: groups whose room is all their ops still to come, summed, which no
    other group's op may use (see the module docstring);
    ``headroom``: the fraction of each capacity kept free; ``step[i]``: whether op ``i``
    runs in the step (default: every op; the others take no memory).  ``schedule``: op
    name -> its ``(start, end)`` in an estimated concurrent schedule of the step (as a
    simulated step ran them): every group's first op must then also fit over it
    (:class:`ScheduleProfile`).  ``in_use[k]`` is what device
    ``k`` holds now (resident plus live), ``peak[k]`` the most it has held.
    """

    def __init__(self, model, capacity: list[int], group_of: dict | list, headroom: float = 0.0,
                 step: list[bool] | None = None, feasible: dict | None = None,
                 kept_whole=(), schedule: dict | None = None):
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
        self._keys = [self._key_of(i) for i in range(n)]  # each op's group (_group_key)
        self._group_resident: dict = {}
        self.group_bytes: dict = {}  # the group's outputs, all counted (m-TOPO's share)
        for i in range(n):
            g = self._group_key(i)
            if model.persistent[i]:
                self._group_resident[g] = self._group_resident.get(g, 0) + self.out_bytes[i]
            self.group_bytes[g] = self.group_bytes.get(g, 0) + self.out_bytes[i]
        self._reserved: set = set()
        self._placed: dict = {}  # group -> its device
        self._feasible = feasible or {}  # group -> the devices it may go to (default: all)
        self.kept_whole = set(kept_whole)
        self.failed_group = None  # after fail(): the group of the op that fit nowhere
        self.failed_late = False  # ... and whether that group had a device already
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
        self._setup_room()
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
        # The replay's past, for the copies: a copy is received when its producer
        # ends (the simulator sends eagerly), long before a reader committed later
        # (as the sum of a weight's gradients over every time step) runs.
        # ``history[k, c]``: the most device ``k`` held, less its resident bytes,
        # during the ``c``-th commit; ``when[i]``: the commit that placed op ``i``.
        self.clock = 0
        self.when = [-1] * n
        self.history = np.zeros((len(capacity), n + 1), dtype=np.int64)
        self.total = [0] * len(capacity)  # everything ever allocated on each device
        self.profile = None if schedule is None else ScheduleProfile(self, schedule)

    def _setup_room(self) -> None:
        """What the ops of each group may take when they run, largest first (their
        outputs and their inputs from other groups, which may arrive as copies), kept
        free on the group's device for those still to come (:meth:`room`); the heaps of
        that room per device and of the groups still to place."""
        later: dict = {}
        keys = self._keys
        for i in range(len(self.model.ops)):
            if not self.step[i] or self.model.persistent[i]:
                continue
            g = keys[i]
            nbytes = self.out_bytes[i] + sum(b for j, _, b in self.inputs[i] if keys[j] != g)
            if nbytes:
                later.setdefault(g, []).append((nbytes, i))
        # (heap entries tie on a group's rank, its first op, never on its key)
        self._rank = {g: v[0][1] for g, v in later.items()}
        self._later = {g: sorted(v, key=lambda bi: (-bi[0], bi[1])) for g, v in later.items()}
        self._later_at: dict = {}  # group -> position of its first uncommitted entry there
        # Per device, the room kept for the ops still to come of the groups placed there
        # (the most one of them takes: whichever comes next can run), as a lazy heap of
        # (-bytes, rank, group); an entry is current while it is its group's largest.
        self._room: list[list] = [[] for _ in self.capacity]
        # Per device, the room kept whole for the groups of ``kept_whole`` placed there:
        # everything their ops still to come take, summed (no other group's op may use it).
        self._kept = [0] * len(self.capacity)
        # The groups still to place, by what their first op and the room kept after it
        # take at once (their two largest), as a lazy heap of (-bytes, rank, group).
        self._to_come = [(-(sum(b for b, _ in ops[:2])), self._rank[g], g)
                         for g, ops in self._later.items()]
        heapq.heapify(self._to_come)

    def _group_key(self, i: int):
        return self._keys[i]

    def _key_of(self, i: int):
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

    def fits(self, i: int, k: int, relaxed: bool = False) -> bool:
        """Whether op ``i`` fits on device ``k`` now and leaves the room kept there for
        the ops still to come of the groups placed on ``k``, its own group's included
        (:meth:`room`); for the first op of a group, also its group's variables (for
        good: against the device's peak so far too), and the copies it receives over
        the past they reach back to (:meth:`_fits_past`) and over the ``schedule``
        (:class:`ScheduleProfile`), where one is given.  ``relaxed``: keep no room,
        nor those (for a placer whose every next op waits for it)."""
        resident, transient = self.need(i, k)
        cap = self.capacity[k]
        g = self._group_key(i)
        if relaxed:
            return (not resident or self.peak[k] + resident <= cap) and \
                self.in_use[k] + resident + transient <= cap
        if g in self._placed:  # its group's room is its own (and its device's) to take
            left = cap - self.in_use[k] - transient
            return left >= 0 and left + self._freed_by(i, k) >= self._kept_for_others(k, g)
        # (the past and the schedule only steer a group's first op: its later ops have
        # no choice, and waiting changes neither)
        if not self._fits_past(i, k, resident) or \
                self.profile is not None and not self.profile.fits(i, k, resident):
            return False
        if resident and self.peak[k] + resident > cap:
            return False
        left = cap - self.in_use[k] - resident - transient
        if left < 0:
            return False
        # The room is needed once the op is done: what it was the last to read is free.
        left += self._freed_by(i, k) - self.room(k, g, i)
        return left >= 0 and self._leaves_room_to_come(g, k, left)

    def _fits_past(self, i: int, k: int, resident: int) -> bool:
        """Whether the copies op ``i`` would receive on ``k`` fit there over the past
        they reach back to: each from the commit after its producer's (when the
        simulator starts its transfer) to now, with what ``k`` held then."""
        device, copied, when = self.device, self._copied, self.when
        pending = sorted((when[j], nbytes) for j, tid, nbytes in self.inputs[i]
                         if device[j] != k and (tid, k) not in copied)
        if not pending:
            return True
        room = self.capacity[k] - self.resident[k] - resident
        past, extra = self.history[k], 0
        for at, (since, nbytes) in enumerate(pending):
            extra += nbytes
            until = pending[at + 1][0] + 1 if at + 1 < len(pending) else self.clock
            if since + 1 < until and int(past[since + 1:until].max()) + extra > room:
                return False
        return True

    def _freed_by(self, i: int, k: int) -> int:
        """The bytes on ``k`` that placing op ``i`` there lets go of: the inputs (and
        copies of them on ``k``, the one it receives included) it is the last reader
        of, and its outputs if nobody reads them."""
        freed = 0 if self.readers[i] or self.model.persistent[i] else self._own_bytes(i, k)
        source = self.source[i]
        keep = source if source >= 0 and self.device[source] == k else -1
        seen = set()
        for j, tid, nbytes in self.inputs[i]:
            if self.device[j] != k and (tid, k) not in self._copied:
                freed += nbytes if self.left[j] == 1 else 0  # the copy it receives
            if j in seen or j == keep or self.left[j] != 1:
                continue
            seen.add(j)
            if self.device[j] == k:
                freed += self.held[j]
            freed += self.copies.get(j, {}).get(k, 0)
        return freed

    def _leaves_room_to_come(self, g, k: int, left: int) -> bool:
        """Whether, with ``left`` bytes free beyond its room on ``k`` once group ``g``
        is placed there, some device still has room for the largest group to come
        (its first op and what it keeps after), when one had before: the forward ops
        fill every device with activations held for the backward pass, and a group
        that comes at the end (as a loss with its gradient) would then fit nowhere."""
        heap = self._to_come
        while heap and heap[0][2] in self._placed:
            heapq.heappop(heap)
        top = None
        if heap and heap[0][2] == g:
            top = heapq.heappop(heap)
            while heap and heap[0][2] in self._placed:
                heapq.heappop(heap)
        try:
            if not heap:
                return True
            big, h = -heap[0][0], heap[0][2]
            if left >= big:  # k itself keeps room for it
                return True
            free = {d: self.capacity[d] - self.in_use[d] - self.room(d)
                    for d in self._feasible.get(h, range(len(self.capacity)))}
            if max(free.values(), default=0) < big or k not in free:
                return True  # (none has room now: placing g there changes nothing)
            free[k] = min(free[k], left)
            return max(free.values()) >= big
        finally:
            if top is not None:
                heapq.heappush(heap, top)

    def room(self, k: int, g=None, i: int = -1) -> int:
        """The bytes kept free on ``k`` for the ops still to come of the groups placed
        there: the most one of them takes (its outputs and its inputs from other
        groups), so that whichever comes next can run, plus the room kept whole for the
        groups of ``kept_whole`` (a
        group's later ops, as a variable's read or the gradients colocated with its
        forward op, may only go to its device, which other groups could fill before
        they come).  With ``g`` and ``i``: as it would be once op ``i`` of group ``g``
        is placed on ``k`` (``i`` no longer to come, ``g``'s later ops counted)."""
        heap = self._room[k]
        self._clean(heap)
        if g is None:
            return (-heap[0][0] if heap else 0) + self._kept[k]
        other = 0
        if heap and heap[0][2] != g:
            other = -heap[0][0]
        elif heap:  # the top is g's own: the next group's entry counts
            top = heapq.heappop(heap)
            self._clean(heap)
            other = -heap[0][0] if heap else 0
            heapq.heappush(heap, top)
        kept = self._kept_for_others(k, g)
        if g in self.kept_whole:
            return other + kept + self._ahead_sum(g, skip=i)
        return max(other, self._ahead(g, skip=i)) + kept

    def _kept_for_others(self, k: int, g) -> int:
        """The room kept whole on ``k`` for the groups of ``kept_whole`` other than ``g``."""
        kept = self._kept[k]
        if g in self.kept_whole and self._placed.get(g) == k:
            kept -= self._ahead_sum(g)
        return kept

    def _ahead_sum(self, g, skip: int = -1) -> int:
        """What group ``g``'s ops not placed yet (but ``skip``) take, summed."""
        return sum(b for b, j in self._later.get(g, ()) if j != skip and self.device[j] < 0)

    def _ahead(self, g, skip: int = -1) -> int:
        """The most one of group ``g``'s ops not placed yet (but ``skip``) takes."""
        later = self._later.get(g)
        if not later:
            return 0
        at, device = self._later_at.get(g, 0), self.device
        while at < len(later) and device[later[at][1]] >= 0:
            at += 1
        self._later_at[g] = at
        while at < len(later) and (later[at][1] == skip or device[later[at][1]] >= 0):
            at += 1
        return later[at][0] if at < len(later) else 0

    def _clean(self, heap) -> None:
        """Drop the entries of ``heap`` no longer their group's largest to come."""
        while heap and self._ahead(heap[0][2]) != -heap[0][0]:
            heapq.heappop(heap)

    def commit(self, i: int, k: int) -> None:
        """Place op ``i`` on ``k``: allocate, then free what its placement lets go of."""
        model = self.model
        now = self.clock
        if self.profile is not None:
            self.profile.commit(i, k)
        for d, used in enumerate(self.in_use):
            self.history[d, now] = used - self.resident[d]
        resident, _ = self.need(i, k)
        g = self._group_key(i)
        if resident:
            self._reserved.add(g)
            self.total[k] += resident
            self.resident[k] += resident
            self.in_use[k] += resident
            self.peak[k] += resident
        first = g not in self._placed
        if first:
            self._placed[g] = k
        if g in self.kept_whole:
            self._kept[k] += self._ahead_sum(g, skip=i) - (0 if first else self._ahead_sum(g))
            self.device[i] = k
        else:
            before = self._ahead(g)
            self.device[i] = k
            after = self._ahead(g)
            if after and (first or after != before):  # the group's room on k, as it is now
                heapq.heappush(self._room[k], (-after, self._rank[g], g))
        for j, tid, nbytes in self.inputs[i]:
            key = (tid, k)
            if self.device[j] != k and key not in self._copied:
                self._copied.add(key)
                by_device = self.copies.setdefault(j, {})
                by_device[k] = by_device.get(k, 0) + nbytes
                self._alloc(k, nbytes)
                self._received_since(k, self.when[j] + 1, nbytes)
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
        self.when[i] = now
        self.clock = now + 1
        if self.profile is not None:
            self.peak[k] = max(self.peak[k], self.resident[k] + self.profile.last_max)

    def _alloc(self, k: int, nbytes: int) -> None:
        self.total[k] += nbytes
        self.in_use[k] += nbytes
        if self.in_use[k] > self.peak[k]:
            self.peak[k] = self.in_use[k]
        held = self.in_use[k] - self.resident[k]
        if held > self.history[k, self.clock]:
            self.history[k, self.clock] = held

    def _received_since(self, k: int, since: int, nbytes: int) -> None:
        """A copy of ``nbytes`` held on ``k`` from commit ``since`` on (its transfer's
        start), counted over the past commits it spans."""
        if since < self.clock:
            past = self.history[k, since:self.clock]
            past += nbytes
            self.peak[k] = max(self.peak[k], self.resident[k] + int(past.max()))

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
        self.failed_group = g = self._group_key(i)
        self.failed_late = g in self._placed
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


class ScheduleProfile:
    """What each device holds over an estimated concurrent schedule of the step, for a
    :class:`MemoryLedger` given one (``schedule``: op name -> its ``(start, end)``, as
    the simulator ran a previous placement).

    The ledger's replay is sequential, in the order the placer commits ops, while in
    the simulator the devices run at once: each one's backward pass, say, sends the
    gradients of a weight shared by every time step to the device that sums them, which
    receives those of every layer at the same time; the replay, a layer after another,
    held one layer's at a time.  Here the ops are in the order they start (``position``)
    and every buffer is an interval of it: an op's outputs from its start to the end of
    its last reader committed on its device (a forwarded buffer to its forwarders'
    readers'), a received copy from its producer's start to the end of its last reader
    there (an op's end: ``after``, the first position that starts after it ends);
    residents stay with the ledger.  ``held[k, p]``: the bytes device ``k`` holds at
    position ``p``; ``last_max`` the most the last commit's intervals reached.
    """

    def __init__(self, ledger: MemoryLedger, schedule: dict):
        self.ledger = ledger
        late = len(schedule)  # (an op the schedule lacks: after all of it)
        started = sorted(schedule, key=lambda name: (schedule[name][0], name))
        starts = [schedule[name][0] for name in started]
        at = {name: p for p, name in enumerate(started)}
        self.position, self.after = [], []
        for op in ledger.model.ops:
            p = at.get(op.name, late)
            self.position.append(p)
            # what runs while the op does: the positions that start before it ends
            ends = bisect.bisect_left(starts, schedule[op.name][1]) if op.name in at else p + 1
            self.after.append(max(p + 1, ends))
        self.held = np.zeros((len(ledger.capacity), late + 2), dtype=np.int64)
        self.end: dict = {}  # op i or (tensor id, device) -> the position after its interval
        self.last_max = 0

    def intervals(self, i: int, k: int) -> list[tuple[int, int, int]]:
        """``(first, after, bytes)`` added on ``k`` by committing op ``i`` there: its
        outputs, the copies it receives or holds longer, its device's inputs held longer."""
        ledger, end = self.ledger, self.end
        p, a = self.position[i], self.after[i]
        out = []
        if not ledger.model.persistent[i]:
            own = ledger._own_bytes(i, k)
            if own:
                out.append((p, a, own))
        seen = set()
        for j, tid, nbytes in ledger.inputs[i]:
            if ledger.device[j] != k:
                was = end.get((tid, k))
                if was is None:
                    out.append((self.position[j], a, nbytes))
                elif was < a:
                    out.append((was, a, nbytes))
                continue
            while j >= 0 and j not in seen:  # its buffer, and the one it forwards
                seen.add(j)
                was = end.get(j)
                if was is not None and was < a and ledger.held[j]:
                    out.append((was, a, ledger.held[j]))
                j = ledger.parent[j]
        return out

    def _most(self, k: int, intervals) -> int:
        """The most ``k`` would hold over ``intervals`` with them added."""
        cuts = sorted({c for a, b, _ in intervals for c in (a, b)})
        held, most = self.held[k], 0
        for a, b in zip(cuts, cuts[1:]):
            extra = sum(x for s, e, x in intervals if s <= a and b <= e)
            if extra:
                most = max(most, int(held[a:b].max()) + extra)
        return most

    def fits(self, i: int, k: int, resident: int) -> bool:
        """Whether op ``i``'s intervals fit on ``k`` beside its residents (and
        ``resident`` more)."""
        intervals = self.intervals(i, k)
        if not intervals:
            return True
        room = self.ledger.capacity[k] - self.ledger.resident[k] - resident
        return self._most(k, intervals) <= room

    def commit(self, i: int, k: int) -> None:
        """Add op ``i``'s intervals on ``k`` (before the ledger commits it)."""
        intervals = self.intervals(i, k)
        self.last_max = self._most(k, intervals) if intervals else 0
        held, end, ledger = self.held[k], self.end, self.ledger
        for a, b, nbytes in intervals:
            held[a:b] += nbytes
        p1 = self.after[i]
        end[i] = p1
        for j, tid, _ in ledger.inputs[i]:
            if ledger.device[j] != k:
                end[(tid, k)] = max(end.get((tid, k), 0), p1)
                continue
            while j >= 0:
                end[j] = max(end.get(j, 0), p1)
                j = ledger.parent[j]


class SimulatorChecked(BasePlacer):
    """The memory-aware placers' last step: the simulator checks the placement's memory.

    A placement that raises :class:`core.placement.PlacementError` for an op whose
    group already had a device (its device filled before it came) is made again with
    that group's room kept whole (:class:`MemoryLedger`'s ``kept_whole``: all its ops
    still to come, summed), up to ``kept_whole_retries`` groups.

    The sequential count of :class:`MemoryLedger` can fall short of what the
    simulator's concurrent step holds (devices running at once send one device what
    the sequential replay had it receive one after another).  So with
    ``check_memory`` (default), unless everything the ledger ever allocated on each
    device fits there at once (then nothing can run out), the placement is simulated
    once (:func:`placers.objective.simulated_memory`, the simulator imported at call
    time).  If a device's simulated peak passes its capacity, the placer runs again
    with the ledger counting over that simulated step's schedule too
    (:class:`ScheduleProfile`); from the second overshoot on, the schedule is the
    latest and the capacity of a device still over is also scaled down by its
    overshoot; up to ``memory_retries`` times (``memory_tries`` tells how many runs
    it took).  Subclasses call :meth:`capacities` and :meth:`schedule` for their
    ledger and set ``self._ledger``.
    """

    check_memory = True
    memory_retries = 5
    kept_whole_retries = 8
    headroom = 0.0
    fetches = None

    def kept_whole(self) -> set:
        """The groups whose room the ledger keeps whole (:class:`MemoryLedger`), this run."""
        return set(getattr(self, "_kept_whole", ()))

    def schedule(self) -> dict | None:
        """The simulated schedule the ledger also counts over, this run (None: none)."""
        return getattr(self, "_schedule", None)

    def capacities(self, devices) -> list[int]:
        scale = getattr(self, "_scale", None) or {}
        return [int(d.memory_bytes * scale.get(d.name, 1.0)) for d in devices]

    def place(self, graph, cluster, *, previous=None):
        from placers import objective  # reaches the simulator at call time
        self._scale, self._kept_whole, self._schedule = {}, set(), None
        try:
            tries = rescaled = 0
            while True:
                tries += 1
                self.memory_tries = tries
                self._ledger = None
                try:
                    placement = super().place(graph, cluster, previous=previous)
                except PlacementError:
                    ledger = self._ledger  # (None: the constraints raised, before a ledger)
                    if ledger is None or not ledger.failed_late or \
                            ledger.failed_group in self._kept_whole or \
                            len(self._kept_whole) >= self.kept_whole_retries:
                        raise
                    self._kept_whole.add(ledger.failed_group)
                    continue
                ledger = self._ledger
                if not self.check_memory or rescaled >= self.memory_retries or all(
                        total <= cap for total, cap in zip(ledger.total, ledger.capacity)):
                    return placement
                peaks, schedule = objective.simulated_memory(graph, placement, cluster,
                                                             fetches=self.fetches)
                over = {}
                for d in cluster.devices:
                    capacity = d.memory_bytes * (1 - self.headroom)
                    if peaks.get(d.name, 0) > capacity:
                        over[d.name] = capacity / peaks[d.name]
                if not over:
                    return placement
                rescaled += 1
                if self._schedule is not None:  # the schedule alone was not enough
                    for name, ratio in over.items():
                        self._scale[name] = self._scale.get(name, 1.0) * ratio * 0.9
                self._schedule = schedule
        finally:
            self._scale, self._kept_whole, self._schedule = {}, set(), None
