"""CPU accounting: the host CPU the simulator books per task against what the runtime's
processes really use.

A step time can be predicted right for the wrong reason.  This check looks under it: for
each workload and placer, the simulator's trace says how many seconds of host CPU each
task's work took in one step (``Trace.meta["cpu_booked"]``: its dispatcher's work, the
ends of its crossings, the step's fixed costs, and its CPU kernels' seconds times cores;
:data:`experiments.backends.RUNTIME_SIM`).  The same placement then runs ``--steps``
steps on a :class:`runtime.LocalCluster`, and each server process's CPU time (user and
system, through psutil) over them, per step, is what that task really used.  The client
(this process) is a row of its own: the model books its share of a step's fixed costs on
the master's task.

This is how the model learnt that the host's cores copy tensors between processes and do
a step's fixed work (``RuntimeModel.copies_on_cores`` and ``step_costs_on_cores``): mlp's
round_robin_vars placement used 10.3 ms of CPU per step in its processes, the model had
booked 7.0.

    python -m experiments.cpu_accounting --help
"""

from __future__ import annotations

import argparse
import os

if __name__ == "__main__":  # before numpy loads BLAS, as the other experiments do
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import time
from pathlib import Path

import pandas as pd
from tqdm import tqdm

import runtime
from core.cluster import Cluster
from core.costs import StaticCostModel
from experiments.backends import (RUNTIME_SIM, calibrate_this_host, describe_calibration,
                                  predict, prepared_session, runtime_cluster_spec, server_env,
                                  this_host_cluster)
from experiments import cli
from experiments.compare_placers import WORKLOADS, placer_name, placers_to_compare
from experiments.machine_load import OtherLoad, cpu_seconds_of_tree
from experiments.report import Run, finish, print_table
from experiments.sim_vs_real import server_config
from runtime.worker import task_name

__all__ = ["main", "run", "measure_cpu_per_step"]
DEFAULT_WORKLOADS = ["mlp", "transformer", "data_parallel"]
DEFAULT_PLACERS = ["simple", "round_robin_vars"]
COLUMNS = ["workload", "placer", "task", "booked_ms", "used_ms", "booked_over_used",
           "predicted_step_ms", "fastest_step_ms", "other_cores"]
CLIENT = "client"


def measure_cpu_per_step(workload, placement, local, *, steps: int, warmup: int = 5,
                         config=None) -> tuple[dict[str, float], float, float]:
    """``(used, fastest, other_cores)``: each task's CPU seconds per step (by task name,
    ``/job:j/replica:0/task:i``; the client's under ``"client"``) over ``steps`` steps of
    ``placement`` on ``local`` (a started LocalCluster), the fastest step, and the cores
    other programs kept busy meanwhile."""
    feeds = workload.feeds or None
    pids = {task_name(job, index): proc.pid for (job, index), proc in local.processes.items()}
    with prepared_session(workload, placement, local, warmup=warmup,
                          config=config) as (session, fetches):
        pids[CLIENT] = os.getpid()
        with OtherLoad() as load:
            before = {name: cpu_seconds_of_tree(pid) for name, pid in pids.items()}
            fastest = float("inf")
            for _ in range(steps):
                t0 = time.perf_counter()
                session.run(fetches, feed_dict=feeds)
                fastest = min(fastest, time.perf_counter() - t0)
            after = {name: cpu_seconds_of_tree(pid) for name, pid in pids.items()}
    if any(v is None for v in (*before.values(), *after.values())):
        raise RuntimeError("a server process ended: its CPU time cannot be read")
    # The client's own count includes its server processes (its children): take them out.
    servers = [name for name in pids if name != CLIENT]
    used = {name: (after[name] - before[name]) / steps for name in servers}
    # Rounded to a nanosecond: the counts are whole clock ticks, and a difference of float
    # sums that should be 0 can come out a hair below it.
    used[CLIENT] = round((after[CLIENT] - before[CLIENT]) / steps - sum(used.values()), 9)
    return used, fastest, load.other_cores


def run(workloads, placer_names, *, steps: int = 200, threads: int = 0,
        cluster: Cluster | None = None, progress: bool = True) -> tuple[pd.DataFrame, dict]:
    """``(rows, figures)``: booked against used CPU per task, per workload and placer;
    ``figures``: the calibration's (empty with a given ``cluster``)."""
    env, config = server_env(), server_config(threads)
    figures: dict = {}
    if cluster is None:
        cluster, figures = calibrate_this_host(this_host_cluster(threads), env=env,
                                               config=config)
    rows = []
    for wname in tqdm(workloads, desc="workloads", disable=not progress or len(workloads) < 2):
        w = WORKLOADS[wname]()
        placer_objs = placers_to_compare(placer_names, w)
        # A fresh cluster per workload: variables outlive sessions and names repeat.
        with runtime.LocalCluster(runtime_cluster_spec(cluster), env=env, config=config) as local:
            for pname in placer_names:
                placement = placer_objs[pname].place(w.graph, cluster)
                trace = predict(w, placement, cluster, StaticCostModel(), RUNTIME_SIM)
                booked = trace.meta["cpu_booked"]
                used, fastest, other = measure_cpu_per_step(w, placement, local, steps=steps,
                                                            config=config)
                for task in [*sorted(used.keys() - {CLIENT}), CLIENT]:
                    b, u = booked.get(task, 0.0), used[task]
                    rows.append({"workload": wname, "placer": pname, "task": task,
                                 "booked_ms": b * 1e3, "used_ms": u * 1e3,
                                 "booked_over_used": b / u if u > 0 else float("nan"),
                                 "predicted_step_ms": trace.step_time * 1e3,
                                 "fastest_step_ms": fastest * 1e3, "other_cores": other})
    return pd.DataFrame(rows, columns=COLUMNS), figures


def totals(frame: pd.DataFrame) -> pd.DataFrame:
    """Per workload and placer: CPU booked and used per step over all tasks and the
    client, and their ratio."""
    out = frame.groupby(["workload", "placer"], sort=False)[["booked_ms", "used_ms"]].sum()
    out["booked_over_used"] = out.booked_ms / out.used_ms
    return out.reset_index()


def _cluster_file(text: str) -> str:
    if not Path(text).is_file():
        raise argparse.ArgumentTypeError(f"no such file: {text!r}")
    return text


def main(argv=None):
    parser = cli.make_parser(
        "python -m experiments.cpu_accounting", __doc__.split("\n\n")[0], "workloads",
        "placers", defaults={"workloads": DEFAULT_WORKLOADS, "placers": DEFAULT_PLACERS},
        choices={"workloads": list(WORKLOADS)}, types={"placers": placer_name},
        helps={"placers": "placers to compare: any registered name (placers.names()) or "
                          "round_robin_vars"})
    parser.add_argument("--steps", type=cli.positive_int, default=200,
                        help="measured steps per placement (the processes' CPU time is "
                             "counted in clock ticks, 10 ms each)")
    parser.add_argument("--threads", type=int, default=0,
                        help="inter-op and intra-op threads of every device, in the model and "
                             "on the servers (0: the host's cores)")
    parser.add_argument("--cluster", default=None, type=_cluster_file,
                        help="a calibrated cluster JSON to predict with (e.g. one sim_vs_real "
                             "saved) instead of calibrating now")
    args = cli.parse(parser, argv)
    cluster = Cluster.load(args.cluster) if args.cluster else None
    with Run("cpu_accounting", args, out=args.out, argv=argv) as report:
        frame, figures = run(args.workloads, args.placers, steps=args.steps,
                             threads=args.threads, cluster=cluster)
        if figures:
            print(f"\ncalibration: {describe_calibration(figures)}")
        print_table(frame, "host CPU per step (ms): booked by the simulator, used by the "
                           "processes")
        summary = totals(frame)
        print_table(summary, "all tasks and the client")
        print(f"saved {report.save_table(frame, 'cpu_accounting')}")
        report.save_table(summary, "cpu_accounting_totals")
    return finish(report, frame)


if __name__ == "__main__":
    main()
