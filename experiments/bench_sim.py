"""Benchmark: how fast the simulator runs, for graphs of 1k to 100k ops.

Random layered DAGs (``experiments.workloads.random_layered_dag``, width 32) are placed
round-robin *by layer* over ``N`` single-CPU worker tasks, each on its own host, so
nearly every edge crosses devices and becomes a transfer over two network cards.  For
each (size, devices) the table gives the seconds of the first simulate() call on a
freshly built graph (everything simulate() does: plan, costs, SimPy run, trace
building; graph building is not timed: the graph keeps the columns a plan reads as its
ops are created, see ``core.graph.OpColumns``) and the simulated ops per second it
makes; ``warm_s``, the best of the ``--repeat`` - 1 calls after it on the same graph
(which reuse the arrays made from those columns, see ``Graph.cached_view``); the
seconds to read the trace's record lists once (made on first access, so not in
simulate()'s time), transfers, the predicted step time, the peak memory simulate()
allocates (tracemalloc, in a separate untimed run), the growth exponent of the first
call's time and of memory between sizes (1.0 = linear), and the cores other programs
kept busy during the first call (``other_cores``, :mod:`experiments.machine_load`:
another busy program on this 2-core machine slows the simulator too).

    python -m experiments.bench_sim --sizes 1000 10000 100000 --devices 4 16
"""

from __future__ import annotations

import gc
import math
import time
import tracemalloc

import pandas as pd

import sim
from core.cluster import Cluster
from core.placement import Placement
from experiments.machine_load import OtherLoad
from experiments.report import print_table, results_parser, save_table
from experiments.workloads import random_layered_dag

WIDTH = 32


def placed_dag(n: int, devices: int):
    graph = random_layered_dag(n, width=WIDTH)
    cluster = Cluster.from_spec({"worker": [f"w{i}:2222" for i in range(devices)]})
    names = [d.name for d in cluster.devices]
    placement = Placement({op.name: names[(i // WIDTH) % devices]
                           for i, op in enumerate(graph.get_operations())})
    return graph, cluster, placement


def bench(sizes: list[int], device_counts: list[int], repeat: int, memory: bool) -> pd.DataFrame:
    rows = []
    for n in sizes:
        for devices in device_counts:
            graph, cluster, placement = placed_dag(n, devices)
            times, loads, records = [], [], math.inf
            for _ in range(repeat):
                gc.collect()
                with OtherLoad() as load:
                    t0 = time.perf_counter()
                    trace = sim.simulate(graph, placement, cluster)
                    times.append(time.perf_counter() - t0)
                loads.append(load.other_cores)
                # The simulator makes its record lists on first access (Trace.lazy):
                # reported apart, as the seconds to read them all once.
                t0 = time.perf_counter()
                trace.ops, trace.transfers, trace.memory
                records = min(records, time.perf_counter() - t0)
                n_transfers, step_time = len(trace.transfers), trace.step_time
                # Each call starts with no earlier trace alive: a kept one (its records
                # made) holds memory the next call would otherwise reuse, and made warm
                # calls 1.5x slower than the first here.
                del trace
            peak = math.nan
            if memory:
                del graph
                graph, cluster, placement = placed_dag(n, devices)  # cold again, untimed
                gc.collect()
                tracemalloc.start()
                trace = sim.simulate(graph, placement, cluster)
                peak = tracemalloc.get_traced_memory()[1] / 2**20
                tracemalloc.stop()
                del trace
            cold = times[0]
            rows.append({"ops": n, "devices": devices, "transfers": n_transfers,
                         "seconds": cold, "ops_per_s": n / cold,
                         "warm_s": min(times[1:], default=math.nan), "records_s": records,
                         "step_time_s": step_time, "peak_MiB": peak,
                         "other_cores": loads[0]})
            del graph
    frame = pd.DataFrame(rows).sort_values(["devices", "ops"]).reset_index(drop=True)
    frame["time_growth"] = math.nan
    frame["mem_growth"] = math.nan
    for _, part in frame.groupby("devices"):
        idx = part.index
        for a, b in zip(idx[:-1], idx[1:]):
            scale = math.log(frame.loc[b, "ops"] / frame.loc[a, "ops"])
            frame.loc[b, "time_growth"] = math.log(frame.loc[b, "seconds"] / frame.loc[a, "seconds"]) / scale
            frame.loc[b, "mem_growth"] = math.log(frame.loc[b, "peak_MiB"] / frame.loc[a, "peak_MiB"]) / scale
    return frame


def main(argv=None) -> pd.DataFrame:
    parser = results_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000],
                        help="graph sizes in ops (default: 1000 10000 100000)")
    parser.add_argument("--devices", type=int, nargs="+", default=[4, 16],
                        help="device counts (default: 4 16)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="timed calls per case: the first (cold) one, then warm ones (best kept)")
    parser.add_argument("--no-memory", action="store_true",
                        help="skip the tracemalloc run (peak_MiB is then NaN)")
    args = parser.parse_args(argv)
    frame = bench(args.sizes, args.devices, args.repeat, not args.no_memory)
    print_table(frame, "simulate() speed (random layered DAGs, round-robin by layer)")
    print(f"saved {save_table(frame, 'bench_sim', args.out)}")
    return frame


if __name__ == "__main__":
    main()
