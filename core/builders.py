"""Builders that add ops to the default graph, TensorFlow 1.x style.

>>> from core import builders as tf
>>> g = Graph()
>>> with g.as_default():
...     a = tf.Variable(3.0, name="a")
...     c = a * 4
>>> [op.name for op in g.get_operations()]
['a/initial_value', 'a', 'a/Assign', 'a/read', 'mul/y', 'mul']
"""

from __future__ import annotations

import numbers
from typing import Iterable, Sequence

import numpy as np

from core.dtypes import DType, as_dtype, bool_, float32, int32
from core.graph import (Graph, GraphError, Operation, Tensor, as_graph_element,
                        get_default_graph)

__all__ = [
    "convert_to_tensor", "constant", "placeholder", "Variable", "identity", "add", "subtract",
    "multiply", "negative", "matmul", "relu", "tanh", "sigmoid", "softmax", "reduce_sum",
    "reduce_mean", "broadcast_to", "reshape", "transpose", "concat", "slice", "square",
    "assign", "assign_add", "assign_sub", "no_op", "group", "global_variables_initializer",
    "variables_initializer", "global_variables", "trainable_variables", "device",
    "control_dependencies", "colocate_with", "name_scope",
]

GLOBAL_VARIABLES = "variables"
TRAINABLE_VARIABLES = "trainable_variables"


# --- scopes on the default graph --------------------------------------------------------

def device(device_name_or_function):
    """``with device("/gpu:0"):`` on the default graph; see :meth:`Graph.device`."""
    return get_default_graph().device(device_name_or_function)


def control_dependencies(control_inputs):
    """``with control_dependencies([a, b]):`` on the default graph."""
    return get_default_graph().control_dependencies(control_inputs)


def colocate_with(op, ignore_existing: bool = False):
    """``with colocate_with(v):`` on the default graph."""
    if isinstance(op, Variable):
        op = op.op
    return get_default_graph().colocate_with(op, ignore_existing)


def name_scope(name: str | None):
    """``with name_scope("layer1") as scope:`` on the default graph."""
    return get_default_graph().name_scope(name)


# --- conversion ------------------------------------------------------------------------

def _graph_of(*values) -> Graph:
    for v in values:
        if isinstance(v, (Tensor, Operation)):
            return v.graph
        if isinstance(v, Variable):
            return v.graph
    return get_default_graph()


def _infer_python_dtype(value) -> DType:
    arr = np.asarray(value)
    if arr.dtype.kind == "b":
        return bool_
    if arr.dtype.kind in "iu":
        return int32
    if arr.dtype.kind == "f":
        return float32
    raise TypeError(f"cannot make a tensor of {value!r}")


def constant(value, dtype=None, shape=None, name: str = "Const") -> Tensor:
    """A tensor with a fixed value.

    Python ints become ``int32`` and floats ``float32`` (as in TensorFlow); numpy arrays
    keep their dtype unless ``dtype`` is given.  With ``shape`` a scalar is broadcast.

    >>> g = Graph()
    >>> with g.as_default():
    ...     constant([[1.0, 2.0]]).shape
    (1, 2)
    """
    if dtype is not None:
        dtype = as_dtype(dtype)
    elif isinstance(value, np.ndarray) or isinstance(value, np.generic):
        dtype = as_dtype(value.dtype)
    else:
        dtype = _infer_python_dtype(value)
    arr = np.asarray(value)
    if dtype.is_integer and arr.dtype.kind == "f" and not np.all(np.mod(arr, 1) == 0):
        raise TypeError(f"cannot convert {value!r} to {dtype.name} without losing its fraction")
    arr = np.array(arr, dtype=dtype.np)
    if shape is not None:
        shape = tuple(int(d) for d in shape)
        if arr.size == 1:
            arr = np.full(shape, arr.reshape(()), dtype=dtype.np)
        elif arr.shape != shape:
            raise ValueError(f"constant of shape {arr.shape} does not match shape {shape}")
    arr.setflags(write=False)
    g = get_default_graph()
    return g.create_op("Const", [], {"value": arr, "dtype": dtype.name, "shape": arr.shape},
                       name=name).outputs[0]


def convert_to_tensor(value, dtype=None, name: str = "Const", dtype_hint=None) -> Tensor:
    """A tensor for ``value``: tensors pass through, variables give their value, and
    anything else becomes a :func:`constant` (of ``dtype_hint`` when it fits)."""
    if isinstance(value, Variable):
        value = value.value()
    if isinstance(value, Tensor):
        if dtype is not None and as_dtype(dtype) is not value.dtype:
            raise TypeError(f"tensor {value.name!r} is {value.dtype.name}, expected {as_dtype(dtype).name}")
        return value
    if isinstance(value, Operation):
        raise TypeError(f"op {value.name!r} is not a tensor (use one of its outputs)")
    if dtype is None and dtype_hint is not None and isinstance(value, numbers.Number):
        hint = as_dtype(dtype_hint)
        if hint.is_floating or isinstance(value, numbers.Integral):
            dtype = hint
        else:
            raise TypeError(f"cannot use {value!r} with a {hint.name} tensor")
    return constant(value, dtype=dtype, name=name)


def placeholder(dtype, shape, name: str = "Placeholder") -> Tensor:
    """A tensor whose value is fed at run time (``shape`` may hold None dimensions)."""
    if shape is None:
        raise GraphError("placeholder() needs a shape; use None for a dimension known only "
                         "at run time, e.g. (None, 784)")
    shape = tuple(None if d is None or d == -1 else int(d) for d in shape)
    return get_default_graph().create_op(
        "Placeholder", [], {"dtype": as_dtype(dtype).name, "shape": shape}, name=name).outputs[0]


class Variable:
    """A variable: state that lives on one device and survives across runs.

    Creates four ops, named as TensorFlow names them: ``<name>/initial_value`` (when the
    initial value is not already a tensor), ``<name>`` (type ``Variable``),
    ``<name>/Assign`` (the initializer) and ``<name>/read``; the last two are colocated
    with the variable.  A Python ``int`` makes an ``int32`` variable, which has no GPU
    kernel.

    >>> g = Graph()
    >>> with g.as_default():
    ...     v = Variable(3)
    >>> v.name, v.dtype.name, v.initializer.name
    ('Variable:0', 'int32', 'Variable/Assign')
    """

    def __init__(self, initial_value, name: str | None = None, dtype=None, trainable: bool = True):
        g = get_default_graph()
        with g.name_scope(name or "Variable") as scope:
            init = convert_to_tensor(initial_value, dtype=dtype, name="initial_value")
            if any(d is None for d in init.shape):
                raise GraphError(f"variable {scope[:-1]!r} needs an initial value of known shape, "
                                 f"got {init.shape}")
            self._op = g.create_op("Variable", [], {"dtype": init.dtype.name, "shape": init.shape},
                                   name=scope)
            with g.colocate_with(self._op):
                self._initializer = g.create_op("Assign", [self._op.outputs[0], init], name="Assign")
                self._snapshot = g.create_op("Identity", [self._op.outputs[0]], name="read").outputs[0]
        self._initial_value = init
        self.trainable = trainable
        g.add_to_collection(GLOBAL_VARIABLES, self)
        if trainable:
            g.add_to_collection(TRAINABLE_VARIABLES, self)

    # The TensorFlow accessors.
    op = property(lambda self: self._op)
    initializer = property(lambda self: self._initializer)
    initial_value = property(lambda self: self._initial_value)
    name = property(lambda self: self._op.outputs[0].name)
    dtype = property(lambda self: self._op.outputs[0].dtype)
    shape = property(lambda self: self._op.outputs[0].shape)
    device = property(lambda self: self._op.device)
    graph = property(lambda self: self._op.graph)

    def get_shape(self):
        return self.shape

    def value(self) -> Tensor:
        """The tensor of the variable's value (its ``read`` op)."""
        return self._snapshot

    read_value = value

    @property
    def ref(self) -> Tensor:
        """The variable op's output: what assign ops write and gradients are taken of."""
        return self._op.outputs[0]

    def _as_graph_element(self):
        return self._snapshot

    def assign(self, value, name=None, *, use_locking=None) -> Tensor:
        return assign(self, value, name=name, use_locking=use_locking)

    def assign_add(self, delta, name=None, *, use_locking=None) -> Tensor:
        return assign_add(self, delta, name=name, use_locking=use_locking)

    def assign_sub(self, delta, name=None, *, use_locking=None) -> Tensor:
        return assign_sub(self, delta, name=name, use_locking=use_locking)

    def eval(self, feed_dict=None, session=None):
        return self._snapshot.eval(feed_dict=feed_dict, session=session)

    def __repr__(self) -> str:
        return f"<Variable {self.name!r} shape={self.shape} dtype={self.dtype.name}>"


# --- ops ----------------------------------------------------------------------------

def _op(op_type: str, inputs: Sequence, name: str | None, attrs: dict | None = None) -> Tensor:
    g = _graph_of(*inputs)
    tensors = [convert_to_tensor(x) for x in inputs]
    return g.create_op(op_type, tensors, attrs, name=name).outputs[0]


def _binary(op_type: str, x, y, name: str | None, attrs: dict | None = None) -> Tensor:
    """A two-input op inside a name scope of its own, so that a Python scalar operand
    becomes ``<name>/x`` or ``<name>/y`` as in TensorFlow."""
    g = _graph_of(x, y)
    with g.name_scope(name or op_type) as scope:
        x, y = _convert_pair(x, y)
        return g.create_op(op_type, [x, y], attrs, name=scope).outputs[0]


def _convert_pair(x, y) -> tuple[Tensor, Tensor]:
    """Convert two operands; a Python scalar takes the other operand's dtype."""
    xt = isinstance(x, (Tensor, Variable))
    yt = isinstance(y, (Tensor, Variable))
    if xt and not yt:
        x = convert_to_tensor(x)
        return x, convert_to_tensor(y, name="y", dtype_hint=x.dtype)
    if yt and not xt:
        y = convert_to_tensor(y)
        return convert_to_tensor(x, name="x", dtype_hint=y.dtype), y
    return convert_to_tensor(x, name="x"), convert_to_tensor(y, name="y")


def identity(x, name: str | None = None) -> Tensor:
    return _op("Identity", [x], name)


def add(x, y, name: str | None = None) -> Tensor:
    """Elementwise ``x + y`` with broadcasting (op type ``Add``)."""
    return _binary("Add", x, y, name)


def subtract(x, y, name: str | None = None) -> Tensor:
    """Elementwise ``x - y`` with broadcasting (op type ``Sub``)."""
    return _binary("Sub", x, y, name)


def multiply(x, y, name: str | None = None) -> Tensor:
    """Elementwise ``x * y`` with broadcasting (op type ``Mul``)."""
    return _binary("Mul", x, y, name)


def negative(x, name: str | None = None) -> Tensor:
    return _op("Neg", [x], name)


def square(x, name: str | None = None) -> Tensor:
    """``x * x`` elementwise (op type ``Square``)."""
    return _op("Square", [x], name)


def matmul(a, b, transpose_a: bool = False, transpose_b: bool = False, adjoint_a: bool = False,
           adjoint_b: bool = False, name: str | None = None) -> Tensor:
    """Matrix product (op type ``MatMul``); operands of rank > 2 are batches of matrices
    with broadcast batch axes (op type ``BatchMatMulV2``), as ``tf.matmul`` builds them.

    >>> g = Graph()
    >>> with g.as_default():
    ...     matmul(constant(np.ones((4, 2, 3))), constant(np.ones((3, 5)))).shape
    (4, 2, 5)
    """
    g = _graph_of(a, b)
    a, b = convert_to_tensor(a), convert_to_tensor(b)
    ta, tb = bool(transpose_a or adjoint_a), bool(transpose_b or adjoint_b)
    if len(a.shape) > 2 or len(b.shape) > 2:
        return g.create_op("BatchMatMulV2", [a, b], {"adj_x": ta, "adj_y": tb},
                           name=name or "MatMul").outputs[0]
    return g.create_op("MatMul", [a, b], {"transpose_a": ta, "transpose_b": tb},
                       name=name).outputs[0]


def relu(x, name: str | None = None) -> Tensor:
    return _op("Relu", [x], name)


def tanh(x, name: str | None = None) -> Tensor:
    return _op("Tanh", [x], name)


def sigmoid(x, name: str | None = None) -> Tensor:
    return _op("Sigmoid", [x], name)


def softmax(x, name: str | None = None) -> Tensor:
    """Softmax over the last axis."""
    return _op("Softmax", [x], name)


def _axis_attr(axis):
    if axis is None:
        return None
    return (int(axis),) if isinstance(axis, numbers.Integral) else tuple(int(a) for a in axis)


def reduce_sum(x, axis=None, keepdims: bool = False, name: str | None = None) -> Tensor:
    return _op("Sum", [x], name, {"axis": _axis_attr(axis), "keepdims": bool(keepdims)})


def reduce_mean(x, axis=None, keepdims: bool = False, name: str | None = None) -> Tensor:
    return _op("Mean", [x], name, {"axis": _axis_attr(axis), "keepdims": bool(keepdims)})


def broadcast_to(x, shape, name: str | None = None) -> Tensor:
    return _op("BroadcastTo", [x], name, {"shape": tuple(int(d) for d in shape)})


def reshape(x, shape, name: str | None = None) -> Tensor:
    return _op("Reshape", [x], name, {"shape": tuple(int(d) for d in shape)})


def transpose(x, perm=None, name: str | None = None) -> Tensor:
    x = convert_to_tensor(x)
    perm = tuple(reversed(range(len(x.shape)))) if perm is None else tuple(int(p) for p in perm)
    return _op("Transpose", [x], name, {"perm": perm})


def concat(values: Sequence, axis: int, name: str = "concat") -> Tensor:
    if not values:
        raise GraphError("concat() needs at least one tensor")
    return _op("Concat", list(values), name, {"axis": int(axis)})


def slice(x, begin, size, name: str | None = None) -> Tensor:  # noqa: A001 (TensorFlow's name)
    return _op("Slice", [x], name, {"begin": tuple(int(b) for b in begin),
                                    "size": tuple(int(s) for s in size)})


def _ref(ref) -> Tensor:
    if isinstance(ref, Variable):
        return ref.ref
    if isinstance(ref, Tensor) and ref.op.type == "Variable":
        return ref
    raise TypeError(f"assign ops need a Variable, got {ref!r}")


def _assign(op_type: str, ref, value, name, use_locking) -> Tensor:
    ref = _ref(ref)
    g = ref.graph
    value = convert_to_tensor(value, dtype_hint=ref.dtype)
    attrs = {} if use_locking is None else {"use_locking": bool(use_locking)}
    return g.create_op(op_type, [ref, value], attrs, name=name).outputs[0]


def assign(ref, value, name: str | None = None, *, use_locking: bool | None = None) -> Tensor:
    """Set a variable's value; the op is colocated with the variable. ``use_locking``
    (TensorFlow's): the update holds the variable's lock, so concurrent steps that
    update it with locking do not interleave (else, as in TensorFlow, they may)."""
    return _assign("Assign", ref, value, name, use_locking)


def assign_add(ref, value, name: str | None = None, *,
               use_locking: bool | None = None) -> Tensor:
    """``ref += value`` (``use_locking``: see :func:`assign`; with it, concurrent
    increments are never lost)."""
    return _assign("AssignAdd", ref, value, name, use_locking)


def assign_sub(ref, value, name: str | None = None, *,
               use_locking: bool | None = None) -> Tensor:
    """``ref -= value`` (``use_locking``: see :func:`assign`)."""
    return _assign("AssignSub", ref, value, name, use_locking)


def no_op(name: str | None = None) -> Operation:
    return get_default_graph().create_op("NoOp", [], name=name)


def group(*inputs, name: str | None = None) -> Operation:
    """An op that runs after every one of ``inputs`` (tensors, ops or variables)."""
    flat = []
    for x in inputs:
        flat.extend(x if isinstance(x, (list, tuple)) else [x])
    g = _graph_of(*flat)
    with g.control_dependencies([as_graph_element(x, g) for x in flat]):
        return g.create_op("NoOp", [], name=name or "group_deps")


def global_variables(graph: Graph | None = None) -> list[Variable]:
    return (graph or get_default_graph()).get_collection(GLOBAL_VARIABLES)


def trainable_variables(graph: Graph | None = None) -> list[Variable]:
    return (graph or get_default_graph()).get_collection(TRAINABLE_VARIABLES)


def variables_initializer(var_list: Iterable[Variable], name: str = "init") -> Operation:
    return group(*[v.initializer for v in var_list], name=name)


def global_variables_initializer() -> Operation:
    """One op that runs every variable's initializer."""
    return variables_initializer(global_variables(), name="init")


# --- operators on tensors and variables ---------------------------------------------

def _operator(op_type: str, scope: str, reverse: bool = False):
    """A binary operator method, named as TensorFlow names it (``a + b`` -> ``add``)."""
    def method(self, other):
        if not isinstance(other, (Tensor, Variable, numbers.Number, np.ndarray, list, tuple)):
            return NotImplemented
        x, y = (other, self) if reverse else (self, other)
        return _binary(op_type, x, y, scope)
    return method


def _matmul_operator(reverse: bool):
    def method(self, other):
        if not isinstance(other, (Tensor, Variable, np.ndarray, list)):
            return NotImplemented
        x, y = (other, self) if reverse else (self, other)
        g = _graph_of(x, y)
        with g.name_scope("matmul") as scope:
            x, y = _convert_pair(x, y)
            return matmul(x, y, name=scope)
    return method


def _neg(self):
    g = _graph_of(self)
    with g.name_scope("neg") as name:
        return g.create_op("Neg", [convert_to_tensor(self)], name=name).outputs[0]


for _cls in (Tensor, Variable):
    _cls.__add__ = _operator("Add", "add")
    _cls.__radd__ = _operator("Add", "add", reverse=True)
    _cls.__sub__ = _operator("Sub", "sub")
    _cls.__rsub__ = _operator("Sub", "sub", reverse=True)
    _cls.__mul__ = _operator("Mul", "mul")
    _cls.__rmul__ = _operator("Mul", "mul", reverse=True)
    _cls.__matmul__ = _matmul_operator(False)
    _cls.__rmatmul__ = _matmul_operator(True)
    _cls.__neg__ = _neg


# The math family's builders attach the operators / ** abs() and indexing.
from core import builders_math as _builders_math  # noqa: E402,F401
