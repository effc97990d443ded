"""GPU kernels of the nn op family (:mod:`core.ops_nn`), registered at import; the device
code (:mod:`.cuda_nn_kernels`) is imported, and ``numba.cuda`` with it, on the first GPU
call only, as :mod:`.cuda` does (see there for the conventions: device arrays in and
out, grid-stride launches on ``ctx.stream``).

Design
------
* Conv2D: an im2col kernel (one thread per element of the ``(rows, KH*KW*Cin)``
  matrix) and :mod:`.cuda`'s tiled MatMul with the ``(KH*KW*Cin, Cout)`` filter; the
  filter's gradient is the same im2col and ``cols^T @ dy``; the input's gradient
  ``dy @ filter^T`` gathered back by a col2im in which each input element sums its own
  taps (no atomics).
* Pooling: one thread per output element; the gradients scatter with atomic adds (to
  the window's first maximum, or evenly over it).
* BiasAdd / BiasAddGrad: :mod:`.cuda`'s broadcast add and reduction.
* FusedBatchNormV3 and its gradient: one thread per channel for the statistics (rows
  read by neighbouring threads are neighbouring addresses), then one elementwise pass.
* GatherV2 copies; UnsortedSegmentSum adds atomically.  As TensorFlow's GPU kernels,
  an out-of-range gather index gives zeros, an out-of-range segment id is dropped, and
  an out-of-range sparse label gives NaN (no error can come back from the device).
* Cross-entropies and LogSoftmax: one thread per row.
"""

from __future__ import annotations

import math

import numpy as np

from core.ops_nn import window_geometry
from . import cuda as _cuda_base
from .cuda import _empty, _flat, _launch, _stream
from .opcodes import ADD
from .registry import FLOATING, NUMERIC, register

__all__ = ["warmup"]

GPU = "GPU"


def _device():
    """The device-code module (imports numba.cuda on first use)."""
    from . import cuda_nn_kernels
    return cuda_nn_kernels


def _geometry(x_shape, f_hw, strides, dilations, padding) -> tuple:
    ho, pt = window_geometry(x_shape[1], f_hw[0], strides[1], padding, dilations[1])
    wo, pl = window_geometry(x_shape[2], f_hw[1], strides[2], padding, dilations[2])
    return (ho, wo, f_hw[0], f_hw[1], strides[1], strides[2], dilations[1], dilations[2],
            pt, pl)


def _conv_geometry(x_shape, f_shape, attrs) -> tuple:
    _nhwc(attrs)
    return _geometry(x_shape, f_shape[:2], tuple(attrs["strides"]),
                     tuple(attrs.get("dilations") or (1, 1, 1, 1)), attrs["padding"])


def _nhwc(attrs) -> None:
    fmt = attrs.get("data_format", "NHWC")
    if fmt != "NHWC":
        raise ValueError(f"data_format {fmt!r} is not supported (NHWC only)")


def _zeros(shape, dtype, ctx):
    out = _empty(shape, dtype, ctx)
    _launch(_device().fill_zero, out.size, ctx, _flat(out))
    return out


#: Most blocks along a grid's y axis (CUDA's limit), which holds the product's rows.
_MAX_GRID_Y = 65535


def _matmul(ctx, a, b, out, transpose_a: bool, transpose_b: bool, k: int) -> None:
    """out = op(a) @ op(b) with :mod:`.cuda`'s tiled kernel (2-D device arrays); a
    product with more row tiles than a grid holds (a big batch's im2col rows) runs as
    several launches on row blocks."""
    m, n = out.shape
    kernels = _cuda_base._kernels()
    tile = kernels.TILE
    kernel = kernels.matmul_kernel(np.dtype(out.dtype).name)
    step = _MAX_GRID_Y * tile
    if transpose_a and m > step:
        raise ValueError(f"a transposed operand with {m} rows is more than one launch takes")
    for lo in range(0, m, step):
        hi = min(m, lo + step)
        grid = (math.ceil(n / tile), math.ceil((hi - lo) / tile))
        a_rows = a if transpose_a or (lo == 0 and hi == m) else a[lo:hi]
        kernel[grid, (tile, tile), _stream(ctx)](a_rows, b, out[lo:hi] if hi - lo < m else out,
                                                 transpose_a, transpose_b, k)


def _im2col(ctx, x, geo, k):
    rows = x.shape[0] * geo[0] * geo[1]
    cols = _empty((rows, k), x.dtype, ctx)
    _launch(_device().im2col, cols.size, ctx, x, geo, _flat(cols))
    return cols


def _batch(sizes, known: int) -> tuple:
    return (known if sizes[0] is None or sizes[0] == -1 else int(sizes[0]),) + tuple(
        int(d) for d in sizes[1:])


@register("Conv2D", GPU, FLOATING)
def conv2d(ctx, inputs, attrs):
    """im2col, then one tiled matmul with the filter as a (KH*KW*Cin, Cout) matrix."""
    x, f = inputs
    geo = _conv_geometry(x.shape, f.shape, attrs)
    kh, kw, ci, co = f.shape
    out = _empty((x.shape[0], geo[0], geo[1], co), x.dtype, ctx)
    if out.size == 0:
        return (out,)
    k = kh * kw * ci
    if k == 0:
        return (_zeros(out.shape, x.dtype, ctx),)
    cols = _im2col(ctx, x, geo, k)
    _matmul(ctx, cols, f.reshape(k, co), out.reshape(cols.shape[0], co), False, False, k)
    return (out,)


@register("Conv2DBackpropInput", GPU, FLOATING)
def conv2d_backprop_input(ctx, inputs, attrs):
    """dcols = dy @ filter^T, then col2im (each input element sums its taps)."""
    f, dy = inputs
    shape = _batch(attrs["input_sizes"], dy.shape[0])
    geo = _conv_geometry(shape, f.shape, attrs)
    kh, kw, ci, co = f.shape
    dx = _empty(shape, dy.dtype, ctx)
    if dx.size == 0:
        return (dx,)
    k = kh * kw * ci
    rows = shape[0] * geo[0] * geo[1]
    if rows == 0 or co == 0:
        return (_zeros(shape, dy.dtype, ctx),)
    dcols = _empty((rows, k), dy.dtype, ctx)
    _matmul(ctx, dy.reshape(rows, co), f.reshape(k, co), dcols, False, True, co)
    _launch(_device().col2im, dx.size, ctx, _flat(dcols), geo, dx)
    return (dx,)


@register("Conv2DBackpropFilter", GPU, FLOATING)
def conv2d_backprop_filter(ctx, inputs, attrs):
    """dfilter = im2col(x)^T @ dy."""
    x, dy = inputs
    f_shape = tuple(int(d) for d in attrs["filter_sizes"])
    geo = _conv_geometry(x.shape, f_shape, attrs)
    kh, kw, ci, co = f_shape
    k = kh * kw * ci
    rows = x.shape[0] * geo[0] * geo[1]
    if k * co == 0 or rows == 0:
        return (_zeros(f_shape, x.dtype, ctx),)
    out = _empty(f_shape, x.dtype, ctx)
    cols = _im2col(ctx, x, geo, k)
    _matmul(ctx, cols, dy.reshape(rows, co), out.reshape(k, co), True, False, rows)
    return (out,)


def _pool_geometry(shape, attrs) -> tuple:
    _nhwc(attrs)
    ksize = tuple(attrs["ksize"])
    return _geometry(shape, ksize[1:3], tuple(attrs["strides"]), (1, 1, 1, 1), attrs["padding"])


def _pool(ctx, x, attrs, average: bool):
    geo = _pool_geometry(x.shape, attrs)
    out = _empty((x.shape[0], geo[0], geo[1], x.shape[3]), x.dtype, ctx)
    _launch(_device().pool, out.size, ctx, x, geo, average, out)
    return (out,)


def _pool_grad(ctx, x, g, shape, attrs, average: bool):
    geo = _pool_geometry(shape, attrs)
    dx = _zeros(shape, g.dtype, ctx)
    _launch(_device().pool_grad, g.size, ctx, x, g, geo, average, dx)
    return (dx,)


@register("MaxPool", GPU, FLOATING)
def max_pool(ctx, inputs, attrs):
    """The maximum of each window (clipped to the input)."""
    return _pool(ctx, inputs[0], attrs, average=False)


@register("AvgPool", GPU, FLOATING)
def avg_pool(ctx, inputs, attrs):
    """The mean of each window's input values (padding not counted)."""
    return _pool(ctx, inputs[0], attrs, average=True)


@register("MaxPoolGrad", GPU, FLOATING)
def max_pool_grad(ctx, inputs, attrs):
    """Each window's gradient to its first maximum (atomic adds)."""
    x, _, g = inputs
    return _pool_grad(ctx, x, g, x.shape, attrs, average=False)


@register("AvgPoolGrad", GPU, FLOATING)
def avg_pool_grad(ctx, inputs, attrs):
    """Each window's gradient spread evenly over it (atomic adds)."""
    g = inputs[0]
    return _pool_grad(ctx, g, g, _batch(attrs["orig_input_shape"], g.shape[0]), attrs,
                      average=True)


@register("BiasAdd", GPU, NUMERIC)
def bias_add(ctx, inputs, attrs):
    """value + bias along the last axis (:mod:`.cuda`'s broadcast add)."""
    _nhwc(attrs)
    return (_cuda_base._binary(ADD, ctx, *inputs),)


@register("BiasAddGrad", GPU, NUMERIC)
def bias_add_grad(ctx, inputs, attrs):
    """The sum over every axis but the last (:mod:`.cuda`'s reduction)."""
    _nhwc(attrs)
    g = inputs[0]
    return (_cuda_base._reduce(ctx, g, {"axis": tuple(range(g.ndim - 1))}, mean=False),)


def _rows(a):
    return a.reshape(a.size // a.shape[a.ndim - 1], a.shape[a.ndim - 1])


@register("FusedBatchNormV3", GPU, FLOATING)
def fused_batch_norm(ctx, inputs, attrs):
    """TensorFlow's six outputs (see the CPU kernel); statistics one thread per channel."""
    _nhwc(attrs)
    x, scale, offset, mean, variance = inputs
    c = x.shape[3]
    dtype = x.dtype
    x2 = _rows(x)
    outs = [_empty((c,), dtype, ctx) for _ in range(4)]
    coef = [_empty((c,), np.float64, ctx) for _ in range(2)]
    training = bool(attrs.get("is_training", True))
    # In training, mean and variance may be empty (exponential_avg_factor 1): not read.
    mean_in = mean if mean.shape[0] == c else scale
    var_in = variance if variance.shape[0] == c else scale
    _launch(_device().bn_stats, c, ctx, x2, scale, offset, mean_in, var_in,
            float(attrs.get("epsilon", 1e-4)), training,
            float(attrs.get("exponential_avg_factor", 1.0)), *coef, *outs)
    y = _empty(x.shape, dtype, ctx)
    zeros = _zeros((c,), np.float64, ctx)
    _launch(_device().channel_affine, y.size, ctx, x2, x2, coef[0], zeros, coef[1], _rows(y))
    return (y, *outs, _empty((0,), dtype, ctx))


@register("FusedBatchNormGradV3", GPU, FLOATING)
def fused_batch_norm_grad(ctx, inputs, attrs):
    """(dx, dscale, doffset, empty, empty); statistics one thread per channel."""
    _nhwc(attrs)
    dy, x, scale, mean, variance, _ = inputs
    c = x.shape[3]
    dtype = x.dtype
    d_scale, d_offset = _empty((c,), dtype, ctx), _empty((c,), dtype, ctx)
    coef = [_empty((c,), np.float64, ctx) for _ in range(3)]
    dy2, x2 = _rows(dy), _rows(x)
    _launch(_device().bn_grad_stats, c, ctx, dy2, x2, scale, mean, variance,
            float(attrs.get("epsilon", 1e-4)), bool(attrs.get("is_training", True)), *coef,
            d_scale, d_offset)
    dx = _empty(x.shape, dtype, ctx)
    _launch(_device().channel_affine, dx.size, ctx, dy2, x2, *coef, _rows(dx))
    return (dx, d_scale, d_offset, _empty((0,), dtype, ctx), _empty((0,), dtype, ctx))


@register("GatherV2", GPU, NUMERIC)
def gather(ctx, inputs, attrs):
    """params' slices at ``indices`` along ``axis`` (an out-of-range index: zeros)."""
    params, indices = inputs
    axis = int(attrs.get("axis", 0)) % params.ndim
    outer = math.prod(params.shape[:axis])
    inner = math.prod(params.shape[axis + 1:])
    out = _empty(params.shape[:axis] + indices.shape + params.shape[axis + 1:], params.dtype, ctx)
    if out.size:
        p3 = params.reshape(outer, params.shape[axis], inner)
        _launch(_device().gather, out.size, ctx, p3, indices.reshape(indices.size),
                out.reshape(outer, indices.size, inner))
    return (out,)


@register("UnsortedSegmentSum", GPU, NUMERIC)
def unsorted_segment_sum(ctx, inputs, attrs):
    """Rows added into their segments atomically (ids outside the range dropped)."""
    data, ids = inputs
    segments = int(attrs["num_segments"])
    tail = data.shape[ids.ndim:]
    inner = math.prod(tail)
    out = _zeros((segments,) + tail, data.dtype, ctx)
    if data.size and out.size:
        _launch(_device().segment_sum, data.size, ctx, data.reshape(ids.size, inner),
                ids.reshape(ids.size), out.reshape(segments, inner))
    return (out,)


def _xent(ctx, x, labels, sparse: bool):
    rows, cols = x.shape
    loss = _empty((rows,), x.dtype, ctx)
    back = _empty((rows, cols), x.dtype, ctx)
    if rows and cols:
        _launch(_device().xent, rows, ctx, x, labels, sparse, loss, back)
    return loss, back


@register("SoftmaxCrossEntropyWithLogits", GPU, FLOATING)
def softmax_xent(ctx, inputs, attrs):
    """(loss, backprop), one thread per row."""
    return _xent(ctx, inputs[0], inputs[1], False)


@register("SparseSoftmaxCrossEntropyWithLogits", GPU, FLOATING)
def sparse_softmax_xent(ctx, inputs, attrs):
    """(loss, backprop) for integer labels (an out-of-range label: NaN in its row)."""
    features, labels = inputs
    return _xent(ctx, features, labels.reshape(labels.size, 1), True)


@register("LogSoftmax", GPU, FLOATING)
def log_softmax(ctx, inputs, attrs):
    """``logits - log(sum(exp(logits)))`` over the last axis, one thread per row."""
    x = inputs[0]
    out = _empty(x.shape, x.dtype, ctx)
    if x.size:
        x2 = _rows(x)
        _launch(_device().log_softmax, x2.shape[0], ctx, x2, _rows(out))
    return (out,)


def warmup(dtypes=("float32", "float64", "int32", "int64")) -> None:
    """Compile the nn CUDA kernels for ``dtypes`` by running each once on tiny arrays
    (needs :func:`.cuda.cuda_available`)."""
    if not _cuda_base.cuda_available():
        raise RuntimeError("no CUDA GPU (nor NUMBA_ENABLE_CUDASIM=1): cannot warm up GPU kernels")
    from .context import KernelContext
    ctx = KernelContext(GPU)
    dev = _cuda_base._to_device
    for name in dtypes:
        for index in ("int32", "int64"):
            ids = dev(ctx, np.zeros(2, index))
            gather(ctx, (dev(ctx, np.ones((2, 3), name)), ids), {"axis": 0})
            unsorted_segment_sum(ctx, (dev(ctx, np.ones((2, 3), name)), ids), {"num_segments": 2})
        if np.dtype(name).kind != "f":
            continue
        x = dev(ctx, np.ones((1, 3, 3, 2), name))
        w = dev(ctx, np.ones((2, 2, 2, 2), name))
        conv = {"strides": (1, 1, 1, 1), "padding": "SAME"}
        (y,) = conv2d(ctx, (x, w), conv)
        conv2d_backprop_input(ctx, (w, y), dict(conv, input_sizes=x.shape))
        conv2d_backprop_filter(ctx, (x, y), dict(conv, filter_sizes=w.shape))
        pool = {"ksize": (1, 2, 2, 1), "strides": (1, 1, 1, 1), "padding": "SAME"}
        for average in (False, True):
            (p,) = _pool(ctx, x, pool, average)
            _pool_grad(ctx, x, p, x.shape, pool, average)
        c = dev(ctx, np.ones(2, name))
        outs = fused_batch_norm(ctx, (x, c, c, c, c), {})
        fused_batch_norm_grad(ctx, (x, x, c, outs[3], outs[4], outs[5]), {})
        logits = dev(ctx, np.ones((2, 3), name))
        softmax_xent(ctx, (logits, logits), {})
        for index in ("int32", "int64"):
            sparse_softmax_xent(ctx, (logits, dev(ctx, np.zeros(2, index))), {})
        log_softmax(ctx, (logits,), {})
