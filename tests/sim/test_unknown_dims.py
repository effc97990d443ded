"""The simulator and the cost-model placer on a graph with an unknown batch: sized by the
shape hints on the cost model, or a clear error naming the op and tensor."""

from __future__ import annotations

import numpy as np
import pytest

import core as tf
from core.cluster import Cluster
from core.costs import StaticCostModel
from core.placement import Placement
from core.shapes import UnknownDimension
from placers.cost_model import estimate_step_time
from sim import simulate

CLUSTER = Cluster.single_host(gpus=1)


def training_step(batch):
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [batch, 64], name="x")
        w = tf.Variable(np.ones((64, 64), np.float32), name="w")
        loss = tf.reduce_mean(tf.square(tf.tanh(x @ w)))
        (dw,) = tf.gradients(loss, [w])
        train = tf.assign_sub(w, 0.1 * dw)
    return g, train


def placed_on_gpu(g):
    gpu = CLUSTER.devices[1].name
    return Placement({op.name: gpu for op in g.get_operations()})


def test_simulating_an_unknown_batch_needs_a_stated_size():
    g, train = training_step(None)
    with pytest.raises(UnknownDimension, match="x:0"):
        simulate(g, placed_on_gpu(g), CLUSTER, fetches=train)
    hinted = simulate(g, placed_on_gpu(g), CLUSTER, fetches=train,
                      cost_model=StaticCostModel().with_shape_hints(32))
    static_g, static_train = training_step(32)
    static = simulate(static_g, placed_on_gpu(static_g), CLUSTER, fetches=static_train)
    hinted.validate(g)
    # The unknown-batch graph computes the same plus a few shape ops.
    assert static.step_time <= hinted.step_time <= 1.5 * static.step_time
    bigger = simulate(g, placed_on_gpu(g), CLUSTER, fetches=train,
                      cost_model=StaticCostModel().with_shape_hints(4096))
    assert bigger.step_time > hinted.step_time


def test_the_cost_model_placer_estimate_takes_the_hints():
    g, train = training_step(None)
    with pytest.raises(UnknownDimension):
        estimate_step_time(g, placed_on_gpu(g), CLUSTER, StaticCostModel(), fetches=[train])
    small = estimate_step_time(g, placed_on_gpu(g), CLUSTER,
                               StaticCostModel().with_shape_hints(8), fetches=[train])
    large = estimate_step_time(g, placed_on_gpu(g), CLUSTER,
                               StaticCostModel().with_shape_hints(8192), fetches=[train])
    assert 0 < small < large
