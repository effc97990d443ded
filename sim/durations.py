"""Op and transfer times for one run, computed once before time 0 and checked.

A graph of 100k ops has a handful of distinct (op type, device, tensor specs,
attributes) signatures, and :class:`core.costs.StaticCostModel` depends only on those,
so it is called once per signature (its roofline arithmetic costs ~5 us an op); the
signatures are found by numpy over the plan's integer ids of types, tensor specs and
attributes (a Python tuple per op as the key cost ~1 us an op).  Other
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

import numpy as np

from core.costs import CostModel, StaticCostModel
from core.step_ops import dense_ids, first_positions, unique_below
from core.ops import get_op_def
from sim.errors import InvalidCost

__all__ = ["op_durations", "memory_traffic", "splitting", "same_signature",
           "transfer_durations", "checked_time"]


def _valid(t) -> bool:
    return isinstance(t, (int, float)) and 0 <= t < math.inf


def op_durations(plan, devices, cost_model: CostModel, same: np.ndarray | None = None
                 ) -> list[float]:
    """``cost_model.op_time(op, device)`` of every op of ``plan`` on its device (a list
    of floats, op order).  Raises :class:`sim.InvalidCost` for a negative, infinite or
    non-numeric time (the first such op, in op order).  ``same``: the plan's
    :func:`same_signature`, when the caller has it already."""
    ops, op_device = plan.ops, plan.op_device
    op_time = cost_model.op_time
    if type(cost_model) is not StaticCostModel or cost_model.shape_hints is not None:
        # (with shape hints an op's sizes depend on its tensors, not its signature alone)
        times = [op_time(op, devices[d]) for op, d in zip(ops, op_device)]
        for op, d, t in zip(ops, op_device, times):
            if not _valid(t):
                raise InvalidCost(op.name, devices[d].name, t)
        return [float(t) for t in times]
    # One call per signature, for its first op (in op order, so that the first op with
    # an invalid time is the one named).
    same = same_signature(plan) if same is None else same
    times = np.zeros(plan.n_ops)
    for i in first_positions(same).tolist():
        times[i] = checked_time(ops[i], devices[op_device[i]], op_time)
    return times[same].tolist()


def same_signature(plan) -> np.ndarray:
    """For each op, the first op with the same (type, device, input specs, output specs,
    attributes): what :class:`core.costs.StaticCostModel` and :meth:`OpDef.splits
    <core.opdef.OpDef.splits>` depend on (a simulation works it out once and hands it
    to each figure computed per signature).

    The parts are small integers (``plan.tensor_spec``: an id per (dtype, shape);
    ``plan.op_attr_ids``), packed into one int64 key per op by numpy, with the keys
    made dense again whenever the next part could overflow them.
    """
    n = plan.n_ops
    if not n:
        return np.zeros(0, np.int64)
    type_of = dense_ids(plan.op_type_ids)
    spec = dense_ids(plan.array("tensor_spec"))
    n_specs = int(spec.max()) + 1 if len(spec) else 1
    key = _pack(type_of, plan.array("op_device"), len(plan.devices))
    # (attribute ids are positions in the whole graph, so they may reach past n_ops)
    attr = plan.op_attr_ids
    key = _pack(key, attr, int(attr.max()) + 1)
    # Input and output specs, slot by slot, for the ops that have that slot: their new
    # keys are shifted past every current key, so they cannot meet an op without it,
    # and ops with as many slots go through the same steps, so theirs stay comparable.
    for ptr, tensors in (plan.array("csr_op_input_tensors"), _output_tensors(plan)):
        slots = np.diff(ptr)
        specs = spec[tensors]
        for slot in range(int(slots.max())):
            has = np.flatnonzero(slots > slot)
            top = int(key.max())
            key[has] = _pack(key[has], specs[ptr[has] + slot], n_specs) + (top + 1)
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    return first[inverse.reshape(-1)]


def _pack(key: np.ndarray, part: np.ndarray, size: int) -> np.ndarray:
    """``key * size + part`` (``0 <= part < size``), the keys made dense first if that
    could overflow."""
    if (int(key.max()) + 1) * size >= 2**61:
        key = np.unique(key, return_inverse=True)[1].reshape(-1)
    return key * size + part


def memory_traffic(plan, devices, cost_model: CostModel, shared,
                   same: np.ndarray | None = None) -> tuple[list, list] | None:
    """``(bytes, seconds)`` lists, in op order: what each op moves through memory and
    the part of its time that takes (:meth:`core.costs.CostModel.memory_traffic`), for
    the ops on devices whose ``shared[d]`` is set (the CPUs of hosts whose memory
    bandwidth kernels share); zero for the others.  None when no op moves any."""
    ops, op_device = plan.ops, plan.op_device
    traffic = cost_model.memory_traffic
    wanted = np.array([bool(x) for x in shared], dtype=bool)[plan.array("op_device")]
    nbytes, seconds = np.zeros(plan.n_ops, np.int64), np.zeros(plan.n_ops)
    if type(cost_model) is StaticCostModel and cost_model.shape_hints is None:
        if same is None:  # as in op_durations: once per signature
            same = same_signature(plan)
        for i in first_positions(same).tolist():
            if wanted[i]:
                nbytes[i], seconds[i] = traffic(ops[i], devices[op_device[i]])
        nbytes, seconds = nbytes[same], seconds[same]
        nbytes[~wanted] = 0
        seconds[~wanted] = 0.0
    else:
        for i in np.flatnonzero(wanted).tolist():
            nbytes[i], seconds[i] = traffic(ops[i], devices[op_device[i]])
    if not seconds.any():
        return None
    return nbytes.tolist(), seconds.tolist()


def _output_tensors(plan) -> tuple[np.ndarray, np.ndarray]:
    """The outputs of each op as ``(ptr, tensors)`` (they are consecutive tensors)."""
    return np.append(plan.array("tensor_base"), plan.n_tensors), np.arange(plan.n_tensors)


def checked_time(op, device, op_time) -> float:
    """``op_time(op, device)`` as a float; :class:`sim.InvalidCost` for a negative,
    infinite or non-numeric time."""
    t = op_time(op, device)
    if not _valid(t):
        raise InvalidCost(op.name, device.name, t)
    return float(t)


def splitting(plan, devices, cost_model: CostModel, same: np.ndarray | None = None
              ) -> np.ndarray:
    """Whether each op's kernel takes its device's intra-op pool, as a bool array: a
    CPU device with more than one intra-op thread, and a kernel that splits its work on
    the op's tensors (:meth:`core.opdef.OpDef.splits`, with the sizes ``cost_model``
    gives them and the device's ``parallel_min_elements``), as the executor decides."""
    spread = np.array([dev.is_cpu and dev.intra_op_threads > 1 for dev in devices], dtype=bool)
    first = plan.op_type_ids  # the table is read once per op type
    kernel = np.zeros(plan.n_ops, bool)
    for i in first_positions(first).tolist():
        kernel[i] = get_op_def(plan.op_types[i]).multithreaded
    device = plan.array("op_device")
    wanted = kernel[first] & spread[device]
    if not wanted.any() or not any(devices[d].parallel_min_elements > 0
                                   or not devices[d].products_split
                                   for d in np.unique(device[wanted]).tolist()):
        return wanted  # (every size may split there: no op's tensors matter)
    ops, op_device, specs = plan.ops, plan.op_device, cost_model.specs

    def splits(i):
        op, dev = ops[i], devices[op_device[i]]
        return op.op_def.splits(specs(op.inputs), specs(op.outputs), op.attrs,
                                dev.parallel_min_elements, dev.products_split)

    if cost_model.shape_hints is None:  # once per signature, as op_durations
        same = same_signature(plan) if same is None else same
        result = np.zeros(plan.n_ops, bool)
        for i in first_positions(same).tolist():
            result[i] = wanted[i] and splits(i)
        return result[same]
    return np.array([bool(w) and splits(i) for i, w in enumerate(wanted.tolist())], dtype=bool)


def transfer_durations(plan, routes: dict, cost_model: CostModel) -> list[float]:
    """``cost_model.transfer_time(bytes, route)`` of every transfer of ``plan``;
    ``routes`` maps ``(src, dst)`` device indices to the route's links."""
    m = plan.n_transfers
    if not m:
        return []
    src, dst = plan.array("transfer_src"), plan.array("transfer_dst")
    nbytes = plan.array("tensor_bytes")[plan.array("transfer_tensor")]
    n_dev = len(plan.devices)
    # Distinct (route, bytes): compute each once.
    sizes, size_id = np.unique(nbytes, return_inverse=True)
    cases, first, which = unique_below((src * n_dev + dst) * len(sizes) + size_id.reshape(-1),
                                       n_dev * n_dev * len(sizes))
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
    return np.asarray(times)[which].tolist()
