"""CPU kernels of the nn op family (:mod:`core.ops_nn`): numba ``@njit(cache=True,
nogil=True)`` functions behind numpy-level wrappers, registered with
:func:`.registry.register` at import (the conventions are :mod:`.cpu`'s: inputs reach
numba as read-only views, serial and ``parallel=True`` variants kept apart, the parallel
one only with several intra-op threads and enough work).

Design
------
* Conv2D and its two backprops go through im2col / col2im and BLAS: the output rows
  ``(n, ho, wo)`` of a block of images are gathered into a ``(rows, KH*KW*Cin)`` matrix
  and multiplied by the ``(KH*KW*Cin, Cout)`` filter in one gemm per block (the NHWC
  output is that product's rows as they are); the input's gradient is
  ``dy @ filter^T`` scattered back (col2im), the filter's ``cols^T @ dy``.  Blocks bound
  the im2col buffer (:data:`COLS_BLOCK_ELEMENTS`) and are what the intra-op threads
  share, one gemm each with BLAS single-threaded (as :func:`.cpu.matmul` does); the
  input's gradient splits by image, so no two threads scatter into one place.  A 1x1
  convolution with stride 1 needs no im2col: the input's rows are the matrix.
* Pooling loops over windows clipped to the input (SAME padding never reads a padded
  value; AvgPool divides by the values it covers, as TensorFlow), channels innermost so
  the loops vectorise; the gradients scatter per image.  MaxPoolGrad routes each
  gradient to the first maximum of its window in (h, w) order, TensorFlow's CPU choice.
* BiasAdd and BiasAddGrad are :mod:`.cpu`'s broadcast add and reduction.
* FusedBatchNormV3: one pass of per-channel sums (float64, shifted by the first row so
  the variance does not cancel), then one pass ``y = x * a + b``; its gradient the same
  two passes.  Row chunks over the threads, partial sums per chunk.
* GatherV2, UnsortedSegmentSum, the softmax cross-entropies and LogSoftmax are in
  :mod:`.cpu_nn_rows`.

>>> import numpy as np
>>> from runtime.kernels import KernelContext, get_kernel
>>> x = np.arange(16.0).reshape(1, 4, 4, 1)
>>> attrs = {"ksize": (1, 2, 2, 1), "strides": (1, 2, 2, 1), "padding": "VALID"}
>>> get_kernel("MaxPool", "CPU")(KernelContext(), (x,), attrs)[0][0, :, :, 0]
array([[ 5.,  7.],
       [13., 15.]])
"""

from __future__ import annotations

import functools
import sys

import numpy as np
from numba import njit, prange

from core.ops_nn import window_geometry
from .cpu import (_CHUNKS_PER_THREAD, _NUMBA_THREADS, GEMM_MIN_ROWS_PER_CHUNK,
                  GEMM_PARALLEL_MIN_MACS, PARALLEL_MIN_ELEMENTS,
                  _binary, _blas_single_threaded, _pool_threads, _readonly,
                  _set_pool_threads)
from . import cpu_nn_rows
from .cpu_reduce import _reduce_sum
from .opcodes import ADD
from .registry import FLOATING, NUMERIC, register
from .threading_layer import parallel_region

__all__ = ["COLS_BLOCK_ELEMENTS", "warmup"]

CPU = "CPU"
#: Elements of one im2col block (a block holds whole images, at least one): big enough
#: that each gemm has hundreds of rows, small enough to stay in the last-level cache's
#: neighbourhood instead of materialising a whole batch's columns.
COLS_BLOCK_ELEMENTS = 1 << 20


# --- geometry ---------------------------------------------------------------------------

@functools.lru_cache(maxsize=512)
def _conv_geometry(x_shape: tuple, f_shape: tuple, strides: tuple, dilations: tuple,
                   padding: str) -> np.ndarray:
    """``[Ho, Wo, KH, KW, sh, sw, dh, dw, pad_top, pad_left]`` as the int64 array the
    numba functions take (cached per shapes and attrs: kernels only read it)."""
    _, h, w, _ = x_shape
    kh, kw = f_shape[0], f_shape[1]
    sh, sw = strides[1], strides[2]
    dh, dw = dilations[1], dilations[2]
    ho, pt = window_geometry(h, kh, sh, padding, dh)
    wo, pl = window_geometry(w, kw, sw, padding, dw)
    return np.array([ho, wo, kh, kw, sh, sw, dh, dw, pt, pl], np.int64)


def _conv_attrs(attrs) -> tuple[tuple, tuple, str]:
    fmt = attrs.get("data_format", "NHWC")
    if fmt != "NHWC":
        raise ValueError(f"data_format {fmt!r} is not supported (NHWC only)")
    return (tuple(attrs["strides"]), tuple(attrs.get("dilations") or (1, 1, 1, 1)),
            attrs["padding"])


def _pool_geometry(x_shape: tuple, attrs) -> np.ndarray:
    """Pooling's geometry in :func:`_conv_geometry`'s layout (dilation 1)."""
    ksize = tuple(attrs["ksize"])
    return _conv_geometry(x_shape, (ksize[1], ksize[2]), tuple(attrs["strides"]),
                          (1, 1, 1, 1), attrs["padding"])


def _contiguous(a: np.ndarray) -> np.ndarray:
    return _readonly(np.ascontiguousarray(a))


def _batch(sizes, known: int) -> tuple:
    """A shape attr whose batch may be None: the batch of the tensor it goes with."""
    return (known if sizes[0] is None or sizes[0] == -1 else int(sizes[0]),) + tuple(
        int(d) for d in sizes[1:])


# --- im2col / col2im -----------------------------------------------------------------------

@njit(cache=True, nogil=True)
def _im2col(x, n0, n1, geo, cols):
    """cols[r, (kh * KW + kw) * C + c] = x[n, ho*sh - pt + kh*dh, wo*sw - pl + kw*dw, c]
    (0 outside the input) for the rows r = (n - n0, ho, wo) of images n0 <= n < n1."""
    h_in, w_in, c_in = x.shape[1], x.shape[2], x.shape[3]
    ho_n, wo_n, kh_n, kw_n, sh, sw, dh, dw, pt, pl = (geo[0], geo[1], geo[2], geo[3], geo[4],
                                                      geo[5], geo[6], geo[7], geo[8], geo[9])
    r = 0
    for n in range(n0, n1):
        for ho in range(ho_n):
            for wo in range(wo_n):
                row = cols[r]
                for kh in range(kh_n):
                    h = ho * sh - pt + kh * dh
                    inside_h = 0 <= h < h_in
                    for kw in range(kw_n):
                        w = wo * sw - pl + kw * dw
                        base = (kh * kw_n + kw) * c_in
                        if inside_h and 0 <= w < w_in:
                            src = x[n, h, w]
                            for c in range(c_in):
                                row[base + c] = src[c]
                        else:
                            for c in range(c_in):
                                row[base + c] = 0
                r += 1


@njit(cache=True, nogil=True)
def _col2im(cols, dx, n0, n1, geo):
    """The adjoint of :func:`_im2col`: dx[n, h, w, c] += cols[r, ...] (dx zeroed first)."""
    h_in, w_in, c_in = dx.shape[1], dx.shape[2], dx.shape[3]
    ho_n, wo_n, kh_n, kw_n, sh, sw, dh, dw, pt, pl = (geo[0], geo[1], geo[2], geo[3], geo[4],
                                                      geo[5], geo[6], geo[7], geo[8], geo[9])
    for n in range(n0, n1):
        dx[n] = 0
    r = 0
    for n in range(n0, n1):
        for ho in range(ho_n):
            for wo in range(wo_n):
                row = cols[r]
                for kh in range(kh_n):
                    h = ho * sh - pt + kh * dh
                    if h < 0 or h >= h_in:
                        continue
                    for kw in range(kw_n):
                        w = wo * sw - pl + kw * dw
                        if 0 <= w < w_in:
                            dst = dx[n, h, w]
                            base = (kh * kw_n + kw) * c_in
                            for c in range(c_in):
                                dst[c] += row[base + c]
                r += 1


# --- convolution drivers -------------------------------------------------------------------

@njit(cache=True, nogil=True)
def _conv_range(x, wmat, out2, geo, n0, n1, per_block, cols):
    """Conv2D of images n0..n1, ``per_block`` images per im2col + gemm."""
    hw = geo[0] * geo[1]
    n = n0
    while n < n1:
        m = min(n1, n + per_block)
        _im2col(x, n, m, geo, cols)
        np.dot(cols[:(m - n) * hw], wmat, out2[n * hw:m * hw])
        n = m


@njit(cache=True, nogil=True)
def _conv_serial(x, wmat, out2, geo, per_block):
    cols = np.empty((per_block * geo[0] * geo[1], wmat.shape[0]), x.dtype)
    _conv_range(x, wmat, out2, geo, 0, x.shape[0], per_block, cols)


@njit(cache=True, nogil=True, parallel=True)
def _conv_parallel(x, wmat, out2, geo, per_block, nchunks):
    n = x.shape[0]
    for c in prange(nchunks):
        cols = np.empty((per_block * geo[0] * geo[1], wmat.shape[0]), x.dtype)
        _conv_range(x, wmat, out2, geo, c * n // nchunks, (c + 1) * n // nchunks, per_block, cols)


@njit(cache=True, nogil=True)
def _input_range(dy2, wt, dx, geo, n0, n1, per_block, dcols):
    """Conv2DBackpropInput of images n0..n1: dcols = dy @ filter^T, then col2im."""
    hw = geo[0] * geo[1]
    n = n0
    while n < n1:
        m = min(n1, n + per_block)
        np.dot(dy2[n * hw:m * hw], wt, dcols[:(m - n) * hw])
        _col2im(dcols, dx, n, m, geo)
        n = m


@njit(cache=True, nogil=True)
def _input_serial(dy2, wt, dx, geo, per_block):
    dcols = np.empty((per_block * geo[0] * geo[1], wt.shape[1]), dx.dtype)
    _input_range(dy2, wt, dx, geo, 0, dx.shape[0], per_block, dcols)


@njit(cache=True, nogil=True, parallel=True)
def _input_parallel(dy2, wt, dx, geo, per_block, nchunks):
    n = dx.shape[0]
    for c in prange(nchunks):
        dcols = np.empty((per_block * geo[0] * geo[1], wt.shape[1]), dx.dtype)
        _input_range(dy2, wt, dx, geo, c * n // nchunks, (c + 1) * n // nchunks, per_block, dcols)


@njit(cache=True, nogil=True)
def _filter_range(x, dy2, acc, geo, n0, n1, per_block, cols, tmp):
    """acc = cols^T @ dy over images n0..n1 (acc zero when there are none)."""
    hw = geo[0] * geo[1]
    if n0 >= n1:
        acc[:] = 0
    n = n0
    while n < n1:
        m = min(n1, n + per_block)
        rows = (m - n) * hw
        _im2col(x, n, m, geo, cols)
        if n == n0:
            np.dot(cols[:rows].T, dy2[n * hw:m * hw], acc)
        else:
            np.dot(cols[:rows].T, dy2[n * hw:m * hw], tmp)
            acc += tmp
        n = m


@njit(cache=True, nogil=True)
def _filter_serial(x, dy2, acc, geo, per_block):
    cols = np.empty((per_block * geo[0] * geo[1], acc.shape[0]), x.dtype)
    tmp = np.empty_like(acc)
    _filter_range(x, dy2, acc, geo, 0, x.shape[0], per_block, cols, tmp)


@njit(cache=True, nogil=True, parallel=True)
def _filter_parallel(x, dy2, partial, geo, per_block):
    n = x.shape[0]
    nchunks = partial.shape[0]
    for c in prange(nchunks):
        cols = np.empty((per_block * geo[0] * geo[1], partial.shape[1]), x.dtype)
        tmp = np.empty_like(partial[c])
        _filter_range(x, dy2, partial[c], geo, c * n // nchunks, (c + 1) * n // nchunks,
                      per_block, cols, tmp)


def _conv_plan(ctx, n: int, rows_per_image: int, k: int, macs: int) -> tuple[int, int]:
    """``(images per im2col block, chunks)``; chunks 1: run serially."""
    per_block = max(1, min(n, COLS_BLOCK_ELEMENTS // max(1, rows_per_image * k)))
    threads = min(ctx.intra_op_threads, _NUMBA_THREADS)
    if threads <= 1 or n < 2 or macs < GEMM_PARALLEL_MIN_MACS or not _blas_single_threaded():
        return per_block, 1
    _set_pool_threads(threads)
    chunks = min(n, threads)
    return max(1, min(per_block, n // chunks)), chunks


def _is_pointwise(geo: np.ndarray) -> bool:
    """A 1x1 window, stride 1, no padding: im2col would copy the input as it is."""
    return bool(geo[2] == 1 and geo[3] == 1 and geo[4] == 1 and geo[5] == 1
                and geo[8] == 0 and geo[9] == 0)


@register("Conv2D", CPU, FLOATING)
def conv2d(ctx, inputs, attrs):
    """NHWC input, HWIO filter: im2col per block of images and one gemm per block."""
    x, f = inputs
    strides, dilations, padding = _conv_attrs(attrs)
    geo = _conv_geometry(x.shape, f.shape, strides, dilations, padding)
    n = x.shape[0]
    kh, kw, ci, co = f.shape
    hw = int(geo[0] * geo[1])
    out = np.empty((n, int(geo[0]), int(geo[1]), co), x.dtype)
    if out.size == 0:
        return (out,)
    if x.size == 0 or f.size == 0:
        out[...] = 0
        return (out,)
    k = kh * kw * ci
    wmat = _contiguous(f).reshape(k, co)
    out2 = out.reshape(n * hw, co)
    x = _contiguous(x)
    if _is_pointwise(geo):
        _gemm_rows(ctx, x.reshape(n * hw, ci), wmat, out2)
        return (out,)
    per_block, chunks = _conv_plan(ctx, n, hw, k, n * hw * k * co)
    if chunks == 1:
        _conv_serial(x, wmat, out2, geo, per_block)
    else:
        with parallel_region:
            _conv_parallel(x, wmat, out2, geo, per_block, chunks)
    return (out,)


@njit(cache=True, nogil=True)
def _gemm_serial(a, b, out):
    np.dot(a, b, out)


@njit(cache=True, nogil=True, parallel=True)
def _gemm_parallel(a, b, out, nchunks):
    m = a.shape[0]
    for c in prange(nchunks):
        np.dot(a[c * m // nchunks:(c + 1) * m // nchunks], b,
               out[c * m // nchunks:(c + 1) * m // nchunks])


def _gemm_rows(ctx, a, b, out) -> None:
    """out = a @ b, in row blocks over the intra-op threads for a big product."""
    m, k = a.shape
    _, chunks = _conv_plan(ctx, m // GEMM_MIN_ROWS_PER_CHUNK, 1, 1, m * k * b.shape[1])
    if chunks == 1:
        _gemm_serial(a, b, out)
    else:
        with parallel_region:
            _gemm_parallel(a, b, out, chunks)


@register("Conv2DBackpropInput", CPU, FLOATING)
def conv2d_backprop_input(ctx, inputs, attrs):
    """dx of Conv2D: ``dy @ filter^T`` per block of images, scattered back by col2im."""
    f, dy = inputs
    strides, dilations, padding = _conv_attrs(attrs)
    shape = _batch(attrs["input_sizes"], dy.shape[0])
    geo = _conv_geometry(shape, f.shape, strides, dilations, padding)
    n = shape[0]
    kh, kw, ci, co = f.shape
    hw = int(geo[0] * geo[1])
    dx = np.empty(shape, dy.dtype)
    if dx.size == 0:
        return (dx,)
    if dy.size == 0 or f.size == 0:
        dx[...] = 0
        return (dx,)
    k = kh * kw * ci
    wt = _contiguous(f).reshape(k, co).T  # (co, k), F-ordered: BLAS reads it in place
    dy2 = _contiguous(dy).reshape(n * hw, co)
    if _is_pointwise(geo):
        _gemm_rows(ctx, dy2, wt, dx.reshape(n * hw, ci))
        return (dx,)
    per_block, chunks = _conv_plan(ctx, n, hw, k, n * hw * k * co)
    if chunks == 1:
        _input_serial(dy2, wt, dx, geo, per_block)
    else:
        with parallel_region:
            _input_parallel(dy2, wt, dx, geo, per_block, chunks)
    return (dx,)


@register("Conv2DBackpropFilter", CPU, FLOATING)
def conv2d_backprop_filter(ctx, inputs, attrs):
    """dfilter of Conv2D: ``im2col(x)^T @ dy`` summed over blocks of images."""
    x, dy = inputs
    strides, dilations, padding = _conv_attrs(attrs)
    f_shape = tuple(int(d) for d in attrs["filter_sizes"])
    geo = _conv_geometry(x.shape, f_shape, strides, dilations, padding)
    n = x.shape[0]
    kh, kw, ci, co = f_shape
    hw = int(geo[0] * geo[1])
    k = kh * kw * ci
    out = np.empty(f_shape, x.dtype)
    if out.size == 0:
        return (out,)
    if x.size == 0 or dy.size == 0:
        out[...] = 0
        return (out,)
    x = _contiguous(x)
    dy2 = _contiguous(dy).reshape(n * hw, co)
    acc = out.reshape(k, co)
    if _is_pointwise(geo):
        _gemm_serial(x.reshape(n * hw, ci).T, dy2, acc)
        return (out,)
    per_block, chunks = _conv_plan(ctx, n, hw, k, n * hw * k * co)
    if chunks == 1:
        _filter_serial(x, dy2, acc, geo, per_block)
    else:
        partial = np.empty((chunks, k, co), x.dtype)
        with parallel_region:
            _filter_parallel(x, dy2, partial, geo, per_block)
        partial.sum(axis=0, out=acc)
    return (out,)


# --- pooling -------------------------------------------------------------------------------

@njit(cache=True, nogil=True)
def _pool_range(x, out, geo, average, r0, r1):
    """MaxPool (or AvgPool) of output rows r = (n, ho), r0 <= r < r1."""
    h_in, w_in, c_in = x.shape[1], x.shape[2], x.shape[3]
    ho_n, wo_n, kh_n, kw_n, sh, sw, pt, pl = (geo[0], geo[1], geo[2], geo[3], geo[4], geo[5],
                                              geo[8], geo[9])
    for r in range(r0, r1):
        n = r // ho_n
        ho = r - n * ho_n
        h0 = max(ho * sh - pt, 0)
        h1 = min(ho * sh - pt + kh_n, h_in)
        for wo in range(wo_n):
            w0 = max(wo * sw - pl, 0)
            w1 = min(wo * sw - pl + kw_n, w_in)
            o = out[n, ho, wo]
            first = x[n, h0, w0]
            for c in range(c_in):
                o[c] = first[c]
            for h in range(h0, h1):
                for w in range(w0, w1):
                    if h == h0 and w == w0:
                        continue
                    v = x[n, h, w]
                    if average:
                        for c in range(c_in):
                            o[c] += v[c]
                    else:
                        for c in range(c_in):
                            o[c] = max(o[c], v[c])
            if average:
                inv = 1.0 / ((h1 - h0) * (w1 - w0))
                for c in range(c_in):
                    o[c] *= inv


@njit(cache=True, nogil=True)
def _pool_serial(x, out, geo, average):
    _pool_range(x, out, geo, average, 0, out.shape[0] * out.shape[1])


@njit(cache=True, nogil=True, parallel=True)
def _pool_parallel(x, out, geo, average, nchunks):
    rows = out.shape[0] * out.shape[1]
    for c in prange(nchunks):
        _pool_range(x, out, geo, average, c * rows // nchunks, (c + 1) * rows // nchunks)


@njit(cache=True, nogil=True)
def _pool_grad_range(x, g, dx, geo, average, n0, n1):
    """MaxPoolGrad (x the forward input) or AvgPoolGrad (x unused) of images n0..n1,
    added into dx (zeros)."""
    h_in, w_in, c_in = dx.shape[1], dx.shape[2], dx.shape[3]
    ho_n, wo_n, kh_n, kw_n, sh, sw, pt, pl = (geo[0], geo[1], geo[2], geo[3], geo[4], geo[5],
                                              geo[8], geo[9])
    best_h = np.empty(c_in, np.int64)
    best_w = np.empty(c_in, np.int64)
    best = np.empty(c_in, dx.dtype)
    for n in range(n0, n1):
        for ho in range(ho_n):
            h0 = max(ho * sh - pt, 0)
            h1 = min(ho * sh - pt + kh_n, h_in)
            for wo in range(wo_n):
                w0 = max(wo * sw - pl, 0)
                w1 = min(wo * sw - pl + kw_n, w_in)
                gv = g[n, ho, wo]
                if average:
                    inv = 1.0 / ((h1 - h0) * (w1 - w0))
                    for c in range(c_in):  # once per window, in dx's dtype
                        best[c] = gv[c] * inv
                    for h in range(h0, h1):
                        for w in range(w0, w1):
                            d = dx[n, h, w]
                            for c in range(c_in):
                                d[c] += best[c]
                    continue
                first = x[n, h0, w0]
                for c in range(c_in):
                    best[c] = first[c]
                    best_h[c] = h0
                    best_w[c] = w0
                for h in range(h0, h1):
                    for w in range(w0, w1):
                        v = x[n, h, w]
                        for c in range(c_in):
                            if v[c] > best[c]:  # strict: the first maximum wins
                                best[c] = v[c]
                                best_h[c] = h
                                best_w[c] = w
                for c in range(c_in):
                    dx[n, best_h[c], best_w[c], c] += gv[c]


@njit(cache=True, nogil=True)
def _pool_grad_serial(x, g, dx, geo, average):
    _pool_grad_range(x, g, dx, geo, average, 0, dx.shape[0])


@njit(cache=True, nogil=True, parallel=True)
def _pool_grad_parallel(x, g, dx, geo, average, nchunks):
    n = dx.shape[0]
    for c in prange(nchunks):
        _pool_grad_range(x, g, dx, geo, average, c * n // nchunks, (c + 1) * n // nchunks)


def _check_nhwc(attrs) -> None:
    fmt = attrs.get("data_format", "NHWC")
    if fmt != "NHWC":
        raise ValueError(f"data_format {fmt!r} is not supported (NHWC only)")


def _pool(ctx, x, attrs, average: bool):
    _check_nhwc(attrs)
    geo = _pool_geometry(x.shape, attrs)
    out = np.empty((x.shape[0], int(geo[0]), int(geo[1]), x.shape[3]), x.dtype)
    if out.size == 0:
        return (out,)
    x = _contiguous(x)
    work = out.size * int(geo[2] * geo[3])
    threads = _pool_threads(ctx, work, PARALLEL_MIN_ELEMENTS)
    rows = out.shape[0] * out.shape[1]
    if threads == 1 or rows < 2:
        _pool_serial(x, out, geo, average)
    else:
        with parallel_region:
            _pool_parallel(x, out, geo, average, min(rows, threads * _CHUNKS_PER_THREAD))
    return (out,)


def _pool_grad(ctx, x, g, shape, attrs, average: bool):
    _check_nhwc(attrs)
    geo = _pool_geometry(shape, attrs)
    dx = np.zeros(shape, g.dtype)
    if dx.size == 0:
        return (dx,)
    g = _contiguous(g)
    work = g.size * int(geo[2] * geo[3])
    threads = _pool_threads(ctx, work, PARALLEL_MIN_ELEMENTS)
    if threads == 1 or shape[0] < 2:
        _pool_grad_serial(x, g, dx, geo, average)
    else:
        with parallel_region:
            _pool_grad_parallel(x, g, dx, geo, average, min(shape[0], threads))
    return (dx,)


@register("MaxPool", CPU, FLOATING)
def max_pool(ctx, inputs, attrs):
    """The maximum of each window (clipped to the input)."""
    return _pool(ctx, inputs[0], attrs, average=False)


@register("AvgPool", CPU, FLOATING)
def avg_pool(ctx, inputs, attrs):
    """The mean of each window's input values (padding not counted)."""
    return _pool(ctx, inputs[0], attrs, average=True)


@register("MaxPoolGrad", CPU, FLOATING)
def max_pool_grad(ctx, inputs, attrs):
    """MaxPoolGrad(orig_input, orig_output, grad): each window's gradient to its first
    maximum (found again in orig_input)."""
    x, _, g = inputs
    return _pool_grad(ctx, _contiguous(x), g, x.shape, attrs, average=False)


@register("AvgPoolGrad", CPU, FLOATING)
def avg_pool_grad(ctx, inputs, attrs):
    """AvgPoolGrad(grad; orig_input_shape): each window's gradient spread evenly."""
    g = inputs[0]
    shape = _batch(attrs["orig_input_shape"], g.shape[0])
    return _pool_grad(ctx, _contiguous(g), g, shape, attrs, average=True)


# --- bias ----------------------------------------------------------------------------------

@register("BiasAdd", CPU, NUMERIC)
def bias_add(ctx, inputs, attrs):
    """value + bias along the last axis (the broadcast add of :mod:`.cpu`)."""
    _check_nhwc(attrs)
    value, bias = inputs
    return (_binary(ADD, ctx, value, bias),)


@register("BiasAddGrad", CPU, NUMERIC)
def bias_add_grad(ctx, inputs, attrs):
    """The sum of out_backprop over every axis but the last (:mod:`.cpu`'s reduction)."""
    _check_nhwc(attrs)
    g = inputs[0]
    acc, _ = _reduce_sum(ctx, g, {"axis": tuple(range(g.ndim - 1))})
    return (acc.astype(g.dtype),)


# --- batch normalisation --------------------------------------------------------------------

@njit(cache=True, nogil=True)
def _moments_range(a, b, shift, centered, s1, s2, r0, r1):
    """Per column c over rows r0..r1, ``centered`` (the forward pass, ``b`` is ``a``):
    s1 += a - shift and s2 += (a - shift)^2; else (the gradient: ``a`` dy, ``b`` x,
    ``shift`` the mean) s1 += a and s2 += a * (b - shift)."""
    cols = a.shape[1]
    for r in range(r0, r1):
        ar = a[r]
        br = b[r]
        if centered:
            for c in range(cols):
                d = ar[c] - shift[c]
                s1[c] += d
                s2[c] += d * d
        else:
            for c in range(cols):
                s1[c] += ar[c]
                s2[c] += ar[c] * (br[c] - shift[c])


@njit(cache=True, nogil=True)
def _moments_serial(a, b, shift, centered, s1, s2):
    _moments_range(a, b, shift, centered, s1[0], s2[0], 0, a.shape[0])


@njit(cache=True, nogil=True, parallel=True)
def _moments_parallel(a, b, shift, centered, s1, s2):
    rows = a.shape[0]
    nchunks = s1.shape[0]
    for c in prange(nchunks):
        _moments_range(a, b, shift, centered, s1[c], s2[c], c * rows // nchunks,
                       (c + 1) * rows // nchunks)


@njit(cache=True, nogil=True)
def _affine_range(a, b, ka, kb, k0, out, r0, r1):
    """out[r, c] = a[r, c] * ka[c] + b[r, c] * kb[c] + k0[c]."""
    cols = a.shape[1]
    for r in range(r0, r1):
        ar = a[r]
        br = b[r]
        o = out[r]
        for c in range(cols):
            o[c] = ar[c] * ka[c] + br[c] * kb[c] + k0[c]


@njit(cache=True, nogil=True)
def _affine_serial(a, b, ka, kb, k0, out):
    _affine_range(a, b, ka, kb, k0, out, 0, a.shape[0])


@njit(cache=True, nogil=True, parallel=True)
def _affine_parallel(a, b, ka, kb, k0, out, nchunks):
    rows = a.shape[0]
    for c in prange(nchunks):
        _affine_range(a, b, ka, kb, k0, out, c * rows // nchunks, (c + 1) * rows // nchunks)


def _moments(ctx, a, b, shift, centered: bool):
    """Column sums of :func:`_moments_range` over the rows of ``a`` (float64)."""
    threads = _pool_threads(ctx, a.size, PARALLEL_MIN_ELEMENTS)
    chunks = 1 if threads == 1 or a.shape[0] < 2 else min(a.shape[0], threads)
    s1 = np.zeros((chunks, a.shape[1]))
    s2 = np.zeros((chunks, a.shape[1]))
    if chunks == 1:
        _moments_serial(a, b, shift, centered, s1, s2)
    else:
        with parallel_region:
            _moments_parallel(a, b, shift, centered, s1, s2)
    return s1.sum(axis=0), s2.sum(axis=0)


def _affine(ctx, a, b, ka, kb, k0, dtype):
    out = np.empty(a.shape, dtype)
    cast = [_readonly(np.ascontiguousarray(k, dtype)) for k in (ka, kb, k0)]
    threads = _pool_threads(ctx, a.size, PARALLEL_MIN_ELEMENTS)
    if threads == 1 or a.shape[0] < 2:
        _affine_serial(a, b, *cast, out)
    else:
        with parallel_region:
            _affine_parallel(a, b, *cast, out, min(a.shape[0], threads * _CHUNKS_PER_THREAD))
    return out


def _rows(x: np.ndarray) -> np.ndarray:
    return _contiguous(x).reshape(-1, x.shape[-1])


@register("FusedBatchNormV3", CPU, FLOATING)
def fused_batch_norm(ctx, inputs, attrs):
    """TensorFlow's six outputs: y, the running mean and (Bessel-corrected) variance,
    the batch's mean and variance for the gradient, and an empty reserve."""
    _check_nhwc(attrs)
    x, scale, offset, mean, variance = inputs
    dtype = x.dtype
    eps = float(attrs.get("epsilon", 1e-4))
    x2 = _rows(x)
    rows, c = x2.shape
    scale64, offset64 = scale.astype(np.float64), offset.astype(np.float64)
    if attrs.get("is_training", True):
        if rows:
            shift = _readonly(x2[0].astype(np.float64))
            s1, s2 = _moments(ctx, x2, x2, shift, True)
            m1 = s1 / rows
            batch_mean = shift + m1
            batch_var = np.maximum(s2 / rows - m1 * m1, 0.0)
        else:
            batch_mean = batch_var = np.full(c, np.nan)
        corrected = batch_var * (rows / (rows - 1) if rows > 1 else 1.0)
        factor = float(attrs.get("exponential_avg_factor", 1.0))
        if factor == 1.0:
            running_mean, running_var = batch_mean, corrected
        else:
            running_mean = (1 - factor) * mean.astype(np.float64) + factor * batch_mean
            running_var = (1 - factor) * variance.astype(np.float64) + factor * corrected
        use_mean, use_var = batch_mean, batch_var
    else:
        use_mean, use_var = mean.astype(np.float64), variance.astype(np.float64)
        running_mean, running_var = use_mean, use_var
    ka = scale64 / np.sqrt(use_var + eps)
    y = _affine(ctx, x2, x2, ka, np.zeros(c), offset64 - use_mean * ka, dtype)
    return (y.reshape(x.shape), running_mean.astype(dtype), running_var.astype(dtype),
            use_mean.astype(dtype), use_var.astype(dtype), np.empty(0, dtype))


@register("FusedBatchNormGradV3", CPU, FLOATING)
def fused_batch_norm_grad(ctx, inputs, attrs):
    """(dx, dscale, doffset, empty, empty) from y_backprop, x, scale and the statistics
    that normalised x (the batch's in training, the population's in inference)."""
    _check_nhwc(attrs)
    dy, x, scale, mean, variance, _ = inputs
    dtype = x.dtype
    eps = float(attrs.get("epsilon", 1e-4))
    dy2, x2 = _rows(dy), _rows(x)
    rows, c = x2.shape
    mean64 = mean.astype(np.float64)
    inv = 1 / np.sqrt(variance.astype(np.float64) + eps)
    scale64 = scale.astype(np.float64)
    sum_dy, sum_dy_xc = _moments(ctx, dy2, x2, _readonly(mean64), False)
    d_scale = sum_dy_xc * inv
    ka = scale64 * inv
    if attrs.get("is_training", True) and rows:
        kb = -scale64 * inv ** 3 * sum_dy_xc / rows
        k0 = -ka * sum_dy / rows - mean64 * kb
    else:
        kb = np.zeros(c)
        k0 = np.zeros(c)
    dx = _affine(ctx, dy2, x2, ka, kb, k0, dtype)
    return (dx.reshape(x.shape), d_scale.astype(dtype), sum_dy.astype(dtype),
            np.empty(0, dtype), np.empty(0, dtype))


# --- warm-up ------------------------------------------------------------------------------------

def warmup(dtypes=("float32", "float64", "int32", "int64"), parallel: bool = True) -> None:
    """Compile (or load from numba's cache) the nn kernels' numba functions for
    ``dtypes``, with the argument types the kernels pass (read-only inputs): a tiny
    call of each kernel, serial, then (``parallel``) with every parallel path forced.

    >>> warmup(("float64",), parallel=False)
    """
    from .context import KernelContext
    serial = KernelContext(CPU, intra_op_threads=1)
    contexts = [serial]
    if parallel and _NUMBA_THREADS > 1:
        contexts.append(KernelContext(CPU, intra_op_threads=2))
    for name in dtypes:
        dtype = np.dtype(name)
        for ctx in contexts:
            with _everything_parallel(ctx is not serial):
                _warm_dtype(ctx, dtype)


def _warm_dtype(ctx, dtype) -> None:
    cpu_nn_rows.warm(ctx, dtype)
    if dtype.kind != "f":
        return
    x = np.ones((2, 3, 3, 2), dtype)
    w = np.ones((2, 2, 2, 2), dtype)
    conv = {"strides": (1, 1, 1, 1), "padding": "SAME"}
    (y,) = conv2d(ctx, (x, w), conv)
    conv2d(ctx, (x, w[:1, :1]), dict(conv, padding="VALID"))  # the pointwise path
    conv2d_backprop_input(ctx, (w, y), dict(conv, input_sizes=x.shape))
    conv2d_backprop_input(ctx, (w[:1, :1], y), dict(conv, input_sizes=x.shape, padding="VALID"))
    conv2d_backprop_filter(ctx, (x, y), dict(conv, filter_sizes=w.shape))
    conv2d_backprop_filter(ctx, (x, y), dict(conv, filter_sizes=(1, 1, 2, 2), padding="VALID"))
    pool = {"ksize": (1, 2, 2, 1), "strides": (1, 1, 1, 1), "padding": "SAME"}
    (p,) = max_pool(ctx, (x,), pool)
    avg_pool(ctx, (x,), pool)
    max_pool_grad(ctx, (x, p, p), pool)
    avg_pool_grad(ctx, (p,), dict(pool, orig_input_shape=x.shape))
    c = np.ones(2, dtype)
    outs = fused_batch_norm(ctx, (x, c, c, c, c), {"is_training": True})
    fused_batch_norm_grad(ctx, (x, x, c, outs[3], outs[4], outs[5]), {"is_training": True})


class _everything_parallel:
    """Within it, every nn kernel takes its parallel path whatever the size (warmup's
    tiny arrays): the thresholds the paths test, here and in :mod:`.cpu_nn_rows`, are
    lowered to nothing (warmup runs before any step, so no kernel sees them lowered)."""

    _LOWERED = {"PARALLEL_MIN_ELEMENTS": 0, "GEMM_PARALLEL_MIN_MACS": 0,
                "GEMM_MIN_ROWS_PER_CHUNK": 1}

    def __init__(self, active: bool):
        self.active = active
        self.saved: list = []

    def __enter__(self):
        if self.active:
            for module in (sys.modules[__name__], cpu_nn_rows):
                for name, value in self._LOWERED.items():
                    if hasattr(module, name):
                        self.saved.append((module, name, getattr(module, name)))
                        setattr(module, name, value)
        return self

    def __exit__(self, *exc):
        for module, name, value in reversed(self.saved):
            setattr(module, name, value)
        self.saved.clear()
