"""Simulator vs the in-process executor: is a calibrated cluster's prediction the step?

The user's path, with nothing else set: ``cluster = runtime.calibrate()``, then
``sim.simulate(graph, placement, cluster, fetches=...)`` against the same step run by a
:class:`runtime.Session` in this process on its devices' inter-op threads.  Per
workload (named as for :mod:`experiments.sim_vs_real`, ``name[:option=value]...``:
registry workloads at the small sizes of
:data:`experiments.sim_vs_real.SMALL_OPTIONS`, and ``mixed_random`` graphs that mix
matrix products, elementwise ops and tiny ops, with arrays from cache-sized to larger
than the caches) the report gives:

- ``predicted_ms`` under the first calibration and ``rel_error`` against
  ``measured_ms``, the fastest of ``--repeats`` steps (other load only ever adds time);
- ``repeat_spread``: how far a second measurement, in a second session of the same
  workload, landed from it (relative): the measurement's own noise;
- ``calibration_spread``: how far the prediction under a second calibration, made
  right after the measurements, landed from the first prediction, made before them
  (relative): the noise a calibration carries into every prediction, and how far the
  machine's speed moved while the workloads were measured.  (Made back to back
  before the measurements, the two calibrations of a run at 09:31 on 2026-11-28
  agreed within 6% while every workload then measured 1.4-1.7x slower than 25
  minutes before under the same predictions: the machine had changed state between
  the calibration and the measurements, and no column said so.)

Every workload's two sessions are open at once, and each takes ``--turns`` turns, a
few steps a turn, all of them in order (:func:`experiments.backends.in_process_steps`):
this machine's speed changes for seconds at a time, and a workload whose steps all ran
in one slow spell measured up to twice its step of a minute later.

On a machine with a CUDA GPU the sessions place every op with a GPU kernel there, as
TensorFlow does, and the calibration measures the GPU through its own kernels
(:mod:`runtime.calibrate_gpu`): the report then checks the simulator against the CUDA
executor.  ``CUDA_VISIBLE_DEVICES=`` (empty) hides the GPU and checks the CPU path.

An error well above both spreads is the model's.  The summary gives the median and the
largest error beside the median spreads.  ``--inter-op-threads N`` runs the sessions on
``N`` inter-op threads and predicts the calibrated cluster with its CPUs set to as many
(default: the session's and the calibration's own, the host's cores): with one, no two
kernels run at once and no thread waits for another's interpreter lock.  ``--without``
predicts with one of the model's mechanisms taken out (``shared``: the host's bandwidth
shared by kernels at once; ``curve``: the rate by working set; ``lock``: the late
hand-over of the interpreter's lock, ``Task.lock_wakeup``), to show what each
contributes.

    python -m experiments.sim_vs_inprocess --help
"""

from __future__ import annotations

import os

if __name__ == "__main__":  # before numba's threads start, as experiments.sim_vs_real does.
    # The BLAS is left as the user's process has it: without OPENBLAS_NUM_THREADS the
    # MatMul kernel makes it single-threaded and splits a big product into row blocks
    # over the intra-op threads, and the calibration measures that.  With the variable
    # set (OPENBLAS_NUM_THREADS=1 python -m experiments.sim_vs_inprocess) each product
    # is one gemm call on one core, and the calibration records that too
    # (Device.products_split).
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import statistics

import pandas as pd
from tqdm import tqdm

from experiments import cli
from experiments.backends import in_process_steps
from experiments.report import Run, finish, print_table
from experiments.sim_vs_real import build_workload, workload_spec

__all__ = ["main", "run", "without", "with_inter_op_threads", "DEFAULT_WORKLOADS"]

DEFAULT_WORKLOADS = ["mlp", "rnn", "transformer", "inception", "transformer:batch=2",
                     "resnet50:batch=2", "gnmt:batch=4", "inception_v3:batch=2",
                     "mixed_random:seed=1", "mixed_random:seed=2",
                     "mixed_random:seed=3:elements=262144", "mixed_random:seed=4:elements=65536"]
COLUMNS = ["workload", "ops", "predicted_ms", "measured_ms", "rel_error", "remeasured_ms",
           "repeat_spread", "second_prediction_ms", "calibration_spread"]


def without(cluster, mechanism: str | None):
    """``cluster`` less one mechanism: ``"shared"`` (no host shares bandwidth between
    kernels at once), ``"curve"`` (no device's rate depends on the working set;
    ``"curve"`` also drops the sharing, which reads the same working sets) or
    ``"lock"`` (a waiting thread gets its interpreter's lock at once: no task's
    ``lock_wakeup``)."""
    if mechanism is None:
        return cluster
    if mechanism == "lock":
        for t in cluster.tasks:
            cluster = cluster.replace_task(t.job, t.index, lock_wakeup=0.0)
        return cluster
    for host in cluster.hosts:
        cluster = cluster.replace_host(host.name, shared_bandwidth=())
    if mechanism == "curve":
        for d in cluster.devices:
            cluster = cluster.replace_device(d.name, bandwidth_curve=())
    return cluster


def with_inter_op_threads(cluster, threads: int):
    """``cluster`` with every CPU device's inter-op pool ``threads`` threads (0: as it
    is)."""
    if threads:
        for d in cluster.devices:
            if d.is_cpu:
                cluster = cluster.replace_device(d.name, inter_op_threads=threads)
    return cluster


def run(names, *, repeats: int = 30, quick: bool = False, mechanism: str | None = None,
        inter_op_threads: int = 0, turns: int = 5, progress: bool = True
        ) -> tuple[pd.DataFrame, list]:
    """``(rows, calibrations)``: each workload predicted under two calibrations, made
    before and after the measurements, and measured twice, its sessions on ``inter_op_threads`` threads (0:
    the session's default), every session's steps in ``turns`` turns
    (see the module docstring)."""
    import runtime
    import sim
    calibrations = [runtime.calibrate(quick=quick)]
    workloads = [build_workload(name) for name in tqdm(names, desc="workloads",
                                                        disable=not progress)]
    steps = in_process_steps([w for w in workloads for _ in range(2)], repeats,
                             turns=min(turns, repeats), inter_op_threads=inter_op_threads)
    calibrations.append(runtime.calibrate(quick=quick))  # after: the machine's drift too
    rows = []
    for k, (name, w) in enumerate(zip(names, workloads)):
        (placement, measured), (_, remeasured) = steps[2 * k], steps[2 * k + 1]
        predicted = [sim.simulate(w.graph, placement,
                                  with_inter_op_threads(without(c, mechanism), inter_op_threads),
                                  fetches=w.fetches).step_time for c in calibrations]
        rows.append({
            "workload": name, "ops": len(w.graph.get_operations()),
            "predicted_ms": predicted[0] * 1e3, "measured_ms": measured * 1e3,
            "rel_error": (predicted[0] - measured) / measured,
            "remeasured_ms": remeasured * 1e3,
            "repeat_spread": abs(remeasured - measured) / measured,
            "second_prediction_ms": predicted[1] * 1e3,
            "calibration_spread": abs(predicted[1] - predicted[0]) / predicted[0],
        })
    return pd.DataFrame(rows, columns=COLUMNS), calibrations


def summarise(frame: pd.DataFrame) -> pd.DataFrame:
    """One row: the median and largest absolute error beside the median spreads."""
    errors = frame.rel_error.abs()
    return pd.DataFrame([{
        "rows": len(frame), "median_abs_error": statistics.median(errors),
        "max_abs_error": errors.max(), "worst": frame.workload[errors.idxmax()],
        "median_repeat_spread": statistics.median(frame.repeat_spread),
        "median_calibration_spread": statistics.median(frame.calibration_spread)}])


def main(argv=None):
    parser = cli.make_parser(
        "python -m experiments.sim_vs_inprocess", __doc__.split("\n\n")[0], "workloads",
        "repeats", "calibrate",
        defaults={"workloads": DEFAULT_WORKLOADS, "repeats": 30},
        choices={"calibrate": ["full", "quick"]}, types={"workloads": workload_spec},
        helps={"workloads": "name[:option=value]... of experiments.compare_placers.WORKLOADS "
                            "or of the registry (experiments.workloads.names())",
               "repeats": "timed steps per measurement"})
    parser.add_argument("--without", choices=["shared", "curve", "lock"], default=None,
                        help="predict without one of the model's mechanisms (see the "
                             "docstring)")
    parser.add_argument("--turns", type=int, default=5, metavar="N",
                        help="turns each session takes, a few steps each, the sessions in "
                             "order (default 5)")
    parser.add_argument("--inter-op-threads", type=int, default=0, metavar="N",
                        help="the sessions' inter-op threads, and the predicted CPUs' "
                             "(default 0: the host's cores)")
    args = cli.parse(parser, argv)
    if args.inter_op_threads < 0:  # (before the run's folder is made)
        parser.error(f"--inter-op-threads must be 0 or more, not {args.inter_op_threads}")
    if not 1 <= args.turns <= args.repeats:
        parser.error(f"--turns must be from 1 to --repeats ({args.repeats}), not {args.turns}")
    with Run("sim_vs_inprocess", args, out=args.out, argv=argv) as report:
        frame, calibrations = run(args.workloads, repeats=args.repeats,
                                  quick=args.calibrate == "quick", mechanism=args.without,
                                  inter_op_threads=args.inter_op_threads,
                                  turns=args.turns)
        print_table(frame, "predicted vs measured in-process step (ms); "
                           "rel_error = (pred - meas) / meas")
        summary = summarise(frame)
        print_table(summary, "summary")
        print(f"saved {report.save_table(frame, 'sim_vs_inprocess')}")
        report.save_table(summary, "sim_vs_inprocess_summary")
        for i, cluster in enumerate(calibrations):
            cluster.save(report.path(f"calibration_{i}.json"))
        report.summary = summary.to_dict("records")[0]
    return finish(report, frame)


if __name__ == "__main__":
    main()
