"""Run from the project root: `python docs/probes/tf_parts_probe.py [repeats]`.

Issue 20 §3 probe: what does each task a step involves add to a step of TensorFlow's
runtime, and do the tasks' parts start one after another (as the simulator's
``part_overhead`` makes them: the master starts each remote part in turn) or at once?
On the cluster of ``sim_vs_real`` (1 ps and 2 workers, TensorFlow's servers on this
host) a step runs a chain of ``L`` tiny ops on the master and on each of ``k`` other
tasks (k = 0, 1, 2); three kinds of step:

- ``ops``: the chains' last ops are fetched as targets (nothing crosses);
- ``fetch``: their last tensors are fetched (each remote one goes to the client), as
  :func:`runtime.calibrate.measure_step_overheads` measures ``part_overhead``;
- ``cross``: each remote chain's last tensor is read by an op on the master, whose
  output is the only tensor fetched (a part feeding the master, as in a workload).

All graphs take turns step by step (the fastest of ``repeats`` steps each).

What it showed (2026-11-27 23:01 UTC, this 2-core machine, under the timing lock;
fastest steps, ms, with k = 0, 1, 2 other tasks):

    calibrated (tensors fetched): step_overhead 0.471, part_overhead 0.608
    chains of 1:   ops 0.412 0.752 0.923   fetch 0.421 0.983 1.404   cross 0.457 0.958 1.325
    chains of 20:  ops 0.395 0.685 0.875   fetch 0.434 0.871 1.276   cross 0.425 0.885 1.157

A task whose ops are only run adds about a quarter to a third of a millisecond; one
whose tensor the client fetches, about twice that (the fetch is a tensor sent to the
client, which a training step, fetching its train op, does not have).  Chains of
twenty ops change nothing: the part's start costs, not its ops.  Kept:
TensorFlow's calibration measures ``step_overhead`` and ``part_overhead`` with the ops
fetched as targets (:func:`experiments.tf_calibrate._with_op_fetch_overheads`).

Seen in traced steps of mlp under the round-robin-variables placement (sim_vs_real's
workload, 2026-11-27 23:10, under the timing lock): every task's part starts within
0.1 ms of the master's (niced, on a loaded machine, a millisecond apart), so the
simulator's parts, started one after another ``part_overhead`` apart
(:func:`sim.engine.step_start_times`), start late; but the five variables read from
the ps and worker 1 at the step's start, made at 0.15 ms, reached worker 0 at 1.4 to
1.7 ms, and the five updates sent back while worker 0's kernels ran took 0.3 to 0.9 ms
each, against the 0.16 ms calibrated.  The late starts stand in for slow crossings
there; starting the parts at once alone would predict those rows shorter still (the
round-robin-variables rows were 1 to 47% short in three runs, 22:52 to 23:08).  What
makes those crossings slow is not settled: the reads at the step's start were slow
while worker 0 had almost no kernel to run (a cost of a step's first crossings
between two tasks?), the updates while its kernels held the cores (a crossing's CPU
work waiting for them?).
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
from runtime.calibrate import _interleaved_step_times, measure_step_overheads  # noqa: E402

W0 = "/job:worker/replica:0/task:0/device:CPU:0"
OTHERS = ["/job:ps/replica:0/task:0/device:CPU:0", "/job:worker/replica:0/task:1/device:CPU:0"]


def build(k: int, length: int, kind: str):
    def make():
        g = ctf.Graph()
        fetches = []
        with g.as_default():
            lasts = []
            for t, dev in enumerate([W0] + OTHERS[:k]):
                with ctf.device(dev):
                    x = ctf.constant(np.float32(t), name=f"c{t}")
                    for i in range(length):
                        x = ctf.identity(x, name=f"t{t}_{i}")
                lasts.append(x)
            if kind == "ops":
                fetches = [x.op for x in lasts]
            elif kind == "fetch":
                fetches = list(lasts)
            else:
                with ctf.device(W0):
                    fetches = [ctf.add_n(lasts, name="sum") if len(lasts) > 1
                               else ctf.identity(lasts[0], name="sum")]
        return g, fetches
    return make


repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 60
base = this_host_cluster()
with TFLocalCluster(base, env=server_env(1, "passive")) as servers:
    step, part, samples = measure_step_overheads(servers, open_session=tensorflow_session)
    print(f"calibrated: step_overhead {step * 1e3:.3f} ms, part_overhead {part * 1e3:.3f} ms, "
          f"samples {({k: round(v * 1e3, 3) for k, v in samples.items()})} (ms)")
    for length in (1, 20):
        builds = {(kind, k): build(k, length, kind) for kind in ("ops", "fetch", "cross")
                  for k in (0, 1, 2)}
        times = _interleaved_step_times(servers, builds, ("worker", 0), repeats,
                                        open_session=tensorflow_session)
        print(f"\nchains of {length}: fastest step (ms) with k other tasks: k=0, 1, 2")
        for kind in ("ops", "fetch", "cross"):
            row = [min(times[(kind, k)]) * 1e3 for k in (0, 1, 2)]
            med = [float(np.median(times[(kind, k)])) * 1e3 for k in (0, 1, 2)]
            print(f"  {kind:6} " + "  ".join(f"{v:6.3f}" for v in row)
                  + "   (medians " + "  ".join(f"{v:6.3f}" for v in med) + ")")
