"""The nn op family (core.ops_nn, core.nn, core.grads_nn): shapes and dtypes, errors that
name the shapes at fault, builders with TensorFlow's signatures, costs, and gradients
checked by finite differences on the in-process executor."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import core as tf
from core.ops import OPS, ShapeError, get_op_def
from core.ops_nn import NN_OPS, conv_output_size
from runtime import Session

grad_check = settings(max_examples=8, deadline=None)


# --- shapes ------------------------------------------------------------------------------

def _spec(shape, dtype):
    from core.opdef import TensorSpec
    return TensorSpec(dtype, tuple(shape))


def infer(op_type, shapes, attrs, dtypes=None):
    dtypes = dtypes or [tf.float32] * len(shapes)
    return [s.shape for s in OPS[op_type].infer([_spec(s, d) for s, d in zip(shapes, dtypes)],
                                                attrs)]


CONV = {"strides": (1, 1, 1, 1), "padding": "SAME"}


@given(size=st.integers(1, 20), window=st.integers(1, 5), stride=st.integers(1, 4),
       dilation=st.integers(1, 3))
def test_output_size_is_tensorflows_rule(size, window, stride, dilation):
    effective = (window - 1) * dilation + 1
    assert conv_output_size(size, window, stride, "SAME", dilation) == -(-size // stride)
    if size >= effective:
        assert conv_output_size(size, window, stride, "VALID", dilation) == (
            -(-(size - effective + 1) // stride))
    else:
        with pytest.raises(ShapeError, match="larger than the input"):
            conv_output_size(size, window, stride, "VALID", dilation)


def test_conv_shapes_with_strides_padding_dilation_and_unknown_dims():
    assert infer("Conv2D", [(8, 32, 32, 3), (3, 3, 3, 16)], CONV) == [(8, 32, 32, 16)]
    assert infer("Conv2D", [(None, 32, 31, 3), (3, 3, 3, 16)],
                 {"strides": (1, 2, 2, 1), "padding": "VALID"}) == [(None, 15, 15, 16)]
    assert infer("Conv2D", [(1, 9, 9, 2), (3, 3, 2, 4)],
                 {"strides": (1, 1, 1, 1), "padding": "VALID", "dilations": (1, 2, 2, 1)}) == [
        (1, 5, 5, 4)]
    assert infer("Conv2D", [(2, None, 8, 3), (3, 3, 3, 4)], CONV) == [(2, None, 8, 4)]
    assert infer("Conv2DBackpropInput", [(3, 3, 3, 16), (None, 16, 16, 16)],
                 {"strides": (1, 2, 2, 1), "padding": "SAME", "input_sizes": (None, 32, 32, 3)}
                 ) == [(None, 32, 32, 3)]
    assert infer("Conv2DBackpropFilter", [(8, 32, 32, 3), (8, 32, 32, 16)],
                 dict(CONV, filter_sizes=(3, 3, 3, 16))) == [(3, 3, 3, 16)]


def test_conv_errors_name_the_shapes_at_fault():
    with pytest.raises(ShapeError, match=r"input channels differ.*\(8, 32, 32, 3\).*\(3, 3, 4, 16\)"):
        infer("Conv2D", [(8, 32, 32, 3), (3, 3, 4, 16)], CONV)
    with pytest.raises(ShapeError, match=r"\(5, 5, 3, 1\) on input \(1, 4, 4, 3\).*larger"):
        infer("Conv2D", [(1, 4, 4, 3), (5, 5, 3, 1)], {"strides": (1, 1, 1, 1), "padding": "VALID"})
    with pytest.raises(ShapeError, match="NHWC only"):
        infer("Conv2D", [(1, 3, 4, 4), (1, 1, 3, 1)], dict(CONV, data_format="NCHW"))
    with pytest.raises(ShapeError, match=r"strides must be \[1, h, w, 1\]"):
        infer("Conv2D", [(1, 4, 4, 3), (1, 1, 3, 1)], {"strides": (2, 1, 1, 1), "padding": "SAME"})
    with pytest.raises(ShapeError, match="padding must be one of"):
        infer("Conv2D", [(1, 4, 4, 3), (1, 1, 3, 1)], {"strides": (1, 1, 1, 1), "padding": "FULL"})
    with pytest.raises(ShapeError, match="rank 4"):
        infer("Conv2D", [(4, 4, 3), (1, 1, 3, 1)], CONV)
    with pytest.raises(ShapeError, match="floating-point"):
        infer("Conv2D", [(1, 4, 4, 3), (1, 1, 3, 1)], CONV, [tf.int32, tf.int32])
    with pytest.raises(ShapeError, match=r"out_backprop \(8, 16, 16, 16\) is not the shape"):
        infer("Conv2DBackpropInput", [(3, 3, 3, 16), (8, 16, 16, 16)],
              dict(CONV, input_sizes=(8, 32, 32, 3)))
    with pytest.raises(ShapeError, match="only the batch may be unknown"):
        infer("Conv2DBackpropInput", [(3, 3, 3, 16), (8, 16, 16, 16)],
              dict(CONV, input_sizes=(8, None, 16, 3)))
    with pytest.raises(ShapeError, match="Conv2D op 'c'"):  # the builder adds the op's name
        with tf.Graph().as_default():
            tf.nn.conv2d(tf.placeholder(tf.float32, (1, 4, 4, 3)),
                         tf.placeholder(tf.float32, (1, 1, 2, 1)), 1, "SAME", name="c")


def test_pool_bias_and_batch_norm_shapes_and_errors():
    pool = {"ksize": (1, 3, 3, 1), "strides": (1, 2, 2, 1), "padding": "SAME"}
    assert infer("MaxPool", [(None, 7, 7, 5)], pool) == [(None, 4, 4, 5)]
    assert infer("AvgPool", [(2, 7, 7, 5)], dict(pool, padding="VALID")) == [(2, 3, 3, 5)]
    assert infer("MaxPoolGrad", [(2, 7, 7, 5), (2, 4, 4, 5), (2, 4, 4, 5)], pool) == [(2, 7, 7, 5)]
    assert infer("AvgPoolGrad", [(None, 4, 4, 5)], dict(pool, orig_input_shape=(None, 7, 7, 5))
                 ) == [(None, 7, 7, 5)]
    with pytest.raises(ShapeError, match=r"ksize \(1, 3, 3, 1\) on input \(2, 2, 2, 5\).*larger"):
        infer("MaxPool", [(2, 2, 2, 5)], dict(pool, padding="VALID"))
    with pytest.raises(ShapeError, match=r"grad \(2, 3, 3, 5\) is not the shape \(2, 4, 4, 5\)"):
        infer("MaxPoolGrad", [(2, 7, 7, 5), (2, 4, 4, 5), (2, 3, 3, 5)], pool)
    assert infer("BiasAdd", [(None, 4, 4, 3), (3,)], {}) == [(None, 4, 4, 3)]
    assert infer("BiasAddGrad", [(None, 4, 4, 3)], {}) == [(3,)]
    with pytest.raises(ShapeError, match=r"bias \(4,\) does not match the last dimension of value \(2, 3\)"):
        infer("BiasAdd", [(2, 3), (4,)], {})
    bn = infer("FusedBatchNormV3", [(None, 4, 4, 3), (3,), (3,), (0,), (0,)], {"is_training": True})
    assert bn == [(None, 4, 4, 3), (3,), (3,), (3,), (3,), (0,)]
    with pytest.raises(ShapeError, match=r"mean \(0,\) does not match the 3 channels"):
        infer("FusedBatchNormV3", [(2, 4, 4, 3), (3,), (3,), (0,), (0,)], {"is_training": False})
    with pytest.raises(ShapeError, match=r"scale \(4,\) does not match"):
        infer("FusedBatchNormV3", [(2, 4, 4, 3), (4,), (3,), (3,), (3,)], {})
    assert infer("FusedBatchNormGradV3", [(2, 4, 4, 3), (2, 4, 4, 3), (3,), (3,), (3,), (0,)],
                 {}) == [(2, 4, 4, 3), (3,), (3,), (0,), (0,)]


def test_gather_segment_sum_and_loss_shapes_and_errors():
    i32, f32, i64 = tf.int32, tf.float32, tf.int64
    assert infer("GatherV2", [(100, 8), (None, 5)], {"axis": 0}, [f32, i32]) == [(None, 5, 8)]
    assert infer("GatherV2", [(3, 100, 8), (7,)], {"axis": -2}, [f32, i64]) == [(3, 7, 8)]
    with pytest.raises(ShapeError, match="indices must be int32 or int64, got float32"):
        infer("GatherV2", [(100, 8), (5,)], {"axis": 0}, [f32, f32])
    with pytest.raises(ShapeError, match="axis 2 is out of range"):
        infer("GatherV2", [(100, 8), (5,)], {"axis": 2}, [f32, i32])
    assert infer("UnsortedSegmentSum", [(None, 5, 8), (None, 5)], {"num_segments": 10},
                 [f32, i32]) == [(10, 8)]
    with pytest.raises(ShapeError, match=r"segment_ids \(4,\) must be a prefix of data's shape \(5, 8\)"):
        infer("UnsortedSegmentSum", [(5, 8), (4,)], {"num_segments": 10}, [f32, i32])
    assert infer("SoftmaxCrossEntropyWithLogits", [(None, 10), (None, 10)], {}) == [
        (None,), (None, 10)]
    with pytest.raises(ShapeError, match=r"features \(4, 10\) and labels \(4, 9\) differ"):
        infer("SoftmaxCrossEntropyWithLogits", [(4, 10), (4, 9)], {})
    assert infer("SparseSoftmaxCrossEntropyWithLogits", [(4, 10), (4,)], {}, [f32, i64]) == [
        (4,), (4, 10)]
    with pytest.raises(ShapeError, match=r"labels must be int32 or int64"):
        infer("SparseSoftmaxCrossEntropyWithLogits", [(4, 10), (4,)], {}, [f32, f32])
    with pytest.raises(ShapeError, match=r"features \(4, 10\) and labels \(3,\) differ in batch"):
        infer("SparseSoftmaxCrossEntropyWithLogits", [(4, 10), (3,)], {}, [f32, i32])


# --- the table ------------------------------------------------------------------------------

def test_tensorflow_names_inputs_and_const_inputs():
    for name in NN_OPS:
        assert get_op_def(name) is OPS[name]
    assert OPS["Conv2DBackpropInput"].const_inputs == ((0, "input_sizes"),)
    assert OPS["Conv2DBackpropFilter"].const_inputs == ((1, "filter_sizes"),)
    assert OPS["AvgPoolGrad"].const_inputs == ((0, "orig_input_shape"),)
    assert OPS["GatherV2"].const_inputs == ((2, "axis"),)
    assert OPS["UnsortedSegmentSum"].const_inputs == ((2, "num_segments"),)
    assert OPS["FusedBatchNormV3"].min_inputs == 5 and OPS["FusedBatchNormGradV3"].min_inputs == 6
    for name in ("Conv2D", "MaxPool", "AvgPool", "FusedBatchNormV3", "SoftmaxCrossEntropyWithLogits"):
        assert OPS[name].kernels == {"CPU": {"float32", "float64"}, "GPU": {"float32", "float64"}}
        assert OPS[name].gradient is not None and OPS[name].multithreaded


def test_costs():
    x, w = _spec((8, 32, 32, 3), tf.float32), _spec((3, 3, 3, 16), tf.float32)
    attrs = {"strides": (1, 2, 2, 1), "padding": "SAME"}
    outs = OPS["Conv2D"].infer([x, w], attrs)
    assert OPS["Conv2D"].flops([x, w], outs, attrs) == 2 * 8 * 16 * 16 * 16 * 3 * 3 * 3
    dy = outs[0]
    back = dict(attrs, input_sizes=x.shape)
    assert OPS["Conv2DBackpropInput"].flops([w, dy], [x], back) == 2 * 8 * 16 * 16 * 16 * 27
    assert OPS["Conv2DBackpropFilter"].flops([x, dy], [w], back) == 2 * 8 * 16 * 16 * 16 * 27
    pool = {"ksize": (1, 2, 2, 1), "strides": (1, 2, 2, 1), "padding": "VALID"}
    assert OPS["MaxPool"].flops([x], OPS["MaxPool"].infer([x], pool), pool) == 8 * 16 * 16 * 3 * 4
    # An embedding lookup reads the rows it gathers, not the whole table.
    table, ids = _spec((100000, 64), tf.float32), _spec((32, 10), tf.int32)
    out = OPS["GatherV2"].infer([table, ids], {"axis": 0})
    assert OPS["GatherV2"].bytes_read([table, ids], {"axis": 0}) == 320 * 64 * 4 + 320 * 4
    assert OPS["GatherV2"].bytes_written(out, {"axis": 0}) == 320 * 64 * 4


# --- builders -------------------------------------------------------------------------------

def test_builders_mirror_tf_nn():
    with tf.Graph().as_default() as g:
        x = tf.placeholder(tf.float32, (None, 28, 28, 1))
        w = tf.Variable(np.zeros((5, 5, 1, 8), np.float32))
        for strides in (2, [2, 2], [1, 2, 2, 1]):
            y = tf.nn.conv2d(x, w, strides=strides, padding="SAME")
            assert y.op.attrs["strides"] == (1, 2, 2, 1) and y.shape == (None, 14, 14, 8)
        assert tf.nn.conv2d(x, filters=w, strides=1, padding="valid").shape == (None, 24, 24, 8)
        h = tf.nn.bias_add(y, np.arange(8, dtype=np.float32), name="b")
        assert (h.op.name, h.op.type) == ("b", "BiasAdd")
        p1 = tf.nn.max_pool(value=h, ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding="VALID")
        p2 = tf.nn.max_pool(input=h, ksize=2, strides=2, padding="VALID")
        p3 = tf.nn.avg_pool2d(h, 3, 1, "SAME")
        assert p1.shape == p2.shape == (None, 7, 7, 8) and p3.op.type == "AvgPool"
        y, mean, var = tf.nn.fused_batch_norm(h, np.ones(8, np.float32), epsilon=1e-7)
        assert y.op.type == "FusedBatchNormV3" and mean.shape == var.shape == (8,)
        assert y.op.attrs["epsilon"] == pytest.approx(1.001e-5)  # raised as TensorFlow does
        assert [t.shape for t in y.op.inputs[3:]] == [(0,), (0,)]
        ids = tf.placeholder(tf.int32, (None, 3))
        e = tf.nn.embedding_lookup([tf.Variable(np.zeros((50, 4), np.float32))], ids)
        assert e.shape == (None, 3, 4) and e.op.type == "GatherV2"
        logits = tf.placeholder(tf.float32, (None, 5, 10))
        loss = tf.nn.softmax_cross_entropy_with_logits(labels=tf.nn.softmax(logits), logits=logits)
        assert loss.shape == (None, 5)
        sparse = tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=tf.placeholder(tf.int64, (None,)), logits=tf.placeholder(tf.float32, (None, 10)))
        assert sparse.shape == (None,) and sparse.op.type == "SparseSoftmaxCrossEntropyWithLogits"
        assert tf.nn.relu(x).op.type == "Relu" and tf.nn.tanh(x).op.type == "Tanh"
        assert tf.nn.sigmoid(x).op.type == "Sigmoid"
        assert tf.nn.log_softmax(logits).op.type == "LogSoftmax"
    g.validate()


def test_builders_reject_what_they_cannot_build():
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float32, (1, 4, 4, 3))
        with pytest.raises(ValueError, match="explicit paddings are not supported"):
            tf.nn.conv2d(x, tf.placeholder(tf.float32, (1, 1, 3, 1)), 1, [[0, 0], [1, 1]])
        with pytest.raises(ValueError, match="strides must be an int or a list of 1, 2 or 4"):
            tf.nn.conv2d(x, tf.placeholder(tf.float32, (1, 1, 3, 1)), [1, 1, 1], "SAME")
        with pytest.raises(ValueError, match="needs mean and variance"):
            tf.nn.fused_batch_norm(x, np.ones(3, np.float32), is_training=False)
        with pytest.raises(ValueError, match="over 2 shards is not supported"):
            tf.nn.embedding_lookup([x, x], [0])
        with pytest.raises(ValueError, match="by keyword"):
            tf.nn.softmax_cross_entropy_with_logits(x, x)
        with pytest.raises(ValueError, match="only the last axis"):
            tf.nn.softmax_cross_entropy_with_logits_v2(x, x, axis=1)


# --- gradients by finite differences ----------------------------------------------------------

def check_gradients(build, feeds: dict, rng, directions: int = 2, tol: float = 1e-6, wrt=None):
    """Build ``loss = sum(w_i * out_i)`` over the outputs ``build(*placeholders)``
    returns, take its gradients to every fed placeholder with core.gradients, and
    compare each with central differences along random directions (float64).  ``wrt``:
    the names of the placeholders to check (default: the floating ones)."""
    g = tf.Graph()
    with g.as_default():
        names = list(feeds)
        holders = [tf.placeholder(feeds[n].dtype, feeds[n].shape, name=n) for n in names]
        outs = build(*holders)
        outs = outs if isinstance(outs, (list, tuple)) else [outs]
        loss = None
        for out in outs:
            weights = tf.constant(rng.standard_normal(out.shape))
            term = tf.reduce_sum(out * weights)
            loss = term if loss is None else loss + term
        floats = [h for h, n in zip(holders, names)
                  if (n in wrt if wrt else h.dtype.is_floating)]
        grads = tf.gradients(loss, floats)
    with Session(graph=g) as sess:
        base = {h: feeds[n] for h, n in zip(holders, names)}
        analytic = sess.run(grads, base)
        for h, grad in zip(floats, analytic):
            for _ in range(directions):
                v = rng.standard_normal(h.shape)
                eps = 1e-6
                plus = sess.run(loss, {**base, h: base[h] + eps * v})
                minus = sess.run(loss, {**base, h: base[h] - eps * v})
                numeric = (plus - minus) / (2 * eps)
                assert abs(numeric - float(np.sum(grad * v))) <= tol * max(1.0, abs(numeric)), (
                    h.name, numeric, float(np.sum(grad * v)))


shapes = st.tuples(st.integers(1, 2), st.integers(3, 6), st.integers(3, 6), st.integers(1, 3))


@grad_check
@given(shape=shapes, k=st.integers(1, 3), cout=st.integers(1, 3), stride=st.integers(1, 2),
       padding=st.sampled_from(["SAME", "VALID"]), dilation=st.integers(1, 2),
       seed=st.integers(0, 2**16))
def test_conv2d_gradient(shape, k, cout, stride, padding, dilation, seed):
    rng = np.random.default_rng(seed)
    if padding == "VALID" and min(shape[1:3]) < (k - 1) * dilation + 1:
        padding = "SAME"
    feeds = {"x": rng.standard_normal(shape), "w": rng.standard_normal((k, k, shape[3], cout))}
    check_gradients(lambda x, w: tf.nn.conv2d(x, w, strides=stride, padding=padding,
                                              dilations=dilation), feeds, rng)


@grad_check
@given(shape=shapes, stride=st.integers(1, 2), padding=st.sampled_from(["SAME", "VALID"]),
       seed=st.integers(0, 2**16))
def test_conv2d_backprop_gradients(shape, stride, padding, seed):
    """The backprops are differentiable too (the gradient of a gradient)."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((2, 2, shape[3], 2))
    attrs = {"strides": (1, stride, stride, 1), "padding": padding}
    from core.ops_nn import infer_conv2d
    from core.opdef import TensorSpec
    dy_shape = infer_conv2d([TensorSpec(tf.float64, shape), TensorSpec(tf.float64, w.shape)],
                            attrs)[0].shape

    def build(x, f, dy):
        g = x.graph
        dx = g.create_op("Conv2DBackpropInput", [f, dy], dict(attrs, input_sizes=shape)).outputs[0]
        df = g.create_op("Conv2DBackpropFilter", [x, dy], dict(attrs, filter_sizes=w.shape)).outputs[0]
        return [dx, df]
    feeds = {"x": rng.standard_normal(shape), "f": w, "dy": rng.standard_normal(dy_shape)}
    check_gradients(build, feeds, rng)


@grad_check
@given(shape=shapes, k=st.integers(1, 3), stride=st.integers(1, 3),
       padding=st.sampled_from(["SAME", "VALID"]), seed=st.integers(0, 2**16))
def test_pool_gradients(shape, k, stride, padding, seed):
    rng = np.random.default_rng(seed)
    if padding == "VALID" and min(shape[1:3]) < k:
        padding = "SAME"
    n = int(np.prod(shape))
    x = (rng.permutation(n) + rng.uniform(0.1, 0.4, n)).reshape(shape)  # no ties: max is smooth
    check_gradients(lambda x: [tf.nn.max_pool2d(x, k, stride, padding),
                               tf.nn.avg_pool2d(x, k, stride, padding)], {"x": x}, rng)


@grad_check
@given(shape=shapes, seed=st.integers(0, 2**16))
def test_avg_pool_grad_gradient(shape, seed):
    rng = np.random.default_rng(seed)
    pool = {"ksize": (1, 2, 2, 1), "strides": (1, 1, 1, 1), "padding": "SAME"}

    def build(g):
        return g.graph.create_op("AvgPoolGrad", [g], dict(pool, orig_input_shape=shape)).outputs[0]
    check_gradients(build, {"g": rng.standard_normal(shape)}, rng)


@grad_check
@given(shape=st.lists(st.integers(1, 4), min_size=2, max_size=4), seed=st.integers(0, 2**16))
def test_bias_add_gradient_and_its_gradient(shape, seed):
    rng = np.random.default_rng(seed)
    feeds = {"v": rng.standard_normal(shape), "b": rng.standard_normal(shape[-1])}

    def build(v, b):
        y = tf.nn.bias_add(v, b)
        return [y, v.graph.create_op("BiasAddGrad", [y * y], {}).outputs[0]]
    check_gradients(build, feeds, rng)


@grad_check
@given(shape=shapes, training=st.booleans(), seed=st.integers(0, 2**16))
def test_fused_batch_norm_gradient(shape, training, seed):
    rng = np.random.default_rng(seed)
    c = shape[3]
    if training and shape[0] * shape[1] * shape[2] < 2:
        training = False
    feeds = {"x": rng.standard_normal(shape) * 2 + 1, "scale": rng.standard_normal(c),
             "offset": rng.standard_normal(c), "mean": rng.standard_normal(c),
             "var": rng.uniform(0.5, 2, c)}

    def build(x, scale, offset, mean, var):
        y, _, _ = tf.nn.fused_batch_norm(x, scale, offset, mean if not training else None,
                                         var if not training else None, epsilon=1e-3,
                                         is_training=training)
        return y
    if training:
        feeds = {k: v for k, v in feeds.items() if k not in ("mean", "var")}
        check_gradients(lambda x, scale, offset: build(x, scale, offset, None, None), feeds, rng,
                        tol=1e-5)
    else:
        # In inference TensorFlow's gradient reaches x, scale and offset only.
        check_gradients(build, feeds, rng, wrt=("x", "scale", "offset"))


@grad_check
@given(rows=st.integers(1, 6), width=st.integers(1, 4), ids=st.lists(st.integers(0, 6), min_size=1,
                                                                   max_size=6),
       axis=st.integers(0, 1), seed=st.integers(0, 2**16))
def test_gather_and_segment_sum_gradients(rows, width, ids, axis, seed):
    rng = np.random.default_rng(seed)
    size = rows if axis == 0 else width
    gather_ids = np.array([i % size for i in ids], np.int32).reshape(-1, 1)
    # Non-negative: the gradient is a GatherV2, which rejects the ids the sum drops.
    segment_ids = np.array(ids, np.int64).reshape(-1, 1)
    params = rng.standard_normal((rows, width) if axis == 0 else (2, width, rows))

    def build(p, i, d, s):
        gathered = p.graph.create_op("GatherV2", [p, i], {"axis": axis}).outputs[0]
        summed = p.graph.create_op("UnsortedSegmentSum", [d, s], {"num_segments": 7}).outputs[0]
        return [gathered, summed]
    feeds = {"p": params, "i": gather_ids, "d": rng.standard_normal((len(ids), 1, 3)),
             "s": segment_ids}
    check_gradients(build, feeds, rng)


@grad_check
@given(batch=st.integers(1, 4), classes=st.integers(1, 6), seed=st.integers(0, 2**16))
def test_softmax_cross_entropy_gradients(batch, classes, seed):
    """Both outputs feed the loss: the gradient's second-order term is checked too."""
    rng = np.random.default_rng(seed)
    logits = rng.standard_normal((batch, classes)) * 3
    labels = rng.dirichlet(np.ones(classes), batch)
    sparse = rng.integers(0, classes, batch).astype(np.int64)

    def build(f, lab, idx):
        g = f.graph
        dense = g.create_op("SoftmaxCrossEntropyWithLogits", [f, lab], {}).outputs
        spars = g.create_op("SparseSoftmaxCrossEntropyWithLogits", [f, idx], {}).outputs
        return list(dense) + list(spars) + [tf.nn.log_softmax(f)]
    check_gradients(build, {"f": logits, "lab": labels, "idx": sparse}, rng)


# --- graphs end to end ------------------------------------------------------------------------

def _features(batch):
    """conv -> bias -> relu -> batch norm -> max pool -> avg pool: (batch, 1, 1, 4)."""
    rng = np.random.default_rng(0)
    x = tf.placeholder(tf.float32, (batch, 8, 8, 3), name="x")
    w = tf.Variable(rng.standard_normal((3, 3, 3, 4)).astype(np.float32) * 0.3, name="w")
    b = tf.Variable(np.zeros(4, np.float32), name="b")
    h = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, w, strides=1, padding="SAME"), b))
    h, _, _ = tf.nn.fused_batch_norm(h, np.ones(4, np.float32))
    h = tf.nn.max_pool(h, ksize=2, strides=2, padding="VALID")
    return x, w, b, tf.nn.avg_pool(h, ksize=4, strides=4, padding="VALID")


def test_an_unknown_batch_gives_the_same_gradients():
    """A batch of None, fed at run time: the loss's gradients equal a known batch's."""
    rng = np.random.default_rng(1)
    xs = rng.standard_normal((3, 8, 8, 3)).astype(np.float32)
    ys = np.array([0, 3, 1], np.int32)
    results = []
    for batch in (3, None):
        g = tf.Graph()
        with g.as_default():
            x, w, b, y = _features(batch)
            labels = tf.placeholder(tf.int32, (batch,))
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=labels, logits=tf.reshape(y, (-1, 4))))
            grads = tf.gradients(loss, [x, w, b])
            init = tf.global_variables_initializer()
        assert grads[0].shape == (batch, 8, 8, 3)
        with Session(graph=g) as sess:
            sess.run(init)
            results.append(sess.run(grads, {x: xs, labels: ys}))
    for known, unknown in zip(*results):
        np.testing.assert_allclose(known, unknown, rtol=1e-5, atol=1e-6)


def test_a_small_cnn_learns():
    rng = np.random.default_rng(2)
    xs = rng.standard_normal((6, 8, 8, 3)).astype(np.float32)
    ys = np.array([0, 3, 1, 2, 0, 1], np.int32)
    with tf.Graph().as_default() as g:
        x, w, b, y = _features(6)
        labels = tf.placeholder(tf.int32, (6,))
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=labels, logits=tf.reshape(y, (6, 4))))
        dw, db = tf.gradients(loss, [w, b])
        step = tf.group(tf.assign_sub(w, dw * 0.5), tf.assign_sub(b, db * 0.5))
        init = tf.global_variables_initializer()
    with Session(graph=g) as sess:
        sess.run(init)
        losses = [sess.run([loss, step], {x: xs, labels: ys})[0] for _ in range(8)]
    assert losses[-1] < 0.8 * losses[0], losses


def test_v1_cross_entropy_passes_no_gradient_to_labels_and_v2_does():
    with tf.Graph().as_default():
        logits = tf.placeholder(tf.float32, (2, 3))
        labels = tf.nn.softmax(tf.placeholder(tf.float32, (2, 3)))
        v1 = tf.nn.softmax_cross_entropy_with_logits(labels=labels, logits=logits)
        v2 = tf.nn.softmax_cross_entropy_with_logits_v2(labels=labels, logits=logits)
        assert tf.gradients(v1, [labels]) == [None]
        (d_labels,) = tf.gradients(v2, [labels], grad_ys=tf.placeholder(tf.float32, (2,)))
        assert d_labels is not None and d_labels.shape == (2, 3)


def test_bias_add_grad_grad_with_an_unknown_batch():
    with tf.Graph().as_default() as g:
        v = tf.placeholder(tf.float64, (None, 3))
        db = g.create_op("BiasAddGrad", [v * v], {}).outputs[0]
        (dv,) = tf.gradients(db, [v], grad_ys=tf.constant(np.array([1.0, 2.0, 3.0])))
    xs = np.arange(6.0).reshape(2, 3)
    with Session(graph=g) as sess:
        np.testing.assert_allclose(sess.run(dv, {v: xs}), 2 * xs * [1.0, 2.0, 3.0])


def test_colocated_gradients_of_a_convolution_stay_with_it():
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float32, (2, 8, 8, 3))
        with tf.device("/gpu:1"):
            w = tf.Variable(np.ones((3, 3, 3, 4), np.float32), name="w")
            y = tf.nn.conv2d(x, w, strides=1, padding="SAME", name="conv")
        (dw,) = tf.gradients(tf.reduce_sum(y), [w], colocate_gradients_with_ops=True)
    assert dw.op.type == "Conv2DBackpropFilter" and dw.op.colocation_groups() == ["loc:@conv"]
