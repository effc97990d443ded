"""The placement benchmark: models x clusters x placers, the literature's table.

Per (model, cluster, placer): the simulated step, whether it runs out of memory (the
simulator records the allocation past a device's capacity and goes on), the peak memory
per device, the bytes crossing devices, the time placing took, and the speed-up over one
device, over the cost-model placer and over the model's expert placement.  A placer that
raises (no placement fits, ``optimal`` past its limit) has a row with its error.
Baechi's published figures (:mod:`experiments.baechi_published`, each with its source)
stand beside ours: its abstracts' bound beside its placers' rows on its models where
memory is constrained (their step at most 6.2% above the expert placements' in
TensorFlow: ``published_vs_expert_at_most``), and the measured steps of its PyTorch
repository (Inception-v3, batch 64, four GPUs, memory not constrained) in a table of
their own beside our rows of that setting (:func:`published_beside`).

Clusters: ``4gpu`` (one host, four default GPUs), any preset name
``core.cluster.Cluster.preset`` knows (with ``--gpu-memory-fraction``), and
``<cluster>:tight``, the same with each GPU given ``--tight-fraction`` of what the
model's step needs on one GPU, so no GPU holds it alone.  Models: the literature's
four from ``experiments.workloads.get(name)`` when that registry has them, else
stand-ins from :mod:`experiments.compare_placers`' workloads.

``--real``: the model-parallel cases at small size on this machine's real executor
(:func:`experiments.compare_placers.compare` with both backends on the ``ps_workers``
cluster): does the measured ranking of the placers agree with the simulated one
(Kendall's tau per workload)?

    python -m experiments.bench_placement --help
"""

from __future__ import annotations

import importlib
import inspect
import math
import time

import pandas as pd

import placers
import sim
from core.cluster import Cluster
from core.costs import tensor_bytes
from core.graph import ops_needed
from core.placement import Placement, transfers
from experiments.compare_placers import WORKLOADS, placer_name
from experiments import baechi_published, cli
from experiments.report import Run, finish, per_device_frame, print_table

__all__ = ["bench", "make_cluster", "load_model", "rank_agreement", "published_beside",
           "BAECHI"]

DEFAULT_PLACERS = ("simple", "round_robin", "cost_model", "m_topo", "m_etf", "m_sct", "search",
                   "optimal")
#: Baechi's published bound (see the module docstring), for the settings it measured.
BAECHI = {"source": baechi_published.SOURCES[baechi_published.BOUNDS[0]["source"]],
          "models": set(baechi_published.BOUNDS[0]["models"]) | {"inception"},
          "placers": set(baechi_published.BOUNDS[0]["placers"]),
          "vs_expert_at_most": baechi_published.BOUNDS[0]["vs_expert_at_most"]}
_FALLBACK_MODELS = {"inception_v3": "inception", "transformer": "transformer", "gnmt": "rnn",
                    "mlp": "mlp"}


def _registry():
    import experiments.workloads as workloads
    return workloads if hasattr(workloads, "names") and hasattr(workloads, "get") else None


#: The literature's models, when the workload registry has them.
MODELS = ("resnet50", "inception_v3", "gnmt", "transformer")


def model_names() -> list[str]:
    """The default models: the literature's four, else stand-ins of ours."""
    registry = _registry()
    if registry is not None and set(MODELS) <= set(registry.names()):
        return list(MODELS)
    return list(_FALLBACK_MODELS)


def load_model(name: str, **options):
    """The workload of a model name (the registry's, else a stand-in of ours)."""
    registry = _registry()
    if registry is not None and name in registry.names():
        return registry.get(name, **options)
    return WORKLOADS[_FALLBACK_MODELS.get(name, name)]()


def model_batch(name: str, options: dict | None = None) -> int | None:
    """The batch a model is built with: ``options``' ``batch``, else its builder's
    default (None: the model has no batch option)."""
    if options and "batch" in options:
        return options["batch"]
    registry = _registry()
    if registry is None or name not in registry.names():
        return None
    from experiments.workloads.registry import BUILDERS
    module, _, function = BUILDERS[name].partition(":")
    parameter = inspect.signature(getattr(importlib.import_module(module), function)) \
        .parameters.get("batch")
    return None if parameter is None else parameter.default


def expert_placement(workload, cluster) -> Placement | None:
    """The workload's expert placement on ``cluster``, if it has one."""
    if getattr(workload, "expert", None) is None:
        return None
    if hasattr(workload, "expert_placement"):
        return workload.expert_placement(cluster)
    return workload.expert(cluster)


def cluster_names() -> list[str]:
    """The default clusters: ``4gpu``, ``4gpu:tight`` and, where presets exist, the
    4-GPU preset and its tight variant."""
    names = ["4gpu", "4gpu:tight"]
    if hasattr(Cluster, "presets") and "pcie-1080ti-x4" in Cluster.presets():
        names += ["pcie-1080ti-x4", "pcie-1080ti-x4:tight"]
    return names


def make_cluster(name: str, workload, tight_fraction: float = 0.6,
                 gpu_memory_fraction: float | None = None) -> Cluster:
    """A cluster by name: ``4gpu`` (one host, four default GPUs) or a preset of
    ``Cluster.preset`` (with ``gpu_memory_fraction``); ``<name>:tight``: the same with
    each GPU given ``tight_fraction`` of what the workload's step needs on one GPU."""
    base, _, variant = name.partition(":")
    if variant not in ("", "tight"):
        raise ValueError(f"unknown cluster variant {variant!r} in {name!r} (known: tight)")
    if base == "4gpu":
        cluster = Cluster.single_host(gpus=4)
    elif hasattr(Cluster, "preset"):
        cluster = Cluster.preset(base, gpu_memory_fraction=gpu_memory_fraction)
    else:
        raise ValueError(f"unknown cluster {base!r}: 4gpu (no presets here yet)")
    if variant != "tight":
        return cluster
    gpu = next(d.name for d in cluster.devices if d.device_type == "GPU")
    one = sim.simulate(workload.graph,
                       Placement({op.name: gpu for op in workload.graph.get_operations()}),
                       cluster, fetches=workload.fetches, config=sim.SimConfig(record_oom=True))
    memory = int(max(one.peak_memory.values()) * tight_fraction)
    for d in cluster.devices:
        if d.device_type == "GPU":
            cluster = cluster.replace_device(d.name, memory_bytes=memory)
    return cluster


def _placer(name, workload, expert, options):
    kwargs = dict(options.get(name, {}))
    if name in ("m_topo", "m_etf", "m_sct", "search", "optimal"):
        kwargs["fetches"] = workload.fetch_ops
    if name == "search" and expert is not None:
        kwargs["expert"] = expert
    return placers.get(name, **kwargs)


def _row(model, cname, pname, workload, cluster, placement, seconds, error=None) -> dict:
    row = {"model": model, "cluster": cname, "placer": pname, "place_s": seconds}
    if placement is None:
        row.update(sim_step_ms=math.nan, oom=None, error=error)
        return row
    trace = sim.simulate(workload.graph, placement, cluster, fetches=workload.fetches,
                         config=sim.SimConfig(record_oom=True))
    step_ops = ops_needed(workload.fetch_ops)
    row.update(sim_step_ms=trace.step_time * 1e3, oom=bool(trace.oom_events),
               peak_MiB=max(trace.peak_memory.values(), default=0) / 2**20,
               _peak_by_device=trace.peak_memory,
               bytes_across=sum(tensor_bytes(t.tensor) for t in transfers(step_ops, placement)),
               devices=len({placement[op.name] for op in step_ops}), error="")
    return row


def bench(models, clusters, placer_names=DEFAULT_PLACERS, *, tight_fraction=0.6,
          gpu_memory_fraction=None, options=None, model_options=None) -> pd.DataFrame:
    """One row per (model, cluster, placer) plus ``expert`` where the model has one;
    speed-ups per (model, cluster) over ``simple`` (one device), ``cost_model`` and
    ``expert``, each where that row ran without running out of memory."""
    options = options or {}
    rows = []
    for model in models:
        workload = load_model(model, **(model_options or {}))
        batch = model_batch(model, model_options)
        for cname in clusters:
            cluster = make_cluster(cname, workload, tight_fraction, gpu_memory_fraction)
            setting = {"batch": batch, "gpus": sum(d.device_type == "GPU" for d in cluster.devices),
                       "memory_constrained": cname.endswith(":tight")
                       or gpu_memory_fraction is not None}
            first = len(rows)
            expert = expert_placement(workload, cluster)
            if expert is not None:
                rows.append(_row(model, cname, "expert", workload, cluster, expert, 0.0))
            for pname in placer_names:
                t0 = time.perf_counter()
                try:
                    placer = _placer(pname, workload, expert, options)
                    placement = placer.place(workload.graph, cluster)
                    error = None
                except (placers.PlacementError, placers.OptimalLimitError,
                        placers.SearchError) as e:
                    placement, error = None, f"{type(e).__name__}: {e}"[:160]
                rows.append(_row(model, cname, pname, workload, cluster, placement,
                                 time.perf_counter() - t0, error))
                if pname == "search" and placement is not None:
                    rows[-1]["search_evals_per_s"] = placer.stats["evals_per_second"]
            for row in rows[first:]:
                row.update(setting)
    frame = pd.DataFrame(rows)
    ok = frame["sim_step_ms"].where(frame["oom"] == False)  # noqa: E712 (None: no placement)
    for base, column in (("simple", "speedup_vs_one_device"),
                         ("cost_model", "speedup_vs_cost_model"), ("expert", "speedup_vs_expert")):
        ref = ok.where(frame["placer"] == base).groupby(
            [frame["model"], frame["cluster"]]).transform("max")
        frame[column] = ref / ok
    published = frame["placer"].isin(BAECHI["placers"]) & frame["model"].isin(BAECHI["models"]) \
        & frame["memory_constrained"]
    frame["published_vs_expert_at_most"] = published.map({True: BAECHI["vs_expert_at_most"],
                                                          False: math.nan})
    return frame


def published_beside(frame: pd.DataFrame) -> pd.DataFrame:
    """Baechi's measured steps (:data:`experiments.baechi_published.FIGURES`) beside the
    rows of :func:`bench` in their setting (model, batch, GPU count, memory not
    constrained; :func:`experiments.baechi_published.matches`): per placer (``simple``
    standing for their single GPU), our simulated step and speed-up over one device,
    and each published round's step and the speed-up derived from it.  Empty where no
    row has that setting."""
    names = {"single_gpu": "simple", "m_topo": "m_topo", "m_etf": "m_etf", "m_sct": "m_sct"}
    out = []
    for (model, cname), group in frame.groupby(["model", "cluster"], sort=False):
        first = group.iloc[0]
        if not baechi_published.matches(model, first.get("batch"), first.get("gpus"),
                                        bool(first.get("memory_constrained"))):
            continue
        for theirs, ours in names.items():
            mine = group[group["placer"] == ours]
            row = {"model": model, "cluster": cname, "placer": ours,
                   "sim_step_ms": mine["sim_step_ms"].iloc[0] if len(mine) else math.nan,
                   "speedup_vs_one_device": mine["speedup_vs_one_device"].iloc[0]
                   if len(mine) else math.nan}
            for r in (1, 2):
                step = next(f["step_ms"] for f in baechi_published.FIGURES
                            if f["round"] == r and f["placer"] == theirs)
                row[f"published_step_ms_round{r}"] = step
                row[f"published_speedup_round{r}"] = baechi_published.speedups(r)[theirs]
            row["published_source"] = "baechi-pytorch"
            out.append(row)
    return pd.DataFrame(out)


def rank_agreement(frame: pd.DataFrame) -> pd.DataFrame:
    """Per workload of a :func:`experiments.compare_placers.compare` frame with both
    backends: Kendall's tau between the simulated and the measured step of its placers
    (1: the same ranking), and whether both name the same best placer."""
    out = []
    for workload, group in frame.groupby("workload"):
        tau = group["sim_step_ms"].corr(group["real_step_ms"], method="kendall")
        out.append({"workload": workload, "placers": len(group), "kendall_tau": tau,
                    "same_best": group.loc[group.sim_step_ms.idxmin(), "placer"]
                    == group.loc[group.real_step_ms.idxmin(), "placer"]})
    return pd.DataFrame(out)


def _plot(frame: pd.DataFrame):
    """Per cluster, the simulated step of each model under each placer (bars)."""
    from experiments.plots import bars, figure

    clusters = list(dict.fromkeys(frame["cluster"]))
    fig = figure(figsize=(6 * len(clusters), 4))
    for i, cname in enumerate(clusters):
        bars(frame[frame.cluster == cname], group="model", bar="placer", value="sim_step_ms",
             ylabel="simulated step (ms, log scale)", log=True,
             title=f"{cname} (missing: no placement)", marked="oom",
             marked_label="out of memory",
             ax=fig.add_subplot(1, len(clusters), i + 1))
    return fig


def device_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows' peak memory per device, tidy: one row per (model, cluster, placer,
    device)."""
    parts = [per_device_frame({"model": r["model"], "cluster": r["cluster"],
                               "placer": r["placer"]},
                              {"peak_MiB": {d: b / 2**20 for d, b in r["_peak_by_device"].items()}})
             for r in frame.to_dict("records") if isinstance(r.get("_peak_by_device"), dict)]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def main(argv=None) -> pd.DataFrame:
    parser = cli.make_parser(
        "python -m experiments.bench_placement", __doc__.split("\n\n")[0], "placers",
        "repeats", "calibrate", "plot",
        defaults={"placers": list(DEFAULT_PLACERS), "repeats": 3, "calibrate": "none"},
        types={"placers": placer_name},
        helps={"repeats": "timed steps per placement (--real)",
               "calibrate": "--real: measure this machine first, so that the placers and "
                            "the simulator see it (none: default figures)",
               "plot": "also save bars of the simulated steps (PNG)"})
    parser.add_argument("--models", nargs="+", default=None, metavar="NAME",
                        help=f"models (default: {', '.join(model_names())})")
    parser.add_argument("--clusters", nargs="+", default=None, metavar="NAME",
                        help=f"clusters (default: {', '.join(cluster_names())})")
    parser.add_argument("--batch", type=cli.positive_int, default=None,
                        help="the models' batch (default: the registry's)")
    parser.add_argument("--tight-fraction", type=float, default=0.6,
                        help="<cluster>:tight: each GPU's memory as a fraction of the model's step "
                             "on one GPU")
    parser.add_argument("--gpu-memory-fraction", type=float, default=None,
                        help="presets: the GPUs' per-process memory fraction")
    parser.add_argument("--search-evals", type=cli.positive_int, default=200,
                        help="the search placer's simulated evaluations")
    parser.add_argument("--search-seconds", type=float, default=None,
                        help="the search placer's time limit")
    parser.add_argument("--dask", default=None, help="a Dask scheduler address for search")
    parser.add_argument("--optimal-seconds", type=float, default=30.0,
                        help="the optimal placer's time limit")
    parser.add_argument("--real", action="store_true",
                        help="also the model-parallel cases on this machine's real executor")
    parser.add_argument("--real-workloads", nargs="+", default=["rnn_large", "inception_large"],
                        metavar="NAME", help="the workloads of --real")
    args = cli.parse(parser, argv)
    with Run("bench_placement", args, out=args.out, argv=argv) as run:
        frame = _report(run, args)
    return finish(run, frame)


def _report(run: Run, args) -> pd.DataFrame:
    options = {"search": {"evaluations": args.search_evals, "seconds": args.search_seconds,
                          "scheduler": args.dask},
               "optimal": {"time_limit": args.optimal_seconds}}
    frame = bench(args.models or model_names(), args.clusters or cluster_names(), args.placers,
                  tight_fraction=args.tight_fraction,
                  gpu_memory_fraction=args.gpu_memory_fraction, options=options,
                  model_options={"batch": args.batch} if args.batch else None)
    devices = device_frame(frame)
    frame = frame.drop(columns=["_peak_by_device"], errors="ignore")
    print_table(frame, "placement benchmark (simulated; speed-ups: the reference's step over "
                       f"this row's; published: {BAECHI['source']})")
    print(f"saved {run.save_table(frame, 'bench_placement')}")
    print(f"saved {run.save_table(devices, 'bench_placement_devices')}")
    beside = published_beside(frame)
    if len(beside):
        setting = baechi_published.SETTING
        print_table(beside, "Baechi's measured steps beside ours (theirs: "
                            f"{setting['framework']}, {setting['gpus']} GPUs of "
                            f"{setting['gpu_memory']}, GPU type not stated, measured; ours: "
                            f"simulated; speed-ups over one device, theirs derived from their "
                            f"steps; source: {baechi_published.SOURCES['baechi-pytorch']})")
        print(f"saved {run.save_table(beside, 'bench_placement_published')}")
    if args.plot:
        print(f"saved {run.save_figure(_plot(frame), 'bench_placement')}")
    if args.real:
        from experiments.backends import (RUNTIME_SIM, calibrate_this_host, server_env,
                                          this_host_cluster)
        from experiments.compare_placers import compare
        cluster, config, figures = this_host_cluster(), None, "default figures"
        if args.calibrate != "none":  # so that the placers and the simulator see this machine
            cluster, _ = calibrate_this_host(cluster, env=server_env(1),
                                             quick=args.calibrate == "quick")
            config, figures = RUNTIME_SIM, "calibrated"
        real_placers = [p for p in args.placers if p not in ("optimal",)]
        measured = compare(args.real_workloads, cluster, ("sim", "runtime"),
                           repeats=args.repeats, sim_config=config, placer_names=real_placers)
        measured = measured[[c for c in measured if not c.startswith("_")]]
        agreement = rank_agreement(measured)
        print_table(measured[["workload", "placer", "sim_step_ms", "real_step_ms"]],
                    f"model-parallel cases on this machine ({figures})")
        print_table(agreement, "does the measured ranking agree with the simulated one?")
        print(f"saved {run.save_table(measured, 'bench_placement_real')}")
    return frame


if __name__ == "__main__":
    main()
