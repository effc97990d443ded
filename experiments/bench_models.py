"""Benchmark: the literature's models at full size (batch 32), built, placed and simulated.

Per model (``experiments.workloads``: resnet50, inception_v3, gnmt, transformer): ops,
parameters (beside Keras' counts where Keras has the model), forward GFLOPs per example
(the op table's flops of the ops the loss needs, over the batch), build time and peak
memory (tracemalloc, a second build), the time each placer takes on an 8-GPU DGX-1
preset, and the simulated step (``sim.simulate``, static cost model) on each GPU preset
with each placement: the placers' and the model's expert placement.  A placement the
simulator finds out of memory shows ``OOM``.

    python -m experiments.bench_models --help
"""

from __future__ import annotations

import math
import time
import tracemalloc

import pandas as pd

import placers
from core.cluster import Cluster
from core.graph import ops_needed
from experiments import workloads
from experiments.report import print_table, results_parser, save_table

__all__ = ["MODELS", "KERAS_PARAMETERS", "SMALL", "build_row", "bench", "main"]

MODELS = ("resnet50", "inception_v3", "gnmt", "transformer")

#: tf.keras.applications (tensorflow 2.21, weights=None, 1000 classes): all weights,
#: trainable weights.
KERAS_PARAMETERS = {"resnet50": (25_636_712, 25_583_592), "inception_v3": (23_851_784, 23_817_352)}

#: Small sizes for a quick run (``--small``): graphs of the same structure.
SMALL = {
    "resnet50": dict(image_size=32, num_classes=10, base_width=4, blocks=(1, 1, 1, 1)),
    "inception_v3": dict(image_size=75, num_classes=10, depth_multiplier=0.05, blocks=2),
    "gnmt": dict(layers=2, hidden=16, vocab=20, src_len=4, tgt_len=4),
    "transformer": dict(seq_len=4, layers=1, d_model=16, d_ff=32, heads=2, vocab=11),
}

def _placer_names() -> list[str]:
    """The placers benchmarked besides the expert placement (``function`` needs a
    function: the expert placement is that placer given the model's device function)."""
    return [name for name in placers.names() if name != "function"]


def forward_flops(w) -> float:
    """FLOPs of the ops the loss needs (the forward pass, from the op table)."""
    total = 0.0
    for op in ops_needed([w.loss.op]):
        ins, outs = [t.spec for t in op.inputs], [t.spec for t in op.outputs]
        total += op.op_def.flops(ins, outs, op.attrs)
    return total


def build_row(name: str, options: dict) -> tuple[dict, object]:
    """Build model ``name`` twice (timed, then under tracemalloc); its table row."""
    t0 = time.perf_counter()
    w = workloads.get(name, **options)
    build_s = time.perf_counter() - t0
    del w
    tracemalloc.start()
    w = workloads.get(name, **options)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    batch = options.get("batch", 32)
    full_size = not options.keys() - {"batch"}
    keras_all, keras_trainable = (KERAS_PARAMETERS.get(name, (math.nan, math.nan)) if full_size
                                  else (math.nan, math.nan))
    row = {"model": name, "ops": len(w.graph.get_operations()), "parameters": w.parameters(),
           "keras_parameters": keras_all, "trainable": w.parameters(trainable_only=True),
           "keras_trainable": keras_trainable,
           "fwd_GFLOPs_per_example": forward_flops(w) / batch / 1e9,
           "build_s": build_s, "build_peak_MiB": peak / 2**20}
    return row, w


def _simulate_ms(w, placement, cluster) -> float | str:
    from sim import OutOfMemory, simulate
    try:
        return simulate(w.graph, placement, cluster, fetches=w.fetches).step_time * 1e3
    except OutOfMemory:
        return "OOM"


def bench(models, batch: int, presets: list[str], placer_names: list[str], small: bool = False):
    """(per-model table, per model x preset x placement simulated step table)."""
    rows, sims = [], []
    place_cluster = Cluster.preset("dgx1-v100")
    for name in models:
        options = {"batch": batch, **(SMALL[name] if small else {})}
        row, w = build_row(name, options)
        for placer_name in placer_names + ["expert"]:
            t0 = time.perf_counter()
            if placer_name == "expert":
                w.expert_placement(place_cluster)
            else:
                placers.get(placer_name).place(w.graph, place_cluster)
            row[f"place_{placer_name}_s"] = time.perf_counter() - t0
        rows.append(row)
        for preset in presets:
            cluster = Cluster.preset(preset)
            for placer_name in placer_names + ["expert"]:
                placement = (w.expert_placement(cluster) if placer_name == "expert"
                             else placers.get(placer_name).place(w.graph, cluster))
                sims.append({"model": name, "preset": preset, "placement": placer_name,
                             "gpus_used": len({d for d in placement.values() if "GPU" in d}),
                             "step_ms": _simulate_ms(w, placement, cluster)})
        del w
    return pd.DataFrame(rows), pd.DataFrame(sims)


def main(argv=None) -> tuple[pd.DataFrame, pd.DataFrame]:
    parser = results_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=workloads.names())
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--presets", nargs="+", default=Cluster.presets(), choices=Cluster.presets())
    parser.add_argument("--placers", nargs="+", default=_placer_names(), choices=_placer_names())
    parser.add_argument("--small", action="store_true",
                        help="small sizes of each model (a quick check of the script)")
    args = parser.parse_args(argv)
    models, sims = bench(args.models, args.batch, args.presets, args.placers, args.small)
    size = "small sizes" if args.small else "full size"
    print_table(models, f"models at {size}, batch {args.batch}: build, parameters, placement time "
                        f"on dgx1-v100")
    wide = sims.pivot_table(index=["model", "placement"], columns="preset", values="step_ms",
                            aggfunc="first").reset_index()
    print_table(wide, "simulated step (ms) per GPU preset and placement")
    print(f"saved {save_table(models, 'bench_models', args.out)} and "
          f"{save_table(sims, 'bench_models_sim', args.out)}")
    return models, sims


if __name__ == "__main__":
    main()
