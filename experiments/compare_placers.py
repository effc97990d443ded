"""Compare placers on benchmark workloads.

Each workload is placed with every placer on one cluster, and the report gives, per
(workload, placer): the ops per device, the bytes that cross devices in one step, the
time placing took, the step time the cost model estimates and, with the ``sim`` backend,
the step time and peak memory the simulator predicts; with the ``tensorflow`` backend,
the step TensorFlow's own runtime takes for the placement (``tf_step_ms``, its trace
validated); with the ``runtime`` backend, the
measured step (the fastest of the repeats, placements timed side by side in rounds; the
median beside it), peak memory (the largest, and per device in MiB) and the cores
other programs kept busy meanwhile (``other_cores``: on a busy machine every real step
is slower; :class:`experiments.machine_load.OtherLoad`); placers that
chose the same placement share one measurement (``same_as`` names the placer whose
identical placement was timed).  The best placement per workload (by the last step-time
column) is marked: every placer that chose it.

    python -m experiments.compare_placers --help
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import logging
import time
from pathlib import Path

import pandas as pd
from tqdm import tqdm

import placers
import runtime
import sim
from core.cluster import Cluster, ClusterSpec
from core.costs import StaticCostModel, tensor_bytes
from core.graph import ops_needed
from core.placement import transfers
from experiments.backends import (RUNTIME_SIM, calibrate_this_host, describe_calibration,
                                  measure_placements, predict, runtime_cluster_spec,
                                  server_env, this_host_cluster)
from experiments import cli
from experiments.report import Run, finish, per_device_frame, print_table
from experiments.tf_backend import TFLocalCluster, measure_on_tensorflow
from experiments.workloads import (data_parallel_step, inception_training_step,
                                   mlp_training_step, random_layered_dag, rnn_training_step,
                                   transformer_training_step)
from experiments.workloads.mlp import Workload

__all__ = ["CLUSTERS", "WORKLOADS", "compare", "placers_to_compare", "placer_name",
           "DEFAULT_PLACERS", "device_frame"]

_log = logging.getLogger(__name__)


CLUSTERS = {
    "ps_workers": this_host_cluster,
    "this_machine": Cluster.this_machine,
    "two_gpus": lambda: Cluster.single_host(gpus=2),
    "ps_workers_net": lambda: Cluster.from_spec(
        ClusterSpec({"ps": ["a:1"], "worker": ["b:1", "c:1"]}), gpus_per_task={"ps": 0, "worker": 1}),
}

WORKLOADS = {
    "mlp": lambda: mlp_training_step(batch=64, layers=4, width=256),
    "rnn": lambda: rnn_training_step(),
    "inception": lambda: inception_training_step(),
    "transformer": lambda: transformer_training_step(),
    "data_parallel": lambda: data_parallel_step(workers=2, ps_tasks=1),
    "random_dag_1k": lambda: Workload("random_dag_1k", random_layered_dag(1000), []),
    # Model-parallel sizes: ops of a millisecond or more, so that splitting a model over
    # one-core tasks can pay for the tensors it moves (``sim_vs_real --threads 1``).
    "rnn_large": lambda: rnn_training_step(batch=32, hidden=1024, steps=8, layers=2),
    "inception_large": lambda: inception_training_step(batch=64, width=1024, blocks=2),
}
DEFAULT_WORKLOADS = ["mlp", "rnn", "transformer", "data_parallel"]
BACKENDS = ("sim", "runtime")
RUNNABLE_CLUSTERS = ("ps_workers",)  # clusters whose tasks this machine can start
#: ... and those TensorFlow can run here (one task: in this process).
TF_RUNNABLE_CLUSTERS = RUNNABLE_CLUSTERS + ("this_machine",)


#: The cost-model placer's ``split_margin`` in the experiments: the difference (10%) at
#: which the simulator's ranking of two placements is held to be right (sim_vs_real's
#: ranking check).  Below it a split's estimated gain is within the model's error: on
#: inception_large with one-core tasks the placer split for an estimated 1% gain and
#: measured 1.4x slower than one device (sim_vs_real --threads 1, 2026-11-23).
SPLIT_MARGIN = 0.1


#: The placers the reports compare unless told (``--placers``): these names, or any the
#: registry knows (:func:`placers.names`, entry points included).
DEFAULT_PLACERS = ("simple", "round_robin", "round_robin_vars", "cost_model")


def _configured() -> dict:
    """The experiments' own settings of some placers, by the name the reports give."""
    return {
        "simple": lambda: placers.SimplePlacer(),
        "round_robin": lambda: placers.RoundRobinPlacer(),
        "round_robin_vars": lambda: placers.RoundRobinPlacer(variables_only=True),
        # The runtime's executor dispatches one op at a time per task (see
        # CostModelPlacer's runtime model): its placements are judged on that.  A split
        # must be estimated SPLIT_MARGIN faster than one device to be taken.
        "cost_model": lambda: placers.CostModelPlacer(runtime="interpreter",
                                                      split_margin=SPLIT_MARGIN),
    }


def placer_name(name: str) -> str:
    """``name`` if the reports can make that placer (an ``argparse`` type): one of
    :data:`DEFAULT_PLACERS` or a registered placer; else an error listing them all."""
    if name in _configured() or name in placers.names():
        return name
    known = sorted(set(_configured()) | set(placers.names()))
    raise argparse.ArgumentTypeError(f"unknown placer {name!r}; known placers: {', '.join(known)}")


def placers_to_compare(names=DEFAULT_PLACERS, workload: Workload | None = None
                       ) -> dict[str, placers.Placer]:
    """The placers the experiments compare, by the name the reports give them: the
    experiments' settings for :data:`DEFAULT_PLACERS`, the registry's defaults for any
    other name, told the workload's step (``fetches``) when their constructor takes it.
    An unknown name raises :class:`placers.UnknownPlacer` listing the known ones."""
    configured = _configured()
    out = {}
    for name in names:
        if name in configured:
            out[name] = configured[name]()
            continue
        options = {}
        if workload is not None and workload.fetches:
            try:
                cls = type(placers.get(name))
            except TypeError:  # a placer whose constructor needs arguments
                cls = None
            if cls is not None and "fetches" in inspect.signature(cls).parameters:
                options["fetches"] = workload.fetch_ops
        out[name] = placers.get(name, **options)
    return out


def _fits(workload: Workload, cluster: Cluster) -> bool:
    """Whether the cluster has every task the workload pins ops to."""
    spec = getattr(workload, "cluster_spec", None)
    if spec is None:
        return True
    tasks = {(t.job, t.index) for t in cluster.tasks}
    return all((job, task) in tasks for job, task in spec.tasks())


def _compare_placers(wname, w: Workload, cluster, backends, local, cost_model, repeats,
                     sim_config, placer_names=DEFAULT_PLACERS, tf_local=None) -> list:
    """The rows of one workload: each placer's placement, estimated, predicted, measured."""
    fetch_ops = w.fetch_ops or w.graph.get_operations()
    step_ops = ops_needed(fetch_ops)
    rows, placements = [], {}
    for pname, placer in placers_to_compare(placer_names, w).items():
        t0 = time.perf_counter()
        p = placements[pname] = placer.place(w.graph, cluster)
        place_s = time.perf_counter() - t0
        moved = sum(tensor_bytes(t.tensor) for t in transfers(step_ops, p))
        counts = {}
        for op in step_ops:
            counts[p[op.name]] = counts.get(p[op.name], 0) + 1
        row = {
            "workload": wname, "placer": pname, "ops": len(step_ops),
            "devices_used": len(counts), "_ops_by_device": counts,
            "bytes_across": moved, "place_ms": place_s * 1e3,
            "est_step_ms": placers.estimate_step_time(w.graph, p, cluster, cost_model,
                                                      fetches=fetch_ops) * 1e3,
        }
        if "sim" in backends:
            trace = predict(w, p, cluster, cost_model, sim_config)
            row["sim_step_ms"] = trace.step_time * 1e3
            row["sim_peak_MiB"] = max(trace.peak_memory.values(), default=0) / 2**20
            row["_sim_peak_by_device"] = trace.peak_memory
            row["_sim_trace"] = trace
        rows.append(row)
    # Placers that chose the same placement share one measurement (``same_as``): timing
    # it twice would only rank the machine's noise.  Side by side, in rounds: a change in
    # the machine's load hits every placement alike.
    first: dict = {}
    for pname, p in placements.items():
        first.setdefault(p, pname)
    distinct = {name: p for p, name in first.items()}
    for row in rows:
        owner = first[placements[row["placer"]]]
        row["same_as"] = "" if owner == row["placer"] else owner
    if "runtime" in backends:
        timed = measure_placements(w, distinct, local, repeats=repeats)
        for row in rows:
            m = timed[first[placements[row["placer"]]]]
            row["real_step_ms"] = m.step_time * 1e3
            row["real_median_ms"] = m.median * 1e3
            # On a busy machine every real step is slower: say how busy it was.
            row["other_cores"] = m.other_cores
            row["real_peak_MiB"] = max(m.trace.peak_memory.values(), default=0) / 2**20
            row["_real_peak_by_device"] = m.trace.peak_memory
    if "tensorflow" in backends:
        timed = measure_on_tensorflow(w, distinct, cluster, tf_local, repeats=repeats)
        for row in rows:
            m = timed[first[placements[row["placer"]]]]
            m.trace.validate(w.graph, cluster, tolerance=1e-4)
            row["tf_step_ms"] = m.step_time * 1e3
            row["tf_median_ms"] = m.median * 1e3
            row["tf_other_cores"] = m.other_cores
    return rows


def device_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """The per-device figures of :func:`compare`'s rows as a tidy frame: one row per
    (workload, placer, device) with ``ops`` and the peak memory predicted and measured
    (``sim_peak_MiB``, ``real_peak_MiB``; columns of the backends that ran)."""
    parts = []
    for row in frame.to_dict("records"):
        columns = {"ops": row["_ops_by_device"]}
        for side in ("sim", "real"):
            peaks = row.get(f"_{side}_peak_by_device")
            if isinstance(peaks, dict):
                columns[f"{side}_peak_MiB"] = {d: b / 2**20 for d, b in peaks.items()}
        parts.append(per_device_frame({"workload": row["workload"], "placer": row["placer"]},
                                      columns))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def compare(workloads: list[str], cluster: Cluster, backends=BACKENDS, repeats: int = 5,
            blas_threads: int = 1, sim_config: sim.SimConfig | None = None,
            placer_names=DEFAULT_PLACERS) -> pd.DataFrame:
    """One row per (workload, placer); workloads the cluster cannot run are skipped.
    Columns whose names start with ``_`` hold each row's per-device figures (dicts by
    device name) and the simulator's trace: :func:`device_frame` makes them tidy.
    ``sim_config``: the simulator's settings (:data:`experiments.backends.RUNTIME_SIM`
    to model the runtime's executor; the default ones when None).

    With ``"runtime"`` in ``backends`` each workload runs on a fresh
    :class:`runtime.LocalCluster` with the tasks of ``cluster`` (a fresh one, because
    variables outlive sessions on a cluster and workloads reuse variable names), its
    servers with ``OPENBLAS_NUM_THREADS=blas_threads`` (0: the library's default) and
    ``OMP_WAIT_POLICY=passive`` (:func:`experiments.backends.server_env`).
    """
    cost_model = StaticCostModel()
    rows = []
    for wname in tqdm(workloads, desc="workloads", disable=len(workloads) < 2):
        w = WORKLOADS[wname]()
        if not _fits(w, cluster):
            _log.warning("skipping %s: it needs the tasks %s", wname, w.cluster_spec.tasks())
            continue
        with contextlib.ExitStack() as stack:
            env = server_env(blas_threads)
            local = (stack.enter_context(runtime.LocalCluster(runtime_cluster_spec(cluster),
                                                              env=env))
                     if "runtime" in backends else None)
            # TensorFlow: in this process for one task, else its servers (variables live
            # there too, so a fresh cluster per workload as for ours).
            tf_local = (stack.enter_context(TFLocalCluster(cluster, env=env))
                        if "tensorflow" in backends and len(cluster.tasks) > 1 else None)
            rows += _compare_placers(wname, w, cluster, backends, local, cost_model, repeats,
                                     sim_config, placer_names, tf_local)
    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    key = ("real_step_ms" if "runtime" in backends else "tf_step_ms" if "tensorflow" in backends
           else "sim_step_ms" if "sim" in backends else "est_step_ms")
    best = frame.groupby("workload")[key].transform("min")
    frame["best"] = (frame[key] == best).map({True: "*", False: ""})
    return frame


def _cluster_arg(text: str) -> str:
    """``--cluster``: a preset name or an existing JSON file."""
    if text in CLUSTERS or Path(text).is_file():
        return text
    raise argparse.ArgumentTypeError(f"neither a preset ({', '.join(CLUSTERS)}) nor a "
                                     f"file: {text!r}")


def _plot(run: Run, frame: pd.DataFrame, key: str, label: str) -> None:
    """The step time of every placement (bars), and the Gantt chart of each workload's
    best placement as the simulator predicts it."""
    from experiments.plots import bars

    figure = bars(frame, group="workload", bar="placer", value=key, ylabel=label,
                  title="step time per placement")
    print(f"saved {run.save_figure(figure, 'compare_placers_steps')}")
    if "_sim_trace" not in frame:
        return
    for _, row in frame[frame.best == "*"].drop_duplicates("workload").iterrows():
        ax = row["_sim_trace"].plot()
        ax.set_title(f"{row.workload}, {row.placer} placement (predicted): "
                     f"{row.sim_step_ms * 1e3:.0f} us")
        print(f"saved {run.save_figure(ax.figure, f'gantt_{row.workload}_{row.placer}')}")


def main(argv=None) -> pd.DataFrame:
    parser = cli.make_parser(
        "python -m experiments.compare_placers", __doc__.split("\n\n")[0],
        "workloads", "placers", "repeats", "calibrate", "plot",
        defaults={"workloads": DEFAULT_WORKLOADS, "placers": list(DEFAULT_PLACERS),
                  "repeats": 5},
        choices={"workloads": list(WORKLOADS)}, types={"placers": placer_name},
        helps={"repeats": "timed steps per placement",
               "placers": "placers to compare: any registered name (placers.names(), entry "
                          f"points included) or {', '.join(DEFAULT_PLACERS)}",
               "calibrate": "on the cluster of this machine (ps_workers): measure it first "
                            "(full: about 10 s, quick: about 6 s) so that the placers and the "
                            "simulator see this machine, or not (none: default figures)"})
    parser.add_argument("--backend", choices=["both", "sim", "runtime", "tensorflow", "none"],
                        default="both",
                        help="simulate (sim), really run on server processes here (runtime), "
                             "both, run on TensorFlow's own runtime (tensorflow: needs "
                             "tensorflow installed), or only the cost model's estimate (none)")
    parser.add_argument("--blas-threads", type=int, default=1,
                        help="OPENBLAS_NUM_THREADS of the server processes (0: the library's "
                             "default, a spinning thread per core in each process, which on a "
                             "small machine makes concurrent matmuls wait for each other)")
    parser.add_argument("--cluster", default="ps_workers", type=_cluster_arg,
                        help=f"a preset ({', '.join(CLUSTERS)}) or a cluster JSON file")
    args = cli.parse(parser, argv)
    backends = {"both": BACKENDS, "none": ()}.get(args.backend, (args.backend,))
    runnable = args.cluster in RUNNABLE_CLUSTERS
    if "tensorflow" in backends and args.cluster not in TF_RUNNABLE_CLUSTERS:
        parser.error(f"--backend tensorflow runs the cluster on this machine: use "
                     f"--cluster {' or '.join(TF_RUNNABLE_CLUSTERS)}")
    if "runtime" in backends and not runnable:
        parser.error(f"--backend {args.backend} runs the cluster on this machine: use "
                     f"--cluster {' or '.join(RUNNABLE_CLUSTERS)}, or --backend sim")
    with Run("compare_placers", args, out=args.out, argv=argv) as run:
        cluster = (CLUSTERS[args.cluster]() if args.cluster in CLUSTERS
                   else Cluster.load(args.cluster))
        sim_config = None
        measured = "default hardware figures"
        if runnable and args.calibrate != "none":
            cluster, figures = calibrate_this_host(cluster, env=server_env(args.blas_threads),
                                                   quick=args.calibrate == "quick")
            sim_config = RUNTIME_SIM
            measured = "calibrated"
            print(f"calibrated this machine: {describe_calibration(figures)}")
            cluster.save(run.path("cluster.json"))
        frame = compare(args.workloads, cluster, backends, args.repeats, args.blas_threads,
                        sim_config, args.placers)
        devices = device_frame(frame)
        shown = frame[[c for c in frame if not c.startswith("_")]]
        print_table(shown, f"placers on {args.cluster} ({len(cluster.devices)} devices, "
                           f"{measured}); est: the cost model's estimate; sim: the "
                           "simulator's; real: measured; tf: TensorFlow's runtime (per "
                           "device: compare_placers_devices.csv)")
        print(f"saved {run.save_table(shown, 'compare_placers')}")
        print(f"saved {run.save_table(devices, 'compare_placers_devices')}")
        key = ("real_step_ms" if "runtime" in backends else "tf_step_ms"
               if "tensorflow" in backends else "sim_step_ms" if "sim" in backends
               else "est_step_ms")
        if not shown.empty:
            run.summary = {"step_ms_column": key, "best": {
                w: {"placer": r.placer, key: r[key]}
                for w, r in shown[shown.best == "*"].drop_duplicates("workload")
                .set_index("workload").iterrows()}}
        if args.plot and not shown.empty:
            _plot(run, frame, key, {"real_step_ms": "measured step (ms)",
                                    "tf_step_ms": "TensorFlow's step (ms)",
                                    "sim_step_ms": "predicted step (ms)",
                                    "est_step_ms": "estimated step (ms)"}[key])
    return finish(run, shown)


if __name__ == "__main__":
    main()
