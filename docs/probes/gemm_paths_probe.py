"""Run from the project root: `python docs/probes/gemm_paths_probe.py`.

Issue 20 probe: why one factor on the roofline mispredicts MatMul by shape.  The
probe times the MatMul kernel alone on one thread (median of 200 calls) on products
either side of a million multiply-adds, then fits :class:`core.gemm.GemmCosts` as the
calibration does (:func:`runtime.calibrate_gemm.measure_gemm_costs`, on products of
its own) and predicts every MatMul shape of the in-process check's workloads and of
the kernel calibration graph, none of which it was fitted on.

What it showed (2026-11-28, 15:40 UTC, this 2-core AMD EPYC VM, numpy's OpenBLAS
0.3.31 running its SkylakeX kernels, one BLAS thread):

    16 x 128 @ 128 x 488   (999,424 MACs)    19.4 us   103.1 GFLOP/s
    16 x 128 @ 128 x 500 (1,024,000 MACs)    39.4 us    52.0 GFLOP/s
    100^3                                    19.7 us   101.7 GFLOP/s
    101^3                                    27.0 us    76.4 GFLOP/s
    4 x 512 @ 512 x 480                      21.2 us    92.7 GFLOP/s
    4 x 512 @ 512 x 520                      99.7 us    21.4 GFLOP/s

The jump sits at 100^3 multiply-adds whatever the shape: OpenBLAS runs smaller
products in a "direct" kernel straight from the operands, and larger ones through
packed panels, each call packing all of the second operand (about 0.3 ns per element
here, whatever the rows: a product of few rows by a large operand pays it with little
arithmetic to spread it over).  A second operand stored transposed takes the direct
kernel only for results of up to about 1,200 elements.  Fitted on the calibration's
products and tested on the shapes of the workloads and the calibration graph, the
two-path model predicted those over 8 us within a median 1.3-1.8% (largest 10-11%) in
two scratch runs at 14:5x and 3.8% (largest 44%, a 9 us product) in this probe at
15:40, where the calibrated one-factor roofline was off by a median 20% (largest 68%;
square products of 256 and 512 over-predicted by 20-30%).  A run at 15:44 caught the
machine changing speed part-way (100^3 in 25 us, not 20): median 10.7%, and the
transposed limit bisected to 560 outputs.

    python docs/probes/gemm_paths_probe.py
"""

from __future__ import annotations

import os
import statistics
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one gemm call per MatMul
sys.path.insert(0, os.getcwd())

import pandas as pd  # noqa: E402

from experiments.sim_vs_inprocess import DEFAULT_WORKLOADS  # noqa: E402
from experiments.sim_vs_real import build_workload  # noqa: E402
from runtime.calibrate_gemm import measure_gemm_costs, time_product  # noqa: E402
from runtime.calibrate_kernels import FIT_SIZES, kernel_calibration_graph  # noqa: E402

ACROSS = [(16, 128, 488), (16, 128, 500), (100, 100, 100), (101, 101, 101),
          (64, 64, 240), (64, 64, 250), (4, 512, 480), (4, 512, 520)]


def shapes(graph) -> set:
    """``(m, k, n, transpose_b)`` of each MatMul of ``graph`` (as its kernel sees it)."""
    out = set()
    for op in graph.get_operations():
        if op.type == "MatMul":
            a, b = (tuple(t.shape) for t in op.inputs)
            m, k = (a[1], a[0]) if op.attrs.get("transpose_a") else a
            tb = bool(op.attrs.get("transpose_b"))
            out.add((m, k, b[0] if tb else b[1], tb))
    return out


def main():
    print("== across a million multiply-adds (median of 200 calls) ==")
    for m, k, n in ACROSS:
        t = time_product(m, k, n, calls=200)
        print(f"{m:4d} x {k:4d} @ {k:4d} x {n:4d}  {m * k * n:>10,d} MACs  {t * 1e6:7.1f} us"
              f"  {2 * m * k * n / t / 1e9:6.1f} GFLOP/s")
    costs = measure_gemm_costs()
    print(costs)
    fixed = time_product(8, 8, 8, calls=200)
    held_out = set()
    for name in DEFAULT_WORKLOADS:
        held_out |= shapes(build_workload(name).graph)
    for n in FIT_SIZES:
        held_out |= shapes(kernel_calibration_graph(n)[0])
    rows = []
    for m, k, n, tb in sorted(held_out):
        measured = time_product(m, k, n, tb, calls=40)
        predicted = fixed + costs.seconds(m, k, n, tb)
        rows.append({"m": m, "k": k, "n": n, "transpose_b": tb, "measured_us": measured * 1e6,
                     "predicted_us": predicted * 1e6, "rel_error": predicted / measured - 1})
    table = pd.DataFrame(rows)
    print(table.round(3).to_string())
    big = table[table.measured_us > 8].rel_error.abs()
    print(f"{len(table)} shapes; the {len(big)} over 8 us: median |error| "
          f"{statistics.median(big):.3f}, largest {big.max():.3f}")


if __name__ == "__main__":
    main()
