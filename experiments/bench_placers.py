"""Benchmark: placement time vs graph size for every placer.

Random layered DAGs (``experiments.workloads.random_layered_dag``) of 1k, 10k and 100k
ops are placed on an 8-device cluster (one host: a CPU and 7 GPUs) by each placer; the
table gives seconds per placement (best of ``--repeat``), ops per second, and the growth
exponent between sizes (1.0 = linear).  Graph building is not timed.

    python -m experiments.bench_placers --help
"""

from __future__ import annotations

import math
import time

import pandas as pd

import placers
from core.cluster import Cluster
from experiments.report import print_table, results_parser, save_table
from experiments.workloads import random_layered_dag


def bench(sizes: list[int], repeat: int, names: list[str]) -> pd.DataFrame:
    cluster = Cluster.single_host(gpus=7)
    rows = []
    for n in sizes:
        graph = random_layered_dag(n, width=64)
        for name in names:
            placer = placers.get(name, fn=lambda op: None) if name == "function" else placers.get(name)
            best = math.inf
            for _ in range(repeat):
                t0 = time.perf_counter()
                placement = placer.place(graph, cluster)
                best = min(best, time.perf_counter() - t0)
            rows.append({"placer": name, "ops": n, "seconds": best, "ops_per_s": n / best,
                         "devices_used": len(placement.devices())})
    frame = pd.DataFrame(rows).sort_values(["placer", "ops"]).reset_index(drop=True)
    # Growth exponent k in time ~ n^k between consecutive sizes.
    frame["growth"] = float("nan")
    for name, part in frame.groupby("placer"):
        idx = part.index
        for a, b in zip(idx[:-1], idx[1:]):
            frame.loc[b, "growth"] = math.log(frame.loc[b, "seconds"] / frame.loc[a, "seconds"]) / \
                math.log(frame.loc[b, "ops"] / frame.loc[a, "ops"])
    return frame


def main(argv=None) -> pd.DataFrame:
    parser = results_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument("--repeat", type=int, default=1)
    # (search and optimal simulate: they are timed only when named)
    parser.add_argument("--placers", nargs="+", choices=placers.names(),
                        default=[n for n in placers.names() if n not in ("search", "optimal")])
    args = parser.parse_args(argv)
    frame = bench(args.sizes, args.repeat, args.placers)
    print_table(frame, "placement time on 8 devices (random layered DAGs)")
    print(f"saved {save_table(frame, 'bench_placers', args.out)}")
    return frame


if __name__ == "__main__":
    main()
