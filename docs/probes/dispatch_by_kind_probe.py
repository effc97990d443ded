"""Run from the project root: `python docs/probes/dispatch_by_kind_probe.py [workload ...]`.

Issue 20 probe: what sets the executor's work between kernels per op?  The calibration
measures one figure, ``op_overhead``, on its own graph.  The simulator charges that
figure to every op, and gnmt stays under-predicted by 16% even on one inter-op thread.
On one inter-op thread a step is its kernels plus the work between them.  So per graph,
the probe takes the fastest untraced step, less an empty step, less the sum of each
op's fastest traced kernel, and divides by the ops that ran.  It does this for chains of
300 ops of one kind and for the registry's workloads.

What it showed (2026-11-28 16:3x UTC, this 2-core AMD EPYC VM; the calibration's
``op_overhead`` that hour was 3.7-3.9 us):

    chains of one kind                   work per op
    Mul by a Const                       3.43 us
    Mul by a scalar (a Const per op)     3.24
    Identity                             3.18
    Reshape                              3.24
    Slice of a Concat                    3.36
    AddN of three                        3.50
    three consumers per op               4.03

    workloads (scratch run of the same measure, the empty step left in)
    rnn 3.76, transformer 4.39, gnmt:batch=4 4.57, transformer:batch=2 4.57,
    resnet50:batch=2 4.49 us

This probe's own run a few minutes later, in a slower spell (empty step 18.8 us, not
15.7): chains 3.74-4.07 us, three consumers 4.23, rnn 4.27, gnmt:batch=4 5.36.

Chains cost 3.2-3.5 us per op, whatever the kind.  An op whose output has three
consumers costs about 0.6 us more.  The workloads spread from 3.8 to 4.6 us per op.
gnmt's extra 0.7-0.8 us over its 1234 ops run (0.8-1.1 us over rnn's, in both runs) is about 0.9 ms of the 1.9 ms its
one-thread prediction misses.  Its mean fan-in (1.65 inputs per op) is close to rnn's
(1.60), so the mean alone does not say which graphs pay more.  Next: the distribution
of consumers per op and of outputs per op (Split), against the work per op.
"""

from __future__ import annotations

import collections
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "passive")
sys.path.insert(0, os.getcwd())

import numpy as np  # noqa: E402

import core as tf  # noqa: E402
import runtime  # noqa: E402

OPS = 300
KINDS = ("mul_const", "mul_scalar", "identity", "reshape", "slice", "addn3", "fanout3")
CONFIG = runtime.SessionConfig(inter_op_parallelism_threads=1, use_per_session_threads=True)


def chain(kind: str):
    """``(graph, last op)``: about :data:`OPS` ops of ``kind`` on 4 x 4 tensors."""
    g = tf.Graph()
    with g.as_default():
        c = tf.constant(np.ones((4, 4), np.float32))
        h = tf.constant(np.ones((4, 4), np.float32))
        if kind == "fanout3":  # each value read by three ops
            for _ in range(OPS // 3):
                h = (h * 1.0 + h * 2.0) + h * 3.0
            return g, h.op
        for i in range(OPS):
            if kind == "mul_const":
                h = h * c
            elif kind == "mul_scalar":
                h = h * 1.5
            elif kind == "identity":
                h = tf.identity(h)
            elif kind == "reshape":
                h = tf.reshape(h, [16] if i % 2 == 0 else [4, 4])
            elif kind == "slice":
                h = tf.slice(tf.concat([h, h], 0), [0, 0], [4, 4]) if i % 2 == 0 else h * 1.0
            else:  # addn3
                h = tf.add_n([h, c, c])
    return g, h.op


def work_per_op(graph, fetch, feeds=None, init=None, empty: float = 0.0) -> tuple[int, float]:
    """``(ops run, seconds between kernels per op)`` of ``fetch``'s step on one inter-op
    thread, the untraced and traced steps taking turns."""
    with runtime.Session(graph=graph, config=CONFIG) as session:
        if init is not None:
            session.run(init)
        for _ in range(5):
            session.run(fetch, feed_dict=feeds)
        steps, kernels, ran = [], collections.defaultdict(lambda: float("inf")), 0
        for _ in range(8):
            for _ in range(5):
                t0 = time.perf_counter()
                session.run(fetch, feed_dict=feeds)
                steps.append(time.perf_counter() - t0)
            _, trace = session.run(fetch, feed_dict=feeds, trace=True)
            ran = len(trace.ops)
            for r in trace.ops:
                kernels[r.op] = min(kernels[r.op], r.end - r.start)
    return ran, (min(steps) - empty - sum(kernels.values())) / ran


def main(workloads):
    g = tf.Graph()
    with g.as_default():
        nothing = tf.no_op()
    _, empty = work_per_op(g, nothing)  # one op: the step's own cost
    print(f"empty step {empty * 1e6:.1f} us")
    for kind in KINDS:
        graph, fetch = chain(kind)
        ran, per_op = work_per_op(graph, fetch, empty=empty)
        print(f"{kind:10s} {ran:5d} ops run  {per_op * 1e6:5.2f} us per op")
    from experiments.sim_vs_real import build_workload
    for name in workloads:
        w = build_workload(name)
        ran, per_op = work_per_op(w.graph, w.fetch_ops, w.feeds or None, w.init, empty)
        print(f"{name:10s} {ran:5d} ops run  {per_op * 1e6:5.2f} us per op")


if __name__ == "__main__":
    main(sys.argv[1:] or ["rnn", "transformer", "gnmt:batch=4"])
