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
import time

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
from experiments.tf_backend import TFLocalCluster, measure_on_tensorflow
from experiments.report import (per_device_MiB, print_table, results_parser, save_table,
                                short_device)
from experiments.workloads import (data_parallel_step, inception_training_step,
                                   mlp_training_step, random_layered_dag, rnn_training_step,
                                   transformer_training_step)
from experiments.workloads.mlp import Workload

__all__ = ["CLUSTERS", "WORKLOADS", "compare", "placers_to_compare", "placer_name",
           "DEFAULT_PLACERS"]


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
            "ops_per_device": ", ".join(f"{short_device(d)}={n}" for d, n in sorted(counts.items())),
            "bytes_across": moved, "place_ms": place_s * 1e3,
            "est_step_ms": placers.estimate_step_time(w.graph, p, cluster, cost_model,
                                                      fetches=fetch_ops) * 1e3,
        }
        if "sim" in backends:
            trace = predict(w, p, cluster, cost_model, sim_config)
            row["sim_step_ms"] = trace.step_time * 1e3
            row["sim_peak_MiB"] = max(trace.peak_memory.values(), default=0) / 2**20
            row["sim_peak_MiB_per_device"] = per_device_MiB(trace.peak_memory)
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
            row["real_peak_MiB_per_device"] = per_device_MiB(m.trace.peak_memory)
    if "tensorflow" in backends:
        timed = measure_on_tensorflow(w, distinct, cluster, tf_local, repeats=repeats)
        for row in rows:
            m = timed[first[placements[row["placer"]]]]
            m.trace.validate(w.graph, cluster, tolerance=1e-4)
            row["tf_step_ms"] = m.step_time * 1e3
            row["tf_median_ms"] = m.median * 1e3
            row["tf_other_cores"] = m.other_cores
    return rows


def compare(workloads: list[str], cluster: Cluster, backends=BACKENDS, repeats: int = 5,
            blas_threads: int = 1, sim_config: sim.SimConfig | None = None,
            placer_names=DEFAULT_PLACERS) -> pd.DataFrame:
    """One row per (workload, placer); workloads the cluster cannot run are skipped.
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
            print(f"skipping {wname}: it needs the tasks {w.cluster_spec.tasks()}")
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


def main(argv=None) -> pd.DataFrame:
    parser = results_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", nargs="+", default=DEFAULT_WORKLOADS, choices=list(WORKLOADS))
    parser.add_argument("--backend", choices=["both", "sim", "runtime", "tensorflow", "none"],
                        default="both",
                        help="simulate (sim), really run on server processes here (runtime), "
                             "both, run on TensorFlow's own runtime (tensorflow: needs "
                             "tensorflow installed), or only the cost model's estimate (none)")
    parser.add_argument("--placers", nargs="+", type=placer_name, default=list(DEFAULT_PLACERS),
                        help="placers to compare: any registered name (placers.names(), entry "
                             f"points included) or {', '.join(DEFAULT_PLACERS)}")
    parser.add_argument("--repeats", type=int, default=5, help="timed steps per placement")
    parser.add_argument("--blas-threads", type=int, default=1,
                        help="OPENBLAS_NUM_THREADS of the server processes (0: the library's "
                             "default, a spinning thread per core in each process, which on a "
                             "small machine makes concurrent matmuls wait for each other)")
    parser.add_argument("--cluster", default="ps_workers",
                        help=f"a preset ({', '.join(CLUSTERS)}) or a cluster JSON file")
    parser.add_argument("--calibrate", choices=["full", "quick", "none"], default="full",
                        help="on the cluster of this machine (ps_workers): measure it first "
                             "(full: about 10 s, quick: about 6 s) so that the placers and "
                             "the simulator see this machine, or not (none: default figures)")
    args = parser.parse_args(argv)
    cluster = CLUSTERS[args.cluster]() if args.cluster in CLUSTERS else Cluster.load(args.cluster)
    backends = {"both": BACKENDS, "none": ()}.get(args.backend, (args.backend,))
    runnable = args.cluster in RUNNABLE_CLUSTERS
    if "tensorflow" in backends and args.cluster not in TF_RUNNABLE_CLUSTERS:
        parser.error(f"--backend tensorflow runs the cluster on this machine: use "
                     f"--cluster {' or '.join(TF_RUNNABLE_CLUSTERS)}")
    if "runtime" in backends and not runnable:
        parser.error(f"--backend {args.backend} runs the cluster on this machine: use "
                     f"--cluster {' or '.join(RUNNABLE_CLUSTERS)}, or --backend sim")
    sim_config = None
    measured = "default hardware figures"
    if runnable and args.calibrate != "none":
        cluster, figures = calibrate_this_host(cluster, env=server_env(args.blas_threads),
                                               quick=args.calibrate == "quick")
        sim_config = RUNTIME_SIM
        measured = "calibrated"
        print(f"calibrated this machine: {describe_calibration(figures)}")
    frame = compare(args.workloads, cluster, backends, args.repeats, args.blas_threads,
                    sim_config, args.placers)
    shown = frame.drop(columns=[c for c in frame if c.endswith("_per_device") and "MiB" in c])
    print_table(shown, f"placers on {args.cluster} ({len(cluster.devices)} devices, {measured}); "
                       "est: the cost model's estimate; sim: the simulator's; real: measured "
                       "(the peak memory per device is in the CSV)")
    print(f"saved {save_table(frame, 'compare_placers', args.out)}")
    return frame


if __name__ == "__main__":
    main()
