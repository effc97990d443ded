"""GraphDefs between TensorFlow and us, checked against TensorFlow 2.21 itself.

Graphs built with TensorFlow's ``tf.compat.v1`` import and give TensorFlow's outputs on
our executor (in-process and across server processes); our graphs exported run on
TensorFlow with our outputs.  Skipped where TensorFlow is not installed.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

import core
from core.graph_def import import_graph_def, write_graph
from runtime.session import Session
from strategies import float_dags

RTOL = 1e-4


@pytest.fixture(scope="module")
def tf():
    """TensorFlow, imported once for the module (it takes seconds)."""
    return pytest.importorskip("tensorflow", reason="TensorFlow is not installed "
                               "(pip install -e '.[dev]' installs tensorflow-cpu)")


@pytest.fixture(scope="module")
def servers():
    """Two of our worker server processes, shared by the module's cross-process tests."""
    from runtime.launcher import LocalCluster
    with LocalCluster({"worker": 2}, start_timeout=90) as cluster:
        yield cluster


def run_tensorflow(tf, graph_def_bytes: bytes, fetches, feeds=None, init=None):
    """Import serialized GraphDef bytes into a fresh TF graph and run ``fetches``
    (tensor names) after running ``init`` (an op name), in one TF session."""
    v1 = tf.compat.v1
    g = tf.Graph()
    with g.as_default():
        v1.import_graph_def(v1.GraphDef.FromString(graph_def_bytes), name="")
        with v1.Session(graph=g) as sess:
            if init:
                sess.run(init)
            return sess.run(fetches, feed_dict=feeds)


def _nn_and_math(rng, fetches: list, feeds: dict) -> list:
    """The nn and math families: a small CNN (conv, bias, batch norm, pooling, dense,
    both cross entropies, an embedding) and the math/array ops, their gradients
    included; returns the random ops (their values are the generator's own)."""
    def f32(*shape):
        return rng.standard_normal(shape).astype(np.float32)
    x = core.placeholder(core.float32, (2, 6, 6, 3), name="image")
    y = core.placeholder(core.float32, (3, 4), name="y")
    feeds.update({x: f32(2, 6, 6, 3), y: f32(3, 4)})
    w, b = core.Variable(f32(3, 3, 3, 4) * 0.3, name="conv_w"), core.Variable(f32(4), name="conv_b")
    scale = core.Variable(np.ones(4, np.float32), name="bn_scale")
    offset = core.Variable(np.zeros(4, np.float32), name="bn_offset")
    h = core.nn.relu(core.nn.bias_add(core.nn.conv2d(x, w, [1, 1, 1, 1], "SAME"), b))
    bn, _, _ = core.nn.fused_batch_norm(h, scale, offset, is_training=True)
    pooled = (core.nn.max_pool(bn, [1, 2, 2, 1], [1, 2, 2, 1], "VALID")
              + core.nn.avg_pool(bn, [1, 2, 2, 1], [1, 2, 2, 1], "VALID"))
    wd = core.Variable(f32(36, 5) * 0.2, name="dense_w")
    logits = core.matmul(core.reshape(pooled, (2, -1)), wd)
    xent = core.nn.softmax_cross_entropy_with_logits_v2(
        labels=core.constant(np.eye(5, dtype=np.float32)[[1, 3]]), logits=logits)
    sparse = core.nn.sparse_softmax_cross_entropy_with_logits(
        labels=core.constant(np.array([1, 3], np.int32)), logits=logits)
    emb = core.Variable(f32(7, 3), name="emb")
    looked = core.nn.embedding_lookup(emb, core.constant(np.array([1, 5, 1], np.int32)))
    ya = core.abs(y) + 0.5
    m1 = core.exp(y) + core.log(ya) + core.sqrt(ya) + core.rsqrt(ya) + core.pow(ya, 2.0)
    m2 = (core.maximum(y, 0.1) - core.minimum(y, 0.2) + core.squared_difference(y, 1.0)
          + core.sign(y) + core.realdiv(y, ya))
    m4 = core.add_n([y, m1, m2, core.cast(core.cast(y * 10, core.int32), core.float32)])
    padded = core.pad(m4, [[1, 0], [0, 2]])
    s1, s2 = core.split(padded, 2, axis=1)
    parts = core.split(padded, [1, 3], axis=0)
    sq = core.squeeze(core.reshape(core.strided_slice(core.tile(s1, [2, 1]), [1, 0], [7, 3],
                                                      [2, 1]), (1, 3, 3)), axis=[0])
    bm = core.batch_matmul(core.reshape(sq, (1, 3, 3)), core.reshape(sq, (1, 3, 3)))
    corner = core.slice(s2, [0, 0], [2, 2])
    mean, var = core.moments(y, axes=[0])
    loss = (core.reduce_sum(xent) + core.reduce_sum(sparse) + core.reduce_sum(looked)
            + core.reduce_sum(core.nn.log_softmax(logits)) + core.reduce_sum(parts[1])
            + core.reduce_sum(bm) + core.reduce_sum(core.layer_normalization(y))
            + core.reduce_sum(mean + var) + core.reduce_sum(core.square(sq)))
    from core.builders_math import broadcast_gradient_args
    fetches += [loss, core.stop_gradient(bm), core.shape(y), core.size(y),
                *broadcast_gradient_args(core.shape(y), core.shape(mean)),
                core.fill([2, 2], 3.0) + core.zeros_like(corner) + core.ones_like(corner)]
    fetches += core.gradients(loss, [w, b, scale, offset, wd, emb, y, x])
    return [core.random_normal((2, 3), seed=1), core.truncated_normal((2, 3), seed=2),
            core.random_uniform((2, 3), seed=3)]


def _every_op_graph():
    """A graph using every op of the table: forward, gradients, updates.  ``after``: the
    variables the optimizers train, read after a step (each its own variable, so no
    update races another in TensorFlow, whose reads of a ref variable alias its buffer)."""
    import core.train
    rng = np.random.default_rng(0)
    g = core.Graph()
    feeds = {}
    with g.as_default():
        x = core.placeholder(core.float32, (5, 4), name="x")
        feeds[x] = rng.standard_normal((5, 4)).astype(np.float32)
        w = core.Variable(rng.standard_normal((4, 3)).astype(np.float32), name="w")
        h = core.matmul(x, w)
        h2 = core.tanh(h) + core.sigmoid(h) - core.relu(h)
        s = core.softmax(h2 * 2.0)
        r = core.reshape(core.transpose(s), (1, -1))
        c = core.concat([r, r], axis=1)
        sl = core.slice(c, [0, 1], [1, 4])
        m = core.reduce_mean(core.broadcast_to(sl, (2, 4)), axis=0, keepdims=True)
        tot = core.reduce_sum(-m) + core.reduce_sum(s, axis=[1])
        gw, gx = core.gradients(tot, [w, x])
        with core.control_dependencies([core.assign_add(w, gw * 0.5)]):
            step = core.assign_sub(w, core.identity(gw) * 0.25)
        fetches = [tot, gw, gx, step]
        random = _nn_and_math(rng, fetches, feeds)
        after, train = [], []
        for i, opt in enumerate([core.train.GradientDescentOptimizer(0.1),
                                 core.train.MomentumOptimizer(0.1, 0.9, use_nesterov=True),
                                 core.train.AdamOptimizer(0.1)]):
            v = core.Variable(rng.standard_normal((3,)).astype(np.float32), name=f"v{i}")
            loss = core.reduce_sum(v * core.constant(np.arange(3, dtype=np.float32)))
            train.append(opt.minimize(loss, global_step=core.train.get_or_create_global_step()
                                      if i == 0 else None))
            after += [v.value()] + [t.value() for t in opt.variables()]
        init = core.global_variables_initializer()
    return g, feeds, fetches, random, train, after, init


def test_every_op_of_the_table_exported_runs_on_tensorflow_with_our_results(tf):
    g, feeds, fetches, random, train, after, init = _every_op_graph()
    assert {op.type for op in g.get_operations()} == set(core.OPS), \
        "extend _every_op_graph to the ops added to the table"
    with Session(graph=g) as sess:
        sess.run(init)
        ours = sess.run(fetches + random, feeds)
        sess.run(train)
        ours += sess.run(after)
    v1 = tf.compat.v1
    tg = tf.Graph()
    with tg.as_default():
        v1.import_graph_def(v1.GraphDef.FromString(
            g.as_graph_def(add_shapes=True).SerializeToString()), name="")
        with v1.Session(graph=tg) as sess:
            sess.run(init.name)
            theirs = sess.run([t.name for t in fetches + random],
                              {t.name: v for t, v in feeds.items()})
            sess.run([op.name for op in train])
            theirs += sess.run([t.name for t in after])
    n = len(fetches)
    values = list(zip(fetches + random + after, ours, theirs))
    for t, a, b in values[:n] + values[n + len(random):]:
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=1e-5, err_msg=t.name)
    # The random ops: each generator draws its own numbers; the same shapes and ranges.
    (_, *normal), (_, *truncated), (_, *uniform) = values[n:n + len(random)]
    for a in normal + truncated + uniform:
        assert a.shape == (2, 3) and a.dtype == np.float32 and np.isfinite(a).all()
    assert all(np.abs(a).max() <= 2 for a in truncated)
    assert all(0 <= a.min() and a.max() < 1 for a in uniform)


def _tf_mlp_body(v1, tf, rng, devices=("", "")):
    x = v1.placeholder(tf.float32, (None, 6), name="x")
    with v1.device(devices[0]):
        w1 = v1.Variable(rng.standard_normal((6, 8)).astype(np.float32), name="w1",
                         use_resource=False)
        b1 = v1.Variable(np.full(8, 0.1, np.float32), name="b1", use_resource=False)
        h = v1.nn.relu(v1.matmul(x, w1) + b1)
        hc = v1.concat([h, v1.tanh(h)], axis=1)
    with v1.device(devices[1]):
        w2 = v1.Variable(rng.standard_normal((16, 3)).astype(np.float32), name="w2",
                         use_resource=False)
        v1.nn.softmax(v1.reduce_mean(hc, axis=1, keepdims=True) * v1.matmul(hc, w2), name="y")


def _tf_mlp(tf, devices=("", "")):
    """An MLP with concat built with tf.compat.v1 (VariableV2 variables), and its input."""
    v1 = tf.compat.v1
    rng = np.random.default_rng(0)
    g = tf.Graph()
    with g.as_default():
        _tf_mlp_body(v1, tf, rng, devices)
        v1.global_variables_initializer()
    return g, rng.standard_normal((4, 6)).astype(np.float32)


def test_tensorflow_mlp_frozen_and_with_variables_imports_from_pb_and_pbtxt(tf, tmp_path):
    v1 = tf.compat.v1
    g, feed = _tf_mlp(tf)
    with v1.Session(graph=g) as sess:
        sess.run("init")
        expected = sess.run("y:0", {"x:0": feed})
        frozen = v1.graph_util.convert_variables_to_constants(sess, g.as_graph_def(), ["y"])
    assert "VariableV2" not in {n.op for n in frozen.node}
    paths = [tf.io.write_graph(frozen, str(tmp_path), "frozen.pb", as_text=False),
             tf.io.write_graph(frozen, str(tmp_path), "frozen.pbtxt", as_text=True)]
    for path in paths:
        ours = core.Graph()
        with ours.as_default():
            (y,) = import_graph_def(path, return_elements=["y:0"])
        with Session(graph=ours) as sess:
            np.testing.assert_allclose(sess.run(y, {"import/x:0": feed}), expected, rtol=RTOL)
    # With its variables (VariableV2, Assign, read Identity), as tf.compat.v1 writes it.
    ours = core.Graph()
    with ours.as_default():
        y, init = import_graph_def(g.as_graph_def(), name="", return_elements=["y:0", "init"])
    assert ours.get_operation_by_name("w1").type == "Variable"
    assert [n[5:] for n in ours.get_operation_by_name("w1/Assign").colocation_groups()] == ["w1"]
    with Session(graph=ours) as sess:
        sess.run(init)
        np.testing.assert_allclose(sess.run(y, {"x:0": feed}), expected, rtol=RTOL)


def test_tensorflow_graph_with_devices_runs_across_our_server_processes(tf, servers):
    v1 = tf.compat.v1
    plain, feed = _tf_mlp(tf)  # the same values; TF's local session has no /job:worker
    with v1.Session(graph=plain) as sess:
        sess.run("init")
        expected = sess.run("y:0", {"x:0": feed})
    g, _ = _tf_mlp(tf, devices=("/job:worker/task:0", "/job:worker/task:1"))
    ours = core.Graph()
    with ours.as_default():
        y, init = import_graph_def(g.as_graph_def().SerializeToString(), name="",
                                   return_elements=["y:0", "init"])
    assert ours.get_operation_by_name("w2").device == "/job:worker/task:1"
    with Session(servers.target("worker", 0), graph=ours) as sess:
        sess.run(init)
        np.testing.assert_allclose(sess.run(y, {"x:0": feed}), expected, rtol=RTOL)
        placed = sess.placement
    assert placed["w1"].startswith("/job:worker/replica:0/task:0")
    assert placed["w2"].startswith("/job:worker/replica:0/task:1")


def _tf_cnn(tf, rng):
    """conv, bias, batch norm (inference), max and average pooling, dense, softmax."""
    v1 = tf.compat.v1
    x = v1.placeholder(tf.float32, (None, 8, 8, 3), name="x")
    w = v1.Variable(rng.standard_normal((3, 3, 3, 4)).astype(np.float32) * 0.3, name="conv_w",
                    use_resource=False)
    b = v1.Variable(np.full(4, 0.1, np.float32), name="conv_b", use_resource=False)
    h = v1.nn.relu(v1.nn.bias_add(v1.nn.conv2d(x, w, [1, 1, 1, 1], "SAME"), b))
    h, _, _ = v1.nn.fused_batch_norm(h, np.full(4, 1.5, np.float32), np.full(4, 0.2, np.float32),
                                     mean=np.full(4, 0.3, np.float32),
                                     variance=np.full(4, 2.0, np.float32), is_training=False)
    h = v1.nn.avg_pool(v1.nn.max_pool(h, [1, 2, 2, 1], [1, 2, 2, 1], "VALID"),
                       [1, 2, 2, 1], [1, 2, 2, 1], "SAME")
    wd = v1.Variable(rng.standard_normal((16, 5)).astype(np.float32) * 0.3, name="dense_w",
                     use_resource=False)
    logits = v1.nn.bias_add(v1.matmul(v1.reshape(h, [-1, 16]), wd), np.full(5, 0.05, np.float32))
    v1.nn.softmax(logits, name="y")
    return rng.standard_normal((2, 8, 8, 3)).astype(np.float32)


def _tf_attention(tf, rng):
    """Self-attention over (batch, seq, d) with a residual, then moments-based
    normalisation (Mean, SquaredDifference, StopGradient, Rsqrt)."""
    v1 = tf.compat.v1
    x = v1.placeholder(tf.float32, (2, 5, 8), name="x")

    def project(name):
        w = v1.Variable(rng.standard_normal((8, 8)).astype(np.float32) * 0.3, name=name,
                        use_resource=False)
        return v1.reshape(v1.matmul(v1.reshape(x, [10, 8]), w), [2, 5, 8])
    q, k, v = project("wq"), project("wk"), project("wv")
    scores = v1.matmul(q, k, transpose_b=True) / np.float32(np.sqrt(8.0))
    out = v1.matmul(v1.nn.softmax(scores), v) + x
    mean, var = v1.nn.moments(out, axes=[2], keepdims=True)
    v1.identity((out - mean) * v1.rsqrt(var + 1e-6), name="y")
    return rng.standard_normal((2, 5, 8)).astype(np.float32)


def _tf_concat_mlp(tf, rng):
    _tf_mlp_body(tf.compat.v1, tf, rng)
    return rng.standard_normal((4, 6)).astype(np.float32)


@pytest.fixture(scope="module")
def frozen_models(tf):
    """name -> (frozen GraphDef, input, TensorFlow's output y) of the three models."""
    v1 = tf.compat.v1
    out = {}
    for name, build in (("mlp", _tf_concat_mlp), ("cnn", _tf_cnn), ("attention", _tf_attention)):
        g = tf.Graph()
        with g.as_default():
            feed = build(tf, np.random.default_rng(0))
            init = v1.global_variables_initializer()
        with v1.Session(graph=g) as sess:
            sess.run(init)
            expected = sess.run("y:0", {"x:0": feed})
            frozen = v1.graph_util.convert_variables_to_constants(sess, g.as_graph_def(), ["y"])
        out[name] = frozen, feed, expected
    return out


@pytest.mark.parametrize("name", ["mlp", "cnn", "attention"])
def test_tensorflow_models_frozen_import_from_pb_and_pbtxt(tf, tmp_path, frozen_models, name):
    frozen, feed, expected = frozen_models[name]
    for path in (tf.io.write_graph(frozen, str(tmp_path), f"{name}.pb", as_text=False),
                 tf.io.write_graph(frozen, str(tmp_path), f"{name}.pbtxt", as_text=True)):
        ours = core.Graph()
        with ours.as_default():
            (y,) = import_graph_def(path, return_elements=["y:0"])
        with Session(graph=ours) as sess:
            np.testing.assert_allclose(sess.run(y, {"import/x:0": feed}), expected, rtol=RTOL,
                                       atol=1e-6, err_msg=path)


def test_tensorflow_models_run_across_our_server_processes(frozen_models, servers):
    """Each frozen model imported with its ops spread over two worker processes (a
    device function, as ``tf.device`` around ``import_graph_def``)."""
    for name, (frozen, feed, expected) in frozen_models.items():
        ours = core.Graph()
        count = iter(range(10**6))
        with ours.as_default(), core.device(lambda op: f"/job:worker/task:{next(count) % 2}"):
            (y,) = import_graph_def(frozen.SerializeToString(), return_elements=["y:0"])
        with Session(servers.target("worker", 0), graph=ours) as sess:
            np.testing.assert_allclose(sess.run(y, {"import/x:0": feed}), expected, rtol=RTOL,
                                       atol=1e-6, err_msg=name)
            assert len({d.split("/device:")[0] for d in sess.placement.values()}) == 2


@pytest.mark.parametrize("name, build", [
    ("mlp_training_step", lambda w: w.mlp_training_step(batch=8, layers=3, width=16,
                                                         inputs=12, outputs=4)),
    ("rnn_training_step", lambda w: w.rnn_training_step(batch=4, steps=3, hidden=8, inputs=6)),
    ("transformer_training_step", lambda w: w.transformer_training_step(
        seq=8, d_model=16, heads=2, blocks=1)),
    ("inception_training_step", lambda w: w.inception_training_step(batch=4, width=8,
                                                                     blocks=1)),
])
def test_our_workloads_exported_run_on_tensorflow_with_our_outputs(tf, tmp_path, name, build):
    """Each training step's updates (the values its Assign ops would write): TensorFlow's
    reads of ref variables alias the buffer an update writes, so running the updates
    themselves races in TensorFlow; their inputs do not."""
    import experiments.workloads as workloads
    w = build(workloads)
    g = w.graph
    deltas = [op.inputs[1] for op in g.get_operations() if op.type in ("AssignSub", "AssignAdd")]
    assert deltas
    with Session(graph=g) as sess:
        sess.run(w.init)
        ours = sess.run(deltas, feed_dict=w.feeds or None)
    path = write_graph(g, tmp_path, f"{name}.pb", as_text=False)
    with open(path, "rb") as f:
        theirs = run_tensorflow(tf, f.read(), [t.name for t in deltas],
                                {k.name: v for k, v in w.feeds.items()} or None, w.init.name)
    for t, a, b in zip(deltas, ours, theirs):
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=1e-6, err_msg=t.name)


def test_shapes_known_only_at_run_time_go_to_tensorflow_and_back(tf):
    """A gradient over an unknown batch broadcasts through Shape(x) at run time: the
    shape stays a tensor input both ways (with TF's inferred _output_shapes back)."""
    g = core.Graph()
    with g.as_default():
        x = core.placeholder(core.float32, (None, 3), name="x")
        y = core.reduce_sum(core.tanh(x), axis=[1])
        (dx,) = core.gradients(core.reduce_sum(y * y), [x])
    feed = np.arange(6, dtype=np.float32).reshape(2, 3) / 5
    with Session(graph=g) as sess:
        ours = sess.run(dx, {x: feed})
    v1 = tf.compat.v1
    tg = tf.Graph()
    with tg.as_default():
        v1.import_graph_def(v1.GraphDef.FromString(g.as_graph_def().SerializeToString()),
                            name="")
        with v1.Session(graph=tg) as sess:
            theirs = sess.run(dx.name, {"x:0": feed})
    np.testing.assert_allclose(ours, theirs, rtol=RTOL)
    back = core.Graph()
    with back.as_default():
        (dx2,) = import_graph_def(tg.as_graph_def(add_shapes=True), return_elements=[dx.name])
    assert [len(op.inputs) for op in back.get_operations() if op.type == "BroadcastTo"] == [2, 2]
    with Session(graph=back) as sess:
        np.testing.assert_allclose(sess.run(dx2, {"import/x:0": feed}), theirs, rtol=RTOL)


@settings(max_examples=6)
@given(float_dags(max_ops=10))
def test_random_graphs_give_tensorflows_values(tf, g):
    tensors = [t.name for op in g.get_operations() for t in op.outputs]
    with Session(graph=g) as sess:
        ours = sess.run(tensors)
    theirs = run_tensorflow(tf, g.as_graph_def().SerializeToString(), tensors)
    for name, a, b in zip(tensors, ours, theirs):
        np.testing.assert_allclose(a, b, rtol=RTOL, err_msg=name)
