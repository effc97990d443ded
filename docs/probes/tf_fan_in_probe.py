"""Run from the project root: `python docs/probes/tf_fan_in_probe.py CLUSTER.json [repeats]`.

Issue 20 §3 probe: do large tensors crossing into one TensorFlow server at once from
two other server processes take longer than the same crossings from one (as in
mixed_random's round-robin-variables placement, whose two 4 MiB variables from the ps
and from worker 1 reached worker 0 5.3 and 6.6 ms after they were made, against 1.8
and 3.7 ms predicted, worker 0 idle meanwhile)?  On the cluster of ``sim_vs_real``
(1 ps and 2 workers, TensorFlow's servers on this host) each step makes float32
tensors of ``SIZE`` bytes on the senders below, each summed on worker 0 (the master),
and runs a tiny op on every task (every graph involves the same three parts):

- ``none``: no crossing (each tensor summed on its maker);
- ``ps1`` / ``w1_1``: one tensor from the ps / from worker 1;
- ``ps2``: two from the ps (one sender);
- ``ps1w1``: one from the ps and one from worker 1 (two senders);
- ``w1ps``: one from worker 1 read on the ps and one from the ps read on worker 1
  (two crossings at once, no common end).

Per graph: the fastest and median step over ``repeats`` (the graphs taking turns),
what it adds to ``none``, the servers' CPU seconds per step beyond ``none``'s, and the
simulator's prediction on the calibrated cluster ``CLUSTER.json`` (e.g. a
``sim_vs_real_cluster.json`` of a run just before).

What it showed (2026-11-28 03:31 UTC, this 2-core machine, under the timing lock, 40
steps each, the cluster of a ``sim_vs_real --backend tensorflow`` run at 01:57 (before
``crossing_cores``); ms added to ``none``, fastest (median); the servers' CPU per step
added; predicted added):

    4 MiB   ps1    2.399 (3.493)   cpu 3.750   predicted 1.730
            w1_1   1.591 (2.973)   cpu 3.500   predicted 2.152
            ps2    4.110 (6.043)   cpu 8.500   predicted 3.803
            ps1w1  3.640 (5.439)   cpu 8.000   predicted 3.802
            w1ps   3.933 (6.107)   cpu 8.250   predicted 4.224
    1 MiB   ps1    0.243 (0.583)   cpu 1.750   predicted 0.326
            ps2    0.882 (1.263)   cpu 2.250   predicted 0.997
            ps1w1  0.700 (1.201)   cpu 2.500   predicted 0.995
    (none: 1.843 ms measured at 4 MiB, 1.360 predicted)

Two senders into one receiver are no slower than one sender sending two (ps1w1 3.6 ms
against ps2 4.1), and the simulator predicts both within 10%: the guess is wrong, and
what made mixed_random's two reads take 5.3 and 6.6 ms in that traced step is still
open.  What the probe did show:
a 4 MiB crossing costs the servers 3.5 to 4.25 ms of CPU for the 1.6 to 2.4 ms it adds
to a step, so while it crosses it keeps about both of the host's cores busy, cores
the simulator gave the kernels (``docs/probes/tf_crossing_cores_probe.py`` measures
it along a chain, and ``RuntimeModel.crossing_cores`` models it).
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
#: (maker, reader) of each tensor.
KINDS = {"none": [], "ps1": [(PS, W0)], "w1_1": [(W1, W0)], "ps2": [(PS, W0), (PS, W0)],
         "ps1w1": [(PS, W0), (W1, W0)], "w1ps": [(W1, PS), (PS, W1)]}
SIZES = [int(s) for s in os.environ.get("SIZES", f"{4 << 20},{1 << 20}").split(",")]


def build(kind: str, nbytes: int):
    def make():
        g = Graph()
        with g.as_default():
            fetches = []
            for k, dev in enumerate((PS, W0, W1)):
                with ctf.device(dev):
                    fetches.append(ctf.identity(ctf.constant(np.float32(k), name=f"t{k}"),
                                                name=f"tiny{k}").op)
            for i, (maker, reader) in enumerate(KINDS[kind] or [(PS, PS), (W1, W1)]):
                with ctf.device(maker):
                    v = ctf.identity(ctf.constant(np.ones(nbytes // 4, np.float32),
                                                  name=f"v{i}"), name=f"read{i}")
                with ctf.device(reader):
                    fetches.append(ctf.reduce_sum(v, name=f"sum{i}").op)
        return g, fetches
    return make



def cpu_per_step(servers, make, steps: int = 40) -> float:
    g, fetches = make()
    with tensorflow_session(servers.target("worker", 0), g, fetches) as run:
        for _ in range(3):
            run()
        before = servers.cpu_seconds()
        for _ in range(steps):
            run()
        return (servers.cpu_seconds() - before) / steps


def main(cluster_json: str, repeats: int = 40):
    cluster = Cluster.load(cluster_json)
    with TFLocalCluster(cluster, env=server_env(1, "passive")) as servers:
        for nbytes in SIZES:
            builds = {k: build(k, nbytes) for k in KINDS}
            times = _interleaved_step_times(servers, builds, ("worker", 0), repeats,
                                            open_session=tensorflow_session)
            cpu = {k: cpu_per_step(servers, make) for k, make in builds.items()}
            base, base_med = min(times["none"]), float(np.median(times["none"]))
            pbase = pinned_step(builds["none"], cluster)
            print(f"\n{nbytes} bytes: fastest (+ over none), median (+), CPU ms/step (+), "
                  "predicted (+)")
            for k, ts in times.items():
                p = pinned_step(builds[k], cluster)
                print(f"{k:6s} {min(ts) * 1e3:6.3f} (+{(min(ts) - base) * 1e3:6.3f})  "
                      f"{np.median(ts) * 1e3:6.3f} (+{(np.median(ts) - base_med) * 1e3:6.3f})  "
                      f"cpu {cpu[k] * 1e3:6.3f} (+{(cpu[k] - cpu['none']) * 1e3:6.3f})   "
                      f"predicted {p * 1e3:6.3f} (+{(p - pbase) * 1e3:6.3f})", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:3]))
