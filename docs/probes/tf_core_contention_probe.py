"""Run from the project root: `python docs/probes/tf_core_contention_probe.py [repeats]`.

Issue 20 §3 probe: does a crossing between two of TensorFlow's servers on one host wait
for the cores that a kernel running there holds (its CPU work competing with the
kernels, as ``RuntimeModel.crossing_cores`` would make it)?  On the cluster of
``sim_vs_real`` (1 ps and 2 workers on this host), three graphs run at worker 0:

- ``cross``: ``N`` scalars made on the ps, all read by one AddN on worker 0;
- ``mm``: a chain of MatMuls on worker 0 (its intra-op pool: the host's cores);
- ``both``: the two at once (nothing links them), and ``both_local``: the same with
  the scalars made on worker 0 (no crossing: what the AddN adds beside the chain).

If the crossings' CPU work waits for the chain's cores, ``both`` takes about ``mm``
plus ``cross``'s CPU part; if it overlaps them, about ``max(mm, cross)``.  The graphs
take turns step by step (fastest and median of ``repeats`` steps each).

What it showed (2026-11-27, this 2-core machine, under the timing lock, 60 steps each;
ms, fastest / median):

    run 23:46-23:48:  cross 2.147 / 3.591   mm 2.121 / 2.994   both 4.056 / 5.826
                      both_local 2.145 / 3.037   local 0.548 / 0.861
    run 23:50:        cross 2.284 / 3.208   mm 2.205 / 2.681   both 3.599 / 5.142
                      both_local 2.266 / 2.854   local 0.511 / 0.771

``both`` took 80 to 95% of ``mm`` plus ``cross`` (fastest steps; 87 to 89% of the
medians' sum), not their maximum, while the same AddN of scalars made on worker 0
added nothing beside the chain (``both_local`` as ``mm``): the crossings' CPU work
and the MatMuls take turns on the host's cores.  The simulator with the calibrated cluster of a
``sim_vs_real --backend tensorflow`` run (23:41) predicted ``both`` 3.655 ms, the
maximum (``cross`` 3.623, ``mm`` 2.651: a crossing holds the host's ``memcpy`` link for
its CPU over the cores and needs no core); with each crossing's CPU work on one of
the host's cores, queued with the kernels (a ``RuntimeModel.crossing_cores`` tried on
branch tf-5 and not kept), 5.405 ms, 87% of its ``mm`` plus ``cross``, as measured.

Why it was not kept: on the workloads of ``sim_vs_real`` it made the median error
worse.  Side by side, ``sim_vs_real --backend tensorflow --workloads mlp rnn
transformer mixed_random --repeats 31 --calibrate quick --calibrate-once --no-loop``
gave 22.6% and 18.8% without it (23:30, 23:35) and 20.3% and 29.7% with it (23:41,
23:43), 20/20 pairs ranked in all four; and both models' predictions against the same
measured steps of each of six runs (two of tf-4's) gave a larger median error with it
in every one (0.226 against 0.250, 0.188/0.199, 0.187/0.203, 0.271/0.297,
0.144/0.216, 0.114/0.206).  The rows it changes are the round-robin placements', most
of them predicted short already (-43 to +10% over those six runs): with the
crossings' CPU work on two cores at once and only their bytes on the link, their
crossings run two at a time where the link ran one at a time for half their CPU, so
it predicts those steps shorter still (mlp's round-robin 9.58 against 8.79 ms;
measured 11.72).  Their shortfall is not the crossings alone: mlp's single-task row,
with no crossing at all, measured 1.11 to 1.79 ms over tf-4's and these runs, against
0.88 to 1.51 predicted (-48 to +5%).
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.getcwd())

import numpy as np  # noqa: E402

import core as ctf  # noqa: E402
from experiments.backends import server_env, this_host_cluster  # noqa: E402
from experiments.tf_backend import TFLocalCluster  # noqa: E402
from experiments.tf_calibrate import tensorflow_session  # noqa: E402
from runtime.calibrate import _interleaved_step_times  # noqa: E402

W0 = "/job:worker/replica:0/task:0/device:CPU:0"
PS = "/job:ps/replica:0/task:0/device:CPU:0"


def build(crossings: int, chain: int, n: int, maker: str):
    def make():
        g = ctf.Graph()
        targets = []
        with g.as_default():
            if crossings:
                reads = []
                for i in range(crossings):
                    with ctf.device(maker):
                        reads.append(ctf.identity(ctf.constant(np.float32(i), name=f"c{i}"),
                                                  name=f"x{i}"))
                with ctf.device(W0):
                    targets.append(ctf.add_n(reads, name="sum").op)
            if chain:
                with ctf.device(W0):
                    x = ctf.constant(np.full((n, n), 1.0 / n, np.float32), name="m")
                    for i in range(chain):
                        x = ctf.matmul(x, x, name=f"mm{i}")
                    targets.append(x.op)
        return g, targets
    return make


repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 60
N, CHAIN, SIZE = 32, 3, 384
builds = {"cross": build(N, 0, SIZE, PS), "mm": build(0, CHAIN, SIZE, PS),
          "both": build(N, CHAIN, SIZE, PS), "both_local": build(N, CHAIN, SIZE, W0),
          "local": build(N, 0, SIZE, W0)}
with TFLocalCluster(this_host_cluster(), env=server_env(1, "passive")) as servers:
    times = _interleaved_step_times(servers, builds, ("worker", 0), repeats,
                                    open_session=tensorflow_session)
for key, ts in times.items():
    print(f"{key:11} fastest {min(ts) * 1e3:7.3f} ms  median {float(np.median(ts)) * 1e3:7.3f} ms")
