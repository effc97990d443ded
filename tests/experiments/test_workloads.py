import pytest

import placers
from core.cluster import Cluster
from core.graph import ops_needed
from experiments.workloads import (data_parallel_step, inception_training_step, mlp_forward,
                                   mlp_training_step, random_layered_dag, rnn_training_step,
                                   transformer_training_step)

SMALL = {
    "mlp": lambda: mlp_training_step(batch=4, layers=2, width=8, inputs=8, outputs=2),
    "mlp_forward": lambda: mlp_forward(batch=4, layers=2, width=8),
    "rnn": lambda: rnn_training_step(batch=2, steps=3, layers=2, hidden=4, inputs=3),
    "inception": lambda: inception_training_step(batch=2, width=8, blocks=2),
    "transformer": lambda: transformer_training_step(seq=4, d_model=8, heads=2, blocks=1),
    "dp_sync": lambda: data_parallel_step(workers=2, ps_tasks=2, batch=2, layers=2, width=4),
    "dp_async": lambda: data_parallel_step(workers=2, ps_tasks=1, batch=2, layers=2, width=4,
                                           synchronous=False),
}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_workloads_build_and_place(name):
    w = SMALL[name]()
    w.graph.validate()
    spec = getattr(w, "cluster_spec", None)
    cluster = Cluster.from_spec(spec) if spec is not None else Cluster.single_host(gpus=1)
    for placer in (placers.SimplePlacer(), placers.CostModelPlacer()):
        p = placer.place(w.graph, cluster)
        p.validate(w.graph, cluster, fetches=w.fetches)
    assert w.init is not None and len(ops_needed(w.fetch_ops)) > 5
    if name != "mlp_forward":
        assert w.fetches[0].type == "NoOp"  # the step is the group of all updates


def test_training_steps_update_every_variable():
    import core as tf
    for name in ("rnn", "inception", "transformer", "dp_sync"):
        w = SMALL[name]()
        needed = {op.name for op in ops_needed(w.fetch_ops)}
        for v in tf.global_variables(w.graph):
            assert any(c.type == "AssignSub" and c.name in needed
                       for c in v.ref.consumers()), (name, v.name)


def test_data_parallel_shards_variables_over_ps_tasks():
    w = data_parallel_step(workers=3, ps_tasks=2, layers=2, width=4, batch=2)
    import core as tf
    tasks = [v.device for v in tf.global_variables(w.graph)]
    assert tasks.count("/job:ps/task:0") - tasks.count("/job:ps/task:1") in (0, 1)


def test_random_dag_is_deterministic():
    a = random_layered_dag(300, seed=3)
    b = random_layered_dag(300, seed=3)
    assert [(op.name, [t.name for t in op.inputs]) for op in a.get_operations()] == \
           [(op.name, [t.name for t in op.inputs]) for op in b.get_operations()]
