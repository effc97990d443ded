"""Run from the project root: `python docs/probes/tf_matmul_threads_probe.py [steps]`.

Issue 20 §3 probe: at which sizes does TensorFlow split a product over its intra-op
threads?  The kernel calibration graph (:func:`runtime.calibrate_kernels.
kernel_calibration_graph`) at :data:`runtime.calibrate_kernels.FIT_SIZES` runs on two
TensorFlow servers of this host as :func:`experiments.tf_calibrate.calibrate_tensorflow`
starts them: ``alone`` (one inter-op thread, two intra-op threads) and ``single`` (one
of each).  Per MatMul: its fastest kernel on each, the rate, and ``single / alone``
(about 2 when TensorFlow split it over the two threads, about 1 when not).  Then, the
same graph's products on servers with one, two and four inter-op threads (two intra-op
threads each): whether the other inter-op threads slow a product down (an idle thread
spinning for work on a two-core host).

What it showed (2026-11-28 01:09 UTC, this 2-core AMD EPYC machine, L2 1 MiB per core,
under the timing lock; TensorFlow 2.21 with oneDNN on; fastest kernels, single / alone):

    n=128  [128,128]@[128,128]   0.78, 0.95    [16,512]@[512,128]    1.33, [512,16]@.. 0.92
    n=256  [256,256]@[256,256]   0.99, 0.99    [32,1024]@[1024,256]  1.48, [1024,32]@.. 1.18
    n=512  [512,512]@[512,512]   1.99, 1.96    [64,2048]@[2048,512]  1.71, [2048,64]@.. 1.81
    single-thread rates 81 to 111 GFLOP/s; n=512 on two threads 189 to 217 GFLOP/s

The square products up to n=256 (operands and result 0.8 MB) ran at the single-thread
rate on two intra-op threads, those of n=512 (3.1 MB) at twice it, the batch-by-weights
products in between (1.2 MB: 1.48): TensorFlow's oneDNN MatMul runs on one thread
while its operands and result fit the L2 cache (``ExecuteSingleThreadedGemm`` in
``tensorflow/core/kernels/mkl/mkl_matmul_ops_common.h``).  Small kernels' ratios
scatter (1.33 for one of 56 us).  An earlier run (00:55) gave the same two regimes.
One factor fitted over both regimes, as the calibration did, came out at 0.68 (on the
single-thread rate), so the small products of the workloads' steps, whose operands all
fit the L2 cache, were predicted a third faster than they ran (mlp's ``[64, 256] @
[256, 256]``: 57 us predicted, 78 to 85 us measured with no other kernel beside it;
mixed_random's ``[256, 256]`` ones: 220 us against 297 to 357 us).  A chain of eight
[256, 256] MatMuls took 295 to 300 us per MatMul with one, two and four inter-op
threads alike: idle inter-op threads take nothing from a kernel (the guess that each
server's pools overload the host's two cores does not hold for the kernels).

Kept: the calibration runs the large sizes' graphs on ``single`` too and leaves the
products that ran at least :data:`experiments.tf_calibrate.SPLIT_SPEEDUP` times faster
split out of the fit (:func:`experiments.tf_calibrate.split_products`).
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.getcwd())

from core.cluster import Cluster, ClusterSpec  # noqa: E402
from core.graph import Graph  # noqa: E402
from experiments.backends import server_env  # noqa: E402
from experiments.tf_backend import TFLocalCluster  # noqa: E402
from experiments.tf_calibrate import traced_tensorflow_steps  # noqa: E402
from runtime.calibrate_kernels import (FIT_SIZES, _fastest_kernels,  # noqa: E402
                                       kernel_calibration_graph)


def _cpu(job):
    return f"/job:{job}/replica:0/task:0/device:CPU:0"


def chain(n, k):
    import core as ctf
    g = Graph()
    with g.as_default():
        x = ctf.Variable(ctf.fill([n, n], 1.0 / n), name="a").value()
        for i in range(k):
            x = ctf.matmul(x, x, name=f"mm{i}")
        init = ctf.global_variables_initializer()
    return g, init, [x.op]


def main(steps: int = 20):
    jobs = {"alone": ["127.0.0.1:0"], "single": ["127.0.0.1:0"], "two": ["127.0.0.1:0"],
            "four": ["127.0.0.1:0"]}
    cluster = Cluster.from_spec(ClusterSpec(jobs), cpu_cores=2, cpu_inter_op_threads=2,
                                cpu_intra_op_threads=2)
    cluster = cluster.replace_device(_cpu("alone"), inter_op_threads=1)
    cluster = cluster.replace_device(_cpu("single"), inter_op_threads=1, intra_op_threads=1)
    cluster = cluster.replace_device(_cpu("four"), inter_op_threads=4)
    with TFLocalCluster(cluster, env=server_env(1, "passive")) as servers:
        builds = {n: kernel_calibration_graph(n) for n in FIT_SIZES}
        runs = {job: traced_tensorflow_steps(servers.target(job, 0), builds, _cpu(job), steps)
                for job in ("alone", "single")}
        for n in FIT_SIZES:
            graph, traces = runs["alone"][n]
            many, one = _fastest_kernels(traces), _fastest_kernels(runs["single"][n][1])
            for name, t in sorted(many.items()):
                op = graph.get_operation_by_name(name)
                if op.type != "MatMul":
                    continue
                a, b = op.inputs[0].shape, op.inputs[1].shape
                m = a[1] if op.get_attr("transpose_a") else a[0]
                k = a[0] if op.get_attr("transpose_a") else a[1]
                cols = b[0] if op.get_attr("transpose_b") else b[1]
                flops = 2 * m * k * cols
                print(f"n={n:4d} {name[:36]:36s} [{m},{k}]@[{k},{cols}] alone {t * 1e6:8.1f} us "
                      f"{flops / t / 1e9:5.0f} GFLOP/s  single {one[name] * 1e6:8.1f} us "
                      f"{flops / one[name] / 1e9:5.0f} GFLOP/s  single/alone {one[name] / t:.2f}")
        for job in ("alone", "two", "four"):
            graph, traces = traced_tensorflow_steps(servers.target(job, 0),
                                                    {"c": chain(256, 8)}, _cpu(job), steps)["c"]
            kernels = [r.end - r.start for trace in traces for r in trace.ops
                       if r.type == "MatMul"]
            print(f"{job:6s} inter-op threads: a chain of [256, 256] MatMuls, fastest "
                  f"{min(kernels) * 1e6:.1f} us each")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:2]))
