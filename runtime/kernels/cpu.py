"""CPU kernels: numba ``@njit(cache=True, nogil=True)`` functions behind numpy-level wrappers.

Design
------
* Every compute kernel works on flat C-ordered buffers (see :mod:`.layout`), so each numba
  function compiles once per dtype, not once per rank or memory layout.
* The work of a kernel is a ``*_range`` function over a slice of its index space.  The
  serial variant calls it once; the parallel variant (``parallel=True``) splits the space
  into chunks and runs them in a ``prange``.  The two variants are separate functions
  because numba's cache index does not tell ``parallel=True`` apart.
* Multithreaded ops (MatMul, Sum, Mean, Softmax, SoftmaxGrad and the elementwise ops on
  at least :data:`PARALLEL_MIN_ELEMENTS` elements) run the parallel variant when
  ``ctx.intra_op_threads > 1``, after ``numba.set_num_threads`` in the calling thread.
* ``nogil=True`` everywhere: the executor's inter-op threads run kernels concurrently.
* Float MatMul calls BLAS, made single-threaded on first use (:mod:`.blas`); a big one
  runs as row blocks over the intra-op threads (see :func:`matmul`).
* Elementwise ops pass an integer op code (:mod:`.opcodes`) rather than a jitted element
  function, which numba could not cache; one compiled function per dtype serves them all.
  The hot loops branch on the code outside the loop and index slices from 0 (so numba's
  negative-index wraparound folds away): they vectorise and match numpy's speed.
* The shape work of an elementwise op or a reduction (broadcast layout, strides, axes)
  is cached per operand shapes: done in Python on every call it cost more than a small
  op's loop.  Loops that numba could not vectorise get written so that it can: one loop
  per op code, no zero-divisor check (``error_model="numpy"``) where a division sits in
  the loop, eight partial sums for a reduction along a run, and float32 Tanh by the
  rational approximation TensorFlow's CPU kernel uses (libm's ``tanhf`` is a call per
  element).  ``python -m experiments.bench_kernels`` times each kernel against numpy.
* Pure data movement (Reshape, Transpose, BroadcastTo, Concat, Slice, Identity) uses
  numpy's copy loops, which release the GIL and which numba would not beat.
* Every array a kernel only reads reaches numba as a read-only view (:func:`_readonly`).
  numba compiles a separate specialization for a read-only array (a constant, a fed
  value, a tensor received through shared memory), so with the inputs as they come each
  kernel would have one per mix of read-only and writable operands (16 for a float
  MatMul's layouts), and the first step after :func:`warmup` would compile whichever it
  met (a third of a second for a small graph).  Compiling every mix in :func:`warmup`
  would multiply its cold time instead; the views cost 0.2-0.6 us per kernel call (with
  numba's slower typing of a read-only argument), against ~8 us to dispatch an op.
  Kernels never write their inputs, so a read-only view loses nothing.
* The reductions (Sum, Mean) and Softmax with its gradient are in :mod:`.cpu_reduce`,
  on the helpers here.

>>> import numpy as np
>>> from runtime.kernels import KernelContext, get_kernel
>>> get_kernel("Add", "CPU")(KernelContext(), (np.array([[1, 2], [3, 5]]), np.array(10)), {})
(array([[11, 12],
       [13, 15]]),)
"""

from __future__ import annotations

import functools
import math
import os
import threading

import numba
import numpy as np
from numba import njit, prange

from core.gemm import MIN_ROWS_PER_BLOCK
from core.opdef import SPLIT_MIN_MACS

from .layout import broadcast_layout
from .opcodes import (ABS, ADD, ASSIGN, MAXIMUM, MINIMUM, MUL, NEG, REAL_DIV, RELU,
                      RELU_GRAD, RSQRT, RSQRT_GRAD, SIGMOID_GRAD, SIGN, SQRT,
                      SQRT_GRAD, SQUARE, SQUARED_DIFFERENCE, SUB, TANH, TANH_GRAD)
from .registry import FLOATING, NUMERIC, register
from .blas import blas_threads, set_blas_threads
from .threading_layer import parallel_region

__all__ = ["PARALLEL_MIN_ELEMENTS", "warmup"]

#: Below this many elements an elementwise op, reduction or softmax runs serially even
#: with several intra-op threads: waking the pool costs more than the work.  Measured on
#: this 2-core machine with ``OMP_WAIT_POLICY=passive`` (the servers' setting) and the
#: pool idle 0.3 ms between calls, as between ops of a step: parallel over serial, median
#: of three runs of 100 calls, Mul 1.78 / 1.48 / 1.23 / 1.16 / 0.81 at 2^16 / 2^18 / 2^19 /
#: 2^20 / 2^21 elements, Relu 2.19 ... 1.09, Sum 2.12 ... 0.81 (it was 2^16 before).
PARALLEL_MIN_ELEMENTS = 1 << 21
#: MatMul goes parallel from this many multiply-adds (m * n * k).
PARALLEL_MIN_MACS = 1 << 20
#: Chunks per thread in a parallel loop, so an unlucky slow chunk does not idle the rest.
_CHUNKS_PER_THREAD = 4
#: A float MatMul goes parallel (row blocks over the intra-op threads, one single-threaded
#: gemm each) from this many multiply-adds (256^3).  With the cores free, two blocks
#: take 0.64-0.66x one thread's time (bench_runtime's 8 layers of 1024^3, best and
#: median of 12, this process prioritised over the machine's other load); below 256^3
#: (~0.35 ms on one thread) that saves at most ~0.15 ms, while beside busy processes the
#: second thread's wake-up can cost ms (beside two, 2 blocks took 7x / 1.3x / 1.15x one thread's time at 256^3 /
#: 512^3 / 1024^3, median of 7 runs).
GEMM_PARALLEL_MIN_MACS = SPLIT_MIN_MACS  # (1 << 24; the executor gives such kernels the pool)
#: Row blocks per thread of a parallel float MatMul: each block's gemm packs all of
#: ``b`` again, so few and big blocks.  One thread's 1024^3 gemm as 1 / 2 / 4 / 8 calls
#: on row blocks took 1 / 1.05 / 1.10 / 1.25x as long (best of 20).
GEMM_CHUNKS_PER_THREAD = 1
#: Fewest rows in one block: with fewer, repacking ``b`` per block costs more than a
#: second thread gains (a 128-row block already pays +25%, above).  The cost model's
#: figure (:data:`core.gemm.MIN_ROWS_PER_BLOCK`), so that it splits a product as this does.
GEMM_MIN_ROWS_PER_CHUNK = MIN_ROWS_PER_BLOCK
#: Threads of numba's pool (fixed once it launched, at import of :mod:`runtime.kernels`).
_NUMBA_THREADS = numba.config.NUMBA_NUM_THREADS



# --- element functions ---------------------------------------------------------------------

@njit(cache=True, nogil=True, error_model="numpy")  # a float x / 0 is inf, as numpy's
def _binary_element(code, a, b):
    if code == ADD:
        return a + b
    if code == SUB:
        return a - b
    if code == MUL:
        return a * b
    if code == RELU_GRAD:  # ReluGrad(g, x)
        return a if b > 0 else 0
    if code == TANH_GRAD:  # TanhGrad(y, g)
        return b * (1 - a * a)
    if code == SIGMOID_GRAD:  # SigmoidGrad(y, g)
        return b * a * (1 - a)
    if code == REAL_DIV:
        return a / b
    if code == MAXIMUM:
        return a if a >= b else b
    if code == MINIMUM:
        return a if a <= b else b
    if code == SQUARED_DIFFERENCE:
        return (a - b) * (a - b)
    if code == SQRT_GRAD:  # SqrtGrad(y, g) = g / (2 y)
        return b * 0.5 / a
    if code == RSQRT_GRAD:  # RsqrtGrad(y, g) = -g y^3 / 2
        return b * a * a * a * -0.5
    return b  # ASSIGN


@njit(cache=True, nogil=True)
def _unary_element(code, a):
    if code == NEG:
        return -a
    if code == SQUARE:
        return a * a
    if code == ABS:
        return a if a >= 0 else -a
    if code == SIGN:
        return (a > 0) - (a < 0)
    return a if a > 0 else 0  # RELU


# --- elementwise drivers ------------------------------------------------------------------

@njit(cache=True, nogil=True, error_model="numpy")
def _binary_contiguous(code, x, xo, y, yo, out, oo, n):
    """The hot case: both operands contiguous along the run.  One loop per op, so the
    op branch sits outside the loop, and indices from 0 in slices, so numba's
    negative-index wraparound folds away; LLVM then vectorises each loop."""
    a = x[xo:xo + n]
    b = y[yo:yo + n]
    c = out[oo:oo + n]
    if code == ADD:
        for j in range(n):
            c[j] = a[j] + b[j]
    elif code == SUB:
        for j in range(n):
            c[j] = a[j] - b[j]
    elif code == MUL:
        for j in range(n):
            c[j] = a[j] * b[j]
    elif code == ASSIGN:
        for j in range(n):
            c[j] = b[j]
    elif code == REAL_DIV:
        for j in range(n):
            c[j] = a[j] / b[j]
    elif code == MAXIMUM:
        for j in range(n):
            c[j] = a[j] if a[j] >= b[j] else b[j]
    elif code == MINIMUM:
        for j in range(n):
            c[j] = a[j] if a[j] <= b[j] else b[j]
    elif code == SQUARED_DIFFERENCE:
        for j in range(n):
            d = a[j] - b[j]
            c[j] = d * d
    else:
        for j in range(n):
            c[j] = _binary_element(code, a[j], b[j])


@njit(cache=True, nogil=True, error_model="numpy")
def _binary_with_scalar(code, s, v, c, scalar_first):
    """``c[j] = f(v[j], s)`` (``f(s, v[j])`` when ``scalar_first``) along a contiguous
    run ``v`` and one element ``s`` of the other operand (a broadcast scalar: a learning
    rate times a gradient).  One loop per op, as in :func:`_binary_contiguous`: with
    the op's branch inside the loop it ran at 5-8 GB/s, a tenth of numpy's rate."""
    n = c.size
    if code == ADD:
        for j in range(n):
            c[j] = v[j] + s
    elif code == MUL:
        for j in range(n):
            c[j] = v[j] * s
    elif code == SUB and scalar_first:
        for j in range(n):
            c[j] = s - v[j]
    elif code == SUB:
        for j in range(n):
            c[j] = v[j] - s
    elif code == REAL_DIV and scalar_first:
        for j in range(n):
            c[j] = s / v[j]
    elif code == REAL_DIV:
        for j in range(n):
            c[j] = v[j] / s
    elif code == MAXIMUM:  # symmetric: the order only matters for a tie of equal values
        for j in range(n):
            c[j] = v[j] if v[j] >= s else s
    elif code == MINIMUM:
        for j in range(n):
            c[j] = v[j] if v[j] <= s else s
    elif scalar_first:
        for j in range(n):
            c[j] = _binary_element(code, s, v[j])
    else:
        for j in range(n):
            c[j] = _binary_element(code, v[j], s)


@njit(cache=True, nogil=True)
def _binary_range(code, x, xs, y, ys, shape, out, start, stop):
    """out[i] = f(x[...], y[...]) for flat output indices start <= i < stop."""
    ndim = shape.size
    inner = shape[ndim - 1]
    sx = xs[ndim - 1]
    sy = ys[ndim - 1]
    i = start
    while i < stop:
        row = i // inner
        col = i - row * inner
        end = min(stop, i + inner - col)
        # Decode the row once, then walk its contiguous run.
        xo = col * sx
        yo = col * sy
        r = row
        for d in range(ndim - 2, -1, -1):
            idx = r % shape[d]
            r //= shape[d]
            xo += idx * xs[d]
            yo += idx * ys[d]
        n = end - i
        if sx == 1 and sy == 1:
            _binary_contiguous(code, x, xo, y, yo, out, i, n)
        elif sx == 1:
            _binary_with_scalar(code, y[yo], x[xo:xo + n], out[i:i + n], False)
        elif sy == 1:
            _binary_with_scalar(code, x[xo], y[yo:yo + n], out[i:i + n], True)
        else:
            for j in range(n):
                out[i + j] = _binary_element(code, x[xo + j * sx], y[yo + j * sy])
        i = end


@njit(cache=True, nogil=True)
def _binary_serial(code, x, xs, y, ys, shape, out):
    _binary_range(code, x, xs, y, ys, shape, out, 0, out.size)


@njit(cache=True, nogil=True, parallel=True)
def _binary_parallel(code, x, xs, y, ys, shape, out, nchunks):
    n = out.size
    for c in prange(nchunks):
        _binary_range(code, x, xs, y, ys, shape, out, c * n // nchunks, (c + 1) * n // nchunks)


@njit(cache=True, nogil=True)
def _unary_range(code, x, out, start, stop):
    a = x[start:stop]  # slices: indices from 0, no wraparound checks (see above)
    c = out[start:stop]
    if code == NEG:  # one loop per op: the branch stays out of the loop
        for i in range(stop - start):
            c[i] = -a[i]
    elif code == SQUARE:
        for i in range(stop - start):
            c[i] = a[i] * a[i]
    elif code == ABS:
        for i in range(stop - start):
            c[i] = a[i] if a[i] >= 0 else -a[i]
    else:
        for i in range(stop - start):
            c[i] = _unary_element(code, a[i])


@njit(cache=True, nogil=True)
def _unary_serial(code, x, out):
    _unary_range(code, x, out, 0, out.size)


@njit(cache=True, nogil=True, parallel=True)
def _unary_parallel(code, x, out, nchunks):
    n = out.size
    for c in prange(nchunks):
        _unary_range(code, x, out, c * n // nchunks, (c + 1) * n // nchunks)


@njit(cache=True, nogil=True, error_model="numpy")
def _unary_float_range(code, x, out, start, stop):
    a = x[start:stop]
    c = out[start:stop]
    if code == SQRT:
        for i in range(stop - start):
            c[i] = math.sqrt(a[i]) if a[i] >= 0 else math.nan
    elif code == RSQRT:
        for i in range(stop - start):
            c[i] = 1 / math.sqrt(a[i]) if a[i] >= 0 else math.nan
    else:  # TANH (float64; float32 has _tanh32_range)
        for i in range(stop - start):
            c[i] = math.tanh(a[i])


@njit(cache=True, nogil=True)
def _unary_float_serial(code, x, out):
    _unary_float_range(code, x, out, 0, out.size)


@njit(cache=True, nogil=True, parallel=True)
def _unary_float_parallel(code, x, out, nchunks):
    n = out.size
    for c in prange(nchunks):
        _unary_float_range(code, x, out, c * n // nchunks, (c + 1) * n // nchunks)


@njit(cache=True, nogil=True, error_model="numpy")
def _sigmoid_range(x, e, start, stop):
    """``e`` holds ``exp(-|x|)``: make it ``sigmoid(x)`` in place, ``1 / (1 + e)`` where
    ``x >= 0`` and ``e / (1 + e)`` below (neither overflows).  One loop with no
    zero-divisor check (error_model) and a select for the sign: it vectorises."""
    for i in range(start, stop):
        ei = e[i]
        r = 1 / (1 + ei)
        e[i] = r if x[i] >= 0 else ei * r


@njit(cache=True, nogil=True)
def _sigmoid_serial(x, e):
    _sigmoid_range(x, e, 0, e.size)


@njit(cache=True, nogil=True, parallel=True)
def _sigmoid_parallel(x, e, nchunks):
    n = e.size
    for c in prange(nchunks):
        _sigmoid_range(x, e, c * n // nchunks, (c + 1) * n // nchunks)


# float32 tanh: a rational approximation p(x) / q(x) on [-9, 9] (odd numerator of degree
# 13, even denominator of degree 6; beyond +-9 tanh rounds to +-1 in float32), the one
# Eigen's fast tanh, and so TensorFlow's CPU kernel, uses.  Measured against float64 tanh
# on 2M points of [-9, 9]: at most 3.9e-7 relative (a few ulp).  Multiply-adds and one
# division: the loop vectorises, where libm's tanhf is one call per element (a Tanh on
# 1024 floats took 18 us, most of an RNN cell's time).
_TANH_P = (4.89352455891786e-03, 6.37261928875436e-04, 1.48572235717979e-05,
           5.12229709037114e-08, -8.60467152213735e-11, 2.00018790482477e-13,
           -2.76076847742355e-16)
_TANH_Q = (4.89352518554385e-03, 2.26843463243900e-03, 1.18534705686654e-04,
           1.19825839466702e-06)


@njit(cache=True, nogil=True, error_model="numpy")  # no zero-divisor check: the loop vectorises
def _tanh32_range(x, out, start, stop):
    a = x[start:stop]
    c = out[start:stop]
    p0, p1, p2, p3 = (np.float32(_TANH_P[0]), np.float32(_TANH_P[1]),
                      np.float32(_TANH_P[2]), np.float32(_TANH_P[3]))
    p4, p5, p6 = np.float32(_TANH_P[4]), np.float32(_TANH_P[5]), np.float32(_TANH_P[6])
    q0, q1, q2, q3 = (np.float32(_TANH_Q[0]), np.float32(_TANH_Q[1]),
                      np.float32(_TANH_Q[2]), np.float32(_TANH_Q[3]))
    hi, lo = np.float32(9.0), np.float32(-9.0)
    for i in range(stop - start):
        v = a[i]  # clamped by selects (a NaN passes through)
        v = hi if v > hi else v
        v = lo if v < lo else v
        v2 = v * v
        p = v * (p0 + v2 * (p1 + v2 * (p2 + v2 * (p3 + v2 * (p4 + v2 * (p5 + v2 * p6))))))
        c[i] = p / (q0 + v2 * (q1 + v2 * (q2 + v2 * q3)))


@njit(cache=True, nogil=True)
def _tanh32_serial(code, x, out):
    _tanh32_range(x, out, 0, out.size)


@njit(cache=True, nogil=True, parallel=True)
def _tanh32_parallel(code, x, out, nchunks):
    n = out.size
    for c in prange(nchunks):
        _tanh32_range(x, out, c * n // nchunks, (c + 1) * n // nchunks)


# --- matmul ------------------------------------------------------------------------------------

@njit(cache=True, nogil=True)
def _matmul_blas_serial(a, b, out):
    """Float matmul: np.dot in numba calls BLAS gemm (C- or F-ordered operands)."""
    np.dot(a, b, out)


@njit(cache=True, nogil=True, parallel=True)
def _matmul_blas_parallel(a, b, out, nchunks, relu):
    """Float matmul in ``nchunks`` row blocks, one single-threaded gemm each: ``out``
    C-ordered (a row block of it is then C-ordered too), ``b`` C or F.  A row block of
    a C-ordered ``a`` is C-ordered; one of an F-ordered ``a`` (a transposed operand) is
    neither, and the thread that multiplies it copies it first (numba's
    ``ascontiguousarray`` copies only then), so the copy is split over the threads and
    lands in the cache of the core that uses it (copied whole by the calling thread
    first, the product took 13-15% longer: ``docs/probes/transposed_split_probe.py``).
    With ``relu``, each block is relu'd in place right after its gemm, while in cache."""
    m = a.shape[0]
    n = out.shape[1]
    flat = out.reshape(-1)
    for c in prange(nchunks):
        lo = c * m // nchunks
        hi = (c + 1) * m // nchunks
        np.dot(np.ascontiguousarray(a[lo:hi]), b, out[lo:hi])
        if relu:
            _unary_range(RELU, flat, flat, lo * n, hi * n)


@njit(cache=True, nogil=True)
def _matmul_int_range(a, b, out, lo, hi):
    """Integer matmul (BLAS has none): i-k-j order, so the inner loop vectorises."""
    k = a.shape[1]
    n = b.shape[1]
    for i in range(lo, hi):
        for j in range(n):
            out[i, j] = 0
        for p in range(k):
            aip = a[i, p]
            for j in range(n):
                out[i, j] += aip * b[p, j]


@njit(cache=True, nogil=True)
def _matmul_int_serial(a, b, out):
    _matmul_int_range(a, b, out, 0, a.shape[0])


@njit(cache=True, nogil=True, parallel=True)
def _matmul_int_parallel(a, b, out, nchunks):
    m = a.shape[0]
    for c in prange(nchunks):
        _matmul_int_range(a, b, out, c * m // nchunks, (c + 1) * m // nchunks)


# --- dispatch helpers ------------------------------------------------------------------------

def _readonly(a: np.ndarray) -> np.ndarray:
    """A read-only view of ``a``: how every input operand reaches numba, so a kernel has
    one specialization per layout whatever the caller's array (see the module docstring).
    A new view, never ``a`` itself: the caller's array (a variable's buffer) stays writable."""
    v = a.view()
    v.setflags(False)  # write=False, positionally: the keyword doubled the call's ~80 ns
    return v


def _readonly_flat(a: np.ndarray) -> np.ndarray:
    """``a.ravel()``, read-only: ravel already makes a new array (a view of a C-contiguous
    ``a``, else a C-ordered copy), so flagging it saves :func:`_readonly`'s second view,
    ~0.1 us of the ~3 us a small elementwise kernel takes."""
    v = a.ravel()
    v.setflags(False)
    return v


@functools.lru_cache(maxsize=1)
def _blas_single_threaded() -> bool:
    """Make the BLAS of numba's np.dot single-threaded, once per process; whether it is.

    From then on a float MatMul uses exactly the intra-op threads it was given: row
    blocks over them, each a one-thread gemm (see :func:`matmul`).  An
    ``OPENBLAS_NUM_THREADS`` in the environment is a choice made for this process (the
    experiments' ``--blas-threads``): the BLAS keeps it, and a MatMul is one gemm call."""
    if os.environ.get("OPENBLAS_NUM_THREADS"):
        return False
    return set_blas_threads(1)


def products_split() -> bool:
    """Whether this process's float products (MatMul, the convolutions:
    ``core.opdef.BLAS_PRODUCTS``) may spread over the intra-op threads they are given:
    True where the kernels split them into one-thread gemms (:func:`_blas_single_threaded`)
    or the BLAS runs several threads of its own; False where the process fixed its BLAS
    at one thread (``OPENBLAS_NUM_THREADS=1``): each product is then one gemm call on
    one core.  The executor gives such a product one core, and the calibration records
    this (``Device.products_split``) so that the simulator does too."""
    return _blas_single_threaded() or (blas_threads() or 2) > 1


def _output(ctx, shape: tuple, dtype) -> np.ndarray:
    """The kernel's first output: ``ctx.out`` when it is a writable C-contiguous array of
    ``shape`` and ``dtype`` (see :class:`.context.KernelContext`), else a new array."""
    out = ctx.out
    if out is None:
        return np.empty(shape, dtype=dtype)
    if (type(out) is np.ndarray and out.shape == shape and out.dtype == dtype
            and out.flags.c_contiguous and out.flags.writeable):
        return out
    return np.empty(shape, dtype=dtype)


def _gemm_threads(ctx, m: int, n: int, k: int) -> tuple[int, int]:
    """``(row blocks, pool threads)`` for a float ``(m, k) @ (k, n)``; ``(1, 1)``: one
    gemm call; numba's pool set to those threads for this thread.  Written out (few
    helper calls) because the MLP's layers run it with the caches cold, after a gemm,
    where each Python call costs tens of microseconds (5-10x its time when warm).
    The BLAS is made single-threaded before anything else: with the row test first, the
    products of a process's first few-rows layers ran on the BLAS's own threads, and a
    product's speed depended on whether a big one had run before it."""
    if not _blas_single_threaded() or m < 2 * GEMM_MIN_ROWS_PER_CHUNK:
        return 1, 1
    threads = ctx.intra_op_threads
    if threads > _NUMBA_THREADS:
        threads = _NUMBA_THREADS
    if threads <= 1 or m * n * k < GEMM_PARALLEL_MIN_MACS:
        return 1, 1
    _set_pool_threads(threads)
    return max(1, min(threads, m // (GEMM_MIN_ROWS_PER_CHUNK * GEMM_CHUNKS_PER_THREAD))), threads


def _pool_threads(ctx, work: int, threshold: int) -> int:
    """Threads to use for ``work`` units (1: run serially), after set_num_threads."""
    threads = min(ctx.intra_op_threads, _NUMBA_THREADS)
    if threads <= 1 or work < threshold:
        return 1
    _set_pool_threads(threads)
    return threads


_POOL_THREADS = threading.local()


def _set_pool_threads(threads: int) -> None:
    """``numba.set_num_threads(threads)`` for the calling thread (per thread: other
    inter-op threads keep theirs), skipped when the kernels set that count on this
    thread last: the call cost ~35 us with the caches cold, as between the layers of an
    MLP (the kernels are the only ones that set it on the executor's threads)."""
    if getattr(_POOL_THREADS, "n", 0) != threads:
        numba.set_num_threads(threads)
        _POOL_THREADS.n = threads


@functools.lru_cache(maxsize=1024)
def _binary_plan(x_shape: tuple, y_shape: tuple, out_shape: tuple | None):
    """``(out_shape, shape, xs, ys)`` of an elementwise op: the broadcast output shape
    (``out_shape`` when given) and the collapsed iteration shape and operand strides as
    the int64 arrays the numba kernels take (see :func:`.layout.broadcast_layout`).

    Cached per shapes: working it out in Python took ~6 of the ~9 us a small Add cost,
    and a graph repeats a few shapes over and over.  The kernels only read the arrays.
    """
    if out_shape is None:
        out_shape = np.broadcast_shapes(x_shape, y_shape)
    shape, (xs, ys) = broadcast_layout(out_shape, [x_shape, y_shape])
    return (out_shape, np.array(shape, np.int64), np.array(xs, np.int64),
            np.array(ys, np.int64))


def _binary(code: int, ctx, x: np.ndarray, y: np.ndarray, out: np.ndarray | None = None):
    """Elementwise ``f(x, y)`` with numpy broadcasting, into a new array or into ``out``."""
    out_shape, shape, xs, ys = _binary_plan(x.shape, y.shape, None if out is None else out.shape)
    if out is None:
        out = np.empty(out_shape, dtype=x.dtype)
    args = (code, _readonly_flat(x), xs, _readonly_flat(y), ys, shape, out.reshape(-1))
    threads = _pool_threads(ctx, out.size, PARALLEL_MIN_ELEMENTS)
    if threads == 1:
        _binary_serial(*args)
    else:
        with parallel_region:
            _binary_parallel(*args, threads * _CHUNKS_PER_THREAD)
    return out


def _unary(serial, parallel, code: int, ctx, x: np.ndarray) -> np.ndarray:
    out = np.empty(x.shape, dtype=x.dtype)
    x = _readonly_flat(x)
    threads = _pool_threads(ctx, out.size, PARALLEL_MIN_ELEMENTS)
    if threads == 1:
        serial(code, x, out.reshape(-1))
    else:
        with parallel_region:
            parallel(code, x, out.reshape(-1), threads * _CHUNKS_PER_THREAD)
    return out


def _assign(code: int, ctx, ref: np.ndarray, value: np.ndarray) -> tuple[np.ndarray]:
    """``ref[...] = f(ref, value)`` in place; returns ``(ref,)``."""
    if not ref.flags.c_contiguous:  # variables are allocated contiguous; stay correct anyway
        ref[...] = _binary(code, ctx, np.ascontiguousarray(ref), value)
        return (ref,)
    # ref is both input and output: every element reads and writes only its own index.
    _binary(code, ctx, ref, value, out=ref)
    return (ref,)


# --- kernels -------------------------------------------------------------------------------------

CPU = "CPU"


@register("Const", CPU, NUMERIC)
def const(ctx, inputs, attrs):
    """The constant's value (shared, not copied: kernels never write their inputs)."""
    return (np.asarray(attrs["value"]),)


@register("Placeholder", CPU, NUMERIC)
def placeholder(ctx, inputs, attrs):
    """The value fed for this placeholder, ``ctx.feed``."""
    if ctx.feed is None:
        raise ValueError("Placeholder kernel needs ctx.feed, the fed value")
    return (np.asarray(ctx.feed),)


@register("Variable", CPU, NUMERIC)
def variable(ctx, inputs, attrs):
    """The variable's buffer itself, ``ctx.variable``, so Assign* update it in place."""
    if ctx.variable is None:
        raise ValueError("Variable kernel needs ctx.variable, the variable's buffer")
    return (ctx.variable,)


@register("NoOp", CPU, NUMERIC)
def no_op(ctx, inputs, attrs):
    """Nothing; exists for its control edges."""
    return ()


@register("Identity", CPU, NUMERIC)
def identity(ctx, inputs, attrs):
    """A copy of x."""
    return (np.array(inputs[0], copy=True, order="C"),)


@register("Assign", CPU, NUMERIC)
def assign(ctx, inputs, attrs):
    """``ref[...] = value``; returns ref."""
    return _assign(ASSIGN, ctx, *inputs)


@register("AssignAdd", CPU, NUMERIC)
def assign_add(ctx, inputs, attrs):
    """``ref += value``; returns ref."""
    return _assign(ADD, ctx, *inputs)


@register("AssignSub", CPU, NUMERIC)
def assign_sub(ctx, inputs, attrs):
    """``ref -= value``; returns ref."""
    return _assign(SUB, ctx, *inputs)


@register("Add", CPU, NUMERIC)
def add(ctx, inputs, attrs):
    """x + y, broadcasting."""
    return (_binary(ADD, ctx, *inputs),)


@register("Sub", CPU, NUMERIC)
def sub(ctx, inputs, attrs):
    """x - y, broadcasting."""
    return (_binary(SUB, ctx, *inputs),)


@register("Mul", CPU, NUMERIC)
def mul(ctx, inputs, attrs):
    """x * y, broadcasting."""
    return (_binary(MUL, ctx, *inputs),)


@register("ReluGrad", CPU, NUMERIC)
def relu_grad(ctx, inputs, attrs):
    """ReluGrad(g, x) = g * (x > 0)."""
    return (_binary(RELU_GRAD, ctx, *inputs),)


@register("TanhGrad", CPU, FLOATING)
def tanh_grad(ctx, inputs, attrs):
    """TanhGrad(y, g) = g * (1 - y * y), y the Tanh output."""
    return (_binary(TANH_GRAD, ctx, *inputs),)


@register("SigmoidGrad", CPU, FLOATING)
def sigmoid_grad(ctx, inputs, attrs):
    """SigmoidGrad(y, g) = g * y * (1 - y), y the Sigmoid output."""
    return (_binary(SIGMOID_GRAD, ctx, *inputs),)


@register("Neg", CPU, NUMERIC)
def neg(ctx, inputs, attrs):
    """-x."""
    return (_unary(_unary_serial, _unary_parallel, NEG, ctx, inputs[0]),)


@register("Relu", CPU, NUMERIC)
def relu(ctx, inputs, attrs):
    """max(x, 0)."""
    return (_unary(_unary_serial, _unary_parallel, RELU, ctx, inputs[0]),)


@register("Tanh", CPU, FLOATING)
def tanh(ctx, inputs, attrs):
    """tanh(x); in float32 by a rational approximation (see ``_TANH_P``), as TensorFlow."""
    x = inputs[0]
    if x.dtype == np.float32:
        return (_unary(_tanh32_serial, _tanh32_parallel, TANH, ctx, x),)
    return (_unary(_unary_float_serial, _unary_float_parallel, TANH, ctx, x),)


@register("Sigmoid", CPU, FLOATING)
def sigmoid(ctx, inputs, attrs):
    """1 / (1 + exp(-x)), computed without overflow.

    ``exp(-|x|)`` by numpy's SIMD ufuncs, then one numba pass (:func:`_sigmoid_range`):
    numba's exp is a libm call per element, and a loop around it ran a 64 x 1024
    float32 Sigmoid in 170 to 280 us depending on the process (each process kept its
    speed; ``docs/probes/sigmoid_modes_probe.py``), where this takes 59 to 73 us."""
    x = inputs[0]
    out = np.abs(x, out=np.empty(x.shape, dtype=x.dtype))
    np.negative(out, out=out)
    np.exp(out, out=out)
    flat = out.reshape(-1)
    threads = _pool_threads(ctx, out.size, PARALLEL_MIN_ELEMENTS)
    if threads == 1:
        _sigmoid_serial(_readonly_flat(x), flat)
    else:
        with parallel_region:
            _sigmoid_parallel(_readonly_flat(x), flat, threads * _CHUNKS_PER_THREAD)
    return (out,)


@register("MatMul", CPU, NUMERIC)
def matmul(ctx, inputs, attrs):
    """``op(a) @ op(b)``, op transposing when ``transpose_a``/``transpose_b`` is set.

    Floats call BLAS gemm (through numba's np.dot), which this module makes
    single-threaded (:mod:`.blas`): a big product (:data:`GEMM_PARALLEL_MIN_MACS`, at
    least 2 x :data:`GEMM_MIN_ROWS_PER_CHUNK` rows) is split into one row block per
    intra-op thread, each a one-thread gemm in a numba parallel loop; any other is one
    gemm call.  So a MatMul uses the cores it was given and no more, and its threads
    meet once, at the end: OpenBLAS's own threads meet at every panel of the product,
    spinning, and on this shared 2-core machine one of them losing its core to another
    process stalls the other (a 1024^3 float32 gemm beside other load, median of 40:
    1.2x and 2.1x as long on two OpenBLAS threads as on one, scipy's and numpy's copy).
    If the BLAS is not an OpenBLAS we can set, floats make one gemm call threaded as
    that library likes.  Integers run a numba loop, in row blocks over the intra-op pool.

    ``attrs["_fused_relu"]`` (set by the executor, :func:`runtime.executor.fuse_matmul_relu`)
    applies a relu to the product in place: to each row block right after its gemm.
    The product is written into ``ctx.out`` when it fits (:func:`_output`).
    """
    a, b = inputs
    a = a.T if attrs.get("transpose_a") else a
    b = b.T if attrs.get("transpose_b") else b
    m, k = a.shape
    n = b.shape[1]
    out = _output(ctx, (m, n), a.dtype)
    if a.dtype.kind == "f":
        if k == 0 or m == 0 or n == 0:
            out[...] = 0
            return (out,)
        # BLAS takes C- or F-ordered operands as they are (a transpose view is F-ordered;
        # split in row blocks, an F-ordered a's blocks are copied by their threads).
        a = _readonly(a if a.flags.c_contiguous or a.flags.f_contiguous
                      else np.ascontiguousarray(a))
        b = _readonly(b if b.flags.c_contiguous or b.flags.f_contiguous
                      else np.ascontiguousarray(b))
        blocks, threads = _gemm_threads(ctx, m, n, k)
        relu = bool(attrs.get("_fused_relu"))
        if blocks == 1:
            _matmul_blas_serial(a, b, out)
            if relu:
                flat = out.reshape(-1)
                _unary_serial(RELU, _readonly(flat), flat)
        else:
            with parallel_region:
                _matmul_blas_parallel(a, b, out, blocks * GEMM_CHUNKS_PER_THREAD, relu)
        return (out,)
    a, b = _readonly(np.ascontiguousarray(a)), _readonly(np.ascontiguousarray(b))
    threads = _pool_threads(ctx, m * n * k, PARALLEL_MIN_MACS)
    if threads == 1 or m < 2 * threads:
        _matmul_int_serial(a, b, out)
    else:
        with parallel_region:
            _matmul_int_parallel(a, b, out, min(m, threads * _CHUNKS_PER_THREAD))
    if attrs.get("_fused_relu"):
        flat = out.reshape(-1)
        _unary_serial(RELU, _readonly(flat), flat)
    return (out,)


def _shape_arg(inputs, attrs) -> tuple:
    """``attrs["shape"]``, or the run-time shape tensor TensorFlow passes as input 1."""
    if "shape" in attrs:
        return tuple(attrs["shape"])
    return tuple(int(d) for d in np.asarray(inputs[1]))


@register("BroadcastTo", CPU, NUMERIC)
def broadcast_to(ctx, inputs, attrs):
    """x broadcast to ``attrs["shape"]`` or to the shape tensor input 1 (materialised)."""
    return (np.array(np.broadcast_to(inputs[0], _shape_arg(inputs, attrs)), order="C"),)


@register("Reshape", CPU, NUMERIC)
def reshape(ctx, inputs, attrs):
    """x with ``attrs["shape"]`` or the shape tensor input 1 (a copy: outputs never
    alias inputs)."""
    return (np.array(inputs[0], order="C").reshape(_shape_arg(inputs, attrs)),)


@register("Transpose", CPU, NUMERIC)
def transpose(ctx, inputs, attrs):
    """x with its axes permuted by ``attrs["perm"]`` (materialised, C-ordered)."""
    return (np.array(np.transpose(inputs[0], tuple(attrs["perm"])), order="C"),)


@register("Concat", CPU, NUMERIC)
def concat(ctx, inputs, attrs):
    """The inputs joined along ``attrs["axis"]``."""
    return (np.concatenate(inputs, axis=attrs["axis"]),)


@register("Slice", CPU, NUMERIC)
def slice_(ctx, inputs, attrs):
    """``x[begin : begin + size]`` per axis; a size of -1 means "to the end"."""
    x = inputs[0]
    index = tuple(slice(b, n if s == -1 else b + s)
                  for b, s, n in zip(attrs["begin"], attrs["size"], x.shape))
    return (np.array(x[index], order="C"),)


# --- warm-up ------------------------------------------------------------------------------------

def warmup(dtypes=("float32", "float64", "int32", "int64"), parallel: bool = True) -> None:
    """Compile (or load from numba's on-disk cache) every CPU kernel for ``dtypes``.

    Call it before timing steps, so no compile lands in a measured step.  It covers each
    numba function a kernel of this module calls (the elementwise ops, Tanh and Sigmoid,
    MatMul with either operand transposed or not; :func:`.cpu_reduce.warmup` covers the
    reductions and Softmax, the rest of the base family), with the
    argument types the kernels pass: inputs as read-only views (see :func:`_readonly`), so
    read-only and writable inputs alike find their code compiled.  ``parallel`` also
    prepares the multithreaded variants (their first compile is the slow part).  The
    data-movement ops run numpy code: nothing to compile.

    >>> warmup(("float32",))
    """
    for name in dtypes:
        dtype = np.dtype(name)
        floating = dtype.kind == "f"
        v = _readonly(np.ones(4, dtype))  # inputs: read-only, as the kernels pass them
        o = np.empty(4, dtype)
        idx = np.ones(1, np.int64)
        sh = np.array([4], np.int64)
        m2 = _readonly(np.ones((2, 2), dtype))  # m2.T: the F-ordered view of a transpose
        o2 = np.empty((2, 2), dtype)
        _binary_serial(ADD, v, idx, v, idx, sh, o)
        _unary_serial(NEG, v, o)
        if floating:
            _unary_float_serial(TANH, v, o)
            _sigmoid_serial(v, o)
            if dtype == np.float32:
                _tanh32_serial(TANH, v, o)
            _matmul_blas_serial(m2, m2, o2)
            _matmul_blas_serial(m2, m2.T, o2)
            _matmul_blas_serial(m2.T, m2, o2)
            _matmul_blas_serial(m2.T, m2.T, o2)
        else:
            _matmul_int_serial(m2, m2, o2)
        if not parallel:
            continue
        with parallel_region:
            _binary_parallel(ADD, v, idx, v, idx, sh, o, 2)
            _unary_parallel(NEG, v, o, 2)
            if floating:
                _unary_float_parallel(TANH, v, o, 2)
                _sigmoid_parallel(v, o, 2)
                if dtype == np.float32:
                    _tanh32_parallel(TANH, v, o, 2)
                _matmul_blas_parallel(m2, m2, o2, 2, True)
                _matmul_blas_parallel(m2, m2.T, o2, 2, True)
                _matmul_blas_parallel(m2.T, m2, o2, 2, True)
                _matmul_blas_parallel(m2.T, m2.T, o2, 2, True)
            else:
                _matmul_int_parallel(m2, m2, o2, 2)
