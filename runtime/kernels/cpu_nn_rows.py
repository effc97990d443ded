"""CPU kernels of the nn family's row ops: GatherV2 and UnsortedSegmentSum (embedding
lookup and its gradient), the softmax cross-entropies and LogSoftmax.  Registered at
import (:mod:`.cpu_nn` imports this module); the conventions are :mod:`.cpu`'s.

* GatherV2 copies rows; UnsortedSegmentSum adds rows into segments (columns split over
  the threads, so no two write one element).  Out-of-range indices raise ValueError as
  TensorFlow's CPU kernels do (a negative segment id is dropped, as TensorFlow does).
* The losses take one row per loop iteration, max-subtracted, sums in float64.  Their
  float32 exponentials are Cephes' ``expf`` written so the loop vectorises (the
  argument is at most 0 after the max is subtracted, so one range suffices): numba's
  ``math.exp`` is a libm call per element, several times numpy's SIMD ``exp``.

>>> import numpy as np
>>> from runtime.kernels import KernelContext, get_kernel
>>> loss, backprop = get_kernel("SparseSoftmaxCrossEntropyWithLogits", "CPU")(
...     KernelContext(), (np.zeros((1, 4)), np.array([2])), {})
>>> float(loss[0]), backprop[0].tolist()
(1.3862943611198906, [0.25, 0.25, -0.75, 0.25])
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from .cpu import _CHUNKS_PER_THREAD, PARALLEL_MIN_ELEMENTS, _pool_threads, _readonly
from .cpu_reduce import _sum_run
from .registry import FLOATING, NUMERIC, register
from .threading_layer import parallel_region

__all__ = ["warm"]

CPU = "CPU"


def _contiguous(a: np.ndarray) -> np.ndarray:
    return _readonly(np.ascontiguousarray(a))


# --- gather and segment sums ------------------------------------------------------------------

@njit(cache=True, nogil=True)
def _gather_range(params, idx, out, r0, r1):
    """out[o, m, :] = params[o, idx[m], :] for flat rows r = (o, m), r0 <= r < r1."""
    m_n = idx.shape[0]
    inner = params.shape[2]
    for r in range(r0, r1):
        o = r // m_n
        m = r - o * m_n
        src = params[o, idx[m]]
        dst = out[o, m]
        for i in range(inner):
            dst[i] = src[i]


@njit(cache=True, nogil=True)
def _gather_serial(params, idx, out):
    _gather_range(params, idx, out, 0, out.shape[0] * out.shape[1])


@njit(cache=True, nogil=True, parallel=True)
def _gather_parallel(params, idx, out, nchunks):
    rows = out.shape[0] * out.shape[1]
    for c in prange(nchunks):
        _gather_range(params, idx, out, c * rows // nchunks, (c + 1) * rows // nchunks)


def _flat_index(indices) -> np.ndarray:
    idx = np.ascontiguousarray(indices).reshape(-1)
    if idx.dtype not in (np.int32, np.int64):
        raise ValueError(f"indices must be int32 or int64, got {idx.dtype}")
    return _readonly(idx)


@register("GatherV2", CPU, NUMERIC)
def gather(ctx, inputs, attrs):
    """params' slices at ``indices`` along ``axis``; an index outside [0, size) raises
    ValueError, as TensorFlow's CPU kernel does."""
    params, indices = inputs
    axis = int(attrs.get("axis", 0)) % params.ndim
    size = params.shape[axis]
    idx = _flat_index(indices)
    if idx.size and (idx.min() < 0 or idx.max() >= size):
        bad = int(np.flatnonzero((idx < 0) | (idx >= size))[0])
        raise ValueError(f"GatherV2: indices[{bad}] = {int(idx[bad])} is not in [0, {size})")
    outer = math.prod(params.shape[:axis])
    inner = math.prod(params.shape[axis + 1:])
    out = np.empty(params.shape[:axis] + indices.shape + params.shape[axis + 1:], params.dtype)
    if out.size == 0:
        return (out,)
    p3 = _contiguous(params).reshape(outer, size, inner)
    o3 = out.reshape(outer, idx.size, inner)
    threads = _pool_threads(ctx, out.size, PARALLEL_MIN_ELEMENTS)
    rows = outer * idx.size
    if threads == 1 or rows < 2:
        _gather_serial(p3, idx, o3)
    else:
        with parallel_region:
            _gather_parallel(p3, idx, o3, min(rows, threads * _CHUNKS_PER_THREAD))
    return (out,)


@njit(cache=True, nogil=True)
def _segment_sum_range(data, ids, out, i0, i1):
    """out[ids[m], i] += data[m, i] for columns i0 <= i < i1 (negative ids dropped)."""
    for m in range(data.shape[0]):
        s = ids[m]
        if s < 0:
            continue
        src = data[m, i0:i1]
        dst = out[s, i0:i1]
        for i in range(i1 - i0):
            dst[i] += src[i]


@njit(cache=True, nogil=True)
def _segment_sum_serial(data, ids, out):
    _segment_sum_range(data, ids, out, 0, data.shape[1])


@njit(cache=True, nogil=True, parallel=True)
def _segment_sum_parallel(data, ids, out, nchunks):
    inner = data.shape[1]
    for c in prange(nchunks):
        _segment_sum_range(data, ids, out, c * inner // nchunks, (c + 1) * inner // nchunks)


@register("UnsortedSegmentSum", CPU, NUMERIC)
def unsorted_segment_sum(ctx, inputs, attrs):
    """out[s] = sum of the data rows whose segment id is s (``num_segments`` rows);
    negative ids are dropped and an id >= num_segments raises ValueError (TensorFlow)."""
    data, ids = inputs
    segments = int(attrs["num_segments"])
    flat = _flat_index(ids)
    if flat.size and flat.max() >= segments:
        bad = int(np.flatnonzero(flat >= segments)[0])
        raise ValueError(f"UnsortedSegmentSum: segment_ids[{bad}] = {int(flat[bad])} is not in "
                         f"[0, {segments})")
    tail = data.shape[ids.ndim:]
    inner = math.prod(tail)
    # Zeroed by the allocator: pages no segment touches are never written.
    out = np.zeros((segments,) + tail, data.dtype)
    if out.size == 0 or data.size == 0:
        return (out,)
    d2 = _contiguous(data).reshape(flat.size, inner)
    o2 = out.reshape(segments, inner)
    threads = _pool_threads(ctx, data.size, PARALLEL_MIN_ELEMENTS)
    if threads == 1 or inner < 64 * threads:
        _segment_sum_serial(d2, flat, o2)
    else:
        with parallel_region:
            _segment_sum_parallel(d2, flat, o2, min(inner // 64, threads))
    return (out,)


# --- losses ------------------------------------------------------------------------------------

@njit(cache=True, nogil=True, error_model="numpy")
def _exp_shifted(xr, m, e, bits, fast):
    """e = exp(xr - m) for a row whose maximum is m; returns the sum of e (float64).

    ``fast`` (float32 rows): Cephes' expf, e^x = 2^k e^r with k = round(x / ln 2) and a
    degree-7 polynomial for e^r, 2^k built in the exponent bits of ``bits``; relative
    error below 1e-7 on [-87, 0] (below -87, e^x < 2e-38 is taken as e^-87)."""
    n = xr.size
    for j in range(n):
        e[j] = xr[j] - m
    if fast:
        p0, p1, p2 = np.float32(1.9875691500e-4), np.float32(1.3981999507e-3), np.float32(8.3334519073e-3)
        p3, p4, p5 = np.float32(4.1665795894e-2), np.float32(1.6666665459e-1), np.float32(5.0000001201e-1)
        lo, half, one = np.float32(-87.0), np.float32(0.5), np.float32(1.0)
        log2e, c1, c2 = np.float32(1.4426950408889634), np.float32(0.693359375), np.float32(-2.12194440e-4)
        for j in range(n):
            x = e[j]
            x = lo if x < lo else x
            k = np.floor(x * log2e + half)
            r = x - k * c1 - k * c2
            e[j] = (((((p0 * r + p1) * r + p2) * r + p3) * r + p4) * r + p5) * r * r + r + one
            bits[j] = (np.int32(k) + 127) << 23
        scale = bits.view(np.float32)
        for j in range(n):
            e[j] *= scale[j]
    else:
        for j in range(n):
            e[j] = math.exp(e[j])
    return _sum_run(e, 0.0)


@njit(cache=True, nogil=True)
def _row_max(xr):
    m = xr[0]
    for j in range(1, xr.size):
        m = max(m, xr[j])
    return m


@njit(cache=True, nogil=True, error_model="numpy")
def _xent_range(x, labels, sparse, loss, back, r0, r1):
    """Softmax cross-entropy of rows r0..r1: loss[r] and back[r] = softmax - labels
    (``sparse``: ``labels[r, 0]`` is the class index, as a float of an int)."""
    cols = x.shape[1]
    bits = np.empty(cols, np.int32)
    tmp = np.empty(cols, x.dtype)
    fast = x.itemsize == 4  # float32
    for r in range(r0, r1):
        xr = x[r]
        b = back[r]
        m = _row_max(xr)
        s = _exp_shifted(xr, m, b, bits, fast)
        lse = math.log(s)
        inv = 1 / s
        if sparse:
            k = int(labels[r, 0])
            for j in range(cols):
                b[j] *= inv
            b[k] -= 1
            loss[r] = lse - (xr[k] - m)
        else:
            lr = labels[r]
            for j in range(cols):
                b[j] = b[j] * inv - lr[j]
                tmp[j] = lr[j] * (lse - (xr[j] - m))
            loss[r] = _sum_run(tmp, 0.0)


@njit(cache=True, nogil=True)
def _xent_serial(x, labels, sparse, loss, back):
    _xent_range(x, labels, sparse, loss, back, 0, x.shape[0])


@njit(cache=True, nogil=True, parallel=True)
def _xent_parallel(x, labels, sparse, loss, back, nchunks):
    rows = x.shape[0]
    for c in prange(nchunks):
        _xent_range(x, labels, sparse, loss, back, c * rows // nchunks, (c + 1) * rows // nchunks)


def _xent(ctx, x, labels, sparse: bool):
    rows, cols = x.shape
    loss = np.empty(rows, x.dtype)
    back = np.empty((rows, cols), x.dtype)
    if rows == 0:
        return loss, back
    if cols == 0:
        raise ValueError("softmax cross-entropy needs at least one class")
    x = _contiguous(x)
    threads = _pool_threads(ctx, x.size, PARALLEL_MIN_ELEMENTS)
    if threads == 1 or rows < 2:
        _xent_serial(x, labels, sparse, loss, back)
    else:
        with parallel_region:
            _xent_parallel(x, labels, sparse, loss, back,
                           min(rows, threads * _CHUNKS_PER_THREAD))
    return loss, back


@register("SoftmaxCrossEntropyWithLogits", CPU, FLOATING)
def softmax_xent(ctx, inputs, attrs):
    """(loss, backprop): ``-sum(labels * log_softmax(features))`` per row and
    ``softmax(features) - labels``."""
    features, labels = inputs
    return _xent(ctx, features, _contiguous(labels.astype(features.dtype, copy=False)), False)


@register("SparseSoftmaxCrossEntropyWithLogits", CPU, FLOATING)
def sparse_softmax_xent(ctx, inputs, attrs):
    """(loss, backprop) for integer labels; a label outside [0, classes) raises
    ValueError, as TensorFlow's CPU kernel does."""
    features, labels = inputs
    classes = features.shape[1]
    if labels.size and (labels.min() < 0 or labels.max() >= classes):
        bad = int(np.flatnonzero((labels < 0) | (labels >= classes))[0])
        raise ValueError(f"SparseSoftmaxCrossEntropyWithLogits: received a label value of "
                         f"{int(labels[bad])} which is outside the valid range of [0, {classes})")
    # Labels as a float column: one compiled function per float dtype serves both ops.
    column = _readonly(labels.astype(features.dtype).reshape(-1, 1))
    return _xent(ctx, features, column, True)


@njit(cache=True, nogil=True)
def _log_softmax_range(x, out, r0, r1):
    cols = x.shape[1]
    bits = np.empty(cols, np.int32)
    fast = x.itemsize == 4  # float32
    for r in range(r0, r1):
        xr = x[r]
        o = out[r]
        m = _row_max(xr)
        shift = m + math.log(_exp_shifted(xr, m, o, bits, fast))  # o: scratch for exp
        for j in range(cols):
            o[j] = xr[j] - shift


@njit(cache=True, nogil=True)
def _log_softmax_serial(x, out):
    _log_softmax_range(x, out, 0, x.shape[0])


@njit(cache=True, nogil=True, parallel=True)
def _log_softmax_parallel(x, out, nchunks):
    rows = x.shape[0]
    for c in prange(nchunks):
        _log_softmax_range(x, out, c * rows // nchunks, (c + 1) * rows // nchunks)


@register("LogSoftmax", CPU, FLOATING)
def log_softmax(ctx, inputs, attrs):
    """``logits - log(sum(exp(logits)))`` over the last axis, max-subtracted."""
    x = inputs[0]
    out = np.empty(x.shape, x.dtype)
    if x.size == 0:
        return (out,)
    x2 = _contiguous(x).reshape(-1, x.shape[-1])
    out2 = out.reshape(x2.shape)
    threads = _pool_threads(ctx, x.size, PARALLEL_MIN_ELEMENTS)
    if threads == 1 or x2.shape[0] < 2:
        _log_softmax_serial(x2, out2)
    else:
        with parallel_region:
            _log_softmax_parallel(x2, out2, min(x2.shape[0], threads * _CHUNKS_PER_THREAD))
    return (out,)


def warm(ctx, dtype) -> None:
    """Run each kernel of this module once on tiny inputs of ``dtype`` (see
    :func:`.cpu_nn.warmup`, which calls it)."""
    x = np.ones((2, 18), dtype)
    for idx_dtype in (np.int32, np.int64):
        ids = np.zeros((2,), idx_dtype)
        gather(ctx, (x, ids), {"axis": 0})
        unsorted_segment_sum(ctx, (x, ids), {"num_segments": 2})
    if dtype.kind != "f":
        return
    logits = x.reshape(6, 6)
    softmax_xent(ctx, (logits, logits), {})
    for idx_dtype in (np.int32, np.int64):
        sparse_softmax_xent(ctx, (logits, np.zeros(6, idx_dtype)), {})
    log_softmax(ctx, (logits,), {})
