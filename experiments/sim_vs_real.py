"""Simulator vs real runtime: predicted and measured step times after calibration.

The cluster is the runtime's own (1 ps and 2 workers as server processes on this
machine, all on one host with its real cores).  It is calibrated right before each
workload (``--calibrate-once``: once, before the first; the machine's speed drifts over
minutes, and so would a calibration minutes old; the ``calibration`` column numbers
them): the devices' rates, each op type's kernel cost (fixed, and a factor on the roofline) and the
executor's dispatch cost per op by :func:`runtime.calibrate` (micro-benchmarks in this
process; :func:`runtime.calibrate_kernels.measure_kernel_costs` traces a graph of every
op type on tiny tensors and on a few larger sizes), then the fixed costs of a distributed
step by
:func:`runtime.calibrate.calibrate_distributed` (tiny graphs on a
:class:`runtime.LocalCluster`: step and RunGraph overheads per task, the latency and
bandwidth of a tensor crossing processes).  Each workload is then placed by every
placer, predicted by the simulator and measured on a fresh LocalCluster: all placements
side by side, in rounds (the order rotating), so that a change in the machine's load
hits every placement alike.

``measured_ms`` is the fastest of the timed steps (``median_ms`` beside it): the
simulator predicts a step on a machine that runs nothing else, and on a shared machine
other processes only ever add time, so the undisturbed step is the least of the repeats.
Each timed step follows a step of its own placement, as a step of a training loop does
(:func:`experiments.backends.timed_rounds`); ``after_other_ms`` is the fastest of the
steps that each followed another placement's step instead (the rounds' first step of
each turn), which the servers run slower.
Three columns say how far the measurement itself can be trusted: ``halves_spread``, how
far apart the fastest steps of the first and the second half of the rounds are
(relative; :attr:`experiments.backends.Measurement.halves_spread`); ``repeat_spread``,
how far a second measurement of the same placements, in new sessions right after the
first, landed from it (``remeasured_ms``; relative); and ``other_cores``, the cores
other programs kept busy while the workload was measured
(:class:`experiments.machine_load.OtherLoad`).  On this shared 2-core machine a second
program slows every kernel through the whole measurement, which no statistic over
repeats removes: an error beside a large ``other_cores`` says more about the machine
than about the model.

``calibration_spread``: the calibration is run twice, back to back, and each row
predicted with both; the relative difference of the two predictions (the first one is
the row's ``predicted_ms``) says how far the calibration itself moves a prediction
(``--no-calibration-spread``: once).

``--backend tensorflow`` measures on TensorFlow's runtime instead
(:mod:`experiments.tf_backend`: its ``tf.distribute.Server`` processes, one per task),
calibrated by the same micro-benchmarks run on TensorFlow
(:func:`experiments.tf_calibrate.calibrate_tensorflow`) and predicted with the runtime
model that calibration records (not :data:`experiments.backends.RUNTIME_SIM`).

``--workloads`` takes the names of :data:`experiments.compare_placers.WORKLOADS` and of
the workload registry, the latter as ``name[:option=value]...`` at small sizes by default
(:data:`SMALL_OPTIONS`), e.g. ``mixed_random:seed=3`` (random graphs mixing MatMuls,
elementwise ops on million-element arrays and tiny ops).

Two cost models predict: ``static`` (the roofline on the calibrated cluster) and
``measured`` (per-op kernel times, the fastest over the traced steps of ONE profiling
placement, the simple placer's, plus the executor's dispatch overhead between kernels
measured in those traces, :func:`core.costs.dispatch_gaps`; applied to the other
placements; the rows of the simple placement itself are replays and are left out of
the summary).  Placers that chose the same placement share one measurement (``same_as``
names the placer whose identical placement was timed).  The report gives each row's
relative error, the median and max per cost model, and the ranking agreement: among
pairs of placements of one workload whose measured times differ by more than 10%, how
many the prediction orders the same way.

The simulator runs with :data:`experiments.backends.RUNTIME_SIM`: each task's Python
dispatcher serves one op at a time (``serial_dispatch``), and the thread that ends an op
goes on with the ops it made ready, taking the freed cores before a waiting thread of its
process can (``inline_elements``, the executor's own limit for cheap ops): how the
executor's threads share one interpreter lock.  The interpreters of the server
processes, the kernels, the copies of crossing tensors and the step's fixed costs all
take the host's cores (``dispatch_cores``, ``copies_on_cores``, ``step_costs_on_cores``).

Placement quality (:func:`placement_quality`): per workload, whether the cost-model
placement ran faster than the simple and round-robin placements in both of their
measurements (``sim_vs_real_quality.csv``).

The re-placement loop (the whitepaper's): place with static costs (cost-model placer),
run, build a measured cost model from that run's traces, place again with it, keep the
new placement only if the simulator with the measured costs predicts it more than
``SPLIT_MARGIN`` (10%) faster (``proposal_kept``: :func:`keeps_proposal`; the placer's
own estimate is quicker and rougher), then time both placements side by side.

``--threads 1`` gives every device one inter-op and one intra-op thread (in the model and
on the servers): one-core devices, the setting where splitting a model over tasks can pay
on a small machine (one task alone then uses one core).

Server processes run with ``OPENBLAS_NUM_THREADS`` = ``--blas-threads`` (default 1):
with the BLAS library's default (one spinning thread per core in each of 3 processes on
2 cores) a GEMM waits for a descheduled BLAS thread for a whole time slice and a 0.1 ms
MatMul takes ~10 ms as soon as two processes compute at once (measured; see the README).
Likewise ``OMP_WAIT_POLICY`` = ``--omp-wait-policy`` (default ``passive``) for numba's
OpenMP threads, in the servers and in this process (see
:func:`experiments.backends.server_env`).

    python -m experiments.sim_vs_real --help
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":  # before numpy loads BLAS: this process calibrates the kernels
    _argv = sys.argv[1:]
    _blas = _argv[_argv.index("--blas-threads") + 1] if "--blas-threads" in _argv else "1"
    if _blas != "0":
        os.environ.setdefault("OPENBLAS_NUM_THREADS", _blas)
    _omp = _argv[_argv.index("--omp-wait-policy") + 1] if "--omp-wait-policy" in _argv else "passive"
    if _omp:
        os.environ.setdefault("OMP_WAIT_POLICY", _omp)

import contextlib
import itertools
import math
import time

import pandas as pd
from tqdm import tqdm

import placers
import runtime
from core.costs import MeasuredCostModel, StaticCostModel
from experiments.backends import (RUNTIME_SIM, calibrate_this_host, describe_calibration,
                                  measure_placements, predict, relative_spread,
                                  runtime_cluster_spec, server_env, this_host_cluster)
from experiments.compare_placers import (SPLIT_MARGIN, WORKLOADS, placer_name,
                                         placers_to_compare)
from experiments.machine_load import wait_until_quiet
from experiments import cli
from experiments import workloads as registry
from experiments.report import Run, finish, print_table

__all__ = ["main", "run", "summarise", "ranking_agreement", "keeps_proposal",
           "placement_quality", "build_workload", "workload_spec", "SMALL_OPTIONS"]
DEFAULT_WORKLOADS = ["mlp", "rnn", "transformer", "data_parallel"]
PLACERS = ("simple", "round_robin", "round_robin_vars", "cost_model")
COLUMNS = ["workload", "placer", "cost_model", "predicted_ms", "measured_ms", "rel_error",
           "median_ms", "after_other_ms", "halves_spread", "remeasured_ms", "repeat_spread",
           "calibration_spread", "other_cores", "replay", "same_as", "calibration"]
LOOP_COLUMNS = ["workload", "static_ms", "measured_cost_ms", "ratio", "same_placement",
                "static_predicted_ms", "proposal_kept", "static_under_measured_ms",
                "measured_cost_predicted_ms"]


#: The registry's workloads at sizes whose steps take milliseconds here (the options
#: given on the command line override them); a name also in
#: :data:`experiments.compare_placers.WORKLOADS` means that one, when given no options.
SMALL_OPTIONS: dict[str, dict] = {
    "mlp_forward": {"batch": 32, "layers": 4, "width": 256},
    "random_dag": {"num_ops": 200, "size": 64},
    "mixed_random": {"ops": 40},
    "resnet50": {"batch": 1, "image_size": 32, "base_width": 8, "blocks": (1, 1, 1, 1),
                 "num_classes": 10},
    "inception_v3": {"batch": 1, "image_size": 75, "depth_multiplier": 0.1, "blocks": 3,
                     "num_classes": 10},
    "gnmt": {"batch": 4, "layers": 2, "hidden": 64, "vocab": 500, "src_len": 5,
             "tgt_len": 5},
    "transformer": {"batch": 2, "seq_len": 8, "layers": 1, "d_model": 64, "d_ff": 128,
                    "heads": 4, "vocab": 500},
}


def workload_spec(spec: str) -> str:
    """An argparse type: ``spec`` if it names a workload, that of
    :data:`experiments.compare_placers.WORKLOADS` or of the registry
    (``name[:option=value]...``, :func:`experiments.workloads.registry.parse_spec`).

    >>> workload_spec("mixed_random:seed=2")
    'mixed_random:seed=2'
    """
    import argparse
    try:
        name, _ = registry.parse_spec(spec)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if name not in WORKLOADS and name not in registry.names():
        raise argparse.ArgumentTypeError(
            f"unknown workload {name!r}; known: {sorted(set(WORKLOADS) | set(registry.names()))}")
    return spec


def build_workload(spec: str):
    """The workload ``spec`` names (see :func:`workload_spec`): the experiments' own
    size of a name of :data:`experiments.compare_placers.WORKLOADS` given without
    options, else the registry's builder with :data:`SMALL_OPTIONS` and the spec's
    options over them.

    >>> build_workload("mixed_random:ops=12:matmul=32:elements=4096").name
    'mixed_random'
    """
    name, options = registry.parse_spec(spec)
    if name in WORKLOADS and not options:
        return WORKLOADS[name]()
    return registry.get(name, **{**SMALL_OPTIONS.get(name, {}), **options})


def server_config(threads: int = 0) -> runtime.SessionConfig | None:
    """The servers' and sessions' config for ``threads`` per device (0: the default)."""
    if not threads:
        return None
    return runtime.SessionConfig(inter_op_parallelism_threads=threads,
                                 intra_op_parallelism_threads=threads)


def ranking_agreement(rows: pd.DataFrame, threshold: float = 0.10) -> tuple[int, int]:
    """``(pairs, agreeing)``: pairs of placements of one workload whose measured step
    times differ by more than ``threshold`` (relative to the smaller), and how many of
    them the predictions order the same way."""
    pairs = agree = 0
    for _, group in rows.groupby("workload"):
        for (_, a), (_, b) in itertools.combinations(group.iterrows(), 2):
            lo, hi = sorted((a.measured_ms, b.measured_ms))
            if hi <= lo * (1 + threshold):
                continue
            pairs += 1
            if (a.measured_ms < b.measured_ms) == (a.predicted_ms < b.predicted_ms):
                agree += 1
    return pairs, agree


def summarise(frame: pd.DataFrame) -> pd.DataFrame:
    """Per cost model: rows, median and max |relative error|, ranking agreement (the
    replayed rows are left out); and what bounds those figures from below: the median
    ``halves_spread`` and ``repeat_spread`` of the measurements (how far the two halves
    of one measurement's rounds, and a second measurement, landed from it), the median
    ``calibration_spread`` of the predictions (how far a second calibration, right after
    the first, moved them) and the most cores other programs took while a workload was
    measured."""
    out = []
    for cm, group in frame[~frame.replay].groupby("cost_model", sort=False):
        err = group.rel_error.abs()
        pairs, agree = ranking_agreement(frame[frame.cost_model == cm])
        out.append({"cost_model": cm, "rows": len(group), "median_abs_error": err.median(),
                    "max_abs_error": err.max(), "rows_within_15pct": int((err <= 0.15).sum()),
                    "ranked_pairs": pairs, "ranked_same": agree,
                    "median_halves_spread": group.halves_spread.median(),
                    "median_repeat_spread": group.repeat_spread.median(),
                    "median_calibration_spread": group.calibration_spread.median(),
                    "max_other_cores": group.other_cores.max()})
    return pd.DataFrame(out)


#: The placers the cost-model placer is held against (issue "Experiments": it should
#: beat them on the model-parallel workloads).
BASELINES = ("simple", "round_robin")


def placement_quality(frame: pd.DataFrame, baselines=BASELINES) -> pd.DataFrame:
    """Per workload: does the cost-model placement run faster than each baseline's?

    From the static rows of ``frame`` (each placement measured twice, in separate
    sessions: ``measured_ms`` and ``remeasured_ms``), per baseline ``b``: its two
    figures beside the cost-model placement's, and ``beats_<b>``: ``"yes"`` when the
    cost-model placement was faster in both measurements, ``"no"`` when slower in both,
    ``"tie"`` when it is the same placement (``same_as``), else ``"unclear"`` (the
    machine's noise decides).  Workloads without a cost_model row are left out.

    >>> rows = pd.DataFrame({"workload": ["w"] * 3, "cost_model": ["static"] * 3,
    ...     "placer": ["simple", "round_robin", "cost_model"], "same_as": ["", "", ""],
    ...     "measured_ms": [10.0, 20.0, 8.0], "remeasured_ms": [9.0, 21.0, 9.5]})
    >>> placement_quality(rows).iloc[0][["beats_simple", "beats_round_robin"]].tolist()
    ['unclear', 'yes']
    """
    static = frame[frame.cost_model == "static"]
    out = []
    for wname, group in static.groupby("workload", sort=False):
        by = {row.placer: row for row in group.itertuples()}
        cm = by.get("cost_model")
        if cm is None:
            continue
        row = {"workload": wname, "cost_model_ms": cm.measured_ms,
               "cost_model_again_ms": cm.remeasured_ms}
        for b in baselines:
            base = by.get(b)
            if base is None:
                continue
            row[f"{b}_ms"], row[f"{b}_again_ms"] = base.measured_ms, base.remeasured_ms
            faster = [cm.measured_ms < base.measured_ms, cm.remeasured_ms < base.remeasured_ms]
            if (cm.same_as or cm.placer) == (base.same_as or base.placer):  # one placement
                verdict = "tie"
            elif all(faster):
                verdict = "yes"
            elif not any(faster):
                verdict = "no"
            else:
                verdict = "unclear"
            row[f"beats_{b}"] = verdict
        out.append(row)
    return pd.DataFrame(out)


def _measure_all(wname, w, cluster, local, repeats, placer_names, config,
                 measure=measure_placements, sim_config=RUNTIME_SIM, again_cluster=None
                 ) -> tuple[list, dict]:
    """The rows of one workload: each placer's placement measured twice and predicted
    with ``cluster`` (``sim_config``: the simulator's settings), and with
    ``again_cluster``, a second calibration, for ``calibration_spread`` (NaN without)."""
    placer_objs = placers_to_compare(placer_names, w)
    placements = {pname: placer_objs[pname].place(w.graph, cluster) for pname in placer_names}
    # Placers that chose the same placement share one measurement: timing it twice would
    # only rank the machine's noise.
    first: dict = {}
    for pname, p in placements.items():
        first.setdefault(p, pname)
    distinct = {name: p for p, name in first.items()}
    timed = measure(w, distinct, local, repeats=repeats, traced=3, config=config)
    # The same placements timed again, in new sessions: how far one measurement of the
    # machine lands from the next (two halves of one measurement's rounds agree better
    # than that: the machine's speed drifts over seconds).
    again = measure(w, distinct, local, repeats=repeats, traced=1, config=config)
    measured = {pname: timed[first[p]] for pname, p in placements.items()}

    def predicted(p, calibrated, cost_model):
        return predict(w, p, calibrated, cost_model, sim_config).step_time

    def spread(p, value, cost_model, with_overheads=False):
        if again_cluster is None:
            return math.nan
        other = cost_model.with_overheads(again_cluster) if with_overheads else again_cluster
        return relative_spread(value, predicted(p, other, cost_model))

    rows = []
    for pname, p in placements.items():
        m, m2 = measured[pname], again[first[p]]
        value = predicted(p, cluster, StaticCostModel())
        rows.append({"workload": wname, "placer": pname, "cost_model": "static",
                     "predicted_ms": value * 1e3, "measured_ms": m.step_time * 1e3,
                     "median_ms": m.median * 1e3,
                     "after_other_ms": min(m.after_other, default=math.nan) * 1e3,
                     "halves_spread": m.halves_spread,
                     "remeasured_ms": m2.step_time * 1e3,
                     "repeat_spread": relative_spread(m.step_time, m2.step_time),
                     "calibration_spread": spread(p, value, StaticCostModel()),
                     "other_cores": max(m.other_cores, m2.other_cores), "replay": False,
                     "same_as": "" if first[p] == pname else first[p]})
    profile = "simple" if "simple" in measured else next(iter(measured))
    measured_cost = profile_cost_model(measured[profile].traces, w.graph)
    profiled = measured_cost.with_overheads(cluster)
    for row in list(rows):
        p = placements[row["placer"]]
        value = predicted(p, profiled, measured_cost)
        rows.append({**row, "cost_model": f"measured({profile})",
                     "predicted_ms": value * 1e3, "replay": p == placements[profile],
                     "calibration_spread": spread(p, value, measured_cost, True)})
    return rows, {"placements": placements, "measured": measured}


def profile_cost_model(traces, graph) -> MeasuredCostModel:
    """The measured cost model of a profiling run: each op's fastest kernel time over
    ``traces`` (the undisturbed time, as the measured steps are the fastest) plus the
    executor's dispatch overhead measured between kernels
    (:func:`core.costs.dispatch_gaps`), static estimates on the calibrated cluster for
    ops the run did not have."""
    return MeasuredCostModel.from_traces(traces, fallback=StaticCostModel(), dispatch=True,
                                         graph=graph, statistic=min)


def keeps_proposal(proposed: float, static: float, margin: float = SPLIT_MARGIN) -> bool:
    """Whether the re-placement loop takes the measured-cost placement: only if the
    simulator (with the measured costs) puts it more than ``margin`` below the static
    placement, the same margin as the cost-model placer's for a split (a smaller gain
    is within the model's error: inception_large's proposal, simulated 9% faster, ran
    24% slower; 2026-11-26, ``--threads 1``).

    >>> keeps_proposal(0.85, 1.0), keeps_proposal(0.95, 1.0)
    (True, False)
    """
    return proposed < static * (1.0 - margin)


def _replacement_loop(wname, w, cluster, local, repeats, first, config,
                      measure=measure_placements, sim_config=RUNTIME_SIM) -> dict:
    """Place with static costs, run, measure a cost model from that run, place again;
    then time both placements side by side."""
    static_p = first["placements"].get("cost_model") or placers.CostModelPlacer(
        runtime="interpreter", split_margin=SPLIT_MARGIN).place(w.graph, cluster)
    profile = first["measured"].get("cost_model")
    if profile is None:
        profile = measure(w, {"static": static_p}, local, repeats=1, traced=3,
                          config=config)["static"]
    measured_cost = profile_cost_model(profile.traces, w.graph)
    profiled = measured_cost.with_overheads(cluster)
    proposed = placers.CostModelPlacer(cost_model=measured_cost, runtime="interpreter",
                                       split_margin=SPLIT_MARGIN).place(
        w.graph, profiled)
    # The placer proposes, the simulator with the measured costs decides: the placer's
    # quick estimate preferred a placement of rnn_large that the simulator put at
    # 88 ms and that ran in 88 ms, against 72 ms for the static one (two runs, 18-23%
    # slower).
    static_under = predict(w, static_p, profiled, measured_cost, sim_config).step_time
    proposed_under = predict(w, proposed, profiled, measured_cost, sim_config).step_time
    kept = keeps_proposal(proposed_under, static_under)
    again = proposed if kept else static_p
    both = measure(w, {"static": static_p, "again": again}, local, repeats=repeats,
                   config=config)
    same = all(static_p[op.name] == again[op.name] for op in w.graph.get_operations()
               if op.name in static_p and op.name in again)
    return {"workload": wname, "static_ms": both["static"].step_time * 1e3,
            "measured_cost_ms": both["again"].step_time * 1e3,
            "ratio": both["again"].step_time / both["static"].step_time, "same_placement": same,
            "static_predicted_ms": predict(w, static_p, cluster, None,
                                           sim_config).step_time * 1e3,
            "proposal_kept": kept,
            "static_under_measured_ms": static_under * 1e3,
            "measured_cost_predicted_ms": proposed_under * 1e3}


#: Timed steps per placement.  The steps are milliseconds, so many cost little: on the
#: quiet machine 31 repeats took the default run from 37 to 35 s (the calibration and
#: the servers' start dominate) and brought the median ``halves_spread`` from 12-14% (7
#: repeats, two runs) to 3-8% (31 repeats, three runs, 2026-11-23).  101: a step's
#: times spread widely here (mlp on one task: fastest 3.06 ms, median 4.25 over 300
#: steps, simulated 2.98), and the fastest of 31 still lands well above the undisturbed
#: step (3.9 ms in that case, 23-35% over the prediction in three runs; the fastest of
#: 101, 3.5 ms: 1% over, 2026-11-26).
DEFAULT_REPEATS = 101


def run(workloads, *, repeats: int = DEFAULT_REPEATS, quick: bool = False, placer_names=PLACERS,
        blas_threads: int = 1, threads: int = 0, loop: bool = True, progress: bool = True,
        omp_wait_policy: str = "passive", quiet_below: float | None = None,
        calibrate_each: bool = True, backend: str = "runtime", calibration_spread: bool = True):
    """``(rows, loop_rows, calibrations)``: the comparison, the re-placement loop, and
    the calibrations as ``(cluster, figures)`` pairs (each row's ``calibration`` column
    is its index there).  ``threads``: inter-op and intra-op threads of every device, in
    the model and on the servers (0: the host's cores).  ``quiet_below``: before
    calibrating and before each workload, wait (up to two minutes) until other programs
    keep fewer cores than this busy (:func:`experiments.machine_load.wait_until_quiet`).
    ``calibrate_each`` (default): calibrate again right before each workload, so that
    a workload's predictions and measurements see the machine seconds apart, not
    minutes (its speed drifts: ``experiments.calibration_spread``; one run's 16 rows
    predicted with the first workload's calibration: median error 15.9%, max 74%; each
    with its own: 8.9%, max 37%).  ``backend``: what measures, ``"runtime"`` (ours, on a
    :class:`runtime.LocalCluster`, predicted with :data:`RUNTIME_SIM` on the calibration
    of :func:`experiments.backends.calibrate_this_host`) or ``"tensorflow"``
    (TensorFlow's runtime on its servers, :mod:`experiments.tf_backend`, predicted on
    the calibration of TensorFlow's runtime, :func:`experiments.tf_calibrate.
    calibrate_tensorflow`, with the runtime model it records).  ``calibration_spread``
    (default): calibrate twice, back to back, each time, and give each row the relative
    difference of its two predictions; the first calibration predicts.  ``workloads``:
    names as :func:`build_workload` takes them."""
    def wait():
        if quiet_below is not None:
            wait_until_quiet(quiet_below)

    env = server_env(blas_threads, omp_wait_policy)
    config = server_config(threads)

    def calibrate_once():
        if backend == "tensorflow":
            from experiments.tf_calibrate import calibrate_tensorflow
            return calibrate_tensorflow(this_host_cluster(threads), quick=quick, env=env)
        return calibrate_this_host(this_host_cluster(threads), env=env, config=config,
                                   quick=quick)

    def calibrated():
        wait()
        first = calibrate_once()
        return first, (calibrate_once() if calibration_spread else None)

    # Ours is predicted with its runtime model named; TensorFlow's with the one its
    # calibration recorded.
    sim_config = RUNTIME_SIM if backend == "runtime" else None
    calibrations, agains = [], []
    rows, loop_rows = [], []
    for i, wname in enumerate(tqdm(workloads, desc="workloads",
                                   disable=not progress or len(workloads) < 2)):
        if calibrate_each or not i:
            first, second = calibrated()
            calibrations.append(first)
            agains.append(second)
        cluster, again = calibrations[-1][0], agains[-1] and agains[-1][0]
        w = build_workload(wname)
        # A fresh cluster per workload: variables outlive sessions and names repeat.
        wait()
        with _measuring_cluster(backend, cluster, env, config) as (local, measure):
            found, first_run = _measure_all(wname, w, cluster, local, repeats, placer_names,
                                            config, measure, sim_config, again)
            for row in found:
                row["calibration"] = len(calibrations) - 1
            rows += found
            if loop:
                loop_rows.append(_replacement_loop(wname, w, cluster, local, repeats, first_run,
                                                   config, measure, sim_config))
    frame = pd.DataFrame(rows)
    if not frame.empty:
        frame["rel_error"] = (frame.predicted_ms - frame.measured_ms) / frame.measured_ms
        frame = frame[COLUMNS]
    loop_frame = pd.DataFrame(loop_rows, columns=LOOP_COLUMNS)
    for (_, figures), again in zip(calibrations, agains):
        if again is not None:
            figures["again"] = again  # (cluster, figures) of the second calibration
    return frame, loop_frame, calibrations


@contextlib.contextmanager
def _measuring_cluster(backend: str, cluster, env: dict, config):
    """``(servers, measure)`` of ``backend``: started server processes and the function
    that times placements on them (``measure_placements``'s signature)."""
    if backend == "runtime":
        with runtime.LocalCluster(runtime_cluster_spec(cluster), env=env, config=config) as local:
            yield local, measure_placements
        return
    from experiments.tf_backend import TFLocalCluster, measure_on_tensorflow

    def measure(w, placements, servers, *, repeats, traced=1, config=None):
        return measure_on_tensorflow(w, placements, cluster, servers, repeats=repeats,
                                     traced=traced)
    with TFLocalCluster(cluster, env=env) as servers:
        yield servers, measure


def _plot(frame: pd.DataFrame):
    from experiments.plots import predicted_vs_measured
    return predicted_vs_measured(frame, predicted="predicted_ms", measured="measured_ms",
                                 label="cost_model")


def main(argv=None):
    parser = cli.make_parser(
        "python -m experiments.sim_vs_real", __doc__.split("\n\n")[0], "workloads", "placers",
        "repeats", "calibrate", "plot",
        defaults={"workloads": DEFAULT_WORKLOADS, "placers": list(PLACERS),
                  "repeats": DEFAULT_REPEATS},
        choices={"calibrate": ["full", "quick"]},
        types={"placers": placer_name, "workloads": workload_spec},
        helps={"repeats": "timed steps per placement",
               "workloads": "names of experiments.compare_placers.WORKLOADS or of the "
                            "workload registry (experiments.workloads.names()), the latter "
                            "as name[:option=value]... (small sizes by default: "
                            "sim_vs_real.SMALL_OPTIONS)",
               "placers": "any registered placer name (placers.names()) or round_robin_vars",
               "plot": "also save a PNG of predicted vs measured"})
    parser.add_argument("--no-loop", action="store_true", help="skip the re-placement loop")
    parser.add_argument("--blas-threads", type=int, default=1,
                        help="OPENBLAS_NUM_THREADS of the server processes (0: the library's "
                             "default, one thread per core)")
    parser.add_argument("--omp-wait-policy", default="passive",
                        help="OMP_WAIT_POLICY of numba's OpenMP threads, in the servers and "
                             "here ('': the library's default, spinning)")
    parser.add_argument("--threads", type=int, default=0,
                        help="inter-op and intra-op threads of every device, in the model and "
                             "on the servers (0: the host's cores; 1: one-core devices, where "
                             "model parallelism across tasks can pay)")
    parser.add_argument("--calibrate-once", action="store_true",
                        help="calibrate once for all workloads (default: again right before "
                             "each, as the machine's speed drifts over minutes)")
    parser.add_argument("--backend", choices=["runtime", "tensorflow"], default="runtime",
                        help="what measures: our runtime's server processes (runtime) or "
                             "TensorFlow's (tensorflow: needs tensorflow installed)")
    parser.add_argument("--no-calibration-spread", action="store_true",
                        help="calibrate once, not twice back to back (calibration_spread "
                             "is then empty)")
    parser.add_argument("--quiet-below", type=float, default=None, metavar="CORES",
                        help="before calibrating and before each workload, wait (up to 2 "
                             "minutes) until other programs keep fewer than CORES cores busy")
    args = cli.parse(parser, argv)
    with Run("sim_vs_real", args, out=args.out, argv=argv) as report:
        frame = _report(report, args)
    return finish(report, frame)


def _report(report: Run, args) -> pd.DataFrame:
    t0 = time.perf_counter()
    frame, loop_frame, calibrations = run(
        args.workloads, repeats=args.repeats, quick=args.calibrate == "quick",
        placer_names=args.placers,
        blas_threads=args.blas_threads, threads=args.threads,
        omp_wait_policy=args.omp_wait_policy, quiet_below=args.quiet_below,
        loop=not args.no_loop, calibrate_each=not args.calibrate_once,
        backend=args.backend, calibration_spread=not args.no_calibration_spread)
    print()
    for i, (_, figures) in enumerate(calibrations):
        label = "calibration" if len(calibrations) == 1 else f"calibration {i}"
        print(f"{label}: {describe_calibration(figures)}")
        if "again" in figures:
            print(f"{label} again: {describe_calibration(figures['again'][1])}")
    print_table(frame, "predicted vs measured step time (ms); rel_error = (pred - meas) / meas")
    summary = summarise(frame)
    print_table(summary, "summary (replayed rows left out)")
    quality = placement_quality(frame)
    if not quality.empty:
        print_table(quality, "placement quality: the cost-model placement against the "
                             "baselines, measured twice (ms)")
    if not loop_frame.empty:
        print_table(loop_frame, "re-placement loop: cost-model placer with static costs, then "
                                "with costs measured from its run (measured step ms)")
    print(f"saved {report.save_table(frame, 'sim_vs_real')}")
    if not loop_frame.empty:
        print(f"saved {report.save_table(loop_frame, 'sim_vs_real_loop')}")
    report.save_table(summary, "sim_vs_real_summary")
    if not quality.empty:
        report.save_table(quality, "sim_vs_real_quality")
    report.summary = {"by_cost_model": summary.to_dict("records")}
    # The calibrated clusters, so that the measured rows can be predicted again later
    # (another cost model, another version of the simulator) without measuring again:
    # sim_vs_real_cluster.json for one, else sim_vs_real_cluster_<i>.json for the rows
    # whose ``calibration`` is i.
    # The second calibrations (calibration_spread) beside them, as <name>_again.json.
    for i, (cluster, figures) in enumerate(calibrations):
        name = "sim_vs_real_cluster" + (f"_{i}" if len(calibrations) > 1 else "")
        cluster_path = report.path(f"{name}.json")
        cluster.save(cluster_path)
        print(f"saved {cluster_path}")
        if "again" in figures:
            figures["again"][0].save(report.path(f"{name}_again.json"))
    if args.plot:
        print(f"saved {report.save_figure(_plot(frame), 'sim_vs_real')}")
    print(f"took {time.perf_counter() - t0:.0f} s")
    return frame


if __name__ == "__main__":
    main()
