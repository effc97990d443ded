"""Device code of the math family's GPU kernels (numba CUDA); imported only by
:mod:`.cuda_math`, lazily, on the first GPU call (see :mod:`.cuda_kernels` for why
``cuda`` is a module global here).
"""

from __future__ import annotations

import functools

import numpy as np
from numba import cuda
from numba.cuda.random import (xoroshiro128p_normal_float32, xoroshiro128p_normal_float64,
                               xoroshiro128p_uniform_float32, xoroshiro128p_uniform_float64)

#: Side of a BatchMatMul tile (threads per block: TILE * TILE).
TILE = 16
#: Random kernels: normal, truncated normal, uniform.
NORMAL, TRUNCATED, UNIFORM = range(3)


@cuda.jit
def fill_scalar(out, value):
    """out[i] = value."""
    start = cuda.grid(1)
    step = cuda.gridsize(1)
    for i in range(start, out.size, step):
        out[i] = value


@cuda.jit
def fill_from(out, value):
    """out[i] = value[0] (a one-element device array: the value never leaves the GPU)."""
    start = cuda.grid(1)
    step = cuda.gridsize(1)
    for i in range(start, out.size, step):
        out[i] = value[0]


@cuda.jit
def cast(x, out):
    """out[i] = x[i] converted (floats to ints truncate toward zero)."""
    start = cuda.grid(1)
    step = cuda.gridsize(1)
    for i in range(start, out.size, step):
        out[i] = x[i]


@functools.cache
def batch_matmul_kernel(dtype_name: str):
    """Tiled matmul over a batch (grid z): ``out[b] = op(x[xi[b]]) @ op(y[yi[b]])``,
    the adjoints read through swapped indices."""
    scalar = np.dtype(dtype_name).type

    @cuda.jit
    def batch_matmul(x, y, out, xi, yi, adj_x, adj_y, k):
        tile_x = cuda.shared.array((TILE, TILE), scalar)
        tile_y = cuda.shared.array((TILE, TILE), scalar)
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        b = cuda.blockIdx.z
        row = cuda.blockIdx.y * TILE + ty
        col = cuda.blockIdx.x * TILE + tx
        m = out.shape[1]
        n = out.shape[2]
        xb = xi[b]
        yb = yi[b]
        acc = scalar(0)
        for t in range((k + TILE - 1) // TILE):
            p = t * TILE + tx
            if row < m and p < k:
                tile_x[ty, tx] = x[xb, p, row] if adj_x else x[xb, row, p]
            else:
                tile_x[ty, tx] = 0
            p = t * TILE + ty
            if col < n and p < k:
                tile_y[ty, tx] = y[yb, col, p] if adj_y else y[yb, p, col]
            else:
                tile_y[ty, tx] = 0
            cuda.syncthreads()
            for q in range(TILE):
                acc += tile_x[ty, q] * tile_y[q, tx]
            cuda.syncthreads()
        if row < m and col < n:
            out[b, row, col] = acc

    return batch_matmul


@functools.cache
def random_kernel(dtype_name: str):
    """Samples of one distribution into a flat ``out``, one xoroshiro128+ state per
    thread (grid-stride); truncated normals are redrawn beyond two deviations."""
    double = dtype_name == "float64"
    normal = xoroshiro128p_normal_float64 if double else xoroshiro128p_normal_float32
    uniform = xoroshiro128p_uniform_float64 if double else xoroshiro128p_uniform_float32

    @cuda.jit
    def random(states, kind, out):
        start = cuda.grid(1)
        step = cuda.gridsize(1)
        for i in range(start, out.size, step):
            if kind == UNIFORM:
                out[i] = uniform(states, start)
            else:
                v = normal(states, start)
                while kind == TRUNCATED and abs(v) > 2:
                    v = normal(states, start)
                out[i] = v

    return random
