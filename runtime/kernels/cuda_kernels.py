"""Device code of the GPU kernels (numba CUDA); imported only by :mod:`.cuda`, lazily.

This module imports ``numba.cuda`` at its top: :mod:`.cuda` imports it on the first GPU
kernel call, so that ``numba.cuda`` stays out of CPU-only processes.  The kernels reach
``cuda`` as a module global (not a closure variable) because numba's simulator swaps
module globals named after ``numba.cuda`` for its fake module while a kernel runs.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numba import cuda

from .opcodes import (ABS, ADD, EXP, LOG, MAXIMUM, MINIMUM, MUL, NEG, POW, REAL_DIV, RELU_GRAD,
                      RSQRT, RSQRT_GRAD, SIGMOID_GRAD, SIGN, SQRT, SQRT_GRAD, SQUARE,
                      SQUARED_DIFFERENCE, SUB, TANH, TANH_GRAD)

#: Side of a MatMul tile (threads per block: TILE * TILE).
TILE = 16


@cuda.jit(device=True)
def binary_element(code, a, b):
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
    if code == POW:
        return a ** b
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


@cuda.jit
def binary(code, x, xs, y, ys, shape, out):
    start = cuda.grid(1)
    step = cuda.gridsize(1)
    for i in range(start, out.size, step):
        xo = 0
        yo = 0
        r = i
        for d in range(len(shape) - 1, -1, -1):
            idx = r % shape[d]
            r //= shape[d]
            xo += idx * xs[d]
            yo += idx * ys[d]
        out[i] = binary_element(code, x[xo], y[yo])


@cuda.jit
def unary(code, x, out):
    start = cuda.grid(1)
    step = cuda.gridsize(1)
    for i in range(start, out.size, step):
        a = x[i]
        if code == NEG:
            out[i] = -a
        elif code == SQUARE:
            out[i] = a * a
        elif code == ABS:
            out[i] = a if a >= 0 else -a
        elif code == SIGN:  # (selects: the simulator's numpy bools do not subtract)
            out[i] = 1 if a > 0 else (-1 if a < 0 else 0)
        else:  # RELU
            out[i] = a if a > 0 else 0


@cuda.jit
def unary_float(code, x, out):
    start = cuda.grid(1)
    step = cuda.gridsize(1)
    for i in range(start, out.size, step):
        a = x[i]
        if code == TANH:
            out[i] = math.tanh(a)
        elif code == EXP:
            out[i] = math.exp(a)
        elif code == LOG:
            out[i] = math.log(a) if a > 0 else (-math.inf if a == 0 else math.nan)
        elif code == SQRT:
            out[i] = math.sqrt(a) if a >= 0 else math.nan
        elif code == RSQRT:
            out[i] = 1 / math.sqrt(a) if a >= 0 else math.nan
        elif a >= 0:  # Sigmoid, written so that exp never overflows
            out[i] = 1 / (1 + math.exp(-a))
        else:
            e = math.exp(a)
            out[i] = e / (1 + e)


@cuda.jit
def strided_copy(x, x_offset, x_strides, out, out_offset, out_strides, shape):
    """out[out_offset + idx . out_strides] = x[x_offset + idx . x_strides] over shape."""
    n = 1
    for d in range(len(shape)):
        n *= shape[d]
    start = cuda.grid(1)
    step = cuda.gridsize(1)
    for i in range(start, n, step):
        xo = x_offset
        oo = out_offset
        r = i
        for d in range(len(shape) - 1, -1, -1):
            idx = r % shape[d]
            r //= shape[d]
            xo += idx * x_strides[d]
            oo += idx * out_strides[d]
        out[oo] = x[xo]


@cuda.jit
def softmax(x, out):
    r = cuda.grid(1)
    if r >= x.shape[0]:
        return
    cols = x.shape[1]
    m = x[r, 0]
    for j in range(1, cols):
        m = max(m, x[r, j])
    s = 0.0
    for j in range(cols):
        e = math.exp(x[r, j] - m)  # <= 1: never overflows
        out[r, j] = e
        s += e
    for j in range(cols):
        out[r, j] = out[r, j] / s


@cuda.jit
def softmax_grad(y, g, out):
    r = cuda.grid(1)
    if r >= y.shape[0]:
        return
    cols = y.shape[1]
    s = 0.0
    for j in range(cols):
        s += g[r, j] * y[r, j]
    for j in range(cols):
        out[r, j] = y[r, j] * (g[r, j] - s)


@functools.cache
def matmul_kernel(dtype_name: str):
    """Tiled matmul for one dtype (shared-memory arrays need their dtype at compile time)."""
    scalar = np.dtype(dtype_name).type

    @cuda.jit
    def matmul(a, b, out, transpose_a, transpose_b, k):
        tile_a = cuda.shared.array((TILE, TILE), scalar)
        tile_b = cuda.shared.array((TILE, TILE), scalar)
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        row = cuda.blockIdx.y * TILE + ty
        col = cuda.blockIdx.x * TILE + tx
        m = out.shape[0]
        n = out.shape[1]
        acc = scalar(0)
        for t in range((k + TILE - 1) // TILE):
            p = t * TILE + tx
            if row < m and p < k:
                tile_a[ty, tx] = a[p, row] if transpose_a else a[row, p]
            else:
                tile_a[ty, tx] = 0
            p = t * TILE + ty
            if col < n and p < k:
                tile_b[ty, tx] = b[col, p] if transpose_b else b[p, col]
            else:
                tile_b[ty, tx] = 0
            cuda.syncthreads()
            for q in range(TILE):
                acc += tile_a[ty, q] * tile_b[q, tx]
            cuda.syncthreads()
        if row < m and col < n:
            out[row, col] = acc

    return matmul


@functools.cache
def reduce_kernel(floating: bool):
    """Sum (or mean) of x viewed as (O, R, I) over R, in chunks of R.

    Thread ``(o, c, i)`` sums ``r`` in ``[c * chunk, (c + 1) * chunk)`` into
    ``out[o, c, i]`` (flat), dividing by ``count`` when ``mean`` is set (integers truncate
    toward zero).  With one chunk this is the whole reduction.
    """
    acc_scalar = np.float64 if floating else np.int64

    @cuda.jit
    def reduce(x, out, outer, reduced, inner, chunks, chunk, mean, count):
        start = cuda.grid(1)
        step = cuda.gridsize(1)
        for t in range(start, outer * chunks * inner, step):
            o = t // (chunks * inner)
            rest = t - o * chunks * inner
            c = rest // inner
            i = rest - c * inner
            s = acc_scalar(0)
            base = o * reduced * inner + i
            for r in range(c * chunk, min(reduced, (c + 1) * chunk)):
                s += x[base + r * inner]
            if mean:
                if floating:
                    s = s / count
                else:  # C++ integer division, as TensorFlow: truncate toward zero
                    q = abs(s) // count
                    s = -q if s < 0 else q
            out[t] = s

    return reduce
