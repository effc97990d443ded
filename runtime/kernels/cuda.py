"""GPU kernels: numba CUDA kernels on device arrays; outputs stay on the device.

``numba.cuda`` is imported on the first GPU kernel call (or by :func:`cuda_available`),
never at import of this module, so the CPU path needs no CUDA.  The device code lives in
:mod:`.cuda_kernels`, imported on the first GPU call; numba compiles each kernel per
argument types on its first launch (:func:`warmup` does that ahead of time).  Under
``NUMBA_ENABLE_CUDASIM=1`` the same code runs on numba's simulator (slowly: keep shapes
tiny there).

Design
------
* Elementwise ops address flat buffers with per-dimension element strides passed as
  tuples (no host-to-device copy of metadata), broadcast dimensions having stride 0, after
  the dimension collapsing of :func:`.layout.broadcast_layout`.  Grid-stride loops.
* One *strided copy* kernel moves data for BroadcastTo, Transpose, Slice and Concat.
  Identity and Reshape are device-to-device copies.
* MatMul: 16x16 shared-memory tiles; transposes are read through swapped indices, so no
  transposed copy is made.
* Sum/Mean: viewed as ``(outer, reduced, inner)`` (non-adjacent reduced axes are first
  moved last with a strided copy); one thread per output, and when there are few outputs
  and a long reduced axis, a first pass over chunks of it into float64/int64 partial sums.
* Softmax/SoftmaxGrad: one thread per row.
* Const copies its value to the device on each call and a host ``feed`` is copied in: the
  executor may cache device copies of constants itself.

>>> cuda_available() in (True, False)
True
"""

from __future__ import annotations

import math

import numpy as np

from .layout import broadcast_layout, contiguous_strides, normalize_axes, reduce_layout
from .opcodes import (ADD, ASSIGN, MUL, NEG, RELU, RELU_GRAD, SIGMOID, SIGMOID_GRAD, SUB, TANH,
                      TANH_GRAD)
from .registry import FLOATING, NUMERIC, register

__all__ = ["cuda_available", "warmup"]

GPU = "GPU"
_MAX_THREADS = 256
_MAX_BLOCKS = 4096
#: Split the reduced axis over several threads when fewer outputs than this ...
_FEW_OUTPUTS = 1024
#: ... and each would otherwise sum more than this many elements.
_LONG_REDUCTION = 4096


# GPU dtypes: as TensorFlow, an int32 variable has no GPU kernel.
_NUMERIC_NO_INT32 = NUMERIC - {"int32"}


def _cuda():
    """numba.cuda, imported on first use."""
    from numba import cuda
    return cuda


def cuda_available() -> bool:
    """Whether GPU kernels can run here: a CUDA GPU, or numba's simulator
    (``NUMBA_ENABLE_CUDASIM=1`` set before ``numba.cuda`` was first imported).

    >>> isinstance(cuda_available(), bool)
    True
    """
    try:
        return bool(_cuda().is_available())
    except Exception:  # a broken driver or toolkit install means "no GPU", not a crash
        return False


def _kernels():
    """The device-code module (imports numba.cuda on first use)."""
    from . import cuda_kernels
    return cuda_kernels


# --- launch helpers ----------------------------------------------------------------------------

def _stream(ctx):
    return 0 if ctx.stream is None else ctx.stream


def _launch(kernel, n: int, ctx, *args) -> None:
    """Launch a grid-stride kernel over ``n`` items (nothing for ``n == 0``)."""
    if n == 0:
        return
    threads = min(_MAX_THREADS, 32 * math.ceil(n / 32))
    blocks = min(_MAX_BLOCKS, math.ceil(n / threads))
    kernel[blocks, threads, _stream(ctx)](*args)


def _empty(shape, dtype, ctx):
    return _cuda().device_array(tuple(shape), dtype=np.dtype(dtype), stream=_stream(ctx))


def _flat(a):
    """A 1-D view of a C-contiguous device array (kernels' outputs always are)."""
    return a.reshape(a.size)


def _strided_copy(ctx, x, x_offset, x_strides, out, out_offset, out_strides, shape) -> None:
    if not shape:  # 0-d: one element
        shape, x_strides, out_strides = (1,), (0,), (0,)
    n = math.prod(shape)
    _launch(_kernels().strided_copy, n, ctx, _flat(x), x_offset, tuple(x_strides), _flat(out),
            out_offset, tuple(out_strides), tuple(shape))


def _binary(code: int, ctx, x, y, out=None):
    if out is None:
        out = _empty(np.broadcast_shapes(x.shape, y.shape), x.dtype, ctx)
    shape, (xs, ys) = broadcast_layout(out.shape, [x.shape, y.shape])
    _launch(_kernels().binary, out.size, ctx, code, _flat(x), xs, _flat(y), ys, shape, _flat(out))
    return out


def _unary(kernel_name: str, code: int, ctx, x):
    out = _empty(x.shape, x.dtype, ctx)
    _launch(getattr(_kernels(), kernel_name), x.size, ctx, code, _flat(x), _flat(out))
    return out


def _copy(ctx, x):
    out = _empty(x.shape, x.dtype, ctx)
    if x.size:
        out.copy_to_device(x, stream=_stream(ctx))
    return out


def _to_device(ctx, value):
    """A host array copied to the device; a device array as it is."""
    if isinstance(value, (np.ndarray, np.generic, int, float, list, tuple)):
        return _cuda().to_device(np.asarray(value, order="C"), stream=_stream(ctx))  # keeps 0-d
    return value


# --- kernels ------------------------------------------------------------------------------------

@register("Const", GPU, NUMERIC)
def const(ctx, inputs, attrs):
    """The constant's value, copied to the device."""
    return (_to_device(ctx, np.asarray(attrs["value"])),)


@register("Placeholder", GPU, NUMERIC)
def placeholder(ctx, inputs, attrs):
    """``ctx.feed`` on the device (a host array is copied in)."""
    if ctx.feed is None:
        raise ValueError("Placeholder kernel needs ctx.feed, the fed value")
    return (_to_device(ctx, ctx.feed),)


@register("Variable", GPU, _NUMERIC_NO_INT32)
def variable(ctx, inputs, attrs):
    """The variable's device buffer itself, ``ctx.variable``."""
    if ctx.variable is None:
        raise ValueError("Variable kernel needs ctx.variable, the variable's buffer")
    return (ctx.variable,)


@register("NoOp", GPU, NUMERIC)
def no_op(ctx, inputs, attrs):
    """Nothing; exists for its control edges."""
    return ()


@register("Identity", GPU, NUMERIC)
def identity(ctx, inputs, attrs):
    """A device-to-device copy of x."""
    return (_copy(ctx, inputs[0]),)


@register("Assign", GPU, _NUMERIC_NO_INT32)
def assign(ctx, inputs, attrs):
    """``ref[...] = value`` on the device; returns ref."""
    ref, value = inputs
    return (_binary(ASSIGN, ctx, ref, value, out=ref),)


@register("AssignAdd", GPU, _NUMERIC_NO_INT32)
def assign_add(ctx, inputs, attrs):
    """``ref += value`` on the device; returns ref."""
    ref, value = inputs
    return (_binary(ADD, ctx, ref, value, out=ref),)


@register("AssignSub", GPU, _NUMERIC_NO_INT32)
def assign_sub(ctx, inputs, attrs):
    """``ref -= value`` on the device; returns ref."""
    ref, value = inputs
    return (_binary(SUB, ctx, ref, value, out=ref),)


@register("Add", GPU, NUMERIC)
def add(ctx, inputs, attrs):
    """x + y, broadcasting."""
    return (_binary(ADD, ctx, *inputs),)


@register("Sub", GPU, NUMERIC)
def sub(ctx, inputs, attrs):
    """x - y, broadcasting."""
    return (_binary(SUB, ctx, *inputs),)


@register("Mul", GPU, NUMERIC)
def mul(ctx, inputs, attrs):
    """x * y, broadcasting."""
    return (_binary(MUL, ctx, *inputs),)


@register("ReluGrad", GPU, NUMERIC)
def relu_grad(ctx, inputs, attrs):
    """ReluGrad(g, x) = g * (x > 0)."""
    return (_binary(RELU_GRAD, ctx, *inputs),)


@register("TanhGrad", GPU, FLOATING)
def tanh_grad(ctx, inputs, attrs):
    """TanhGrad(y, g) = g * (1 - y * y)."""
    return (_binary(TANH_GRAD, ctx, *inputs),)


@register("SigmoidGrad", GPU, FLOATING)
def sigmoid_grad(ctx, inputs, attrs):
    """SigmoidGrad(y, g) = g * y * (1 - y)."""
    return (_binary(SIGMOID_GRAD, ctx, *inputs),)


@register("Neg", GPU, NUMERIC)
def neg(ctx, inputs, attrs):
    """-x."""
    return (_unary("unary", NEG, ctx, inputs[0]),)


@register("Relu", GPU, NUMERIC)
def relu(ctx, inputs, attrs):
    """max(x, 0)."""
    return (_unary("unary", RELU, ctx, inputs[0]),)


@register("Tanh", GPU, FLOATING)
def tanh(ctx, inputs, attrs):
    """tanh(x)."""
    return (_unary("unary_float", TANH, ctx, inputs[0]),)


@register("Sigmoid", GPU, FLOATING)
def sigmoid(ctx, inputs, attrs):
    """1 / (1 + exp(-x)), computed without overflow."""
    return (_unary("unary_float", SIGMOID, ctx, inputs[0]),)


def _rows(a):
    """A (rows, last axis) view.  (The simulator's shapes take no negative index.)"""
    if not a.ndim:
        return a.reshape(1, 1)
    cols = a.shape[a.ndim - 1]
    return a.reshape(a.size // cols, cols)


@register("Softmax", GPU, FLOATING)
def softmax(ctx, inputs, attrs):
    """Softmax over the last axis (one thread per row)."""
    x = inputs[0]
    out = _empty(x.shape, x.dtype, ctx)
    if x.size:
        x2 = _rows(x)
        _launch(_kernels().softmax, x2.shape[0], ctx, x2, _rows(out))
    return (out,)


@register("SoftmaxGrad", GPU, FLOATING)
def softmax_grad(ctx, inputs, attrs):
    """SoftmaxGrad(y, g) = y * (g - sum(g * y, axis=-1, keepdims=True))."""
    y, g = inputs
    out = _empty(y.shape, y.dtype, ctx)
    if y.size:
        y2 = _rows(y)
        _launch(_kernels().softmax_grad, y2.shape[0], ctx, y2, _rows(g), _rows(out))
    return (out,)


def _reduce(ctx, x, attrs, mean: bool, axis_tensor=None):
    if axis_tensor is not None and "axis" not in attrs:  # TF's axis input, at run time
        host = axis_tensor if isinstance(axis_tensor, np.ndarray) else axis_tensor.copy_to_host()
        attrs = dict(attrs, axis=tuple(int(a) for a in np.asarray(host).reshape(-1)))
    axes = normalize_axes(attrs.get("axis"), x.ndim)
    if attrs.get("keepdims"):
        out_shape = tuple(1 if d in axes else n for d, n in enumerate(x.shape))
    else:
        out_shape = tuple(n for d, n in enumerate(x.shape) if d not in axes)
    perm, (outer, reduced, inner) = reduce_layout(x.shape, axes)
    if perm is not None:  # reduced axes apart: move them last with one strided copy
        moved = _empty(tuple(x.shape[p] for p in perm), x.dtype, ctx)
        strides = contiguous_strides(x.shape)
        _strided_copy(ctx, x, 0, tuple(strides[p] for p in perm), moved, 0,
                      contiguous_strides(moved.shape), moved.shape)
        x = moved
    out = _empty(out_shape, x.dtype, ctx)
    floating = np.dtype(x.dtype).kind == "f"
    kernel = _kernels().reduce_kernel(floating)
    count = max(reduced, 1)
    n_out = outer * inner
    if n_out < _FEW_OUTPUTS and reduced > _LONG_REDUCTION:
        chunks = min(_MAX_THREADS, math.ceil(reduced / _LONG_REDUCTION))
        chunk = math.ceil(reduced / chunks)
        partial = _empty((outer * chunks * inner,), np.float64 if floating else np.int64, ctx)
        _launch(kernel, partial.size, ctx, _flat(x), partial, outer, reduced, inner,
                chunks, chunk, False, count)
        _launch(kernel, n_out, ctx, partial, _flat(out), outer, chunks, inner, 1, chunks,
                mean, count)
    else:
        _launch(kernel, n_out, ctx, _flat(x), _flat(out), outer, reduced, inner, 1,
                max(reduced, 1), mean, count)
    return out


@register("Sum", GPU, NUMERIC)
def sum_(ctx, inputs, attrs):
    """Sum over ``attrs["axis"]`` (None: all), keeping reduced axes if ``keepdims``."""
    return (_reduce(ctx, inputs[0], attrs, False, inputs[1] if len(inputs) == 2 else None),)


@register("Mean", GPU, NUMERIC)
def mean(ctx, inputs, attrs):
    """Mean over ``attrs["axis"]``; integers truncate toward zero, as TensorFlow's."""
    return (_reduce(ctx, inputs[0], attrs, True, inputs[1] if len(inputs) == 2 else None),)


@register("MatMul", GPU, NUMERIC)
def matmul(ctx, inputs, attrs):
    """``op(a) @ op(b)`` with shared-memory tiles; transposes read in place."""
    a, b = inputs
    transpose_a, transpose_b = bool(attrs.get("transpose_a")), bool(attrs.get("transpose_b"))
    m, k = (a.shape[1], a.shape[0]) if transpose_a else a.shape
    n = b.shape[0] if transpose_b else b.shape[1]
    out = _empty((m, n), a.dtype, ctx)
    if m and n:
        tile = _kernels().TILE
        grid = (math.ceil(n / tile), math.ceil(m / tile))
        _kernels().matmul_kernel(np.dtype(a.dtype).name)[grid, (tile, tile), _stream(ctx)](
            a, b, out, transpose_a, transpose_b, k)
    return (out,)


@register("BroadcastTo", GPU, NUMERIC)
def broadcast_to(ctx, inputs, attrs):
    """x broadcast to ``attrs["shape"]`` (materialised)."""
    x = inputs[0]
    out = _empty(tuple(attrs["shape"]), x.dtype, ctx)
    if out.size:
        shape, (xs,) = broadcast_layout(out.shape, [x.shape])
        _strided_copy(ctx, x, 0, xs, out, 0, contiguous_strides(shape), shape)
    return (out,)


@register("Reshape", GPU, NUMERIC)
def reshape(ctx, inputs, attrs):
    """A copy of x with ``attrs["shape"]``."""
    return (_copy(ctx, inputs[0]).reshape(tuple(attrs["shape"])),)


@register("Transpose", GPU, NUMERIC)
def transpose(ctx, inputs, attrs):
    """x with its axes permuted by ``attrs["perm"]`` (materialised)."""
    x = inputs[0]
    perm = tuple(attrs["perm"])
    out = _empty(tuple(x.shape[p] for p in perm), x.dtype, ctx)
    if out.size:
        strides = contiguous_strides(x.shape)
        _strided_copy(ctx, x, 0, tuple(strides[p] for p in perm), out, 0,
                      contiguous_strides(out.shape), out.shape)
    return (out,)


@register("Concat", GPU, NUMERIC)
def concat(ctx, inputs, attrs):
    """The inputs joined along ``attrs["axis"]``: one strided copy per input."""
    rank = inputs[0].ndim
    axis = attrs["axis"] % rank
    total = sum(x.shape[axis] for x in inputs)
    out_shape = inputs[0].shape[:axis] + (total,) + inputs[0].shape[axis + 1:]
    out = _empty(out_shape, inputs[0].dtype, ctx)
    outer = math.prod(out_shape[:axis])
    inner = math.prod(out_shape[axis + 1:])
    offset = 0
    for x in inputs:
        width = x.shape[axis] * inner  # x as (outer, width) lands in out's columns
        if x.size:
            _strided_copy(ctx, x, 0, (width, 1), out, offset, (total * inner, 1), (outer, width))
        offset += width
    return (out,)


@register("Slice", GPU, NUMERIC)
def slice_(ctx, inputs, attrs):
    """``x[begin : begin + size]`` per axis; a size of -1 means "to the end"."""
    x = inputs[0]
    begin = tuple(attrs["begin"])
    size = tuple(n - b if s == -1 else s for b, s, n in zip(begin, attrs["size"], x.shape))
    out = _empty(size, x.dtype, ctx)
    if out.size:
        strides = contiguous_strides(x.shape)
        _strided_copy(ctx, x, sum(b * s for b, s in zip(begin, strides)), strides, out, 0,
                      contiguous_strides(size), size)
    return (out,)


def warmup(dtypes=("float32", "float64", "int32", "int64")) -> None:
    """Compile the CUDA kernels for ``dtypes`` by running each once on tiny arrays.

    Needs :func:`cuda_available`; raises ``RuntimeError`` otherwise.
    """
    if not cuda_available():
        raise RuntimeError("no CUDA GPU (nor NUMBA_ENABLE_CUDASIM=1): cannot warm up GPU kernels")
    from .context import KernelContext
    ctx = KernelContext(GPU)
    for name in dtypes:
        x = _to_device(ctx, np.ones((2, 3), dtype=name))
        add(ctx, (x, x), {})
        neg(ctx, (x,), {})
        sum_(ctx, (x,), {"axis": (1,)})
        mean(ctx, (x,), {"axis": (0,)})
        matmul(ctx, (x, x), {"transpose_b": True})
        transpose(ctx, (x,), {"perm": (1, 0)})
        if np.dtype(name).kind == "f":
            tanh(ctx, (x,), {})
            tanh_grad(ctx, (x, x), {})
            softmax(ctx, (x,), {})
            softmax_grad(ctx, (x, x), {})
