"""Data-parallel step time against the number of ps tasks and workers.

The seed's point: with one ps task every worker reads all variables through that task's
network card, which saturates; sharding the variables over several ps tasks
(``replica_device_setter``) spreads the traffic.  Each (ps tasks, workers) pair builds a
synchronous data-parallel MLP step (``experiments.workloads.data_parallel_step``), places
it with the simple placer (the pins decide everything), and predicts its step time with
the simulator on a cluster of one host per task linked by a network.

    python -m experiments.ps_sharding --help
"""

from __future__ import annotations

import pandas as pd
from tqdm import tqdm

import placers
import sim
from core.cluster import Cluster
from experiments.report import print_table, results_parser, save_table
from experiments.workloads import data_parallel_step


def sweep(ps_counts: list[int], worker_counts: list[int], width: int, layers: int,
          batch: int, network_gbps: float, strategies: list[str]) -> pd.DataFrame:
    rows = []
    cases = [(s, p, w) for s in strategies for p in ps_counts for w in worker_counts]
    for strategy, ps, workers in tqdm(cases, desc="cases", disable=len(cases) < 4):
        wl = data_parallel_step(workers=workers, ps_tasks=ps, batch=batch, layers=layers,
                                width=width, ps_strategy=strategy)
        cluster = Cluster.from_spec(wl.cluster_spec, network_bandwidth=network_gbps * 1e9 / 8)
        placement = placers.SimplePlacer().place(wl.graph, cluster)
        trace = sim.simulate(wl.graph, placement, cluster, fetches=wl.fetches)
        ps_links = {n: b for n, b in trace.link_busy_time.items() if n.startswith("network:")}
        busiest = max(ps_links.values(), default=0.0)
        rows.append({"strategy": strategy, "ps_tasks": ps, "workers": workers, "sim_step_ms": trace.step_time * 1e3,
                     "busiest_nic_busy_ms": busiest * 1e3,
                     "busiest_nic_share": busiest / trace.step_time if trace.step_time else 0.0,
                     "bytes_moved": sum(t.bytes for t in trace.transfers)})
    return pd.DataFrame(rows)


def main(argv=None) -> pd.DataFrame:
    parser = results_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--ps", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--width", type=int, default=1024, help="layer width (variables are width^2)")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--strategies", nargs="+", default=["round_robin", "greedy"],
                        choices=["round_robin", "greedy"], help="replica_device_setter's ps_strategy")
    parser.add_argument("--network-gbps", type=float, default=10.0,
                        help="each host's network card, Gbit/s")
    args = parser.parse_args(argv)
    frame = sweep(args.ps, args.workers, args.width, args.layers, args.batch, args.network_gbps,
                  args.strategies)
    print_table(frame, f"synchronous data-parallel step, {args.layers} layers of {args.width}, "
                       f"{args.network_gbps:g} Gbit/s per host (simulated)")
    print(f"saved {save_table(frame, 'ps_sharding', args.out)}")
    return frame


if __name__ == "__main__":
    main()
