"""CPU kernels of the math op family (:mod:`core.ops_math`), registered with
:func:`.registry.register` at import (see :mod:`.cpu` for the conventions).

* Elementwise math (Exp, Log, Sqrt, Rsqrt, Square, Abs, Sign, RealDiv, Pow, Maximum,
  Minimum, SquaredDifference, SqrtGrad, RsqrtGrad) runs :mod:`.cpu`'s op-code drivers
  (one compiled function per dtype; broadcasting, the parallel variants, read-only views).
* BatchMatMulV2 is one BLAS gemm per matrix of the broadcast batch (numba's ``np.dot``
  in a loop over the batch, adjoints read in place; the BLAS is single-threaded, see
  :mod:`.blas`); a batch big enough runs its matrices over the intra-op threads.
* AddN adds its inputs pairwise into one output buffer with the elementwise driver.
* Pure data movement (Pad, Split, Tile, StridedSlice and its gradient, Squeeze), Cast,
  Fill and the like are numpy copies, which release the GIL and which numba would not beat.
* Random initializers draw from numpy's PCG64 seeded with the op's ``(seed, seed2)``:
  the same pair gives the same numbers every run (``(0, 0)``: fresh entropy each call).

>>> import numpy as np
>>> from runtime.kernels import KernelContext, get_kernel
>>> get_kernel("RealDiv", "CPU")(KernelContext(), (np.array([1.0, 3.0]), np.array(2.0)), {})[0]
array([0.5, 1.5])
"""

from __future__ import annotations

import functools

import numpy as np
from numba import njit, prange

from core.ops_math import strided_slice_index

from . import cpu
from .cpu import _binary, _pool_threads, _readonly, _unary
from .opcodes import (ABS, MAXIMUM, MINIMUM, REAL_DIV, RSQRT, RSQRT_GRAD, SIGN, SQRT, SQRT_GRAD,
                      SQUARE, SQUARED_DIFFERENCE)
from .registry import FLOATING, NUMERIC, register
from .threading_layer import parallel_region

__all__ = ["warmup"]

CPU = "CPU"


# --- elementwise ----------------------------------------------------------------------------

def _register_binary(op_type: str, code: int, dtypes, doc: str) -> None:
    def kernel(ctx, inputs, attrs):
        return (_binary(code, ctx, *inputs),)
    kernel.__name__ = op_type
    kernel.__doc__ = doc
    register(op_type, CPU, dtypes)(kernel)


def _register_unary(op_type: str, code: int, dtypes, floating: bool, doc: str) -> None:
    serial, parallel = ((cpu._unary_float_serial, cpu._unary_float_parallel) if floating
                        else (cpu._unary_serial, cpu._unary_parallel))

    def kernel(ctx, inputs, attrs):
        return (_unary(serial, parallel, code, ctx, inputs[0]),)
    kernel.__name__ = op_type
    kernel.__doc__ = doc
    register(op_type, CPU, dtypes)(kernel)


for _op, _code, _dtypes, _doc in (
        ("RealDiv", REAL_DIV, FLOATING, "x / y, broadcasting."),
        ("Maximum", MAXIMUM, NUMERIC, "max(x, y), broadcasting."),
        ("Minimum", MINIMUM, NUMERIC, "min(x, y), broadcasting."),
        ("SquaredDifference", SQUARED_DIFFERENCE, NUMERIC, "(x - y) ** 2, broadcasting."),
        ("SqrtGrad", SQRT_GRAD, FLOATING, "SqrtGrad(y, g) = g / (2 y), y the Sqrt output."),
        ("RsqrtGrad", RSQRT_GRAD, FLOATING, "RsqrtGrad(y, g) = -g y^3 / 2, y the Rsqrt output.")):
    _register_binary(_op, _code, _dtypes, _doc)

for _op, _code, _dtypes, _floating, _doc in (
        ("Sqrt", SQRT, FLOATING, True, "sqrt(x)."),
        ("Rsqrt", RSQRT, FLOATING, True, "1 / sqrt(x)."),
        ("Square", SQUARE, NUMERIC, False, "x * x."),
        ("Abs", ABS, NUMERIC, False, "|x|."),
        ("Sign", SIGN, NUMERIC, False, "-1, 0 or 1 as x is negative, zero or positive.")):
    _register_unary(_op, _code, _dtypes, _floating, _doc)


# Exp, Log and Pow call numpy's ufuncs: numpy has SIMD exp/log/pow, while numba (without
# Intel's SVML) calls libm once per element, 4-20x numpy's time on a large tensor (see
# experiments.bench_kernels).  The ufuncs release the GIL; the ops are single-threaded
# in the op table (multithreaded=False), so the simulator charges them one thread.

@register("Exp", CPU, FLOATING)
def exp(ctx, inputs, attrs):
    """exp(x) (numpy's SIMD ufunc)."""
    return (np.asarray(np.exp(inputs[0])),)  # (a 0-d input gives a numpy scalar)


@register("Log", CPU, FLOATING)
def log(ctx, inputs, attrs):
    """log(x): -inf at 0, nan below (numpy's SIMD ufunc)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return (np.asarray(np.log(inputs[0])),)


@register("Pow", CPU, FLOATING)
def pow_(ctx, inputs, attrs):
    """x ** y, broadcasting (numpy's ufunc)."""
    x, y = inputs
    with np.errstate(all="ignore"):
        return (np.asarray(np.power(x, y)),)


@njit(cache=True, nogil=True)
def _add_range(a, b, out, start, stop, in_place):
    """``out = a + b`` (``out += b`` when ``in_place``: then ``a`` is unused) over
    ``[start, stop)``.  The in-place loop names only ``out`` and ``b``: with ``a`` aliasing
    ``out`` LLVM's run-time overlap check would fall back to a scalar loop."""
    c = out[start:stop]
    y = b[start:stop]
    if in_place:
        for j in range(stop - start):
            c[j] += y[j]
    else:
        x = a[start:stop]
        for j in range(stop - start):
            c[j] = x[j] + y[j]


@njit(cache=True, nogil=True)
def _add_serial(a, b, out, in_place):
    _add_range(a, b, out, 0, out.size, in_place)


@njit(cache=True, nogil=True, parallel=True)
def _add_parallel(a, b, out, in_place, nchunks):
    n = out.size
    for c in prange(nchunks):
        _add_range(a, b, out, c * n // nchunks, (c + 1) * n // nchunks, in_place)


@register("AddN", CPU, NUMERIC)
def add_n(ctx, inputs, attrs):
    """The sum of the inputs (one shape): the first two added into a new buffer, each
    further one added into it in place."""
    out = np.empty(inputs[0].shape, dtype=inputs[0].dtype)
    flat = [cpu._readonly_flat(x) for x in inputs]
    dst = out.reshape(-1)
    if len(flat) == 1:
        dst[:] = flat[0]
        return (out,)
    threads = _pool_threads(ctx, out.size, cpu.PARALLEL_MIN_ELEMENTS)
    for k in range(1, len(flat)):
        a, in_place = (flat[0], False) if k == 1 else (dst, True)
        if threads == 1:
            _add_serial(a, flat[k], dst, in_place)
        else:
            with parallel_region:
                _add_parallel(a, flat[k], dst, in_place, threads * 4)
    return (out,)


@register("Cast", CPU, NUMERIC)
def cast(ctx, inputs, attrs):
    """x as ``attrs["DstT"]`` (floats to ints truncate toward zero, as C and TF)."""
    return (np.array(inputs[0], dtype=np.dtype(attrs["DstT"]), order="C"),)


# --- shapes and constants of a shape ----------------------------------------------------------

@register("Fill", CPU, NUMERIC)
def fill(ctx, inputs, attrs):
    """``dims`` (attr, or input 0 as in TF) filled with the scalar ``value`` (last input)."""
    dims = (tuple(int(d) for d in attrs["dims"]) if "dims" in attrs
            else tuple(int(d) for d in np.asarray(inputs[0])))
    value = np.asarray(inputs[-1])
    return (np.full(dims, value, dtype=value.dtype),)


@register("ZerosLike", CPU, NUMERIC)
def zeros_like(ctx, inputs, attrs):
    """Zeros of x's shape and dtype."""
    return (np.zeros_like(inputs[0], order="C"),)


@register("OnesLike", CPU, NUMERIC)
def ones_like(ctx, inputs, attrs):
    """Ones of x's shape and dtype."""
    return (np.ones_like(inputs[0], order="C"),)


@register("Shape", CPU, frozenset({"int32", "int64"}))
def shape(ctx, inputs, attrs):
    """x's shape as an int vector (``out_type``)."""
    return (np.array(np.shape(inputs[0]), dtype=np.dtype(attrs.get("out_type", "int32"))),)


@register("Size", CPU, frozenset({"int32", "int64"}))
def size(ctx, inputs, attrs):
    """x's number of elements (``out_type``)."""
    return (np.array(np.size(inputs[0]), dtype=np.dtype(attrs.get("out_type", "int32"))),)


@register("StopGradient", CPU, NUMERIC)
def stop_gradient(ctx, inputs, attrs):
    """A copy of x (the op only matters to :func:`core.gradients`)."""
    return (np.array(inputs[0], copy=True, order="C"),)


@register("Squeeze", CPU, NUMERIC)
def squeeze(ctx, inputs, attrs):
    """x without its length-1 axes ``squeeze_dims`` (all of them when empty); a copy."""
    x = inputs[0]
    dims = tuple(attrs.get("squeeze_dims") or ())
    return (np.array(np.squeeze(x, axis=dims if dims else None), order="C"),)


# --- data movement ---------------------------------------------------------------------------

@register("Pad", CPU, NUMERIC)
def pad(ctx, inputs, attrs):
    """x zero-padded by ``attrs["paddings"]`` ((before, after) per axis)."""
    x = inputs[0]
    paddings = [tuple(int(v) for v in p) for p in attrs["paddings"]]
    out = np.zeros(tuple(d + a + b for d, (a, b) in zip(x.shape, paddings)), dtype=x.dtype)
    out[tuple(slice(a, a + d) for d, (a, _) in zip(x.shape, paddings))] = x
    return (out,)


@register("Split", CPU, NUMERIC)
def split(ctx, inputs, attrs):
    """x in ``num_split`` equal parts along ``axis`` (C-ordered copies)."""
    parts = np.split(inputs[0], int(attrs["num_split"]), axis=int(attrs["axis"]))
    return tuple(np.ascontiguousarray(p) for p in parts)


@register("SplitV", CPU, NUMERIC)
def split_v(ctx, inputs, attrs):
    """x in parts of ``size_splits`` along ``axis`` (one size may be -1: the rest)."""
    x = inputs[0]
    axis = int(attrs["axis"]) % x.ndim
    sizes = [int(s) for s in attrs["size_splits"]]
    if -1 in sizes:
        sizes[sizes.index(-1)] = x.shape[axis] - sum(s for s in sizes if s != -1)
    return tuple(np.ascontiguousarray(p) for p in np.split(x, np.cumsum(sizes)[:-1], axis=axis))


@register("Tile", CPU, NUMERIC)
def tile(ctx, inputs, attrs):
    """x repeated ``multiples[i]`` times along axis i."""
    return (np.tile(inputs[0], tuple(int(m) for m in attrs["multiples"])),)


_SLICE_KEYS = ("begin", "end", "strides", "begin_mask", "end_mask", "ellipsis_mask",
               "new_axis_mask", "shrink_axis_mask")


@functools.lru_cache(maxsize=1024)
def _slice_index(shape: tuple, spec: tuple) -> tuple:
    """:func:`core.ops_math.strided_slice_index` cached per shape and slice spec (its
    Python work cost several times a small slice's copy)."""
    return strided_slice_index(shape, dict(zip(_SLICE_KEYS, spec)))[0]


def _index_of(shape: tuple, attrs) -> tuple:
    spec = tuple(tuple(v) if isinstance(v, (list, tuple)) else v
                 for v in (attrs.get(k, 0) for k in _SLICE_KEYS))
    return _slice_index(tuple(shape), spec)


@register("StridedSlice", CPU, NUMERIC)
def strided_slice(ctx, inputs, attrs):
    """TF's StridedSlice (masks included), resolved by :func:`core.ops_math.strided_slice_index`."""
    x = inputs[0]
    return (np.array(x[_index_of(x.shape, attrs)], order="C"),)


@register("StridedSliceGrad", CPU, NUMERIC)
def strided_slice_grad(ctx, inputs, attrs):
    """Zeros of the sliced input's shape with ``dy`` where the slice took its values."""
    dy = inputs[-1]
    full = (tuple(int(d) for d in attrs["shape"]) if "shape" in attrs
            else tuple(int(d) for d in np.asarray(inputs[0])))
    out = np.zeros(full, dtype=dy.dtype)
    out[_index_of(full, attrs)] = dy
    return (out,)


# --- BatchMatMulV2 ----------------------------------------------------------------------------

@njit(cache=True, nogil=True)
def _batch_range(x, y, out, xi, yi, adj_x, adj_y, lo, hi):
    """``out[b] = op(x[xi[b]]) @ op(y[yi[b]])`` for ``lo <= b < hi``, op transposing
    when ``adj_*``: one BLAS gemm each, a transpose read in place (an F-ordered view).
    One call per branch, so that each names one array layout."""
    for b in range(lo, hi):
        if adj_x and adj_y:
            np.dot(x[xi[b]].T, y[yi[b]].T, out[b])
        elif adj_x:
            np.dot(x[xi[b]].T, y[yi[b]], out[b])
        elif adj_y:
            np.dot(x[xi[b]], y[yi[b]].T, out[b])
        else:
            np.dot(x[xi[b]], y[yi[b]], out[b])


@njit(cache=True, nogil=True)
def _batch_serial(x, y, out, xi, yi, adj_x, adj_y):
    _batch_range(x, y, out, xi, yi, adj_x, adj_y, 0, out.shape[0])


@njit(cache=True, nogil=True, parallel=True)
def _batch_parallel(x, y, out, xi, yi, adj_x, adj_y, nchunks):
    n = out.shape[0]
    for c in prange(nchunks):
        _batch_range(x, y, out, xi, yi, adj_x, adj_y, c * n // nchunks, (c + 1) * n // nchunks)


@functools.lru_cache(maxsize=256)
def _batch_plan(x_shape: tuple, y_shape: tuple, adj_x: bool, adj_y: bool):
    """``(out_shape, (m, n, k), xi, yi)`` of a BatchMatMulV2: per matrix of the broadcast
    batch, the index of the matrix of x and of y it uses (cached per shapes: working it
    out cost more than a small product's gemms)."""
    m = x_shape[-1] if adj_x else x_shape[-2]
    k = x_shape[-2] if adj_x else x_shape[-1]
    n = y_shape[-2] if adj_y else y_shape[-1]
    batch = np.broadcast_shapes(x_shape[:-2], y_shape[:-2])

    def ids(own):
        i = np.arange(int(np.prod(own)), dtype=np.int64).reshape(own)
        i = np.ascontiguousarray(np.broadcast_to(i, batch)).reshape(-1)
        i.setflags(write=False)
        return i
    return batch + (m, n), (m, n, k), ids(x_shape[:-2]), ids(y_shape[:-2])


def _stack(a: np.ndarray) -> np.ndarray:
    """``a`` as a read-only C-ordered stack of its matrices (a view when it already is)."""
    rows, cols = a.shape[-2], a.shape[-1]
    return _readonly(np.ascontiguousarray(a).reshape((-1, rows, cols)))


@register("BatchMatMulV2", CPU, FLOATING)
def batch_matmul(ctx, inputs, attrs):
    """``x @ y`` over the broadcast batch axes (``adj_x``/``adj_y`` transpose the last
    two, read in place), one BLAS gemm per matrix; the matrices spread over the intra-op
    threads when there are at least two per thread and enough work."""
    x, y = inputs
    adj_x, adj_y = bool(attrs.get("adj_x")), bool(attrs.get("adj_y"))
    out_shape, (m, n, k), xi, yi = _batch_plan(x.shape, y.shape, adj_x, adj_y)
    out = np.empty(out_shape, dtype=x.dtype)
    if out.size == 0:
        return (out,)
    if k == 0:
        out[...] = 0
        return (out,)
    flat = out.reshape((-1, m, n))
    count = flat.shape[0]
    cpu._blas_single_threaded()
    threads = _pool_threads(ctx, count * m * n * k, cpu.GEMM_PARALLEL_MIN_MACS)
    args = (_stack(x), _stack(y), flat, xi, yi, adj_x, adj_y)
    if threads == 1 or count < 2 * threads:
        _batch_serial(*args)
    else:
        with parallel_region:
            _batch_parallel(*args, min(count, threads * 4))
    return (out,)


# --- random initializers ---------------------------------------------------------------------

def _generator(attrs) -> np.random.Generator:
    """numpy's PCG64 keyed by the op's (seed, seed2); fresh entropy for (0, 0), TF's
    "no seed given"."""
    seed, seed2 = int(attrs.get("seed", 0)), int(attrs.get("seed2", 0))
    if seed == 0 and seed2 == 0:
        return np.random.default_rng()
    return np.random.default_rng([seed, seed2])


@register("RandomStandardNormal", CPU, FLOATING)
def random_standard_normal(ctx, inputs, attrs):
    """Standard normal samples of ``attrs["shape"]``."""
    dtype = np.dtype(attrs["dtype"])
    return (_generator(attrs).standard_normal(tuple(attrs["shape"]), dtype=dtype),)


@register("TruncatedNormal", CPU, FLOATING)
def truncated_normal(ctx, inputs, attrs):
    """Standard normal samples, those beyond two standard deviations drawn again (TF's)."""
    rng = _generator(attrs)
    dtype = np.dtype(attrs["dtype"])
    out = rng.standard_normal(tuple(attrs["shape"]), dtype=dtype)
    flat = out.reshape(-1)
    bad = np.flatnonzero(np.abs(flat) > 2)
    while bad.size:
        flat[bad] = rng.standard_normal(bad.size, dtype=dtype)
        bad = bad[np.abs(flat[bad]) > 2]
    return (out,)


@register("RandomUniform", CPU, FLOATING)
def random_uniform(ctx, inputs, attrs):
    """Uniform samples in [0, 1) of ``attrs["shape"]``."""
    dtype = np.dtype(attrs["dtype"])
    return (_generator(attrs).random(tuple(attrs["shape"]), dtype=dtype),)


# --- warm-up ----------------------------------------------------------------------------------

def warmup(dtypes=("float32", "float64", "int32", "int64"), parallel: bool = True) -> None:
    """Compile (or load from numba's cache) this family's own numba functions for
    ``dtypes``: AddN's and BatchMatMulV2's loops (the elementwise ops share :mod:`.cpu`'s
    drivers, which :func:`.cpu.warmup` compiles).

    >>> warmup(("float32",), parallel=False)
    """
    for name in dtypes:
        dtype = np.dtype(name)
        v = _readonly(np.ones(4, dtype))
        o = np.empty(4, dtype)
        _add_serial(v, v, o, False)
        _add_serial(o, v, o, True)
        if parallel:
            with parallel_region:
                _add_parallel(v, v, o, False, 2)
                _add_parallel(o, v, o, True, 2)
        if dtype.kind != "f":
            continue
        m3 = _readonly(np.ones((2, 2, 2), dtype))
        o3 = np.empty((2, 2, 2), dtype)
        ids = _readonly(np.arange(2, dtype=np.int64))
        for adj_x in (False, True):
            for adj_y in (False, True):
                _batch_serial(m3, m3, o3, ids, ids, adj_x, adj_y)
                if parallel:
                    with parallel_region:
                        _batch_parallel(m3, m3, o3, ids, ids, adj_x, adj_y, 2)
