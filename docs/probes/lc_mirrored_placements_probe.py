"""Run from the project root: `python docs/probes/lc_mirrored_placements_probe.py [blocks]`.

Issue 20 §3 probe: do two placements that differ only by swapping worker 0 and worker 1
take different steps on a :class:`runtime.LocalCluster`?  ``experiments.sim_vs_real``
predicts such mirrored placements of data_parallel as exact ties (the simulator's
tasks are alike), which counts as a ranking miss whenever their measured steps differ
by more than 10%.  But the two workers are not alike in the runtime: worker 0 is the
master (the client's session calls it; it runs the step's calls to the other tasks)
and holds the train op's fetch.

data_parallel's round-robin placement (on this host's uncalibrated cluster) and its
mirror (every ``task:0`` of the worker job made ``task:1`` and back) are timed side by
side (:func:`experiments.backends.measure_placements`, rotating order) in ``blocks``
blocks (default 4) of 31 rounds, each block on a fresh cluster; per block, each
placement's fastest and median step and their ratio.

What it showed (2026-11-28 03:39 and 03:40 UTC, this 2-core machine, under the timing
lock; 4 and 8 blocks): mirrored / round_robin, fastest steps:

    0.83 0.93 0.96 1.07 | 1.11 1.27 0.97 1.06 1.02 0.98 1.03 0.95   (median 1.02)
    medians of the steps:
    1.04 1.00 1.05 1.05 | 1.00 1.03 1.04 0.90 1.07 1.07 1.02 0.98   (median 1.035)

Two placements that differ only in which worker is which measure up to 27% apart in
their fastest steps, either way round, block to block: more than 10% in 3 of 12
blocks.  The medians hint that the mirror (the round-robin placement's worker 1 ops on
the master) is a few percent slower, well inside the spread.  Not modelled: there is
no asymmetry here for the simulator to predict, and a pair of mirrored placements
whose fastest steps differ by more than 10% in one run is noise (in sim_vs_real's run
of 02:19 UTC the two orders of such a pair disagreed between its measurement and its
remeasurement: 3.58 / 4.07 ms, then 3.72 / 3.01).
"""
import os
import statistics
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as experiments.sim_vs_real runs
os.environ.setdefault("OMP_WAIT_POLICY", "passive")
sys.path.insert(0, os.getcwd())

import runtime  # noqa: E402
from core.placement import Placement  # noqa: E402
from experiments.backends import (measure_placements, runtime_cluster_spec,  # noqa: E402
                                  server_env, this_host_cluster)
from experiments.sim_vs_real import PLACERS, build_workload, placers_to_compare  # noqa: E402

W0, W1 = "/job:worker/replica:0/task:0/", "/job:worker/replica:0/task:1/"


def mirrored(placement: Placement) -> Placement:
    """``placement`` with worker 0's and worker 1's ops swapped."""
    def swap(device: str) -> str:
        if device.startswith(W0):
            return W1 + device[len(W0):]
        if device.startswith(W1):
            return W0 + device[len(W1):]
        return device
    return Placement({op: swap(placement[op]) for op in placement})


def main():
    blocks = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    base = this_host_cluster()
    w = build_workload("data_parallel")
    placed = placers_to_compare(PLACERS, w)["round_robin"].place(w.graph, base)
    placements = {"round_robin": placed, "mirrored": mirrored(placed)}
    for block in range(blocks):
        w = build_workload("data_parallel")  # (a fresh graph: variables live per cluster)
        with runtime.LocalCluster(runtime_cluster_spec(base), env=server_env()) as local:
            got = measure_placements(w, placements, local, repeats=31, traced=0)
        a, b = got["round_robin"], got["mirrored"]
        print(f"block {block}: round_robin {a.step_time * 1e3:6.3f} ms (median "
              f"{statistics.median(a.steps) * 1e3:6.3f}), mirrored {b.step_time * 1e3:6.3f} "
              f"(median {statistics.median(b.steps) * 1e3:6.3f}); mirrored / round_robin "
              f"{b.step_time / a.step_time:5.3f} (medians "
              f"{statistics.median(b.steps) / statistics.median(a.steps):5.3f})", flush=True)


if __name__ == "__main__":
    main()
