"""The "what runs next" state machine of one step: pure code, no I/O, no clock.

TensorFlow's executor counts, for each op, its unfinished inputs (data and control);
ops with none run at once, and when an op finishes its consumers' counts drop (seed
chapter 12; TensorFlow ``core/common_runtime/executor.cc``, ``PropagateOutputs``).  A
tensor that crosses devices is sent once per (tensor, destination device), and a
tensor's memory is freed when its last consumer and its last outgoing send are done.

Two classes split the work, so that the part that depends only on the graph and the
placement is built once and is cheap to replay:

- :class:`StepPlan` — immutable, integer-indexed: ops in topological order, their
  devices, the transfers (send/recv pairs) the placement needs, the buffers (a tensor on
  its producer's device, or a received copy) and who releases them.
- :class:`StepState` — the mutable counters of one run of a plan.  A driver (the
  simulator's event callbacks, the runtime's threads) tells it what happened
  (:meth:`~StepState.op_finished`, :meth:`~StepState.transfer_done`) and gets back what
  that made possible (:class:`Progress`: ops now ready, transfers to send, buffers to
  free).  It takes no locks: a multi-threaded driver serialises its calls.

>>> import core as tf
>>> from core.placement import Placement
>>> g = tf.Graph()
>>> with g.as_default():
...     a = tf.constant(1.0, name="a"); b = tf.identity(a, name="b")
>>> cpu0, cpu1 = "/job:w/replica:0/task:0/cpu:0", "/job:w/replica:0/task:1/cpu:0"
>>> plan = StepPlan.build(g.get_operations(), Placement({"a": cpu0, "b": cpu1}))
>>> state = StepState(plan)
>>> [plan.op_names[i] for i in state.initial_ready()]
['a']
>>> progress = state.op_finished(plan.op_index["a"])
>>> progress.ready, [plan.transfer_name(k) for k in progress.sends]
([], ['a:0 -> /job:w/replica:0/task:1/device:CPU:0'])
>>> [plan.op_names[i] for i in state.transfer_done(0).ready]
['b']
>>> state.op_finished(plan.op_index["b"]).freed  # b:0 (read by nobody), a:0's copy
[1, 2]
>>> state.done
True
"""

from __future__ import annotations

from functools import cached_property
from typing import Iterable, NamedTuple, Sequence

import numpy as np

from core.costs import planning_bytes as _default_tensor_bytes
from core.graph import Graph, Operation, Tensor
from core.placement import Placement
from core.step_ops import order_of_distinct, step_ops, unique

__all__ = ["StepPlan", "StepState", "Progress", "UnplacedOp", "DataflowError"]

# A buffer that never reaches zero references: resident state (a variable's buffer) or
# a fetched tensor, which the client takes at the end of the step.
_HELD = 1 << 60

WAITING, READY, FINISHED = 0, 1, 2


class UnplacedOp(KeyError):
    """An op the step needs has no device in the placement (``op``)."""

    def __init__(self, op: str):
        self.op = op
        super().__init__(f"op {op!r} is needed by the step but the placement has no device "
                         "for it")

    def __str__(self) -> str:
        return self.args[0]


class DataflowError(RuntimeError):
    """A driver told the state machine something impossible (an op finished twice, a
    transfer done before its op ran...) or :meth:`StepState.validate` found a broken
    invariant."""


class Progress(NamedTuple):
    """What one event made possible: op indices now ``ready`` (ascending), transfer
    indices to ``sends`` (ascending), buffer indices ``freed`` (ascending)."""

    ready: list
    sends: list
    freed: list




class _Nested:
    """A list-of-lists attribute of a :class:`StepPlan` (``plan.op_succ[i]``...), made
    on first use from the flat form ``plan.csr_<name> = (ptr, flat)``, where item ``i``
    is ``flat[ptr[i]:ptr[i + 1]]``.

    The simulator reads the flat form; a list per op costs ~100 bytes and a Python
    allocation, so the lists are only made for drivers that ask (the runtime).
    """

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, plan, owner=None):
        if plan is None:
            return self
        ptr, flat = getattr(plan, "csr_" + self.name)
        value = [flat[a:b] for a, b in zip(ptr, ptr[1:])]
        plan.__dict__[self.name] = value  # cached: the instance dict now wins
        return value


def _csr(group, values, size: int) -> tuple[np.ndarray, np.ndarray]:
    """``(ptr, flat)`` arrays for ``values`` grouped by ``group`` (ascending, ``0..size-1``)."""
    ptr = np.zeros(size + 1, np.int64)
    np.cumsum(np.bincount(group, minlength=size), out=ptr[1:])
    return ptr, np.asarray(values, dtype=np.int64)


def _fetch_targets(fetches) -> tuple[list | None, list]:
    """``(target ops, fetched tensors)`` of a step's ``fetches`` (ops or tensors); the
    targets are None when ``fetches`` is (every op runs)."""
    if fetches is None:
        return None, []
    targets, tensors = [], []
    for f in fetches:
        if isinstance(f, Tensor):
            tensors.append(f)
            targets.append(f.op)
        else:
            targets.append(f)
    return targets, tensors


def _transfers(keys: np.ndarray, n_dev: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(transfer of each crossing edge, tensor of each transfer, destination of each
    transfer)`` from the crossing edges' keys ``tensor * n_dev + destination`` (in
    consumer then input order).  Transfers are numbered as found: by first consumer
    (topological order), then input order, the order of
    :func:`core.placement.transfers` (a transfer that another one's producer waits for
    is found first)."""
    distinct, first, edge_transfer = np.unique(keys, return_index=True, return_inverse=True)
    found = order_of_distinct(first)
    number = np.empty_like(found)
    number[found] = np.arange(len(found))
    return (number[edge_transfer.reshape(-1)], distinct[found] // n_dev,
            distinct[found] % n_dev)


def _pairs(keys: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """The distinct ``keys = a * size + b``, ascending, as ``(a, b)`` arrays."""
    distinct = unique(keys)
    return distinct // size, distinct % size


def _dependency_columns(n: int, n_transfers: int, pred_cons, pred_op, xpred_cons,
                        xpred_transfer) -> dict:
    """A plan's dependency columns from its (consumer, producer op) and (consumer,
    transfer) pairs, each ascending: every op's predecessors and successors, every
    transfer's consumers, and what each op waits for at the start."""
    by_producer = np.lexsort((pred_cons, pred_op))
    by_transfer = np.lexsort((xpred_cons, xpred_transfer))
    return {
        "csr_op_pred_ops": _csr(pred_cons, pred_op, n),
        "csr_op_pred_transfers": _csr(xpred_cons, xpred_transfer, n),
        "csr_op_succ": _csr(pred_op[by_producer], pred_cons[by_producer], n),
        "csr_transfer_consumers": _csr(xpred_transfer[by_transfer], xpred_cons[by_transfer],
                                       n_transfers),
        "initial_pending": (np.bincount(pred_cons, minlength=n)
                            + np.bincount(xpred_cons, minlength=n)),
    }


def _buffer_columns(n: int, tensor_op, persistent, refs, read_key, n_buffers: int) -> dict:
    """A plan's buffer columns per op: the buffers it reads (``read_key``: distinct
    ``op * n_buffers + buffer``, ascending), its outputs allocated when it starts
    (resident ones exist from the start), its outputs nobody reads (freed as soon as it
    ends), and what its end lets go of, ascending: the buffers it read and those dead
    outputs (two sorted runs: the stable sort merges them)."""
    allocated = np.flatnonzero(~persistent[tensor_op])
    dead = np.flatnonzero(refs[:len(tensor_op)] == 0)
    release_key = np.sort(np.concatenate([read_key, tensor_op[dead] * n_buffers + dead]),
                          kind="stable")
    return {
        "csr_op_inputs": _csr(read_key // n_buffers, read_key % n_buffers, n),
        "csr_op_outputs": _csr(tensor_op[allocated], allocated, n),
        "csr_op_dead_outputs": _csr(tensor_op[dead], dead, n),
        "csr_op_releases": _csr(release_key // n_buffers, release_key % n_buffers, n),
    }


def _placed_devices(names: list[str], placement) -> list[str]:
    """The device of each op name; :class:`UnplacedOp` for the first one without."""
    # A Placement's own dict when there is one: its __getitem__ is a Python call per op.
    lookup = getattr(placement, "_devices", None) if isinstance(placement, Placement) else None
    if lookup is not None and len(lookup) == len(names) and list(lookup) == names:
        # Placed in this order (a placement made from the graph's ops, the usual case):
        # its values (canonical names, never None) are the answer, no look-up per name
        # (~20 ms at 100k ops).  (The names compare by identity first, as they are the
        # ops' own strings.)
        return list(lookup.values())
    try:
        found = list(map((lookup if lookup is not None else placement).__getitem__, names))
    except KeyError:
        found = None
    if found is None or None in found:
        get = placement.get if hasattr(placement, "get") else placement.__getitem__
        for name in names:
            if get(name) is None:
                raise UnplacedOp(name)
    return found


def _read_only(value):
    """``value`` (an array or a tuple of arrays), made read-only: a plan's arrays are
    shared by everything that reads the plan."""
    for a in value if isinstance(value, tuple) else (value,):
        a.flags.writeable = False
    return value


class _FromArray:
    """A list attribute of a :class:`StepPlan` made from its kept numpy array on first
    use (for the attributes only cost models read, usually as arrays)."""

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, plan, owner=None):
        if plan is None:
            return self
        value = plan._np[self.name]
        value = ((value[0].tolist(), value[1].tolist()) if self.name.startswith("csr_")
                 else value.tolist())
        plan.__dict__[self.name] = value
        return value


# The arrays a plan keeps from its build (StepPlan.array), and those of them that are
# lists only on first use.
_KEPT_ARRAYS = ("csr_op_pred_ops", "csr_op_pred_transfers", "csr_op_outputs",
                "csr_op_input_tensors", "csr_op_inputs", "csr_op_dead_outputs", "op_device",
                "csr_transfer_consumers", "csr_op_succ", "csr_op_sends",
                "tensor_base", "tensor_op", "tensor_bytes", "tensor_spec", "transfer_tensor",
                "transfer_dst", "transfer_src", "buffer_bytes", "buffer_device", "buffer_refs",
                "buffer_parent", "csr_op_releases", "initial_pending")
_ARRAY_ONLY = ("csr_op_pred_ops", "csr_op_pred_transfers", "csr_op_outputs",
               "csr_op_input_tensors", "csr_op_inputs", "csr_op_dead_outputs",
               "csr_op_releases", "csr_transfer_consumers", "csr_op_sends", "initial_pending",
               "tensor_spec",
               "tensor_base", "tensor_op", "tensor_bytes", "transfer_tensor", "transfer_dst",
               "transfer_src", "buffer_bytes", "buffer_device", "buffer_refs", "buffer_parent")


class StepPlan:
    """The fixed structure of one step of a placed graph, as integer-indexed lists.

    Build with :meth:`build`.  Indices:

    - ops ``0..n_ops-1`` in topological order (creation order where that is one, else
      Kahn's order with creation-order ties, as :func:`core.graph.topological_order`);
    - devices ``0..n_devices-1``: ``devices`` sorted by name;
    - tensors ``0..n_tensors-1``: outputs of the ops, op by op (``tensor_base[i] + k``
      is output ``k`` of op ``i``);
    - transfers ``0..n_transfers-1``: one per (tensor, destination device);
    - buffers: buffer ``t`` is tensor ``t`` on its producer's device; buffer
      ``n_tensors + k`` is the copy transfer ``k`` receives.

    Transfers are ordered as :func:`core.placement.transfers` orders them (first
    consumer in topological order, then input order).

    Attributes (all lists, indexed as above): ``ops``, ``op_names``, ``op_index`` (name
    -> index), ``op_device``, ``op_preds`` (the op's dependencies: ``("op", j)`` and
    ``("transfer", k)`` entries are kept as two lists, ``op_pred_ops`` and
    ``op_pred_transfers``), ``op_outputs`` (buffer indices allocated when it starts),
    ``op_inputs`` (distinct buffers it reads), ``tensor_op``, ``tensor_bytes``,
    ``transfer_tensor``, ``transfer_src``, ``transfer_dst`` (device indices),
    ``transfer_consumers``, ``buffer_device``, ``buffer_bytes`` (memory: 0 for an output
    that aliases its input, as an ``Assign``'s, or forwards it, as a variable's read),
    ``buffer_parent`` (the buffer a forwarded output keeps alive, -1: none), ``resident`` (buffers held from the
    start: outputs of persistent ops), ``held`` (fetched tensors' buffers), and for
    cost models ``op_types``, ``tensor_spec`` (an id per distinct (dtype, shape)),
    ``op_attr_ids`` (see there, made on first use).

    The per-op and per-transfer lists of lists (``op_pred_ops``, ``op_pred_transfers``,
    ``op_inputs``, ``op_outputs``, ``op_dead_outputs``, ``op_succ``, ``op_sends``,
    ``transfer_consumers``) are also kept flat, as ``csr_<name> = (ptr, flat)`` (item
    ``i`` is ``flat[ptr[i]:ptr[i + 1]]``); the lists are made on first access.
    ``csr_op_input_tensors`` has each op's data inputs, slot by slot (tensor indices);
    ``csr_op_releases`` what each op's end lets go of, ascending: the buffers it read
    (``op_inputs``, also ascending) and its outputs nobody reads (``op_dead_outputs``).
    :meth:`array` gives an attribute as a numpy array (those set-up code reads are kept
    from the build).
    """

    def __init__(self):  # use build()
        pass

    # The per-op (and per-transfer) lists of lists, made from the flat form on first use.
    op_pred_ops = _Nested()
    op_pred_transfers = _Nested()
    op_inputs = _Nested()
    op_outputs = _Nested()
    op_dead_outputs = _Nested()
    op_succ = _Nested()
    op_sends = _Nested()
    transfer_consumers = _Nested()
    # Lists made from the kept arrays on first use (the simulator reads the arrays).
    csr_op_pred_ops = _FromArray()
    csr_op_pred_transfers = _FromArray()
    csr_op_outputs = _FromArray()
    csr_op_input_tensors = _FromArray()
    csr_op_inputs = _FromArray()
    csr_op_dead_outputs = _FromArray()
    csr_op_releases = _FromArray()
    csr_transfer_consumers = _FromArray()
    csr_op_sends = _FromArray()
    initial_pending = _FromArray()
    tensor_spec = _FromArray()
    tensor_base = _FromArray()
    tensor_op = _FromArray()
    tensor_bytes = _FromArray()
    transfer_tensor = _FromArray()
    transfer_dst = _FromArray()
    transfer_src = _FromArray()
    buffer_bytes = _FromArray()
    buffer_device = _FromArray()
    buffer_refs = _FromArray()
    buffer_parent = _FromArray()

    @classmethod
    def build(cls, graph_ops: Sequence[Operation], placement, fetches: Iterable | None = None,
              *, tensor_bytes=_default_tensor_bytes) -> "StepPlan":
        """The plan of running ``fetches`` (ops or tensors; None: every op of
        ``graph_ops``) with ``placement`` (op name -> device name).

        Only the ops the fetches need through data and control inputs run
        (:func:`core.partition.ops_needed`, in creation order).  Raises
        :class:`core.graph.GraphCycleError` naming a cycle and :class:`UnplacedOp` naming
        an op without a device, before anything runs.  ``tensor_bytes(tensor)`` sizes
        the tensors (default: :func:`core.costs.planning_bytes`, bookkeeping sizes with
        unknown dimensions as 0; the simulator passes its cost model's, which take
        them from the model's shape hints).

        How: the ops become flat integer arrays (an edge list, :class:`core.step_ops.OpArrays`);
        everything else (transfers, dependencies, buffers, reverse edges) is numpy on
        those arrays.  A plain-Python loop per op and edge cost ~13 us/op.  Ops of a
        :class:`core.graph.Graph` are read from the columns the graph keeps as its ops
        are created (:class:`core.graph.OpColumns`), as arrays of the whole graph kept
        with it until it changes, so no plan walks the op objects; other op-like
        objects are pulled in with one C-level pass per field.
        """
        self = cls()
        targets, held_tensors = _fetch_targets(fetches)
        ops, arrays = step_ops(list(graph_ops), targets)
        self.ops = ops
        n = len(ops)
        self._arrays = arrays
        self.op_names = names = arrays.names
        if not isinstance(getattr(ops[0], "graph", None) if ops else None, Graph):
            # A Graph's ops have distinct names; for other op-like objects, check now
            # (else op_index is made on first use).
            self.op_index = index = dict(zip(names, range(n)))
            if len(index) != n:
                raise DataflowError("two ops of the step share a name")

        # Devices: canonical names from the placement, sorted.
        op_device_name = _placed_devices(names, placement)
        self.devices = sorted(set(op_device_name))
        dev_index = {d: i for i, d in enumerate(self.devices)}
        self.op_device = list(map(dev_index.__getitem__, op_device_name))
        dev = np.fromiter(self.op_device, np.int64, n)  # (np.array: ~40% more)
        n_dev = len(self.devices)
        op_range = np.arange(n, dtype=np.int64)

        # Tensors: their specs (an id per (dtype, shape)) and sizes.
        self.op_types = arrays.types
        n_out, tensor_base = arrays.n_out, arrays.tensor_base
        tensor_op = np.repeat(op_range, n_out)
        n_tensors = len(tensor_op)
        spec = arrays.spec
        tbytes = arrays.sizes(tensor_bytes)
        persistent, aliasing = arrays.persistent, arrays.aliasing
        # An output that aliases a ref input (Assign's output is the variable) takes no
        # new memory.
        own_bytes = tbytes.copy()
        own_bytes[tensor_base[aliasing & (n_out > 0)]] = 0
        resident = np.flatnonzero(persistent[tensor_op])

        # Data edges, one per (consumer, input slot), in consumer then input order.
        n_in, prod = arrays.n_in, arrays.in_op
        if len(prod) and prod.min() < 0:  # cannot happen for ops_needed sets; keep the error clear
            pos = set(ops)
            op, t = next((op, t) for op in ops for t in op.inputs if t.op not in pos)
            raise DataflowError(f"op {op.name!r} reads {t.name!r}, which is not in the step")
        cons = np.repeat(op_range, n_in)
        tid = tensor_base[prod] + arrays.in_index
        cross = dev[prod] != dev[cons]

        # Transfers: one per (tensor, destination device), numbered as found.
        edge_transfer, transfer_tensor, transfer_dst = _transfers(
            tid[cross] * n_dev + dev[cons[cross]], n_dev)
        n_transfers = len(transfer_tensor)

        # Forwarded outputs (a variable's read, Identity, Reshape): on their input's
        # device they are that input's buffer, so they allocate nothing and keep it
        # alive (buffer_parent: the buffer each one keeps; -1 for the others).
        buffer_parent = np.full(n_tensors, -1, np.int64)
        first_edge = np.concatenate([[0], np.cumsum(n_in)[:-1]]).astype(np.int64)
        fwd = np.flatnonzero(arrays.forwarding & (n_in > 0) & (n_out > 0))
        if len(fwd):
            fwd = fwd[~cross[first_edge[fwd]]]
            buffer_parent[tensor_base[fwd]] = tid[first_edge[fwd]]
            own_bytes[tensor_base[fwd]] = 0

        # Control edges.
        n_ctrl, ctrl_prod = arrays.n_ctrl, arrays.ctrl_op
        if len(ctrl_prod) and ctrl_prod.min() < 0:
            pos = set(ops)
            op, c = next((op, c) for op in ops for c in op._control_inputs if c not in pos)
            raise DataflowError(f"op {op.name!r} waits for {c.name!r}, which is not in the step")
        ctrl_cons = np.repeat(op_range, n_ctrl)

        # Dependencies: distinct ops (same-device data inputs, control inputs) and
        # distinct transfers, ascending per op (unique sorts the (op, pred) keys).
        same = ~cross
        pred_cons, pred_op = _pairs(np.concatenate([cons[same] * n + prod[same],
                                                    ctrl_cons * n + ctrl_prod]), n)
        xpred_cons, xpred_transfer = _pairs(cons[cross] * max(n_transfers, 1) + edge_transfer,
                                            max(n_transfers, 1))

        # Buffers read: distinct per op, ascending.
        n_buffers = n_tensors + n_transfers
        buf = tid.copy()
        buf[cross] = n_tensors + edge_transfer
        read_key = unique(cons * n_buffers + buf)
        read_buf = read_key % n_buffers

        # References: readers on the device plus outgoing sends; resident state and
        # fetched tensors are held to the end.
        refs = (np.bincount(read_buf, minlength=n_buffers)
                + np.bincount(transfer_tensor, minlength=n_buffers)).astype(np.int64)
        held = sorted({int(tensor_base[self.op_index[t.op.name]]) + t.value_index
                       for t in held_tensors})
        refs[resident] += _HELD
        refs[np.array(held, dtype=np.int64)] += _HELD

        # Everything as lists (what the simulator's handlers index, fast), and as the
        # numpy arrays they came from (what set-up code computes with: array()).  The
        # per-op lists of lists are made from the flat (CSR) forms on first use (_Nested).
        sender = tensor_op[transfer_tensor]
        by_sender = np.argsort(sender, kind="stable")
        columns = {
            **_dependency_columns(n, n_transfers, pred_cons, pred_op, xpred_cons,
                                  xpred_transfer),
            **_buffer_columns(n, tensor_op, persistent, refs, read_key, n_buffers),
            "csr_op_sends": _csr(sender[by_sender], by_sender, n),
            "csr_op_input_tensors": (np.concatenate([[0], np.cumsum(n_in)]).astype(np.int64), tid),
            "op_device": dev,
            "tensor_base": tensor_base,
            "tensor_op": tensor_op,
            "tensor_bytes": tbytes,
            "tensor_spec": spec,
            "transfer_tensor": transfer_tensor,
            "transfer_dst": transfer_dst,
            "transfer_src": dev[sender],
            "resident": resident,
            "buffer_refs": refs,
            "buffer_device": np.concatenate([dev[tensor_op], transfer_dst]),
            "buffer_bytes": np.concatenate([own_bytes, tbytes[transfer_tensor]]),
            "buffer_parent": np.concatenate([buffer_parent, np.full(n_transfers, -1, np.int64)]),
        }
        self._set_columns(columns)
        self.held = held
        self.n_ops, self.n_tensors, self.n_transfers = n, n_tensors, n_transfers
        return self

    def _set_columns(self, columns: dict) -> None:
        """The plan's columns as lists (what the simulator's handlers index, fast),
        and the arrays that set-up code reads (:meth:`array`; the rest are a plain
        list's copy: ~3 MB per 100k ops each)."""
        for name, value in columns.items():
            if name == "op_device" or name in _ARRAY_ONLY:
                continue  # the list is made in build / on first use (_FromArray)
            if name.startswith("csr_"):
                setattr(self, name, (value[0].tolist(), value[1].tolist()))
            else:
                setattr(self, name, value.tolist())
        self._np = {name: _read_only(columns[name]) for name in _KEPT_ARRAYS}

    def array(self, name: str):
        """The list attribute ``name`` as a read-only int64 numpy array (a ``csr_`` one
        as its ``(ptr, flat)`` pair of arrays), for set-up code that computes with
        numpy: the simulator's are kept from :meth:`build`, the others are converted
        from the list once."""
        value = self._np.get(name)
        if value is None:
            attr = getattr(self, name)
            value = (tuple(np.array(a, dtype=np.int64) for a in attr) if name.startswith("csr_")
                     else np.array(attr, dtype=np.int64))
            self._np[name] = _read_only(value)
        return value

    @cached_property
    def op_index(self) -> dict[str, int]:
        """Op name -> op index."""
        return dict(zip(self.op_names, range(len(self.op_names))))

    @property
    def op_type_ids(self) -> np.ndarray:
        """For each op, the index of the plan's first op of its type (kept with the
        graph's other arrays when the plan runs all of its ops)."""
        return self._arrays.type_ids

    @cached_property
    def op_attr_ids(self) -> np.ndarray:
        """For each op, an id of its attributes among the ops of its type (equal ids:
        equal attribute items; an op with an unhashable attribute has an id of its
        own).  Made on first use, and kept with the graph's other arrays."""
        return self._arrays.attribute_ids()

    @cached_property
    def buffer_tensor(self) -> list[int]:
        """The tensor each buffer holds (buffer ``n_tensors + k`` holds transfer ``k``'s)."""
        return list(range(self.n_tensors)) + self.transfer_tensor

    # -- names ---------------------------------------------------------------------------
    def tensor_name(self, t: int) -> str:
        op = self.ops[self.tensor_op[t]]
        return f"{op.name}:{t - self.tensor_base[self.tensor_op[t]]}"

    def transfer_name(self, k: int) -> str:
        return f"{self.tensor_name(self.transfer_tensor[k])} -> {self.devices[self.transfer_dst[k]]}"

    def __repr__(self) -> str:
        return (f"<StepPlan {self.n_ops} ops on {len(self.devices)} devices, "
                f"{self.n_transfers} transfers>")


class StepState:
    """The counters of one run of a :class:`StepPlan`.

    ``pending[i]`` counts op ``i``'s unfinished dependencies (distinct ops it waits for
    on its own device or through a control edge, and transfers it waits for);
    ``refs[b]`` counts what still has to read buffer ``b``.  See the module docstring
    for an example.
    """

    __slots__ = ("plan", "pending", "refs", "status", "arrived", "ops_left", "transfers_left")

    def __init__(self, plan: StepPlan):
        self.plan = plan
        self.pending = list(plan.initial_pending)
        self.refs = list(plan.buffer_refs)
        self.status = bytearray(plan.n_ops)
        self.arrived = bytearray(plan.n_transfers)
        self.ops_left = plan.n_ops
        self.transfers_left = plan.n_transfers

    def initial_ready(self) -> list[int]:
        """The ops with no dependency, ascending; they are marked ready."""
        ready = [i for i, p in enumerate(self.pending) if p == 0]
        for i in ready:
            self.status[i] = READY
        return ready

    def op_finished(self, i: int) -> Progress:
        """Op ``i`` ended: its consumers' counts drop; its sends may start; the buffers it
        was the last reader of (and its outputs nobody reads) can be freed."""
        status = self.status
        if status[i] != READY:
            raise DataflowError(f"op {self.plan.op_names[i]!r} finished but it was "
                                f"{('waiting', 'ready', 'finished')[status[i]]}, not ready")
        status[i] = FINISHED
        self.ops_left -= 1
        plan, pending, refs = self.plan, self.pending, self.refs
        ready = []
        for j in plan.op_succ[i]:
            pending[j] -= 1
            if pending[j] == 0:
                status[j] = READY
                ready.append(j)
        freed = list(plan.op_dead_outputs[i])
        for b in plan.op_inputs[i]:
            refs[b] -= 1
            if refs[b] == 0:
                freed.append(b)
        if len(freed) > 1:
            freed.sort()
        return Progress(ready, plan.op_sends[i], freed)

    def transfer_done(self, k: int) -> Progress:
        """Transfer ``k`` arrived: the consumers on its destination may become ready; the
        source buffer is freed if this was its last reader."""
        plan = self.plan
        if self.arrived[k]:
            raise DataflowError(f"transfer {plan.transfer_name(k)} arrived twice")
        t = plan.transfer_tensor[k]
        if self.status[plan.tensor_op[t]] != FINISHED:
            raise DataflowError(f"transfer {plan.transfer_name(k)} arrived before its op ran")
        self.arrived[k] = 1
        self.transfers_left -= 1
        pending, status = self.pending, self.status
        ready = []
        for j in plan.transfer_consumers[k]:
            pending[j] -= 1
            if pending[j] == 0:
                status[j] = READY
                ready.append(j)
        self.refs[t] -= 1
        freed = [t] if self.refs[t] == 0 else []
        return Progress(ready, [], freed)

    @property
    def done(self) -> bool:
        """Every op finished and every transfer arrived."""
        return self.ops_left == 0 and self.transfers_left == 0

    def waiting_ops(self) -> list[int]:
        """Ops not yet ready (for diagnosing a driver that stalled)."""
        return [i for i, s in enumerate(self.status) if s == WAITING]

    def validate(self) -> None:
        """Recompute every counter from the finished ops and arrived transfers and
        compare; raise :class:`DataflowError` on any difference."""
        plan = self.plan
        finished = [s == FINISHED for s in self.status]
        problems = []
        for i in range(plan.n_ops):
            want = (sum(not finished[j] for j in plan.op_pred_ops[i])
                    + sum(not self.arrived[k] for k in plan.op_pred_transfers[i]))
            if self.pending[i] != want:
                problems.append(f"op {plan.op_names[i]!r}: pending {self.pending[i]}, expected {want}")
            if (self.status[i] == WAITING) != (want > 0):
                problems.append(f"op {plan.op_names[i]!r}: status {self.status[i]} with {want} pending")
        refs = list(plan.buffer_refs)
        for i in range(plan.n_ops):
            if finished[i]:
                for b in plan.op_inputs[i]:
                    refs[b] -= 1
        for k in range(plan.n_transfers):
            if self.arrived[k]:
                refs[plan.transfer_tensor[k]] -= 1
                if not finished[plan.tensor_op[plan.transfer_tensor[k]]]:
                    problems.append(f"transfer {plan.transfer_name(k)} arrived before its op ran")
        for b, (have, want) in enumerate(zip(self.refs, refs)):
            if have != want or have < 0:
                problems.append(f"buffer {b}: refs {have}, expected {want}")
        if self.ops_left != plan.n_ops - sum(finished):
            problems.append("ops_left is off")
        if self.transfers_left != plan.n_transfers - sum(self.arrived):
            problems.append("transfers_left is off")
        if problems:
            raise DataflowError("invalid step state: " + "; ".join(problems[:10]))


