"""The math and array ops: shape inference and its errors, builders and operators,
slicing, seeds, unknown dimensions through gradients and the executor, and
finite-difference checks of every gradient (hypothesis, on the in-process executor)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import core as tf
from core.ops import OPS, ShapeError, TensorSpec
from runtime import Session

few = settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def spec(*shape, dtype=tf.float32):
    return TensorSpec(dtype, shape)


# --- inference and its errors ----------------------------------------------------------------

@pytest.mark.parametrize("x, y, attrs, out", [
    ((5, 2, 3), (3, 4), {}, (5, 2, 4)),
    ((1, 2, 3), (7, 3, 4), {}, (7, 2, 4)),
    ((None, 3, 2), (None, 3, 4), {"adj_x": True}, (None, 2, 4)),
    ((2, 4, 3), (2, 5, 3), {"adj_y": True}, (2, 4, 5)),
])
def test_batch_matmul_broadcasts_batch_axes(x, y, attrs, out):
    assert OPS["BatchMatMulV2"].infer([spec(*x), spec(*y)], attrs) == [spec(*out)]


def test_bad_shapes_raise_shape_error_naming_the_op_and_shapes():
    g = tf.Graph()
    with g.as_default():
        a, b = tf.zeros([2, 3, 4]), tf.zeros([2, 5, 6])
        with pytest.raises(ShapeError, match=r"BatchMatMulV2 op 'MatMul'.*\(2, 3, 4\) @ \(2, 5, 6\)"):
            tf.matmul(a, b)
        with pytest.raises(ShapeError, match=r"batch dimensions of \(2, 3, 4\) and \(3, 4, 2\)"):
            tf.matmul(a, tf.zeros([3, 4, 2]))
        with pytest.raises(ShapeError, match=r"Split.*\(2, 3, 4\) into 2"):
            tf.split(a, 2, axis=1)
        with pytest.raises(ShapeError, match="SplitV size_splits"):
            tf.split(a, [1, 1], axis=1)
        with pytest.raises(ShapeError, match=r"Pad.*\(2, 3, 4\)"):
            tf.pad(a, [[1, 1]])
        with pytest.raises(ShapeError, match="Tile"):
            tf.tile(a, [1, 2])
        with pytest.raises(ShapeError, match=r"index 5 is out of bounds for axis 1"):
            a[:, 5]
        with pytest.raises(ShapeError, match="floating"):
            tf.exp(tf.constant([1, 2]))
        with pytest.raises(ShapeError, match=r"AddN needs inputs of one shape"):
            tf.add_n([a, tf.zeros([2, 3, 5])])
        with pytest.raises(ShapeError, match=r"Squeeze axis 1 of shape \(2, 3, 4\)"):
            tf.squeeze(a, 1)


def test_tf_type_names_and_const_inputs():
    for op in ("RealDiv", "AddN", "Fill", "StridedSlice", "RandomStandardNormal", "SplitV"):
        assert op in OPS and OPS[op].tf_type is None
    assert dict(OPS["Fill"].const_inputs) == {0: "dims"}
    assert dict(OPS["StridedSlice"].const_inputs) == {1: "begin", 2: "end", 3: "strides"}
    assert dict(OPS["RandomUniform"].const_inputs) == {0: "shape"}


# --- builders and operators ----------------------------------------------------------------------

def test_operators_build_tensorflows_ops():
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 3])
        i = tf.constant([1, 2])
        assert (x / 2.0).op.type == "RealDiv" and (2.0 / x).op.inputs[1] is x
        half = i / 2
        assert half.dtype is tf.float64 and [t.op.type for t in half.op.inputs] == ["Cast", "Cast"]
        assert (x ** 2).op.type == "Pow" and abs(x).op.type == "Abs" and (-x).op.type == "Neg"
        assert x[0].shape == (3,) and x[1:3, :].shape == (None, 3)
        assert x[..., None].shape == (None, 3, 1) and x[:, ::-1].shape == (None, 3)
        with pytest.raises(TypeError, match="FloorDiv"):
            x // 2
        with pytest.raises(TypeError, match="not iterable"):
            list(x)
        with pytest.raises(TypeError, match="indexing by a tensor"):
            x[i]
        v = tf.Variable(np.ones((2, 3), np.float32))
        assert (v / 2.0).shape == (2, 3) and v[1].shape == (3,)
        assert tf.matmul(tf.zeros([4, 2, 3]), tf.zeros([3, 5])).op.type == "BatchMatMulV2"
        assert (tf.zeros([4, 2, 3]) @ tf.zeros([4, 3, 5])).shape == (4, 2, 5)
        assert tf.square(x).op.type == "Square" and tf.cast(x, tf.float32) is x
        assert tf.zeros([2, 3]).op.type == "Fill" and tf.ones([2], tf.int32).dtype is tf.int32
        assert tf.add_n([x]) is x and tf.add_n([x, x, x]).op.type == "AddN"


def test_builders_run_on_the_executor():
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float64, [None, 4])
        parts = tf.split(x, [1, -1], axis=1)
        fetches = {
            "fill": tf.fill([2], 3.0), "zeros": tf.zeros_like(x), "ones": tf.ones_like(x),
            "split": parts[1], "tile": tf.tile(x, [1, 2]), "pad": tf.pad(x, [[0, 1], [2, 0]]),
            "maximum": tf.maximum(x, 2.0), "minimum": tf.minimum(x, 2.0),
            "sqdiff": tf.squared_difference(x, 1.0), "cast": tf.cast(x, tf.int32),
            "slice": x[1:, ::2], "shape": tf.shape(x), "size": tf.size(x),
            "stop": tf.stop_gradient(x), "rsqrt": tf.rsqrt(x + 1),
        }
    xv = np.arange(12.0).reshape(3, 4)
    with Session(graph=g) as sess:
        out = sess.run(fetches, {x: xv})
    np.testing.assert_array_equal(out["fill"], [3.0, 3.0])
    np.testing.assert_array_equal(out["split"], xv[:, 1:])
    np.testing.assert_array_equal(out["tile"], np.tile(xv, [1, 2]))
    np.testing.assert_array_equal(out["pad"], np.pad(xv, [[0, 1], [2, 0]]))
    np.testing.assert_array_equal(out["maximum"], np.maximum(xv, 2))
    np.testing.assert_array_equal(out["sqdiff"], (xv - 1) ** 2)
    np.testing.assert_array_equal(out["cast"], xv.astype(np.int32))
    np.testing.assert_array_equal(out["slice"], xv[1:, ::2])
    assert out["shape"].tolist() == [3, 4] and out["size"] == 12
    np.testing.assert_allclose(out["rsqrt"], 1 / np.sqrt(xv + 1))


def test_moments_and_normalisations_match_numpy():
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float64, [None, 3, 4])
        mean, var = tf.moments(x, axes=[0, 1])
        kmean, _ = tf.moments(x, axes=[2], keepdims=True)
        gamma, beta = tf.constant(np.linspace(1, 2, 4)), tf.constant(np.linspace(-1, 1, 4))
        ln = tf.layer_normalization(x, gamma, beta, epsilon=1e-6)
        bn = tf.batch_normalization(x, mean, var, beta, gamma, 1e-3)
    assert mean.shape == (4,) and kmean.shape == (None, 3, 1) and ln.shape == (None, 3, 4)
    xv = np.random.default_rng(0).normal(size=(5, 3, 4))
    with Session(graph=g) as sess:
        m, v, lnv, bnv = sess.run([mean, var, ln, bn], {x: xv})
    np.testing.assert_allclose(m, xv.mean((0, 1)))
    np.testing.assert_allclose(v, xv.var((0, 1)))
    mu, sd = xv.mean(-1, keepdims=True), np.sqrt(xv.var(-1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(lnv, (xv - mu) / sd * np.linspace(1, 2, 4) + np.linspace(-1, 1, 4))
    np.testing.assert_allclose(bnv, (xv - m) / np.sqrt(v + 1e-3) * np.linspace(1, 2, 4)
                               + np.linspace(-1, 1, 4))


# --- seeds --------------------------------------------------------------------------------------

def _draw(graph_seed, op_seed, extra_ops=0):
    g = tf.Graph()
    with g.as_default():
        if graph_seed is not None:
            tf.set_random_seed(graph_seed)
        for _ in range(extra_ops):
            tf.no_op()
        r = tf.random_normal([4], seed=op_seed)
        u = tf.random_uniform([4], seed=op_seed)
        t = tf.truncated_normal([4], seed=op_seed)
    with Session(graph=g) as sess:
        return np.concatenate(sess.run([r, u, t]))


def test_seeds_follow_tensorflows_rules():
    g = tf.Graph()
    with g.as_default():
        assert tf.get_seed(None) == (None, None) and tf.get_seed(5) == (tf.DEFAULT_GRAPH_SEED, 5)
        tf.set_random_seed(0)
        assert tf.get_seed(0) == (0, 2 ** 31 - 1)  # (0, 0) would mean "no seed"
        r = tf.random_normal([2], seed=3)
    assert g.seed == 0 and r.op.inputs[0].op.inputs[0].op.attrs["seed2"] == 3
    a, b = _draw(1, None), _draw(1, None)
    np.testing.assert_array_equal(a, b)  # a graph seed alone: the same graph draws the same
    assert not np.array_equal(a, _draw(1, None, extra_ops=1))  # op seeds from the op count
    assert not np.array_equal(a, _draw(2, None))
    np.testing.assert_array_equal(_draw(None, 4), _draw(None, 4))  # op seed, default graph seed
    assert not np.array_equal(_draw(None, None), _draw(None, None))  # neither: fresh numbers
    x = _draw(1, None)
    assert len(set(np.round(x[:4], 6)) & set(np.round(x[8:], 6))) == 0  # two ops, two streams


# --- unknown dimensions ----------------------------------------------------------------------------

def test_gradients_through_reductions_of_unknown_dims_run_at_any_batch():
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float64, [None, 3])
        y = tf.placeholder(tf.float64, [None, None])
        b = tf.constant(np.array([1.0, 2.0, 3.0]))
        loss = tf.reduce_mean(tf.reduce_sum((x + b) * x, axis=1)) + tf.reduce_sum(y * y) \
            + tf.reduce_mean(tf.square(y), axis=0)[0]
        dx, dy, db = tf.gradients(loss, [x, y, b])
        (dvec,) = tf.gradients(tf.reduce_sum(x, axis=1), [x])  # grad_ys: OnesLike
    assert dx.shape == (None, 3) and dy.shape == (None, None) and db.shape == (3,)
    with Session(graph=g) as sess:
        for n in (1, 4):
            xv, yv = np.arange(3.0 * n).reshape(n, 3), np.arange(2.0 * n).reshape(n, 2)
            gx, gy, gb, gv = sess.run([dx, dy, db, dvec], {x: xv, y: yv})
            np.testing.assert_allclose(gx, (2 * xv + [1, 2, 3]) / n)
            expected_y = 2 * yv
            expected_y[:, 0] += 2 * yv[:, 0] / n
            np.testing.assert_allclose(gy, expected_y)
            np.testing.assert_allclose(gb, xv.sum(0) / n)
            np.testing.assert_array_equal(gv, np.ones((n, 3)))


def test_unknown_dims_that_broadcast_at_run_time_get_summed_gradients():
    """Both operands of unknown batch; at run time one has batch 1 and broadcasts: the
    gradient is summed back by BroadcastGradientArgs, as TensorFlow does."""
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float64, [None, 3])
        y = tf.placeholder(tf.float64, [None, 3])
        a = tf.placeholder(tf.float64, [None, 2, 3])
        b = tf.placeholder(tf.float64, [None, 3, 2])
        loss = tf.reduce_sum((x * y + x / (y * y + 1.0)) ** 2) + tf.reduce_sum(tf.matmul(a, b) ** 2)
        grads = tf.gradients(loss, [x, y, a, b])
    assert "BroadcastGradientArgs" in {op.type for op in g.get_operations()}
    assert [gr.shape for gr in grads] == [(None, 3), (None, 3), (None, 2, 3), (None, 3, 2)]
    rng = np.random.default_rng(2)
    with Session(graph=g) as sess:
        for nx, ny, na, nb in ((2, 1, 1, 3), (1, 4, 2, 2), (3, 3, 2, 1)):
            feed = {x: rng.normal(size=(nx, 3)), y: rng.normal(size=(ny, 3)),
                    a: rng.normal(size=(na, 2, 3)), b: rng.normal(size=(nb, 3, 2))}
            values = sess.run(grads, feed)
            for k, t in enumerate((x, y, a, b)):
                assert values[k].shape == feed[t].shape
                num = _numeric_grad(lambda v, t=t: sess.run(loss, {**feed, t: v}), feed[t].copy())
                np.testing.assert_allclose(values[k], num, rtol=1e-5, atol=1e-6)


def test_unknown_dims_through_broadcasting_slicing_tiling_and_layer_norm():
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float64, [None, None, 4])
        w = tf.constant(np.linspace(0.5, 1.5, 4))
        h = tf.layer_normalization(x * w, w, w)
        z = tf.tile(h[:, :1], [1, 2, 1]) + tf.pad(x, [[0, 0], [0, 0], [1, 0]])[..., 1:]
        loss = tf.reduce_mean(tf.square(z))
        dx, dw = tf.gradients(loss, [x, w])
    assert dx.shape == (None, None, 4)
    rng = np.random.default_rng(1)
    with Session(graph=g) as sess:
        for shape in ((2, 2, 4), (1, 2, 4)):
            xv = rng.normal(size=shape)
            gx, gw = sess.run([dx, dw], {x: xv})
            assert gx.shape == shape and gw.shape == (4,)
            num = _numeric_grad(lambda v: sess.run(loss, {x: v}), xv)
            np.testing.assert_allclose(gx, num, rtol=1e-5, atol=1e-7)


# --- finite-difference gradient checks -------------------------------------------------------------

def _numeric_grad(f, x, eps=1e-6):
    """Central differences of the scalar ``f`` at ``x`` (changed in place and restored)."""
    grad = np.zeros_like(x)
    flat, out = x.reshape(-1), grad.reshape(-1)
    for i in range(flat.size):
        keep = flat[i]
        flat[i] = keep + eps
        up = f(x)
        flat[i] = keep - eps
        down = f(x)
        flat[i] = keep
        out[i] = (up - down) / (2 * eps)
    return grad


def _positive(shape):
    return hnp.arrays(np.float64, shape, elements=st.floats(0.5, 3.0))


def _any(shape):
    return hnp.arrays(np.float64, shape, elements=st.floats(-2.0, 2.0))


def _apart(shape):
    """Values whose pairwise gaps exceed the finite-difference step (max/min/abs ties)."""
    return hnp.arrays(np.float64, shape, elements=st.sampled_from(np.arange(-2.0, 2.01, 0.125)),
                      unique=True)


SHAPES = hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=3)


def _batched_products(x, y):
    """(n, 1, L) @ (1, 1, L)^T, the batch broadcast, plus (n, 1, L) @ (n, 1, L)^T."""
    last = x.shape[-1] or 1
    xr, yr = tf.reshape(x, [-1, 1, last]), tf.reshape(y, [-1, 1, last])
    return tf.matmul(xr, yr[:1], transpose_b=True) + tf.matmul(yr, xr, adjoint_b=True)


CASES = {  # name: (input strategies for a shape, build(inputs) -> output)
    "exp": ([_any], lambda x: tf.exp(x)),
    "log": ([_positive], lambda x: tf.log(x)),
    "sqrt": ([_positive], lambda x: tf.sqrt(x)),
    "rsqrt": ([_positive], lambda x: tf.rsqrt(x)),
    "square": ([_any], lambda x: tf.square(x)),
    "abs": ([_apart], lambda x: abs(x)),
    "pow": ([_positive, _any], lambda x, y: x ** y),
    "realdiv": ([_any, _positive], lambda x, y: x / y[..., :1]),
    "maximum": ([_apart], lambda x: tf.maximum(x, x[..., ::-1])),
    "minimum": ([_apart], lambda x: tf.minimum(x[..., ::-1], x)),
    "squared_difference": ([_any, _any], lambda x, y: tf.squared_difference(x, y)),
    "cast": ([_any], lambda x: tf.cast(tf.cast(x, tf.float32), tf.float64)),
    "add_n": ([_any, _any], lambda x, y: tf.add_n([x, y, x])),
    "pad": ([_any], lambda x: tf.pad(x, [[1, 0]] + [[0, 2]] * (len(x.shape) - 1))),
    "tile": ([_any], lambda x: tf.tile(x, [2] + [1] * (len(x.shape) - 1))),
    "split": ([_any], lambda x: tf.concat(tf.split(x, [1, -1], axis=-1)[::-1], axis=-1)),
    "strided_slice": ([_any], lambda x: x[::-1, None, ..., -1:] * x[:, None, ..., :1]),
    "batch_matmul": ([_any, _any], _batched_products),
    "moments": ([_any], lambda x: tf.add_n(list(tf.moments(x, axes=[0])))),
    "layer_norm": ([_any], lambda x: tf.layer_normalization(x, epsilon=0.1)),
    "fill": ([_any], lambda x: tf.fill([2, 2], tf.reduce_sum(x))),
}


@st.composite
def gradient_case(draw, name):
    strategies, build = CASES[name]
    shape = draw(SHAPES)
    if name in ("split", "strided_slice") and (len(shape) < 2 or shape[-1] < 2):
        shape = (max(shape[0], 2), 2)
    values = [draw(make(shape)) for make in strategies]
    return name, build, values


@pytest.mark.parametrize("name", sorted(CASES))  # every op, a few random cases each
@settings(few, max_examples=3)
@given(data=st.data(), unknown_batch=st.booleans())
def test_gradients_match_finite_differences(name, data, unknown_batch):
    """d/dx sum(y * (y / 2 + 1)) of each op's output y, against central differences of
    the same graph run on the executor (the batch axis unknown or not)."""
    name, build, values = data.draw(gradient_case(name))
    g = tf.Graph()
    with g.as_default():
        xs = [tf.placeholder(tf.float64, (None,) * unknown_batch + v.shape[unknown_batch:])
              for v in values]
        y = build(*xs)
        loss = tf.reduce_sum(y * (y * 0.5 + 1.0))
        grads = tf.gradients(loss, xs)
    feed = dict(zip(xs, values))
    eps, rtol = (1e-2, 1e-3) if name == "cast" else (1e-6, 1e-5)  # cast: float32 in between
    with Session(graph=g) as sess:
        analytic = sess.run(grads, feed)
        for k, (x, gv) in enumerate(zip(xs, analytic)):
            num = _numeric_grad(lambda v, k=k: sess.run(loss, {**feed, xs[k]: v}),
                                values[k].copy(), eps)
            assert gv.shape == values[k].shape
            np.testing.assert_allclose(gv, num, rtol=rtol, atol=rtol, err_msg=name)


def test_stop_gradient_and_integer_casts_pass_no_gradient():
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float64, [None])
        (dx,) = tf.gradients(tf.reduce_sum(x * tf.stop_gradient(x)), [x])
        assert tf.gradients(tf.reduce_sum(tf.cast(tf.cast(x, tf.int32), tf.float64)), [x]) == [None]
        assert tf.gradients(tf.stop_gradient(x), [x]) == [None]
    with Session(graph=g) as sess:
        np.testing.assert_array_equal(sess.run(dx, {x: [1.0, -2.0]}), [1.0, -2.0])


def test_gradient_sums_are_one_add_n():
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [3])
        (dx,) = tf.gradients(tf.reduce_sum(x * x + tf.exp(x)), [x])
    assert dx.op.type == "AddN" and len(dx.op.inputs) == 3
