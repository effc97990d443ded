"""m-SCT: memory-constrained small-communication-time placement (Baechi).

    Jeon, Ahn, Kim, Bae, Gupta, "Baechi: Fast Device Placement of Machine Learning
    Graphs", ACM SoCC 2020, section 4.3 ("m-SCT"); SCT's relaxation and favorite
    children are from Hanen and Munier, "An approximation algorithm for scheduling
    dependent tasks on m processors with small communication delays", Discrete Applied
    Mathematics 108(3), 2001.

Contract (numbered as TensorFlow's ``placer.h``; :mod:`placers.base` holds the rest):

1. A linear program (the relaxation of scheduling with communication delays on
   unboundedly many devices) is solved with HiGHS's dual simplex
   (``scipy.optimize.linprog``), per window of ``lp_window`` ops of the topological
   order (edges across windows left out: ours, since HiGHS's time grows faster than
   the graph, and a favorite child is a local choice): start
   times ``s``, and per data edge ``(i, j)`` across colocation groups a fraction
   ``x_ij`` in [0, 1] of its communication time paid; ``s_i + p_i + c_ij x_ij <= s_j``;
   each op keeps at most one child and one parent free of communication
   (``sum_j x_ij >= out_degree(i) - 1``, ``sum_i x_ij >= in_degree(j) - 1``); minimise
   the makespan.  ``p_i`` is the op's fastest time over its feasible devices, ``c_ij``
   the transfer time of the edge's bytes over the slowest route among the devices.
2. Rounding: ``x_ij < 1/2`` makes ``j`` the *favorite child* of ``i`` (and ``i`` its
   favorite parent); each op has at most one of each (the lowest ``x``, ties in
   topological order).
3. Then m-ETF's list scheduling (:class:`placers.m_etf.ListScheduler`, memory as the
   simulator counts it) with SCT's rule: an op goes to its favorite parent's device
   when it may and fits there, else to the earliest start, as m-ETF.
4. Errors, colocation and determinism as m-ETF's contract.
5. Windows HiGHS cannot solve within ``lp_time_limit`` seconds (in all) leave their
   ops without favorites, as m-ETF places them (``favorites`` says how many were
   found).

>>> import core as tf
>>> from core.cluster import Cluster
>>> g = tf.Graph()
>>> with g.as_default():
...     a = tf.constant([[1.0] * 256] * 256, name="a")
...     b = tf.matmul(a, a, name="b")
...     c = tf.relu(b, name="c")
>>> placer = MSCTPlacer()
>>> p = placer.place(g, Cluster.single_host(gpus=2))
>>> p["b"] == p["c"], placer.favorites
(True, 2)
"""

from __future__ import annotations

import time

import numpy as np

from core.costs import CostModel, tensor_bytes
from placers.base import register
from placers.m_etf import HEADROOM, ListScheduler
from placers.memory import SimulatorChecked

__all__ = ["MSCTPlacer", "favorite_parents"]


def favorite_parents(scheduler: ListScheduler, time_limit: float = 20.0,
                     window: int = 500) -> list[int]:
    """Each op's favorite parent (op index, -1 for none) from SCT's linear program over
    ``scheduler``'s model (see the module's contract, items 1 and 2), solved per
    ``window`` ops of the topological order (``time_limit`` seconds in all)."""
    model, group_of, feasible = scheduler.model, scheduler.group_of, scheduler.feasible
    n = len(model.ops)
    favorite = [-1] * n
    devices = sorted({k for ks in feasible.values() for k in ks})
    pairs = [(a, b) for a in devices for b in devices if a != b]
    if not pairs:
        return favorite
    slowest = max(pairs, key=lambda ab: model.transfer_time(1 << 20, *ab))
    p = np.array([min(model.op_time(i, k) for k in feasible[group_of[i]]) for i in range(n)])
    deadline = time.perf_counter() + time_limit
    for lo in range(0, n, window):
        left = deadline - time.perf_counter()
        if left <= 0:
            break
        hi = min(n, lo + window)
        edges, x = _window_lp(scheduler, lo, hi, p, slowest, left)
        has_child: set = set()
        for e in sorted(range(len(edges)), key=lambda e: (x[e], edges[e])):
            i, j = edges[e]
            if x[e] >= 0.5:
                break
            if i in has_child or favorite[j] >= 0:
                continue  # one favorite child per parent, one favorite parent per child
            has_child.add(i)
            favorite[j] = i
    return favorite


def _window_lp(scheduler, lo: int, hi: int, p, slowest, time_limit: float):
    """SCT's relaxation over ops ``lo..hi-1`` (edges inside the window): the edges and
    their ``x`` (empty when HiGHS finds no solution in time)."""
    # (scipy's solvers load only when an LP is solved: importing them costs every process
    # that imports the placers, the runtime's servers included, a third of a second)
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix
    model, group_of = scheduler.model, scheduler.group_of
    n = hi - lo
    edge_bytes: dict[tuple[int, int], int] = {}
    for j in range(lo, hi):
        for i, _, nbytes in scheduler.ledger.tensors[j]:
            if i >= lo and group_of[i] != group_of[j]:
                edge_bytes[(i, j)] = edge_bytes.get((i, j), 0) + nbytes
    edges = sorted(edge_bytes)
    m = len(edges)
    if m == 0:
        return [], []
    c = [model.transfer_time(edge_bytes[e], *slowest) for e in edges]
    # Variables: s (one per op of the window), x (one per edge), w.
    rows, cols, vals, rhs = [], [], [], []
    r = 0
    for e, (i, j) in enumerate(edges):  # s_i - s_j + c x <= -p_i
        rows += [r, r, r]
        cols += [i - lo, j - lo, n + e]
        vals += [1.0, -1.0, c[e]]
        rhs.append(-p[i])
        r += 1
    for i in range(lo, hi):  # s_i - w <= -p_i
        rows += [r, r]
        cols += [i - lo, n + m]
        vals += [1.0, -1.0]
        rhs.append(-p[i])
        r += 1
    out_edges: dict[int, list[int]] = {}
    in_edges: dict[int, list[int]] = {}
    for e, (i, j) in enumerate(edges):
        out_edges.setdefault(i, []).append(e)
        in_edges.setdefault(j, []).append(e)
    for by_op in (out_edges, in_edges):  # -sum x <= 1 - degree
        for es in by_op.values():
            if len(es) > 1:
                rows += [r] * len(es)
                cols += [n + e for e in es]
                vals += [-1.0] * len(es)
                rhs.append(1.0 - len(es))
                r += 1
    a_ub = coo_matrix((vals, (rows, cols)), shape=(r, n + m + 1)).tocsr()
    cost = np.zeros(n + m + 1)
    cost[-1] = 1.0
    bounds = [(0, None)] * n + [(0, 1)] * m + [(0, None)]
    result = linprog(cost, A_ub=a_ub, b_ub=np.array(rhs), bounds=bounds, method="highs-ds",
                     options={"time_limit": float(time_limit)})
    if result.status != 0 or result.x is None:
        return [], []
    return edges, result.x[n:n + m].tolist()


@register("m_sct")
class MSCTPlacer(SimulatorChecked):
    """Baechi's m-SCT: ETF scheduling that keeps each op's favorite child (from SCT's
    linear program) on its device, within each device's memory (see the module's
    contract).

    Parameters
    ----------
    cost_model : op and transfer times (default :class:`core.costs.StaticCostModel`).
    headroom, fetches, check_memory : as m-ETF's.
    lp_time_limit : seconds HiGHS may spend on the linear programs, in all.
    lp_window : ops per linear program (a window of the topological order).

    After :meth:`place`, ``estimated_step_time`` holds the schedule's makespan and
    ``favorites`` the number of favorite-child pairs the LP gave.
    """

    def __init__(self, cost_model: CostModel | None = None, headroom: float = HEADROOM,
                 lp_time_limit: float = 20.0, lp_window: int = 500, fetches=None,
                 check_memory: bool = True, **options):
        super().__init__(**options)
        self.fetches = fetches
        self.check_memory = check_memory
        self.cost_model = cost_model
        self.headroom = headroom
        self.lp_time_limit = lp_time_limit
        self.lp_window = lp_window
        self.estimated_step_time: float | None = None
        self.favorites: int | None = None

    def choose(self, constraints):
        scheduler = ListScheduler(constraints, self.cost_model, self.headroom, fetches=self.fetches,
                                  capacity=self.capacities(constraints.cluster.devices),
                                  kept_whole=self.kept_whole(), schedule=self.schedule())
        self._ledger = scheduler.ledger
        favorite = favorite_parents(scheduler, self.lp_time_limit, self.lp_window)
        self.favorites = sum(1 for j in favorite if j >= 0)
        scheduler.favorite_parent = favorite
        scheduler.run()
        self.estimated_step_time = scheduler.makespan
        return scheduler.chosen()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(headroom={self.headroom})"
