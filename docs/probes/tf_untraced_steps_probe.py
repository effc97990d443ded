"""Run from the project root: `python docs/probes/tf_untraced_steps_probe.py [workload ...]`.

Issue 20 §3 probe: TensorFlow's runtime is calibrated from traced steps (``FULL_TRACE``
step stats: each op type's kernel times, and the median gap between kernels as
``op_overhead``, :func:`experiments.tf_calibrate.measure_tf_kernel_costs`), and its
one-task rows are predicted too slow (rnn simple +25% to +49% in every quiet run of
2026-11-28).  How far does an untraced step fall below what its own traced kernels and
gaps add up to, on the calibration graph and on the workloads?

In one in-process TensorFlow session per graph (one inter-op thread, so the ops run
one after another; the lab's session options), every op pinned to the CPU: 25 traced
and 25 untraced steps each, the graphs taking turns.  ``model`` is the sum of each
op's fastest traced kernel plus the ops' count times the median gap between kernels of
the fastest traced step (what the simulator adds up for a serial step); ``untraced``
the fastest untraced step less the fastest step of a graph of one NoOp; ``s`` their
ratio.

What it showed (2026-11-28, this 2-core VM under the timing lock; ms; 10:06 by the
script's first draft, 10:20 by this one):

    graph                         ops   untraced       model (kernels + ops x gap)          s
    calibration, 8 copies of 8x8  1704  6.692 / 6.974  7.142 (4.191 + 2.951) / 7.612   0.94 / 0.92
    calibration, 1 copy of 8x8     213  0.773 / 0.846  0.971 (0.585 + 0.386) / 0.923   0.80 / 0.92
    rnn                            316  0.442 / 0.550  0.880 (0.330 + 0.551) / 0.886   0.50 / 0.62
    transformer                    349  0.731 / 0.975  1.209 (0.583 + 0.626) / 1.254   0.60 / 0.78
    inception                      238  0.340 / 0.368  0.670 (0.253 + 0.417) / 0.676   0.51 / 0.54
    mlp                             81  0.792 / 0.815  0.897 (0.756 + 0.142) / 0.916   0.88 / 0.89

The gap is the same in every graph (1.73-1.89 us), and the calibration graph is
predicted within 6-20% from its own figures, but an untraced step of the small-op
workloads takes half what their traced kernels and gaps add up to: 0.35 us per op
beyond the kernels for rnn, 0.36 for inception, 0.42 for transformer, against 1.47
for the calibration graph (10:06) (untraced less the traced kernels, over the ops).  So the
traced figures carry a cost per op that the workloads' untraced steps do not pay, and
that the calibration graph's (more op types, each kernel less warm: see
``tf_warm_kernels_probe.py``) mostly does.

What the gap alone would change, on the three quiet TensorFlow runs of 09:10-09:14
(`python -m experiments.repredict RUN RUN RUN --what-if "cpu.op_overhead*=0.5"`, the
runs in results/sim_vs_real): median |error| 8.1% -> 8.4% (0.25: 8.6%; 0.7: 8.1%), the
worst row 49% -> 26%, 23 of 48 rows closer, every ranked pair still ranked.  rnn
simple comes in (+49% -> +25%), while the round-robin-variables rows, already 6-22%
too fast, go further; a cheaper dispatch alone does not carry.  Not changed.
"""

import contextlib
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.getcwd())

import core as ctf  # noqa: E402
from core.costs import dispatch_gaps  # noqa: E402
from core.graph import Graph  # noqa: E402
from experiments.sim_vs_real import build_workload  # noqa: E402
from experiments.tf_backend import session_config, trace_from_step_stats  # noqa: E402
from experiments.tf_calibrate import (_CONTAINERS, _pinned, _tf_graph,  # noqa: E402
                                      import_tensorflow)
from runtime.calibrate_kernels import (_fastest, _fastest_kernels,  # noqa: E402
                                       kernel_calibration_graph)

DEVICE = "/job:localhost/replica:0/task:0/device:CPU:0"
WORKLOADS = ["rnn", "transformer", "inception", "mlp"]


def main(names, steps: int = 25):
    tf = import_tensorflow()
    v1 = tf.compat.v1
    config = session_config(tf)
    config.inter_op_parallelism_threads = 1
    empty = Graph()
    with empty.as_default():
        nothing = ctf.no_op(name="nothing")
    builds = {"calibration x8": kernel_calibration_graph(8, copies=8),
              "calibration x1": kernel_calibration_graph(8, copies=1),
              "NoOp": (empty, None, [nothing])}
    for name in names:
        w = build_workload(name)
        builds[name] = (w.graph, w.init, list(w.fetch_ops))
    options = v1.RunOptions(trace_level=v1.RunOptions.FULL_TRACE)
    runs = {}
    with contextlib.ExitStack() as stack:
        for key, (graph, init, fetches) in builds.items():
            placement = _pinned(graph, DEVICE)
            session = stack.enter_context(v1.Session(
                "", graph=_tf_graph(tf, graph, placement, f"probe{next(_CONTAINERS)}"),
                config=config))
            if init is not None:
                session.run(init.name)
            names_ = [f.name for f in fetches]
            for _ in range(3):
                session.run(names_)
            runs[key] = [graph, placement, session, names_, [], float("inf")]
        for _ in range(steps):
            for run in runs.values():
                graph, placement, session, fetch_names = run[:4]
                meta = v1.RunMetadata()
                session.run(fetch_names, options=options, run_metadata=meta)
                run[4].append(trace_from_step_stats(meta.step_stats, graph, placement))
                t0 = time.perf_counter()
                session.run(fetch_names)
                run[5] = min(run[5], time.perf_counter() - t0)
    noop = runs.pop("NoOp")[5]
    for key, (graph, _, _, _, traces, untraced) in runs.items():
        kernels = _fastest_kernels(traces)
        gap = dispatch_gaps([_fastest(traces)], graph).get("CPU", 0.0)
        model = sum(kernels.values()) + len(kernels) * gap
        print(f"{key:16s} ops {len(kernels):5d}: untraced {(untraced - noop) * 1e3:7.3f} ms, "
              f"model {model * 1e3:7.3f} ms (kernels {sum(kernels.values()) * 1e3:7.3f} + "
              f"ops x gap {len(kernels) * gap * 1e3:7.3f}, gap {gap * 1e6:.2f} us); "
              f"s = {(untraced - noop) / model:.2f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or WORKLOADS)
