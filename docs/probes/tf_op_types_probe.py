"""Run from the project root: `python docs/probes/tf_op_types_probe.py [workload ...]`.

Issue 20 §3 probe: where does the prediction of TensorFlow's runtime go wrong?  Calibrates
TensorFlow (experiments.tf_calibrate, quick) on one task of this host, runs each
workload (sim_vs_real's names) on one TensorFlow server with the simple placement, and
per op type sets the kernel time TensorFlow's step stats show (each op's fastest over
the traced steps) beside the static cost model's time for it (without op_overhead), and
the step: measured (fastest of the timed steps), simulated, and the sum of the kernels.
"""
import sys

import pandas as pd

import placers
import sim
from core.cluster import Cluster, ClusterSpec
from core.costs import StaticCostModel
from experiments.sim_vs_real import build_workload
from experiments.tf_backend import TFLocalCluster, measure_on_tensorflow
from experiments.tf_calibrate import calibrate_tensorflow

names = sys.argv[1:] or ["mlp", "rnn", "transformer", "mixed_random"]
base = Cluster.from_spec(ClusterSpec({"worker": ["127.0.0.1:0"]}), cpu_cores=2)
cluster, figures = calibrate_tensorflow(base, quick=True)
cpu = cluster.devices[0]
model = StaticCostModel()
print(f"op_overhead {cpu.op_overhead * 1e6:.2f} us, dispatch_gap {figures['dispatch_gap'] * 1e6:.2f} us, "
      f"mem_bandwidth {cpu.mem_bandwidth / 1e9:.1f} GB/s, peak {cpu.peak_flops / 1e9:.1f} GFLOP/s "
      f"x{cpu.intra_op_speedup:.2f}")
for name in names:
    w = build_workload(name)
    p = placers.get("simple").place(w.graph, cluster)
    with TFLocalCluster(cluster) as servers:
        m = measure_on_tensorflow(w, {"simple": p}, cluster, servers, repeats=31, traced=5)["simple"]
    best = {}
    for trace in m.traces:
        for r in trace.ops:
            best[r.op] = min(best.get(r.op, 1e9), r.end - r.start)
    rows = {}
    for op_name, t in best.items():
        op = w.graph.get_operation_by_name(op_name)
        row = rows.setdefault(op.type, {"ops": 0, "measured_us": 0.0, "model_us": 0.0})
        row["ops"] += 1
        row["measured_us"] += t * 1e6
        row["model_us"] += (model.op_time(op, cpu) - cpu.op_overhead) * 1e6
    frame = pd.DataFrame(rows).T.sort_values("measured_us", ascending=False)
    frame["ratio"] = frame.model_us / frame.measured_us
    simulated = sim.simulate(w.graph, p, cluster, fetches=w.fetch_ops).step_time
    print(f"\n== {name}: measured {m.step_time * 1e3:.3f} ms, simulated {simulated * 1e3:.3f} ms, "
          f"kernels {sum(best.values()) * 1e3:.3f} ms (model {frame.model_us.sum() / 1e3:.3f}), "
          f"ops {len(best)} x op_overhead {len(best) * cpu.op_overhead * 1e3:.3f} ms, "
          f"step_overhead {cluster.tasks[0].step_overhead * 1e3:.3f} ms")
    print(frame.head(12).round(2).to_string())
