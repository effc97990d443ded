"""How repeatable is calibration?  The same machine calibrated several times in a row.

Every prediction the experiments compare with a measured step rests on one calibration
(:func:`experiments.backends.calibrate_this_host`: device rates, kernel costs, dispatch
cost per op, the fixed costs of a step across server processes, crossing costs).  On a
shared machine whose speed drifts, two calibrations minutes apart measure different
machines, and every prediction made from them moves with them.  This script calibrates
``--calibrations`` times back to back and reports:

- ``figures``: the headline figures of each calibration (dispatch cost per op, step and
  part overheads, crossing latency and bandwidth, the MatMul and Add kernels' fixed cost
  and factor on the roofline, the device's matmul rate and memory bandwidth, and the
  cores other programs kept busy), with a last row ``spread``: max / min - 1 per figure;
- ``predictions``: the step time the simulator predicts (``RUNTIME_SIM``, static costs)
  for each workload and placer under each calibration, with ``spread`` the same way.

- ``by figure``: which figures that spread comes from: per placement, the spread of
  its predictions when only one group of figures takes each calibration's values and
  the rest stay at the first calibration's (:func:`spread_by_figure`; the groups:
  :data:`FIGURE_GROUPS`).

No step is run: the placements are the placers' choices on the first calibration, so
only the calibration changes from one column to the next.  The ``spread`` of the
predictions is a floor under any comparison of one calibration's predictions with
measurements (:mod:`experiments.sim_vs_real`): a model that is exact for one
calibration is off by about that much for another.

    python -m experiments.calibration_spread --calibrations 4
"""

from __future__ import annotations

import os

if __name__ == "__main__":  # before numpy loads BLAS, as experiments.sim_vs_real does
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import time
from dataclasses import replace

import pandas as pd
from tqdm import tqdm

from core.cluster import Cluster
from core.costs import StaticCostModel
from experiments.backends import (RUNTIME_SIM, calibrate_this_host, predict, server_env,
                                  this_host_cluster)
from experiments import cli
from experiments.compare_placers import WORKLOADS, placer_name, placers_to_compare
from experiments.report import Run, finish, print_table
from experiments.sim_vs_real import DEFAULT_WORKLOADS, PLACERS, server_config

__all__ = ["main", "run", "headline_figures", "with_spread", "spread_by_figure",
           "with_figures_of", "FIGURE_GROUPS"]


def headline_figures(cluster, figures: dict) -> dict:
    """The figures of one calibration that predictions lean on most, in readable units."""
    device = next(d for d in cluster.devices if d.is_cpu)
    matmul, add = device.kernel_cost("MatMul"), device.kernel_cost("Add")
    return {"dispatch_us": figures["op_overhead"] * 1e6,
            "step_overhead_ms": figures["step_overhead"] * 1e3,
            "part_overhead_ms": figures["part_overhead"] * 1e3,
            "crossing_latency_ms": (figures["transfer_latency"] or 0.0) * 1e3,
            "crossing_GBps": (figures["transfer_bandwidth"] or 0.0) / 1e9,
            "matmul_fixed_us": matmul[0] * 1e6, "matmul_factor": matmul[1],
            "add_fixed_us": add[0] * 1e6, "add_factor": add[1],
            "matmul_GFLOPs": device.peak_flops / 1e9,
            "mem_GBps": device.mem_bandwidth / 1e9,
            "other_cores": figures["other_cores"]}


def with_spread(frame: pd.DataFrame, columns: list[str], label_column: str) -> pd.DataFrame:
    """``frame`` with a last row, labelled ``spread`` in ``label_column``: max / min - 1
    of each of ``columns`` (NaN where a column has no positive values).

    >>> with_spread(pd.DataFrame({"k": ["a", "b"], "x": [2.0, 3.0]}), ["x"], "k").x.tolist()
    [2.0, 3.0, 0.5]
    """
    spread = {label_column: "spread"}
    for c in columns:
        values = frame[c][frame[c] > 0]
        spread[c] = values.max() / values.min() - 1 if len(values) else float("nan")
    return pd.concat([frame, pd.DataFrame([spread])], ignore_index=True)


#: The groups of calibrated figures :func:`spread_by_figure` varies one at a time: what
#: each holds, and its fields on the CPU devices, the tasks or the host's memcpy links.
FIGURE_GROUPS = {
    "kernels": "the CPUs' kernel costs per op type and dispatch cost per op",
    "rates": "the CPUs' matmul rate, memory bandwidth and intra-op speed-up",
    "step": "the tasks' step and part overheads",
    "crossings": "the host's memcpy links: a crossing's latency, bandwidth, size costs",
}
_GROUP_FIELDS = {
    "kernels": ("devices", ("kernel_costs", "op_overhead")),
    "rates": ("devices", ("peak_flops", "mem_bandwidth", "bandwidth_curve", "intra_op_speedup")),
    "step": ("tasks", ("step_overhead", "part_overhead")),
    "crossings": ("links", ("latency", "bandwidth", "size_costs")),
}


def with_figures_of(base: Cluster, source: Cluster, group: str) -> Cluster:
    """``base`` with the figures of ``group`` (a key of :data:`FIGURE_GROUPS`) taken
    from ``source`` (a calibration of the same cluster)."""
    if group not in FIGURE_GROUPS:
        raise ValueError(f"unknown figure group {group!r}; known: {', '.join(FIGURE_GROUPS)}")
    part, fields = _GROUP_FIELDS[group]

    def taken(mine, theirs):
        return replace(mine, **{f: getattr(theirs, f) for f in fields})

    devices, tasks, links = base.devices, base.tasks, base.links
    if part == "devices":
        devices = [taken(d, source.device(d.name)) if d.is_cpu else d for d in devices]
    elif part == "tasks":
        tasks = [taken(t, source.task(t.job, t.index)) for t in tasks]
    else:
        links = {name: taken(link, source.links[name]) if link.kind == "memcpy" else link
                 for name, link in links.items()}
    return Cluster(base.hosts, tasks, devices, links, base.master, base.nvlink,
                   base.runtime_model)


def spread_by_figure(workloads: list[str], placer_names: list[str], clusters: list[Cluster]
                     ) -> pd.DataFrame:
    """Per workload and placer (placed on ``clusters[0]``): ``all``, the spread (max /
    min - 1) of its predicted step over ``clusters``, and per group of
    :data:`FIGURE_GROUPS` the spread when only that group's figures come from each
    cluster (the rest from the first)."""
    rows = []
    for wname in workloads:
        w = WORKLOADS[wname]()
        chosen = placers_to_compare(placer_names, w)
        for pname in placer_names:
            placement = chosen[pname].place(w.graph, clusters[0])

            def spread(variants):
                times = [predict(w, placement, c, StaticCostModel(), RUNTIME_SIM).step_time
                         for c in variants]
                return max(times) / min(times) - 1

            row = {"workload": wname, "placer": pname, "all": spread(clusters)}
            for group in FIGURE_GROUPS:
                row[group] = spread([with_figures_of(clusters[0], c, group) for c in clusters])
            rows.append(row)
    return pd.DataFrame(rows)


def run(calibrations: int, workloads: list[str], placer_names: list[str], *,
        threads: int = 0, quick: bool = False) -> tuple[pd.DataFrame, pd.DataFrame, list]:
    """``(figures, predictions, clusters)`` over ``calibrations`` calibrations in a row
    (see the module docstring; ``clusters``: the calibrated clusters); without the
    ``spread`` rows."""
    config = server_config(threads)
    clusters, rows = [], []
    for i in tqdm(range(calibrations), desc="calibrations"):
        t0 = time.perf_counter()
        cluster, figures = calibrate_this_host(this_host_cluster(threads), env=server_env(),
                                               config=config, quick=quick)
        clusters.append(cluster)
        rows.append({"calibration": str(i), "seconds": time.perf_counter() - t0,
                     **headline_figures(cluster, figures)})
    predictions = []
    for wname in workloads:
        w = WORKLOADS[wname]()
        chosen = placers_to_compare(placer_names, w)
        placements = {p: chosen[p].place(w.graph, clusters[0]) for p in placer_names}
        for pname, placement in placements.items():
            row = {"workload": wname, "placer": pname}
            for i, cluster in enumerate(clusters):
                row[f"cal{i}_ms"] = predict(w, placement, cluster, StaticCostModel(),
                                            RUNTIME_SIM).step_time * 1e3
            predictions.append(row)
    return pd.DataFrame(rows), pd.DataFrame(predictions), clusters


def main(argv=None):
    parser = cli.make_parser(
        "python -m experiments.calibration_spread", __doc__.split("\n\n")[0], "workloads",
        "placers", "calibrate",
        defaults={"workloads": DEFAULT_WORKLOADS, "placers": list(PLACERS)},
        choices={"workloads": list(WORKLOADS), "calibrate": ["full", "quick"]},
        types={"placers": placer_name},
        helps={"calibrate": "the calibrations' kind (quick: fewer and shorter "
                            "micro-benchmarks)",
               "placers": "placers to compare: any registered name (placers.names()) or "
                          "round_robin_vars"})
    parser.add_argument("--calibrations", type=int, default=4,
                        help="calibrations in a row (at least 2)")
    parser.add_argument("--threads", type=int, default=0,
                        help="inter-op and intra-op threads of every device (0: the host's cores)")
    args = cli.parse(parser, argv)
    if args.calibrations < 2:
        parser.error("--calibrations must be at least 2: a spread needs two of them")
    with Run("calibration_spread", args, out=args.out, argv=argv) as report:
        figures, predictions, by_figure = _report(args)
        for frame, name in ((figures, "calibration_spread"),
                            (predictions, "calibration_spread_predictions"),
                            (by_figure, "calibration_spread_by_figure")):
            print(f"saved {report.save_table(frame, name)}")
    finish(report, figures)
    return figures, predictions, by_figure


def _report(args):
    figures, predictions, clusters = run(args.calibrations, args.workloads, args.placers,
                                         threads=args.threads,
                                         quick=args.calibrate == "quick")
    by_figure = spread_by_figure(args.workloads, args.placers, clusters)
    figures = with_spread(figures, [c for c in figures.columns
                                    if c not in ("calibration", "seconds", "other_cores")],
                          "calibration")
    cal_columns = [c for c in predictions.columns if c.startswith("cal")]
    predictions["spread"] = predictions[cal_columns].max(axis=1) / predictions[cal_columns].min(axis=1) - 1
    print_table(figures, "calibrations in a row (spread = max / min - 1)")
    print_table(predictions, "predicted step (ms) of the same placements under each calibration")
    print(f"\nmedian spread of the predictions: {predictions.spread.median():.1%}, "
          f"max {predictions.spread.max():.1%}")
    print_table(by_figure, "spread of the predictions with one group of figures varying "
                           "(the rest the first calibration's): " + "; ".join(
                               f"{k}: {v}" for k, v in FIGURE_GROUPS.items()))
    medians = by_figure[["all", *FIGURE_GROUPS]].median()
    print("median over the placements: " + ", ".join(f"{k} {v:.1%}" for k, v in medians.items()))
    return figures, predictions, by_figure


if __name__ == "__main__":
    main()
