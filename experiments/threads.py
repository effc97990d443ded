"""Step time against inter-op and intra-op thread counts, predicted and measured.

TensorFlow runs ready ops of a device in parallel on its inter-op pool and splits a
multithreaded kernel over its intra-op pool (seed chapter 12, "Parallel execution").
For every (inter-op, intra-op) pair this sweep runs one step of each workload with all
ops on this machine's CPU:

- ``sim``: predicted on this machine's cluster (``Cluster.this_machine``, calibrated by
  :func:`runtime.calibrate` unless ``--calibrate none``; ``--cores`` simulates another
  host instead), the pools set by :class:`sim.SimConfig`;
- ``runtime``: measured in this process by a :class:`runtime.Session` whose
  :class:`runtime.SessionConfig` sets the pools (private to the session), the fastest of
  ``--repeats`` steps after two untimed ones.

On a host with few cores the two pools compete for them.  The BLAS library behind float
MatMul runs its own threads (``OPENBLAS_NUM_THREADS``), whatever the intra-op setting.

    python -m experiments.threads --help
"""

from __future__ import annotations


import pandas as pd
from tqdm import tqdm

import placers
import sim
from core.cluster import Cluster
from experiments.compare_placers import WORKLOADS
from experiments import cli
from experiments.report import Run, finish, print_table

__all__ = ["sweep", "measure_threads", "main"]

BACKENDS = ("sim", "runtime")


def measure_threads(workload, inter: int, intra: int, repeats: int = 5, warmup: int = 2) -> float:
    """The fastest of ``repeats`` steps of ``workload`` in an in-process session whose
    inter-op and intra-op pools have ``inter`` and ``intra`` threads
    (:func:`experiments.backends.in_process_step`)."""
    from experiments.backends import in_process_step
    return in_process_step(workload, repeats, warmup=warmup, inter_op_threads=inter,
                           intra_op_threads=intra)[1]


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
    parser = cli.make_parser(
        "python -m experiments.threads", __doc__.split("\n\n")[0], "workloads", "repeats",
        "calibrate",
        defaults={"workloads": ["mlp", "inception", "transformer"], "repeats": 5,
                  "calibrate": "quick"},
        choices={"workloads": [w for w in WORKLOADS if w != "data_parallel"]},
        helps={"repeats": "timed steps per case (runtime)",
               "calibrate": "simulate this machine as measured now (full, quick) or with the "
                            "preset figures (none)"})
    parser.add_argument("--inter", type=cli.positive_int, nargs="+", default=[1, 2, 4],
                        help="inter-op pool sizes")
    parser.add_argument("--intra", type=cli.positive_int, nargs="+", default=[1, 2],
                        help="intra-op pool sizes")
    parser.add_argument("--backend", choices=["both", "sim", "runtime"], default="both",
                        help="simulate, really run in this process, or both")
    parser.add_argument("--cores", type=int, default=0,
                        help="simulate a host with this many cores (sim only; 0: this "
                             "machine, calibrated)")
    args = cli.parse(parser, argv)
    backends = BACKENDS if args.backend == "both" else (args.backend,)
    if args.cores and "runtime" in backends:
        parser.error("--cores simulates another host: use it with --backend sim")
    with Run("threads", args, out=args.out, argv=argv) as run:
        if args.cores:
            cluster = Cluster.single_host(cpu_cores=args.cores)
            where = f"a simulated {args.cores}-core host"
        else:
            cluster, where = Cluster.this_machine(), "this machine"
            if "sim" in backends and args.calibrate != "none":
                from runtime.calibrate import calibrate
                cluster = calibrate(cluster, quick=args.calibrate == "quick")
        frame = sweep(args.workloads, args.inter, args.intra, cluster, backends, args.repeats)
        print_table(frame, f"step time vs thread pools on {where} (speedups against the "
                           "first row of each workload)")
        print(f"saved {run.save_table(frame, 'threads')}")
    return finish(run, frame)


if __name__ == "__main__":
    main()
