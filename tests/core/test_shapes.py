"""Shape hints: the sizes of dimensions unknown until run time, propagated through the
graph (gradients and run-time-shaped ops included), and the cost model's clear error when
a figure needs a dimension nobody stated."""

from __future__ import annotations

import numpy as np
import pytest

import core as tf
from core.cluster import Cluster
from core.costs import StaticCostModel, tensor_bytes
from core.shapes import ShapeHints, UnknownDimension

DEVICE = Cluster.single_host().devices[0]


def mlp(batch):
    """A two-layer training graph of a placeholder batch (None: unknown)."""
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [batch, 16], name="x")
        w1 = tf.Variable(np.ones((16, 32), np.float32), name="w1")
        w2 = tf.Variable(np.ones((32, 4), np.float32), name="w2")
        h = tf.relu(x @ w1)
        logits = h @ w2
        mean, var = tf.moments(logits, axes=[0])
        loss = tf.reduce_mean(tf.square(logits - mean) / (var + 1.0))
        tf.gradients(loss, [w1, w2])
    return g


def test_costs_with_a_stated_batch_equal_those_of_the_static_graph():
    static, unknown = mlp(8), mlp(None)
    hinted = StaticCostModel(shape_hints=ShapeHints(batch=8))
    plain = StaticCostModel()
    names = {op.name for op in static.get_operations()}
    compared = 0
    for op in unknown.get_operations():
        twin = static.get_operation_by_name(op.name) if op.name in names else None
        if twin is not None and len(twin.inputs) == len(op.inputs):  # (not a run-time shape)
            assert hinted.op_time(op, DEVICE) == pytest.approx(plain.op_time(twin, DEVICE)), op.name
            compared += 1
    assert compared > 20
    for op in unknown.get_operations():  # every op of the unknown-batch graph has a cost
        hinted.op_time(op, DEVICE)
        for t in op.outputs:
            assert hinted.tensor_bytes(t) >= 0


def test_a_cost_that_needs_an_unknown_dimension_names_the_op_and_tensor():
    g = mlp(None)
    matmul = g.get_operation_by_name("matmul")
    with pytest.raises(UnknownDimension) as err:
        StaticCostModel().op_time(matmul, DEVICE)
    assert err.value.op == "matmul" and err.value.tensor == "x:0" and err.value.shape == (None, 16)
    assert "'matmul'" in str(err.value) and "'x:0'" in str(err.value) and "ShapeHints" in str(err.value)
    with pytest.raises(UnknownDimension, match="'x:0'"):
        tensor_bytes(g.get_tensor_by_name("x:0"))
    assert StaticCostModel().op_time(g.get_operation_by_name("x"), DEVICE) >= 0  # needs no size


def test_hints_by_placeholder_propagate_through_run_time_shapes():
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, None, 3], name="x")
        y = tf.reduce_sum(tf.tile(x, [1, 2, 1]) * 2.0, axis=[1])
        (dx,) = tf.gradients(y, [x])
    assert dx.shape == (None, None, 3)
    hints = ShapeHints({"x": (4, 5, 3)})
    specs = hints.specs(g)
    assert specs[y.name].shape == (4, 3) and hints.spec(dx).shape == (4, 5, 3)
    assert all(None not in s.shape for s in specs.values())
    assert tensor_bytes(dx, hints) == 4 * 5 * 3 * 4
    with pytest.raises(UnknownDimension):
        ShapeHints(batch=4).spec(dx)  # the second dimension is still unknown
    with pytest.raises(tf.ShapeError, match="contradicts"):
        ShapeHints({"x": (4, 5, 2)}).specs(g)
    with pytest.raises(ValueError, match="batch"):
        ShapeHints(batch=0)


def test_with_shape_hints_copies_the_model():
    model = StaticCostModel()
    hinted = model.with_shape_hints(16)
    assert model.shape_hints is None and hinted.shape_hints.batch == 16
    assert model.with_shape_hints({"x": (2, 16)}).shape_hints.shapes == {"x:0": (2, 16)}
