"""Unit and property tests of the placers and of constraint resolution."""


import numpy as np
import pytest
from hypothesis import given, strategies as st

import core as tf
import placers
from core.cluster import Cluster, ClusterSpec
from core.devices import DeviceSpec
from core.graph import GraphCycleError
from core.placement import InvalidPlacement, Placement
from experiments.workloads import random_layered_dag
from placers.cost_model import estimate_step_time
from strategies import clusters, dags

LOCAL = "/job:localhost/replica:0/task:0"


#: Small budgets for the simulator-driven placers, so that property tests stay fast.
FAST = {"function": dict(fn=lambda op: None),
        "search": dict(evaluations=6, workers=1, start_placers=("m_etf", "simple")),
        "optimal": dict(max_groups=3, time_limit=5.0, max_evaluations=200)}


def all_placers(**options):
    return [placers.get(name, **FAST.get(name, {}), **options) for name in placers.names()]


def snapshot(graph):
    return [(op.name, op.type, op.device, tuple(t.name for t in op.inputs),
             tuple(c.name for c in op.control_inputs), op.colocation_groups())
            for op in graph.get_operations()]


# --- registry -------------------------------------------------------------------------------

def test_registry_lists_and_rejects_unknown_names():
    assert {"cost_model", "function", "round_robin", "simple", "m_topo", "m_etf", "m_sct"} <= set(placers.names())
    with pytest.raises(placers.UnknownPlacer) as info:
        placers.get("magic")
    assert "magic" in str(info.value) and "cost_model" in str(info.value)
    p = placers.SimplePlacer()
    assert placers.get(p) is p
    assert isinstance(placers.get("cost_model"), placers.CostModelPlacer)


# --- constraint errors ---------------------------------------------------------------------

def test_unknown_job_and_task_are_errors_or_soft_placed():
    g = tf.Graph()
    with g.as_default():
        with tf.device("/job:nope"):
            a = tf.constant(1.0, name="a")
        with tf.device("/gpu:3"):
            b = tf.constant(1.0, name="b")
    cluster = Cluster.single_host(gpus=1)
    with pytest.raises(placers.PlacementError) as info:
        placers.SimplePlacer().place(g, cluster)
    assert info.value.op == "a" and "/job:nope/task:0" in str(info.value)
    p = placers.SimplePlacer(allow_soft_placement=True).place(g, cluster)
    assert p["a"] == p["b"] == f"{LOCAL}/device:CPU:0"


def test_missing_gpu_is_an_error_without_soft_placement():
    g = tf.Graph()
    with g.as_default(), tf.device("/gpu:0"):
        tf.constant(1.0, name="a")
    with pytest.raises(placers.PlacementError, match="no such device"):
        placers.SimplePlacer().place(g, Cluster.single_host(gpus=0))


def test_conflicting_colocated_pins():
    g = tf.Graph()
    with g.as_default():
        with tf.device("/job:localhost/task:0/cpu:0"):
            v = tf.Variable(1.0, name="v")
        with tf.device("/gpu:0"):
            v.assign(2.0, name="set_v")
    cluster = Cluster.single_host(gpus=1)
    with pytest.raises(placers.PlacementError) as info:
        placers.SimplePlacer().place(g, cluster)
    assert info.value.op == "set_v" and "colocated" in str(info.value)
    p = placers.SimplePlacer(allow_soft_placement=True).place(g, cluster)
    assert p["set_v"] == p["v"] == f"{LOCAL}/device:CPU:0"


def test_cycles_raise_before_placing():
    g = tf.Graph()
    with g.as_default():
        a = tf.constant(1.0, name="a")
        b = tf.identity(a, name="b")
        a.op.add_control_input(b.op)
    for placer in all_placers():
        with pytest.raises(GraphCycleError, match="a"):
            placer.place(g, Cluster.single_host())


def test_sticky_previous_placement_and_new_ops():
    g = tf.Graph()
    cluster = Cluster.single_host(gpus=1)
    with g.as_default():
        a = tf.constant(1.0, name="a")
    first = placers.SimplePlacer().place(g, cluster)
    moved = Placement({"a": f"{LOCAL}/device:CPU:0"})
    with g.as_default():
        b = tf.identity(a, name="b")
    lines = []
    second = placers.SimplePlacer(log_device_placement=True, log=lines.append).place(
        g, cluster, previous=moved)
    assert first["a"].endswith("GPU:0")
    assert second["a"].endswith("CPU:0") and second["b"].endswith("GPU:0")
    assert lines == [f"b: {LOCAL}/device:GPU:0"]
    assert b.op.name == "b"


def test_function_placer():
    g = tf.Graph()
    with g.as_default():
        with tf.device("/gpu:0"):
            v = tf.Variable(1.0, name="v")
        c = v * 2.0
    placer = placers.FunctionPlacer(lambda op: "/cpu:0" if op.type == "Variable" else None)
    p = placer.place(g, Cluster.single_host(gpus=1))
    assert p["v"].endswith("CPU:0") and p["v/read"].endswith("CPU:0")
    assert p[c.op.name].endswith("GPU:0")
    with pytest.raises(TypeError):
        placers.FunctionPlacer("not a function")


def test_round_robin_placer_spreads_and_respects_pins():
    g = tf.Graph()
    with g.as_default():
        xs = [tf.constant(float(i)) for i in range(6)]
        with tf.device("/cpu:0"):
            pinned = tf.constant(9.0, name="pinned")
    cluster = Cluster.single_host(gpus=2)
    p = placers.RoundRobinPlacer().place(g, cluster)
    used = [p[x.op.name] for x in xs]
    assert sorted(set(used)) == sorted(d.name for d in cluster.devices)
    assert p["pinned"].endswith("CPU:0")
    counts = [used.count(d.name) for d in cluster.devices]
    assert max(counts) - min(counts) <= 1


def test_round_robin_variables_only():
    g = tf.Graph()
    with g.as_default():
        vs = [tf.Variable(float(i)) for i in range(4)]
        s = vs[0] + vs[1]
    cluster = Cluster.single_host(gpus=1)
    p = placers.RoundRobinPlacer(variables_only=True).place(g, cluster)
    assert {p[v.op.name] for v in vs} == {d.name for d in cluster.devices}
    assert p[s.op.name] == f"{LOCAL}/device:GPU:0"


@given(st.integers(1, 5), st.integers(0, 20), st.sampled_from(["round_robin", "greedy"]))
def test_replica_device_setter_balances_ps_tasks(ps_tasks, n_vars, strategy):
    g = tf.Graph()
    with g.as_default(), tf.device(placers.replica_device_setter(ps_tasks=ps_tasks,
                                                                 ps_strategy=strategy)):
        vs = [tf.Variable(np.zeros(4, np.float32)) for _ in range(n_vars)]
    counts = [sum(v.device == f"/job:ps/task:{t}" for v in vs) for t in range(ps_tasks)]
    assert sum(counts) == n_vars
    assert max(counts) - min(counts) <= 1


def test_greedy_strategy_balances_bytes():
    g = tf.Graph()
    with g.as_default(), tf.device(placers.replica_device_setter(ps_tasks=2, ps_strategy="greedy")):
        big = tf.Variable(np.zeros(1000, np.float32), name="big")
        small = [tf.Variable(np.zeros(10, np.float32)) for _ in range(3)]
    assert big.device == "/job:ps/task:0"
    assert {v.device for v in small} == {"/job:ps/task:1"}


def test_replica_device_setter_without_ps_is_none_and_keeps_other_jobs():
    assert placers.replica_device_setter(ps_tasks=0) is None
    assert placers.replica_device_setter(cluster=ClusterSpec({"worker": ["a:1"]})) is None
    g = tf.Graph()
    with g.as_default(), tf.device(placers.replica_device_setter(ps_tasks=2)):
        with tf.device("/job:chief"):
            v = tf.Variable(1.0)
    assert v.device == "/job:chief"


def test_cost_model_placer_respects_memory():
    g = tf.Graph()
    with g.as_default():
        a = tf.constant(np.ones((256, 256), np.float32), name="a")
        b = tf.matmul(a, a, name="b")
    full = Cluster.single_host(gpus=1)
    gpu = next(d for d in full.devices if d.device_type == "GPU")
    cpu = next(d for d in full.devices if d.device_type == "CPU")
    small = full.replace_device(gpu.name, memory_bytes=1000)
    p = placers.CostModelPlacer().place(g, small)
    assert p["b"] == cpu.name
    tiny = small.replace_device(cpu.name, memory_bytes=1000)
    with pytest.raises(placers.PlacementError) as info:
        placers.CostModelPlacer().place(g, tiny)
    assert info.value.op == "a" and "fit" in str(info.value)


def test_cost_model_placer_uses_the_fast_device():
    g = random_layered_dag(60, width=3, size=256)
    cluster = Cluster.single_host(gpus=1)
    p = placers.CostModelPlacer().place(g, cluster)
    gpu_ops = [op for op in p if p[op].endswith("GPU:0")]
    assert len(gpu_ops) > len(p) / 2


def test_cost_model_placer_spreads_independent_chains():
    """Two heavy independent chains on two identical GPUs go to different GPUs."""
    g = tf.Graph()
    with g.as_default():
        outs = []
        for k in range(2):
            x = tf.constant(np.ones((512, 512), np.float32), name=f"x{k}")
            for _ in range(4):
                x = tf.matmul(x, x)
            outs.append(x)
    p = placers.CostModelPlacer().place(g, Cluster.single_host(gpus=2))
    assert p[outs[0].op.name] != p[outs[1].op.name]


# --- properties ----------------------------------------------------------------------------

@given(dags(), clusters(), st.sampled_from(placers.names()))
def test_placements_hold_the_invariants(dag, cluster, name):
    g, fetches = dag
    before = snapshot(g)
    placer = placers.get(name, **FAST.get(name, {}), allow_soft_placement=True)
    p = placer.place(g, cluster)
    assert snapshot(g) == before  # no placer mutates the graph
    assert list(p) == [op.name for op in g.get_operations()]
    # The function placer's requests (here: none) replace the scopes'.
    pin_of = (lambda op: DeviceSpec()) if name == "function" else None
    p.validate(g, cluster, allow_soft_placement=True, pin_of=pin_of)


@given(dags(pins=False), clusters())
def test_without_soft_placement_unpinned_graphs_always_place(dag, cluster):
    g, _ = dag
    for placer in all_placers():
        placer.place(g, cluster).validate(g, cluster, pin_of=lambda op: DeviceSpec())


@given(dags(), clusters())
def test_strict_placement_keeps_every_pin_or_raises(dag, cluster):
    g, _ = dag
    try:
        p = placers.SimplePlacer().place(g, cluster)
    except placers.PlacementError as e:
        assert e.op in g
        return
    p.validate(g, cluster)  # pins kept exactly


@given(dags(), clusters(), st.randoms(use_true_random=False))
def test_device_order_does_not_matter(dag, cluster, rnd):
    g, _ = dag
    devices = list(cluster.devices)
    rnd.shuffle(devices)
    shuffled = type(cluster)(list(reversed(cluster.hosts)), list(reversed(cluster.tasks)), devices,
                             list(reversed(list(cluster.links.values()))), master=cluster.master)
    for placer in all_placers(allow_soft_placement=True):
        assert placer.place(g, cluster) == placer.place(g, shuffled)


@given(dags(pins=False, max_ops=30), clusters())
def test_cost_model_never_worse_than_one_device(dag, cluster):
    g, _ = dag
    placer = placers.CostModelPlacer()
    p = placer.place(g, cluster)
    model = placer.cost_model
    ours = estimate_step_time(g, p, cluster, model)
    assert ours == pytest.approx(placer.estimated_step_time)
    for device in cluster.devices:
        try:
            one = placers.FunctionPlacer(lambda op, d=device.name: d).place(g, cluster)
        except placers.PlacementError:
            continue  # some op has no kernel there
        assert ours <= estimate_step_time(g, one, cluster, model) * (1 + 1e-9)


def test_invalid_placements_are_reported():
    g = tf.Graph()
    with g.as_default():
        with tf.device("/cpu:0"):
            v = tf.Variable(np.ones(2, np.int32), name="v")
        c = tf.constant(1.0, name="c")
    cluster = Cluster.single_host(gpus=1)
    gpu, cpu = f"{LOCAL}/device:GPU:0", f"{LOCAL}/device:CPU:0"
    bad = Placement({"v": gpu, "v/initial_value": cpu, "v/Assign": cpu, "v/read": cpu})
    with pytest.raises(InvalidPlacement) as info:
        bad.validate(g, cluster)
    text = str(info.value)
    assert "'c' is not placed" in text and "no kernel" in text and "split" in text
    assert "pinned to /device:CPU:0" in text
    with pytest.raises(ValueError):
        Placement({"c": "/cpu:0"})
