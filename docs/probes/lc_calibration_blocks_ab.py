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
import os, sys, time, json, statistics
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1"); os.environ.setdefault("OMP_WAIT_POLICY", "passive")
sys.path.insert(0, os.getcwd())
import pandas as pd
from core.costs import StaticCostModel
from experiments.sim_vs_real import run, summarise, DEFAULT_WORKLOADS, build_workload, placers_to_compare, PLACERS
from experiments.backends import predict, RUNTIME_SIM
from runtime.calibrate import with_distributed_figures, combine_blocks
out = os.path.join(os.environ.get("AB_OUT", "/work/scratch/lc5"), f"ab_{time.strftime('%H%M%S')}")
os.makedirs(out)
t0 = time.time()
frame, _, cals = run(DEFAULT_WORKLOADS, repeats=31, loop=False, calibrate_each=False, progress=False)
print("run took", round(time.time() - t0), "s")
frame.to_csv(f"{out}/sim_vs_real.csv", index=False)
(c1, f1) = cals[0]; (c2, f2) = f1["again"]
variants = {}
for label, (c, f) in (("first", (c1, f1)), ("again", (c2, f2))):
    old = with_distributed_figures(c, {**f["blocks"][0], "crossing_cpu": f["crossing_cpu"]}, c.runtime_model)
    med = with_distributed_figures(c, {**combine_blocks(f["blocks"], min), "crossing_cpu": f["crossing_cpu"]}, c.runtime_model)
    variants[f"{label}_new"], variants[f"{label}_old"], variants[f"{label}_min"] = c, old, med
    med.save(f"{out}/{label}_min.json")
    c.save(f"{out}/{label}_new.json"); old.save(f"{out}/{label}_old.json")
    print(label, "blocks:", [(round(b["step_overhead"]*1e6), round(b["part_overhead"]*1e6), round(b["transfer_latency"]*1e6), round(b["op_overhead"]*1e6, 2), round(b["between_kernels"]*1e6, 2)) for b in f["blocks"]])
static = frame[frame.cost_model == "static"]
errs = {k: [] for k in variants}
cache = {}
for row in static.itertuples():
    if row.workload not in cache:
        w = build_workload(row.workload); cache[row.workload] = (w, placers_to_compare(PLACERS, w))
    w, objs = cache[row.workload]
    p = objs[row.placer].place(w.graph, c1)
    line = []
    for k, c in variants.items():
        e = predict(w, p, c, StaticCostModel(), RUNTIME_SIM).step_time * 1e3 / row.measured_ms - 1
        errs[k].append(abs(e)); line.append(f"{k} {e:+.0%}")
    print(f"  {row.workload:14s} {row.placer:17s} meas {row.measured_ms:7.3f} spread {row.repeat_spread:.0%}  " + "  ".join(line))
summary = {k: round(statistics.median(v), 4) for k, v in errs.items()}
print("median |error|:", summary, "median repeat spread:", round(static.repeat_spread.median(), 4))
print(summarise(frame).to_string())
json.dump({"median_abs_error": summary, "median_repeat_spread": static.repeat_spread.median()}, open(f"{out}/ab.json", "w"))
print("saved", out)
