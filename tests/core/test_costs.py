"""Cost models: the roofline and the measured model's fallbacks."""

from __future__ import annotations

import numpy as np
import pytest

import core as tf
from core.cluster import Cluster
from core.costs import MeasuredCostModel, MissingCost, StaticCostModel
from core.trace import OpRecord, Trace

C = Cluster.from_spec({"ps": ["a:1"], "worker": ["a:2"]}, hosts={("ps", 0): "h", ("worker", 0): "h"})
PS, W = (d for d in C.devices)


def graph():
    g = tf.Graph()
    with g.as_default():
        a = tf.constant(np.ones((64, 64), np.float32), name="a")
        tf.matmul(a, a, name="mm")
    return g


def test_static_is_overhead_plus_roofline():
    g = graph()
    mm = g.get_operation_by_name("mm")
    t = StaticCostModel().op_time(mm, W)
    assert t == pytest.approx(W.op_overhead + 2 * 64 ** 3 / (W.peak_flops * W.intra_op_speedup))


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
