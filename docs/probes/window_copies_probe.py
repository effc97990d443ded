"""Run from the project root: `python docs/probes/window_copies_probe.py [workload ...]`.

Issue 20 §2 probe: what does a convolution's window gathering (im2col, and col2im in
Conv2DBackpropInput) cost beside its roofline?  Two parts:

1. The kernels' own gathering loop (``runtime.kernels.cpu_nn._im2col``) timed alone
   on a ``[1, 32, 32, C]`` input with a 3x3 window, per tap, for several ``C``.
2. Held-out convolutions: every Conv2D and backprop of the workloads (default
   inception_v3:batch=2, resnet50:batch=2), its fastest traced kernel (one inter-op
   thread, 20 steps) against the cost model's kernel time under calibrations made
   with the gathering priced (``Device.window_copy_costs``, the convolutions' factor
   fitted to the rest) and without it (the factor fitted to all of it), two of each,
   one after the other.  The calibration graph's only convolution is ``[1, n/4, n/4,
   16]`` with a 3x3 filter; the workloads' first convolutions have 3 input channels.

What it showed (2026-11-28 03:40-03:50 UTC, this 2-core VM, under the timing lock):

1. per tap 3.2 ns at C=3, 5.5 ns at C=64, 10.1 ns at C=128 (its elements vectorise:
   0.04-0.05 ns each; the loop's turn is the rest).  inception_v3's first three
   convolutions (3 channels; 2 x 37 x 37 pixels, 9 taps each) took 100-160 us against
   a roofline of 23-34 us: 70-80 us of each was gathering.
2. (``calibrate()`` four times; per-op median |error| over the workload's conv ops,
   and the error of their sum)

   | calibration | inception_v3:batch=2 (77 ops) | resnet50:batch=2 (50 ops) |
   | --- | --- | --- |
   | without, first | 0.42, sum -33% | 0.53, sum +13% |
   | with, first | 0.15, sum -10% | 0.23, sum +13% |
   | without, second | 0.26, sum -41% | 0.32, sum +0% |
   | with, second (in a slow spell: fixed costs 2x) | 0.87, sum +30% | 1.20, sum +80% |

   The probe itself at 03:49 (the first calibration, without, in a slow spell):

   | calibration | inception_v3:batch=2 | resnet50:batch=2 |
   | --- | --- | --- |
   | without, first (slow spell) | 0.80, sum -6% | 1.32, sum +65% |
   | with, first | 0.26, sum -3% | 0.45, sum +27% |
   | without, second | 0.32, sum -38% | 0.50, sum +8% |
   | with, second | 0.22, sum -5% | 0.44, sum +25% |

   Priced apart, the convolutions' factor fell from 2.2-2.5 to 1.5-1.9 (Conv2D) and
   from 2.6-2.7 to 1.9-2.0 (the backprops), and the per-op error fell in every pair
   of calibrations made in the machine's usual state.  resnet50's sum got worse: its
   small convolutions ([2, 8, 8, 8] and less: fixed costs) are predicted 3-7 us slow
   each, which the old factor's under-prediction of its first convolution (7x7, 3
   channels: 134 us measured, 107 predicted with the copies, about 30 without) had
   hidden.  Their fixed cost, measured on the calibration graph's one convolution
   (the first of its type in each step), is another mechanism.

Kept: ``Device.window_copy_costs`` from :func:`runtime.calibrate.
measure_window_copy_costs`, added by :func:`core.costs.window_copy_time`.
"""

from __future__ import annotations

import importlib
import os
import statistics
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as the experiments run
CONVS = ("Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter")


def gathering(channels=(1, 3, 16, 64, 128), side: int = 32, repeat: int = 7) -> None:
    import numpy as np

    from runtime.kernels.cpu_nn import _conv_geometry, _im2col
    for c in channels:
        x = np.random.default_rng(0).standard_normal((1, side, side, c)).astype("float32")
        geo = _conv_geometry(x.shape, (3, 3, c, 1), (1, 1, 1, 1), (1, 1, 1, 1), "SAME")
        cols = np.empty((side * side, 9 * c), np.float32)
        _im2col(x, 0, 1, geo, cols)
        best = float("inf")
        for _ in range(repeat):
            t0 = time.perf_counter()
            _im2col(x, 0, 1, geo, cols)
            best = min(best, time.perf_counter() - t0)
        print(f"C={c:4d}: {best / (side * side * 9) * 1e9:6.2f} ns per tap")


def held_out(names) -> None:
    import collections

    import runtime
    from core.costs import StaticCostModel
    from experiments.sim_vs_real import build_workload
    module = importlib.import_module("runtime.calibrate")
    measure = module.measure_window_copy_costs
    devices = {}
    try:
        for label in ("without", "with", "without#2", "with#2"):
            module.measure_window_copy_costs = (measure if label.startswith("with")
                                                and not label.startswith("without")
                                                else (lambda repeat=7: ()))
            devices[label] = [d for d in runtime.calibrate().devices if d.is_cpu][0]
    finally:
        module.measure_window_copy_costs = measure
    for label, d in devices.items():
        print(f"{label:10s} window_copy_costs {d.window_copy_costs}  Conv2D (fixed, factor) "
              f"{d.kernel_cost('Conv2D')}")
    model = StaticCostModel()
    config = runtime.SessionConfig(inter_op_parallelism_threads=1, use_per_session_threads=True)
    for name in names:
        w = build_workload(name)
        fastest = collections.defaultdict(lambda: float("inf"))
        with runtime.Session(graph=w.graph, config=config) as session:
            if w.init is not None:
                session.run(w.init)
            for _ in range(3):
                session.run(w.fetch_ops)
            for _ in range(20):
                for rec in session.run(w.fetch_ops, trace=True)[1].ops:
                    fastest[rec.op] = min(fastest[rec.op], rec.end - rec.start)
        ops = [w.graph.get_operation_by_name(n) for n in fastest]
        ops = [op for op in ops if op.type in CONVS and fastest[op.name] > 0]
        measured = sum(fastest[op.name] for op in ops)
        print(f"{name}: {len(ops)} conv ops, {measured * 1e3:.3f} ms measured")
        for label, d in devices.items():
            predicted = [model.op_time(op, d) - d.op_overhead for op in ops]
            errors = [abs(p - fastest[op.name]) / fastest[op.name] for p, op in zip(predicted, ops)]
            print(f"   {label:10s} per-op median |error| {statistics.median(errors):.2f}, "
                  f"sum {(sum(predicted) - measured) / measured:+.1%}")


if __name__ == "__main__":
    gathering()
    held_out(sys.argv[1:] or ["inception_v3:batch=2", "resnet50:batch=2"])
