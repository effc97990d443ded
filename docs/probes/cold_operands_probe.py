"""Run from the project root: `python docs/probes/cold_operands_probe.py [write]`.

Issue 20 probe: what does a kernel pay when its operands are not in the core's cache?
The calibration fits MatMul's factor on the kernel calibration graph, whose sizes take
turns step by step, and it comes out 1.15-1.19 over the gemm model
(:mod:`core.gemm`, timed on the kernel alone, its operands warm): the calibration
graph's products ran 1.08-1.71x the model (128^3 1.71, 256^3 1.13, 512^3 1.08, the
few-rows products 1.09-1.27, the transposed gradients 1.14-1.41; 17:2x UTC), while the
workloads' products run 1.02-1.06x (fastest) in their steps.  With the factor at 1,
the in-process rows of products (mixed_random) came within 1-10% where they are
+13-15% now, but mlp went from -5/-10% to -12/-17%: one factor cannot serve both.

Each kernel runs 40 times, one BLAS thread, in three conditions: warm (the same
operands again), after a 3 MiB sweep (out of the core's 1 MiB L2, still in the shared
32 MiB L3: AMD's L3 keeps what L2 evicts), and after a 96 MiB sweep (out of the L3
too).  The sweep reads its buffer (``write`` as argument: adds one to it, so that the
evicted lines are dirty).  Medians, and the extra per byte of the kernel's operands.

What it showed (2026-11-28 18:0x-18:1x UTC, this 2-core AMD EPYC VM, the timing lock):

    kernel                 operands   warm     L2 out   L3 out    extra per byte (L3, memory)
    64x256 @ 256x256       320 KiB     99.8 us  101.8    200.4    0.006 ns, 0.31 ns
    256^3                  512 KiB    337.2     339.6    469.2    0.005,    0.25
    16x1024 @ 1024x1024   4160 KiB    716.0     699.4   1490.8    0,        0.18
    128^3                  128 KiB     48.1      51.9    110.2    0.03,     0.47
    Add, 64k elements      512 KiB     10.7      13.4     71.9    0.005,    0.12
    Add, 256k elements    2048 KiB     36.4      37.8    178.1    0,        0.07
    (with dirty lines: 0.23-0.41 ns per byte for the products, 0.06-0.10 for Add;
    this script's run at 18:2x, reading: products 0.14-0.37 ns, Add 0.05-0.10 ns)

- Operands out of the core's cache but in the shared L3 cost nothing measurable.
  Operands from main memory cost a product 0.14-0.47 ns per byte (2-7 GB/s: the gemm
  packs its operands in panels, which the prefetchers do not stream) and an
  elementwise kernel 0.05-0.12 ns (8-20 GB/s, about the streaming rate).
- A model from this was tried (in scratch) and not kept: each op's inputs cold where
  their reuse distance (the bytes the device's kernels touched since each was last
  touched, steps repeating, the calibration's other sizes' steps in between) exceeds
  the L3's 32 MiB, each cold byte priced as above, in the simulator and taken out of
  the calibration's samples before the factors' fit.  The calibration's steps touch
  13, 54 and 214 MiB, so every input a step does not make came out cold, and the fit
  put MatMul's factor at 0.59-0.64, TanhGrad's at 1.3-1.4 (from 4.9-5.0).  The
  calibration's 256^3 product ran 44 us over the model, where a cold one costs about
  130 us more: most of its operands were still in the L3 after 54-227 MiB of other
  traffic, which an LRU cache of 32 MiB does not keep (the L3's replacement keeps
  lines that are read again).  On two in-process runs (17:17 and 17:40) the median
  error went from 7.9% to 8.2% and the worst row from 26% to 34%.
- Not modelled, then.  What a model needs: the L3's replacement (which lines survive a
  step's traffic), measured rather than assumed LRU: e.g. a product's time after
  sweeps of 8 to 256 MiB, with and without reading its operands in between.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, os.getcwd())

import numpy as np  # noqa: E402

from runtime.kernels import KernelContext, get_kernel  # noqa: E402

REPEATS = 40
SWEEPS = {"warm": 0, "L2 out": 3 << 20, "L3 out": 96 << 20}
CASES = (("64x256 @ 256x256", "MatMul", (64, 256), (256, 256)),
         ("256^3", "MatMul", (256, 256), (256, 256)),
         ("16x1024 @ 1024x1024", "MatMul", (16, 1024), (1024, 1024)),
         ("128^3", "MatMul", (128, 128), (128, 128)),
         ("Add, 64k elements", "Add", (65536,), (65536,)),
         ("Add, 256k elements", "Add", (262144,), (262144,)))


def timed(kernel, operands, sweep, write: bool) -> float:
    """The median seconds of ``kernel`` on ``operands``, each call after ``sweep``
    (None: none) has gone through the caches."""
    ctx = KernelContext("CPU", 1)
    times = []
    for _ in range(REPEATS):
        if sweep is not None:
            if write:
                sweep += 1.0
            else:
                sweep.sum()
        t0 = time.perf_counter()
        kernel(ctx, operands, {})
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(write: bool) -> None:
    rng = np.random.default_rng(0)
    sweeps = {label: np.ones(n // 4, np.float32) if n else None for label, n in SWEEPS.items()}
    for name, op_type, shape_a, shape_b in CASES:
        kernel = get_kernel(op_type, "CPU")
        operands = (rng.standard_normal(shape_a).astype(np.float32),
                    rng.standard_normal(shape_b).astype(np.float32))
        for _ in range(5):
            kernel(KernelContext("CPU", 1), operands, {})
        t = {label: timed(kernel, operands, sweep, write) for label, sweep in sweeps.items()}
        nbytes = sum(a.nbytes for a in operands)
        extra = {label: (t[label] - t["warm"]) / nbytes * 1e9 for label in ("L2 out", "L3 out")}
        print(f"{name:22s} {nbytes >> 10:5d} KiB: "
              + ", ".join(f"{label} {v * 1e6:7.1f} us" for label, v in t.items())
              + "; extra per byte: " + ", ".join(f"{k} {v:.3f} ns" for k, v in extra.items()))


if __name__ == "__main__":
    main(write="write" in sys.argv[1:])
