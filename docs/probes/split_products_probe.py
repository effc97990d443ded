"""Run from the project root, WITHOUT ``OPENBLAS_NUM_THREADS`` set (as a user's process):
`python docs/probes/split_products_probe.py`.

Issue 20 probe: does a product the MatMul kernel splits over the intra-op threads run
as fast as the model says?  Without ``OPENBLAS_NUM_THREADS`` the kernel makes the BLAS
single-threaded and splits a product of at least 256^3 multiply-adds and 256 rows into
one row block per thread (``runtime.kernels.cpu.matmul``); the model divides its time
by the device's ``intra_op_speedup``, which :func:`runtime.calibrate.calibrate` measures
on a warm 1024^3 product timed over and over.  The probe calibrates, then runs the
kernel calibration graph's traced steps as the calibration does (the sizes 128, 256 and
512 taking turns, one inter-op thread, two intra-op threads) and prints each MatMul's
fastest kernel against the model's time for it (no fixed cost: the roofline part, the
gemm model's where the device has one), with the speed-up the model applied and the
cores the kernel held.

What it showed (2026-11-28 15:24 UTC, this 2-core AMD EPYC VM; the calibration's
intra-op speed-up 1.86):

    product (rows x depth x cols)   split   kernel us   model us   ratio
    128 x 128 x 128                 no         73.7        44.9     1.64
    256 x 256 x 256                 yes       352.4       179.7     1.96
    256 x 256 x 256, A transposed   yes       515.1       179.7     2.87
    32 x 1024 x 256                 no        269.2       230.6     1.17
    512 x 512 x 512                 yes      1523.0      1383.7     1.10
    2048 x 64 x 512, A transposed   yes      1290.4       723.5     1.78
    512 x 512 x 512, A transposed   yes      2148.4      1383.7     1.55
    64 x 2048 x 512                 no       2208.6      1541.5     1.43

(A run at 15:2x, before the kernel made the BLAS single-threaded on its first product
whatever its rows, gave 297 and 428 us for the two 256^3 products.)

The products that run on one thread take 1.1-1.7x their time alone (the step's other
kernels evict their operands: ``docs/probes/gemm_paths_probe.py`` times them warm).
The split ones fare worse: a 256^3 product gained nothing from its second thread
(352 us, about its time alone on one: its numba threads sleep between products,
OMP_WAIT_POLICY=passive, and wake per product, in caches the step left cold), and one
with a transposed first operand lost time to the copy that makes its row blocks
contiguous (515 us).  So the in-process check runs with ``OPENBLAS_NUM_THREADS=1`` (one gemm per
product, an intra-op speed-up of 1, as its calibration measures) and a user's default
path, with products split, is predicted too fast for products of a few hundred rows.
Not modelled then: a split product's wake-up as a fixed cost; since 2026-11-28 20:xx
the calibration fits a ``MatMul|parallel`` entry on the products that split (see
``core.costs.on_parallel_path``) and the factor on those that do not.

Later (18:0x): most of the user's path's error was not these products but the fit.
The kernel calibration fitted the factors on a device that did not know its kernels'
threshold yet, so every multithreaded kernel's arithmetic counted at the intra-op
speed-up (1.89) whatever its size, and the factors came out up to 1.4x (MatMul) and
2.8x (Conv2D) too large.  With the threshold in the fit the user's path gave a median
error of 5.0% (13.4% before, the same hour), and the in-process check runs it since.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "passive")
sys.path.insert(0, os.getcwd())

import pandas as pd  # noqa: E402

import runtime  # noqa: E402
from core.costs import StaticCostModel, kernel_speedup  # noqa: E402
from runtime.calibrate_kernels import (FIT_SIZES, _fastest_kernels,  # noqa: E402
                                       _interleaved_traced_steps, _rates_only)


def main():
    if os.environ.get("OPENBLAS_NUM_THREADS"):
        sys.exit("run without OPENBLAS_NUM_THREADS: the kernel then splits big products")
    device = runtime.calibrate().devices[0]
    bare, model = _rates_only(device), StaticCostModel()
    config = runtime.SessionConfig(inter_op_parallelism_threads=1,
                                   intra_op_parallelism_threads=device.intra_op_threads,
                                   use_per_session_threads=True)
    rows = []
    for n, (graph, traces) in _interleaved_traced_steps(FIT_SIZES, 20, config).items():
        cores = {r.op: r.cores for trace in traces for r in trace.ops}
        for name, seconds in _fastest_kernels(traces).items():
            op = graph.get_operation_by_name(name)
            if op.type != "MatMul":
                continue
            specs = [t.spec for t in op.inputs], [t.spec for t in op.outputs]
            predicted = model.op_time(op, bare)
            rows.append({"size": n, "inputs": [tuple(t.shape) for t in op.inputs],
                         "transpose_a": bool(op.attrs.get("transpose_a")),
                         "speedup": kernel_speedup(op.op_def, *specs, op.attrs, device),
                         "cores": cores[name], "kernel_us": seconds * 1e6,
                         "model_us": predicted * 1e6, "ratio": seconds / predicted})
    print(f"intra-op speed-up {device.intra_op_speedup:.2f}")
    print(pd.DataFrame(rows).round(3).to_string())


if __name__ == "__main__":
    main()
