"""Run from the project root: `python docs/probes/warm_duplicates_probe.py [copies]`.

Issue 20 §3 probe: how much cheaper is each op type's kernel when it runs right after
a kernel of its own type than where the kernel calibration measures it (the 8 x 8
calibration graph, dozens of other types between two of a type)?  The calibration
graph with every kernel op duplicated ``copies`` times on the same inputs
(:func:`runtime.calibrate_warmth.warm_calibration_graph`; the executor makes the
copies ready with the original, so on one inter-op thread they run back to back), 20
traced steps in bursts; per type, the median of each op's fastest kernel over the ops
that ran after another type ("cold", as the calibration measures them) and over those
that ran right after one of their own type ("warm").

What it showed (2026-11-28 10:28 and 10:29 UTC, this 2-core VM under the timing lock;
51 types with both):

    cold / warm, median over types    1.52 and 1.58  (quartiles 1.17 / 1.52 / 2.20)
    MatMul   4.18 -> 2.29 us (1.82)   Conv2D   12.3 -> 5.2 us (2.37)   Log  11.9 -> 1.8 us
    Softmax  5.58 -> 2.15 us (2.59)   FusedBatchNormV3  38.4 -> 19.0 us (2.02)
    Mul      2.79 -> 2.42 us (1.15)   Add  3.02 -> 2.62 us (1.15)   Reshape  1.03 -> 0.77 us

A kernel right after its own type runs a median 1.5 times faster than the calibration
graph's kernel of that type; the big-code types (the products, convolutions, batch
normalisation, softmax) twice as fast, the simple elementwise ones 10-20%.  (The copies
read the very same inputs, so their data is as warm as it gets.)

What it changed: the calibration now measures these warm costs
(``Device.warm_kernel_costs``, :mod:`runtime.calibrate_warmth`) and the simulator
takes each kernel's fixed cost from its cold to its warm figure by its reuse distance
(:mod:`sim.warm_kernels`).  Paired on the same measurements (the warm costs left out
against kept): one calibration and ten workloads measured on one and on two inter-op
threads (10:30), median |error| 10.4% -> 6.7% on one thread, 13.2% -> 8.9% on two
(rnn +13% -> +6%, inception +12% -> +7%, transformer +8% -> +2%; gnmt -19% -> -22%
on two threads); two sim_vs_inprocess runs (10:31, 10:46) 11.2% -> 7.8% and 9.3% ->
10.0% on their first calibrations, 7.4% -> 7.9% and 5.3% -> 5.4% on their second; two
sim_vs_real runs on our LocalCluster (10:32, 10:47) 6.0% -> 6.3% and 12.4% -> 11.3%
over their 13 distinct placements.  The small-op graphs come closer (rnn and
inception 4-7 points in every run); the big graphs on two threads, already predicted
too fast (the second thread's gain, ``inter_op_gain_probe.py``), go 1-3 points
further.  (Each pair: the run's saved calibration with and without its
``warm_kernel_costs``.)
"""

import os
import statistics
import sys

sys.path.insert(0, os.getcwd())
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import runtime  # noqa: E402
from runtime.calibrate_kernels import _fastest_kernels  # noqa: E402
from runtime.calibrate_warmth import warm_calibration_graph  # noqa: E402

SKIP = {"Const", "Variable", "NoOp", "Identity"}


def main(copies: int = 3, steps: int = 20):
    graph, init, fetches = warm_calibration_graph(8, copies)
    config = runtime.SessionConfig(inter_op_parallelism_threads=1, use_per_session_threads=True)
    traces = []
    with runtime.Session(graph=graph, config=config) as session:
        session.run(init)
        for _ in range(steps // 5):
            for _ in range(2):
                session.run(fetches)
            traces += [session.run(fetches, trace=True)[1] for _ in range(5)]
    fastest = _fastest_kernels(traces)
    kind = {op.name: op.type for op in graph.get_operations()}
    # what ran just before each op, in a step's order (the fastest step's)
    order = [r.op for r in sorted(min(traces, key=lambda t: t.step_time).ops,
                                  key=lambda r: r.start)]
    previous = {b: kind[a] for a, b in zip(order, order[1:])}
    cold, warm = {}, {}
    for name, t in fastest.items():
        if kind[name] in SKIP or name not in previous:
            continue
        same = previous[name] == kind[name]
        (warm if same else cold).setdefault(kind[name], []).append(t)
    rows = []
    for t in sorted(set(cold) & set(warm)):
        c, w = statistics.median(cold[t]), statistics.median(warm[t])
        rows.append((c / w, t, c, w, len(cold[t]), len(warm[t])))
    for ratio, t, c, w, nc, nw in sorted(rows, reverse=True):
        print(f"{t:28s} cold {c * 1e6:6.2f} us ({nc:2d})  warm {w * 1e6:6.2f} us ({nw:2d})  "
              f"cold / warm {ratio:.2f}")
    ratios = [r[0] for r in rows]
    print(f"{len(rows)} types: cold / warm median {statistics.median(ratios):.2f}, "
          f"quartiles {statistics.quantiles(ratios, n=4)}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
