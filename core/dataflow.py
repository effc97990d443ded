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
from itertools import chain, count, repeat
from operator import attrgetter
from typing import Iterable, NamedTuple, Sequence

import numpy as np

from core.costs import planning_bytes as _default_tensor_bytes
from core.graph import Graph, Operation, Tensor, topological_order
from core.ops import get_op_def
from core.partition import ops_needed
from core.placement import Placement

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


_op_of = attrgetter("op")
_value_index = attrgetter("value_index")
_spec_of = attrgetter("dtype", "shape")
_controls_of = attrgetter("_control_inputs")
_OP_FIELDS = ("name", "type", "outputs", "inputs", "_control_inputs", "attrs")
_op_fields = attrgetter(*_OP_FIELDS)
_outputs_of = attrgetter("outputs")


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


def first_ids(keys: list) -> np.ndarray:
    """For each key, the position of the first key equal to it: an id per distinct key,
    found with no Python call per item (``dict.setdefault`` mapped over the keys).

    >>> first_ids(["a", "b", "a"]).tolist()
    [0, 1, 0]
    """
    first: dict = {}
    return np.fromiter(map(first.setdefault, keys, count()), np.int64, len(keys))


class _OpArrays:
    """What a plan reads of a list of ops, as flat arrays: from a :class:`Graph`'s
    columns (:meth:`from_columns`, kept as the graph's ops are created), or made with
    one C-level pass (``map``, ``attrgetter``, ``dict.setdefault``) per field over
    op-like objects, never a Python loop.

    ``ops``, ``names``, ``types``, ``attrs`` (the ops' attribute dicts, None: read when
    needed): lists; ``n_out``, ``n_in``, ``n_ctrl``: counts per op; ``tensor_base``:
    first output tensor of each op; ``tensors``: the output tensors, op by op (None:
    made when needed); ``spec``: for each, an id of its (dtype, shape); ``in_op``,
    ``in_index``: producer (position in ``ops``, -1 if outside) and output index of
    each data input, op by op and slot by slot; ``ctrl_op``: position of each control
    input (-1 if outside); ``type_ids``: per op, the position of the first op of its
    type (:func:`first_ids`); ``persistent``, ``aliasing``: per op, from the op table.
    """

    def __init__(self, ops: list):
        n = len(ops)
        self.ops = ops
        # One pass over the op objects (each read once: at 100k ops a pass per field
        # spent most of its time waiting for memory), then columns of the small tuples.
        try:
            fields = list(map(_op_fields, ops))
        except AttributeError:  # op-like objects without attributes
            fields = [(*f, None) for f in map(attrgetter(*_OP_FIELDS[:-1]), ops)]
        names, types, outputs, inputs, controls, attrs = map(list, zip(*fields)) if n else ([],) * 6
        self.names, self.types = names, types
        self.type_ids = first_ids(types)
        self.attrs = attrs if not n or attrs[0] is not None else None  # None: read when needed
        self.n_out = np.fromiter(map(len, outputs), np.int64, n)
        self.tensors = tensors = list(chain.from_iterable(outputs))  # op by op
        self.spec = first_ids(list(map(_spec_of, tensors)))
        self.n_in = np.fromiter(map(len, inputs), np.int64, n)
        flat_in = list(chain.from_iterable(inputs))
        # Each input found as the tensor object its producer made (a Graph's ops share
        # them), else by producer and output index (op-like objects may not).
        where = dict(zip(tensors, range(len(tensors))))  # not kept: ~10 MB at 100k ops
        tid = np.fromiter(map(where.get, flat_in, repeat(-1)), np.int64, len(flat_in))
        pos = None
        if len(tid) and tid.min() < 0:
            pos = dict(zip(ops, range(n)))
            self.in_op = np.fromiter(map(pos.get, map(_op_of, flat_in), repeat(-1)), np.int64,
                                     len(flat_in))
            self.in_index = np.fromiter(map(_value_index, flat_in), np.int64, len(flat_in))
            self._finish(controls if any(controls) else None, pos)
        else:
            tensor_op = np.repeat(np.arange(n, dtype=np.int64), self.n_out)
            self._finish(controls if any(controls) else None, pos, tid=tid, tensor_op=tensor_op)

    @classmethod
    def from_columns(cls, ops: list, columns) -> "_OpArrays":
        """The arrays of a :class:`Graph`'s ``ops`` (all of them, creation order) from
        its :class:`core.graph.OpColumns`: numpy copies of the lists, no pass over
        the op objects (attributes and tensors are read when needed)."""
        self = object.__new__(cls)
        n = len(ops)
        self.ops = ops
        self.names, self.types = columns.names[:n], columns.types[:n]
        self.attrs = self.tensors = None  # (read from the ops when needed)
        self.n_out, self.n_in = columns.array("n_out", n), columns.array("n_in", n)
        edges = int(self.n_in.sum())
        self.in_op, self.in_index = columns.array("in_op", edges), columns.array("in_index", edges)
        self.spec = columns.array("spec", int(self.n_out.sum()))
        self.type_ids = columns.array("type_id", n)
        self._finish(list(map(_controls_of, ops)) if columns.controlled else None, None)
        self.attr_ids = columns.array("attr_id", n)
        return self

    def _finish(self, controls: list | None, pos, tid=None, tensor_op=None) -> None:
        """The columns both constructors make alike: tensor bases, producers (from
        tensor ids ``tid`` when given), control inputs (``controls``, each op's list;
        None when no op has one, the common case), the op table's flags."""
        ops, types, n = self.ops, self.types, len(self.ops)
        self.default_sizes = None  # tensor_bytes of each output tensor, made on first use
        self.tensor_base = np.zeros(n, np.int64)
        np.cumsum(self.n_out[:-1], out=self.tensor_base[1:])
        if tid is not None:
            self.in_op = tensor_op[tid]
            self.in_index = tid - self.tensor_base[self.in_op]
        if controls is not None:
            pos = pos or dict(zip(ops, range(n)))
            self.n_ctrl = np.fromiter(map(len, controls), np.int64, n)
            self.ctrl_op = np.fromiter(map(pos.get, chain.from_iterable(controls), repeat(-1)),
                                       np.int64, int(self.n_ctrl.sum()))
        else:
            self.n_ctrl, self.ctrl_op = np.zeros(n, np.int64), np.zeros(0, np.int64)
        type_id = self.type_ids
        persistent, aliasing = np.zeros(n, bool), np.zeros(n, bool)
        forwarding = np.zeros(n, bool)
        for i in first_positions(type_id).tolist():  # the op table is read once per type
            op_def = get_op_def(types[i])
            persistent[i], aliasing[i] = op_def.persistent, bool(op_def.ref_inputs)
            forwarding[i] = op_def.forwards_input
        self.persistent, self.aliasing = persistent[type_id], aliasing[type_id]
        self.forwarding = forwarding[type_id]
        self.parent, self.attr_ids = None, None

    def attribute_ids(self) -> np.ndarray:
        """For each op, an id of its attributes among the ops of its type: equal ids
        for equal attribute items (in order); an op with an unhashable attribute (a
        Const's value) gets an id of its own.  Made on first use (and kept)."""
        if self.attr_ids is None:
            if self.parent is not None:
                view, sel = self.parent
                self.attr_ids = view.attribute_ids()[sel]
            else:
                attrs = self.attrs if self.attrs is not None else [op.attrs for op in self.ops]
                self.attr_ids = _attribute_ids(attrs, self.type_ids)
        return self.attr_ids

    def sizes(self, tensor_bytes) -> np.ndarray:
        """``tensor_bytes`` of each output tensor.  A sizer marked ``by_spec`` (the
        default and :func:`core.costs.tensor_bytes`) depends only on (dtype, shape), so
        it is called once per distinct ``spec`` (and the default's sizes are kept)."""
        if not getattr(tensor_bytes, "by_spec", False):
            if self.tensors is None:  # (from a graph's columns, or a selection)
                self.tensors = list(chain.from_iterable(map(_outputs_of, self.ops)))
            return np.array(list(map(tensor_bytes, self.tensors)), dtype=np.int64)
        if tensor_bytes is _default_tensor_bytes and self.default_sizes is not None:
            return self.default_sizes
        _, first, which = np.unique(self.spec, return_index=True, return_inverse=True)
        sizes = np.array([tensor_bytes(self._tensor(t)) for t in first.tolist()],
                         dtype=np.int64)[which.reshape(-1)]
        if tensor_bytes is _default_tensor_bytes:
            self.default_sizes = sizes
        return sizes

    def _tensor(self, t: int):
        """Output tensor ``t`` (op by op), from the list when there is one."""
        if self.tensors is not None:
            return self.tensors[t]
        i = int(np.searchsorted(self.tensor_base, t, side="right")) - 1
        return self.ops[i].outputs[t - int(self.tensor_base[i])]

    def select(self, sel: np.ndarray, ops: list) -> "_OpArrays":
        """The arrays of ``ops``, which are ``self.ops[sel]`` (positions renumbered)."""
        out = object.__new__(_OpArrays)
        n = len(sel)
        new_pos = np.full(len(self.ops) + 1, -1, np.int64)  # index -1 stays -1
        new_pos[sel] = np.arange(n)
        sel_list = sel.tolist()
        out.ops = ops
        out.names = list(map(self.names.__getitem__, sel_list))
        out.types = list(map(self.types.__getitem__, sel_list))
        out.attrs = None if self.attrs is None else list(map(self.attrs.__getitem__, sel_list))
        out.n_out, out.n_in, out.n_ctrl = self.n_out[sel], self.n_in[sel], self.n_ctrl[sel]
        out.tensor_base = np.zeros(n, np.int64)
        np.cumsum(out.n_out[:-1], out=out.tensor_base[1:])
        tensors = _ranges(self.tensor_base[sel], out.n_out)
        out.spec, out.tensors = self.spec[tensors], None
        out.default_sizes = None if self.default_sizes is None else self.default_sizes[tensors]
        in_base = np.concatenate([[0], np.cumsum(self.n_in)[:-1]]).astype(np.int64)
        edges = _ranges(in_base[sel], out.n_in)
        out.in_op, out.in_index = new_pos[self.in_op[edges]], self.in_index[edges]
        ctrl_base = np.concatenate([[0], np.cumsum(self.n_ctrl)[:-1]]).astype(np.int64)
        out.ctrl_op = new_pos[self.ctrl_op[_ranges(ctrl_base[sel], out.n_ctrl)]]
        out.persistent, out.aliasing = self.persistent[sel], self.aliasing[sel]
        out.forwarding = self.forwarding[sel]
        out.type_ids = first_ids(out.types)
        out.parent, out.attr_ids = (self, sel), None
        return out


def _attribute_ids(attrs: list, type_of: np.ndarray) -> np.ndarray:
    """:meth:`_OpArrays.attribute_ids` of ops with attribute dicts ``attrs``; ``type_of``:
    an id of each op's type."""
    ids = np.zeros(len(attrs), np.int64)
    order = np.argsort(type_of, kind="stable")
    bounds = np.flatnonzero(np.diff(type_of[order])) + 1
    for group in np.split(order, bounds):
        dicts = list(map(attrs.__getitem__, group.tolist()))
        if not any(dicts):  # no attributes (Add, Relu...): all the same
            continue
        items = list(map(tuple, map(dict.items, dicts)))
        try:
            ids[group] = first_ids(items)
        except TypeError:  # some value is unhashable: key by key
            first: dict = {}
            local = []
            for pos, item in enumerate(items):
                try:
                    local.append(first.setdefault(item, pos))
                except TypeError:
                    local.append(pos)
            ids[group] = local
    return ids


def unique(values: np.ndarray) -> np.ndarray:
    """The distinct values, ascending: ``np.unique`` by a sort.  (numpy 2.3's
    ``np.unique`` without extra outputs hashes instead, ~30 times slower on 100k
    distinct integers.)  The sort is the stable one (timsort for int64): the keys a
    plan sorts are ordered op by op already, and timsort merges such runs ~10 times
    faster than the default introsort sorts them.

    >>> unique(np.array([3, 1, 3])).tolist()
    [1, 3]
    """
    values = np.sort(values, kind="stable")
    if len(values) > 1:
        values = values[np.concatenate([[True], values[1:] != values[:-1]])]
    return values


def unique_below(keys: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``np.unique(keys, return_index=True, return_inverse=True)`` for integer keys in
    ``0..size-1``: by tables over that range instead of a sort, when the range is no
    longer than the keys (such as device pairs of 100k transfers: ~6 times fewer
    instructions than ``np.unique``'s stable argsort); by ``np.unique`` otherwise.

    >>> [a.tolist() for a in unique_below(np.array([5, 2, 5, 0]), 6)]
    [[0, 2, 5], [3, 1, 0], [2, 1, 2, 0]]
    """
    m = len(keys)
    if size > max(m, 1024):
        distinct, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        return distinct, first, inverse.reshape(-1)
    present = np.zeros(size, bool)
    present[keys] = True
    distinct = np.flatnonzero(present)
    inverse = (np.cumsum(present) - 1)[keys]
    first = np.full(len(distinct), m, np.int64)
    np.minimum.at(first, inverse, np.arange(m))
    return distinct, first, inverse


def first_positions(first: np.ndarray) -> np.ndarray:
    """The distinct values of ``first``, ascending, where ``first[i]`` is the first
    position of the group ``i`` belongs to (as an op's ``type_ids``): the positions
    that are their own first, found without a sort.

    >>> first_positions(np.array([0, 1, 0, 3, 1])).tolist()
    [0, 1, 3]
    """
    return np.flatnonzero(first == np.arange(len(first)))


def order_of_distinct(values: np.ndarray) -> np.ndarray:
    """``np.argsort(values)`` for distinct non-negative integers (positions, such as
    ``np.unique``'s first indices): by a table over ``0..max`` instead of a sort (a
    stable argsort of 100k shuffled int64 is a timsort, ~10 times the cost).

    >>> order_of_distinct(np.array([7, 0, 3])).tolist()
    [1, 2, 0]
    """
    if not len(values):
        return np.zeros(0, np.int64)
    table = np.full(int(values.max()) + 1, -1, np.int64)
    table[values] = np.arange(len(values))
    return table[table >= 0]


def dense_ids(ids: np.ndarray) -> np.ndarray:
    """``ids`` (non-negative integers, such as :func:`first_ids`) renumbered ``0, 1,
    ...`` in ascending order: ``np.unique(ids, return_inverse=True)[1]``, by a table
    over ``0..max`` instead of a sort (``ids`` are positions, so the table is no longer
    than the list they index).

    >>> dense_ids(np.array([4, 0, 4, 2])).tolist()
    [2, 0, 2, 1]
    """
    if not len(ids):
        return np.zeros(0, np.int64)
    present = np.zeros(int(ids.max()) + 1, np.int64)
    present[ids] = 1
    return (np.cumsum(present) - 1)[ids]


def _read_only(value):
    """``value`` (an array or a tuple of arrays), made read-only: a plan's arrays are
    shared by everything that reads the plan."""
    for a in value if isinstance(value, tuple) else (value,):
        a.flags.writeable = False
    return value


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The concatenation of ``range(s, s + l)`` for each start and length."""
    ends = np.cumsum(lengths)
    total = int(ends[-1]) if len(ends) else 0
    return np.repeat(starts - ends + lengths, lengths) + np.arange(total)


_VIEW = "core.dataflow"  # the name of the graph's arrays (Graph.cached_view)


def _graph_arrays(graph: Graph) -> _OpArrays:
    """The arrays of all of ``graph``'s ops, kept with it until its next change."""
    return graph.cached_view(_VIEW, lambda ops: _OpArrays.from_columns(ops, graph.op_columns()))


def _op_arrays(ops: list) -> _OpArrays:
    """The arrays of ``ops``.  For ops of one :class:`core.graph.Graph` they come from a
    view of the whole graph kept with it until its next change (``graph.version``), so
    simulating one graph under many placements pulls it into arrays once."""
    graph = getattr(ops[0], "graph", None) if ops else None
    if not isinstance(graph, Graph):
        return _OpArrays(ops)
    view = _graph_arrays(graph)
    if ops == view.ops:
        return view
    pos = dict(zip(view.ops, range(len(view.ops))))
    sel = np.fromiter(map(pos.get, ops, repeat(-1)), np.int64, len(ops))
    if len(sel) and sel.min() < 0:  # not all from the graph as it is
        return _OpArrays(ops)
    return view.select(sel, ops)


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

        How: the ops become flat integer arrays (an edge list, :class:`_OpArrays`);
        everything else (transfers, dependencies, buffers, reverse edges) is numpy on
        those arrays.  A plain-Python loop per op and edge cost ~13 us/op.  Ops of a
        :class:`core.graph.Graph` are read from the columns the graph keeps as its ops
        are created (:class:`core.graph.OpColumns`), as arrays of the whole graph kept
        with it until it changes, so no plan walks the op objects; other op-like
        objects are pulled in with one C-level pass per field.
        """
        self = cls()
        ops = list(graph_ops)
        held_tensors: list[Tensor] = []
        if fetches is not None:
            targets = []
            for f in fetches:
                if isinstance(f, Tensor):
                    held_tensors.append(f)
                    targets.append(f.op)
                else:
                    targets.append(f)
            ops = ops_needed(targets)
        ops = _topological(ops)
        self.ops = ops
        n = len(ops)
        self._arrays = arrays = _op_arrays(ops)
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

        # Transfers: one per (tensor, destination device), numbered as found: by first
        # consumer (topological order), then input order, the order of
        # core.placement.transfers.  A transfer that another one's producer waits for
        # is found first.
        x_key = tid[cross] * n_dev + dev[cons[cross]]
        keys, first, edge_transfer = np.unique(x_key, return_index=True, return_inverse=True)
        found = order_of_distinct(first)
        number = np.empty_like(found)
        number[found] = np.arange(len(found))
        edge_transfer = number[edge_transfer.reshape(-1)]   # transfer of each crossing edge
        transfer_tensor = keys[found] // n_dev
        transfer_dst = keys[found] % n_dev
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
        pred_key = unique(np.concatenate([cons[same] * n + prod[same],
                                          ctrl_cons * n + ctrl_prod]))
        pred_cons, pred_op = pred_key // n, pred_key % n
        xpred_key = unique(cons[cross] * max(n_transfers, 1) + edge_transfer)
        xpred_cons, xpred_transfer = xpred_key // max(n_transfers, 1), xpred_key % max(n_transfers, 1)

        # Buffers read: distinct per op, ascending.
        n_buffers = n_tensors + n_transfers
        buf = tid.copy()
        buf[cross] = n_tensors + edge_transfer
        read_key = unique(cons * n_buffers + buf)
        read_cons, read_buf = read_key // n_buffers, read_key % n_buffers

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
        by_producer = np.lexsort((pred_cons, pred_op))
        by_transfer = np.lexsort((xpred_cons, xpred_transfer))
        sender = tensor_op[transfer_tensor]
        by_sender = np.argsort(sender, kind="stable")
        # Outputs allocated when the op starts (resident ones exist from the start), and
        # outputs nobody reads, freed as soon as the op ends.
        allocated = np.flatnonzero(~persistent[tensor_op])
        dead = np.flatnonzero(refs[:n_tensors] == 0)
        # What each op's end lets go of, ascending: the buffers it read and its outputs
        # nobody reads (two sorted runs: the stable sort merges them).
        release_key = np.sort(np.concatenate([read_key, tensor_op[dead] * n_buffers + dead]),
                              kind="stable")
        columns = {
            "csr_op_pred_ops": _csr(pred_cons, pred_op, n),
            "csr_op_pred_transfers": _csr(xpred_cons, xpred_transfer, n),
            "csr_op_inputs": _csr(read_cons, read_buf, n),
            "csr_op_succ": _csr(pred_op[by_producer], pred_cons[by_producer], n),
            "csr_transfer_consumers": _csr(xpred_transfer[by_transfer], xpred_cons[by_transfer],
                                           n_transfers),
            "csr_op_sends": _csr(sender[by_sender], by_sender, n),
            "csr_op_outputs": _csr(tensor_op[allocated], allocated, n),
            "csr_op_dead_outputs": _csr(tensor_op[dead], dead, n),
            "csr_op_releases": _csr(release_key // n_buffers, release_key % n_buffers, n),
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
            "initial_pending": (np.bincount(pred_cons, minlength=n)
                                + np.bincount(xpred_cons, minlength=n)),
        }
        for name, value in columns.items():
            if name == "op_device" or name in _ARRAY_ONLY:
                continue  # the list is made above / on first use (_FromArray)
            if name.startswith("csr_"):
                setattr(self, name, (value[0].tolist(), value[1].tolist()))
            else:
                setattr(self, name, value.tolist())
        # Keep the arrays set-up code reads (the rest are a plain list's copy: ~3 MB per
        # 100k ops each).
        self._np = {name: _read_only(columns[name]) for name in _KEPT_ARRAYS}
        self.held = held
        self.n_ops, self.n_tensors, self.n_transfers = n, n_tensors, n_transfers
        return self

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


def _topological(ops: list[Operation]) -> list[Operation]:
    """``ops`` in topological order: as given when that already is one, else
    :func:`core.graph.topological_order`'s (Kahn's order with ties by position); a cycle
    raises :class:`core.graph.GraphCycleError` naming it.

    In creation order (``graph.get_operations()``, or a subset of it) only a control
    input added by ``add_control_input`` can point forward, so only those are checked
    then; any other order is checked edge by edge.
    """
    graph = ops[0].graph if ops else None
    whole = graph is not None and ops == graph._ops
    creation = whole or (graph is not None and _is_creation_order(ops, graph))
    if creation:
        if whole and isinstance(graph, Graph):  # the graph's arrays know (and are kept)
            controls = _graph_arrays(graph).n_ctrl.any()
        else:
            controls = any(map(_controls_of, ops))
        if not controls:
            return ops  # nothing can point forward (the common case: no check per op)
    pos = {id(op): i for i, op in enumerate(ops)}
    forward = False
    for i, op in enumerate(ops):
        deps = op._control_inputs if creation else [t.op for t in op.inputs] + op._control_inputs
        for c in deps:
            p = pos.get(id(c))
            if p is not None and p >= i:
                forward = True
                break
        if forward:
            break
    if not forward:
        return ops
    return topological_order(ops)  # (raises GraphCycleError naming the ops on a cycle)


def _is_creation_order(ops: list[Operation], graph) -> bool:
    """Whether ``ops`` is a subsequence of the graph's creation order."""
    order = {id(op): i for i, op in enumerate(graph._ops)}
    last = -1
    for op in ops:
        i = order.get(id(op))
        if i is None or i <= last:
            return False
        last = i
    return True
