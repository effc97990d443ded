"""Step time against inter-op and intra-op thread counts, predicted and measured.

TensorFlow runs ready ops of a device in parallel on its inter-op pool and splits a
multithreaded kernel over its intra-op pool (seed chapter 12, "Parallel execution").
For every (inter-op, intra-op) pair this sweep runs one step of each workload with all
ops on this machine's CPU:

- ``sim``: predicted on this machine's cluster (``Cluster.this_machine``, calibrated by
  :func:`runtime.calibrate` unless ``--no-calibrate``; ``--cores`` simulates another
  host instead), the pools set by :class:`sim.SimConfig`;
- ``runtime``: measured in this process by a :class:`runtime.Session` whose
  :class:`runtime.SessionConfig` sets the pools (private to the session), the fastest of
  ``--repeats`` steps after two untimed ones.

On a host with few cores the two pools compete for them.  The BLAS library behind float
MatMul runs its own threads (``OPENBLAS_NUM_THREADS``), whatever the intra-op setting.

    python -m experiments.threads --help
"""

from __future__ import annotations

import time

import pandas as pd
from tqdm import tqdm

import placers
import sim
from core.cluster import Cluster
from experiments.compare_placers import WORKLOADS
from experiments.report import print_table, results_parser, save_table

__all__ = ["sweep", "measure_threads", "main"]

BACKENDS = ("sim", "runtime")


def measure_threads(workload, inter: int, intra: int, repeats: int = 5, warmup: int = 2) -> float:
    """The fastest of ``repeats`` steps of ``workload`` in an in-process session whose
    inter-op and intra-op pools have ``inter`` and ``intra`` threads."""
    import runtime
    config = runtime.SessionConfig(inter_op_parallelism_threads=inter,
                                   intra_op_parallelism_threads=intra,
                                   use_per_session_threads=True)
    with runtime.Session(graph=workload.graph, config=config) as session:
        if workload.init is not None:
            session.run(workload.init)
        for _ in range(warmup):
            session.run(workload.fetch_ops, feed_dict=workload.feeds or None)
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            session.run(workload.fetch_ops, feed_dict=workload.feeds or None)
            best = min(best, time.perf_counter() - t0)
    return best


def sweep(workloads: list[str], inter: list[int], intra: list[int], cluster: Cluster,
          backends=("sim",), repeats: int = 5) -> pd.DataFrame:
    """One row per (workload, inter-op, intra-op): ``sim_step_ms`` and/or
    ``real_step_ms``, and the speed-up of each against the workload's first row."""
    rows = []
    cases = [(name, i, j) for name in workloads for i in inter for j in intra]
    built = {name: WORKLOADS[name]() for name in workloads}
    # The placement does not depend on the pools: one per workload.
    placed = ({name: placers.SimplePlacer().place(w.graph, cluster) for name, w in built.items()}
              if "sim" in backends else {})
    for name, i, j in tqdm(cases, desc="cases", disable=len(cases) < 4 or "runtime" not in backends):
        w = built[name]
        row = {"workload": name, "inter_op": i, "intra_op": j}
        if "sim" in backends:
            config = sim.SimConfig(inter_op_threads=i, intra_op_threads=j)
            trace = sim.simulate(w.graph, placed[name], cluster, fetches=w.fetch_ops, config=config)
            row["sim_step_ms"] = trace.step_time * 1e3
        if "runtime" in backends:
            row["real_step_ms"] = measure_threads(w, i, j, repeats) * 1e3
        rows.append(row)
    frame = pd.DataFrame(rows)
    for column in ("sim_step_ms", "real_step_ms"):
        if column in frame:
            speedup = column.split("_")[0] + "_speedup"
            frame[speedup] = frame.groupby("workload")[column].transform(lambda s: s.iloc[0] / s)
    if {"sim_step_ms", "real_step_ms"} <= set(frame.columns):
        frame["rel_error"] = (frame.sim_step_ms - frame.real_step_ms) / frame.real_step_ms
    return frame


def main(argv=None) -> pd.DataFrame:
    parser = results_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", nargs="+", default=["mlp", "inception", "transformer"],
                        choices=[w for w in WORKLOADS if w != "data_parallel"])
    parser.add_argument("--inter", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--intra", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--backend", choices=["both", "sim", "runtime"], default="both",
                        help="simulate, really run in this process, or both")
    parser.add_argument("--repeats", type=int, default=5, help="timed steps per case (runtime)")
    parser.add_argument("--cores", type=int, default=0,
                        help="simulate a host with this many cores (sim only; default: this "
                             "machine, calibrated)")
    parser.add_argument("--no-calibrate", action="store_true",
                        help="simulate this machine with the preset figures, not calibrated ones")
    args = parser.parse_args(argv)
    backends = BACKENDS if args.backend == "both" else (args.backend,)
    if args.cores and "runtime" in backends:
        parser.error("--cores simulates another host: use it with --backend sim")
    if args.cores:
        cluster, where = Cluster.single_host(cpu_cores=args.cores), f"a simulated {args.cores}-core host"
    else:
        cluster, where = Cluster.this_machine(), "this machine"
        if "sim" in backends and not args.no_calibrate:
            from runtime.calibrate import calibrate
            cluster = calibrate(cluster, quick=True)
    frame = sweep(args.workloads, args.inter, args.intra, cluster, backends, args.repeats)
    print_table(frame, f"step time vs thread pools on {where} (speedups against the first "
                       "row of each workload)")
    print(f"saved {save_table(frame, 'threads', args.out)}")
    return frame


if __name__ == "__main__":
    main()
