"""Benchmark: the literature's models at full size (batch 32), built, placed and simulated.

Per model (``experiments.workloads``: resnet50, inception_v3, gnmt, transformer): ops,
parameters (beside Keras' counts where Keras has the model), forward GFLOPs per example
(the op table's flops of the ops the loss needs, over the batch), build time and peak
memory (tracemalloc, a second build), the time each placer takes on the first preset
(the 8-GPU DGX-1 by default), and the simulated step (``sim.simulate``, static cost
model) on each GPU preset with each placement: the placers' and the model's expert
placement.  A placement the
simulator finds out of memory shows ``OOM``; a placer that fails shows its error's
class instead of a time.

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
from experiments import cli
from experiments.report import Run, finish, print_table

__all__ = ["MODELS", "KERAS_PARAMETERS", "SMALL", "build_row", "bench", "main"]

MODELS = ("resnet50", "inception_v3", "gnmt", "transformer")

#: tf.keras.applications (tensorflow 2.21, weights=None, 1000 classes): all weights,
#: trainable weights, as :func:`keras_parameters` counts them (``--keras`` recounts).
KERAS_PARAMETERS = {"resnet50": (25_636_712, 25_583_592), "inception_v3": (23_851_784, 23_817_352)}

_KERAS_MODELS = {"resnet50": "ResNet50", "inception_v3": "InceptionV3"}


def keras_parameters(name: str) -> tuple[int, int]:
    """(all, trainable) weights of Keras' model ``name`` (``weights=None``, 1000 classes),
    counted with TensorFlow itself (imported here: the ``tensorflow`` extra)."""
    import numpy as np
    import tensorflow as tf_keras  # noqa: F401  (the real TensorFlow, not core)
    model = getattr(tf_keras.keras.applications, _KERAS_MODELS[name])(weights=None, classes=1000)
    count = lambda weights: int(sum(np.prod(v.shape) for v in weights))  # noqa: E731
    return count(model.weights), count(model.trainable_weights)

#: Small sizes for a quick run (``--small``): graphs of the same structure.
SMALL = {
    "resnet50": dict(image_size=32, num_classes=10, base_width=4, blocks=(1, 1, 1, 1)),
    "inception_v3": dict(image_size=75, num_classes=10, depth_multiplier=0.05, blocks=2),
    "gnmt": dict(layers=2, hidden=16, vocab=20, src_len=4, tgt_len=4),
    "transformer": dict(seq_len=4, layers=1, d_model=16, d_ff=32, heads=2, vocab=11),
}

#: Placers left out by default: ``function`` needs a function (the expert placement is
#: that placer given the model's device function); ``optimal``'s integer program finds
#: no solution within its time limit at these sizes (it raises OptimalLimitError after
#: a minute per model and cluster), so it runs only when named.
NOT_BY_DEFAULT = ("function", "optimal")


def _placer_names(default: bool = True) -> list[str]:
    """The placers to benchmark besides the expert placement."""
    return [name for name in placers.names()
            if name != "function" and not (default and name in NOT_BY_DEFAULT)]


#: Options of the placers whose default budget is too large for full-size models.
PLACER_OPTIONS = {"search": {"seconds": 30.0}}


def _place(w, placer_name: str, cluster, options=PLACER_OPTIONS):
    """(placement or None, seconds, error class name or None)."""
    t0 = time.perf_counter()
    try:
        if placer_name == "expert":
            placement = w.expert_placement(cluster)
        else:
            kwargs = dict(options.get(placer_name, {}))
            if placer_name == "search" and w.expert is not None:
                # Started from the model's expert placement too (the contract:
                # never worse than the best of the heuristics and the expert).
                kwargs["expert"] = w.expert_placement(cluster)
            placement = placers.get(placer_name, **kwargs).place(w.graph, cluster)
    except Exception as e:  # noqa: BLE001 - a placer's failure is a result of the benchmark
        return None, time.perf_counter() - t0, type(e).__name__
    return placement, time.perf_counter() - t0, None


def forward_flops(w) -> float:
    """FLOPs of the ops the loss needs (the forward pass, from the op table)."""
    total = 0.0
    for op in ops_needed([w.loss.op]):
        ins, outs = [t.spec for t in op.inputs], [t.spec for t in op.outputs]
        total += op.op_def.flops(ins, outs, op.attrs)
    return total


def build_row(name: str, options: dict, references=KERAS_PARAMETERS) -> tuple[dict, object]:
    """Build model ``name`` twice (timed, then under tracemalloc); its table row, with
    the Keras parameter counts of ``references`` at full size."""
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
    keras_all, keras_trainable = (references.get(name, (math.nan, math.nan)) if full_size
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


def bench(models, batch: int, presets: list[str], placer_names: list[str], small: bool = False,
          keras: bool = False):
    """(per-model table, per model x preset x placement simulated step table); with
    ``keras``, the Keras references are counted now with TensorFlow."""
    rows, sims = [], []
    references = ({name: keras_parameters(name) for name in models if name in _KERAS_MODELS}
                  if keras else KERAS_PARAMETERS)
    for name in models:
        options = {"batch": batch, **(SMALL[name] if small else {})}
        row, w = build_row(name, options, references)
        for preset in presets:
            cluster = Cluster.preset(preset)
            for placer_name in placer_names + ["expert"]:
                placement, seconds, error = _place(w, placer_name, cluster)
                if preset == presets[0]:
                    row[f"place_{placer_name}_s"] = error or seconds
                sims.append({"model": name, "preset": preset, "placement": placer_name,
                             "place_s": seconds, "gpus_used": math.nan if error else
                             len({d for d in placement.values() if "GPU" in d}),
                             "step_ms": error or _simulate_ms(w, placement, cluster)})
        rows.append(row)
        del w
    return pd.DataFrame(rows), pd.DataFrame(sims)


def main(argv=None) -> tuple[pd.DataFrame, pd.DataFrame]:
    parser = cli.make_parser("python -m experiments.bench_models", __doc__.split("\n\n")[0],
                             "placers", defaults={"placers": _placer_names()},
                             choices={"placers": _placer_names(default=False)})
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=workloads.names(),
                        metavar="NAME", help=f"models; any of: {', '.join(workloads.names())}")
    parser.add_argument("--batch", type=cli.positive_int, default=32, help="the models' batch")
    presets = ["dgx1-v100"] + [p for p in Cluster.presets() if p != "dgx1-v100"]
    parser.add_argument("--presets", nargs="+", default=presets, choices=Cluster.presets(),
                        metavar="NAME", help=f"GPU presets (placement times on the first); any "
                                             f"of: {', '.join(Cluster.presets())}")
    parser.add_argument("--small", action="store_true",
                        help="small sizes of each model (a quick check of the script)")
    parser.add_argument("--keras", action="store_true",
                        help="count Keras' parameters with TensorFlow now (the tensorflow extra)")
    args = cli.parse(parser, argv)
    with Run("bench_models", args, out=args.out, argv=argv) as run:
        models, sims = bench(args.models, args.batch, args.presets, args.placers, args.small,
                             args.keras)
        size = "small sizes" if args.small else "full size"
        print_table(models, f"models at {size}, batch {args.batch}: build, parameters, "
                            f"placement time on {args.presets[0]}")
        wide = sims.pivot_table(index=["model", "placement"], columns="preset",
                                values="step_ms", aggfunc="first").reset_index()
        print_table(wide, "simulated step (ms) per GPU preset and placement")
        print(f"saved {run.save_table(models, 'bench_models')} and "
              f"{run.save_table(sims, 'bench_models_sim')}")
    finish(run, models)
    return models, sims


if __name__ == "__main__":
    main()
