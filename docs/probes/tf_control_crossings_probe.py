"""Run from the project root:
`python docs/probes/tf_control_crossings_probe.py CLUSTER.json [repeats]`.

Issue 20 §3 probe: does a control edge between two of TensorFlow's server processes
cost what a tiny tensor crossing costs (TensorFlow sends it as a tensor: a ``_Send`` /
``_Recv`` pair of an empty one), where the simulator makes it a message that waits out
the route's latency and holds no link?  The round-robin-variables placements end their
step with such edges (each variable's update on the ps or worker 1, a control input of
the train op on worker 0).  On the cluster of ``sim_vs_real`` (1 ps and 2 workers,
TensorFlow's servers on this host; a tiny op on every task in every graph), for ``k``
scalars made on the ps:

- ``data<k>``: each read by an Identity on worker 0 (``k`` tensor crossings);
- ``ctrl<k>``: each a control input of a NoOp of its own on worker 0 (``k`` control
  edges);
- ``none<k>``: each read by an Identity on the ps (no crossing).

Per graph: the fastest and median step over ``repeats`` (the graphs taking turns),
what it adds to ``none<k>``, and the simulator's prediction on the calibrated cluster
``CLUSTER.json`` (e.g. a ``sim_vs_real_cluster.json`` of a run just before).

What it showed (2026-11-28 04:08 UTC, this 2-core machine, under the timing lock, 40
steps each, the cluster of a ``sim_vs_real --backend tensorflow`` run at 04:05; ms added
to ``none<k>``, fastest (median); predicted before control edges held cores):

    data1    0.242 (0.341)   predicted 0.002      ctrl1    0.050 (0.132)   predicted 0.002
    data8    0.569 (1.137)   predicted 0.373      ctrl8    0.576 (1.043)   predicted 0.008
    data32   1.319 (2.275)   predicted 2.048      ctrl32   1.856 (2.473)   predicted 0.032

Control edges cost TensorFlow what tiny tensors cost (8 of each: 0.58 ms and 0.57),
while the simulator made them free.  Kept: with ``RuntimeModel.crossing_cores`` a
control edge's message between two tasks of a host holds the cores a crossing holds
for the route's latency less its ``wait`` (:mod:`sim.crossing_cores`): predicted then
ctrl8 0.108 ms, ctrl32 0.983 ms (closer, still short: the messages hold no link, so
two at a time take a core each).  Paired on the measured rows of 16 ``sim_vs_real
--backend tensorflow`` runs (13 earlier, 3 at 04:00-04:08), against crossings of data
alone holding cores: median error of a run's rows lower in 7, higher in 4 (by 0.1 to
0.3 points), the median over runs 15.9% -> 15.7%, the round-robin-variables rows'
median bias -22.7% -> -22.4%: a small step the same way.
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.getcwd())

import numpy as np  # noqa: E402

import core as ctf  # noqa: E402
from core.cluster import Cluster  # noqa: E402
from core.graph import Graph  # noqa: E402
from experiments.backends import pinned_step, server_env  # noqa: E402
from experiments.tf_backend import TFLocalCluster  # noqa: E402
from experiments.tf_calibrate import tensorflow_session  # noqa: E402
from runtime.calibrate import _interleaved_step_times  # noqa: E402

PS = "/job:ps/replica:0/task:0/device:CPU:0"
W0 = "/job:worker/replica:0/task:0/device:CPU:0"
W1 = "/job:worker/replica:0/task:1/device:CPU:0"
KS = (1, 8, 32)


def build(kind: str, k: int):
    def make():
        g = Graph()
        fetches = []
        with g.as_default():
            for j, dev in enumerate((PS, W0, W1)):
                with ctf.device(dev):
                    fetches.append(ctf.identity(ctf.constant(np.float32(j), name=f"t{j}"),
                                                name=f"tiny{j}").op)
            for i in range(k):
                with ctf.device(PS):
                    x = ctf.identity(ctf.constant(np.float32(i), name=f"c{i}"), name=f"x{i}")
                if kind == "ctrl":
                    with ctf.device(W0), ctf.control_dependencies([x.op]):
                        fetches.append(ctf.no_op(name=f"after{i}"))
                else:
                    with ctf.device(W0 if kind == "data" else PS):
                        fetches.append(ctf.identity(x, name=f"y{i}").op)
        return g, fetches
    return make



def main(cluster_json: str, repeats: int = 40):
    cluster = Cluster.load(cluster_json)
    builds = {(kind, k): build(kind, k) for k in KS for kind in ("none", "data", "ctrl")}
    with TFLocalCluster(cluster, env=server_env(1, "passive")) as servers:
        times = _interleaved_step_times(servers, builds, ("worker", 0), repeats,
                                        open_session=tensorflow_session)
    print("graph    fastest (+ over none)   median (+)   predicted (+)")
    for (kind, k), ts in times.items():
        ref = times[("none", k)]
        p, pref = pinned_step(builds[(kind, k)], cluster), pinned_step(builds[("none", k)], cluster)
        print(f"{kind}{k:<3d} {min(ts) * 1e3:7.3f} (+{(min(ts) - min(ref)) * 1e3:6.3f})  "
              f"{np.median(ts) * 1e3:7.3f} (+{(np.median(ts) - np.median(ref)) * 1e3:6.3f})  "
              f"{p * 1e3:7.3f} (+{(p - pref) * 1e3:6.3f})", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:3]))
