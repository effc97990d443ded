"""Run from the project root: `python docs/probes/tf_dispatch_probe.py`.

Issue 20 §3 probe: what does an op cost TensorFlow's executor in an untraced step, and
is it the traced gap between kernels that the calibration gives every op
(``op_overhead``)?  On one TensorFlow server (this host's cores as inter-op and
intra-op threads, rewrites off) a step runs ``k`` tiny ops (float32 scalars), either
``k`` independent Identity ops of one constant, each fetched (``fan``: the executor
may run them on every inter-op thread at once), the same joined by one fetched
``group`` (``joined``: one fetch), or a chain of ``k`` Identity ops (``chain``: one
after another); the steps take turns (:func:`runtime.calibrate._interleaved_step_times`,
the fastest of 40).  The slope of the step time over ``k`` is what one more op costs
a step, untraced, to set beside the ``op_overhead`` a TensorFlow calibration gives
every op (the median traced gap between kernels of its calibration graph,
:func:`experiments.tf_calibrate.measure_tf_kernel_costs`).

What it showed (2026-11-27, this 2-core machine, quiet): one more op costs an untraced
step 0.1 to 0.2 us along a chain, 0.1 to 0.4 us among independent ops joined by one
fetch (0.10 to 0.11 us as the slope up to 2000 ops in three calibrations; 0.1 to 0.4
up to 400), but 5.4 to 5.8 us when each is fetched (the cost is per fetched op, not per
op); the calibration's traced gap is 1.7 to 2.0 us per op (the step-stats collector's
own work is in it).  Calibrations with the untraced figure as ``op_overhead``
(``measure_tf_op_cost``, tried and not kept) did not predict the workloads better: on
two measurements, three calibrations each, the median error over sim_vs_real's rows
moved from 23-28% to 19-26% on one and from 23-26% to 22-30% on the other, and the
single-task steps of mlp, rnn and the transformer all came out 15 to 56% under the
measured ones: some per-step cost that grows with a real step is still missing, and
the traced gap stands in for part of it.  ``KS`` (environment, comma-separated) sets
the op counts.
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.getcwd())

import numpy as np  # noqa: E402

import core as ctf  # noqa: E402
from core.cluster import Cluster, ClusterSpec  # noqa: E402
from experiments.backends import server_env  # noqa: E402
from experiments.tf_backend import TFLocalCluster  # noqa: E402
from experiments.tf_calibrate import tensorflow_session  # noqa: E402
from runtime.calibrate import _fit_line, _interleaved_step_times  # noqa: E402

W0 = "/job:worker/replica:0/task:0/device:CPU:0"
KS = tuple(int(k) for k in os.environ.get("KS", "1,100,400,1000,2000").split(","))


def graph(k: int, shape: str):
    def make():
        g = ctf.Graph()
        with g.as_default(), ctf.device(W0):
            x = ctf.constant(np.float32(1.0), name="x")
            outs, t = [], x
            for i in range(k):
                if shape == "chain":
                    t = ctf.identity(t, name=f"i{i}")
                else:
                    outs.append(ctf.identity(x, name=f"i{i}").op)
            if shape == "chain":
                outs.append(t.op)
            elif shape == "joined":
                outs = [ctf.group(*outs, name="join")]
        return g, outs
    return make


cluster = Cluster.from_spec(ClusterSpec({"worker": ["127.0.0.1:0"]}), cpu_cores=2)
with TFLocalCluster(cluster, env=server_env(1, "passive")) as servers:
    shapes = ("fan", "joined", "chain")
    builds = {(k, shape): graph(k, shape) for k in KS for shape in shapes}
    times = _interleaved_step_times(servers, builds, ("worker", 0), 40,
                                    open_session=tensorflow_session)
    for shape in shapes:
        best = [min(times[(k, shape)]) for k in KS]
        intercept, slope = _fit_line(KS, best)
        print(f"{shape:6s} step (ms) per k {dict(zip(KS, [round(b * 1e3, 3) for b in best]))}: "
              f"{slope * 1e6:.2f} us per op, {intercept * 1e3:.3f} ms at none")
