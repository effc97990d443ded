"""Calibration of the CPU's float matrix product by its BLAS's two paths
(:class:`core.gemm.GemmCosts`).

:func:`measure_gemm_costs` times the MatMul kernel alone on one thread on a few
products chosen to separate the figures, none of them a workload's:

1. where the direct kernel stops: products ``16 x 128 @ 128 x n``, bisected over ``n``
   for where the time per multiply-add jumps (a BLAS without a direct kernel shows no
   jump: ``direct_macs`` 0);
2. the direct kernel's rate, over products below that size;
3. the packed path's rate and its costs per element of the second operand and of the
   product: a least-squares fit (relative, non-negative) over square products, products
   of few rows by large operands, and products with a short shared dimension, which
   weigh the three terms differently;
4. how large a result a product with a transposed second operand may have and still
   take the direct kernel: ``4 x 128 @ (n x 128)^T``, bisected over ``n`` as in 1.

Every time counts beside the kernel's fixed cost, the time of an ``8 x 8`` product.

>>> costs = measure_gemm_costs(quick=True)                      # doctest: +SKIP
>>> costs.direct_macs, round(costs.packed_flops / 1e9)          # doctest: +SKIP
(997376, 108)
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from time import perf_counter

import numpy as np

from core.gemm import GemmCosts

__all__ = ["measure_gemm_costs", "time_product", "direct_limit", "transposed_direct_outputs",
           "jump_at", "fit_packed",
           "PACKED_SHAPES", "DIRECT_SHAPES"]

#: Products on the packed path whose (arithmetic, second operand, product) differ in
#: proportion: squares, few rows by large operands, and a short shared dimension.
PACKED_SHAPES = ((128, 128, 128), (256, 256, 256), (384, 384, 384), (16, 256, 1024),
                 (32, 512, 512), (64, 1024, 512), (512, 16, 512), (1024, 32, 256))
#: Products for the direct kernel's rate (all under a million multiply-adds).
DIRECT_SHAPES = ((96, 96, 96), (32, 64, 256), (64, 64, 128), (8, 256, 256))
#: The rows and shared dimension of the products bisected for the direct kernel's limit.
_PROBE_ROWS, _PROBE_DEPTH = 16, 128


def time_product(m: int, k: int, n: int, transpose_b: bool = False, calls: int = 30,
                 kernel=None, ctx=None) -> float:
    """Median seconds of the CPU MatMul kernel on ``(m, k) @ (k, n)`` (the second
    operand stored transposed with ``transpose_b``), one intra-op thread, over
    ``calls`` calls after three untimed ones."""
    from runtime.kernels import KernelContext, get_kernel
    kernel = kernel or get_kernel("MatMul", "CPU")
    ctx = ctx or KernelContext("CPU", 1)
    rng = np.random.default_rng(m * 7919 + k * 31 + n)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if transpose_b else (k, n)).astype(np.float32)
    attrs = {"transpose_b": transpose_b}
    for _ in range(3):
        kernel(ctx, (a, b), attrs)
    times = []
    for _ in range(calls):
        t0 = perf_counter()
        kernel(ctx, (a, b), attrs)
        times.append(perf_counter() - t0)
    return statistics.median(times)


def jump_at(per_mac, lo: int, hi: int, jump: float = 1.4, steps: int = 8) -> int | None:
    """The largest ``n`` in ``[lo, hi]`` whose ``per_mac(n)`` (seconds per multiply-add of
    a product of width ``n``) stays under ``jump`` times ``per_mac(lo)``, bisected in
    ``steps`` steps; None where ``per_mac(hi)`` does too (no jump in the range).

    >>> jump_at(lambda n: 1.0 if n <= 300 else 2.5, 32, 1024)
    299
    """
    base = per_mac(lo)
    if per_mac(hi) < jump * base:
        return None
    for _ in range(steps):
        if hi - lo <= 1:
            break
        mid = (lo + hi) // 2
        if per_mac(mid) < jump * base:
            lo = mid
        else:
            hi = mid
    return lo


def direct_limit(timer, fixed: float) -> int:
    """The most multiply-adds of a product on the direct path: ``16 x 128 @ 128 x n``
    timed by ``timer(m, k, n)`` (seconds, beside ``fixed``) for ``n`` from 256 to 1024,
    where its time per multiply-add jumps (:func:`jump_at`).  0 where it does not (no
    direct kernel, or one past that size: such a BLAS is one path here).

    >>> fake = lambda m, k, n: m * k * n * (1e-11 if m * k * n <= 10 ** 6 else 2e-11)
    >>> direct_limit(fake, 0.0)          # (a width 3 short of the limit's: eight steps)
    997376
    """
    m, k = _PROBE_ROWS, _PROBE_DEPTH
    n = jump_at(lambda n: max(timer(m, k, n) - fixed, 1e-9) / (m * k * n), 256, 1024)
    return 0 if n is None else m * k * n


def transposed_direct_outputs(timer, fixed: float, costs: GemmCosts) -> int:
    """The most elements of a product's result with which a transposed second operand
    still takes the direct kernel: ``4 x 128 @ (n x 128)^T`` timed by ``timer(m, k, n,
    True)``; 0 where the narrowest (``n`` = 32) already runs as the packed path of
    ``costs`` predicts, else where the time per multiply-add jumps between 32 and 1024
    (:func:`jump_at`)."""
    m, k = 4, _PROBE_DEPTH
    narrow = timer(m, k, 32, True) - fixed
    as_direct = 2.0 * m * k * 32 / costs.direct_flops
    if abs(narrow - costs.packed_seconds(m, k, 32)) < abs(narrow - as_direct):
        return 0
    n = jump_at(lambda n: max(timer(m, k, n, True) - fixed, 1e-9) / (m * k * n), 32, 1024)
    return m * (1024 if n is None else n)


def fit_packed(samples) -> tuple[float, float, float]:
    """``(seconds per FLOP, per element of the second operand, per element of the
    product)`` fitting ``seconds`` of each ``(m, k, n, seconds)`` sample, least squares
    relative to each time, none negative.

    >>> fit = fit_packed([(m, k, n, 2 * m * k * n * 1e-11 + k * n * 3e-10 + m * n * 1e-10)
    ...                   for m, k, n in PACKED_SHAPES])
    >>> [f"{x:.3g}" for x in fit]
    ['1e-11', '3e-10', '1e-10']
    """
    from scipy.optimize import nnls  # (here: `import runtime` imports this module)
    rows = np.array([[2.0 * m * k * n, k * n, m * n] for m, k, n, _ in samples])
    times = np.array([t for *_, t in samples])
    scale = rows.max(axis=0)  # columns of like size, for the solver
    solution, _ = nnls(rows / scale / times[:, None], np.ones(len(times)))
    per_flop, per_b, per_c = (solution / scale).tolist()
    return per_flop, per_b, per_c


def measure_gemm_costs(quick: bool = False) -> GemmCosts:
    """This machine's :class:`core.gemm.GemmCosts` for the CPU MatMul kernel on one
    thread (see the module docstring; ``quick``: fewer calls per product)."""
    from runtime.kernels import KernelContext, get_kernel
    kernel, ctx = get_kernel("MatMul", "CPU"), KernelContext("CPU", 1)
    calls = 9 if quick else 30

    def timer(m, k, n, transpose_b=False):
        return time_product(m, k, n, transpose_b, calls, kernel, ctx)

    fixed = timer(8, 8, 8)
    limit = direct_limit(timer, fixed)
    packed = [(m, k, n, timer(m, k, n) - fixed) for m, k, n in PACKED_SHAPES
              if m * k * n > limit]
    per_flop, per_b, per_c = fit_packed(packed)
    packed_flops = 1.0 / max(per_flop, 1e-15)
    if not limit:
        return GemmCosts(0, packed_flops, 0, packed_flops, per_b, per_c)
    direct = [(m, k, n, timer(m, k, n) - fixed) for m, k, n in DIRECT_SHAPES
              if m * k * n <= limit]
    # (a limit found is at least 16 x 128 x 256 multiply-adds, so 32 x 64 x 256 is in)
    direct_flops = statistics.median(2.0 * m * k * n / max(t, 1e-9) for m, k, n, t in direct)
    costs = GemmCosts(limit, direct_flops, 0, packed_flops, per_b, per_c)
    return replace(costs, transposed_direct_outputs=transposed_direct_outputs(timer, fixed, costs))
