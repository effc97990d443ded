"""Predict saved runs again with today's simulator, against their measurements.

A change to the simulator's model is kept only if it predicts better on graphs it was
not fitted on; a new run of :mod:`experiments.sim_vs_real` answers that with new
measurements, whose own noise (a repeat spread of several percent, a calibration that
moves with the machine's speed) is as large as most changes.  Every run saves what it
measured (``sim_vs_real.csv``) and the clusters its rows were predicted on
(``sim_vs_real_cluster*.json``), so the same measured steps can be predicted again
with the code as it is now: a paired comparison, with nothing measured twice.  So does
every run of :mod:`experiments.sim_vs_inprocess` (``sim_vs_inprocess.csv`` and
``calibration_0.json``).

For each static-cost row of each sim_vs_real run (the measured-cost rows need the run's
traces, which are not saved), the workload is built again, the row's placer places it
on the row's calibrated cluster (the placers are deterministic), and the simulator
predicts it as :mod:`experiments.sim_vs_real` did: with
:data:`experiments.backends.RUNTIME_SIM` for our runtime, with the runtime model the
cluster records for TensorFlow's.  Each row of a sim_vs_inprocess run is predicted on
its first calibration with every op on the CPU, as the in-process session placed it
on a machine without a GPU (a run made with a GPU is skipped: its session's placement
is not saved), with the run's inter-op threads and left-out mechanism.  The table
gives the saved and the new prediction and error per row; the summary, per run and
over all runs, the median and largest |error| of both, how many rows moved and how
many moved closer to their measurement, and the placement pairs ranked as measured
(:func:`experiments.sim_vs_real.ranking_agreement`).

    python -m experiments.repredict results/sim_vs_real            # every run below
    python -m experiments.repredict results/sim_vs_real/20261128T070059Z
    python -m experiments.repredict results                        # both scripts' runs
    python -m experiments.repredict results --what-if "cpu.op_overhead*=0.5"

``--what-if`` predicts every row on its run's clusters with calibrated figures changed
(:mod:`experiments.what_if`; each row still placed on the saved cluster, as it was
measured): how much of the error one figure could explain, checked on every saved
run before a model change is written.

A row whose new prediction equals the saved one was not moved by whatever changed since
(``moved`` is False); the placers and the workloads must be those of the run for the
comparison to mean anything, so a run whose placement of a row changed since shows
as moved too: read the commit of each run (its ``run.json``) beside the table.
"""

from __future__ import annotations

import ast
import json
import math
import time
from pathlib import Path

import pandas as pd

import sim
from core.cluster import Cluster, InvalidCluster
from core.costs import StaticCostModel
from core.placement import Placement
from experiments import cli
from experiments.backends import RUNTIME_SIM, predict
from experiments.compare_placers import placers_to_compare
from experiments.report import Run, finish, print_table
from experiments.sim_vs_inprocess import with_inter_op_threads, without
from experiments.sim_vs_real import build_workload, ranking_agreement
from experiments.what_if import apply_changes, parse_change

__all__ = ["main", "run_folders", "repredict_run", "summarise"]

COLUMNS = ["run", "backend", "workload", "placer", "measured_ms", "saved_predicted_ms",
           "predicted_ms", "saved_rel_error", "rel_error", "moved", "closer"]


#: The scripts whose runs can be predicted again, by the table each run saves.
TABLES = {"sim_vs_real": "sim_vs_real.csv", "sim_vs_inprocess": "sim_vs_inprocess.csv"}


def run_folders(paths) -> list[Path]:
    """The sim_vs_real and sim_vs_inprocess run folders at or below each of ``paths``
    (a folder holding the script's table and ``run.json``), sorted by path; a path with
    none raises FileNotFoundError naming it."""
    found = []
    for path in map(Path, paths):
        here = sorted({p.parent for table in TABLES.values() for p in path.rglob(table)
                       if (p.parent / "run.json").exists()})
        if not here:
            raise FileNotFoundError(f"no sim_vs_real or sim_vs_inprocess run (its table and "
                                    f"run.json) at or below {path}")
        found += here
    return sorted(set(found))


def _arguments(record: dict) -> dict:
    """A run record's arguments (older records hold them as a dict's repr)."""
    args = record.get("arguments") or {}
    return ast.literal_eval(args) if isinstance(args, str) else dict(args)


def _cluster(folder: Path, calibration) -> Cluster:
    """The calibrated cluster of a run's rows of ``calibration`` (one file when the run
    calibrated once, else one per index)."""
    single = folder / "sim_vs_real_cluster.json"
    if single.exists():
        return Cluster.load(single)
    return Cluster.load(folder / f"sim_vs_real_cluster_{int(calibration)}.json")


def _row(folder: Path, backend: str, workload: str, placer: str, measured: float,
         saved: float, new: float) -> dict:
    old_error, error = (saved - measured) / measured, (new - measured) / measured
    moved = not math.isclose(new, saved, rel_tol=1e-6)
    return {"run": folder.name, "backend": backend, "workload": workload, "placer": placer,
            "measured_ms": measured, "saved_predicted_ms": saved, "predicted_ms": new,
            "saved_rel_error": old_error, "rel_error": error, "moved": moved,
            "closer": moved and abs(error) < abs(old_error)}


def repredict_run(folder: Path | str, changes=()) -> pd.DataFrame:
    """The rows of the sim_vs_real or sim_vs_inprocess run in ``folder`` (the static-cost
    rows of a sim_vs_real run), each predicted again (:data:`COLUMNS`); with
    ``changes`` (:class:`experiments.what_if.Change`), on the run's clusters so edited
    (each row still placed as it was measured: on the saved cluster)."""
    folder = Path(folder)
    record = json.loads((folder / "run.json").read_text())
    if (folder / TABLES["sim_vs_inprocess"]).exists():
        return _repredict_inprocess(folder, record, changes)
    backend = _arguments(record).get("backend", "runtime")
    config = RUNTIME_SIM if backend == "runtime" else None
    saved = pd.read_csv(folder / "sim_vs_real.csv")
    saved = saved[saved.cost_model == "static"]
    if "calibration" not in saved:
        saved = saved.assign(calibration=0)
    rows = []
    for (wname, calibration), group in saved.groupby(["workload", "calibration"], sort=False):
        cluster = _cluster(folder, calibration)
        edited = apply_changes(cluster, changes)
        w = build_workload(wname)
        chosen = placers_to_compare(list(group.placer), w)
        for row in group.itertuples():
            placement = chosen[row.placer].place(w.graph, cluster)
            new = predict(w, placement, edited, StaticCostModel(), config).step_time * 1e3
            rows.append(_row(folder, backend, wname, row.placer, row.measured_ms,
                             row.predicted_ms, new))
    return pd.DataFrame(rows, columns=COLUMNS)


def _repredict_inprocess(folder: Path, record: dict, changes=()) -> pd.DataFrame:
    """The rows of a sim_vs_inprocess run, predicted again as
    :func:`experiments.sim_vs_inprocess.run` predicted them (its first calibration)."""
    if (record.get("machine") or {}).get("gpus"):
        raise ValueError("a run on a machine with a GPU: its session's placement is not saved")
    args = _arguments(record)
    threads, mechanism = args.get("inter_op_threads") or 0, args.get("without")
    cluster = with_inter_op_threads(without(Cluster.load(folder / "calibration_0.json"),
                                            mechanism), threads)
    cluster = apply_changes(cluster, changes)
    cpu = next(d for d in cluster.devices if d.is_cpu).name
    rows = []
    for row in pd.read_csv(folder / TABLES["sim_vs_inprocess"]).itertuples():
        w = build_workload(row.workload)
        placement = Placement({op.name: cpu for op in w.graph.get_operations()})
        new = sim.simulate(w.graph, placement, cluster, fetches=w.fetches).step_time * 1e3
        rows.append(_row(folder, "in-process", row.workload, "-", row.measured_ms,
                         row.predicted_ms, new))
    return pd.DataFrame(rows, columns=COLUMNS)


def summarise(table: pd.DataFrame) -> pd.DataFrame:
    """Per run and over all (``run`` "all"): rows, the median and largest |error| saved
    and now, the rows moved and moved closer, and the pairs of placements whose
    measured steps differ by more than 10% ranked as measured, saved and now."""
    def one(name, group):
        pairs, saved_same = ranking_agreement(group.assign(predicted_ms=group.saved_predicted_ms))
        _, same = ranking_agreement(group)
        return {"run": name, "rows": len(group),
                "saved_median_abs_error": group.saved_rel_error.abs().median(),
                "median_abs_error": group.rel_error.abs().median(),
                "saved_max_abs_error": group.saved_rel_error.abs().max(),
                "max_abs_error": group.rel_error.abs().max(),
                "moved": int(group.moved.sum()), "closer": int(group.closer.sum()),
                "ranked_pairs": pairs, "saved_ranked_same": saved_same, "ranked_same": same}
    out = [one(name, group) for name, group in table.groupby("run", sort=True)]
    if len(out) > 1:
        # (pairs are compared within a run: the same workload of two runs is two cases)
        total = one("all", table)
        total["ranked_pairs"] = sum(r["ranked_pairs"] for r in out)
        total["saved_ranked_same"] = sum(r["saved_ranked_same"] for r in out)
        total["ranked_same"] = sum(r["ranked_same"] for r in out)
        out.append(total)
    return pd.DataFrame(out)


def main(argv=None):
    parser = cli.make_parser("python -m experiments.repredict", __doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", metavar="RUN",
                        help="sim_vs_real or sim_vs_inprocess run folders, or folders to "
                             "search for them")
    parser.add_argument("--what-if", action="append", default=[], metavar="CHANGE",
                        help="predict on the runs' clusters with a figure changed: "
                             "KIND.FIELD=VALUE or KIND.FIELD*=FACTOR, KIND one of cpu, gpu, "
                             "task, host, link (e.g. cpu.op_overhead*=0.5); repeatable")
    args = cli.parse(parser, argv)
    try:
        changes = [parse_change(text) for text in args.what_if]
    except ValueError as e:
        parser.error(str(e))
    with Run("repredict", args, out=args.out, argv=argv) as report:
        t0 = time.perf_counter()
        folders = run_folders(args.runs)
        tables, skipped = [], []
        for folder in folders:
            try:
                tables.append(repredict_run(folder, changes))
            except (InvalidCluster, FileNotFoundError, KeyError, ValueError) as e:
                # (a run saved by another version of the lab: its files do not load)
                skipped.append(folder)
                print(f"skipped {folder}: {type(e).__name__}: {e}")
        if not tables:
            raise SystemExit(f"none of the {len(folders)} run(s) could be predicted again")
        table = pd.concat(tables, ignore_index=True)
        summary = summarise(table)
        print_table(table, "saved runs predicted again (ms); rel_error = (pred - meas) / meas")
        print_table(summary, "summary: saved predictions against today's"
                    + (f" with {', '.join(map(str, changes))}" if changes else ""))
        print(f"saved {report.save_table(table, 'repredict')}")
        report.save_table(summary, "repredict_summary")
        report.summary = {"runs": len(tables), "skipped": [str(f) for f in skipped],
                          **summary.iloc[-1].to_dict()}
        print(f"took {time.perf_counter() - t0:.0f} s")
    return finish(report, table)


if __name__ == "__main__":
    main()
