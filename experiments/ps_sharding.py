"""Data-parallel step time against the number of ps tasks and workers.

The seed's point: with one ps task every worker reads all variables through that task's
network card, which saturates; sharding the variables over several ps tasks
(``replica_device_setter``) spreads the traffic.  Each (ps tasks, workers) pair builds a
synchronous data-parallel MLP step (``experiments.workloads.data_parallel_step``), places
it with the simple placer (the pins decide everything), and:

- ``--backend sim`` (default): predicts its step time with the simulator on a cluster of
  one host per task linked by a network of ``--network-gbps`` cards;
- ``--backend runtime`` / ``both``: really runs it on a :class:`runtime.LocalCluster` of
  that many ps and worker processes on this machine (the fastest of ``--repeats`` steps)
  and, with ``both``, predicts it on the same one-host cluster calibrated here
  (:func:`runtime.calibrate`, then :func:`runtime.calibrate.calibrate_distributed` on each
  started cluster).  On one host there is no network card: the tasks share its cores and
  its memory, and the ps processes serve every read and update.

    python -m experiments.ps_sharding --help
"""

from __future__ import annotations

import pandas as pd
from tqdm import tqdm

import placers
import sim
from core.cluster import Cluster, usable_cpu_cores
from experiments import cli
from experiments.report import Run, finish, print_table
from experiments.workloads import data_parallel_step


def _workload(strategy, ps, workers, width, layers, batch):
    return data_parallel_step(workers=workers, ps_tasks=ps, batch=batch, layers=layers,
                              width=width, ps_strategy=strategy)


def _link_figures(trace) -> dict:
    links = {n: b for n, b in trace.link_busy_time.items()
             if n.startswith(("network:", "memcpy:"))}
    busiest = max(links.values(), default=0.0)
    return {"busiest_link_busy_ms": busiest * 1e3,
            "busiest_link_share": busiest / trace.step_time if trace.step_time else 0.0,
            "bytes_moved": sum(t.bytes for t in trace.transfers)}


def sweep(ps_counts: list[int], worker_counts: list[int], width: int, layers: int,
          batch: int, network_gbps: float, strategies: list[str]) -> pd.DataFrame:
    """Simulated: one host per task, linked by ``network_gbps`` cards."""
    rows = []
    cases = [(s, p, w) for s in strategies for p in ps_counts for w in worker_counts]
    for strategy, ps, workers in tqdm(cases, desc="cases", disable=len(cases) < 4):
        wl = _workload(strategy, ps, workers, width, layers, batch)
        cluster = Cluster.from_spec(wl.cluster_spec, network_bandwidth=network_gbps * 1e9 / 8)
        placement = placers.SimplePlacer().place(wl.graph, cluster)
        trace = sim.simulate(wl.graph, placement, cluster, fetches=wl.fetches)
        rows.append({"strategy": strategy, "ps_tasks": ps, "workers": workers,
                     "sim_step_ms": trace.step_time * 1e3, **_link_figures(trace)})
    return pd.DataFrame(rows)


def sweep_runtime(ps_counts: list[int], worker_counts: list[int], width: int, layers: int,
                  batch: int, strategies: list[str], *, predict_too: bool = True,
                  repeats: int = 5, quick: bool = False) -> pd.DataFrame:
    """Measured on server processes here (and, with ``predict_too``, predicted on the
    calibrated one-host cluster of the same tasks)."""
    import runtime
    from experiments.backends import measure, predict
    from runtime.calibrate import calibrate, calibrate_distributed, with_cpu_figures
    cpu = None
    rows = []
    cases = [(s, p, w) for s in strategies for p in ps_counts for w in worker_counts]
    for strategy, ps, workers in tqdm(cases, desc="cases", disable=len(cases) < 2):
        wl = _workload(strategy, ps, workers, width, layers, batch)
        spec = wl.cluster_spec
        cluster = Cluster.from_spec(spec, hosts={task: "localhost" for task in spec.tasks()},
                                    cpu_cores=usable_cpu_cores())
        row = {"strategy": strategy, "ps_tasks": ps, "workers": workers}
        with runtime.LocalCluster({"ps": ps, "worker": workers}) as local:
            placement = placers.SimplePlacer().place(wl.graph, cluster)
            if predict_too:
                if cpu is None:  # the devices' figures: once, in this process
                    cpu = calibrate(Cluster.this_machine(), quick=True).devices[0]
                cluster = with_cpu_figures(cluster, cpu)
                cluster, _ = calibrate_distributed(cluster, local, quick=quick)
                trace = predict(wl, placement, cluster)
                row.update({"sim_step_ms": trace.step_time * 1e3, **_link_figures(trace)})
            m = measure(wl, placement, local, repeats=repeats)
            row["real_step_ms"] = m.step_time * 1e3
            row["real_median_ms"] = m.median * 1e3
        rows.append(row)
    frame = pd.DataFrame(rows)
    if "sim_step_ms" in frame:
        frame["rel_error"] = (frame.sim_step_ms - frame.real_step_ms) / frame.real_step_ms
    return frame


def main(argv=None) -> pd.DataFrame:
    parser = cli.make_parser(
        "python -m experiments.ps_sharding", __doc__.split("\n\n")[0], "repeats", "calibrate",
        defaults={"repeats": 5}, choices={"calibrate": ["full", "quick"]},
        helps={"repeats": "timed steps per case (runtime)",
               "calibrate": "how to measure the processes' fixed costs before predicting "
                            "them (--backend both)"})
    parser.add_argument("--ps", type=cli.positive_int, nargs="+", default=[1, 2, 4],
                        help="ps task counts")
    parser.add_argument("--workers", type=cli.positive_int, nargs="+", default=[1, 2, 4],
                        help="worker task counts")
    parser.add_argument("--width", type=cli.positive_int, default=1024,
                        help="layer width (variables are width^2)")
    parser.add_argument("--layers", type=cli.positive_int, default=4, help="layers")
    parser.add_argument("--batch", type=cli.positive_int, default=32, help="batch rows")
    parser.add_argument("--strategies", nargs="+", default=["round_robin", "greedy"],
                        choices=["round_robin", "greedy"], help="replica_device_setter's ps_strategy")
    parser.add_argument("--network-gbps", type=float, default=10.0,
                        help="each host's network card, Gbit/s (the sim backend)")
    parser.add_argument("--backend", choices=["sim", "runtime", "both"], default="sim",
                        help="simulate one host per task (sim), or run the tasks as processes "
                             "on this machine (runtime; both: also predict that one-host cluster)")
    args = cli.parse(parser, argv)
    shape = f"synchronous data-parallel step, {args.layers} layers of {args.width}"
    with Run("ps_sharding", args, out=args.out, argv=argv) as run:
        if args.backend == "sim":
            frame = sweep(args.ps, args.workers, args.width, args.layers, args.batch,
                          args.network_gbps, args.strategies)
            print_table(frame, f"{shape}, {args.network_gbps:g} Gbit/s per host (simulated)")
        else:
            frame = sweep_runtime(args.ps, args.workers, args.width, args.layers, args.batch,
                                  args.strategies, predict_too=args.backend == "both",
                                  repeats=args.repeats, quick=args.calibrate == "quick")
            print_table(frame, f"{shape}, tasks as processes on this machine (measured"
                               + (" and predicted)" if args.backend == "both" else ")"))
        print(f"saved {run.save_table(frame, 'ps_sharding')}")
    return finish(run, frame)


if __name__ == "__main__":
    main()
