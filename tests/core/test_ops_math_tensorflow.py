"""The math family in a GraphDef: our export of a graph with unknown dimensions and its
gradients (run-time-shaped Reshape/BroadcastTo through Shape ops, StridedSliceGrad, AddN,
random initializers) imports back into our graph, and into TensorFlow itself, which
computes the same values."""

from __future__ import annotations

import numpy as np
import pytest

import core as tf
from core.graph_def import import_graph_def
from runtime import Session


def _model():
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float64, [None, None, 4], name="x")
        w = tf.constant(np.linspace(0.5, 1.5, 16).reshape(4, 4), name="w")
        h = tf.layer_normalization(tf.matmul(x, tf.tile(w[None], [2, 1, 1])[:1]), epsilon=1e-3)
        parts = tf.split(x, [1, 3], axis=2)
        y = (tf.reduce_mean(tf.square(h)) + tf.add_n([tf.reduce_sum(p) for p in parts])
             + tf.reduce_sum(tf.pad(x, [[0, 0], [0, 0], [1, 1]]) ** 2 / 3.0)
             + tf.reduce_sum(tf.maximum(tf.exp(x[..., 1:]), 1.5)) + tf.reduce_sum(abs(x[:, 0])))
        (dx,) = tf.gradients(y, [x])
        r = tf.random_normal([3], seed=4, dtype=tf.float64)
    return g, x, y, dx, r


X = np.random.default_rng(0).normal(size=(3, 2, 4))


def test_graph_def_round_trip_of_math_ops_and_their_gradients():
    g, x, y, dx, _ = _model()
    with Session(graph=g) as sess:
        ours = sess.run([y, dx], {x: X})
    h = tf.Graph()
    with h.as_default():
        back = import_graph_def(g.as_graph_def().SerializeToString(),
                                return_elements=[y.name, dx.name])
    with Session(graph=h) as sess:
        again = sess.run(back, {h.get_tensor_by_name("import/x:0"): X})
    for a, b in zip(again, ours):
        np.testing.assert_allclose(a, b)


def test_tensorflow_runs_our_export_to_the_same_values():
    real = pytest.importorskip("tensorflow")
    g, x, y, dx, r = _model()
    with Session(graph=g) as sess:
        ours = sess.run([y, dx], {x: X})
    proto = real.compat.v1.GraphDef.FromString(g.as_graph_def().SerializeToString())
    with real.Graph().as_default() as tg:
        real.compat.v1.import_graph_def(proto, name="")
        with real.compat.v1.Session(graph=tg) as ts:
            theirs = ts.run([y.name, dx.name, r.name], {"x:0": X})
    np.testing.assert_allclose(theirs[0], ours[0], rtol=1e-10)
    np.testing.assert_allclose(theirs[1], ours[1], rtol=1e-10)
    assert theirs[2].shape == (3,)
