"""Cost models: the roofline and the measured model's fallbacks."""

from __future__ import annotations

import statistics
from dataclasses import replace

import numpy as np
import pytest

import core as tf
from core.cluster import Cluster
from core.costs import MeasuredCostModel, MissingCost, StaticCostModel, dispatch_gaps
from core.trace import OpRecord, Trace

C = Cluster.from_spec({"ps": ["a:1"], "worker": ["a:2"]}, hosts={("ps", 0): "h", ("worker", 0): "h"})
PS, W = (d for d in C.devices)


def graph():
    g = tf.Graph()
    with g.as_default():
        a = tf.constant(np.ones((64, 64), np.float32), name="a")
        tf.matmul(a, a, name="mm")
    return g


def test_static_is_overhead_plus_arithmetic_plus_bytes():
    g = graph()
    mm = g.get_operation_by_name("mm")
    t = StaticCostModel().op_time(mm, W)
    flops, moved = 2 * 64 ** 3, 3 * 64 * 64 * 4  # a and a read, mm written
    assert t == pytest.approx(W.op_overhead + flops / (W.peak_flops * W.intra_op_speedup)
                              + moved / W.mem_bandwidth)
    # With calibrated kernel costs: the type's fixed cost, and its factor on both.
    k = W.replace_kernel_costs({"MatMul": (1e-5, 2.0)})
    assert StaticCostModel().op_time(mm, k) == pytest.approx(
        W.op_overhead + 1e-5 + 2.0 * (t - W.op_overhead))


def test_measured_generalises_to_alike_devices_and_adds_dispatch():
    g = graph()
    mm = g.get_operation_by_name("mm")
    trace = Trace(ops=[OpRecord("mm", "MatMul", PS.name, 0, 0.0, 1e-3)])
    m = MeasuredCostModel.from_traces([trace])
    assert m.op_time(mm, PS) == 1e-3
    assert m.op_time(mm, W) == 1e-3  # another CPU: the op's time by device type
    with pytest.raises(MissingCost):
        m.op_time(g.get_operation_by_name("a"), W)
    d = MeasuredCostModel.from_traces([trace], fallback=StaticCostModel(), dispatch=True)
    assert d.op_time(mm, W) == pytest.approx(1e-3 + W.op_overhead)
    assert d.op_time(g.get_operation_by_name("a"), W) == StaticCostModel().op_time(
        g.get_operation_by_name("a"), W)


def chain_graph():
    g = tf.Graph()
    with g.as_default():
        a = tf.constant(np.ones((4,), np.float32), name="a")
        b = tf.identity(a, name="b")
        tf.identity(b, name="c")
        tf.constant(np.ones((4,), np.float32), name="x")
    return g


def test_dispatch_gaps_count_only_gaps_before_ready_ops():
    # On one thread: a [0, 1), b [1.2, 2) after a (ready at 1: a 0.2 gap), then x at 5:
    # x has no inputs (ready at 0) -> gap 3 counted; c on another thread.
    recs = [OpRecord("a", "Const", W.name, 0, 0.0, 1.0), OpRecord("b", "Identity", W.name, 0, 1.2, 2.0),
            OpRecord("x", "Const", W.name, 0, 5.0, 5.5), OpRecord("c", "Identity", W.name, 1, 2.1, 2.2)]
    gaps = dispatch_gaps([Trace(ops=recs)], chain_graph())
    assert gaps[W.name] == pytest.approx(statistics.median([0.2, 3.0]))
    # b is on thread 0 after x in this trace, but x ended before b was ready: not counted.
    recs = [OpRecord("a", "Const", W.name, 1, 0.0, 1.0), OpRecord("x", "Const", W.name, 0, 0.0, 0.5),
            OpRecord("b", "Identity", W.name, 0, 1.3, 2.0)]
    assert W.name not in dispatch_gaps([Trace(ops=recs)], chain_graph())
    # Without the graph every gap on a thread counts.
    assert dispatch_gaps([Trace(ops=recs)])[W.name] == pytest.approx(0.8)


def test_measured_dispatch_overheads_go_into_the_cluster():
    g = chain_graph()
    recs = [OpRecord("a", "Const", W.name, 0, 0.0, 1e-3), OpRecord("b", "Identity", W.name, 0, 1.5e-3, 2e-3),
            OpRecord("c", "Identity", W.name, 0, 2.5e-3, 3e-3)]
    m = MeasuredCostModel.from_traces([Trace(ops=recs)], dispatch=True, graph=g)
    assert m.overhead(W) == pytest.approx(0.5e-3)
    assert m.overhead(PS) == pytest.approx(0.5e-3)  # by device type
    assert m.op_time(g.get_operation_by_name("b"), W) == pytest.approx(1e-3)
    profiled = m.with_overheads(C)
    assert [d.op_overhead for d in profiled.devices] == pytest.approx([0.5e-3, 0.5e-3])
    assert MeasuredCostModel.from_traces([Trace(ops=recs)]).with_overheads(C) is C


def test_static_adds_the_calibrated_kernel_cost_of_the_op_type():
    g = graph()
    mm = g.get_operation_by_name("mm")
    plain = StaticCostModel().op_time(mm, W)
    roofline = plain - W.op_overhead
    w2 = W.replace_kernel_costs({"MatMul": (3e-6, 2.0), "*": (1e-6, 1.0)})
    assert StaticCostModel().op_time(mm, w2) == pytest.approx(W.op_overhead + 3e-6 + 2 * roofline)
    a = g.get_operation_by_name("a")  # Const: the "*" entry
    assert StaticCostModel().op_time(a, w2) == pytest.approx(StaticCostModel().op_time(a, W) + 1e-6)


def test_measured_takes_the_statistic_asked_for():
    traces = [Trace(ops=[OpRecord("mm", "MatMul", W.name, 0, 0.0, t)]) for t in (1e-3, 3e-3, 4e-3)]
    mm = graph().get_operation_by_name("mm")
    assert MeasuredCostModel.from_traces(traces).op_time(mm, W) == 3e-3
    assert MeasuredCostModel.from_traces(traces, statistic=min).op_time(mm, W) == 1e-3


def test_static_takes_the_parallel_path_cost_from_the_devices_threshold_up():
    g = tf.Graph()
    with g.as_default():
        small = tf.add(tf.constant(np.ones(64, np.float32)), 1.0, name="small")
        big = tf.add(tf.constant(np.ones(256, np.float32)), 1.0, name="big")
        tf.reshape(tf.constant(np.ones(256, np.float32)), [16, 16], name="moved")  # serial kind
    costs = {"Add": (1e-6, 1.0), "Add|parallel": (9e-6, 1.0), "Reshape": (2e-6, 1.0)}
    dev = replace(W, kernel_costs=costs, intra_op_threads=2, parallel_min_elements=256)
    model = StaticCostModel()

    def extra(name, device):  # beside the same device's bare roofline
        op = g.get_operation_by_name(name)
        bare = replace(device, kernel_costs=(), op_overhead=0.0)
        return model.op_time(op, device) - device.op_overhead - model.op_time(op, bare)

    assert extra("small", dev) == pytest.approx(1e-6)
    assert extra("big", dev) == pytest.approx(9e-6)
    assert extra("moved", dev) == pytest.approx(2e-6)  # not multithreaded: one regime
    assert extra("big", replace(dev, intra_op_threads=1)) == pytest.approx(1e-6)
    assert extra("big", replace(dev, parallel_min_elements=0)) == pytest.approx(1e-6)
    # A type without a parallel entry keeps its serial one.
    assert replace(dev, kernel_costs={"Add": (1e-6, 1.0)}).kernel_cost("Add", True) == (1e-6, 1.0)


def test_only_a_kernel_that_splits_its_work_runs_at_the_intra_op_speedup():
    """A multithreaded kernel on tensors below the device's threshold, or a float
    product with too few rows for two blocks, runs on one thread: its arithmetic at the
    device's single-thread rate."""
    from core.costs import kernel_speedup
    g = tf.Graph()
    with g.as_default():
        small = tf.add(tf.zeros([64]), 1.0)
        big = tf.add(tf.zeros([1 << 16]), 1.0)
        square = tf.matmul(tf.zeros([512, 512]), tf.zeros([512, 512]))
        few_rows = tf.matmul(tf.zeros([64, 2048]), tf.zeros([2048, 512]))
        transposed = tf.matmul(tf.zeros([512, 64]), tf.zeros([512, 2048]), transpose_a=True)
    dev = replace(W, intra_op_threads=2, intra_op_speedup=2.0, parallel_min_elements=1 << 12)

    def speedup(t, device=dev):
        op = t.op
        return kernel_speedup(op.op_def, [x.spec for x in op.inputs],
                              [x.spec for x in op.outputs], op.attrs, device)

    assert [speedup(t) for t in (small, big, square, few_rows, transposed)] == [
        1.0, 2.0, 2.0, 1.0, 1.0]
    # a device that sets no threshold: every multithreaded kernel splits
    assert speedup(few_rows, replace(dev, parallel_min_elements=0)) == 2.0
    # a device whose process fixed its BLAS at one thread: no product splits, at any
    # threshold; other kernels still do
    for threshold in (0, 1 << 12):
        one_thread_blas = replace(dev, products_split=False, parallel_min_elements=threshold)
        assert [speedup(t, one_thread_blas) for t in (big, square)] == [2.0, 1.0]
    model = StaticCostModel()
    one = replace(dev, kernel_costs=(), op_overhead=0.0, intra_op_speedup=1.0)
    for t, ratio in ((square, 2.0), (few_rows, 1.0)):  # (arithmetic-bound)
        assert model.op_time(t.op, one) / model.op_time(t.op, replace(one, intra_op_speedup=2.0)
                                                         ) == pytest.approx(ratio, rel=0.05)


def test_transfer_time_follows_a_links_measured_size_costs():
    from core.cluster import Link
    from core.costs import StaticCostModel
    cm = StaticCostModel()
    plain = Link("memcpy:h", "memcpy", 1e9, 1e-4)
    measured = Link("memcpy:h", "memcpy", 1e9, 1e-4, size_costs=((4, 1e-4), (1000, 5e-4)))
    assert cm.transfer_time(500, [plain]) == pytest.approx(1e-4 + 500 / 1e9)
    assert cm.transfer_time(1000, [measured]) == pytest.approx(5e-4)
    # On a longer route the measured link adds what its table adds to its bandwidth's
    # time in place of its latency; the slowest link's bandwidth carries the bytes.
    net = Link("network:h", "network", 1e8, 1e-3)
    assert cm.transfer_time(1000, [measured, net]) == pytest.approx(
        (5e-4 - 1000 / 1e9) + 1e-3 + 1000 / 1e8)
