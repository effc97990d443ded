"""The literature's models (experiments.workloads: resnet50, inception_v3, gnmt,
transformer) and the workload registry: published sizes, expert placements, bad
options, and small sizes whose loss falls on the in-process runtime and a LocalCluster."""

from __future__ import annotations

import numpy as np
import pytest

import core as tf
from core.cluster import Cluster
from core.ops import OPS
from experiments import workloads
from experiments.workloads import UnknownWorkload

pytestmark = pytest.mark.skipif(
    not hasattr(tf, "nn") or "Conv2D" not in OPS or "BatchMatMulV2" not in OPS,
    reason="the models need the nn and math op families")

#: Small sizes of each model that run on this machine in a second or so per step.
SMALL = {
    "resnet50": dict(batch=4, image_size=32, num_classes=10, base_width=4, blocks=(1, 1, 1, 1),
                     learning_rate=0.01),
    "inception_v3": dict(batch=2, image_size=75, num_classes=10, depth_multiplier=0.05,
                         blocks=2, learning_rate=0.05),
    "gnmt": dict(batch=4, layers=2, hidden=16, vocab=20, src_len=4, tgt_len=4,
                 learning_rate=0.01),
    "transformer": dict(batch=4, seq_len=4, layers=1, d_model=16, d_ff=32, heads=2, vocab=11,
                        learning_rate=0.01),
}

#: tf.keras.applications.<Model>(weights=None, classes=1000) in tensorflow 2.21:
#: (all weights, trainable weights), counted with sum(np.prod(v.shape) for v in m.weights).
KERAS = {"resnet50": (25_636_712, 25_583_592), "inception_v3": (23_851_784, 23_817_352)}


def test_registry_names_the_models_and_the_old_workloads():
    assert {"resnet50", "inception_v3", "gnmt", "transformer", "mlp", "rnn",
            "inception_like", "transformer_like", "data_parallel", "random_dag"} <= set(workloads.names())
    with pytest.raises(UnknownWorkload) as err:
        workloads.get("resnet51")
    assert "resnet51" in str(err.value) and "resnet50" in str(err.value)
    assert workloads.get("rnn", batch=2, steps=2, layers=1, hidden=4, inputs=3).name == "rnn"


@pytest.mark.parametrize("name", sorted(KERAS))
def test_parameter_counts_equal_keras(name):
    w = workloads.get(name)
    assert (w.parameters(), w.parameters(trainable_only=True)) == KERAS[name]


def test_transformer_sizes_are_the_papers():
    """Table 3 of Vaswani et al.: base 65M, big 213M parameters (with a 37k vocabulary)."""
    for size, published in (("base", 65e6), ("big", 213e6)):
        layers, d, d_ff, _ = __import__("experiments.workloads.transformer",
                                        fromlist=["SIZES"]).SIZES[size]
        w = workloads.get("transformer", size=size)
        per_layer = 4 * d * d + 2 * d * d_ff + d_ff + d + 2 * 2 * d  # attention, ffn, 2 norms
        expected = 37000 * d + layers * per_layer + layers * (per_layer + 4 * d * d + 2 * d)
        assert w.parameters() == expected
        assert abs(w.parameters() - published) / published < 0.05
        big_consts = [op for op in w.graph.get_operations()
                      if op.type == "Const" and op.attrs["value"].nbytes > 1 << 20]
        assert big_consts == []  # the weights start from initializer ops, not arrays


@pytest.mark.parametrize("name, options, culprit", [
    ("gnmt", dict(layers=0), "layers"), ("gnmt", dict(layers=9), "layers"),
    ("gnmt", dict(batch=-1), "batch"), ("resnet50", dict(batch=-1), "batch"),
    ("resnet50", dict(blocks=(3, 0, 6, 3)), r"blocks\[1\]"), ("resnet50", dict(image_size=16), "image_size"),
    ("inception_v3", dict(image_size=64), "image_size"), ("inception_v3", dict(blocks=0), "blocks"),
    ("transformer", dict(size="huge"), "size"), ("transformer", dict(layers=0), "layers"),
    ("transformer", dict(d_model=10, heads=3), "heads"), ("transformer", dict(optimizer="lbfgs"), "optimizer"),
])
def test_bad_options_name_themselves(name, options, culprit):
    small = {k: v for k, v in SMALL[name].items() if k not in options}
    with pytest.raises(ValueError, match=culprit):
        workloads.get(name, **small, **options)


def _on(placement, prefix):
    """The devices of the ops whose name starts with ``prefix``."""
    return {d[-5:] for op, d in placement.items() if op.startswith(prefix)}


def test_gnmt_expert_is_a_layer_per_gpu():
    w = workloads.get("gnmt", **{**SMALL["gnmt"], "layers": 4})
    cluster = Cluster.preset("pcie-1080ti-x4")
    p = w.expert_placement(cluster)
    p.validate(w.graph, cluster, fetches=w.fetches)
    for i in range(4):
        assert _on(p, f"encoder/layer{i}/") == _on(p, f"decoder/layer{i}/") == {f"GPU:{i}"}
        assert _on(p, f"gradients/encoder/layer{i}/") == {f"GPU:{i}"}
    assert _on(p, "output/") == {"GPU:3"} and _on(p, "embeddings/") == {"GPU:0"}


def test_expert_placements_spread_the_models():
    cluster = Cluster.preset("dgx1-v100")
    for name in ("resnet50", "inception_v3", "transformer"):
        w = workloads.get(name, **SMALL[name])
        p = w.expert_placement(cluster)
        p.validate(w.graph, cluster, fetches=w.fetches)
        assert len({d for d in p.values() if "GPU" in d}) >= 2, name
    w = workloads.get("transformer", **{**SMALL["transformer"], "layers": 4})
    p = w.expert_placement(cluster)
    assert _on(p, "encoder/layer0/") == {"GPU:0"} and _on(p, "decoder/layer3/") == {"GPU:7"}


def test_expert_placement_simulates():
    from sim import simulate
    cluster = Cluster.preset("dgx1-v100")
    w = workloads.get("gnmt", **{**SMALL["gnmt"], "layers": 4})
    trace = simulate(w.graph, w.expert_placement(cluster), cluster, fetches=w.fetches)
    assert trace.step_time > 0


def _losses(session, w, steps):
    session.run(w.init)
    return [float(session.run([w.loss, *w.fetches])[0]) for _ in range(steps)]


@pytest.mark.parametrize("name", sorted(SMALL))
def test_small_models_learn_in_process(name):
    from runtime import Session
    w = workloads.get(name, **SMALL[name])
    with Session(graph=w.graph, cluster=Cluster.single_host()) as session:
        losses = _losses(session, w, 5)
    assert all(np.isfinite(losses)) and losses[-1] < losses[0], losses


def test_small_model_learns_on_a_local_cluster():
    """Ops spread over a ps and a worker task (round-robin): the optimizer's updates run
    beside their variables wherever those are, and tensors cross tasks."""
    import runtime
    w = workloads.get("transformer", **SMALL["transformer"])
    with runtime.LocalCluster({"ps": 1, "worker": 1}) as local:
        config = runtime.SessionConfig(placer="round_robin")
        with runtime.Session(local.target("worker", 0), graph=w.graph, config=config) as session:
            losses = _losses(session, w, 4)
            placement = session.placement
    assert losses[-1] < losses[0], losses
    applies = [op for op in w.graph.get_operations() if op.type == "ApplyAdam"]
    assert applies and all(placement[op.name] == placement[op.inputs[0].op.name] for op in applies)
    assert {d.split("/replica")[0] for d in placement.values()} == {"/job:ps", "/job:worker"}


def test_bench_models_small_run(tmp_path):
    from experiments import bench_models
    models, sims = bench_models.main(["--small", "--models", "transformer", "gnmt",
                                      "--presets", "dgx1-v100", "--placers", "simple",
                                      "--out", str(tmp_path)])
    assert list(models["model"]) == ["transformer", "gnmt"]
    assert (models["parameters"] > 0).all() and (models["fwd_GFLOPs_per_example"] > 0).all()
    assert {"place_simple_s", "place_expert_s", "build_s", "build_peak_MiB"} <= set(models.columns)
    assert set(sims["placement"]) == {"simple", "expert"}
    single = sims[sims["placement"] == "simple"]
    assert (single["gpus_used"] == 1).all() and (sims[sims["placement"] == "expert"]["gpus_used"] > 1).all()
    assert (tmp_path / "bench_models.csv").exists() and (tmp_path / "bench_models_sim.csv").exists()


def test_rnn_expert_is_a_layer_per_gpu():
    w = workloads.get("rnn", batch=2, steps=3, layers=3, hidden=4, inputs=3)
    cluster = Cluster.single_host(gpus=4)
    p = w.expert_placement(cluster)
    p.validate(w.graph, cluster, fetches=w.fetches)
    for i in range(3):
        assert _on(p, f"layer{i}/") == _on(p, f"gradients/layer{i}/") == {f"GPU:{i}"}
