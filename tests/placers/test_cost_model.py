"""The cost-model placer's additions to the whitepaper's greedy pass: links that carry
one transfer at a time, fixed step costs per task, scope-seeded passes."""

from __future__ import annotations

import numpy as np
import pytest

import core as tf
import placers
from core.cluster import Cluster, ClusterSpec
from experiments.workloads import inception_training_step, rnn_training_step
from placers.cost_model import _Model, _scope_of, _scope_seeds, estimate_step_time

SPEC = ClusterSpec({"worker": ["h:1", "h:2"]})


def two_one_core_tasks(**overrides) -> Cluster:
    return Cluster.from_spec(SPEC, hosts={("worker", 0): "h", ("worker", 1): "h"}, cpu_cores=2,
                             cpu_inter_op_threads=1, cpu_intra_op_threads=1, **overrides)


def dispatch_bound_tasks(**memcpy) -> Cluster:
    """Two four-core tasks of one host, two inter-op threads each, every op 1 ms of
    dispatch (``op_overhead``); their memcpy link 4 ms of latency, no bandwidth cost,
    and ``memcpy``'s other figures."""
    cluster = Cluster.from_spec(SPEC, hosts={("worker", 0): "h", ("worker", 1): "h"},
                                cpu_cores=4, cpu_inter_op_threads=2)
    for d in cluster.devices:
        cluster = cluster.replace_device(d.name, op_overhead=1e-3)
    return cluster.replace_link("memcpy:h", latency=4e-3, bandwidth=1e12, **memcpy)


def test_scope_of_takes_the_gradient_scope_off():
    assert _scope_of("gradients/layer1/MatMul_grad/MatMul", 1) == "layer1"
    assert _scope_of("block0/tower3x3/w3x3/read", 2) == "block0/tower3x3"
    assert _scope_of("x0", 1) == "" and _scope_of("layer0/W", 2) == ""


def test_scope_seeds_spread_the_heavy_layers():
    w = rnn_training_step(batch=8, hidden=64, steps=4, layers=2)
    cluster = two_one_core_tasks()
    constraints = placers.CostModelPlacer().resolve(w.graph, cluster, None)
    model = _Model(constraints.order, cluster, placers.CostModelPlacer().cost_model)
    group_of = [constraints.op_group[op.name] for op in model.ops]
    feasible = {g.index: [model.dev_index[d.name] for d in g.feasible] for g in constraints.groups}
    seeds = _scope_seeds(model, feasible, group_of)
    assert seeds
    layer = {s: {seeds[0][i] for i, op in enumerate(model.ops) if _scope_of(op.name, 1) == s}
             for s in ("layer0", "layer1")}
    assert len(layer["layer0"]) == len(layer["layer1"]) == 1 and layer["layer0"] != layer["layer1"]


@pytest.mark.parametrize("workload", [
    lambda: rnn_training_step(batch=16, hidden=128, steps=4, layers=2),
    lambda: inception_training_step(batch=16, width=128, blocks=2),
])
def test_scope_seeded_passes_never_lose_to_the_greedy_pass(workload):
    w = workload()
    cluster = two_one_core_tasks()
    greedy = placers.CostModelPlacer(scope_candidates=0)
    seeded = placers.CostModelPlacer()
    p_greedy, p_seeded = greedy.place(w.graph, cluster), seeded.place(w.graph, cluster)
    assert seeded.estimated_step_time <= greedy.estimated_step_time
    # The figure it reports is that of the placement it returns.
    assert seeded.estimated_step_time == pytest.approx(
        estimate_step_time(w.graph, p_seeded, cluster), rel=1e-9)


def test_two_transfers_over_one_link_queue_in_the_estimate():
    g = tf.Graph()
    n = 1 << 20
    with g.as_default():
        with tf.device("/job:worker/task:0"):
            a = tf.constant(np.ones(n, np.float32), name="a")
            b = tf.constant(np.ones(n, np.float32), name="b")
        with tf.device("/job:worker/task:1"):
            tf.add(a, b, name="c")
    cluster = two_one_core_tasks(memcpy_bandwidth=1e9, memcpy_latency=0.0)
    p = placers.SimplePlacer().place(g, cluster)
    one_transfer = 4 * n / 1e9
    # Both tensors cross the one memcpy link: the second waits for the first.
    assert estimate_step_time(g, p, cluster) >= 2 * one_transfer


def test_among_equal_estimates_the_masters_task_wins():
    # Devices in order ps:0, worker:0; the master is worker:0; a chain gains nothing from
    # a second device, and the cluster's step costs are all zero: a tie on time.
    cluster = Cluster.from_spec({"ps": ["h:1"], "worker": ["h:2"]},
                                hosts={("ps", 0): "h", ("worker", 0): "h"})
    assert cluster.master == ("worker", 0) and cluster.devices[0].job == "ps"
    g = tf.Graph()
    with g.as_default():
        x = tf.constant(np.ones(16, np.float32), name="x")
        for i in range(5):
            x = tf.tanh(x)
    p = placers.CostModelPlacer().place(g, cluster)
    assert set(p.values()) == {"/job:worker/replica:0/task:0/device:CPU:0"}


class _Fixed:
    """Every op takes ``t`` seconds; transfers as the base cost model prices them."""

    def __init__(self, t):
        self.t = t

    def op_time(self, op, device):
        return self.t

    def transfer_time(self, nbytes, route):
        from core.costs import CostModel
        return CostModel.transfer_time(self, nbytes, route)


def test_serial_dispatch_serves_one_task_one_op_at_a_time_and_crossings_cost_both_ends():
    # Two independent 1 ms ops, each all dispatch (op_overhead 1 ms): on one task with two
    # inter-op threads they overlap unless the task dispatches one at a time.
    cluster = dispatch_bound_tasks()
    w0, w1 = (d.name for d in cluster.devices)
    g = tf.Graph()
    with g.as_default():
        a = tf.constant(np.float32(1.0), name="a")
        tf.constant(np.float32(2.0), name="b")
        tf.identity(a, name="c")
    model = _Fixed(1e-3)
    together = placers.Placement({"a": w0, "b": w0, "c": w0})
    assert estimate_step_time(g, together, cluster, model) == pytest.approx(2e-3)
    assert estimate_step_time(g, together, cluster, model, runtime="interpreter") == pytest.approx(3e-3)
    # c on the other task: the crossing's 4 ms of latency arrive at 5 ms.  Dispatched
    # serially they are the two ends' work, 2 ms each: w0's dispatcher sends it once b
    # freed it (2 to 4 ms), w1's takes it in (4 to 6 ms), and c runs 6 to 7 ms.
    split = placers.Placement({"a": w0, "b": w0, "c": w1})
    assert estimate_step_time(g, split, cluster, model) == pytest.approx(6e-3)
    assert estimate_step_time(g, split, cluster, model, runtime="interpreter") == pytest.approx(7e-3)
    # The placer then moves the independent b to the other task (it frees w0's
    # dispatcher) and keeps c with a (its crossing would cost both dispatchers).
    placed = placers.CostModelPlacer(cost_model=model, runtime="interpreter").place(g, cluster)
    assert placed["c"] == placed["a"] != placed["b"]


def test_the_estimate_books_a_crossing_as_the_simulator_does():
    # a on w0 feeds c on w1 and a chain e1..e5 on w0; every op is 1 ms of dispatch.  The
    # crossing takes 4 ms, and the link measured its ends' CPU: 1 ms to send.  As the
    # simulator books a crossing alone (RuntimeModel.crossing_work), w0's dispatcher
    # sends it from 1 to 2 ms and the chain runs 2 to 7 ms; w1's takes it in for the
    # rest of its time, 2 to 5 ms, and c runs 5 to 6.  (Half the latency on each end
    # held w0 until 3 ms: 8 ms.)
    cluster = dispatch_bound_tasks(cpu_costs=[(0, 1e-3, 1e-3)])
    w0, w1 = (d.name for d in cluster.devices)
    g = tf.Graph()
    with g.as_default():
        a = tf.constant(np.float32(1.0), name="a")
        tf.identity(a, name="c")
        x = a
        for i in range(1, 6):
            x = tf.identity(x, name=f"e{i}")
    split = placers.Placement({"a": w0, "c": w1, **{f"e{i}": w0 for i in range(1, 6)}})
    model = _Fixed(1e-3)
    assert estimate_step_time(g, split, cluster, model, runtime="interpreter") == pytest.approx(7e-3)
    # Without serial dispatch the links carry the whole crossing: c ends at 6 ms.
    assert estimate_step_time(g, split, cluster, model) == pytest.approx(6e-3)


def test_the_estimate_takes_in_a_burst_of_crossings_as_the_simulator_does():
    # a and b on w0 (1 to 2 ms) both feed c on w1 (every op 1 ms of dispatch; a
    # crossing 4 ms, 1 ms of it each end's CPU).  a's crossing comes alone: w0 sends
    # it 2 to 3 ms, w1 takes it in for the rest, 3 to 6.  b's, sent 3 to 4, arrives
    # while w1 still takes in a's: in the burst it costs w1 only its 1 ms (6 to 7),
    # and c runs 7 to 8 ms.  (Taken in alone, it would cost 3 ms: 10 ms.)
    cluster = dispatch_bound_tasks(cpu_costs=[(0, 1e-3, 1e-3)])
    w0, w1 = (d.name for d in cluster.devices)
    g = tf.Graph()
    with g.as_default():
        a = tf.constant(np.float32(1.0), name="a")
        b = tf.constant(np.float32(2.0), name="b")
        tf.add(a, b, name="c")
    split = placers.Placement({"a": w0, "b": w0, "c": w1})
    assert estimate_step_time(g, split, cluster, _Fixed(1e-3), runtime="interpreter") == \
        pytest.approx(8e-3)


def test_the_estimate_gives_a_kernel_the_cores_the_executor_gives_it():
    # Two independent MatMuls on one CPU of two cores, two inter-op and two intra-op
    # threads.  Small ones run on one core each (OpDef.splits, as the executor and the
    # simulator decide), so at once; products big enough to split take both cores,
    # so one after the other.
    from core.costs import StaticCostModel
    cluster = Cluster.single_host(cpu_cores=2)
    cpu = cluster.devices[0].name
    cluster = cluster.replace_device(cpu, inter_op_threads=2, intra_op_threads=2,
                                     parallel_min_elements=1 << 16)

    def step(n: int, count: int) -> float:
        g = tf.Graph()
        with g.as_default():
            x = tf.constant(np.ones((n, n), np.float32), name="x")
            for i in range(count):
                tf.matmul(x, x, name=f"m{i}")
        p = placers.Placement({op.name: cpu for op in g.get_operations()})
        return estimate_step_time(g, p, cluster, StaticCostModel())

    assert step(64, 2) == pytest.approx(step(64, 1), rel=0.01)
    assert step(512, 2) == pytest.approx(2 * step(512, 1), rel=0.01)


def test_a_split_needs_to_beat_one_device_by_the_margin():
    # Two independent chains of 1 ms ops on two one-core tasks: split, the step takes
    # half as long (crossings free); with a margin above that gain one device wins.
    cluster = two_one_core_tasks(memcpy_latency=0.0)
    g = tf.Graph()
    with g.as_default():
        for chain in "ab":
            x = tf.constant(np.float32(1.0), name=f"{chain}0")
            for i in range(1, 4):
                x = tf.identity(x, name=f"{chain}{i}")
    model = _Fixed(1e-3)
    split = placers.CostModelPlacer(cost_model=model)
    assert len(set(split.place(g, cluster).values())) == 2
    for margin in (0.5, 1.5):
        placer = placers.CostModelPlacer(cost_model=model, split_margin=margin)
        devices = set(placer.place(g, cluster).values())
        # The split's estimate is half the one-device one: it pays by 100% (> 0.5).
        assert len(devices) == (2 if margin < 1.0 else 1), margin
    with pytest.raises(ValueError, match="split_margin"):
        placers.CostModelPlacer(split_margin=-0.1)
