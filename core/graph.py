"""The dataflow graph: :class:`Graph`, :class:`Operation`, :class:`Tensor` and its scopes.

A graph is built the TensorFlow 1.x way: builders (in :mod:`core.builders`) add ops to
the *default graph*, and context managers set the device, control dependencies,
colocation and name scope of the ops created inside them.

>>> g = Graph()
>>> with g.as_default(), g.device("/job:ps/task:0/cpu:0"), g.device("/gpu:1"):
...     op = g.create_op("NoOp", [])
>>> op.name, op.device
('NoOp', '/job:ps/task:0/device:GPU:1')

Device scopes follow TensorFlow's rules: scopes are applied innermost first, each seeing
the device the op has so far; a device *string* merges (fields already set by an inner
scope win), a device *function* returns the op's device and may ignore what it sees,
``device(None)`` stops the outer scopes from applying and ``device("")`` does nothing.
"""

from __future__ import annotations

import contextlib
import math
import re
import threading
from array import array
from typing import Iterable, Iterator, Sequence

import numpy as np

from core.devices import DeviceSpec
from core.dtypes import DType
from core.ops import OpDef, ShapeError, TensorSpec, get_op_def

__all__ = ["Graph", "Operation", "Tensor", "GraphError", "GraphCycleError", "get_default_graph",
           "reset_default_graph", "topological_order", "topological_positions", "ops_needed",
           "as_graph_element",
           "get_default_session", "push_default_session"]

_VALID_NAME = re.compile(r"[A-Za-z0-9.][A-Za-z0-9_.\-/]*\Z")


class GraphError(ValueError):
    """A graph that cannot be built as asked (bad name, wrong graph, bad input)."""


class GraphCycleError(GraphError):
    """The graph has a cycle (possible only through added control inputs).

    ``cycle`` lists the names of the ops on it.
    """

    def __init__(self, cycle: Sequence[str]):
        self.cycle = list(cycle)
        super().__init__("the graph has a cycle: " + " -> ".join(self.cycle + self.cycle[:1]))


class Tensor:
    """The ``value_index``-th output of an :class:`Operation`.

    Tensors support ``+ - * / ** @``, unary ``-`` and ``abs()`` with other tensors,
    variables and Python scalars, creating ops named as TensorFlow names them (``add``,
    ``sub``, ``mul``, ``truediv``, ``pow``, ``matmul``, ``neg``), and basic indexing
    (``t[1:3, :]``, ``t[0]``, ``t[..., None]``: a ``StridedSlice``); see
    :mod:`core.builders_math`.
    """

    __slots__ = ("op", "value_index", "dtype", "shape")
    __array_priority__ = 100  # numpy defers to our operators

    def __init__(self, op: "Operation", value_index: int, dtype: DType, shape: tuple):
        self.op, self.value_index, self.dtype, self.shape = op, value_index, dtype, tuple(shape)

    @property
    def name(self) -> str:
        return f"{self.op.name}:{self.value_index}"

    @property
    def graph(self) -> "Graph":
        return self.op.graph

    @property
    def device(self) -> str:
        return self.op.device

    @property
    def spec(self) -> TensorSpec:
        return TensorSpec(self.dtype, self.shape)

    def get_shape(self) -> tuple:
        return self.shape

    def consumers(self) -> list["Operation"]:
        """Ops that take this tensor as a data input, in creation order."""
        return [op for op in self.op.graph._consumers.get(self.op.name, ())
                if any(t is self for t in op.inputs)]

    def eval(self, feed_dict=None, session=None):
        """Run this tensor in ``session`` (default: the default session) and return its value."""
        return _session_or_default(session).run(self, feed_dict=feed_dict)

    def __repr__(self) -> str:
        return f"<Tensor {self.name!r} shape={self.shape} dtype={self.dtype.name}>"

    # Operators are defined in core.builders (they build ops); attached there.


#: The device spec of an op no device scope pinned (DeviceSpec is immutable: one is shared).
_UNPINNED = DeviceSpec()


class Operation:
    """A node of the graph.

    Attributes: ``name``, ``type``, ``inputs`` (tensors), ``control_inputs`` (ops),
    ``outputs`` (tensors), ``attrs`` (dict), ``device`` (the requested device after the
    scopes were applied, canonical string, ``""`` when unpinned), ``graph``.

    Ops are made by :meth:`Graph.create_op`.  An op made directly, with ``graph`` None,
    belongs to no graph: such ops describe a step's structure for planning (the
    runtime's part of a step, whose sources and sinks are not ops of the user's graph)
    and are read by :class:`core.dataflow.StepPlan`; they have no consumers to look up.
    """

    def __init__(self, graph: "Graph | None", name: str, op_type: str,
                 inputs: Sequence[Tensor], attrs: dict, output_specs: Sequence[TensorSpec],
                 control_inputs: Sequence["Operation"] = ()):
        self.graph = graph
        self.name = name
        self.type = op_type
        self.inputs: tuple[Tensor, ...] = tuple(inputs)
        self._control_inputs: list[Operation] = list(control_inputs)
        self.attrs = dict(attrs)
        self.outputs: tuple[Tensor, ...] = tuple(
            Tensor(self, i, s.dtype, s.shape) for i, s in enumerate(output_specs))
        self._device_spec = _UNPINNED
        self._colocation: tuple[str, ...] = ()
        self._index = -1  # its position in the graph's creation order (set by create_op)

    @property
    def op_def(self) -> OpDef:
        return get_op_def(self.type)

    @property
    def control_inputs(self) -> tuple["Operation", ...]:
        return tuple(self._control_inputs)

    @property
    def device(self) -> str:
        return self._device_spec.to_string()

    @property
    def device_spec(self) -> DeviceSpec:
        return self._device_spec

    def _set_device(self, device) -> None:
        self._device_spec = DeviceSpec.from_string(device)

    def colocation_groups(self) -> list[str]:
        """TensorFlow's ``loc:@name`` groups; an op is in its own group when not colocated."""
        names = self._colocation or (self.name,)
        return [f"loc:@{n}" for n in names]

    def get_attr(self, name: str):
        try:
            return self.attrs[name]
        except KeyError:
            raise GraphError(f"op {self.name!r} ({self.type}) has no attribute {name!r}; "
                             f"it has {sorted(self.attrs)}") from None

    def add_control_input(self, op: "Operation") -> None:
        """Make this op wait for ``op`` (as TensorFlow's ``_add_control_input``).

        Unlike the ``control_dependencies`` scope this can point at an op created later,
        so it can close a cycle; placers and backends detect cycles and name them.
        """
        op = as_graph_element(op, self.graph, allow_tensor=False)
        if op not in self._control_inputs:
            self._control_inputs.append(op)
            self.graph._consumers.setdefault(op.name, []).append(self)
            self.graph._columns.controlled += 1
            self.graph._version += 1

    def values(self) -> tuple[Tensor, ...]:
        return self.outputs

    def run(self, feed_dict=None, session=None) -> None:
        """Run this op in ``session`` (default: the default session)."""
        _session_or_default(session).run(self, feed_dict=feed_dict)

    def __repr__(self) -> str:
        return f"<Operation {self.name!r} type={self.type} device={self.device!r}>"


class OpColumns:
    """What planning a step reads of every op of a :class:`Graph`, as flat columns
    appended when each op is created (:meth:`Graph.create_op`), in creation order.

    Reading 100k ``Operation`` and ``Tensor`` objects back into arrays cost ~0.3 s (the
    objects are scattered in memory: most of the time was cache misses); appending to
    these columns costs 1-2 microseconds per op in :meth:`Graph.create_op` (~0.15 s per
    100k ops, a tenth of building them), where the objects were just made.  The integer
    columns are ``array("q")``s, which numpy copies as one block (:meth:`array`).

    Columns: ``names``, ``types`` (lists); per op ``type_id`` (the position of the
    graph's first op of its type), ``n_out``, ``n_in``; per data input,
    op by op and slot by slot, ``in_op`` (the producer's position) and ``in_index`` (its
    output index); per output tensor, op by op, ``spec``: the position of the graph's
    first tensor with the same ``(dtype, shape)``; per op, ``attr_id``: the position of
    the graph's first op of the same type with equal attribute items as created (its
    own position when a value is unhashable, as a Const's array); ``controlled``: how
    many control inputs were ever given (0: no op has one).
    """

    __slots__ = ("names", "types", "type_id", "n_out", "n_in", "in_op", "in_index", "spec",
                 "attr_id", "_first_type", "_first_spec", "_first_attrs", "controlled")

    def __init__(self):
        self.names: list[str] = []
        self.types: list[str] = []
        self.type_id = array("q")
        self.n_out, self.n_in = array("q"), array("q")
        self.in_op, self.in_index = array("q"), array("q")
        self.spec, self.attr_id = array("q"), array("q")
        self._first_type: dict = {}  # type -> its first op's position
        self._first_spec: dict = {}  # (dtype, shape) -> its first tensor's position
        self._first_attrs: dict = {}  # (type, attribute items) -> its first op's position
        self.controlled = 0

    def add(self, op: "Operation") -> None:
        """Append ``op`` (the graph's next op; its inputs are earlier ops)."""
        inputs, outputs = op.inputs, op.outputs
        position = len(self.names)
        self.names.append(op.name)
        self.types.append(op.type)
        self.type_id.append(self._first_type.setdefault(op.type, position))
        self.n_out.append(len(outputs))
        self.n_in.append(len(inputs))
        for t in inputs:
            self.in_op.append(t.op._index)
            self.in_index.append(t.value_index)
        first, spec = self._first_spec, self.spec
        for t in outputs:
            spec.append(first.setdefault((t.dtype, t.shape), len(spec)))
        try:
            self.attr_id.append(self._first_attrs.setdefault((op.type, tuple(op.attrs.items())),
                                                             position))
        except TypeError:  # an unhashable value
            self.attr_id.append(position)
        if op._control_inputs:
            self.controlled += len(op._control_inputs)

    def array(self, name: str, count: int) -> np.ndarray:
        """The first ``count`` items of integer column ``name``, as a new int64 array."""
        return np.frombuffer(getattr(self, name), np.int64, count).copy()


#: Largest tensor, in bytes, a shape may describe (a size numpy and the byte counts can
#: hold in an int64).
MAX_TENSOR_BYTES = (1 << 63) - 1


def _check_output_specs(specs) -> None:
    """Every output dimension is unknown or an int >= 0, and the tensor's bytes fit in
    an int64 (raises :class:`ShapeError`): a shape wrong at build fails at build."""
    for spec in specs:
        shape = spec.shape
        if shape is None:
            continue
        for d in shape:
            if d is not None and (not isinstance(d, (int, np.integer)) or d < 0):
                raise ShapeError(f"output shape {tuple(shape)} has dimension {d!r}: "
                                 "dimensions are ints >= 0 (or unknown)")
        known = [int(d) for d in shape if d is not None]
        if math.prod(known) * spec.dtype.itemsize > MAX_TENSOR_BYTES:
            raise ShapeError(f"output shape {tuple(shape)} holds more than "
                             f"{MAX_TENSOR_BYTES} bytes")


class Graph:
    """A dataflow graph: ops in creation order, unique names, and the building scopes.

    >>> g = Graph()
    >>> with g.as_default():
    ...     pass
    >>> g.get_operations()
    []
    """

    def __init__(self):
        self._ops: list[Operation] = []
        self._ops_by_name: dict[str, Operation] = {}
        self._names_in_use: dict[str, int] = {}
        self._consumers: dict[str, list[Operation]] = {}
        self._collections: dict[str, list] = {}
        self._version = 0
        #: The graph-level random seed (``set_random_seed``); see ``core.get_seed``.
        self.seed: int | None = None
        self._views: dict = {}  # cached_view's, made at version _views_version
        self._views_version = 0
        self._columns = OpColumns()  # what plans read of the ops, kept as they are created
        self._lock = threading.RLock()
        # Building scopes; each a stack, innermost last.
        self._device_stack: list = []
        self._control_stack: list[list[Operation] | None] = []
        self._colocation_stack: list[Operation] = []
        self._name_stack = ""

    # -- lookup ------------------------------------------------------------------------
    def get_operations(self) -> list[Operation]:
        """All ops, in creation order."""
        return list(self._ops)

    def get_operation_by_name(self, name: str) -> Operation:
        try:
            return self._ops_by_name[name]
        except KeyError:
            raise KeyError(f"the graph has no op named {name!r}") from None

    def get_tensor_by_name(self, name: str) -> Tensor:
        """The tensor ``"op:index"``; raises KeyError naming it when there is none."""
        op_name, sep, index = name.rpartition(":")
        if not sep or not index.isdigit():
            raise ValueError(f"tensor names look like 'op:0', got {name!r}")
        op = self.get_operation_by_name(op_name)
        if int(index) >= len(op.outputs):
            raise KeyError(f"op {op_name!r} has {len(op.outputs)} outputs, so no tensor {name!r}")
        return op.outputs[int(index)]

    def as_graph_element(self, obj, allow_tensor=True, allow_operation=True):
        """Resolve a name, tensor, op or variable of this graph to a tensor or an op."""
        return as_graph_element(obj, self, allow_tensor, allow_operation)

    def __contains__(self, name: str) -> bool:
        return name in self._ops_by_name

    def __len__(self) -> int:
        return len(self._ops)

    @property
    def version(self) -> int:
        """Grows whenever an op or a control edge is added (sessions use it to re-place)."""
        return self._version

    def op_columns(self) -> "OpColumns":
        """The graph's ops as flat columns (:class:`OpColumns`), kept up to date as ops
        are created; read them under :meth:`cached_view` (a view is made holding the
        graph's lock, so the columns and the op list agree)."""
        return self._columns

    def cached_view(self, key: str, make):
        """``make(ops)`` of this graph's ops (creation order), made once per
        :attr:`version` and kept with the graph: a derived view (such as the flat arrays
        :class:`core.dataflow.StepPlan` reads) that adding an op or a control edge
        invalidates.  ``key`` names the view."""
        with self._lock:
            if self._views_version != self._version:
                self._views, self._views_version = {}, self._version
            if key not in self._views:
                self._views[key] = make(list(self._ops))
            return self._views[key]

    # -- collections -------------------------------------------------------------------
    def add_to_collection(self, key: str, value) -> None:
        self._collections.setdefault(key, []).append(value)

    def get_collection(self, key: str) -> list:
        return list(self._collections.get(key, ()))

    # -- default graph ------------------------------------------------------------------
    @contextlib.contextmanager
    def as_default(self) -> Iterator["Graph"]:
        """Make this the default graph inside the block."""
        _default.stack.append(self)
        try:
            yield self
        finally:
            _default.stack.pop()

    # -- names ------------------------------------------------------------------------
    def unique_name(self, name: str, mark_as_used: bool = True) -> str:
        """``name`` in the current name scope, with ``_1``, ``_2``... appended if taken.

        As in TensorFlow, names are compared case-insensitively.
        """
        if self._name_stack:
            name = self._name_stack + "/" + name
        key = name.lower()
        count = self._names_in_use.get(key, 0)
        if mark_as_used:
            self._names_in_use[key] = count + 1
        if count > 0:
            base = key
            while key in self._names_in_use:
                key = f"{base}_{count}"
                count += 1
            if mark_as_used:
                self._names_in_use[key] = 1
            name = f"{name}_{count - 1}"
        return name

    @contextlib.contextmanager
    def name_scope(self, name: str | None) -> Iterator[str]:
        """Prefix the names of the ops created inside with ``name/``.

        Yields the scope string (``"outer/name/"``). A name ending in ``/`` is taken as an
        absolute scope; ``None`` or ``""`` returns to the top level.
        """
        old = self._name_stack
        if not name:
            new = ""
        elif name.endswith("/"):
            new = name[:-1]
        else:
            if not _VALID_NAME.match(name):
                raise GraphError(f"{name!r} is not a valid scope name")
            new = self.unique_name(name)
        self._name_stack = new
        try:
            yield new + "/" if new else ""
        finally:
            self._name_stack = old

    # -- device scopes -------------------------------------------------------------------
    @contextlib.contextmanager
    def device(self, device_name_or_function) -> Iterator[None]:
        """Set the requested device of the ops created inside.

        ``device_name_or_function`` is a device string (parsed now: a malformed one raises
        :class:`core.devices.InvalidDeviceSpec` here), a :class:`DeviceSpec`, a function
        ``op -> device string or None``, ``None`` (ignore every enclosing scope) or ``""``
        (change nothing).
        """
        if device_name_or_function is None:
            entry = ("reset", None)
        elif callable(device_name_or_function) and not isinstance(device_name_or_function, DeviceSpec):
            entry = ("function", device_name_or_function)
        else:
            spec = DeviceSpec.from_string(device_name_or_function)
            entry = ("null", None) if spec.is_empty else ("string", spec)
        self._device_stack.append(entry)
        try:
            yield
        finally:
            self._device_stack.pop()

    def _apply_device_scopes(self, op: Operation) -> None:
        # Innermost first, each seeing the device the op has so far (TensorFlow's order).
        for kind, value in reversed(self._device_stack):
            if kind == "null":
                continue
            if kind == "reset":
                break
            if kind == "string":
                op._set_device(value.merged(op.device_spec))  # fields set inside win
            else:
                result = value(op)
                op._set_device(result if result is not None else "")

    # -- control dependencies ------------------------------------------------------------
    @contextlib.contextmanager
    def control_dependencies(self, control_inputs: Iterable | None) -> Iterator[None]:
        """Ops created inside run only after every op of ``control_inputs`` has run.

        ``None`` clears the enclosing control dependencies.
        """
        if control_inputs is None:
            entry = None
        else:
            entry = []
            for c in control_inputs:
                element = as_graph_element(c, self)
                entry.append(element.op if isinstance(element, Tensor) else element)
        self._control_stack.append(entry)
        try:
            yield
        finally:
            self._control_stack.pop()

    def _current_control_inputs(self, inputs: Sequence[Tensor]) -> list[Operation]:
        result: list[Operation] = []
        input_ops = {t.op.name for t in inputs}
        for block in reversed(self._control_stack):
            if block is None:
                break
            for op in block:
                if op.name not in input_ops and op not in result:
                    result.append(op)
        return result

    # -- colocation ----------------------------------------------------------------------
    @contextlib.contextmanager
    def colocate_with(self, op, ignore_existing: bool = False) -> Iterator[None]:
        """Ops created inside share ``op``'s device (and its colocation group).

        As in TensorFlow, the enclosing device scopes do not apply inside the block (the op
        takes ``op``'s device); device scopes opened inside it still do.
        """
        target = as_graph_element(op, self)
        if isinstance(target, Tensor):
            target = target.op
        saved_devices, saved_coloc = self._device_stack, self._colocation_stack
        self._device_stack = []
        self._colocation_stack = ([] if ignore_existing else list(saved_coloc)) + [target]
        try:
            yield
        finally:
            self._device_stack, self._colocation_stack = saved_devices, saved_coloc

    # -- building ----------------------------------------------------------------------
    def create_op(self, op_type: str, inputs: Sequence[Tensor], attrs: dict | None = None,
                  name: str | None = None) -> Operation:
        """Add an op: check its inputs, infer its outputs, apply the current scopes.

        ``name`` defaults to the op type; it is made unique in the current name scope
        unless it ends with ``/`` (a name already made unique by :meth:`name_scope`).
        Raises :class:`core.ops.ShapeError` naming the op when the inputs do not fit.
        """
        op_def = get_op_def(op_type)
        op_type = op_def.type  # TensorFlow's spelling ("AddV2") becomes the table's ("Add")
        attrs = dict(attrs or {})
        inputs = list(inputs)
        for t in inputs:
            if not isinstance(t, Tensor):
                raise TypeError(f"inputs of {op_type} must be tensors, got {type(t).__name__}")
            if t.graph is not self:
                raise GraphError(f"tensor {t.name!r} is from another graph than the {op_type} op")
        if len(inputs) < op_def.min_inputs or (op_def.max_inputs is not None
                                               and len(inputs) > op_def.max_inputs):
            raise GraphError(f"{op_type} takes {op_def.min_inputs}..{op_def.max_inputs} inputs, "
                             f"got {len(inputs)}")
        with self._lock:
            if name is not None and name.endswith("/"):
                full_name = name[:-1]
                if not _VALID_NAME.match(full_name):  # a graph read from elsewhere
                    raise GraphError(f"{full_name!r} is not a valid op name")
            else:
                base = name or op_type
                if not _VALID_NAME.match(base):
                    raise GraphError(f"{base!r} is not a valid op name")
                full_name = self.unique_name(base)
            if full_name in self._ops_by_name:
                raise GraphError(f"an op named {full_name!r} already exists")
            try:
                specs = op_def.infer([t.spec for t in inputs], attrs)
                _check_output_specs(specs)
            except ShapeError as e:
                raise ShapeError(f"{op_type} op {full_name!r}: {e}") from None
            except KeyError as e:  # a graph read from elsewhere may lack an attr
                raise GraphError(f"{op_type} op {full_name!r} lacks its attr {e}") from None
            op = Operation(self, full_name, op_type, inputs, attrs, specs)
            self._apply_scopes(op)
            op._index = len(self._ops)
            self._columns.add(op)
            self._ops.append(op)
            self._ops_by_name[full_name] = op
            self._names_in_use.setdefault(full_name.lower(), 1)
            for t in op.inputs:
                self._consumers.setdefault(t.op.name, []).append(op)
            for c in op._control_inputs:
                self._consumers.setdefault(c.name, []).append(op)
            self._version += 1
            return op

    def _apply_scopes(self, op: Operation) -> None:
        op._control_inputs = self._current_control_inputs(op.inputs)
        groups: list[str] = []
        if self._colocation_stack:
            for target in self._colocation_stack:
                groups += [g[len("loc:@"):] for g in target.colocation_groups()]
            op._set_device(self._colocation_stack[-1].device_spec)
        # An op that takes a variable by reference lives with it (TensorFlow's ref edges).
        for index in op.op_def.ref_inputs:
            groups += [g[len("loc:@"):] for g in op.inputs[index].op.colocation_groups()]
        if groups:
            op._colocation = tuple(sorted(set(groups)))
        self._apply_device_scopes(op)

    def validate(self) -> None:
        """Check the graph's invariants: unique names, edges within the graph and
        consistent with the consumer index, colocation naming existing ops, no cycle.
        Raises :class:`GraphError` (:class:`GraphCycleError` for a cycle)."""
        problems = []
        if len(self._ops_by_name) != len(self._ops):
            problems.append("op names are not unique")
        for op in self._ops:
            if self._ops_by_name.get(op.name) is not op:
                problems.append(f"op {op.name!r} is not indexed by its name")
            for producer in [t.op for t in op.inputs] + list(op._control_inputs):
                if producer.graph is not self or producer.name not in self._ops_by_name:
                    problems.append(f"op {op.name!r} has an input from outside the graph")
                elif op not in self._consumers.get(producer.name, ()):
                    problems.append(f"op {op.name!r} is missing from {producer.name!r}'s consumers")
            for name in op._colocation:
                if name not in self._ops_by_name:
                    problems.append(f"op {op.name!r} is colocated with unknown op {name!r}")
        if problems:
            raise GraphError("invalid graph: " + "; ".join(problems))
        topological_order(self._ops)

    def as_graph_def(self, add_shapes: bool = False):
        """This graph as a TensorFlow GraphDef message (:mod:`core.graph_def`): what
        ``tf.import_graph_def`` reads, with the requested devices and colocation; with
        ``add_shapes``, each node's ``_output_shapes``."""
        from core.graph_def import graph_to_graph_def
        return graph_to_graph_def(self, add_shapes=add_shapes)

    def __repr__(self) -> str:
        return f"<Graph with {len(self._ops)} ops>"


# --- the default graph and the default session ---------------------------------------------

class _DefaultStack(threading.local):
    def __init__(self):
        self.stack: list[Graph] = []
        self.sessions: list = []


_default = _DefaultStack()
_global_default_graph: list[Graph] = [Graph()]


def get_default_graph() -> Graph:
    """The graph that builders add ops to: the innermost ``as_default()``, else the global one."""
    return _default.stack[-1] if _default.stack else _global_default_graph[0]


def reset_default_graph() -> None:
    """Replace the global default graph with an empty one (not inside ``as_default``)."""
    if _default.stack:
        raise GraphError("reset_default_graph() cannot be called inside a Graph.as_default() block")
    _global_default_graph[0] = Graph()


@contextlib.contextmanager
def push_default_session(session) -> Iterator:
    """Make ``session`` the default for ``Tensor.eval`` and ``Operation.run`` in the block.

    Sessions (in :mod:`runtime`) use this for ``with session:`` and ``as_default()``.
    """
    _default.sessions.append(session)
    try:
        yield session
    finally:
        _default.sessions.pop()


def get_default_session():
    """The innermost session made default, or None."""
    return _default.sessions[-1] if _default.sessions else None


def _session_or_default(session):
    session = session or get_default_session()
    if session is None:
        raise GraphError("no session given and no default session: use `with session:` or "
                         "pass session=")
    return session


# --- graph elements and traversal ---------------------------------------------------------------

def as_graph_element(obj, graph: Graph | None = None, allow_tensor: bool = True,
                     allow_operation: bool = True):
    """Resolve ``obj`` (a Tensor, Operation, Variable, or a name) to a Tensor or Operation."""
    if hasattr(obj, "_as_graph_element"):
        obj = obj._as_graph_element()
    if isinstance(obj, str):
        if graph is None:
            graph = get_default_graph()
        obj = graph.get_tensor_by_name(obj) if ":" in obj else graph.get_operation_by_name(obj)
    if isinstance(obj, Tensor):
        if not allow_tensor:
            return obj.op if allow_operation else _bad(obj)
    elif isinstance(obj, Operation):
        if not allow_operation:
            _bad(obj)
    else:
        raise TypeError(f"cannot interpret {obj!r} as a tensor or an op")
    if graph is not None and obj.graph is not graph:
        raise GraphError(f"{obj.name!r} belongs to another graph")
    return obj


def _bad(obj):
    raise TypeError(f"{obj!r} is not allowed here")


def ops_needed(targets: Iterable[Operation]) -> list[Operation]:
    """The ops that running ``targets`` needs (through data and control inputs), in
    creation order (:func:`core.partition.ops_needed`, with nothing fed)."""
    from core.partition import ops_needed as needed  # core.partition imports this module
    return needed(targets)


def topological_order(ops: Sequence[Operation]) -> list[Operation]:
    """``ops`` ordered so that every op comes after its inputs among ``ops``.

    Ties keep the order of ``ops`` (:func:`topological_positions`), so the result is
    deterministic, and ``ops`` already in such an order come back as given (found by
    one pass over their edges, before any heap is made).  Ops are matched by name (an
    input outside ``ops`` is ignored).  Raises :class:`GraphCycleError` naming the ops
    on a cycle.

    >>> g = Graph()
    >>> with g.as_default():
    ...     a = g.create_op("NoOp", [], name="a")
    ...     b = g.create_op("NoOp", [], name="b")
    >>> a.add_control_input(b)
    >>> [op.name for op in topological_order(g.get_operations())]
    ['b', 'a']
    """
    index = {op.name: i for i, op in enumerate(ops)}
    preds_of: list[set] = []
    ordered = True
    for i, op in enumerate(ops):
        preds = {index.get(t.op.name) for t in op.inputs}
        if op._control_inputs:
            preds.update(index.get(c.name) for c in op._control_inputs)
        preds.discard(None)
        preds_of.append(preds)
        if ordered and preds and max(preds) >= i:
            ordered = False
    if ordered:
        return list(ops)
    order = topological_positions(preds_of)
    if len(order) != len(ops):
        done = set(order)
        stuck = [op for i, op in enumerate(ops) if i not in done]
        raise GraphCycleError(_find_cycle(stuck, set(index)))
    return [ops[i] for i in order]


def topological_positions(preds: Sequence[Iterable[int]]) -> list[int]:
    """The positions ``0..len(preds) - 1`` ordered so that each comes after the
    positions in its ``preds``: Kahn's algorithm over a heap of positions, so ties go
    to the lower position and the order is deterministic.  Positions on a cycle, or
    after one, are left out (the caller names the cycle).  The one topological sort
    of the project: :func:`topological_order` (ops) and the GraphDef importer (nodes)
    use it.

    >>> topological_positions([{2}, set(), {1}])
    [1, 2, 0]
    >>> topological_positions([{1}, {0}, set()])  # 0 and 1 wait for each other
    [2]
    """
    import heapq

    pending = []
    consumers: list[list[int]] = [[] for _ in preds]
    for i, ps in enumerate(preds):
        n = 0
        for p in ps:
            consumers[p].append(i)
            n += 1
        pending.append(n)
    ready = [i for i, n in enumerate(pending) if n == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for c in consumers[i]:
            pending[c] -= 1
            if pending[c] == 0:
                heapq.heappush(ready, c)
    return order


def _find_cycle(stuck: list[Operation], names: set[str]) -> list[str]:
    """Walk predecessors among the stuck ops until one repeats: that is a cycle."""
    stuck_names = {op.name for op in stuck}
    op = stuck[0]
    path: list[str] = []
    index: dict[str, int] = {}
    while op.name not in index:
        index[op.name] = len(path)
        path.append(op.name)
        preds = [t.op for t in op.inputs] + list(op._control_inputs)
        op = next(p for p in preds if p.name in stuck_names)
    cycle = path[index[op.name]:]
    return list(reversed(cycle))

