"""m-ETF: memory-constrained earliest-task-first placement (Baechi).

    Jeon, Ahn, Kim, Bae, Gupta, "Baechi: Fast Device Placement of Machine Learning
    Graphs", ACM SoCC 2020, section 4.2 ("m-ETF"); ETF itself is Hwang, Chow, Anger,
    Lee, "Scheduling precedence graphs in systems with interprocessor communication
    times", SIAM J. Computing 18(2), 1989.

Contract (numbered as TensorFlow's ``placer.h``; :mod:`placers.base` holds the rest):

1. The placer list-schedules the graph: among the ready ops (every data and control
   input scheduled) and the devices each may use, it takes the pair with the earliest
   start (ties: the op first in topological order, then the device first in the
   cluster's order), where the start on a device is the latest of its inputs' arrivals
   (an input from another device arrives the cost model's transfer time after its
   producer ends; no link contention) and the device's first free inter-op thread.
2. A device the op (or the rest of its colocation group) does not fit on is skipped;
   memory is counted as the simulator counts it, replayed in the schedule's order
   (:class:`placers.memory.MemoryLedger`, with ``headroom`` kept free).  A ready op
   that fits nowhere waits for memory to be freed (when every ready op waits, the
   first that fits without the room kept for ops to come goes); one that never fits raises
   :class:`core.placement.PlacementError` naming its group, the bytes it needs and
   the largest free memory.
3. The first op of a colocation group scheduled decides the group's device; the rest
   of the group may only go there.  Groups fixed by an earlier placement stay.
4. Op times and transfer times come from ``cost_model`` (default
   :class:`core.costs.StaticCostModel`, the one the simulator uses by default).
5. Deterministic: the same graph and cluster give the same placement.

How (ours): the earliest start of an op only grows as other ops take the devices, so
the ready ops sit in a heap keyed by a lower bound of their start and are re-keyed
lazily when popped; the pair popped with a key no later than the heap's top is the
earliest.  :class:`ListScheduler` is the engine, shared with :mod:`placers.m_sct`.

>>> import core as tf
>>> from core.cluster import Cluster
>>> g = tf.Graph()
>>> with g.as_default():
...     a = tf.constant([[1.0] * 64] * 64, name="a")
...     b = tf.matmul(a, a, name="b")
>>> p = METFPlacer().place(g, Cluster.single_host(gpus=2))
>>> p["b"][-5:]
'GPU:0'
"""

from __future__ import annotations

import heapq

from core.costs import CostModel, StaticCostModel
from placers.base import register
from placers.cost_model import _Model
from placers.memory import MemoryLedger, SimulatorChecked, step_mask

__all__ = ["METFPlacer", "ListScheduler", "HEADROOM"]

#: The memory-aware placers' default ``headroom``: the fraction of each device kept free
#: for what ops running at once in the simulator hold beyond the placers' sequential
#: count (:mod:`placers.memory`).
HEADROOM = 0.1


class ListScheduler:
    """Earliest-task-first list scheduling with a memory ledger, over resolved
    constraints (see the module's contract).

    ``fetches``: the step whose ops hold memory (default: every op); ``capacity``:
    bytes per device (default: their ``memory_bytes``); ``kept_whole``, ``schedule``:
    as :class:`placers.memory.MemoryLedger`'s.
    ``favorite_parent[i]`` (optional, op index or -1): op ``i`` goes to that op's
    device when it may and fits there (m-SCT's rule).  After :meth:`run`,
    ``device[i]`` and ``finish[i]`` hold each op's device index and end, ``makespan``
    the schedule's length.
    """

    def __init__(self, constraints, cost_model: CostModel | None = None,
                 headroom: float = 0.0, favorite_parent: list[int] | None = None,
                 fetches=None, capacity: list[int] | None = None, kept_whole=(),
                 schedule: dict | None = None):
        self.constraints = constraints
        self.model = model = _Model(constraints.order, constraints.cluster,
                                    cost_model or StaticCostModel())
        self.group_of = [constraints.op_group[op.name] for op in model.ops]
        gpus = {k for k, d in enumerate(model.devices) if d.device_type == "GPU"}
        self.feasible = {}
        for g in constraints.groups:
            ks = [model.dev_index[d.name] for d in g.feasible]
            self.feasible[g.index] = [k for k in ks if k in gpus] or ks
        self.group_device = {g.index: model.dev_index[g.fixed]
                             for g in constraints.groups if g.fixed is not None}
        capacity = capacity or [d.memory_bytes for d in model.devices]
        self.ledger = MemoryLedger(model, capacity, self.group_of, headroom,
                                   step_mask(model, fetches), self.feasible, kept_whole,
                                   schedule)
        self.favorite_parent = favorite_parent
        n = len(model.ops)
        self.device = [-1] * n
        self.finish = [0.0] * n
        self.makespan = 0.0

    def candidates(self, i: int) -> list[int]:
        """The devices op ``i`` may go to, before memory."""
        g = self.group_of[i]
        k = self.group_device.get(g)
        if k is not None:
            return [k]
        if self.favorite_parent is not None:
            j = self.favorite_parent[i]
            k = self.device[j] if j >= 0 else -1
            if k >= 0 and k in self.feasible[g] and self.ledger.fits(i, k):
                return [k]
        return self.feasible[g]

    def arrival(self, i: int, k: int) -> float:
        """When every input of op ``i`` (scheduled already) is available on ``k``."""
        model, device, finish = self.model, self.device, self.finish
        start = 0.0
        for j in model.preds[i]:
            if finish[j] > start:
                start = finish[j]
        for j, _, nbytes in self.ledger.tensors[i]:
            src = device[j]
            if src != k:
                arrival = finish[j] + model.transfer_time(nbytes, src, k)
                if arrival > start:
                    start = arrival
        return start

    def run(self) -> list[int]:
        """Schedule every op; returns the device index of each (model order).

        One heap per device of the ready ops that may go there, keyed by their inputs'
        arrival on it (fixed once the op is ready): the earliest start on device ``k``
        is ``max(first free thread, first arrival)``, so each step compares one entry
        per device (ties: the earlier arrival, then topological order, then the device
        first in the cluster's order).
        """
        model, ledger, device = self.model, self.ledger, self.device
        n = len(model.ops)
        slots = [[0.0] * max(1, d.inter_op_threads) for d in model.devices]
        free = [0.0] * len(model.devices)
        heaps: list[list] = [[] for _ in model.devices]
        blocked: list[tuple[int, int]] = []  # (op, device) that did not fit there
        pending = [len(p) for p in model.preds]

        def make_ready(i):
            for k in self.candidates(i):
                heapq.heappush(heaps[k], (self.arrival(i, k), i))

        for i in range(n):
            if pending[i] == 0:
                make_ready(i)
        done = 0
        while done < n:
            for k, heap in enumerate(heaps):
                while heap:  # drop entries of ops placed, or whose group went elsewhere
                    i = heap[0][1]
                    gk = self.group_device.get(self.group_of[i])
                    if device[i] < 0 and (gk is None or gk == k):
                        break
                    heapq.heappop(heap)
                    if device[i] < 0 and gk is not None:  # (a valid entry there)
                        heapq.heappush(heaps[gk], (self.arrival(i, gk), i))
            best = None
            for k, heap in enumerate(heaps):
                if heap:
                    arrival, i = heap[0]
                    key = (max(arrival, free[k]), arrival, i, k)
                    if best is None or key < best:
                        best = key
            if best is None:  # every ready op waits for memory: the room kept is let go
                if not blocked:
                    raise RuntimeError("list scheduling stalled with no ready op")  # a cycle
                best = self._unblock(blocked, free)
            else:
                heapq.heappop(heaps[best[3]])
            start, _, i, k = best[:4]
            if not ledger.fits(i, k, relaxed=len(best) > 4):  # wait until memory is freed
                blocked.append((i, k))
                continue
            end = start + model.op_time(i, k)
            s = slots[k]
            s[s.index(min(s))] = end
            free[k] = min(s)
            ledger.commit(i, k)
            device[i], self.finish[i] = k, end
            self.group_device.setdefault(self.group_of[i], k)
            self.makespan = max(self.makespan, end)
            done += 1
            if blocked:  # memory was freed: the waiting ops try again
                for b, bk in blocked:
                    if device[b] < 0:
                        heapq.heappush(heaps[bk], (self.arrival(b, bk), b))
                blocked = []
            for c in model.consumers[i]:
                pending[c] -= 1
                if pending[c] == 0:
                    make_ready(c)
        return device

    def _unblock(self, blocked, free) -> tuple:
        """The first of the ``blocked`` ``(op, device)`` pairs that fits there with no
        room kept for what is to come (:meth:`MemoryLedger.fits`, ``relaxed``), as a
        schedule key (with a fifth item: relaxed); else the error of the first."""
        for i, k in blocked:
            gk = self.group_device.get(self.group_of[i])
            if self.device[i] < 0 and gk in (None, k) and self.ledger.fits(i, k, relaxed=True):
                arrival = self.arrival(i, k)
                return (max(arrival, free[k]), arrival, i, k, True)
        i, k = blocked[0]
        g = self.group_of[i]
        raise self.ledger.fail(i, [self.group_device[g]] if g in self.group_device
                               else self.feasible[g], self.constraints.groups[g].ops)

    def chosen(self) -> dict:
        """``{group index: device}`` for the groups not fixed earlier."""
        out = {}
        for i, k in enumerate(self.device):
            out.setdefault(self.group_of[i], self.model.devices[k])
        return out


@register("m_etf")
class METFPlacer(SimulatorChecked):
    """Baechi's m-ETF: earliest-task-first placement within each device's memory (see
    the module's contract).

    Parameters
    ----------
    cost_model : op and transfer times (default :class:`core.costs.StaticCostModel`).
    headroom : the fraction of each device's memory left free for what the simulator's
        concurrent run holds beyond the sequential count.
    fetches : the step the placement is for (ops or tensors): only its ops hold memory,
        as in the simulator (default: every op, the initialisers' constants too).
    check_memory : check the placement's memory on the simulator and place again where
        it runs out (:class:`placers.memory.SimulatorChecked`).

    After :meth:`place`, ``estimated_step_time`` holds the schedule's makespan.
    """

    def __init__(self, cost_model: CostModel | None = None, headroom: float = HEADROOM,
                 fetches=None, check_memory: bool = True, **options):
        super().__init__(**options)
        self.fetches = fetches
        self.check_memory = check_memory
        self.cost_model = cost_model
        self.headroom = headroom
        self.estimated_step_time: float | None = None

    def choose(self, constraints):
        scheduler = ListScheduler(constraints, self.cost_model, self.headroom, fetches=self.fetches,
                                  capacity=self.capacities(constraints.cluster.devices),
                                  kept_whole=self.kept_whole(), schedule=self.schedule())
        self._ledger = scheduler.ledger
        scheduler.run()
        self.estimated_step_time = scheduler.makespan
        return scheduler.chosen()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(headroom={self.headroom})"
