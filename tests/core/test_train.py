"""Tests of core.train: the optimizers' graphs (slots colocated with their variable, the
global step, Adam's beta powers) and their numbers on the in-process runtime."""

import numpy as np
import pytest

import core as tf
from core.cluster import Cluster
from core.graph import GraphError

OPTIMIZERS = {
    "sgd": lambda: tf.train.GradientDescentOptimizer(0.1),
    "momentum": lambda: tf.train.MomentumOptimizer(0.05, momentum=0.9),
    "nesterov": lambda: tf.train.MomentumOptimizer(0.05, momentum=0.9, use_nesterov=True),
    "adam": lambda: tf.train.AdamOptimizer(0.05),
}


def regression(seed=0, pins=("/gpu:0", "/gpu:1")):
    """A linear least-squares problem: loss(w, b) = mean((x w + b - y)^2)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((32, 4)).astype(np.float32)
    y = (x @ rng.standard_normal((4, 2)) + 0.5).astype(np.float32)
    g = tf.Graph()
    with g.as_default():
        with tf.device(pins[0]):
            w = tf.Variable(np.zeros((4, 2), np.float32), name="layer/w")
        with tf.device(pins[1]):
            b = tf.Variable(np.zeros(2, np.float32), name="layer/b")
        loss = tf.reduce_mean(tf.square(tf.matmul(tf.constant(x), w) + b - tf.constant(y)))
    return g, w, b, loss, x, y


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_slots_live_with_their_variable(name):
    g, w, b, loss, _, _ = regression()
    opt = OPTIMIZERS[name]()
    with g.as_default():
        step = tf.train.get_or_create_global_step()
        train_op = opt.minimize(loss, global_step=step)
    assert train_op.type == "AssignAdd" and train_op.inputs[0].op is step.op
    for var in (w, b):
        for slot in opt.get_slot_names():
            s = opt.get_slot(var, slot)
            assert s.op.colocation_groups() == var.op.colocation_groups() == [f"loc:@{var.op.name}"]
            assert s.op.device == var.op.device and s.shape == var.shape and not s.trainable
            assert s.op.name.startswith(var.op.name + "/" + opt.get_name())
    applies = [op for op in g.get_operations() if op.type.startswith("Apply")]
    assert len(applies) == 2
    for op in applies:
        assert op.colocation_groups() == op.inputs[0].op.colocation_groups()
    if name == "adam":
        b1, b2 = opt.variables()[-2:]
        assert [v.op.name for v in (b1, b2)] == ["beta1_power", "beta2_power"]
        assert b1.op.colocation_groups() == ["loc:@layer/b"]  # the first variable by name
    # No array of a variable's size in the graph beyond the initial values given.
    consts = [op for op in g.get_operations() if op.type == "Const"]
    assert max(op.attrs["value"].size for op in consts) == 32 * 4


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_steps_match_numpy_and_lower_the_loss(name):
    from runtime import Session
    g, w, b, loss, x, y = regression(pins=("", ""))
    opt = OPTIMIZERS[name]()
    with g.as_default():
        step = tf.train.get_or_create_global_step()
        train_op = opt.minimize(loss, global_step=step)
        init = tf.global_variables_initializer()
    params = [np.zeros((4, 2)), np.zeros(2)]
    slots = [[np.zeros_like(p) for p in params] for _ in range(2)]
    losses = []
    with Session(graph=g, cluster=Cluster.single_host(gpus=0)) as sess:
        sess.run(init)
        for t in range(1, 6):
            losses.append(float(sess.run(loss)))
            sess.run(train_op)
            _numpy_step(name, params, slots, x, y, t)
            got_w, got_b, got_step = sess.run([w, b, step])
            np.testing.assert_allclose(got_w, params[0], rtol=2e-4, atol=1e-5)
            np.testing.assert_allclose(got_b, params[1], rtol=2e-4, atol=1e-5)
            assert got_step == t
    assert losses[-1] < 0.8 * losses[0]


def _numpy_step(name, params, slots, x, y, t):
    err = x @ params[0] + params[1] - y
    grads = [2 * x.T @ err / err.size, 2 * err.sum(0) / err.size]
    for i, (p, g) in enumerate(zip(params, grads)):
        if name == "sgd":
            p -= 0.1 * g
        elif name in ("momentum", "nesterov"):
            slots[0][i] = 0.9 * slots[0][i] + g
            p -= 0.05 * (g + 0.9 * slots[0][i] if name == "nesterov" else slots[0][i])
        else:
            slots[0][i] = 0.9 * slots[0][i] + 0.1 * g
            slots[1][i] = 0.999 * slots[1][i] + 0.001 * g * g
            lr_t = 0.05 * np.sqrt(1 - 0.999 ** t) / (1 - 0.9 ** t)
            p -= lr_t * slots[0][i] / (np.sqrt(slots[1][i]) + 1e-8)


def test_compute_then_apply_with_var_list_and_colocated_gradients():
    g, w, b, loss, _, _ = regression()
    opt = tf.train.GradientDescentOptimizer(0.1)
    with g.as_default():
        pairs = opt.compute_gradients(loss, var_list=[w], colocate_gradients_with_ops=True)
        op = opt.apply_gradients(pairs, name="only_w")
    assert [v for _, v in pairs] == [w]
    assert pairs[0][0].op.colocation_groups() != [] and op.name == "only_w"
    assert [o.type for o in op.control_inputs] == ["ApplyGradientDescent"]


def test_errors_name_what_is_wrong():
    g, w, b, loss, _, _ = regression()
    with g.as_default():
        other = tf.Variable(np.zeros(3, np.float32), name="unused")
        with pytest.raises(ValueError, match="no gradients for any variable"):
            tf.train.AdamOptimizer().minimize(loss, var_list=[other])
        with pytest.raises(ValueError, match="no variables"):
            tf.train.AdamOptimizer().compute_gradients(loss, var_list=[])
        with pytest.raises(GraphError, match="does not match variable"):
            tf.train.GradientDescentOptimizer(0.1).apply_gradients(
                [(tf.constant(np.zeros(3, np.float64)), other)])
        with pytest.raises(tf.ShapeError, match="shape"):
            tf.train.GradientDescentOptimizer(0.1).apply_gradients(
                [(tf.constant(np.zeros((3, 1), np.float32)), w)])
