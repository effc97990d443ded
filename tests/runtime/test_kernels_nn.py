"""CPU kernels of the nn family match numpy references written independently of them
(padding by hand, windows by slicing), serial and parallel, on random shapes, strides
and paddings."""

from __future__ import annotations

from contextlib import contextmanager
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.kernels import KernelContext, cpu, cpu_nn, cpu_nn_rows, get_kernel

prop = settings(max_examples=20, deadline=None)
FLOAT = ("float32", "float64")
# Parallel variants are dtype-generic code: two dtypes cover them and keep compile time down.
PARALLEL_DTYPES = ("float32", "int64")
TOL = {"float32": 2e-4, "float64": 1e-10}


@contextmanager
def parallel_everywhere():
    """Lower the size thresholds so tiny inputs take the parallel paths, and the im2col
    block so that a batch takes several blocks."""
    with mock.patch.object(cpu, "PARALLEL_MIN_ELEMENTS", 0), \
            mock.patch.object(cpu_nn, "PARALLEL_MIN_ELEMENTS", 0), \
            mock.patch.object(cpu_nn_rows, "PARALLEL_MIN_ELEMENTS", 0), \
            mock.patch.object(cpu_nn, "GEMM_PARALLEL_MIN_MACS", 0), \
            mock.patch.object(cpu_nn, "GEMM_MIN_ROWS_PER_CHUNK", 1), \
            mock.patch.object(cpu_nn, "COLS_BLOCK_ELEMENTS", 1):
        yield


def run(op, inputs, attrs, threads=1):
    inputs = tuple(np.asarray(x) for x in inputs)
    if inputs[0].dtype.name not in PARALLEL_DTYPES:
        threads = 1
    for x in inputs:
        x.setflags(write=False)  # kernels never write their inputs
    with parallel_everywhere():
        outs = get_kernel(op, "CPU")(KernelContext("CPU", intra_op_threads=threads), inputs, attrs)
    for out in outs:
        assert not any(np.shares_memory(out, x) for x in inputs)
    return outs


def close(actual, expected, dtype):
    assert actual.dtype == np.dtype(dtype) and actual.shape == expected.shape, (
        actual.dtype, actual.shape, expected.shape)
    scale = max(1.0, float(np.abs(expected).max(initial=0)))
    np.testing.assert_allclose(actual, expected, rtol=TOL[dtype], atol=TOL[dtype] * scale)


# --- references ------------------------------------------------------------------------------

def same_padding(size, k, s, d=1):
    out = -(-size // s)
    total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
    return out, total // 2, total - total // 2


def geometry(size, k, s, padding, d=1):
    if padding == "SAME":
        return same_padding(size, k, s, d)
    return (size - (k - 1) * d - 1) // s + 1, 0, 0


def padded(x, h_geo, w_geo, value=0.0):
    return np.pad(x, ((0, 0), h_geo[1:], w_geo[1:], (0, 0)), constant_values=value)


def window(xp, kh, kw, h_geo, w_geo, s, d):
    """The input rows and columns window position (kh, kw) reads for every output."""
    return xp[:, kh * d:kh * d + (h_geo[0] - 1) * s[0] + 1:s[0],
              kw * d:kw * d + (w_geo[0] - 1) * s[1] + 1:s[1]]


def ref_conv(x, f, s, padding, d):
    h_geo = geometry(x.shape[1], f.shape[0], s[0], padding, d)
    w_geo = geometry(x.shape[2], f.shape[1], s[1], padding, d)
    xp = padded(x.astype(np.float64), h_geo, w_geo)
    out = 0
    for kh in range(f.shape[0]):
        for kw in range(f.shape[1]):
            out = out + np.einsum("nhwc,co->nhwo", window(xp, kh, kw, h_geo, w_geo, s, d), f[kh, kw])
    return out, h_geo, w_geo


def ref_conv_backprops(x, f, dy, s, padding, d):
    h_geo = geometry(x.shape[1], f.shape[0], s[0], padding, d)
    w_geo = geometry(x.shape[2], f.shape[1], s[1], padding, d)
    xp = padded(x.astype(np.float64), h_geo, w_geo)
    dxp = np.zeros_like(xp)
    df = np.zeros(f.shape)
    for kh in range(f.shape[0]):
        for kw in range(f.shape[1]):
            window(dxp, kh, kw, h_geo, w_geo, s, d)[...] += np.einsum("nhwo,co->nhwc", dy, f[kh, kw])
            df[kh, kw] = np.einsum("nhwc,nhwo->co", window(xp, kh, kw, h_geo, w_geo, s, d), dy)
    dx = dxp[:, h_geo[1]:h_geo[1] + x.shape[1], w_geo[1]:w_geo[1] + x.shape[2]]
    return dx, df


def ref_pool(x, k, s, padding):
    h_geo = geometry(x.shape[1], k[0], s[0], padding)
    w_geo = geometry(x.shape[2], k[1], s[1], padding)
    xp = padded(x.astype(np.float64), h_geo, w_geo, np.nan)
    wins = np.stack([window(xp, a, b, h_geo, w_geo, s, 1) for a in range(k[0]) for b in range(k[1])])
    return np.nanmax(wins, axis=0), np.nanmean(wins, axis=0)


def ref_pool_grads(x, g, k, s, padding):
    """Python loops: each window's gradient to its first maximum, and spread evenly."""
    h_geo = geometry(x.shape[1], k[0], s[0], padding)
    w_geo = geometry(x.shape[2], k[1], s[1], padding)
    dmax = np.zeros(x.shape)
    davg = np.zeros(x.shape)
    for n in range(x.shape[0]):
        for i in range(h_geo[0]):
            for j in range(w_geo[0]):
                h0, w0 = i * s[0] - h_geo[1], j * s[1] - w_geo[1]
                hs, ws = slice(max(h0, 0), h0 + k[0]), slice(max(w0, 0), w0 + k[1])
                win = x[n, hs, ws]
                davg[n, hs, ws] += g[n, i, j] / (win.shape[0] * win.shape[1])
                for c in range(x.shape[3]):
                    a, b = np.unravel_index(np.argmax(win[:, :, c]), win.shape[:2])
                    dmax[n, max(h0, 0) + a, max(w0, 0) + b, c] += g[n, i, j, c]
    return dmax, davg


# --- convolution -----------------------------------------------------------------------------

conv_cases = st.fixed_dictionaries({
    "n": st.integers(1, 3), "h": st.integers(1, 7), "w": st.integers(1, 7),
    "cin": st.integers(1, 4), "cout": st.integers(1, 4), "kh": st.integers(1, 3),
    "kw": st.integers(1, 3), "s": st.tuples(st.integers(1, 3), st.integers(1, 3)),
    "d": st.integers(1, 2), "padding": st.sampled_from(["SAME", "VALID"]),
    "dtype": st.sampled_from(FLOAT), "threads": st.sampled_from([1, 2]), "seed": st.integers(0, 99)})


@prop
@given(case=conv_cases)
def test_conv2d_and_backprops_match_numpy(case):
    c = case
    if c["padding"] == "VALID" and (c["h"] < (c["kh"] - 1) * c["d"] + 1
                                    or c["w"] < (c["kw"] - 1) * c["d"] + 1):
        c["padding"] = "SAME"
    rng = np.random.default_rng(c["seed"])
    x = rng.standard_normal((c["n"], c["h"], c["w"], c["cin"])).astype(c["dtype"])
    f = rng.standard_normal((c["kh"], c["kw"], c["cin"], c["cout"])).astype(c["dtype"])
    attrs = {"strides": (1, *c["s"], 1), "padding": c["padding"], "dilations": (1, c["d"], c["d"], 1)}
    expected, _, _ = ref_conv(x, f, c["s"], c["padding"], c["d"])
    (y,) = run("Conv2D", (x, f), attrs, c["threads"])
    close(y, expected, c["dtype"])
    dy = rng.standard_normal(y.shape).astype(c["dtype"])
    dx_ref, df_ref = ref_conv_backprops(x, f, dy, c["s"], c["padding"], c["d"])
    (dx,) = run("Conv2DBackpropInput", (f, dy), dict(attrs, input_sizes=x.shape), c["threads"])
    (df,) = run("Conv2DBackpropFilter", (x, dy), dict(attrs, filter_sizes=f.shape), c["threads"])
    close(dx, dx_ref, c["dtype"])
    close(df, df_ref, c["dtype"])
    # input_sizes with an unknown batch: the batch of out_backprop.
    (dx2,) = run("Conv2DBackpropInput", (f, dy), dict(attrs, input_sizes=(None,) + x.shape[1:]))
    close(dx2, dx_ref, c["dtype"])


def test_conv2d_realistic_blocks_and_the_pointwise_path():
    """Default thresholds and block sizes: a ResNet-like 3x3 and 1x1 layer."""
    rng = np.random.default_rng(0)
    ctx = KernelContext("CPU", intra_op_threads=2)
    x = rng.standard_normal((4, 14, 14, 32)).astype(np.float32)
    for k, stride in ((3, 1), (1, 1), (1, 2)):
        f = rng.standard_normal((k, k, 32, 16)).astype(np.float32)
        attrs = {"strides": (1, stride, stride, 1), "padding": "SAME"}
        (y,) = get_kernel("Conv2D", "CPU")(ctx, (x, f), attrs)
        expected, _, _ = ref_conv(x, f, (stride, stride), "SAME", 1)
        close(y, expected, "float32")
        dy = rng.standard_normal(y.shape).astype(np.float32)
        dx_ref, df_ref = ref_conv_backprops(x, f, dy, (stride, stride), "SAME", 1)
        (dx,) = get_kernel("Conv2DBackpropInput", "CPU")(ctx, (f, dy), dict(attrs, input_sizes=x.shape))
        (df,) = get_kernel("Conv2DBackpropFilter", "CPU")(ctx, (x, dy), dict(attrs, filter_sizes=f.shape))
        close(dx, dx_ref, "float32")
        close(df, df_ref, "float32")


def test_conv2d_rejects_other_layouts():
    x, f = np.ones((1, 3, 3, 1)), np.ones((1, 1, 1, 1))
    with pytest.raises(ValueError, match="NHWC only"):
        run("Conv2D", (x, f), {"strides": (1, 1, 1, 1), "padding": "SAME", "data_format": "NCHW"})


# --- pooling -------------------------------------------------------------------------------

pool_cases = st.fixed_dictionaries({
    "shape": st.tuples(st.integers(1, 3), st.integers(1, 6), st.integers(1, 6), st.integers(1, 3)),
    "k": st.tuples(st.integers(1, 3), st.integers(1, 3)),
    "s": st.tuples(st.integers(1, 3), st.integers(1, 3)),
    "padding": st.sampled_from(["SAME", "VALID"]), "dtype": st.sampled_from(FLOAT),
    "threads": st.sampled_from([1, 2]), "seed": st.integers(0, 99), "ties": st.booleans()})


@prop
@given(case=pool_cases)
def test_pooling_and_gradients_match_numpy(case):
    c = case
    if c["padding"] == "VALID" and (c["shape"][1] < c["k"][0] or c["shape"][2] < c["k"][1]):
        c["padding"] = "SAME"
    rng = np.random.default_rng(c["seed"])
    x = rng.standard_normal(c["shape"])
    if c["ties"]:  # equal values in a window: the first maximum takes the gradient
        x = np.round(x)
    x = x.astype(c["dtype"])
    attrs = {"ksize": (1, *c["k"], 1), "strides": (1, *c["s"], 1), "padding": c["padding"]}
    max_ref, avg_ref = ref_pool(x, c["k"], c["s"], c["padding"])
    (mp,) = run("MaxPool", (x,), attrs, c["threads"])
    (ap,) = run("AvgPool", (x,), attrs, c["threads"])
    close(mp, max_ref, c["dtype"])
    close(ap, avg_ref, c["dtype"])
    g = rng.standard_normal(mp.shape).astype(c["dtype"])
    dmax_ref, davg_ref = ref_pool_grads(x, g, c["k"], c["s"], c["padding"])
    (dmax,) = run("MaxPoolGrad", (x, mp, g), attrs, c["threads"])
    (davg,) = run("AvgPoolGrad", (g,), dict(attrs, orig_input_shape=(None,) + x.shape[1:]),
                  c["threads"])
    close(dmax, dmax_ref, c["dtype"])
    close(davg, davg_ref, c["dtype"])


# --- bias, batch norm ------------------------------------------------------------------------

@prop
@given(shape=st.lists(st.integers(1, 5), min_size=2, max_size=4),
       dtype=st.sampled_from(("float32", "float64", "int32", "int64")),
       threads=st.sampled_from([1, 2]), seed=st.integers(0, 99))
def test_bias_add_and_its_gradient(shape, dtype, threads, seed):
    rng = np.random.default_rng(seed)
    v = (rng.standard_normal(shape) * 10).astype(dtype)
    b = (rng.standard_normal(shape[-1]) * 10).astype(dtype)
    (y,) = run("BiasAdd", (v, b), {"data_format": "NHWC"}, threads)
    (db,) = run("BiasAddGrad", (v,), {}, threads)
    if np.dtype(dtype).kind == "i":
        np.testing.assert_array_equal(y, v + b)
        np.testing.assert_array_equal(db, v.reshape(-1, shape[-1]).sum(axis=0))
    else:
        close(y, v + b, dtype)
        close(db, v.reshape(-1, shape[-1]).astype(np.float64).sum(axis=0), dtype)


@prop
@given(shape=st.tuples(st.integers(1, 3), st.integers(1, 4), st.integers(1, 4), st.integers(1, 5)),
       dtype=st.sampled_from(FLOAT), training=st.booleans(), factor=st.sampled_from([1.0, 0.25]),
       threads=st.sampled_from([1, 2]), seed=st.integers(0, 99))
def test_fused_batch_norm_and_gradient_match_numpy(shape, dtype, training, factor, threads, seed):
    rng = np.random.default_rng(seed)
    c = shape[3]
    x = (rng.standard_normal(shape) * 3 + 100).astype(dtype)  # a large mean: no cancellation
    scale, offset, mean = (rng.standard_normal(c).astype(dtype) for _ in range(3))
    var = rng.uniform(0.5, 2, c).astype(dtype)
    eps = 1e-3
    attrs = {"epsilon": eps, "is_training": training, "exponential_avg_factor": factor}
    outs = run("FusedBatchNormV3", (x, scale, offset, mean, var), attrs, threads)
    x64 = x.astype(np.float64).reshape(-1, c)
    rows = x64.shape[0]
    if training:
        m, v = x64.mean(axis=0), x64.var(axis=0)
        corrected = v * rows / max(rows - 1, 1)
        running = ((1 - factor) * mean + factor * m, (1 - factor) * var + factor * corrected)
    else:
        m, v = mean.astype(np.float64), var.astype(np.float64)
        running = (m, v)
    y = (x64 - m) / np.sqrt(v + eps) * scale + offset
    for out, ref in zip(outs, (y.reshape(shape), *running, m, v)):
        close(out, np.asarray(ref), dtype)
    assert outs[5].shape == (0,)
    dy = rng.standard_normal(shape).astype(dtype)
    dx, dscale, doffset, r4, r5 = run("FusedBatchNormGradV3", (dy, x, scale, outs[3], outs[4], outs[5]),
                                      {"epsilon": eps, "is_training": training}, threads)
    dy64 = dy.astype(np.float64).reshape(-1, c)
    xhat = (x64 - m) / np.sqrt(v + eps)
    dscale_ref, doffset_ref = (dy64 * xhat).sum(axis=0), dy64.sum(axis=0)
    if training:
        dx_ref = scale / np.sqrt(v + eps) * (dy64 - doffset_ref / rows - xhat * dscale_ref / rows)
    else:
        dx_ref = dy64 * scale / np.sqrt(v + eps)
    close(dx, dx_ref.reshape(shape), dtype)
    close(dscale, dscale_ref, dtype)
    close(doffset, doffset_ref, dtype)
    assert r4.shape == r5.shape == (0,)


# --- gather, segment sums ----------------------------------------------------------------------

@prop
@given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=3),
       ids_shape=st.lists(st.integers(0, 3), min_size=0, max_size=2),
       axis=st.integers(-3, 2), dtype=st.sampled_from(("float32", "float64", "int32", "int64")),
       index_dtype=st.sampled_from(("int32", "int64")), threads=st.sampled_from([1, 2]),
       seed=st.integers(0, 99))
def test_gather_and_unsorted_segment_sum_match_numpy(shape, ids_shape, axis, dtype, index_dtype,
                                                      threads, seed):
    rng = np.random.default_rng(seed)
    axis = axis % len(shape)
    params = (rng.standard_normal(shape) * 10).astype(dtype)
    ids = rng.integers(0, shape[axis], ids_shape).astype(index_dtype)
    (out,) = run("GatherV2", (params, ids), {"axis": axis}, threads)
    np.testing.assert_array_equal(out, np.take(params, ids, axis=axis))
    segments = 5
    seg = rng.integers(-1, segments, ids_shape).astype(index_dtype)  # -1: dropped
    data = (rng.standard_normal(tuple(ids_shape) + (3, 2)) * 10).astype(dtype)
    (summed,) = run("UnsortedSegmentSum", (data, seg), {"num_segments": segments}, threads)
    expected = np.zeros((segments, 3, 2), dtype)
    flat, rows = seg.reshape(-1), data.reshape(-1, 3, 2)
    np.add.at(expected, flat[flat >= 0], rows[flat >= 0])
    close(summed, expected, dtype) if dtype in FLOAT else np.testing.assert_array_equal(summed, expected)


def test_out_of_range_indices_raise_naming_the_index():
    params = np.zeros((4, 2))
    with pytest.raises(ValueError, match=r"indices\[1\] = 4 is not in \[0, 4\)"):
        run("GatherV2", (params, np.array([0, 4])), {"axis": 0})
    with pytest.raises(ValueError, match=r"indices\[0\] = -1"):
        run("GatherV2", (params, np.array([-1])), {"axis": 0})
    with pytest.raises(ValueError, match=r"segment_ids\[2\] = 3 is not in \[0, 3\)"):
        run("UnsortedSegmentSum", (params[:3], np.array([0, 1, 3])), {"num_segments": 3})
    with pytest.raises(ValueError, match="label value of 5 which is outside the valid range of \\[0, 2\\)"):
        run("SparseSoftmaxCrossEntropyWithLogits", (params, np.array([0, 5, 1, 1])), {})


# --- losses ----------------------------------------------------------------------------------

@prop
@given(rows=st.integers(1, 6), classes=st.integers(1, 7), dtype=st.sampled_from(FLOAT),
       index_dtype=st.sampled_from(("int32", "int64")), threads=st.sampled_from([1, 2]),
       seed=st.integers(0, 99))
def test_cross_entropies_and_log_softmax_match_numpy(rows, classes, dtype, index_dtype, threads, seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((rows, classes)) * 20).astype(dtype)  # large: the max matters
    labels = rng.dirichlet(np.ones(classes), rows).astype(dtype)
    idx = rng.integers(0, classes, rows).astype(index_dtype)
    x64 = x.astype(np.float64)
    shifted = x64 - x64.max(axis=1, keepdims=True)
    log_sm = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    softmax = np.exp(log_sm)
    loss, back = run("SoftmaxCrossEntropyWithLogits", (x, labels), {}, threads)
    close(loss, -(labels * log_sm).sum(axis=1), dtype)
    close(back, softmax - labels, dtype)
    onehot = np.eye(classes)[idx]
    loss, back = run("SparseSoftmaxCrossEntropyWithLogits", (x, idx), {}, threads)
    close(loss, -(onehot * log_sm).sum(axis=1), dtype)
    close(back, softmax - onehot, dtype)
    (out,) = run("LogSoftmax", (x.reshape(rows, 1, classes),), {}, threads)
    close(out, log_sm.reshape(rows, 1, classes), dtype)


# --- warm-up --------------------------------------------------------------------------------

def test_warmup_compiles_the_nn_kernels_and_leaves_the_thresholds():
    before = (cpu_nn.PARALLEL_MIN_ELEMENTS, cpu_nn.GEMM_PARALLEL_MIN_MACS,
              cpu_nn.GEMM_MIN_ROWS_PER_CHUNK)
    cpu_nn.warmup(("float32", "int64"))
    assert (cpu_nn.PARALLEL_MIN_ELEMENTS, cpu_nn.GEMM_PARALLEL_MIN_MACS,
            cpu_nn.GEMM_MIN_ROWS_PER_CHUNK) == before
    assert cpu_nn._conv_serial.signatures and cpu_nn_rows._gather_serial.signatures
    assert cpu_nn_rows.PARALLEL_MIN_ELEMENTS == cpu.PARALLEL_MIN_ELEMENTS


@pytest.mark.parametrize("x_shape, f_shape, stride", [
    ((1, 32, 32, 64), (3, 3, 64, 64), 1),     # one image: serial, however big
    ((2, 32, 32, 64), (3, 3, 64, 64), 1),     # two images: one block each
    ((2, 32, 32, 64), (3, 3, 64, 64), 2),
    ((1, 32, 32, 256), (1, 1, 256, 256), 1),  # 1 x 1: one product, split by rows
])
def test_a_convolution_takes_the_pool_exactly_where_its_kernel_splits(x_shape, f_shape, stride):
    """``OpDef.splits`` (how the executor and the simulator give an op its cores)
    agrees with the CPU kernels of the forward convolution and both its gradients on
    big products: a kernel that runs on one core must not hold the pool."""
    import core as tf
    from core.opdef import CONVOLUTIONS
    from runtime.kernels.cpu import PARALLEL_MIN_ELEMENTS
    rng = np.random.default_rng(0)
    g = tf.Graph()
    with g.as_default():
        x = tf.constant(rng.standard_normal(x_shape).astype(np.float32))
        w = tf.constant(rng.standard_normal(f_shape).astype(np.float32))
        y = tf.nn.conv2d(x, w, strides=stride, padding="SAME")
        tf.gradients(tf.reduce_sum(y), [x, w])
    ops = [op for op in g.get_operations() if op.type in CONVOLUTIONS]
    assert sorted(op.type for op in ops) == sorted(CONVOLUTIONS)
    parallel = ("_conv_parallel", "_input_parallel", "_filter_parallel", "_gemm_parallel")
    for op in ops:
        inputs = tuple(rng.standard_normal(t.shape).astype(np.float32) for t in op.inputs)
        with mock.patch.object(cpu_nn, "_blas_single_threaded", return_value=True), \
                mock.patch.multiple(cpu_nn, **{name: mock.DEFAULT for name in parallel}) as m:
            # (a mocked parallel loop leaves its output unset: whatever is summed there)
            with np.errstate(all="ignore"):
                get_kernel(op.type, "CPU")(KernelContext("CPU", intra_op_threads=2), inputs,
                                           op.attrs)
        split = any(m[name].called for name in parallel)
        assert op.op_def.splits([t.spec for t in op.inputs], [t.spec for t in op.outputs],
                                op.attrs, PARALLEL_MIN_ELEMENTS) == split, (op.type, split)
