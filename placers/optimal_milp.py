"""The integer program of :mod:`placers.optimal` for graphs past its exact search
(contract item 5 there): placement and scheduling with communication delays.

Variables: ``x[g, k]`` (binary: group ``g`` on device ``k``, for ``k`` feasible), a
start ``s_i`` per op of the step, ``z_e`` per data edge across groups (at least the
difference of the two ends' ``x`` on any device: 1 when they are apart), the step ``w``.
Constraints: each group on one device; ``s_j >= s_i + p_i + c_e z_e`` for every edge
(``p_i = sum_k p_ik x[g_i, k]``, ``c_e`` the edge's transfer time over the slowest
route between the devices in play); ``w >= s_i + p_i``; ``w >= `` each device's work per
inter-op thread; the variables' bytes within each device's memory.  Ops sharing a
device are not sequenced pairwise (the load bound stands in), so the program is a
relaxation of the step, and the simulator scores its answer.  Minimise ``w`` with
HiGHS (``scipy.optimize.milp``) within a time limit; the proven gap is reported.

>>> import core as tf, placers
>>> from core.cluster import Cluster
>>> g = tf.Graph()
>>> with g.as_default():
...     a = tf.constant([[1.0] * 64] * 64, name="a")
...     b = tf.matmul(a, a, name="b")
>>> placer = placers.get("optimal", max_groups=0)
>>> _ = placer.place(g, Cluster.single_host(gpus=2))
>>> placer.report["method"], placer.report["gap"] <= 1e-6
('milp', True)
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_matrix

from core.costs import tensor_bytes
from placers.memory import step_mask

__all__ = ["solve_placement_milp"]


def solve_placement_milp(constraints, model, groups, fetches, time_limit: float):
    """``(state, report)``: the device index of each of ``groups`` and the solver's
    report (``method``, ``objective``, ``lower_bound``, ``gap``).  Raises
    :class:`placers.optimal.OptimalLimitError` when HiGHS finds no solution in time."""
    from placers.optimal import OptimalLimitError
    n = len(model.ops)
    step = step_mask(model, fetches) or [True] * n
    op_group = [constraints.op_group[op.name] for op in model.ops]
    feasible = {g.index: [model.dev_index[d.name] for d in g.feasible] for g in constraints.groups}
    # Variable layout: x (per group and feasible device), s (per op), z (per edge), w.
    x_index: dict[tuple[int, int], int] = {}
    for g in constraints.groups:
        for k in feasible[g.index]:
            x_index[(g.index, k)] = len(x_index)
    nx = len(x_index)
    s0 = nx
    edges = []
    for j in range(n):
        if step[j]:
            for i in sorted({i for i, _ in model.data_inputs[j]}):
                if op_group[i] != op_group[j]:
                    nbytes = sum(tensor_bytes(t) for i2, t in model.data_inputs[j] if i2 == i)
                    edges.append((i, j, nbytes))
    z0 = s0 + n
    w = z0 + len(edges)
    nvar = w + 1
    devices = sorted({k for ks in feasible.values() for k in ks})
    pairs = [(a, b) for a in devices for b in devices if a != b]
    rows, cols, vals, lo, hi = [], [], [], [], []
    r = 0

    def row(entries, lower, upper):
        nonlocal r
        for c, v in entries:
            rows.append(r)
            cols.append(c)
            vals.append(v)
        lo.append(lower)
        hi.append(upper)
        r += 1

    for g in constraints.groups:  # one device per group
        row([(x_index[(g.index, k)], 1.0) for k in feasible[g.index]], 1.0, 1.0)

    def duration(i):  # p_i as a linear expression of x
        g = op_group[i]
        return [(x_index[(g, k)], model.op_time(i, k)) for k in feasible[g]]

    for j in range(n):  # precedence (control and same-group edges: no delay)
        if not step[j]:
            continue
        for i in model.preds[j]:
            if step[i]:
                row([(s0 + j, 1.0), (s0 + i, -1.0)] + [(c, -v) for c, v in duration(i)], 0, np.inf)
    for e, (i, j, nbytes) in enumerate(edges):
        c = max((model.transfer_time(nbytes, a, b) for a, b in pairs), default=0.0)
        row([(s0 + j, 1.0), (s0 + i, -1.0), (z0 + e, -c)] + [(cc, -v) for cc, v in duration(i)],
            0, np.inf)
        gi, gj = op_group[i], op_group[j]
        for k in feasible[gi]:  # z >= x[gi, k] - x[gj, k]
            entries = [(z0 + e, 1.0), (x_index[(gi, k)], -1.0)]
            if (gj, k) in x_index:
                entries.append((x_index[(gj, k)], 1.0))
            row(entries, 0, np.inf)
    for i in range(n):  # the step ends after every op
        if step[i]:
            row([(w, 1.0), (s0 + i, -1.0)] + [(c, -v) for c, v in duration(i)], 0, np.inf)
    for k in devices:  # ... and after every device's work per thread
        threads = max(1, model.devices[k].inter_op_threads)
        entries = [(x_index[(op_group[i], k)], -model.op_time(i, k) / threads)
                   for i in range(n) if step[i] and (op_group[i], k) in x_index]
        if entries:
            row([(w, 1.0)] + entries, 0, np.inf)
        resident = {}
        for i in range(n):
            if step[i] and model.persistent[i] and (op_group[i], k) in x_index:
                key = x_index[(op_group[i], k)]
                resident[key] = resident.get(key, 0.0) + model.out_bytes[i]
        if resident:
            row(list(resident.items()), -np.inf, float(model.devices[k].memory_bytes))
    a = coo_matrix((vals, (rows, cols)), shape=(r, nvar)).tocsr()
    cost = np.zeros(nvar)
    cost[w] = 1.0
    integrality = np.zeros(nvar)
    integrality[:nx] = 1
    upper = np.full(nvar, np.inf)
    upper[:nx] = 1.0
    upper[z0:w] = 1.0
    result = milp(cost, constraints=LinearConstraint(a, lo, hi), integrality=integrality,
                  bounds=Bounds(np.zeros(nvar), upper),
                  options={"time_limit": float(time_limit), "disp": False})
    if result.x is None:
        raise OptimalLimitError(
            f"optimal: the integer program ({nvar} variables, {r} constraints) found no "
            f"solution within time_limit={time_limit:g} s ({result.message}); raise "
            f"time_limit or use the 'search' placer")
    state = [max(feasible[g.index], key=lambda k: result.x[x_index[(g.index, k)]])
             for g in groups]
    gap = float(getattr(result, "mip_gap", 0.0) or 0.0)
    report = {"method": "milp", "objective": float(result.fun), "gap": gap,
              "lower_bound": float(getattr(result, "mip_dual_bound", result.fun)),
              "optimal": result.status == 0}
    return state, report
