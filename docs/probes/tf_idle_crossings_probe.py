"""Run from the project root:
`python docs/probes/tf_idle_crossings_probe.py CLUSTER.json [repeats]`.

Issue 20 §3 probe: does a crossing between two of TensorFlow's server processes cost
more when its receiver has been idle a while (its threads parked) than along the
calibration's chain, where the two processes hand a tensor back and forth with no
pause (:func:`runtime.calibrate_distributed.measure_process_transfer`, the ``memcpy``
link's latency)?  In the round-robin-variables placements each crossing reaches a
process that has waited for it for a millisecond or more (the updates sent to the ps
at a step's end took 0.45 to 0.8 ms in traced steps of mlp, against 0.11 to 0.26 ms
predicted).  On the cluster of ``sim_vs_real`` (1 ps and 2 workers, TensorFlow's
servers on this host; a tiny op on every task in every graph), a scalar goes back and
forth ``HOPS`` times between the master (worker 0) and the ps; on the master, before
each send, ``d`` ``[64, 256] @ [256, 256]`` MatMuls that depend on it (the ps waits
that long, idle, for each crossing):

- ``gap<d>``: the round trips with ``d`` MatMuls on the master between them;
- ``local<d>``: the same with the ps's ops on the master (no crossing).

Per ``d``: what each crossing adds (``gap`` less ``local`` over ``2 * HOPS``, fastest
and median steps over ``repeats``, the graphs taking turns), and the simulator's
prediction of the same on the calibrated cluster ``CLUSTER.json``.  If the crossings
after a pause cost more than those with none (``d = 0``, the calibration's chain),
the receiver's idleness is a cost the calibration leaves out.  ``ping``: the
calibration's own chain (an Identity on each side, nothing between).

What it showed (2026-11-28 06:33 UTC, this 2-core machine, under the timing lock, 40
steps each; the cluster of a quick TensorFlow calibration at 06:30, latency 150 us,
``/work/scratch/tf8/e1.cluster.json``; us each crossing adds, fastest (median)):

    ping    212 (258)     gap0   174 (269)     gap1   241 (289)
    gap8    243 (286)     gap32  216 (331)     predicted 150 for every one

(06:33, 30 steps, gaps 0, 8, 32: 208 (277), 258 (286), 233 (346).)  The ps idle for
up to 2.6 ms before each crossing (``gap32``: 32 MatMuls of about 80 us on the master)
costs no more per crossing than with no pause: the receiver's idleness is not the
mechanism.  What the probe shows beside it: the crossings cost 170 to 260 us here,
against the 150 us the calibration minutes before had measured with the same chain;
:func:`runtime.calibrate_distributed.measure_process_transfer` itself, run five times
back to back on these servers at 06:34 (32, 12, 32, 12, 64 crossings), gave 199,
196, 203, 253 and 179 us: the calibrated latency scatters by a third from one run to
the next (150 to 209 us over the ``sim_vs_real`` runs of 04:00-06:30), which no count
of crossings in the chain steadies.
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
HOPS = 6
GAPS = ("ping", 0, 1, 8, 32)


def build(gap: int, crossing: bool):
    def make():
        g = Graph()
        with g.as_default():
            tiny = []
            for k, dev in enumerate((PS, W1)):
                with ctf.device(dev):
                    tiny.append(ctf.identity(ctf.constant(np.float32(k), name=f"t{k}"),
                                             name=f"tiny{k}").op)
            with ctf.device(W0):
                s = ctf.constant(np.float32(1.0), name="s0")
                a = ctf.constant(np.full((64, 256), 0.01, np.float32), name="a")
                w = ctf.constant(np.full((256, 256), 0.01, np.float32), name="w")
            for h in range(HOPS):
                with ctf.device(W0):
                    if gap != "ping":
                        x = ctf.multiply(a, s, name=f"scaled{h}")
                        for j in range(gap):
                            x = ctf.matmul(x, w, name=f"mm{h}_{j}")
                        s = ctf.reduce_sum(x, name=f"sum{h}")
                with ctf.device(PS if crossing else W0):
                    s = ctf.identity(s, name=f"there{h}")
                with ctf.device(W0):
                    s = ctf.identity(s, name=f"back{h}")
        return g, [s.op, *tiny]
    return make


def main(cluster_json: str, repeats: int = 40):
    cluster = Cluster.load(cluster_json)
    builds = {(d, c): build(d, c) for d in GAPS for c in (True, False)}
    with TFLocalCluster(cluster, env=server_env(1, "passive")) as servers:
        times = _interleaved_step_times(servers, builds, ("worker", 0), repeats,
                                        open_session=tensorflow_session)
    n = 2 * HOPS
    for d in GAPS:
        cross, local = times[(d, True)], times[(d, False)]
        fast = (min(cross) - min(local)) / n
        med = (np.median(cross) - np.median(local)) / n
        p = (pinned_step(build(d, True), cluster) - pinned_step(build(d, False), cluster)) / n
        print(f"gap{d}: local {min(local) * 1e3:6.3f} ms, each crossing adds {fast * 1e6:6.1f} us "
              f"fastest ({med * 1e6:6.1f} median), predicted {p * 1e6:6.1f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:3]))
