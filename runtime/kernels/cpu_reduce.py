"""CPU kernels of the reductions over axes and rows: Sum, Mean, Softmax and SoftmaxGrad,
registered with :func:`.registry.register` at import (part of the base kernel family,
with :mod:`.cpu`, whose conventions and helpers they follow).

* A reduction views its input as ``(outer, reduced, inner)`` (:func:`.layout.reduce_layout`,
  cached per shape and axes) and sums the reduced axis; a sum along a contiguous run keeps
  eight partial sums (:func:`_sum_run`).  With several intra-op threads and enough
  elements it splits the outer rows, or, with few outputs, the reduced axis.
* Floating sums accumulate in float64 and integer sums in int64, then cast back (the op
  keeps its input dtype, as in TensorFlow).  An integer Mean truncates toward zero.
* Softmax and SoftmaxGrad work row by row over the last axis (rows split over the
  threads), max-subtracted so that exp never overflows.

>>> import numpy as np
>>> from runtime.kernels import KernelContext, get_kernel
>>> get_kernel("Mean", "CPU")(KernelContext(), (np.array([[1, 2], [3, 5]]),), {"axis": (1,)})
(array([1, 4]),)
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numba import njit, prange

from .cpu import _CHUNKS_PER_THREAD, PARALLEL_MIN_ELEMENTS, _pool_threads, _readonly
from .layout import normalize_axes, reduce_layout
from .registry import FLOATING, NUMERIC, register
from .threading_layer import parallel_region

__all__ = ["warmup"]

CPU = "CPU"


# --- reductions -------------------------------------------------------------------------------

@njit(cache=True, nogil=True)
def _sum_run(v, zero):
    """The sum of the contiguous run ``v``, accumulated in ``zero``'s type, in eight
    independent partial sums: one running sum is a chain of dependent adds (a
    [1024, 1024] row Sum took 6x numpy's time); eight chains overlap in the CPU."""
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = zero
    n = v.size
    m = n - n % 8
    for j in range(0, m, 8):
        s0 += v[j]
        s1 += v[j + 1]
        s2 += v[j + 2]
        s3 += v[j + 3]
        s4 += v[j + 4]
        s5 += v[j + 5]
        s6 += v[j + 6]
        s7 += v[j + 7]
    for j in range(m, n):
        s0 += v[j]
    return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))


@njit(cache=True, nogil=True)
def _reduce_range(x, acc, o_start, o_stop, r_start, r_stop):
    """acc[o, i] += sum of x[o, r, i] over r_start <= r < r_stop, for o_start <= o < o_stop."""
    inner = x.shape[2]
    for o in range(o_start, o_stop):
        if inner == 1:
            acc[o, 0] += _sum_run(x[o, r_start:r_stop, 0], acc[o, 0] * 0)
        else:
            for r in range(r_start, r_stop):
                for i in range(inner):
                    acc[o, i] += x[o, r, i]


@njit(cache=True, nogil=True)
def _reduce_serial(x, acc):
    _reduce_range(x, acc, 0, x.shape[0], 0, x.shape[1])


@njit(cache=True, nogil=True, parallel=True)
def _reduce_parallel_outer(x, acc, nchunks):
    """Many outputs: each chunk of outer rows is independent."""
    n = x.shape[0]
    for c in prange(nchunks):
        _reduce_range(x, acc, c * n // nchunks, (c + 1) * n // nchunks, 0, x.shape[1])


@njit(cache=True, nogil=True, parallel=True)
def _reduce_parallel_split(x, partial, nchunks):
    """Few outputs: split the reduced axis; partial[c] gets chunk c's sums."""
    n = x.shape[1]
    for c in prange(nchunks):
        _reduce_range(x, partial[c], 0, x.shape[0], c * n // nchunks, (c + 1) * n // nchunks)


# --- softmax ---------------------------------------------------------------------------------

@njit(cache=True, nogil=True)
def _softmax_range(x, out, r_start, r_stop):
    cols = x.shape[1]
    for r in range(r_start, r_stop):
        m = x[r, 0]
        for j in range(1, cols):
            m = max(m, x[r, j])
        s = 0.0
        for j in range(cols):
            e = math.exp(x[r, j] - m)  # <= 1: never overflows
            out[r, j] = e
            s += e
        inv = 1 / s
        for j in range(cols):
            out[r, j] *= inv


@njit(cache=True, nogil=True)
def _softmax_serial(x, out):
    _softmax_range(x, out, 0, x.shape[0])


@njit(cache=True, nogil=True, parallel=True)
def _softmax_parallel(x, out, nchunks):
    n = x.shape[0]
    for c in prange(nchunks):
        _softmax_range(x, out, c * n // nchunks, (c + 1) * n // nchunks)


@njit(cache=True, nogil=True)
def _softmax_grad_range(y, g, out, r_start, r_stop):
    cols = y.shape[1]
    for r in range(r_start, r_stop):
        s = 0.0
        for j in range(cols):
            s += g[r, j] * y[r, j]
        for j in range(cols):
            out[r, j] = y[r, j] * (g[r, j] - s)


@njit(cache=True, nogil=True)
def _softmax_grad_serial(y, g, out):
    _softmax_grad_range(y, g, out, 0, y.shape[0])


@njit(cache=True, nogil=True, parallel=True)
def _softmax_grad_parallel(y, g, out, nchunks):
    n = y.shape[0]
    for c in prange(nchunks):
        _softmax_grad_range(y, g, out, c * n // nchunks, (c + 1) * n // nchunks)


# --- kernels -------------------------------------------------------------------------------------

def _rows(a: np.ndarray) -> np.ndarray:
    """A C-ordered (rows, last axis) view; a 0-d or empty-last-axis array has one row."""
    return np.ascontiguousarray(a).reshape(-1, a.shape[-1] if a.ndim else 1)


@register("Softmax", CPU, FLOATING)
def softmax(ctx, inputs, attrs):
    """Softmax over the last axis, max-subtracted so exp never overflows."""
    x = inputs[0]
    out = np.empty(x.shape, dtype=x.dtype)
    if x.size == 0:
        return (out,)
    x2, out2 = _readonly(_rows(x)), out.reshape(-1, x.shape[-1] if x.ndim else 1)
    threads = _pool_threads(ctx, x.size, PARALLEL_MIN_ELEMENTS)
    if threads == 1 or x2.shape[0] < 2:
        _softmax_serial(x2, out2)
    else:
        with parallel_region:
            _softmax_parallel(x2, out2, min(x2.shape[0], threads * _CHUNKS_PER_THREAD))
    return (out,)


@register("SoftmaxGrad", CPU, FLOATING)
def softmax_grad(ctx, inputs, attrs):
    """SoftmaxGrad(y, g) = y * (g - sum(g * y, axis=-1, keepdims=True))."""
    y, g = inputs
    out = np.empty(y.shape, dtype=y.dtype)
    if y.size == 0:
        return (out,)
    y2, g2 = _readonly(_rows(y)), _readonly(_rows(g))
    out2 = out.reshape(-1, y.shape[-1] if y.ndim else 1)
    threads = _pool_threads(ctx, y.size, PARALLEL_MIN_ELEMENTS)
    if threads == 1 or y2.shape[0] < 2:
        _softmax_grad_serial(y2, g2, out2)
    else:
        with parallel_region:
            _softmax_grad_parallel(y2, g2, out2, min(y2.shape[0], threads * _CHUNKS_PER_THREAD))
    return (out,)


@functools.lru_cache(maxsize=1024)
def _reduce_plan(shape: tuple, axis, keepdims: bool):
    """``(out_shape, perm, (O, R, I))`` of a reduction over ``axis`` of an array of
    ``shape`` (see :func:`.layout.reduce_layout`), cached per shape and axes as
    :func:`.cpu._binary_plan` is."""
    axes = normalize_axes(axis, len(shape))
    if keepdims:
        out_shape = tuple(1 if d in axes else n for d, n in enumerate(shape))
    else:
        out_shape = tuple(n for d, n in enumerate(shape) if d not in axes)
    return (out_shape, *reduce_layout(shape, axes))


def _reduce_sum(ctx, x: np.ndarray, attrs) -> tuple[np.ndarray, np.ndarray, int]:
    """The sums over the reduced axes, in float64 (int64 for integers) and of the output's
    shape, and how many elements each sum has."""
    axis = attrs.get("axis")
    out_shape, perm, (o, r, i) = _reduce_plan(
        x.shape, axis if axis is None or isinstance(axis, int) else tuple(axis),
        bool(attrs.get("keepdims")))
    src = x if perm is None else x.transpose(perm)
    x3 = _readonly(np.ascontiguousarray(src).reshape(o, r, i))
    acc_dtype = np.float64 if x.dtype.kind == "f" else np.int64
    acc = np.zeros((o, i), dtype=acc_dtype)
    threads = _pool_threads(ctx, x.size, PARALLEL_MIN_ELEMENTS)
    if threads == 1 or x.size == 0:
        _reduce_serial(x3, acc)
    elif o >= 2 * threads:
        with parallel_region:
            _reduce_parallel_outer(x3, acc, min(o, threads * _CHUNKS_PER_THREAD))
    else:
        nchunks = min(r, threads * _CHUNKS_PER_THREAD)
        partial = np.zeros((nchunks, o, i), dtype=acc_dtype)
        with parallel_region:
            _reduce_parallel_split(x3, partial, nchunks)
        partial.sum(axis=0, out=acc)
    return acc.reshape(out_shape), r


def _run_time_axis(inputs, attrs):
    """``attrs`` with TensorFlow's axis input (a run-time int vector) as its ``axis``."""
    if len(inputs) == 2 and "axis" not in attrs:
        return dict(attrs, axis=tuple(int(a) for a in np.asarray(inputs[1]).reshape(-1)))
    return attrs


@register("Sum", CPU, NUMERIC)
def sum_(ctx, inputs, attrs):
    """Sum over ``attrs["axis"]`` (None: all; or the axis tensor input 1), keeping
    reduced axes if ``keepdims``."""
    x = inputs[0]
    attrs = _run_time_axis(inputs, attrs)
    acc, _ = _reduce_sum(ctx, x, attrs)
    return (acc.astype(x.dtype),)


@register("Mean", CPU, NUMERIC)
def mean(ctx, inputs, attrs):
    """Mean over ``attrs["axis"]`` (or the axis tensor input 1); integers truncate
    toward zero, as TensorFlow's."""
    x = inputs[0]
    attrs = _run_time_axis(inputs, attrs)
    acc, count = _reduce_sum(ctx, x, attrs)
    if x.dtype.kind == "f":
        return ((acc / count).astype(x.dtype),)
    # Integer mean as TensorFlow (C++ division): truncate toward zero.
    return ((np.sign(acc) * (np.abs(acc) // max(count, 1))).astype(x.dtype),)


# --- warm-up ------------------------------------------------------------------------------------

def warmup(dtypes=("float32", "float64", "int32", "int64"), parallel: bool = True) -> None:
    """Compile (or load from numba's on-disk cache) this module's numba functions for
    ``dtypes``, with inputs as read-only views as the kernels pass them (see
    :func:`.cpu.warmup`); ``parallel`` also the multithreaded variants.

    >>> warmup(("float32",), parallel=False)
    """
    for name in dtypes:
        dtype = np.dtype(name)
        floating = dtype.kind == "f"
        x3 = _readonly(np.ones((2, 2, 1), dtype))
        acc = np.zeros((2, 1), np.float64 if floating else np.int64)
        m2 = _readonly(np.ones((2, 2), dtype))
        o2 = np.empty((2, 2), dtype)
        _reduce_serial(x3, acc)
        if floating:
            _softmax_serial(m2, o2)
            _softmax_grad_serial(m2, m2, o2)
        if not parallel:
            continue
        with parallel_region:
            _reduce_parallel_outer(x3, acc, 2)
            _reduce_parallel_split(x3, np.zeros((2,) + acc.shape, acc.dtype), 2)
            if floating:
                _softmax_parallel(m2, o2, 2)
                _softmax_grad_parallel(m2, m2, o2, 2)
