"""Compare placers on benchmark workloads.

Each workload is placed with every registered placer on one cluster, and the report
gives, per (workload, placer): the ops per device, the bytes that cross devices in one
step, the step time the cost model estimates, and the time placing took.

    python -m experiments.compare_placers --help
"""

from __future__ import annotations

import time

import pandas as pd

import placers
from core.cluster import Cluster, ClusterSpec
from core.costs import StaticCostModel, tensor_bytes
from core.graph import ops_needed
from core.placement import transfers
from experiments.report import print_table, results_parser, save_table, short_device
from experiments.workloads import mlp_training_step, random_layered_dag
from experiments.workloads.mlp import Workload

__all__ = ["CLUSTERS", "WORKLOADS", "compare"]


def _ps_workers_on_this_host() -> Cluster:
    """1 ps and 2 workers as processes on this machine (how the runtime runs them)."""
    spec = ClusterSpec({"ps": ["127.0.0.1:0"], "worker": ["127.0.0.1:0", "127.0.0.1:0"]})
    hosts = {("ps", 0): "localhost", ("worker", 0): "localhost", ("worker", 1): "localhost"}
    return Cluster.from_spec(spec, hosts=hosts)


CLUSTERS = {
    "ps_workers": _ps_workers_on_this_host,
    "this_machine": Cluster.this_machine,
    "two_gpus": lambda: Cluster.single_host(gpus=2),
    "ps_workers_net": lambda: Cluster.from_spec(
        ClusterSpec({"ps": ["a:1"], "worker": ["b:1", "c:1"]}), gpus_per_task={"ps": 0, "worker": 1}),
}

WORKLOADS = {
    "mlp_train": lambda: mlp_training_step(batch=64, layers=4, width=256),
    "random_dag_1k": lambda: Workload("random_dag_1k", random_layered_dag(1000), []),
}


def _placers() -> dict[str, placers.Placer]:
    return {
        "simple": placers.SimplePlacer(),
        "round_robin": placers.RoundRobinPlacer(),
        "round_robin_vars": placers.RoundRobinPlacer(variables_only=True),
        "cost_model": placers.CostModelPlacer(),
    }


def compare(workloads: list[str], cluster: Cluster) -> pd.DataFrame:
    """One row per (workload, placer)."""
    cost_model = StaticCostModel()
    rows = []
    for wname in workloads:
        w = WORKLOADS[wname]()
        fetch_ops = w.fetch_ops or w.graph.get_operations()
        step_ops = ops_needed(fetch_ops)
        for pname, placer in _placers().items():
            t0 = time.perf_counter()
            p = placer.place(w.graph, cluster)
            place_s = time.perf_counter() - t0
            moved = sum(tensor_bytes(t.tensor) for t in transfers(step_ops, p))
            counts = {}
            for op in step_ops:
                counts[p[op.name]] = counts.get(p[op.name], 0) + 1
            est = placers.estimate_step_time(w.graph, p, cluster, cost_model, fetches=fetch_ops)
            rows.append({
                "workload": wname, "placer": pname, "ops": len(step_ops),
                "ops_per_device": ", ".join(f"{short_device(d)}={n}" for d, n in sorted(counts.items())),
                "bytes_across": moved, "est_step_ms": est * 1e3, "place_ms": place_s * 1e3,
            })
    frame = pd.DataFrame(rows)
    best = frame.groupby("workload")["est_step_ms"].transform("min")
    frame["best"] = (frame["est_step_ms"] == best).map({True: "*", False: ""})
    return frame


def main(argv=None) -> pd.DataFrame:
    parser = results_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    parser.add_argument("--cluster", default="ps_workers",
                        help=f"a preset ({', '.join(CLUSTERS)}) or a cluster JSON file")
    args = parser.parse_args(argv)
    cluster = CLUSTERS[args.cluster]() if args.cluster in CLUSTERS else Cluster.load(args.cluster)
    frame = compare(args.workloads, cluster)
    print_table(frame, f"placers on {args.cluster} ({len(cluster.devices)} devices); "
                       "est_step_ms: the cost model's estimate")
    print(f"saved {save_table(frame, 'compare_placers', args.out)}")
    return frame


if __name__ == "__main__":
    main()
