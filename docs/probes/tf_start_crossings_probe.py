"""Run from the project root:
`python docs/probes/tf_start_crossings_probe.py CLUSTER.json [repeats]`.

Issue 20 §3 probe: what do the crossings at a step's start cost TensorFlow, the reads
of variables kept on other tasks (the round-robin-variables placements' first
crossings, which took 1.4 to 2.0 ms in traced steps against 0.14 ms calibrated)?  On
the cluster of ``sim_vs_real`` (1 ps and 2 workers, TensorFlow's servers on this host)
each step runs a tiny op on every task (so every graph involves the same three parts)
and on the master (worker 0) a chain of ``[64, 256] @ [256, 256]`` MatMuls whose first
reads the tensors below (an AddN of them, each reduced to a scalar first there):

- ``none``: the tensors made on the master (no crossing);
- ``ps1`` / ``ps5``: one / five tiny tensors made on the ps;
- ``ps1w1``: one tiny from the ps, one from worker 1;
- ``ps256k``: one 256 KiB tensor from the ps;
- ``mlp``: as mlp's round-robin-variables placement reads its variables: from the ps
  1 KiB, 16 KiB and 256 KiB, from worker 1 1 KiB and 256 KiB.

And at the step's end (against ``end_none``): the master's chain's last output read by
an Identity on each of these tasks, each a control input of the fetched NoOp on the
master (a training step's updates and its train op): ``end_ps1``, one on the ps;
``end_mlp``, three on the ps and two on worker 1.

Each graph's fastest and median step over ``repeats`` (the graphs taking turns), what
it adds to ``none``, and the simulator's prediction of the same on the calibrated
cluster ``CLUSTER.json`` (e.g. a ``sim_vs_real_cluster.json`` of a run just before).

What it showed (2026-11-28 01:28 UTC, this 2-core machine, under the timing lock, 60
steps each, against a quick calibration run minutes before; ms added to ``none``):

             measured fastest (median)   predicted   predicted, master's part first
    ps1      0.458 (0.594)               0.000       0.210
    ps5      0.724 (1.041)               0.107       0.470
    ps1w1    0.543 (0.687)               0.144       0.505
    ps256k   0.564 (0.661)               0.003       0.360
    mlp      1.163 (1.295)               0.461       0.824
    (none: 1.619 ms measured, 1.414 predicted)

Again at 01:56 (the cluster of a ``sim_vs_real`` run at 01:54), with the step's end:

             measured fastest (median)   predicted
    ps1      0.464 (0.371)               -0.002
    ps5      0.788 (0.743)               0.090
    ps1w1    0.480 (0.628)               0.150
    ps256k   0.530 (0.555)               0.003
    mlp      0.888 (1.104)               0.412
    end_ps1  0.409 (0.789)               0.294
    end_mlp  0.881 (1.413)               0.350

One tiny tensor from the ps read at the start of the master's chain adds half a
millisecond to the step, which the simulator hides: it starts the master's own part
last, after calling the others (:func:`sim.engine.step_start_times`), so the ps's
tensor is there before the master needs it.  In TensorFlow's traced steps the
master's part starts first (its own RunGraph is an in-process call), the others'
0.1 to 1.6 ms later.  Starting the master's part right after its ``step_overhead``
and the others one after another ``part_overhead`` apart (tried as a patched
``step_start_times``) predicts these graphs much closer (above, last column), yet
left the workloads' predictions as they were: median error over six earlier runs
14.4 -> 14.7, 11.4 -> 12.0, 22.1 -> 22.5, 22.6 -> 22.6, 19.7 -> 20.0, 20.1 -> 18.9%
(the round-robin-variables rows wait for worker 1's part, last in either order).  Not
kept.  What remains (about 0.25 ms per graph beyond even that order) is a crossing
at a part's start costing more than the calibrated latency: in traced steps of mlp's
round-robin-variables placement the variables read at the step's start took 1.4 to
2.0 ms from the ps's send to worker 0's receipt, with all three processes idle.
At the step's end one update and its control message back cost about the two
crossings' latency (0.41 ms measured, 0.29 predicted), but five at once 0.88 ms
against 0.35: each crossing of a small group costs about 0.1 ms more, where the
model holds the host for the CPU of one crossing in a large burst over the cores
(about 60 us).  Both ends of a step are where the round-robin-variables placements'
few crossings are, and those rows stay 15 to 40% under their measurements.

Predicted again with the runtime model ``tensorflow`` (crossings and control edges
holding the host's cores, ``docs/probes/tf_crossing_cores_probe.py``) on the cluster
of a ``sim_vs_real --backend tensorflow`` run at 04:21 (helper tf-7; ms added, against
``ideal`` on the same cluster): ps1 0.00 (0.00), ps5 0.14 (0.14), ps1w1 0.18 (0.18),
ps256k 0.01 (0.01), mlp 0.62 (0.50), end_ps1 0.36 (0.36), end_mlp 0.66 (0.44).  The
step's end comes closer to what was measured (0.88); the start does not move: the
reads at a part's start are still 0.3 to 0.5 ms short, the next mechanism to find.
A lead, tried only in the paired harness on the measured rows of 19 runs (tf-7,
04:28; not kept, not calibrated): ``step_start_times`` with the master's own part at
its ``step_overhead`` (an in-process call) and each remote part one route latency
after the master called it (the RunGraph RPC's message) moved the
round-robin-variables rows' median bias from -23.2% to -17.6% and the median error
over runs from 15.7% to 14.8% (lower in 13 runs, higher in 2); the remote parts
alone later (master last, as now) -19.3% and 15.3%; the master first alone -20.6%
and 15.5%.  But ``part_overhead`` must then be fitted to the same model (else the
tiny parts' steps count the latency twice): with it refitted (the calibration's
slope less 0.6 latencies, its k = 1, 2 other tasks), 15.4% and -20.6% (lower in 9
runs, higher in 5): too small a step to keep on this evidence.
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.getcwd())

import numpy as np  # noqa: E402

import core as ctf  # noqa: E402
import sim  # noqa: E402
from core.cluster import Cluster  # noqa: E402
from core.graph import Graph  # noqa: E402
from core.placement import Placement  # noqa: E402
from experiments.backends import server_env  # noqa: E402
from experiments.tf_backend import TFLocalCluster  # noqa: E402
from experiments.tf_calibrate import tensorflow_session  # noqa: E402
from runtime.calibrate import _interleaved_step_times  # noqa: E402

PS = "/job:ps/replica:0/task:0/device:CPU:0"
W0 = "/job:worker/replica:0/task:0/device:CPU:0"
W1 = "/job:worker/replica:0/task:1/device:CPU:0"
KINDS = {"none": [], "ps1": [(PS, 256)], "ps5": [(PS, 256)] * 5,
         "ps1w1": [(PS, 256), (W1, 256)], "ps256k": [(PS, 256 << 10)],
         "mlp": [(PS, 1 << 10), (PS, 16 << 10), (PS, 256 << 10), (W1, 1 << 10),
                 (W1, 256 << 10)]}
#: The step's end: the chain's last output read on these tasks (a scalar each), each
#: read a control input of a NoOp on the master, the fetched target (as a training
#: step's updates on the variables' tasks and its train op).
ENDS = {"end_none": [], "end_ps1": [PS], "end_mlp": [PS, PS, PS, W1, W1]}


def tiny_parts() -> list:
    """A tiny op on the ps and one on worker 1, in the current graph: every task runs
    a part of the step."""
    tiny = []
    for k, dev in enumerate((PS, W1)):
        with ctf.device(dev):
            tiny.append(ctf.identity(ctf.constant(np.float32(k), name=f"t{k}"),
                                     name=f"tiny{k}").op)
    return tiny


def build(kind: str):
    if kind in ENDS:
        return build_end(kind)

    def make():
        g = Graph()
        with g.as_default():
            tiny = tiny_parts()
            parts = []
            for i, (dev, nbytes) in enumerate(KINDS[kind] or [(W0, 256)]):
                with ctf.device(dev if KINDS[kind] else W0):
                    v = ctf.identity(ctf.constant(np.ones(nbytes // 4, np.float32), name=f"v{i}"),
                                     name=f"read{i}")
                with ctf.device(W0):
                    parts.append(ctf.reduce_sum(v, name=f"sum{i}"))
            with ctf.device(W0):
                s = ctf.add_n(parts, name="s") if len(parts) > 1 else parts[0]
                x = ctf.constant(np.full((64, 256), 0.01, np.float32), name="x")
                w = ctf.constant(np.full((256, 256), 0.01, np.float32), name="w")
                x = ctf.multiply(x, s, name="scaled")
                for j in range(4):
                    x = ctf.matmul(x, w, name=f"mm{j}")
        return g, [x.op, *tiny]
    return make


def build_end(kind: str):
    def make():
        g = Graph()
        with g.as_default():
            tiny = tiny_parts()
            with ctf.device(W0):
                x = ctf.constant(np.full((64, 256), 0.01, np.float32), name="x")
                w = ctf.constant(np.full((256, 256), 0.01, np.float32), name="w")
                for j in range(4):
                    x = ctf.matmul(x, w, name=f"mm{j}")
                u = ctf.reduce_sum(x, name="u")
            updates = []
            for i, dev in enumerate(ENDS[kind] or [W0]):
                with ctf.device(dev):
                    updates.append(ctf.identity(u, name=f"update{i}").op)
            with ctf.device(W0):
                with ctf.control_dependencies(updates):
                    step = ctf.no_op(name="step")
        return g, [step, *tiny]
    return make


def predict(cluster: Cluster, kind: str) -> float:
    g, fetches = build(kind)()
    placement = Placement({op.name: op.device for op in g.get_operations()})
    return sim.simulate(g, placement, cluster, fetches=fetches).step_time


def main(cluster_json: str, repeats: int = 60):
    cluster = Cluster.load(cluster_json)
    builds = {k: build(k) for k in (*KINDS, *ENDS)}
    with TFLocalCluster(cluster, env=server_env(1, "passive")) as servers:
        times = _interleaved_step_times(servers, builds, ("worker", 0), repeats,
                                        open_session=tensorflow_session)
    for k, ts in times.items():
        ref = "end_none" if k in ENDS else "none"
        base, base_med = min(times[ref]), float(np.median(times[ref]))
        pbase = predict(cluster, ref)
        p = predict(cluster, k)
        print(f"{k:7s} fastest {min(ts) * 1e3:6.3f} ms (+{(min(ts) - base) * 1e3:6.3f})  median "
              f"{np.median(ts) * 1e3:6.3f} (+{(np.median(ts) - base_med) * 1e3:6.3f})   "
              f"predicted {p * 1e3:6.3f} (+{(p - pbase) * 1e3:6.3f})", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:3]))
