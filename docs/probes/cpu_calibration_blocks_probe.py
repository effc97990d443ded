"""Run from the project root: `python docs/probes/cpu_calibration_blocks_probe.py [blocks]`.

Issue 20 §1 probe: how far does one block of :func:`runtime.calibrate.calibrate`'s
CPU figures (:func:`runtime.calibrate.measure_cpu_figures`: the matmul rate, the
bandwidth curve, the dispatch per op and the kernels' fixed costs) land from the next,
in one process with nothing changed between them?  Prints, per block (default 4), the
seconds it took, the dispatch per op, the fixed costs of MatMul and Add, the single-
thread matmul rate and the rate of the curve's smallest working set.

What it showed (2026-11-28 02:07 UTC, this 2-core VM, under the timing lock; us,
GFLOP/s, GB/s):

    block 0: 7.1 s  dispatch 3.74  MatMul 3.53  Add 2.95  peak  95.7  L2 85.2
    block 1: 7.0 s  dispatch 6.55  MatMul 5.92  Add 4.88  peak  99.7  L2 90.5
    block 2: 6.6 s  dispatch 3.73  MatMul 3.53  Add 2.89  peak  97.0  L2 93.6
    block 3: 6.6 s  dispatch 3.77  MatMul 3.53  Add 2.90  peak 101.6  L2 90.0

One block ran in one of this machine's slow spells: its per-op costs (dispatch and
the kernels' fixed costs, what the interpreter and the kernels' calls pay) were
1.6-1.8x the others', while its rates (a large gemm, the Add kernel's bandwidth)
held.  A second run at 02:09 caught no spell (five blocks, dispatch 3.75-4.05).  A
calibration made in such a spell shifted every prediction: at 02:05 the first of
``experiments.sim_vs_inprocess``'s two calibrations had dispatch 4.61 against 3.85
us, and every row came out 20-35% slower than measured (median error 22%, against
12% under the second).  Kept: ``calibrate(blocks=3)`` takes all its CPU figures from
the block of the median dispatch (a spell that outlasts two of the three blocks still
gets through: at 02:08 both of a run's three-block calibrations came out slow).
"""

from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as the experiments run


def main(blocks: int) -> None:
    from core.cluster import Cluster
    from runtime import kernels
    from runtime.allocator import keep_freed_memory
    from runtime.calibrate import measure_cpu_figures
    keep_freed_memory()  # as calibrate() does
    kernels.warmup(dtypes=("float32",))
    cpu = next(d for d in Cluster.this_machine().devices if d.is_cpu)
    for block in range(blocks):
        t0 = time.perf_counter()
        f = measure_cpu_figures(cpu)
        costs = dict(f["kernel_costs"])
        print(f"block {block}: {time.perf_counter() - t0:.1f} s  "
              f"dispatch {f['op_overhead'] * 1e6:.2f}  MatMul {costs['MatMul'][0] * 1e6:.2f}  "
              f"Add {costs['Add'][0] * 1e6:.2f}  peak {f['peak_flops'] / 1e9:.1f}  "
              f"L2 {f['bandwidth_curve'][0][1] / 1e9:.1f}", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 4)
