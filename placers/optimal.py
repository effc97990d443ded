"""optimal: the exact minimum of the simulated step, for small graphs; an integer
program with a proven gap for larger ones.

    Branch and bound over group-to-device assignments, scored by the simulator, as
    exact placement is computed in Hafeez et al., "Pesto" (Middleware 2021) and
    Tarnawski et al., "Efficient Algorithms for Device Placement of DNN Graph
    Operators" (NeurIPS 2020), whose integer program (placement plus scheduling with
    communication delays) the large-graph mode follows in a reduced form.

Contract (numbered as TensorFlow's ``placer.h``; :mod:`placers.base` holds the rest):

1. With at most ``max_groups`` colocation groups free to move (more than one feasible
   device), every assignment is covered by a depth-first branch and bound and the
   one of least ``objective`` is returned (ties: the first in the search order).  So
   its objective equals the minimum over all placements that respect the constraints.
2. Pruning: a partial assignment whose lower bound is at least the best objective
   found is cut.  The bound is the larger of the critical path (assigned ops at their
   device's time, the others at their fastest feasible time, no transfers) and the
   busiest device's work per inter-op thread: the simulator never predicts less (its
   property tests hold this), so with the default objective the cut loses nothing.
   With another objective pass ``bound=False`` unless it also never goes below.
3. Devices that are interchangeable (same task, type and figures, and routes of the
   same figures) are tried in one canonical order: the first group to use a device of
   such a class uses its lowest unused one.
4. The search starts from the best of m_etf, m_topo, cost_model and simple by the
   objective, and stops past ``time_limit`` seconds or ``max_evaluations`` simulations
   with :class:`OptimalLimitError`, which names the limit and points to ``search``.
5. Past ``max_groups``: a mixed-integer program (``scipy.optimize.milp``, HiGHS) of
   placement (a binary per group and device) and scheduling with communication delays
   (start times; a data edge across devices delays its consumer by the transfer; the
   step at least every op's end and every device's work per thread), with the
   variables' bytes within each device's memory, solved within ``time_limit``.  The
   program is a relaxation of the simulated step, so its answer is scored by the
   objective beside the heuristics' placements and the best is returned
   (``report["chosen"]``, ``report["simulated"]``).  The program's proven gap is
   reported in ``report["gap"]``; no solution in time raises
   :class:`OptimalLimitError`.  Graphs over ``milp_max_ops`` ops raise it at once.
6. ``report`` holds ``method``, ``objective``, ``evaluations`` (or the MILP's
   ``gap``), ``seconds``.

>>> import core as tf
>>> from core.cluster import Cluster
>>> g = tf.Graph()
>>> with g.as_default():
...     a = tf.constant([[1.0] * 128] * 128, name="a")
...     b = tf.matmul(a, a, name="b")
...     c = tf.matmul(a, a, name="c")
>>> placer = OptimalPlacer()
>>> p = placer.place(g, Cluster.single_host(gpus=2))
>>> placer.report["method"], len({p["b"], p["c"]}) >= 1
('branch_and_bound', True)
"""

from __future__ import annotations

import math
import time

from core.costs import CostModel, StaticCostModel
from core.placement import Placement, PlacementError
from placers.base import BasePlacer, get, register
from placers.cost_model import _Model
from placers.memory import step_mask
from placers.objective import Objective, step_objective

__all__ = ["OptimalPlacer", "OptimalLimitError"]


class OptimalLimitError(RuntimeError):
    """The exact search or the integer program did not finish within its limit."""


def _device_classes(model, feasible: list[list[int]]) -> list[int]:
    """For each device index, the first device interchangeable with it (contract 3):
    same figures and routes, and in the feasible set of the same groups."""
    sets = [set(ks) for ks in feasible]

    def figures(k):
        d = model.devices[k]
        routes = tuple(sorted(tuple((l.latency, l.bandwidth) for l in model.route(k, o))
                              for o in range(len(model.devices)) if o != k))
        return (d.job, d.task, d.device_type, d.peak_flops, d.mem_bandwidth, d.memory_bytes,
                d.inter_op_threads, d.intra_op_threads, d.intra_op_speedup, d.op_overhead,
                d.kernel_costs, d.bandwidth_curve, d.window_copy_costs, d.alloc_costs, routes,
                tuple(k in fs for fs in sets))
    first: dict = {}
    return [first.setdefault(figures(k), k) for k in range(len(model.devices))]


@register("optimal")
class OptimalPlacer(BasePlacer):
    """The placement of least simulated step (see the module's contract).

    Parameters
    ----------
    objective : ``objective(graph, placement, cluster) -> seconds`` (default: the
        simulator's step of ``fetches``).
    fetches : the step (default: every op).
    cost_model : op and transfer times of the bound and of the integer program.
    max_groups : the most free groups searched exactly (else the integer program).
    time_limit, max_evaluations : the exact search's limits (time also the MILP's).
    bound : prune with the lower bound (contract 2).
    milp_max_ops : the largest graph the integer program is built for.
    """

    def __init__(self, objective: Objective | None = None, fetches=None,
                 cost_model: CostModel | None = None, max_groups: int = 12,
                 time_limit: float = 60.0, max_evaluations: int = 200_000, bound: bool = True,
                 milp_max_ops: int = 3000, **options):
        super().__init__(**options)
        self.objective, self.fetches = objective, fetches
        self.cost_model = cost_model or StaticCostModel()
        self.max_groups, self.time_limit = max_groups, time_limit
        self.max_evaluations, self.bound, self.milp_max_ops = max_evaluations, bound, milp_max_ops
        self.report: dict = {}

    def choose(self, constraints):
        t0 = time.perf_counter()
        model = _Model(constraints.order, constraints.cluster, self.cost_model)
        groups = constraints.to_place()
        free = [g for g in groups if len(g.feasible) > 1]
        if len(free) <= self.max_groups:
            state = self._branch_and_bound(constraints, model, groups, t0)
        else:
            if len(model.ops) > self.milp_max_ops:
                raise OptimalLimitError(
                    f"optimal: {len(free)} free colocation groups (exact search up to "
                    f"max_groups={self.max_groups}) and {len(model.ops)} ops (integer program "
                    f"up to milp_max_ops={self.milp_max_ops}): use the 'search' placer")
            from placers.optimal_milp import solve_placement_milp
            state, self.report = solve_placement_milp(constraints, model, groups, self.fetches,
                                                      self.time_limit)
            # The program is a relaxation: its answer is scored by the objective beside
            # the heuristics' (so never worse than them), and the best is kept.
            evaluate, starts = self._scoring(constraints, model, groups)
            scored = [("milp", evaluate(state), state)] + [
                (name, evaluate(s), s) for name, s in starts]
            name, value, state = min(scored, key=lambda t: t[1])
            self.report.update(simulated=value, chosen=name)
        self.report["seconds"] = time.perf_counter() - t0
        return {g.index: model.devices[k] for g, k in zip(groups, state)}

    def _scoring(self, constraints, model, groups):
        """``(evaluate(state) -> objective, [(heuristic, state)])``: the objective of a
        state (a device index per group of ``groups``), and the heuristics' placements
        that respect the constraints (m_etf, m_topo, cost_model, simple)."""
        objective = step_objective(self.objective, self.fetches)
        graph, previous = constraints.graph, constraints.previous
        kept = previous.to_dict()
        fixed_ops = [(op.name, g.fixed) for g in constraints.groups if g.fixed is not None
                     for op in g.ops if op.name not in kept]
        names = [d.name for d in model.devices]
        order_names = [op.name for op in graph.get_operations()]

        def evaluate(state) -> float:
            new = dict(fixed_ops)
            for g, k in zip(groups, state):
                for op in g.ops:
                    new[op.name] = names[k]
            return float(objective(graph, Placement(list(previous.items()) + [
                (n, new[n]) for n in order_names if n in new]), constraints.cluster))

        feasible = [[model.dev_index[d.name] for d in g.feasible] for g in groups]
        starts = []
        for name in ("m_etf", "m_topo", "cost_model", "simple"):
            options = {"fetches": self.fetches} if name.startswith("m_") else {}
            try:
                p = get(name, allow_soft_placement=self.allow_soft_placement, **options).place(
                    graph, constraints.cluster, previous=previous)
            except PlacementError:
                continue
            state = [model.dev_index[p[g.ops[0].name]] for g in groups]
            if all(k in ks for k, ks in zip(state, feasible)):
                starts.append((name, state))
        return evaluate, starts

    # -- exact search -------------------------------------------------------------------
    def _branch_and_bound(self, constraints, model, groups, t0) -> list[int]:
        evaluate, starts = self._scoring(constraints, model, groups)
        feasible = [[model.dev_index[d.name] for d in g.feasible] for g in groups]
        index_of = {g.index: i for i, g in enumerate(groups)}
        op_group = [index_of.get(constraints.op_group[op.name], -1) for op in model.ops]
        fixed_dev = [model.dev_index[constraints.groups[constraints.op_group[op.name]].fixed]
                     if op_group[i] < 0 else -1 for i, op in enumerate(model.ops)]
        step = step_mask(model, self.fetches) or [True] * len(model.ops)
        bound = _Bound(model, op_group, fixed_dev, feasible, step)
        # Incumbent: the best heuristic placement that respects the constraints.
        best_state, best = None, math.inf
        for _, state in starts:
            value = evaluate(state)
            if value < best:
                best_state, best = state, value
        # Search the heaviest groups first: their choice moves the bound most.
        work = [0.0] * len(groups)
        for i, g in enumerate(op_group):
            if g >= 0 and step[i]:
                work[g] += min(model.op_time(i, k) for k in feasible[g])
        order = sorted(range(len(groups)), key=lambda g: (-work[g], g))
        classes = _device_classes(model, feasible)
        assign = [-1] * len(groups)
        evaluations = 0
        limit_hit = None

        def dfs(depth: int, used: frozenset):
            nonlocal best, best_state, evaluations, limit_hit
            if limit_hit:
                return
            if depth == len(order):
                evaluations += 1
                if evaluations > self.max_evaluations:
                    limit_hit = f"max_evaluations={self.max_evaluations}"
                    return
                if time.perf_counter() - t0 > self.time_limit:
                    limit_hit = f"time_limit={self.time_limit:g} s"
                    return
                value = evaluate(assign)
                if value < best:
                    best, best_state = value, list(assign)
                return
            g = order[depth]
            tried_class = set()
            for k in feasible[g]:
                c = classes[k]
                if k not in used:  # an unused device: only the first of its class
                    if c in tried_class:
                        continue
                    tried_class.add(c)
                assign[g] = k
                if self.bound and bound.lower(assign) >= best:
                    continue
                dfs(depth + 1, used | {k})
            assign[g] = -1

        used0 = frozenset(k for k in fixed_dev if k >= 0)
        dfs(0, used0)
        if limit_hit:
            raise OptimalLimitError(
                f"optimal: the exact search over {len(groups)} groups stopped at {limit_hit} "
                f"after {evaluations - 1} simulations (best so far {best:.6g} s); raise the "
                f"limit, or use the 'search' placer for a good placement without the proof")
        if best_state is None:
            raise PlacementError(groups[0].ops[0].name, None,
                                 "no placement within the constraints fits in memory")
        self.report = {"method": "branch_and_bound", "objective": best,
                       "evaluations": evaluations}
        return best_state

    def __repr__(self) -> str:
        return f"{type(self).__name__}(max_groups={self.max_groups})"


class _Bound:
    """The lower bound of contract 2 for a partial assignment of the free groups."""

    def __init__(self, model, op_group, fixed_dev, feasible, step):
        self.model, self.op_group, self.fixed_dev, self.step = model, op_group, fixed_dev, step
        n = len(model.ops)
        self.fastest = [0.0] * n
        for i in range(n):
            if step[i]:
                ks = feasible[op_group[i]] if op_group[i] >= 0 else [fixed_dev[i]]
                self.fastest[i] = min(model.op_time(i, k) for k in ks)
        self.threads = [max(1, d.inter_op_threads) for d in model.devices]

    def lower(self, assign) -> float:
        model, step = self.model, self.step
        n = len(model.ops)
        finish = [0.0] * n
        load = [0.0] * len(model.devices)
        longest = 0.0
        for i in range(n):
            start = 0.0
            for j in model.preds[i]:
                if finish[j] > start:
                    start = finish[j]
            if not step[i]:
                finish[i] = start
                continue
            g = self.op_group[i]
            k = self.fixed_dev[i] if g < 0 else assign[g]
            d = model.op_time(i, k) if k >= 0 else self.fastest[i]
            if k >= 0:
                load[k] += d
            finish[i] = start + d
            if finish[i] > longest:
                longest = finish[i]
        busiest = max((l / t for l, t in zip(load, self.threads)), default=0.0)
        return max(longest, busiest)
