"""Run from the project root:
`python docs/probes/lc_step_order_probe.py CLUSTER.json WORKLOAD [repeats]`.

Issue 20 §3 probe: does a step of our runtime on a LocalCluster take longer depending on
the step run just before it?  The LocalCluster twin of ``tf_step_order_probe.py``.
``sim_vs_real`` times the placements of a workload side by side, in rounds with a
rotating order (:func:`experiments.backends.measure_placements`), so every step it
times follows another placement's step, while the simulator predicts a step of a
training loop, which follows a step of its own graph.  On the cluster of
``sim_vs_real`` (1 ps and 2 workers as server processes on this host; the calibrated
cluster ``CLUSTER.json`` places the workload), the workload's simple and
round-robin-variables placements are each timed right after a step of: itself, each of
the simple, round-robin and round-robin-variables placements, or a 10 ms pause (every
case taking turns, in a shuffled order each round; fastest and median of ``repeats``).

What it showed (2026-11-28 08:04 UTC, this 2-core machine under the timing lock, 20
rounds, the cluster of the 05:01 sim_vs_real run; fastest step, ms; "self" and, for the
simple placement, "simple" are both a step of its own):

                          self    simple   round_robin   round_robin_vars   pause
    mlp simple            2.18    1.98     2.15          2.27               2.23
    rnn simple            2.26    2.36     3.09          2.76               3.54
    transformer simple    4.31    3.93     3.58          4.23               5.24
    mlp rrv               4.27    4.63     4.59          4.01 (self)        5.15
    rnn rrv               4.99    5.43     5.05          6.21 (self)        6.14
    transformer rrv       11.34   7.47     8.20          9.52 (self)        11.31

The machine was noisy that morning (the hypervisor took 3-18% of a core in the runs
around it), and the two cases that are both "after itself" differ by up to 25%.  Within
that: after a 10 ms pause a step is slowest (14-57% over the faster "after itself"
case), and rnn's one-task step ran 17-37% longer right after a step over three tasks,
as on TensorFlow's servers; the other rows do not separate from the noise.  So
:func:`experiments.backends.timed_rounds` times each placement's step right after a
step of its own, and keeps the step after another placement's as ``after_other``.
"""

import contextlib
import os
import sys

sys.path.insert(0, os.getcwd())

import runtime  # noqa: E402
from core.cluster import Cluster  # noqa: E402
from experiments.backends import prepared_session, runtime_cluster_spec, server_env  # noqa: E402
from experiments.sim_vs_real import build_workload, placers_to_compare  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tf_step_order_probe import PLACERS, report, time_after  # noqa: E402


def main(cluster_json: str, workload: str, repeats: int = 30):
    cluster = Cluster.load(cluster_json)
    w = build_workload(workload)
    placements = {n: p.place(w.graph, cluster)
                  for n, p in placers_to_compare(list(PLACERS), w).items()}
    feeds = w.feeds or None
    with runtime.LocalCluster(runtime_cluster_spec(cluster), env=server_env()) as local, \
            contextlib.ExitStack() as stack:
        runs = {n: stack.enter_context(prepared_session(w, p, local, warmup=3))
                for n, p in placements.items()}
        times = time_after(lambda name: runs[name][0].run(runs[name][1], feed_dict=feeds),
                           repeats)
    report(workload, times)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], *(int(a) for a in sys.argv[3:4]))
