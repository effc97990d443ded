"""Run from the project root: `python docs/probes/kernel_warmth_probe.py [workload ...]`.

Issue 20 §3 probe: a small kernel's fixed cost depends on how much other code ran since
the last kernel of its type (its code and data leave the caches), and the calibration
measures each type where many other types run between two of its kernels.

1. Reuse distance, isolated: in the executor (one inter-op thread), 24 blocks of an
   8 x 8 MatMul followed by ``d`` ops of distinct kernel families (softmax, transpose,
   a reduction, concat and slice, bias, a convolution, the poolings, pad, log-softmax),
   or by ``d`` Tanh ops (one family); the MatMul's fastest traced kernel, median over
   the blocks.
2. The model it suggests, checked on the workloads' kernels: fixed cost =
   ``warm(type) * (1 + c * min(d, D) / D)``, ``d`` the distinct op types the thread ran
   since the type's last kernel (cyclically over the step), ``c`` and ``D`` fitted on
   the kernel calibration graph's own 8 x 8 kernels, ``warm`` the per-type intercept.
   Per workload, the calibration graph and the workload each run in steady bursts (two
   untimed, eight traced steps; three rounds, as ``calibrate()`` and
   ``in_process_steps`` time them); the sum of the workload's fastest kernels against
   the cost model's with each type's fixed cost the median of its calibration kernels
   ("now") or from the fitted model ("warmth"); roofline terms from a quick calibration.

What it showed (2026-11-28, this 2-core VM under the timing lock; the hypervisor took
3-18% of a core in the runs around it):

1. (08:05) MatMul median 3.47 us with nothing between, 3.40 / 3.68 / 4.31 / 4.94 / 5.67
   us with 1 / 2 / 4 / 8 / 11 families between, against 3.41 / 3.35 / 3.50 / 3.76 /
   3.81 us with as many Tanh ops: the other families' code, not the count of ops, makes
   it slower (+63% at 11 families).  In the calibration graph the 8 x 8 MatMuls took
   3.5-6.5 us, the first of the step the slowest; rnn's 16 x 64 MatMuls, 3.35-4.6 us.
2. (08:34 and 08:35, two runs) ``c`` 0.5 and 0.7, ``D`` 16 and 64; error of the
   workload's kernel sum, now -> warmth:

       rnn                  +22% -> +6%     +29% -> +12%
       inception             +7% -> -5%      +7% -> -3%
       transformer           -0% -> -9%      -1% -> -7%
       mlp                  +16% -> +16%    +11% -> +10%
       gnmt:batch=4         +27% -> +15%     +6% -> -8%
       resnet50:batch=2     +14% -> -4%      -8% -> -30%
       inception_v3:batch=2  +1% -> -14%    +76% -> +36%
       mixed_random:seed=2  +24% -> +24%    +11% -> +10%

   It brings rnn and inception, which the in-process check predicts 18-23% too slow
   run after run, most of the way in, and moves transformer, resnet50 and inception_v3
   (within 5% there on a quiet machine) too fast by as much.  The two runs' "now"
   columns differ by up to 75 points for one workload (the machine's speed flips within
   seconds), so a step-level comparison on that morning could not have told a few
   points apart.

3. (09:30, the machine quiet again: the hypervisor took under 0.003 cores) part 1: the
   MatMul 2.24 us with nothing between, 2.28 / 2.56 / 2.79 us with 4 / 8 / 11 families,
   2.16-2.21 us with Tanh ops; part 2 (``c`` 0.4-0.6, ``D`` 8-16), now -> warmth:
   rnn +25% -> +14%, inception +23% -> +14%, transformer +12% -> +6%, mlp -9% -> -9%,
   gnmt:batch=4 -2% -> -11%, resnet50:batch=2 +30% -> +9%, inception_v3:batch=2 +68%
   -> +36%, mixed_random:seed=2 +28% -> +28%.  (Both columns sit above the workloads'
   kernels: the fixed costs come from the calibration graph's own bursts and the
   factors from a quick calibration, not from ``calibrate()``.)

Not modelled yet: on the noisy morning the model traded the small-op graphs' error for
the others'; on the quiet machine it brought five of eight workloads closer and gnmt
(already predicted too fast at step level, for the interpreter lock) further.  A static
order's reuse distance is only an approximation of two inter-op threads' interleaving:
the model wants ``d`` counted per thread in the simulator, warm fixed costs and ``(c,
D)`` calibrated per device, and a paired step-level check.

4. (2026-11-28 10:10-10:25, a scratch change, not kept) That model in the simulator:
   ``d`` counted per device over the step's ops in the plan's order, cyclically (the
   variable reads handed on left out), each op paying ``warm * c * min(d, D) / D``
   more, in its dispatcher part too.
   - ``(c, D)`` chosen by hand, each type's warm cost its calibrated fixed cost over
     its median scale in the calibration graph; re-predicting the 248 saved
     in-process rows (two threads): median |error| 12.5% -> 11.9% (c 0.3, D 8), 11.7%
     (0.5, 8), 13.2% (0.5, 32), 13.0% (1.0, 16), never more than half the rows
     closer.  On two sets of the inter-op gain probe's measurements
     (``inter_op_gain_probe.py``: one calibration, ten workloads on one and two
     threads), c 1.0 and D 16 brought the one-thread median from 10.4% and 11.5% to
     7.7% and 7.0% (rnn +12% -> +5%, inception +11% -> +5%, resnet50 +9% -> 0%), and
     the two-thread one from 11.5% and 12.3% to 8.7% and 11.7%.
   - ``(c, D)`` fitted as the calibration would (each of the calibration graph's 8 x 8
     kernels a sample at its distance in that order; least squares on the logs over c
     0-2, D 2-64): c 0.1 and 0.2, D 8, in three calibrations.  Most of that graph's
     kernels sit past the cap (dozens of types between two of a type), so their
     spread says little about warm kernels; a sim_vs_inprocess run with the fitted
     model moved each prediction by 1.5% or less (median |error| 12.2% -> 12.1%).
   The warmth the workloads' kernels show (their sum 17-20% under the model on one
   thread) is larger than what the calibration graph's own spread can fit; a warm
   measurement per type is needed to calibrate it.  ``warm_duplicates_probe.py`` made
   it (each kernel op of the graph duplicated, the copies running back to back), and
   the model kept prices the distance from each type's cold to its warm fixed cost
   (``Device.warm_kernel_costs``, :mod:`sim.warm_kernels`).
"""

import math
import os
import statistics
import sys

sys.path.insert(0, os.getcwd())
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import numpy as np  # noqa: E402

import core as tf  # noqa: E402
import runtime  # noqa: E402
from core.costs import StaticCostModel  # noqa: E402
from experiments.sim_vs_real import build_workload  # noqa: E402
from runtime.calibrate_kernels import (_fastest_kernels, _less_side_costs,  # noqa: E402
                                       kernel_calibration_graph)

WORKLOADS = ["rnn", "inception", "transformer", "mlp", "gnmt:batch=4", "resnet50:batch=2",
             "inception_v3:batch=2", "mixed_random:seed=2"]


def _config():
    return runtime.SessionConfig(inter_op_parallelism_threads=1, use_per_session_threads=True)


def _family(j: int, x, c):
    k = j % 11
    if k == 0:
        return tf.nn.softmax(x)
    if k == 1:
        return tf.transpose(x)
    if k == 2:
        return x + tf.reduce_sum(x, axis=1, keepdims=True)
    if k == 3:
        return tf.slice(tf.concat([x, x], 1), [0, 0], [8, 8])
    if k == 4:
        return tf.nn.bias_add(x, c((8,)))
    if k == 5:
        return x - tf.reduce_mean(x, axis=0, keepdims=True)
    image = tf.reshape(x, [1, 8, 8, 1])
    if k == 6:
        return tf.reshape(tf.nn.conv2d(image, c((3, 3, 1, 1)), [1, 1, 1, 1], "SAME"), [8, 8])
    if k == 7:
        return tf.reshape(tf.nn.max_pool(image, [1, 3, 3, 1], [1, 1, 1, 1], "SAME"), [8, 8])
    if k == 8:
        return tf.reshape(tf.nn.avg_pool(image, [1, 3, 3, 1], [1, 1, 1, 1], "SAME"), [8, 8])
    if k == 9:
        return tf.slice(tf.pad(x, [[1, 1], [1, 1]]), [1, 1], [8, 8])
    return tf.nn.log_softmax(x)


def reuse_distance(blocks: int = 24, rounds: int = 15):
    """Part 1: the 8 x 8 MatMul's kernel with ``d`` other families (or Tanh ops) between."""
    rng = np.random.default_rng(0)

    def c(shape):
        return tf.constant((rng.standard_normal(shape) * 0.1).astype(np.float32))

    runs = {}
    for d in (0, 1, 2, 4, 8, 11):
        for families in ((True,) if d == 0 else (True, False)):
            g = tf.Graph()
            with g.as_default():
                w, x = c((8, 8)), c((8, 8))
                for i in range(blocks):
                    x = tf.matmul(x, w, name=f"mm{i}")
                    for j in range(d):
                        x = _family(j, x, c) if families else tf.tanh(x)
            session = runtime.Session(graph=g, config=_config())
            for _ in range(2):
                session.run(x.op)
            runs[(d, families)] = (session, x.op, [])
    for _ in range(rounds):
        for session, fetch, traces in runs.values():
            traces.append(session.run(fetch, trace=True)[1])
    for (d, families), (session, _, traces) in runs.items():
        mm = [t for name, t in _fastest_kernels(traces).items() if name.startswith("mm")]
        print(f"d={d:2d} {'families' if families else 'Tanh ops'}: MatMul median "
              f"{statistics.median(mm) * 1e6:5.2f} us", flush=True)
        session.close()


def distances(trace, graph) -> dict:
    """Per op of ``trace`` (one thread's step): the distinct op types run since the last
    op of its type, counted cyclically over the step."""
    kind = {op.name: op.type for op in graph.get_operations()}
    order = [r.op for r in sorted(trace.ops, key=lambda r: r.start)]
    seq = [kind[o] for o in order] * 2
    n, out, last = len(order), {}, {}
    for k, t in enumerate(seq):
        if t in last and k >= n:
            out[order[k - n]] = len(set(seq[last[t] + 1:k]))
        last[t] = k
    return out


def fit(samples, c: float, span: int):
    """``(squared log error, warm cost per type, scale(d))`` of the model on
    ``samples`` ((type, d, seconds) of the calibration graph's kernels)."""
    def scale(d):
        return 1 + c * min(d, span) / span
    warm = {}
    for t in {s[0] for s in samples}:
        values = [v / scale(d) for kind, d, v in samples if kind == t and v > 0]
        if values:
            warm[t] = statistics.median(values)
    err = sum(math.log(v / (warm[t] * scale(d))) ** 2 for t, d, v in samples if v > 0)
    return err, warm, scale


def _bursts(session, fetches, feeds, rounds: int = 3):
    traces = []
    for _ in range(rounds):
        for _ in range(2):
            session.run(fetches, feed_dict=feeds)
        traces += [session.run(fetches, feed_dict=feeds, trace=True)[1] for _ in range(8)]
    return traces


def workload_kernels(names):
    """Part 2: each workload's kernel sum, now and with the fitted model."""
    device = next(d for d in runtime.calibrate(quick=True).devices if d.is_cpu)
    graph, init, fetches = kernel_calibration_graph(8, device="/device:CPU:0")
    calib_session = runtime.Session(graph=graph, config=_config())
    calib_session.run(init)
    grid = [(c, span) for c in np.linspace(0, 2, 21) for span in (2, 4, 8, 16, 32, 64)]
    cost_model = StaticCostModel()
    for name in names:
        w = build_workload(name)
        session = runtime.Session(graph=w.graph, config=_config())
        if w.init is not None:
            session.run(w.init)
        calib_traces, traces = [], []
        for _ in range(3):
            calib_traces += _bursts(calib_session, fetches, None, 1)
            traces += _bursts(session, w.fetch_ops, w.feeds or None, 1)
        session.close()
        fastest, d = _fastest_kernels(calib_traces), distances(calib_traces[-1], graph)
        samples = [(graph.get_operation_by_name(o).type, d[o],
                    _less_side_costs(graph.get_operation_by_name(o), t, device))
                   for o, t in fastest.items() if o in d]
        _, c, span = min((fit(samples, c, span)[0], c, span) for c, span in grid)
        _, warm0, _ = fit(samples, 0.0, 8)
        _, warm, scale = fit(samples, c, span)
        fastest, d = _fastest_kernels(traces), distances(traces[-1], w.graph)
        measured = now = model = 0.0
        for o, t in fastest.items():
            op = w.graph.get_operation_by_name(o)
            rest = (cost_model.op_time(op, device) - device.op_overhead
                    - device.kernel_cost(op.type)[0])
            measured += t
            now += warm0.get(op.type, 0.0) + rest
            model += warm.get(op.type, 0.0) * scale(d.get(o, 10**6)) + rest
        print(f"{name:22s} kernels {measured * 1e3:7.3f} ms: "
              f"now {(now - measured) / measured:+.2f}, "
              f"warmth {(model - measured) / measured:+.2f} (c={c:.1f}, D={span})", flush=True)
    calib_session.close()


if __name__ == "__main__":
    reuse_distance()
    workload_kernels(sys.argv[1:] or WORKLOADS)
