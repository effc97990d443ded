"""A step's ops: which run, in what order, and as flat integer arrays.

:class:`core.dataflow.StepPlan` is numpy over these: the ops a step's fetches need
(:func:`step_ops`, in topological order), and per op its type, device-independent
tensor specs, input edges and control edges as flat arrays (:class:`OpArrays`), read
from the columns a :class:`core.graph.Graph` keeps as its ops are created, and kept
with the graph until it changes (``Graph.cached_view``), so simulating one graph under
many placements derives them once.  The small numpy helpers that number distinct
values without a Python call per item (:func:`unique`, :func:`unique_below`,
:func:`first_positions`, :func:`order_of_distinct`, :func:`dense_ids`,
:func:`first_ids`) live here too; the simulator's set-up uses them as well.

>>> import core as tf
>>> g = tf.Graph()
>>> with g.as_default():
...     a = tf.constant(1.0, name="a"); b = tf.identity(a, name="b"); c = tf.identity(a, name="c")
>>> [op.name for op in step_ops(g.get_operations(), [b.op])[0]]
['a', 'b']
"""

from __future__ import annotations

from itertools import chain, count, repeat
from operator import attrgetter

import numpy as np

from core.costs import planning_bytes as _default_tensor_bytes
from core.graph import Graph, Operation, topological_order
from core.ops import get_op_def
from core.partition import ops_needed

__all__ = ["OpArrays", "step_ops", "op_arrays", "unique", "unique_below", "first_positions",
           "order_of_distinct", "dense_ids", "first_ids"]

_op_of = attrgetter("op")
_value_index = attrgetter("value_index")
_spec_of = attrgetter("dtype", "shape")

_controls_of = attrgetter("_control_inputs")

_OP_FIELDS = ("name", "type", "outputs", "inputs", "_control_inputs", "attrs")

_op_fields = attrgetter(*_OP_FIELDS)

_outputs_of = attrgetter("outputs")

def first_ids(keys: list) -> np.ndarray:
    """For each key, the position of the first key equal to it: an id per distinct key,
    found with no Python call per item (``dict.setdefault`` mapped over the keys).

    >>> first_ids(["a", "b", "a"]).tolist()
    [0, 1, 0]
    """
    first: dict = {}
    return np.fromiter(map(first.setdefault, keys, count()), np.int64, len(keys))

class OpArrays:
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
    def from_columns(cls, ops: list, columns) -> "OpArrays":
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

    def select(self, sel: np.ndarray, ops: list) -> "OpArrays":
        """The arrays of ``ops``, which are ``self.ops[sel]`` (positions renumbered)."""
        out = object.__new__(OpArrays)
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
    """:meth:`OpArrays.attribute_ids` of ops with attribute dicts ``attrs``; ``type_of``:
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

def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The concatenation of ``range(s, s + l)`` for each start and length."""
    ends = np.cumsum(lengths)
    total = int(ends[-1]) if len(ends) else 0
    return np.repeat(starts - ends + lengths, lengths) + np.arange(total)

_VIEW = "core.step_ops"  # the name of the graph's arrays (Graph.cached_view)

def _graph_arrays(graph: Graph) -> OpArrays:
    """The arrays of all of ``graph``'s ops, kept with it until its next change."""
    return graph.cached_view(_VIEW, lambda ops: OpArrays.from_columns(ops, graph.op_columns()))

def op_arrays(ops: list) -> OpArrays:
    """The arrays of ``ops``.  For ops of one :class:`core.graph.Graph` they come from a
    view of the whole graph kept with it until its next change (``graph.version``), so
    simulating one graph under many placements pulls it into arrays once."""
    graph = getattr(ops[0], "graph", None) if ops else None
    if not isinstance(graph, Graph):
        return OpArrays(ops)
    view = _graph_arrays(graph)
    if ops == view.ops:
        return view
    pos = dict(zip(view.ops, range(len(view.ops))))
    sel = np.fromiter(map(pos.get, ops, repeat(-1)), np.int64, len(ops))
    if len(sel) and sel.min() < 0:  # not all from the graph as it is
        return OpArrays(ops)
    return view.select(sel, ops)

def step_ops(ops: list, targets: list | None) -> tuple[list, "OpArrays"]:
    """The ops of a step computing ``targets`` (None: all of ``ops``), in topological
    order, and their arrays.  These depend on the graph and the fetches only, not on the
    placement: for the whole of a :class:`core.graph.Graph` they are kept with the graph
    per fetched ops until its next change (``Graph.cached_view``), so simulating one step
    under many placements (the search placers) finds them once."""
    graph = getattr(ops[0], "graph", None) if ops else None
    if targets is not None and isinstance(graph, Graph) and all(
            getattr(t, "graph", None) is graph for t in targets) and ops == graph._ops:
        key = _STEP_VIEW + "\0".join(t.name for t in targets)
        return graph.cached_view(key, lambda whole: _needed_in_order(targets))
    if targets is not None:
        ops = ops_needed(targets)
    ops = _topological(ops)
    return ops, op_arrays(ops)

_STEP_VIEW = "core.step_ops.step:"  # + the fetched ops' names (Graph.cached_view)

def _needed_in_order(targets: list) -> tuple[list, "OpArrays"]:
    needed = _topological(ops_needed(targets))
    return needed, op_arrays(needed)

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
