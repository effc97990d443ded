"""CPU kernels of the math family match numpy (hypothesis on random shapes and values);
random initializers are deterministic per seed pair and have the right distribution."""

from __future__ import annotations

from contextlib import contextmanager
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from core.ops_math import strided_slice_index
from runtime.kernels import KernelContext, cpu, cpu_math, get_kernel

ALL = ("float32", "float64", "int32", "int64")
FLOAT = ("float32", "float64")
prop = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def elements(dtype: str, lo: float = -10, hi: float = 10):
    if np.dtype(dtype).kind == "f":
        return st.floats(lo, hi, allow_nan=False, allow_infinity=False,
                         width=np.dtype(dtype).itemsize * 8)
    return st.integers(int(lo) * 10, int(hi) * 10)


def arrays(dtype, shape, lo=-10, hi=10):
    return hnp.arrays(np.dtype(dtype), shape, elements=elements(dtype, lo, hi))


@contextmanager
def parallel_everywhere():
    """Lower the size thresholds so tiny inputs take the parallel code paths."""
    with mock.patch.object(cpu, "PARALLEL_MIN_ELEMENTS", 0), \
            mock.patch.object(cpu, "GEMM_PARALLEL_MIN_MACS", 0):
        yield


def run(op_type, inputs, attrs=None, threads=1):
    with parallel_everywhere():
        out = get_kernel(op_type, "CPU")(KernelContext("CPU", intra_op_threads=threads),
                                         tuple(inputs), attrs or {})
    assert isinstance(out, tuple)
    return out


def assert_close(actual, expected, dtype, rtol=None):
    assert actual.dtype == np.dtype(dtype), (actual.dtype, dtype)
    assert actual.shape == np.shape(expected), (actual.shape, np.shape(expected))
    if np.dtype(dtype).kind in "iu":
        np.testing.assert_array_equal(actual, expected)
    else:
        rtol = rtol or {"float32": 2e-6, "float64": 1e-13}[dtype]
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol)


# --- elementwise -----------------------------------------------------------------------------

BINARY = {  # op: (dtypes, reference, range of x, range of y)
    "RealDiv": (FLOAT, np.divide, (-10, 10), (0.5, 10)),
    "Pow": (FLOAT, np.power, (0.125, 4), (-3, 3)),
    "Maximum": (ALL, np.maximum, (-10, 10), (-10, 10)),
    "Minimum": (ALL, np.minimum, (-10, 10), (-10, 10)),
    "SquaredDifference": (ALL, lambda x, y: (x - y) * (x - y), (-10, 10), (-10, 10)),
    "SqrtGrad": (FLOAT, lambda y, g: g * 0.5 / y, (0.5, 10), (-10, 10)),
    "RsqrtGrad": (FLOAT, lambda y, g: -0.5 * g * y ** 3, (-3, 3), (-10, 10)),
}


@st.composite
def binary_case(draw):
    op = draw(st.sampled_from(sorted(BINARY)))
    dtypes, _, xr, yr = BINARY[op]
    dtype = draw(st.sampled_from(dtypes))
    threads = draw(st.sampled_from((1, 2)))
    shapes = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=4, max_side=5))
    x = draw(arrays(dtype, shapes.input_shapes[0], *xr))
    y = draw(arrays(dtype, shapes.input_shapes[1], *yr))
    if draw(st.booleans()):  # a scalar operand: the kernels' scalar loops
        y = y.reshape(-1)[:1].reshape(()) if y.size else y
    return op, dtype, threads, x, y


@prop
@given(binary_case())
def test_binary_math_ops_match_numpy(case):
    op, dtype, threads, x, y = case
    (out,) = run(op, (x, y), threads=threads)
    expected = BINARY[op][1](x, y)
    rtol = 1e-5 if op == "Pow" and dtype == "float32" else None  # powf vs numpy's pow
    assert_close(out, np.asarray(expected, dtype=dtype), dtype, rtol)
    assert type(out) is np.ndarray


UNARY = {  # op: (dtypes, reference, range)
    "Exp": (FLOAT, np.exp, (-30, 30)),
    "Log": (FLOAT, np.log, (0.125, 1e3)),
    "Sqrt": (FLOAT, np.sqrt, (0, 100)),
    "Rsqrt": (FLOAT, lambda x: 1 / np.sqrt(x), (0.125, 100)),
    "Square": (ALL, np.square, (-10, 10)),
    "Abs": (ALL, np.abs, (-10, 10)),
    "Sign": (ALL, np.sign, (-2, 2)),
}


@st.composite
def unary_case(draw):
    op = draw(st.sampled_from(sorted(UNARY)))
    dtypes, _, bounds = UNARY[op]
    dtype = draw(st.sampled_from(dtypes))
    x = draw(arrays(dtype, hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5),
                    *bounds))
    return op, dtype, draw(st.sampled_from((1, 2))), x


@prop
@given(unary_case())
def test_unary_math_ops_match_numpy(case):
    op, dtype, threads, x = case
    (out,) = run(op, (x,), threads=threads)
    assert_close(out, UNARY[op][1](x).astype(dtype), dtype, 4e-6 if dtype == "float32" else None)
    assert type(out) is np.ndarray and not np.shares_memory(out, x)


@pytest.mark.parametrize("dtype", FLOAT)
def test_log_sqrt_and_division_edges_are_numpys(dtype):
    x = np.array([0.0, -1.0, np.inf], dtype)
    with np.errstate(all="ignore"):
        for op, ref in (("Log", np.log), ("Sqrt", np.sqrt)):
            np.testing.assert_array_equal(run(op, (x,))[0], ref(x))
        np.testing.assert_array_equal(run("RealDiv", (np.array([1, -1, 0], dtype), np.zeros(3, dtype)))[0],
                                      np.array([1, -1, 0], dtype) / np.zeros(3, dtype))


@prop
@given(st.sampled_from(ALL), st.integers(1, 5), hnp.array_shapes(min_dims=0, max_dims=3, max_side=4),
       st.data())
def test_add_n_and_cast_match_numpy(dtype, n, shape, data):
    xs = [data.draw(arrays(dtype, shape)) for _ in range(n)]
    (out,) = run("AddN", xs, threads=data.draw(st.sampled_from((1, 2))))
    assert_close(out, np.sum(np.stack(xs), axis=0).astype(dtype), dtype, 1e-5)
    assert not any(np.shares_memory(out, x) for x in xs)
    to = data.draw(st.sampled_from(ALL))
    (cast,) = run("Cast", (xs[0],), {"SrcT": dtype, "DstT": to})
    np.testing.assert_array_equal(cast, xs[0].astype(to))


# --- BatchMatMulV2 ----------------------------------------------------------------------------

@st.composite
def batch_matmul_case(draw):
    dtype = draw(st.sampled_from(FLOAT))
    batch = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=3))
    m, k, n = (draw(st.integers(0 if i == 1 else 1, 5)) for i in range(3))
    adj_x, adj_y = draw(st.booleans()), draw(st.booleans())
    x = draw(arrays(dtype, batch.input_shapes[0] + ((k, m) if adj_x else (m, k))))
    y = draw(arrays(dtype, batch.input_shapes[1] + ((n, k) if adj_y else (k, n))))
    return dtype, x, y, adj_x, adj_y, draw(st.sampled_from((1, 2)))


@prop
@given(batch_matmul_case())
def test_batch_matmul_matches_numpy(case):
    dtype, x, y, adj_x, adj_y, threads = case
    (out,) = run("BatchMatMulV2", (x, y), {"adj_x": adj_x, "adj_y": adj_y}, threads=threads)
    ref = np.matmul(np.swapaxes(x, -1, -2) if adj_x else x, np.swapaxes(y, -1, -2) if adj_y else y)
    np.testing.assert_allclose(out, ref, rtol=1e-4 if dtype == "float32" else 1e-12, atol=1e-3)
    assert out.dtype == np.dtype(dtype) and out.flags.c_contiguous


# --- data movement ---------------------------------------------------------------------------

@prop
@given(st.sampled_from(ALL), hnp.array_shapes(min_dims=1, max_dims=3, max_side=4), st.data())
def test_pad_tile_split_match_numpy(dtype, shape, data):
    x = data.draw(arrays(dtype, shape))
    paddings = [tuple(data.draw(st.integers(0, 2)) for _ in range(2)) for _ in shape]
    (padded,) = run("Pad", (x,), {"paddings": paddings})
    np.testing.assert_array_equal(padded, np.pad(x, paddings))
    multiples = [data.draw(st.integers(0, 3)) for _ in shape]
    (tiled,) = run("Tile", (x,), {"multiples": multiples})
    np.testing.assert_array_equal(tiled, np.tile(x, multiples))
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    divisors = [d for d in range(1, shape[axis] + 1) if shape[axis] % d == 0]
    n = data.draw(st.sampled_from(divisors))
    for got, want in zip(run("Split", (x,), {"axis": axis, "num_split": n}),
                         np.split(x, n, axis=axis)):
        np.testing.assert_array_equal(got, want)
        assert got.flags.c_contiguous
    sizes = [data.draw(st.integers(0, shape[axis])), -1]
    parts = run("SplitV", (x,), {"axis": axis, "size_splits": sizes, "num_split": len(sizes)})
    np.testing.assert_array_equal(np.concatenate(parts, axis=axis), x)
    assert parts[0].shape[axis % len(shape)] == sizes[0]


@st.composite
def slice_key(draw, shape):
    """A random numpy-style index of ints, slices, ... and None for ``shape``."""
    items, dim = [], 0
    while dim < len(shape) and draw(st.booleans()):
        kind = draw(st.sampled_from(["slice", "int", "new", "ellipsis"]))
        if kind == "ellipsis":  # the rest of the axes
            items.append(Ellipsis)
            break
        if kind == "new":
            items.append(None)
        elif kind == "int":
            items.append(draw(st.integers(-shape[dim], shape[dim] - 1)) if shape[dim] else slice(None))
            dim += 1
        else:
            bound = st.one_of(st.none(), st.integers(-shape[dim] - 2, shape[dim] + 2))
            step = draw(st.one_of(st.none(), st.sampled_from([1, 2, -1, -2, 3])))
            items.append(slice(draw(bound), draw(bound), step))
            dim += 1
    if draw(st.booleans()):
        items.append(None)
    return tuple(items)


def spec_of(key):
    from core.builders_math import _slice_spec
    return _slice_spec(key)


@prop
@given(st.sampled_from(ALL), hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=5),
       st.data())
def test_strided_slice_and_its_gradient_match_numpy_indexing(dtype, shape, data):
    x = data.draw(arrays(dtype, shape))
    key = data.draw(slice_key(shape))
    attrs = spec_of(key)
    (out,) = run("StridedSlice", (x,), attrs)
    np.testing.assert_array_equal(out, x[key])
    assert strided_slice_index(shape, attrs)[1] == x[key].shape
    dy = data.draw(arrays(dtype, x[key].shape))
    (dx,) = run("StridedSliceGrad", (dy,), dict(attrs, shape=shape))
    expected = np.zeros_like(x)
    expected[key] = dy
    np.testing.assert_array_equal(dx, expected)
    (dx2,) = run("StridedSliceGrad", (np.array(shape, np.int32), dy), attrs)  # run-time shape
    np.testing.assert_array_equal(dx2, expected)


def test_fill_like_shape_size_squeeze():
    value = np.array(2.5, np.float32)
    np.testing.assert_array_equal(run("Fill", (value,), {"dims": (2, 3)})[0], np.full((2, 3), 2.5, np.float32))
    np.testing.assert_array_equal(run("Fill", (np.array([3], np.int32), value))[0], np.full(3, 2.5, np.float32))
    x = np.arange(6, dtype=np.int64).reshape(1, 2, 3)
    np.testing.assert_array_equal(run("ZerosLike", (x,))[0], np.zeros_like(x))
    np.testing.assert_array_equal(run("OnesLike", (x,))[0], np.ones_like(x))
    assert run("Shape", (x,), {"out_type": "int32"})[0].tolist() == [1, 2, 3]
    assert run("Size", (x,), {"out_type": "int64"})[0] == 6
    assert run("Squeeze", (x,), {"squeeze_dims": (0,)})[0].shape == (2, 3)
    assert run("Squeeze", (x,), {})[0].shape == (2, 3)
    assert not np.shares_memory(run("StopGradient", (x,))[0], x)
    np.testing.assert_array_equal(run("Reshape", (x, np.array([3, 2], np.int32)))[0], x.reshape(3, 2))
    np.testing.assert_array_equal(run("BroadcastTo", (x[0, :1], np.array([4, 3], np.int32)))[0],
                                  np.broadcast_to(x[0, :1], (4, 3)))


# --- random initializers ----------------------------------------------------------------------

@pytest.mark.parametrize("op", ["RandomStandardNormal", "TruncatedNormal", "RandomUniform"])
@pytest.mark.parametrize("dtype", FLOAT)
def test_random_ops_are_deterministic_per_seed_pair_and_distributed_as_named(op, dtype):
    attrs = {"shape": (200, 50), "dtype": dtype, "seed": 7, "seed2": 3}
    (a,) = run(op, (), attrs)
    (b,) = run(op, (), attrs)
    (c,) = run(op, (), dict(attrs, seed2=4))
    (d,), (e,) = run(op, (), dict(attrs, seed=0, seed2=0)), run(op, (), dict(attrs, seed=0, seed2=0))
    assert a.dtype == np.dtype(dtype) and a.shape == (200, 50)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c) and not np.array_equal(d, e)
    if op == "RandomUniform":
        assert a.min() >= 0 and a.max() < 1 and abs(a.mean() - 0.5) < 0.02
    else:
        assert abs(a.mean()) < 0.03
        if op == "TruncatedNormal":
            assert np.abs(a).max() <= 2 and 0.85 < a.std() < 0.9  # TF's: std 0.88
        else:
            assert abs(a.std() - 1) < 0.03


def test_warmup_compiles_the_batch_matmul_loops():
    cpu_math.warmup(("float64",), parallel=False)
    assert cpu_math._batch_serial.signatures
