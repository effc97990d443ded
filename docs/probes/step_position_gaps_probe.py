"""Run from the project root: `python docs/probes/step_position_gaps_probe.py [workload ...]`.

Issue 20 probe: gnmt's one-thread step misses its prediction by the work between its
kernels (``dispatch_by_kind_probe.py``: 0.8-1.1 us per op over rnn's), not by its
kernels.  Where in the step is that work spent, and what does it follow?

On one inter-op thread, each workload runs 30 traced steps; the probe takes the gap
between each kernel's end and the next kernel's start (the executor's work between
them), keeps the pairs of ops that follow each other in at least 20 of the steps, and
prints the median gap by tenth of the step (in start order) and by the bytes of the
op before the gap.  Three controls run on chains of tiny Muls (4 x 4 floats): the
chain as it is (each output dies when the next op ends), the chain with every output
kept alive to the step's end (one AddN of all of them), by fifth of the chain, and
chains whose ops also read an output made ``D`` ops earlier (:func:`report_ages`).

What it showed (2026-11-28 17:5x-18:1x UTC, this 2-core VM under the timing lock;
the calibration's ``op_overhead`` that hour 3.80-3.86 us):

    gnmt:batch=4, by tenth of the step (123 gaps each)
        embeddings, encoder forward      3.7, 4.1, 4.8, 4.9 us
        decoder forward                  4.7, 4.8
        gradients                        5.1, 4.9, 5.2, 4.9, 5.0, 5.5
        last gradients, Adam updates     7.3
    rnn: 4.0 us median over the step, flat

    by the bytes the op before the gap reads and writes (gnmt):
        up to 1 KiB 4.0 us, 1-4 KiB 5.2, 4-16 KiB 5.4, 64-256 KiB 5.6,
        256 KiB-1 MiB 11.7 (13 gaps)

    chains of 1000 Muls, by fifth:   outputs dying 4.1-4.2 us, kept alive 3.9-4.2 us
    (16 x 64 floats: 4.5-4.6 and 4.6-4.8 us)

    this script's own run (18:2x): gnmt by tenth 3.7, 4.6, 5.0, 4.7, 4.9, 5.0, 5.1,
    5.1, 5.2, 6.1 us; rnn 3.8-4.2; chains 4.4-4.7 (dying) and 4.3-4.4 (kept alive)

- The same kernels cost the same in gnmt as the model says: on one thread its 1234
  kernels summed 5.33 ms against the cost model's 5.34 ms (their fastest traced times;
  ``StaticCostModel.op_time`` less ``op_overhead``).  Its step, 10.9 ms against 9.85
  predicted, is short by the work between kernels: 4.5 us per op against 3.7.
- That work grows through the step, from the calibration's figure at its start to
  5 us in the backward pass and 7 us at its end.  rnn's step, a tenth as long and
  with a tenth of the traffic (4 MiB against 45 MiB per step), stays at 4.0 us.
- Not the number of live buffers (the kept-alive chain is flat), not the length of the
  graph (chains of 100 to 3000 ops cost 6.1 us per op each, kernel included, in a run
  of the same hour), not the garbage collector (``gc.freeze()`` or ``gc.disable()``
  around the steps: 10.25-10.66 ms against 10.25 as is), and not only after large
  kernels (ops of 1-4 KiB after ops of 1-4 KiB show it too).
- Part of it is the age of an op's inputs.  A third control, chains of 1200 Muls
  ``x_i = x_(i-1) * x_(i-D)`` (:func:`report_ages`; 18:3x, two runs, 4 x 4 and 16 x 64
  floats): D=1 (one input, just made) 4.33-4.36 us; D=2 (two inputs) 4.91-5.06 us;
  D=50 4.97-5.38 us; D=400 5.40-5.84 us.  A second input costs about 0.6 us, and an
  input made 400 ops earlier about 0.5 us more than one made just before: the
  executor's objects of an old tensor are out of the caches.  gnmt's backward pass
  reads forward activations made hundreds of ops earlier, and its optimizer reads
  variables and gradients; rnn's step is 316 ops long.  That is about half of the
  +1 us; the model charges every op the same ``op_overhead`` whatever its inputs.
- Next: a dispatch cost by the reuse distance of an op's inputs (the traffic since
  each was made, as a cache's residency would be modelled for the kernels' data too),
  calibrated on chains like these, and the rest of the backward pass's extra.
"""

from __future__ import annotations

import collections
import os
import statistics
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "passive")
sys.path.insert(0, os.getcwd())

import numpy as np  # noqa: E402

import core as tf  # noqa: E402
import runtime  # noqa: E402

CONFIG = runtime.SessionConfig(inter_op_parallelism_threads=1, use_per_session_threads=True)
STEPS = 30
SIZE_EDGES_KIB = (1, 4, 16, 64, 256, 1024)


def traced_gaps(graph, fetches, init=None, feeds=None) -> dict:
    """``{(op before, op after): [gap seconds, ...]}`` over :data:`STEPS` traced steps,
    and each pair's position (its index in start order, last seen)."""
    gaps, where = collections.defaultdict(list), {}
    with runtime.Session(graph=graph, config=CONFIG) as s:
        if init is not None:
            s.run(init)
        for _ in range(5):
            s.run(fetches, feed_dict=feeds or None)
        for _ in range(STEPS):
            _, trace = s.run(fetches, feed_dict=feeds or None, trace=True)
            records = sorted(trace.ops, key=lambda r: r.start)
            for k, (a, b) in enumerate(zip(records, records[1:])):
                gaps[(a.op, b.op)].append(b.start - a.end)
                where[(a.op, b.op)] = k
    return {pair: (statistics.median(v), where[pair]) for pair, v in gaps.items()
            if len(v) >= 2 * STEPS // 3}


def op_bytes(op) -> int:
    return sum(int(np.prod(t.shape)) * 4 for t in (*op.inputs, *op.outputs)
               if None not in t.shape)


def report_workload(name: str) -> None:
    from experiments.sim_vs_real import build_workload
    w = build_workload(name)
    pairs = traced_gaps(w.graph, w.fetch_ops, w.init, w.feeds)
    ordered = sorted(pairs.items(), key=lambda item: item[1][1])
    tenths = [[] for _ in range(10)]
    for k, (_, (gap, _)) in enumerate(ordered):
        tenths[k * 10 // len(ordered)].append(gap)
    print(f"{name}: {len(ordered)} gaps, median {statistics.median(g for _, (g, _) in ordered) * 1e6:.2f} us")
    print("  by tenth of the step:", [round(statistics.median(t) * 1e6, 2) for t in tenths if t])
    by_size = collections.defaultdict(list)
    for (before, _), (gap, _) in ordered:
        kib = op_bytes(w.graph.get_operation_by_name(before)) / 1024
        edge = next((e for e in SIZE_EDGES_KIB if kib <= e), "more")
        by_size[edge].append(gap)
    print("  by KiB of the op before (at most):",
          {k: (len(v), round(statistics.median(v) * 1e6, 2)) for k, v in by_size.items()})


def report_chain(keep: bool, n: int = 1000) -> None:
    g = tf.Graph()
    with g.as_default():
        c = tf.constant(np.ones((4, 4), np.float32))
        x = tf.constant(np.ones((4, 4), np.float32))
        chain = []
        for i in range(n):
            x = tf.multiply(x, c, name=f"m{i}")
            chain.append(x)
        out = tf.add_n(chain) if keep else x
    pairs = traced_gaps(g, out)
    ordered = [gap for _, (gap, _) in sorted(pairs.items(), key=lambda item: item[1][1])]
    fifths = [ordered[k * len(ordered) // 5:(k + 1) * len(ordered) // 5] for k in range(5)]
    print(f"chain of {n} Muls, outputs {'kept alive' if keep else 'dying'}: by fifth",
          [round(statistics.median(f) * 1e6, 2) for f in fifths if f])


def report_ages(n: int = 1200) -> None:
    """Chains ``x_i = x_(i-1) * x_(i-D)``: the median gap by ``D``."""
    for distance in (1, 2, 50, 400):
        g = tf.Graph()
        with g.as_default():
            xs = [tf.constant(np.ones((4, 4), np.float32), name=f"c{j}") for j in range(distance)]
            for i in range(n):
                xs.append(tf.multiply(xs[-1], xs[-distance], name=f"m{i}"))
            out = tf.group(*xs[-distance:])
        pairs = traced_gaps(g, out)
        gaps = [gap for (a, _), (gap, _) in pairs.items() if a.startswith("m")]
        print(f"x_i = x_(i-1) * x_(i-{distance}): median gap {statistics.median(gaps) * 1e6:.2f} us")


if __name__ == "__main__":
    for name in sys.argv[1:] or ["gnmt:batch=4", "rnn"]:
        report_workload(name)
    report_chain(keep=False)
    report_chain(keep=True)
    report_ages()
