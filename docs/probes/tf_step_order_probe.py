"""Run from the project root:
`python docs/probes/tf_step_order_probe.py CLUSTER.json WORKLOAD [repeats]`.

Issue 20 §3 probe: does a step of TensorFlow's runtime take longer depending on the step
run just before it?  ``sim_vs_real`` times the placements of a workload side by side,
in rounds with a rotating order (:func:`experiments.tf_backend.measure_on_tensorflow`),
so every step it times follows another placement's step, while the simulator predicts
a step of a training loop, which follows a step of its own graph.  After a step that
involves several tasks, TensorFlow's master cleans the step up on each of them
asynchronously (``CleanupPartitionsAsync`` in ``master_session.cc``: a
``CleanupGraph`` RPC to each worker after the client has its answer), which may still
run during the next step.  On the cluster of ``sim_vs_real`` (1 ps and 2 workers,
TensorFlow's servers on this host; the calibrated cluster ``CLUSTER.json`` gives the
thread counts and places the workload), the workload's simple and
round-robin-variables placements are each timed right after a step of: itself, each
of the simple, round-robin and round-robin-variables placements, or a 10 ms pause
(every case taking turns, in a shuffled order each round; fastest and median of
``repeats``).

What it showed (2026-11-28 06:42-06:43 UTC, this 2-core machine, under the timing
lock, 30 rounds, the cluster of a quick TensorFlow calibration at 06:30,
``/work/scratch/tf8/e1.cluster.json``; fastest step, ms):

                          after itself   simple   round_robin   round_robin_vars   pause
    mlp simple            1.12           1.06     1.49          1.45               1.96
    rnn simple            0.82           0.84     1.45          1.23               1.75
    transformer simple    1.41           1.41     1.66          1.66               2.37
    mlp rrv               4.04           4.62     4.83          4.36               5.44
    rnn rrv               3.75           3.91     4.14          3.90               4.82
    transformer rrv       7.43           7.79     7.73          8.08               8.63

(A scratch copy at 06:32-06:40 gave the same pattern in four runs.)  A one-task step
takes 20 to 75% longer right after a step over three tasks than after its own, and a
round-robin-variables step 4 to 20% longer after another placement's step; after a
10 ms pause (every process idle) every step is slowest.  ``sim_vs_real`` times each
placement right after another one's (its rounds rotate), so its measured steps carry
this: most the single-task rows, least the round-robin-variables rows, the reverse
of the rows' errors (the round-robin-variables rows the furthest under their
measurements): the order of the steps does not explain those rows' shortfall, though
it moves every row's measurement by more than the 5% the issue aims at.  Not changed
here: timing each placement after a step of its own would also need the calibration's
step figures taken the same way (they are the fastest steps of tiny graphs taking
turns, :func:`runtime.calibrate_distributed._interleaved_step_times`).

Since changed (2026-11-28 08:30): the step overheads are the fastest of a burst of
steps of one tiny graph (:func:`runtime.calibrate_distributed.measure_step_overheads`
through ``_step_time``), each after a step of its own; only the crossing figures come
from tiny graphs taking turns, as differences of two graphs timed alike.  So the
experiments now time each placement's step after a step of its own
(:func:`experiments.backends.timed_rounds`), the step after another placement's kept
beside it.
"""

import contextlib
import os
import random
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.getcwd())

import numpy as np  # noqa: E402

from core.cluster import Cluster  # noqa: E402
from experiments.backends import server_env  # noqa: E402
from experiments.sim_vs_real import build_workload, placers_to_compare  # noqa: E402
from experiments.tf_backend import (TFLocalCluster, _tf_session, import_tensorflow,  # noqa: E402
                                    session_config)

PLACERS = ("simple", "round_robin", "round_robin_vars")
TIMED = ("simple", "round_robin_vars")
BEFORE = ("self", *PLACERS, "pause")


def main(cluster_json: str, workload: str, repeats: int = 30):
    cluster = Cluster.load(cluster_json)
    tf = import_tensorflow()
    w = build_workload(workload)
    placements = {n: p.place(w.graph, cluster)
                  for n, p in placers_to_compare(list(PLACERS), w).items()}
    fetches = [f.name for f in w.fetches]
    feeds = {t.name: v for t, v in w.feeds.items()} or None
    with TFLocalCluster(cluster, env=server_env(1, "passive")) as servers, \
            contextlib.ExitStack() as stack:
        config = session_config(tf, cluster, ("worker", 0))
        sessions = {n: stack.enter_context(_tf_session(tf, w, p, servers.target("worker", 0),
                                                       config))
                    for n, p in placements.items()}
        for sess in sessions.values():
            for _ in range(3):
                sess.run(fetches, feeds)
        times = time_after(lambda name: sessions[name].run(fetches, feeds), repeats)
    report(workload, times)


def time_after(step, repeats: int) -> dict:
    """Per ``(timed, before)`` of :data:`TIMED` x :data:`BEFORE`: the seconds of
    ``repeats`` steps of placement ``timed``, each right after a step of ``before`` (or
    a 10 ms pause), every case once a round, in a shuffled order; ``step(name)`` runs one
    step of a placement.  (``lc_step_order_probe.py`` uses it too.)"""
    times: dict = {}
    cases = [(t, b) for t in TIMED for b in BEFORE]
    rng = random.Random(0)
    for _ in range(repeats):
        rng.shuffle(cases)
        for timed, before in cases:
            if before == "pause":
                time.sleep(0.01)
            else:
                step(timed if before == "self" else before)
            t0 = time.perf_counter()
            step(timed)
            times.setdefault((timed, before), []).append(time.perf_counter() - t0)
    return times


def report(workload: str, times: dict) -> None:
    for (timed, before), ts in sorted(times.items()):
        print(f"{workload} {timed:17s} after {before:17s} fastest {min(ts) * 1e3:7.3f} ms  "
              f"median {np.median(ts) * 1e3:7.3f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], *(int(a) for a in sys.argv[3:4]))
