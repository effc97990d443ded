"""Step time against inter-op and intra-op thread counts.

TensorFlow runs ready ops of a device in parallel on its inter-op pool and splits a
multithreaded kernel over its intra-op pool (seed chapter 12, "Parallel execution").
This sweep predicts one step of each workload, all ops on this machine's CPU, for every
(inter-op, intra-op) pair; on a host with few cores the two pools compete for them.

    python -m experiments.threads --help
"""

from __future__ import annotations

import pandas as pd

import placers
import sim
from core.cluster import Cluster
from experiments.compare_placers import WORKLOADS
from experiments.report import print_table, results_parser, save_table


def sweep(workloads: list[str], inter: list[int], intra: list[int], cores: int) -> pd.DataFrame:
    cluster = Cluster.single_host(cpu_cores=cores)
    rows = []
    for name in workloads:
        w = WORKLOADS[name]()
        placement = placers.SimplePlacer().place(w.graph, cluster)
        for i in inter:
            for j in intra:
                config = sim.SimConfig(inter_op_threads=i, intra_op_threads=j)
                trace = sim.simulate(w.graph, placement, cluster, fetches=w.fetch_ops, config=config)
                rows.append({"workload": name, "inter_op": i, "intra_op": j,
                             "sim_step_ms": trace.step_time * 1e3})
    frame = pd.DataFrame(rows)
    frame["speedup"] = frame.groupby("workload")["sim_step_ms"].transform(
        lambda s: s.iloc[0] / s)
    return frame


def main(argv=None) -> pd.DataFrame:
    parser = results_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", nargs="+", default=["mlp", "inception", "transformer"],
                        choices=[w for w in WORKLOADS if w != "data_parallel"])
    parser.add_argument("--inter", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--intra", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--cores", type=int, default=2, help="cores of the simulated host")
    args = parser.parse_args(argv)
    frame = sweep(args.workloads, args.inter, args.intra, args.cores)
    print_table(frame, f"simulated step vs thread pools on a {args.cores}-core host "
                       "(speedup against the first row of each workload)")
    print(f"saved {save_table(frame, 'threads', args.out)}")
    return frame


if __name__ == "__main__":
    main()
