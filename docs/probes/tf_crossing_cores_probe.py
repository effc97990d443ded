"""Run from the project root:
`python docs/probes/tf_crossing_cores_probe.py CLUSTER.json [repeats]`.

Issue 20 §3 probe: how many of the host's cores does a crossing between two of
TensorFlow's server processes keep busy while it crosses, and do the kernels of a third
process wait for them?  On the cluster of ``sim_vs_real`` (1 ps and 2 workers,
TensorFlow's servers on this host):

1. per size, :func:`experiments.tf_calibrate.measure_crossing_cores`: a chain of 8
   crossings between worker 1 and worker 0 (the master) against the same on worker 0
   alone, the servers' CPU seconds per crossing over the time each adds to a step;
2. ``mm``: a chain of ``[256, 256]`` MatMuls on worker 0; ``x``: a 4 MiB tensor
   passed back and forth between the ps and worker 1 (``HOPS`` crossings, none to or
   from worker 0); ``both``: the two in one step (nothing links them); each graph's
   fastest and median step over ``repeats`` (the graphs taking turns), against the
   simulator's prediction on the calibrated cluster ``CLUSTER.json`` (e.g. a
   ``sim_vs_real_cluster.json``) with the crossings holding no core
   (:data:`core.runtime_model.IDEAL`) and holding the measured cores
   (:data:`core.runtime_model.TENSORFLOW` with ``Link.busy_cores``).

If a crossing's work took no core from the kernels, ``both`` would take about the
longer of ``mm`` and ``x``; if they take turns, about their sum.

What it showed (2026-11-28 03:51 UTC, this 2-core machine, under the timing lock, 30
steps of each chain, 40 of each graph; the cluster of a ``sim_vs_real --backend
tensorflow`` run at 01:57):

    size      cores   CPU per crossing   time each adds
    64 KiB    2.18    0.500 ms           0.229 ms
    1 MiB     1.90    1.375 ms           0.724 ms
    4 MiB     1.80    3.250 ms           1.807 ms

    graph   fastest  median   predicted: holding no core   holding 2 cores
    mm      4.862    5.744               3.894             3.894
    x       9.983   13.641               9.436             9.438
    both   10.923   17.093               9.475             9.872

A crossing keeps about two of the host's cores busy while it crosses, whatever its
size (its sender's and its receiver's threads at once), and the kernels of a third
process wait for them: ``both`` took 0.9 ms (fastest) to 3.5 ms (median) more than
``x`` alone, against 0.04 ms predicted with the crossings holding no core and 0.4 ms
holding two (the chain of MatMuls alone is predicted a fifth short too).  Kept:
``Link.busy_cores`` of the host's ``memcpy`` link, measured by
:func:`experiments.tf_calibrate.measure_crossing_cores` (4 MiB), and the runtime model
:data:`core.runtime_model.TENSORFLOW`, whose crossings hold that many cores while on
the link, queued with the kernels (``RuntimeModel.crossing_cores``).

Paired (each run's measured steps predicted by both models on the run's own calibrated
cluster; median absolute error of its 16 rows as ``sim_vs_real`` counts them, worst
row): on 13 earlier runs of ``python -m experiments.sim_vs_real --backend tensorflow
--workloads mlp rnn transformer mixed_random --repeats 31 --calibrate quick
--calibrate-once --no-loop`` (tf-4's, tf-5's, tf-6's, 2026-11-27/28, with 2 cores
held), the median over runs 18.8% -> 16.4%, worst 42.9% -> 38.4%, lower in 8 runs,
higher in 3 (two of them runs whose rows were already predicted long); on 3 runs with
this calibration (04:00-04:08, ``busy_cores`` 1.5 to 2 measured, so 2 held) 16.2% ->
13.7%, 17.0% -> 14.6%, 20.4% -> 19.1%, worst 41.2/59.6/44.6% -> 37.8/55.7/40.4%,
ranking 20/20 in all.  Every row it moves is a distributed placement's, and all but
one moved toward its measurement; the round-robin-variables rows stay 20-29% short.
With control edges holding cores too (``docs/probes/tf_control_crossings_probe.py``),
after merging main, over all 19 runs (3 more with this calibration, 04:16-04:23):
median error over runs 18.4% -> 15.7%, the runs' worst rows (median) 46.5% -> 40.4%,
lower in 11 runs, higher in 5 (by 0.1 to 2.9 points; the runs themselves reported
13.8, 14.6, 19.1, 16.0, 25.2 and 13.2%: their measurements scattered, a mixed_random
simple step was predicted at 1.5 times its measurement in two); the median bias of
the round-robin rows -11.8% -> -7.9%, of the round-robin-variables rows -26.6% ->
-23.2%.
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.getcwd())

import numpy as np  # noqa: E402

import core as ctf  # noqa: E402
from core.cluster import Cluster  # noqa: E402
from core.graph import Graph  # noqa: E402
from core.runtime_model import IDEAL, TENSORFLOW  # noqa: E402
from experiments.backends import pinned_step, server_env  # noqa: E402
from experiments.tf_backend import TFLocalCluster  # noqa: E402
from experiments.tf_calibrate import (measure_crossing_cores, tensorflow_session,  # noqa: E402
                                      with_crossing_cores)
from runtime.calibrate import _interleaved_step_times  # noqa: E402

PS = "/job:ps/replica:0/task:0/device:CPU:0"
W0 = "/job:worker/replica:0/task:0/device:CPU:0"
W1 = "/job:worker/replica:0/task:1/device:CPU:0"
SIZES = (64 << 10, 1 << 20, 4 << 20)
HOPS = 4
MATMULS = 12


def build(kind: str):
    def make():
        g = Graph()
        fetches = []
        with g.as_default():
            for k, dev in enumerate((PS, W0, W1)):  # every task runs a part of every step
                with ctf.device(dev):
                    fetches.append(ctf.identity(ctf.constant(np.float32(k), name=f"t{k}"),
                                                name=f"tiny{k}").op)
            if kind in ("mm", "both"):
                with ctf.device(W0):
                    x = ctf.constant(np.full((256, 256), 0.01, np.float32), name="x")
                    for j in range(MATMULS):
                        x = ctf.matmul(x, x, name=f"mm{j}")
                    fetches.append(x.op)
            if kind in ("x", "both"):
                with ctf.device(PS):
                    y = ctf.constant(np.ones(1 << 20, np.float32), name="y")
                for j in range(HOPS):
                    with ctf.device(W1 if j % 2 == 0 else PS):
                        y = ctf.identity(y, name=f"hop{j}")
                fetches.append(y.op)
        return g, fetches
    return make



def main(cluster_json: str, repeats: int = 40):
    cluster = Cluster.load(cluster_json)
    with TFLocalCluster(cluster, env=server_env(1, "passive")) as servers:
        print("size, cores, CPU per crossing (ms), time each adds (ms)")
        measured = {}
        for nbytes in SIZES:
            measured[nbytes] = cores, cpu, seconds = measure_crossing_cores(
                servers, ("worker", 0), ("worker", 1), nbytes)
            print(f"{nbytes:8d} {cores:5.2f} {cpu * 1e3:7.3f} {seconds * 1e3:7.3f}", flush=True)
        builds = {k: build(k) for k in ("mm", "x", "both")}
        times = _interleaved_step_times(servers, builds, ("worker", 0), repeats,
                                        open_session=tensorflow_session)
    ideal = cluster.with_runtime_model(IDEAL)
    held = with_crossing_cores(cluster, measured[4 << 20][0]).with_runtime_model(TENSORFLOW)
    print("\ngraph  fastest  median   predicted: no cores  holding cores (ms)")
    for k, ts in times.items():
        print(f"{k:5s} {min(ts) * 1e3:7.3f} {np.median(ts) * 1e3:7.3f}   "
              f"{pinned_step(builds[k], ideal) * 1e3:7.3f}  "
              f"{pinned_step(builds[k], held) * 1e3:7.3f}",
              flush=True)


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:3]))
