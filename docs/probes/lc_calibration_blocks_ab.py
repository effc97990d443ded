"""Run from the project root: `python docs/probes/lc_calibration_blocks_ab.py`.

Issue 20 §3, paired look at the distributed calibration's blocks
(``docs/probes/lc_calibration_blocks_probe.py`` has the results): ``experiments.
sim_vs_real``'s default run (``--no-loop --repeats 31 --calibrate-once``, its
calibrations taking the distributed figures in :data:`experiments.backends.
DISTRIBUTED_BLOCKS` blocks); then each static row predicted, on the same
measurements, with each calibration's cluster (``new``: the median of the blocks),
with its first block's figures alone (``old``: one block, as before) and with the
fastest block's (``min``), for both calibrations of the run.  Writes the rows and the
clusters under /work/scratch/lc5/ab_<time>/ (``AB_OUT``: elsewhere)."""

import json
import os
import statistics
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as experiments.sim_vs_real runs
os.environ.setdefault("OMP_WAIT_POLICY", "passive")
sys.path.insert(0, os.getcwd())

from core.costs import StaticCostModel  # noqa: E402
from experiments.backends import RUNTIME_SIM, predict  # noqa: E402
from experiments.sim_vs_real import (DEFAULT_WORKLOADS, PLACERS, build_workload,  # noqa: E402
                                     placers_to_compare, run, summarise)
from runtime.calibrate import combine_blocks, with_distributed_figures  # noqa: E402


def variants(cluster, figures) -> dict:
    """The calibration's own cluster, its first block's and its fastest block's."""
    cpu = {"crossing_cpu": figures["crossing_cpu"]}
    model = cluster.runtime_model
    return {"new": cluster,
            "old": with_distributed_figures(cluster, {**figures["blocks"][0], **cpu}, model),
            "min": with_distributed_figures(cluster, {**combine_blocks(figures["blocks"], min),
                                                      **cpu}, model)}


def main():
    out = os.path.join(os.environ.get("AB_OUT", "/work/scratch/lc5"),
                       f"ab_{time.strftime('%H%M%S')}")
    os.makedirs(out)
    frame, _, calibrations = run(DEFAULT_WORKLOADS, repeats=31, loop=False,
                                 calibrate_each=False, progress=False)
    frame.to_csv(f"{out}/sim_vs_real.csv", index=False)
    first, figures = calibrations[0]
    clusters = {}
    for label, (cluster, found) in (("first", (first, figures)), ("again", figures["again"])):
        for name, variant in variants(cluster, found).items():
            clusters[f"{label}_{name}"] = variant
            variant.save(f"{out}/{label}_{name}.json")
    static = frame[frame.cost_model == "static"]
    errors = {name: [] for name in clusters}
    built = {}
    for row in static.itertuples():
        if row.workload not in built:
            w = build_workload(row.workload)
            built[row.workload] = (w, placers_to_compare(PLACERS, w))
        w, placers = built[row.workload]
        placement = placers[row.placer].place(w.graph, first)
        line = []
        for name, cluster in clusters.items():
            error = predict(w, placement, cluster, StaticCostModel(),
                            RUNTIME_SIM).step_time * 1e3 / row.measured_ms - 1
            errors[name].append(abs(error))
            line.append(f"{name} {error:+.0%}")
        print(f"  {row.workload:14s} {row.placer:17s} meas {row.measured_ms:7.3f} "
              f"spread {row.repeat_spread:.0%}  " + "  ".join(line))
    summary = {name: round(statistics.median(v), 4) for name, v in errors.items()}
    print("median |error|:", summary, "median repeat spread:",
          round(static.repeat_spread.median(), 4))
    print(summarise(frame).to_string())
    with open(f"{out}/ab.json", "w") as f:
        json.dump({"median_abs_error": summary,
                   "median_repeat_spread": static.repeat_spread.median()}, f)
    print("saved", out)


if __name__ == "__main__":
    main()
