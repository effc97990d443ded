"""Op and transfer times for one run, computed once before time 0 and checked.

A graph of 100k ops has a handful of distinct (op type, device, tensor specs,
attributes) signatures, and :class:`core.costs.StaticCostModel` depends only on those,
so it is called once per signature (its roofline arithmetic costs ~5 us an op).  Other
cost models (a measured model keys by op name) are called for every op.  Transfer times
are memoised per (source device, destination device, bytes) for every model, as the
base :meth:`core.costs.CostModel.transfer_time` depends only on bytes and route.

>>> import core as tf
>>> from core.cluster import Cluster
>>> from core.placement import Placement
>>> from core.dataflow import StepPlan
>>> g = tf.Graph()
>>> with g.as_default():
...     a = tf.constant([[1.0] * 8] * 8, name="a")
...     b = tf.matmul(a, a, name="b")
>>> dev = Cluster.single_host().devices[0]
>>> plan = StepPlan.build(g.get_operations(), Placement({"a": dev.name, "b": dev.name}))
>>> times = op_durations(plan, [dev], StaticCostModel())
>>> times == [StaticCostModel().op_time(op, dev) for op in g.get_operations()]
True
"""

from __future__ import annotations

import math
from functools import partial
from operator import attrgetter

import numpy as np

from core.costs import CostModel, StaticCostModel
from core.ops import get_op_def
from sim.errors import InvalidCost

__all__ = ["op_durations", "multithreaded", "transfer_durations"]

_spec_of = attrgetter("dtype", "shape")
_specs = partial(map, _spec_of)


def _valid(t) -> bool:
    return isinstance(t, (int, float)) and 0 <= t < math.inf


def op_durations(plan, devices, cost_model: CostModel) -> list[float]:
    """``cost_model.op_time(op, device)`` of every op of ``plan`` on its device (a list
    of floats, op order).  Raises :class:`sim.InvalidCost` for a negative, infinite or
    non-numeric time."""
    ops, op_device = plan.ops, plan.op_device
    op_time = cost_model.op_time
    if type(cost_model) is not StaticCostModel:
        times = [op_time(op, devices[d]) for op, d in zip(ops, op_device)]
        for op, d, t in zip(ops, op_device, times):
            if not _valid(t):
                raise InvalidCost(op.name, devices[d].name, t)
        return [float(t) for t in times]
    # The signature of each op, built with C-level maps (no Python call per op).
    # Attributes keep their insertion order: two orders of equal attributes only cost
    # a second computation.
    keys = zip(map(attrgetter("type"), ops), op_device,
               map(tuple, map(_specs, map(attrgetter("inputs"), ops))),
               map(tuple, map(_specs, map(attrgetter("outputs"), ops))),
               map(tuple, map(dict.items, map(attrgetter("attrs"), ops))))
    memo: dict = {}
    out = []
    append = out.append
    for key, op in zip(keys, ops):
        try:
            t = memo[key]
        except KeyError:
            t = memo[key] = _checked(op, devices[key[1]], op_time)
        except TypeError:  # an unhashable attribute (a Const's value): no memo
            t = _checked(op, devices[key[1]], op_time)
        append(t)
    return out


def _checked(op, device, op_time) -> float:
    t = op_time(op, device)
    if not _valid(t):
        raise InvalidCost(op.name, device.name, t)
    return float(t)


def multithreaded(plan, devices) -> list[bool]:
    """Whether each op's kernel spreads over its device's host cores (a multithreaded
    kernel on a CPU device with more than one intra-op thread)."""
    spread = [dev.is_cpu and dev.intra_op_threads > 1 for dev in devices]
    types = list(map(attrgetter("type"), plan.ops))
    by_type = {t: get_op_def(t).multithreaded for t in set(types)}
    return [spread[d] and by_type[t] for t, d in zip(types, plan.op_device)]


def transfer_durations(plan, routes: dict, cost_model: CostModel) -> list[float]:
    """``cost_model.transfer_time(bytes, route)`` of every transfer of ``plan``;
    ``routes`` maps ``(src, dst)`` device indices to the route's links."""
    m = plan.n_transfers
    if not m:
        return []
    src = np.asarray(plan.transfer_src, dtype=np.int64)
    dst = np.asarray(plan.transfer_dst, dtype=np.int64)
    nbytes = np.asarray(plan.tensor_bytes, dtype=np.int64)[np.asarray(plan.transfer_tensor)]
    n_dev = len(plan.devices)
    # Distinct (route, bytes): compute each once.
    sizes, size_id = np.unique(nbytes, return_inverse=True)
    cases, first, which = np.unique((src * n_dev + dst) * len(sizes) + size_id.reshape(-1),
                                    return_index=True, return_inverse=True)
    times = [0.0] * len(cases)
    for c in np.argsort(first, kind="stable"):  # transfer order: the first bad one is named
        pair, size = divmod(int(cases[c]), len(sizes))
        size = int(sizes[size])
        t = float(cost_model.transfer_time(size, routes[divmod(pair, n_dev)]))
        if not 0 <= t < math.inf:
            k = int(first[c])
            raise InvalidCost(plan.tensor_name(plan.transfer_tensor[k]),
                              plan.devices[plan.transfer_dst[k]], t)
        times[c] = t
    return np.asarray(times)[which.reshape(-1)].tolist()
