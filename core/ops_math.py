"""The op table's math and array ops: BatchMatMulV2, the unary and binary math ops (Exp,
Log, RealDiv, Pow, ...), Cast, AddN, Fill and the like, Pad, Split, Tile, StridedSlice,
StopGradient, Shape and Size, and the seeded random initializers.

Each op is an :class:`core.opdef.OpDef`; :mod:`core.ops` merges this family's table into
``OPS``, the single table the rest of the lab reads.  Op type names are TensorFlow's, as
``tf.compat.v1`` writes them into a GraphDef; an argument TensorFlow takes as a constant
tensor input is an attr here (listed in the op's ``const_inputs``).

>>> from core.dtypes import float32
>>> MATH_OPS["BatchMatMulV2"].infer([TensorSpec(float32, (5, 2, 3)),
...                                  TensorSpec(float32, (3, 4))], {})
[TensorSpec(dtype=core.float32, shape=(5, 2, 4))]
>>> strided_slice_index((4, None), {"begin": (1, 0), "end": (3, 0), "strides": (1, 1),
...                                 "end_mask": 2})
((slice(1, 3, 1), slice(0, None, 1)), (2, None))
"""

from __future__ import annotations

from core.dtypes import as_dtype
from core.opdef import (FLOAT, OpDef, ShapeError, TensorSpec, broadcast_shapes,
                        flops_per_output, infer_binary, infer_float_unary, infer_grad_pair,
                        infer_unary, kernels_for, known_shape, lazy_gradient, num_elements,
                        same_dtype, shape_from_tensor, table)

__all__ = ["MATH_OPS", "strided_slice_index", "RANDOM_OPS"]

#: The random initializers: stateful sources whose values depend on (seed, seed2).
RANDOM_OPS = ("RandomStandardNormal", "TruncatedNormal", "RandomUniform")


def _grad(name: str):
    return lazy_gradient(name, "core.autodiff_math")


# --- inference -------------------------------------------------------------------------

def infer_batch_matmul(ins, attrs):
    """``(..., m, k) @ (..., k, n)``, the batch dimensions broadcast (BatchMatMulV2)."""
    x, y = ins
    dtype = same_dtype(ins)
    if len(x.shape) < 2 or len(y.shape) < 2:
        raise ShapeError(f"BatchMatMul needs operands of rank >= 2, got shapes {x.shape} and {y.shape}")
    m, k1 = x.shape[-1:-3:-1] if attrs.get("adj_x") else x.shape[-2:]
    k2, n = y.shape[-1:-3:-1] if attrs.get("adj_y") else y.shape[-2:]
    if k1 is not None and k2 is not None and k1 != k2:
        raise ShapeError(f"BatchMatMul inner dimensions differ: {x.shape} @ {y.shape} "
                         f"(adj_x={bool(attrs.get('adj_x'))}, adj_y={bool(attrs.get('adj_y'))})")
    try:
        batch = broadcast_shapes(x.shape[:-2], y.shape[:-2])
    except ShapeError:
        raise ShapeError(f"BatchMatMul batch dimensions of {x.shape} and {y.shape} "
                         "cannot be broadcast") from None
    return [TensorSpec(dtype, batch + (m, n))]


def flops_batch_matmul(ins, outs, attrs):
    x = known_shape(ins[0].shape)
    k = x[-2] if attrs.get("adj_x") else x[-1]
    return 2.0 * num_elements(known_shape(outs[0].shape)) * k


def infer_cast(ins, attrs):
    return [TensorSpec(as_dtype(attrs["DstT"]), ins[0].shape)]


def infer_add_n(ins, attrs):
    dtype = same_dtype(ins)
    shape = ins[0].shape
    for s in ins[1:]:
        if len(s.shape) != len(shape) or any(a is not None and b is not None and a != b
                                             for a, b in zip(shape, s.shape)):
            raise ShapeError(f"AddN needs inputs of one shape, got {[s.shape for s in ins]}")
        shape = tuple(a if a is not None else b for a, b in zip(shape, s.shape))
    return [TensorSpec(dtype, shape)]


def _shape_operand(ins, attrs, key: str, position: int, op: str):
    """The static shape an op takes as attr ``key``, or, when that is given as a run-time
    tensor (input ``position``), a shape of unknown dimensions of that tensor's length."""
    if key in attrs:
        return tuple(None if d is None or d < 0 else int(d) for d in attrs[key])
    if len(ins) <= position:
        raise ShapeError(f"{op} needs its {key!r} as an attr or as input {position}")
    return shape_from_tensor(ins[position], attrs, op)


def infer_fill(ins, attrs):
    """Fill: inputs ``(value)`` with attr ``dims``, or ``(dims, value)`` (TF's order)."""
    value = ins[-1]
    if value.shape != ():
        raise ShapeError(f"Fill needs a scalar value, got shape {value.shape}")
    return [TensorSpec(value.dtype, _shape_operand(ins, attrs, "dims", 0, "Fill"))]


def infer_shape_of(ins, attrs):
    """Shape: the input's shape as an int vector (``out_type``, int32 by default)."""
    return [TensorSpec(as_dtype(attrs.get("out_type", "int32")), (len(ins[0].shape),))]


def infer_size(ins, attrs):
    return [TensorSpec(as_dtype(attrs.get("out_type", "int32")), ())]


def infer_pad(ins, attrs):
    x = ins[0]
    paddings = tuple(tuple(int(v) for v in p) for p in attrs["paddings"])
    if len(paddings) != len(x.shape) or any(len(p) != 2 or min(p) < 0 for p in paddings):
        raise ShapeError(f"Pad needs one non-negative (before, after) pair per axis of {x.shape}, "
                         f"got paddings {paddings}")
    return [TensorSpec(x.dtype, tuple(None if d is None else d + a + b
                                      for d, (a, b) in zip(x.shape, paddings)))]


def _split_axis(x, attrs, op: str) -> int:
    rank = len(x.shape)
    axis = int(attrs["axis"])
    if not -rank <= axis < rank:
        raise ShapeError(f"{op} axis {axis} is out of range for shape {x.shape}")
    return axis % rank


def infer_split(ins, attrs):
    x = ins[0]
    axis = _split_axis(x, attrs, "Split")
    n = int(attrs["num_split"])
    d = x.shape[axis]
    if n < 1 or (d is not None and d % n):
        raise ShapeError(f"Split of axis {axis} of {x.shape} into {n} equal parts")
    part = None if d is None else d // n
    shape = x.shape[:axis] + (part,) + x.shape[axis + 1:]
    return [TensorSpec(x.dtype, shape)] * n


def infer_split_v(ins, attrs):
    x = ins[0]
    axis = _split_axis(x, attrs, "SplitV")
    sizes = [int(s) for s in attrs["size_splits"]]
    d = x.shape[axis]
    if sizes.count(-1) > 1 or any(s < -1 for s in sizes):
        raise ShapeError(f"SplitV size_splits {sizes}: sizes >= 0 and at most one -1")
    if -1 in sizes:
        rest = sum(s for s in sizes if s != -1)
        if d is not None:
            if rest > d:
                raise ShapeError(f"SplitV size_splits {sizes} exceed axis {axis} of {x.shape}")
            sizes[sizes.index(-1)] = d - rest
    elif d is not None and sum(sizes) != d:
        raise ShapeError(f"SplitV size_splits {sizes} do not add up to axis {axis} of {x.shape}")
    if int(attrs.get("num_split", len(sizes))) != len(sizes):
        raise ShapeError(f"SplitV num_split {attrs['num_split']} != len(size_splits) {len(sizes)}")
    return [TensorSpec(x.dtype, x.shape[:axis] + (None if s == -1 else s,) + x.shape[axis + 1:])
            for s in sizes]


def infer_tile(ins, attrs):
    x = ins[0]
    multiples = tuple(int(m) for m in attrs["multiples"])
    if len(multiples) != len(x.shape) or min(multiples, default=0) < 0:
        raise ShapeError(f"Tile needs one non-negative multiple per axis of {x.shape}, "
                         f"got {multiples}")
    return [TensorSpec(x.dtype, tuple(None if d is None else d * m
                                      for d, m in zip(x.shape, multiples)))]


def strided_slice_index(shape, attrs) -> tuple[tuple, tuple]:
    """TensorFlow's StridedSlice spec resolved against ``shape``: ``(index, out_shape)``,
    a numpy index (one int, slice or None per entry) that selects the slice, and the
    output shape (None where ``shape`` is unknown and the length depends on it).

    ``attrs`` holds ``begin``, ``end``, ``strides`` and the bit masks ``begin_mask``,
    ``end_mask``, ``ellipsis_mask``, ``new_axis_mask``, ``shrink_axis_mask``; the one
    resolution serves shape inference, the kernels and the gradient.

    >>> strided_slice_index((3, 4), {"begin": (0, 2), "end": (0, 0), "strides": (1, 1),
    ...                              "ellipsis_mask": 1, "shrink_axis_mask": 2})
    ((slice(None, None, 1), 2), (3,))
    """
    begin, end, strides = (tuple(int(v) for v in attrs[k]) for k in ("begin", "end", "strides"))
    if not len(begin) == len(end) == len(strides):
        raise ShapeError(f"StridedSlice begin {begin}, end {end} and strides {strides} "
                         "differ in length")
    bm, em = int(attrs.get("begin_mask", 0)), int(attrs.get("end_mask", 0))
    ellipsis, new_axis = int(attrs.get("ellipsis_mask", 0)), int(attrs.get("new_axis_mask", 0))
    shrink = int(attrs.get("shrink_axis_mask", 0))
    if bin(ellipsis).count("1") > 1:
        raise ShapeError("StridedSlice takes at most one ellipsis")
    n = len(begin)
    rank = len(shape)
    consumed = sum(1 for i in range(n) if not (ellipsis >> i) & 1 and not (new_axis >> i) & 1)
    if consumed > rank:
        raise ShapeError(f"StridedSlice spec of {consumed} axes is too long for shape {shape}")
    index, out, dim = [], [], 0
    for i in range(n):
        if (ellipsis >> i) & 1:
            for _ in range(rank - consumed):
                index.append(slice(None, None, 1))
                out.append(shape[dim])
                dim += 1
            continue
        if (new_axis >> i) & 1:
            index.append(None)
            out.append(1)
            continue
        size, b, e, s = shape[dim], begin[i], end[i], strides[i]
        if s == 0:
            raise ShapeError(f"StridedSlice stride {i} is 0")
        if (shrink >> i) & 1:
            if size is not None and not -size <= b < size:
                raise ShapeError(f"StridedSlice index {b} is out of bounds for axis {dim} "
                                 f"of shape {shape}")
            index.append(b if b >= 0 or size is None else b + size)
        else:
            item = slice(None if (bm >> i) & 1 else b, None if (em >> i) & 1 else e, s)
            index.append(item)
            out.append(None if size is None else len(range(size)[item]))
        dim += 1
    for d in range(dim, rank):  # axes the spec does not name are taken whole
        index.append(slice(None, None, 1))
        out.append(shape[d])
    return tuple(index), tuple(out)


def infer_strided_slice(ins, attrs):
    return [TensorSpec(ins[0].dtype, strided_slice_index(ins[0].shape, attrs)[1])]


def infer_strided_slice_grad(ins, attrs):
    """StridedSliceGrad: inputs ``(dy)`` with attr ``shape``, or ``(shape, dy)``."""
    dy = ins[-1]
    shape = _shape_operand(ins, attrs, "shape", 0, "StridedSliceGrad")
    expected = strided_slice_index(shape, attrs)[1]
    if len(expected) != len(dy.shape) or any(a is not None and b is not None and a != b
                                             for a, b in zip(expected, dy.shape)):
        raise ShapeError(f"StridedSliceGrad: dy of shape {dy.shape} is not the slice's "
                         f"shape {expected}")
    return [TensorSpec(dy.dtype, shape)]


def infer_squeeze(ins, attrs):
    """Squeeze: drop the axes ``squeeze_dims`` (all axes of length 1 when empty)."""
    shape = ins[0].shape
    rank = len(shape)
    dims = attrs.get("squeeze_dims") or ()
    if not dims:
        if None in shape:
            raise ShapeError(f"Squeeze of all length-1 axes of {shape}: name the axes, "
                             "some lengths are unknown")
        axes = {i for i, d in enumerate(shape) if d == 1}
    else:
        axes = set()
        for a in dims:
            if not -rank <= int(a) < rank:
                raise ShapeError(f"Squeeze axis {a} is out of range for shape {shape}")
            if shape[int(a) % rank] not in (1, None):
                raise ShapeError(f"Squeeze axis {a} of shape {shape} is not of length 1")
            axes.add(int(a) % rank)
    return [TensorSpec(ins[0].dtype, tuple(d for i, d in enumerate(shape) if i not in axes))]


def infer_random(ins, attrs):
    dtype = as_dtype(attrs["dtype"])
    if not dtype.is_floating:
        raise ShapeError(f"random ops make floating-point tensors, got dtype {dtype.name}")
    shape = tuple(int(d) for d in attrs["shape"])
    if min(shape, default=0) < 0:
        raise ShapeError(f"random op shape {shape} has a negative dimension")
    return [TensorSpec(dtype, shape)]


def infer_like(ins, attrs):
    return [TensorSpec(ins[0].dtype, ins[0].shape)]


def infer_numeric_binary(ins, attrs):
    return infer_binary(ins, attrs)


def infer_float_binary(ins, attrs):
    out = infer_binary(ins, attrs)
    if not out[0].dtype.is_floating:
        raise ShapeError(f"needs floating-point inputs, got {out[0].dtype.name}")
    return out


# --- costs ------------------------------------------------------------------------------

def flops_add_n(ins, outs, attrs):
    return (len(ins) - 1) * num_elements(known_shape(outs[0].shape))


# --- the table --------------------------------------------------------------------------

_UNARY = dict(min_inputs=1, max_inputs=1, multithreaded=True)
_BINARY = dict(min_inputs=2, max_inputs=2, multithreaded=True)
_FLOAT_KERNELS = kernels_for(FLOAT, FLOAT)
_INDEX_KERNELS = kernels_for({"int32", "int64"}, {"int32", "int64"})  # by out_type
_RANDOM = dict(flops=flops_per_output(4), kernels=_FLOAT_KERNELS, stateful=True,
               const_inputs=((0, "shape"),), min_inputs=0, max_inputs=0)

MATH_OPS: dict[str, OpDef] = table(
    OpDef("BatchMatMulV2", infer_batch_matmul, flops_batch_matmul, kernels=_FLOAT_KERNELS,
          gradient=_grad("batch_matmul_grad"), **_BINARY),
    # Unary math.
    # (Exp, Log and Pow run numpy's SIMD ufuncs on a CPU, on one thread: see cpu_math)
    OpDef("Exp", infer_float_unary, flops_per_output(8), kernels=_FLOAT_KERNELS,
          gradient=_grad("exp_grad"), min_inputs=1, max_inputs=1),
    OpDef("Log", infer_float_unary, flops_per_output(8), kernels=_FLOAT_KERNELS,
          gradient=_grad("log_grad"), min_inputs=1, max_inputs=1),
    OpDef("Sqrt", infer_float_unary, flops_per_output(4), kernels=_FLOAT_KERNELS,
          gradient=_grad("sqrt_grad"), **_UNARY),
    OpDef("Rsqrt", infer_float_unary, flops_per_output(5), kernels=_FLOAT_KERNELS,
          gradient=_grad("rsqrt_grad"), **_UNARY),
    OpDef("SqrtGrad", infer_grad_pair, flops_per_output(2), kernels=_FLOAT_KERNELS, **_BINARY),
    OpDef("RsqrtGrad", infer_grad_pair, flops_per_output(4), kernels=_FLOAT_KERNELS, **_BINARY),
    OpDef("Square", infer_unary, flops_per_output(1), gradient=_grad("square_grad"), **_UNARY),
    OpDef("Abs", infer_unary, flops_per_output(1), gradient=_grad("abs_grad"), **_UNARY),
    OpDef("Sign", infer_unary, flops_per_output(1), gradient=_grad("zero_grad"), **_UNARY),
    # Binary math, broadcasting.
    OpDef("RealDiv", infer_float_binary, flops_per_output(1), kernels=_FLOAT_KERNELS,
          gradient=_grad("real_div_grad"), **_BINARY),
    OpDef("Pow", infer_float_binary, flops_per_output(10), kernels=_FLOAT_KERNELS,
          gradient=_grad("pow_grad"), min_inputs=2, max_inputs=2),
    OpDef("Maximum", infer_numeric_binary, flops_per_output(1), gradient=_grad("maximum_grad"),
          **_BINARY),
    OpDef("Minimum", infer_numeric_binary, flops_per_output(1), gradient=_grad("minimum_grad"),
          **_BINARY),
    OpDef("SquaredDifference", infer_numeric_binary, flops_per_output(2),
          gradient=_grad("squared_difference_grad"), **_BINARY),
    # Types, sums and constants of a shape.
    OpDef("Cast", infer_cast, flops_per_output(1), gradient=_grad("cast_grad"), **_UNARY),
    OpDef("AddN", infer_add_n, flops_add_n, gradient=_grad("add_n_grad"), multithreaded=True,
          min_inputs=1, max_inputs=None),
    OpDef("Fill", infer_fill, const_inputs=((0, "dims"),), gradient=_grad("fill_grad"),
          min_inputs=1, max_inputs=2),
    OpDef("ZerosLike", infer_like, min_inputs=1, max_inputs=1),
    OpDef("OnesLike", infer_like, min_inputs=1, max_inputs=1),
    OpDef("Shape", infer_shape_of, kernels=_INDEX_KERNELS, min_inputs=1, max_inputs=1),
    OpDef("Size", infer_size, kernels=_INDEX_KERNELS, min_inputs=1, max_inputs=1),
    OpDef("StopGradient", infer_unary, forwards_input=True, min_inputs=1, max_inputs=1),
    OpDef("Squeeze", infer_squeeze, forwards_input=True, gradient=_grad("squeeze_grad"),
          min_inputs=1, max_inputs=1),
    # Data movement.
    OpDef("Pad", infer_pad, const_inputs=((1, "paddings"),), gradient=_grad("pad_grad"),
          min_inputs=1, max_inputs=1),
    OpDef("Split", infer_split, const_inputs=((0, "axis"),), gradient=_grad("split_grad"),
          min_inputs=1, max_inputs=1),
    OpDef("SplitV", infer_split_v, const_inputs=((1, "size_splits"), (2, "axis")),
          gradient=_grad("split_grad"), min_inputs=1, max_inputs=1),
    OpDef("Tile", infer_tile, const_inputs=((1, "multiples"),), gradient=_grad("tile_grad"),
          min_inputs=1, max_inputs=1),
    OpDef("StridedSlice", infer_strided_slice,
          const_inputs=((1, "begin"), (2, "end"), (3, "strides")),
          gradient=_grad("strided_slice_grad"), min_inputs=1, max_inputs=1),
    OpDef("StridedSliceGrad", infer_strided_slice_grad,
          const_inputs=((0, "shape"), (1, "begin"), (2, "end"), (3, "strides")),
          gradient=_grad("strided_slice_grad_grad"), min_inputs=1, max_inputs=2),
    # Random initializers.
    OpDef("RandomStandardNormal", infer_random, **_RANDOM),
    OpDef("TruncatedNormal", infer_random, **_RANDOM),
    OpDef("RandomUniform", infer_random, **_RANDOM),
)
