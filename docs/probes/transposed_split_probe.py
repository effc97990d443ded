"""Run from the project root, WITHOUT ``OPENBLAS_NUM_THREADS`` set (as a user's process):
`python docs/probes/transposed_split_probe.py`.

Runtime probe: a float product split over two intra-op threads whose first operand is
a transpose (``transpose_a``: every weight gradient of a training step, ``x^T @ dy``).
A row block of an F-ordered operand is neither C- nor F-ordered, and numba's gemm needs
one of them, so the blocks are copied.  The kernel used to copy the whole operand in
the calling thread before the parallel loop; it now copies each block in the thread
that multiplies it (``runtime.kernels.cpu._matmul_blas_parallel``, given the
transposed operand as it is).  Both run
side by side in one process, in turns, 40 times each, warm and after a 32 MiB sweep.

What it showed (2026-11-28 18:1x UTC, this 2-core AMD EPYC VM, the timing lock;
medians, microseconds):

    n      whole copy first (warm, cold)   blocks copied by their threads (warm, cold)
    256    265.0, 289.2                    227.5, 246.4
    512    2039.3, 2046.0                  1723.4, 1731.4
    1024   15254.8, 15395.4                13227.3, 13355.1

This script's own run a few minutes later: 252.9/283.9 against 220.5/243.0 us,
1969.8/2038.7 against 1686.8/1705.1 us, 15757/15800 against 13578/13726 us.

13-15% faster at every size; kept.  The same products with a C-ordered first operand
(no copy) took 192-222 us, 1.4 ms and 11.3 ms in a run of that hour.
"""

import os
import statistics
import sys
import time

sys.path.insert(0, os.getcwd())

import numpy as np  # noqa: E402

from runtime.kernels import cpu  # noqa: E402
from runtime.kernels.threading_layer import parallel_region  # noqa: E402

REPEATS = 40


def whole_copy_first(a, b, out, chunks):
    contiguous = np.ascontiguousarray(a)
    with parallel_region:
        cpu._matmul_blas_parallel(contiguous, b, out, chunks, False)


def blocks_copied_by_their_threads(a, b, out, chunks):
    with parallel_region:
        cpu._matmul_blas_parallel(a, b, out, chunks, False)


def main() -> None:
    if not cpu._blas_single_threaded():
        sys.exit("run without OPENBLAS_NUM_THREADS: the kernel splits products only then")
    cpu._set_pool_threads(2)
    rng = np.random.default_rng(0)
    sweep = np.ones(8 << 20, np.float32)
    ways = {"whole copy first": whole_copy_first,
            "blocks copied by their threads": blocks_copied_by_their_threads}
    for n in (256, 512, 1024):
        weights = rng.standard_normal((n, n)).astype(np.float32)
        b = rng.standard_normal((n, n)).astype(np.float32)
        a, out = weights.T, np.empty((n, n), np.float32)
        chunks = 2 * cpu.GEMM_CHUNKS_PER_THREAD
        times = {(way, cold): [] for way in ways for cold in (False, True)}
        for way in ways.values():
            way(a, b, out, chunks)
        for _ in range(REPEATS):
            for name, way in ways.items():
                for cold in (False, True):
                    if cold:
                        sweep += 1.0
                    t0 = time.perf_counter()
                    way(a, b, out, chunks)
                    times[(name, cold)].append(time.perf_counter() - t0)
        np.testing.assert_allclose(out, a @ b, rtol=1e-3, atol=1e-2)
        print(n, ", ".join(f"{name} {'cold' if cold else 'warm'} "
                           f"{statistics.median(v) * 1e6:.1f} us"
                           for (name, cold), v in times.items()))


if __name__ == "__main__":
    main()
