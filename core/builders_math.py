"""Builders of the math and array ops, TensorFlow 1.x (``tf.compat.v1``) signatures:
constants of a shape (``zeros``, ``fill``...), seeded random initializers, elementwise
math, ``cast``, ``add_n``, ``pad``/``split``/``tile``/``strided_slice``, and the
normalisations composed of them (``moments``, ``batch_normalization``,
``layer_normalization``).  Also the tensor operators ``/``, ``**``, ``abs()`` and
indexing ``t[1:3, :]``.

>>> import core as tf
>>> g = tf.Graph()
>>> with g.as_default():
...     x = tf.placeholder(tf.float32, [None, 4, 3])
...     y = x[:, 1:3] / 2.0
...     mean, var = tf.moments(x, axes=[0, 1])
>>> y.op.type, y.shape, mean.shape
('RealDiv', (None, 2, 3), (3,))

Random seeds follow TensorFlow's :func:`get_seed` rules: a graph-level seed
(:func:`set_random_seed`) with no op seed gives each op the seed pair (graph seed, the
number of ops created so far), so a graph built the same way draws the same numbers; an
op seed without a graph seed pairs with TensorFlow's default graph seed; neither gives
``(0, 0)``, which the kernels read as "draw fresh numbers each time".
"""

from __future__ import annotations

import numbers

import numpy as np

from core.builders import (Variable, _binary, _convert_pair, _graph_of, _op, constant,
                           convert_to_tensor, reduce_mean, reshape)
from core.dtypes import as_dtype, float32, float64
from core.graph import Graph, Tensor, get_default_graph

__all__ = [
    "zeros", "ones", "fill", "zeros_like", "ones_like", "random_normal", "truncated_normal",
    "random_uniform", "set_random_seed", "get_seed", "add_n", "cast", "exp", "log", "sqrt",
    "rsqrt", "pow", "maximum", "minimum", "squared_difference", "abs", "sign", "divide",
    "truediv", "realdiv", "pad", "split", "tile", "strided_slice", "stop_gradient",
    "squeeze", "shape", "size", "batch_matmul", "moments", "batch_normalization",
    "layer_normalization", "DEFAULT_GRAPH_SEED",
]

#: TensorFlow's seed paired with an op seed when the graph has none (random_seed.py).
DEFAULT_GRAPH_SEED = 87654321
_MAXINT32 = 2 ** 31 - 1


# --- seeds ---------------------------------------------------------------------------------

def set_random_seed(seed: int | None) -> None:
    """Set the default graph's random seed (``tf.compat.v1.set_random_seed``)."""
    get_default_graph().seed = None if seed is None else int(seed)


def get_seed(op_seed: int | None, graph: Graph | None = None) -> tuple[int | None, int | None]:
    """The ``(seed, seed2)`` pair an op uses, by TensorFlow's rules (random_seed.get_seed).

    >>> g = Graph()
    >>> get_seed(None, g), get_seed(7, g)
    ((None, None), (87654321, 7))
    >>> g.seed = 1
    >>> get_seed(None, g), get_seed(7, g)
    ((1, 0), (1, 7))
    """
    graph = get_default_graph() if graph is None else graph  # (an empty graph is falsy)
    global_seed = graph.seed
    if global_seed is not None:
        if op_seed is None:
            op_seed = len(graph)  # TensorFlow's graph._last_id: ops created so far
        seeds = (global_seed % _MAXINT32, int(op_seed) % _MAXINT32)
    elif op_seed is not None:
        seeds = (DEFAULT_GRAPH_SEED, int(op_seed) % _MAXINT32)
    else:
        return None, None
    return (0, _MAXINT32) if seeds == (0, 0) else seeds  # (0, 0) means "nondeterministic"


# --- constants of a shape -----------------------------------------------------------------

def _dims(shape):
    """A static shape tuple, or a run-time shape tensor as it is."""
    if isinstance(shape, (Tensor, Variable)):
        return convert_to_tensor(shape)
    if isinstance(shape, numbers.Integral):
        shape = (shape,)
    dims = tuple(int(d) for d in shape)
    if min(dims, default=0) < 0:
        raise ValueError(f"shape {dims} has a negative dimension")
    return dims


def fill(dims, value, name: str | None = None) -> Tensor:
    """A tensor of shape ``dims`` filled with the scalar ``value`` (op ``Fill``);
    ``dims`` may be a run-time int tensor (then the op takes it as an input, as TF)."""
    g = _graph_of(dims, value)
    with g.name_scope(name or "Fill") as scope:
        dims = _dims(dims)
        value = convert_to_tensor(value, name="value")
        if isinstance(dims, Tensor):
            return g.create_op("Fill", [dims, value], name=scope).outputs[0]
        return g.create_op("Fill", [value], {"dims": dims}, name=scope).outputs[0]


def zeros(shape, dtype=float32, name: str | None = None) -> Tensor:
    """Zeros of ``shape`` (a ``Fill``: no array is stored in the graph)."""
    return fill(shape, constant(0, dtype=dtype, name=(name or "zeros") + "/Const"),
                name=name or "zeros")


def ones(shape, dtype=float32, name: str | None = None) -> Tensor:
    """Ones of ``shape`` (a ``Fill``)."""
    return fill(shape, constant(1, dtype=dtype, name=(name or "ones") + "/Const"),
                name=name or "ones")


def zeros_like(tensor, dtype=None, name: str | None = None) -> Tensor:
    """Zeros of ``tensor``'s shape, known or not (op ``ZerosLike``)."""
    x = convert_to_tensor(tensor)
    if dtype is not None and as_dtype(dtype) is not x.dtype:
        x = cast(x, dtype)
    return _op("ZerosLike", [x], name)


def ones_like(tensor, dtype=None, name: str | None = None) -> Tensor:
    """Ones of ``tensor``'s shape, known or not (op ``OnesLike``)."""
    x = convert_to_tensor(tensor)
    if dtype is not None and as_dtype(dtype) is not x.dtype:
        x = cast(x, dtype)
    return _op("OnesLike", [x], name)


def shape(input, out_type="int32", name: str | None = None) -> Tensor:  # noqa: A002
    """The run-time shape of ``input`` as an int vector (op ``Shape``)."""
    return _op("Shape", [input], name, {"out_type": as_dtype(out_type).name})


def size(input, out_type="int32", name: str | None = None) -> Tensor:  # noqa: A002
    """The run-time number of elements of ``input`` (op ``Size``)."""
    return _op("Size", [input], name, {"out_type": as_dtype(out_type).name})


def reshape_to(x, shape_tensor: Tensor, name: str | None = None, static_shape=None) -> Tensor:
    """``Reshape`` to a shape known at run time (an int vector tensor, TF's input 1);
    ``static_shape`` states the dimensions known now (None for the others)."""
    attrs = {"_output_shapes": [tuple(static_shape)]} if static_shape is not None else None
    return _op("Reshape", [x, shape_tensor], name, attrs)


def reshape_like(x, like: Tensor, name: str | None = None) -> Tensor:
    """``x`` reshaped to ``like``'s shape: static when it is known or has one unknown
    dimension, else through ``Shape(like)`` at run time."""
    target = tuple(like.shape)
    x = convert_to_tensor(x)
    if tuple(x.shape) == target and None not in target:
        return x
    if target.count(None) <= 1:
        return reshape(x, [-1 if d is None else d for d in target], name=name)
    return reshape_to(x, shape(like), name, static_shape=target)


def broadcast_like(x, like: Tensor, name: str | None = None) -> Tensor:
    """``x`` broadcast to ``like``'s shape (through ``Shape(like)`` when it is unknown)."""
    if None in like.shape:
        return _op("BroadcastTo", [x, shape(like)], name, {"_output_shapes": [tuple(like.shape)]})
    return _op("BroadcastTo", [x], name, {"shape": tuple(like.shape)})


# --- random initializers ------------------------------------------------------------------

def _random(op_type: str, shape, dtype, seed) -> Tensor:
    dims = _dims(shape)
    if isinstance(dims, Tensor):
        raise TypeError(f"{op_type} needs a static shape here, got tensor {dims.name}")
    g = get_default_graph()
    seed1, seed2 = get_seed(seed, g)
    attrs = {"shape": dims, "dtype": as_dtype(dtype).name, "seed": seed1 or 0,
             "seed2": seed2 or 0}
    return g.create_op(op_type, [], attrs, name=op_type).outputs[0]


def _scaled(op_type: str, shape, low_or_mean, spread, dtype, seed, name, default) -> Tensor:
    dtype = as_dtype(dtype)
    if not dtype.is_floating:
        raise ValueError(f"{default}() makes floating-point tensors; got dtype {dtype.name}")
    g = get_default_graph()
    with g.name_scope(name or default) as scope:
        spread = convert_to_tensor(spread, dtype=dtype, name="stddev" if default != "random_uniform"
                                   else "range", dtype_hint=dtype)
        offset = convert_to_tensor(low_or_mean, dtype=dtype, name="mean" if default != "random_uniform"
                                   else "min", dtype_hint=dtype)
        rnd = _random(op_type, shape, dtype, seed)
        return g.create_op("Add", [g.create_op("Mul", [rnd, spread], name="mul").outputs[0], offset],
                           name=scope).outputs[0]


def random_normal(shape, mean=0.0, stddev=1.0, dtype=float32, seed=None, name=None) -> Tensor:
    """Normal samples, ``RandomStandardNormal * stddev + mean``.

    >>> g = Graph()
    >>> with g.as_default():
    ...     r = random_normal([2, 3], seed=5)
    >>> r.op.inputs[0].op.inputs[0].op.attrs["seed2"]
    5
    """
    return _scaled("RandomStandardNormal", shape, mean, stddev, dtype, seed, name, "random_normal")


def truncated_normal(shape, mean=0.0, stddev=1.0, dtype=float32, seed=None, name=None) -> Tensor:
    """Normal samples redrawn beyond two standard deviations (op ``TruncatedNormal``)."""
    return _scaled("TruncatedNormal", shape, mean, stddev, dtype, seed, name, "truncated_normal")


def random_uniform(shape, minval=0.0, maxval=None, dtype=float32, seed=None, name=None) -> Tensor:
    """Uniform samples in ``[minval, maxval)`` (``maxval`` 1 when None): ``RandomUniform
    * (maxval - minval) + minval``; floating dtypes only (TF's integer variant,
    RandomUniformInt, is not in the op table)."""
    maxval = 1.0 if maxval is None else maxval
    if isinstance(minval, numbers.Number) and isinstance(maxval, numbers.Number):
        return _scaled("RandomUniform", shape, minval, maxval - minval, dtype, seed, name,
                       "random_uniform")
    g = get_default_graph()
    with g.name_scope(name or "random_uniform"):
        lo = convert_to_tensor(minval, dtype=dtype, name="min", dtype_hint=dtype)
        hi = convert_to_tensor(maxval, dtype=dtype, name="max", dtype_hint=dtype)
        rnd = _random("RandomUniform", shape, dtype, seed)
        return rnd * (hi - lo) + lo


# --- elementwise math ----------------------------------------------------------------------

def add_n(inputs, name: str | None = None) -> Tensor:
    """The sum of tensors of one shape and dtype (op ``AddN``; one input passes through)."""
    inputs = [convert_to_tensor(x) for x in inputs]
    if not inputs:
        raise ValueError("add_n() needs at least one tensor")
    if len(inputs) == 1:
        return inputs[0]
    return _op("AddN", inputs, name or "AddN")


def cast(x, dtype, name: str | None = None) -> Tensor:
    """``x`` as ``dtype`` (op ``Cast``; ``x`` itself when it already is)."""
    x = convert_to_tensor(x)
    dtype = as_dtype(dtype)
    if x.dtype is dtype:
        return x
    return _op("Cast", [x], name or "Cast",
               {"SrcT": x.dtype.name, "DstT": dtype.name, "Truncate": False})


def _unary(op_type):
    def build(x, name: str | None = None) -> Tensor:
        return _op(op_type, [x], name)
    build.__name__ = op_type.lower()
    build.__doc__ = f"Elementwise ``{op_type}`` of ``x``."
    return build


exp = _unary("Exp")
log = _unary("Log")
sqrt = _unary("Sqrt")
rsqrt = _unary("Rsqrt")
sign = _unary("Sign")
abs = _unary("Abs")  # noqa: A001 (TensorFlow's name)
stop_gradient = _unary("StopGradient")
stop_gradient.__doc__ = "``x``, through which :func:`core.gradients` passes no gradient."


def pow(x, y, name: str | None = None) -> Tensor:  # noqa: A001 (TensorFlow's name)
    """``x ** y`` elementwise with broadcasting (op ``Pow``)."""
    return _binary("Pow", x, y, name)


def maximum(x, y, name: str | None = None) -> Tensor:
    """Elementwise max with broadcasting (op ``Maximum``)."""
    return _binary("Maximum", x, y, name)


def minimum(x, y, name: str | None = None) -> Tensor:
    """Elementwise min with broadcasting (op ``Minimum``)."""
    return _binary("Minimum", x, y, name)


def squared_difference(x, y, name: str | None = None) -> Tensor:
    """``(x - y) ** 2`` elementwise (op ``SquaredDifference``)."""
    return _binary("SquaredDifference", x, y, name)


def realdiv(x, y, name: str | None = None) -> Tensor:
    """``x / y`` of floating tensors (op ``RealDiv``)."""
    return _binary("RealDiv", x, y, name)


_TRUEDIV_TYPES = {"int32": float64, "int64": float64, "float16": None, "float32": None,
                  "float64": None}


def truediv(x, y, name: str | None = None) -> Tensor:
    """``x / y``; integer operands are first cast to float64, as TensorFlow's truediv."""
    g = _graph_of(x, y)
    with g.name_scope(name or "truediv") as scope:
        x, y = _convert_pair(x, y)
        target = _TRUEDIV_TYPES.get(x.dtype.name)
        if target is not None:
            x, y = cast(x, target), cast(y, target)
        return g.create_op("RealDiv", [x, y], name=scope).outputs[0]


divide = truediv


# --- data movement -------------------------------------------------------------------------

def pad(tensor, paddings, mode: str = "CONSTANT", name: str | None = None,
        constant_values=0) -> Tensor:
    """Zero padding, ``paddings`` one ``(before, after)`` pair per axis (op ``Pad``).

    Only TF's ``Pad`` (mode CONSTANT, value 0) is in the op table."""
    if str(mode).upper() != "CONSTANT" or constant_values != 0:
        raise ValueError(f"pad(mode={mode!r}, constant_values={constant_values!r}): only "
                         "CONSTANT zero padding (TF's Pad op) is supported")
    paddings = tuple((int(a), int(b)) for a, b in np.asarray(paddings).reshape(-1, 2))
    return _op("Pad", [tensor], name, {"paddings": paddings})


def split(value, num_or_size_splits, axis: int = 0, num=None, name: str = "split") -> list[Tensor]:
    """``value`` split along ``axis``: into ``num_or_size_splits`` equal parts (op
    ``Split``) or parts of the listed sizes, one of which may be -1 (op ``SplitV``)."""
    x = convert_to_tensor(value)
    g = x.graph
    if isinstance(num_or_size_splits, numbers.Integral):
        op = g.create_op("Split", [x], {"axis": int(axis), "num_split": int(num_or_size_splits)},
                         name=name)
    else:
        sizes = tuple(int(s) for s in num_or_size_splits)
        op = g.create_op("SplitV", [x], {"axis": int(axis), "size_splits": sizes,
                                         "num_split": len(sizes)}, name=name)
    return list(op.outputs)


def tile(input, multiples, name: str | None = None) -> Tensor:  # noqa: A002
    """``input`` repeated ``multiples[i]`` times along each axis i (op ``Tile``)."""
    return _op("Tile", [input], name, {"multiples": tuple(int(m) for m in multiples)})


def squeeze(input, axis=None, name: str | None = None) -> Tensor:  # noqa: A002
    """``input`` without the length-1 axes ``axis`` (all of them when None)."""
    axis = () if axis is None else ((int(axis),) if isinstance(axis, numbers.Integral)
                                    else tuple(int(a) for a in axis))
    return _op("Squeeze", [input], name, {"squeeze_dims": axis})


def strided_slice(input_, begin, end, strides=None, begin_mask=0, end_mask=0, ellipsis_mask=0,
                  new_axis_mask=0, shrink_axis_mask=0, name: str | None = None) -> Tensor:
    """TensorFlow's ``strided_slice`` (begin/end/strides and the five bit masks)."""
    begin = tuple(int(v) for v in begin)
    strides = (1,) * len(begin) if strides is None else tuple(int(v) for v in strides)
    attrs = {"begin": begin, "end": tuple(int(v) for v in end), "strides": strides,
             "begin_mask": int(begin_mask), "end_mask": int(end_mask),
             "ellipsis_mask": int(ellipsis_mask), "new_axis_mask": int(new_axis_mask),
             "shrink_axis_mask": int(shrink_axis_mask)}
    return _op("StridedSlice", [input_], name or "strided_slice", attrs)


def _slice_spec(key) -> dict:
    """TensorFlow's _slice_helper: a Python index -> strided_slice arguments."""
    if not isinstance(key, tuple):
        key = (key,)
    spec = {"begin": [], "end": [], "strides": [], "begin_mask": 0, "end_mask": 0,
            "ellipsis_mask": 0, "new_axis_mask": 0, "shrink_axis_mask": 0}
    for i, item in enumerate(key):
        bit = 1 << i
        if isinstance(item, slice):
            start, stop, step = item.start, item.stop, item.step
            for v in (start, stop, step):
                if v is not None and not isinstance(v, numbers.Integral):
                    raise TypeError(f"tensor indices must be Python ints, slices, ..., or "
                                    f"None; got {v!r}")
            if step == 0:
                raise ValueError("slice step cannot be zero")
            spec["begin"].append(0 if start is None else int(start))
            spec["end"].append(0 if stop is None else int(stop))
            spec["strides"].append(1 if step is None else int(step))
            spec["begin_mask"] |= bit if start is None else 0
            spec["end_mask"] |= bit if stop is None else 0
        elif item is Ellipsis:
            spec["begin"].append(0), spec["end"].append(0), spec["strides"].append(1)
            spec["ellipsis_mask"] |= bit
        elif item is None:
            spec["begin"].append(0), spec["end"].append(0), spec["strides"].append(1)
            spec["new_axis_mask"] |= bit
        elif isinstance(item, (numbers.Integral, np.integer)) and not isinstance(item, bool):
            spec["begin"].append(int(item)), spec["end"].append(int(item) + 1)
            spec["strides"].append(1)
            spec["shrink_axis_mask"] |= bit
        else:
            raise TypeError(f"tensor indices must be Python ints, slices, ..., or None; "
                            f"got {item!r} (indexing by a tensor is not supported)")
    return spec


# --- products and normalisations -----------------------------------------------------------

def batch_matmul(x, y, adj_x: bool = False, adj_y: bool = False, name: str | None = None) -> Tensor:
    """Batched matrix product, batch axes broadcast (op ``BatchMatMulV2``)."""
    g = _graph_of(x, y)
    x, y = convert_to_tensor(x), convert_to_tensor(y)
    return g.create_op("BatchMatMulV2", [x, y], {"adj_x": bool(adj_x), "adj_y": bool(adj_y)},
                       name=name or "MatMul").outputs[0]


def _axes(axes) -> list[int]:
    return [int(axes)] if isinstance(axes, numbers.Integral) else [int(a) for a in axes]


def moments(x, axes, shift=None, name: str | None = None, keep_dims=None,
            keepdims: bool | None = None) -> tuple[Tensor, Tensor]:
    """Mean and variance of ``x`` over ``axes`` (``tf.nn.moments``): the variance is the
    mean of ``SquaredDifference(x, StopGradient(mean))``, as TensorFlow builds it."""
    keep = bool(keepdims if keepdims is not None else keep_dims)
    x = convert_to_tensor(x)
    g = x.graph
    axes = _axes(axes)
    with g.name_scope(name or "moments"):
        y = cast(x, float32) if x.dtype.name == "float16" else x
        mean = reduce_mean(y, axes, keepdims=True, name="mean")
        variance = reduce_mean(squared_difference(y, stop_gradient(mean)), axes, keepdims=True,
                               name="variance")
        if not keep:
            mean = squeeze(mean, axes)
            variance = squeeze(variance, axes)
        if y is not x:
            mean, variance = cast(mean, x.dtype), cast(variance, x.dtype)
        return mean, variance


def batch_normalization(x, mean, variance, offset, scale, variance_epsilon,
                        name: str | None = None) -> Tensor:
    """``(x - mean) * scale / sqrt(variance + epsilon) + offset``, composed as TensorFlow
    composes it (``offset``/``scale`` may be None)."""
    g = _graph_of(x, mean, variance)
    with g.name_scope(name or "batchnorm"):
        x = convert_to_tensor(x)
        inv = rsqrt(variance + convert_to_tensor(variance_epsilon, dtype_hint=x.dtype))
        if scale is not None:
            inv = inv * scale
        shift = (offset - mean * inv) if offset is not None else -(mean * inv)
        return x * inv + shift


def layer_normalization(x, gamma=None, beta=None, axis=-1, epsilon: float = 1e-6,
                        name: str | None = None) -> Tensor:
    """Layer normalisation over ``axis`` (an int or a list; the last axis by default):
    :func:`moments` then :func:`batch_normalization` with ``beta`` as offset and
    ``gamma`` as scale, so its gradients are those of the ops it is made of."""
    x = convert_to_tensor(x)
    with x.graph.name_scope(name or "LayerNorm"):
        mean, variance = moments(x, _axes(axis), keepdims=True)
        return batch_normalization(x, mean, variance, beta, gamma, epsilon)


# --- operators -------------------------------------------------------------------------------

def _truediv_operator(reverse: bool):
    def method(self, other):
        if not isinstance(other, (Tensor, Variable, numbers.Number, np.ndarray, list, tuple)):
            return NotImplemented
        x, y = (other, self) if reverse else (self, other)
        return truediv(x, y)
    return method


def _pow_operator(reverse: bool):
    def method(self, other):
        if not isinstance(other, (Tensor, Variable, numbers.Number, np.ndarray, list, tuple)):
            return NotImplemented
        x, y = (other, self) if reverse else (self, other)
        return _binary("Pow", x, y, "pow")
    return method


def _floordiv(self, other):
    raise TypeError("`//` on tensors: the op table has no FloorDiv; use `/` (RealDiv, ints "
                    "cast to float64) or cast the result")


def _getitem(self, key):
    return strided_slice(convert_to_tensor(self), name="strided_slice", **_slice_spec(key))


def _iter(self):
    raise TypeError(f"{self!r} is not iterable in a graph: index it (t[0]) or use split()")


for _cls in (Tensor, Variable):
    _cls.__truediv__ = _truediv_operator(False)
    _cls.__rtruediv__ = _truediv_operator(True)
    _cls.__floordiv__ = _cls.__rfloordiv__ = _floordiv
    _cls.__pow__ = _pow_operator(False)
    _cls.__rpow__ = _pow_operator(True)
    _cls.__abs__ = lambda self: _op("Abs", [self], "Abs")
    _cls.__getitem__ = _getitem
    _cls.__iter__ = _iter
