"""CPU kernels match numpy; the registry agrees with core.ops; parallel kernels run
concurrently from several inter-op threads."""

from __future__ import annotations

import functools
import os
import threading
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

import numba
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import core as tf
from runtime import Session, kernels
from runtime.kernels import KernelContext, NoKernel, get_kernel, registered, supported_dtypes
from runtime.kernels import cpu, cpu_reduce

ALL = ("float32", "float64", "int32", "int64")
FLOAT = ("float32", "float64")
# Parallel variants are dtype-generic code: two dtypes cover them and keep compile time down.
PARALLEL_DTYPES = ("float32", "int64")

prop = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --- strategies and helpers ------------------------------------------------------------------

def elements(dtype: str, bound: float = 10):
    if np.dtype(dtype).kind == "f":
        return st.floats(-bound, bound, allow_nan=False, allow_infinity=False,
                         width=np.dtype(dtype).itemsize * 8)
    return st.integers(-int(bound) * 10, int(bound) * 10)


def arrays(dtype: str, shape, bound: float = 10):
    return hnp.arrays(np.dtype(dtype), shape, elements=elements(dtype, bound))


@st.composite
def dtype_and_threads(draw, dtypes=ALL):
    """A dtype, and 1 or 2 intra-op threads (2 only for the dtypes we compile in parallel)."""
    dtype = draw(st.sampled_from(dtypes))
    threads = draw(st.sampled_from((1, 2))) if dtype in PARALLEL_DTYPES else 1
    return dtype, threads


@contextmanager
def parallel_everywhere():
    """Lower the size thresholds so tiny inputs take the parallel code paths."""
    with mock.patch.object(cpu, "PARALLEL_MIN_ELEMENTS", 0), \
            mock.patch.object(cpu, "PARALLEL_MIN_MACS", 0), \
            mock.patch.object(cpu, "GEMM_PARALLEL_MIN_MACS", 0), \
            mock.patch.object(cpu, "GEMM_MIN_ROWS_PER_CHUNK", 1):
        yield


def run(op_type, inputs, attrs=None, threads=1, **ctx):
    kernel = get_kernel(op_type, "CPU")
    with parallel_everywhere():
        out = kernel(KernelContext("CPU", intra_op_threads=threads, **ctx), tuple(inputs),
                     attrs or {})
    assert isinstance(out, tuple)
    return out


def assert_close(actual, expected, dtype, scale=1.0):
    """Exact for integers; for floats, relative to the magnitude of what was summed."""
    assert actual.dtype == np.dtype(dtype), (actual.dtype, dtype)
    assert actual.shape == np.shape(expected), (actual.shape, np.shape(expected))
    if np.dtype(dtype).kind in "iu":
        np.testing.assert_array_equal(actual, expected)
    else:
        eps = {"float32": 1e-5, "float64": 1e-12}[dtype]
        np.testing.assert_allclose(actual, expected, rtol=eps, atol=eps * scale)


# --- elementwise -----------------------------------------------------------------------------

BINARY = {
    "Add": (ALL, lambda x, y: x + y),
    "Sub": (ALL, lambda x, y: x - y),
    "Mul": (ALL, lambda x, y: x * y),
    "ReluGrad": (ALL, lambda g, x: g * (x > 0)),
    "TanhGrad": (FLOAT, lambda y, g: g * (1 - y * y)),
    "SigmoidGrad": (FLOAT, lambda y, g: g * y * (1 - y)),
}


@st.composite
def binary_case(draw):
    op = draw(st.sampled_from(sorted(BINARY)))
    dtype, threads = draw(dtype_and_threads(BINARY[op][0]))
    shapes = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=4, max_side=5))
    x = draw(arrays(dtype, shapes.input_shapes[0]))
    y = draw(arrays(dtype, shapes.input_shapes[1]))
    return op, dtype, threads, x, y


@prop
@given(binary_case())
def test_binary_ops_match_numpy(case):
    op, dtype, threads, x, y = case
    (out,) = run(op, (x, y), threads=threads)
    expected = BINARY[op][1](x.astype(np.float64), y.astype(np.float64))
    assert_close(out, expected.astype(dtype), dtype, scale=1000)


UNARY = {
    "Neg": (ALL, lambda x: -x),
    "Relu": (ALL, lambda x: np.maximum(x, 0)),
    "Identity": (ALL, lambda x: x),
    "Tanh": (FLOAT, np.tanh),
    "Sigmoid": (FLOAT, lambda x: 1 / (1 + np.exp(-x))),
}


@st.composite
def unary_case(draw):
    op = draw(st.sampled_from(sorted(UNARY)))
    dtype, threads = draw(dtype_and_threads(UNARY[op][0]))
    bound = 50 if op in ("Tanh", "Sigmoid") else 10  # reach the saturated ends
    x = draw(arrays(dtype, hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5),
                    bound))
    return op, dtype, threads, x


@prop
@given(unary_case())
def test_unary_ops_match_numpy(case):
    op, dtype, threads, x = case
    (out,) = run(op, (x,), threads=threads)
    assert_close(out, UNARY[op][1](x), dtype)
    assert not np.shares_memory(out, x)


def test_sigmoid_does_not_overflow():
    x = np.array([-1000.0, -50.0, 0.0, 50.0, 1000.0])
    with np.errstate(over="raise"):
        (out,) = run("Sigmoid", (x,))
    np.testing.assert_allclose(out, [0.0, 1.9287498479639178e-22, 0.5, 1.0, 1.0])


@pytest.mark.parametrize("threads", [1, 2])
def test_sigmoid_on_its_parallel_path_and_a_transposed_input(threads):
    # Past the parallel threshold, on an F-ordered view: exp(-|x|) by numpy, then the
    # numba pass over the output in C order must meet the input's elements in that order.
    n = cpu.PARALLEL_MIN_ELEMENTS // 1024 + 1
    x = np.linspace(-60, 60, n * 1024, dtype=np.float32).reshape(n, 1024).T
    (out,) = run("Sigmoid", (x,), threads=threads)
    exact = 1 / (1 + np.exp(-x.astype(np.float64)))
    assert out.shape == x.shape and out.dtype == np.float32 and out.flags.c_contiguous
    np.testing.assert_allclose(out, exact, rtol=1e-6, atol=1e-37)


@pytest.mark.parametrize("threads", [1, 2])
def test_float32_tanh_approximation_is_within_a_few_ulp(threads):
    # The float32 kernel is a rational approximation (as TensorFlow's): held to 1e-6
    # relative over a dense grid, the saturated ends, and NaN and infinities.
    x = np.concatenate([np.linspace(-12, 12, 200_001, dtype=np.float32),
                        np.array([1e-30, -1e-30, 0.0, 1e4, -1e4], np.float32)])
    (out,) = run("Tanh", (x,), threads=threads)
    exact = np.tanh(x.astype(np.float64))
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, exact, rtol=1e-6, atol=1e-37)
    (special,) = run("Tanh", (np.array([np.nan, np.inf, -np.inf], np.float32),))
    assert np.isnan(special[0]) and special[1] == 1.0 and special[2] == -1.0


# --- state ---------------------------------------------------------------------------------

@st.composite
def assign_case(draw):
    op = draw(st.sampled_from(["Assign", "AssignAdd", "AssignSub"]))
    dtype, threads = draw(dtype_and_threads())
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=5))
    value_shape = tuple(draw(st.sampled_from([n, 1])) for n in shape)
    value_shape = value_shape[draw(st.integers(0, len(shape))):]  # broadcasts *to* shape
    return op, dtype, threads, draw(arrays(dtype, shape)), draw(arrays(dtype, value_shape))


@prop
@given(assign_case())
def test_assign_ops_update_the_ref_in_place(case):
    op, dtype, threads, ref, value = case
    before = ref.copy()
    expected = {"Assign": lambda r, v: np.broadcast_to(v, r.shape),
                "AssignAdd": lambda r, v: r + v,
                "AssignSub": lambda r, v: r - v}[op](before, value)
    (out,) = run(op, (ref, value), threads=threads)
    assert out is ref
    assert_close(ref, expected, dtype, scale=100)


def test_variable_returns_its_buffer_so_assign_is_seen():
    buffer = np.zeros((2, 3), np.float32)
    (var,) = run("Variable", (), variable=buffer)
    assert var is buffer
    run("AssignAdd", (var, np.ones(3, np.float32)))
    run("AssignSub", (var, np.full((2, 1), 0.5, np.float32)))
    np.testing.assert_array_equal(buffer, np.full((2, 3), 0.5, np.float32))


def test_sources_and_noop():
    value = np.arange(6, dtype=np.int32).reshape(2, 3)
    (c,) = run("Const", (), {"value": value, "dtype": "int32", "shape": (2, 3)})
    np.testing.assert_array_equal(c, value)
    (p,) = run("Placeholder", (), {"dtype": "int64", "shape": (2,)}, feed=np.array([4, 5]))
    np.testing.assert_array_equal(p, [4, 5])
    assert run("NoOp", ()) == ()
    with pytest.raises(ValueError, match="ctx.feed"):
        run("Placeholder", (), {})
    with pytest.raises(ValueError, match="ctx.variable"):
        run("Variable", (), {})


# --- matmul, reductions, softmax ----------------------------------------------------------------

@st.composite
def matmul_case(draw):
    dtype, threads = draw(dtype_and_threads())
    m, k, n = (draw(st.integers(1, 7)) for _ in range(3))
    ta, tb = draw(st.booleans()), draw(st.booleans())
    a = draw(arrays(dtype, (k, m) if ta else (m, k)))
    b = draw(arrays(dtype, (n, k) if tb else (k, n)))
    return dtype, threads, a, b, ta, tb


@prop
@given(matmul_case())
def test_matmul_matches_numpy(case):
    dtype, threads, a, b, ta, tb = case
    (out,) = run("MatMul", (a, b), {"transpose_a": ta, "transpose_b": tb}, threads=threads)
    expected = (a.T if ta else a).astype(np.float64) @ (b.T if tb else b).astype(np.float64)
    assert_close(out, expected.astype(dtype), dtype, scale=100 * a.shape[0] * a.shape[1])


def test_matmul_of_a_large_matrix_uses_blas_blocks_correctly():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((130, 70)).astype(np.float32)
    b = rng.standard_normal((90, 70)).astype(np.float32)
    for threads in (1, 2):
        (out,) = run("MatMul", (a, b), {"transpose_b": True}, threads=threads)
        np.testing.assert_allclose(out, a @ b.T, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", FLOAT)
@pytest.mark.parametrize("ta, tb", [(False, False), (False, True), (True, False), (True, True)])
def test_float_matmul_in_row_blocks_matches_numpy(dtype, ta, tb):
    """With several intra-op threads a big float MatMul runs as row blocks (m = 131 does
    not divide evenly), each a single-threaded gemm; the blocks tile the output.  A
    transposed first operand's blocks are copied by the threads that multiply them."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((70, 131) if ta else (131, 70)).astype(dtype)
    b = rng.standard_normal((90, 70) if tb else (70, 90)).astype(dtype)
    expected = (a.T if ta else a).astype(np.float64) @ (b.T if tb else b).astype(np.float64)
    for threads in (2, 3):
        with single_threaded_blas(), \
                mock.patch.object(cpu, "_matmul_blas_parallel",
                                  wraps=cpu._matmul_blas_parallel) as blocks:
            (out,) = run("MatMul", (a, b), {"transpose_a": ta, "transpose_b": tb},
                         threads=threads)
        # one block per thread (numba's pool has at most NUMBA_NUM_THREADS), a
        # transposed first operand handed on as it is (its threads copy their blocks)
        assert blocks.call_count == 1
        assert blocks.call_args.args[0].flags.f_contiguous == ta
        assert blocks.call_args.args[3] == min(threads, numba.config.NUMBA_NUM_THREADS)
        assert_close(out, expected.astype(dtype), dtype, scale=100 * 70)


@contextmanager
def single_threaded_blas():
    """The kernels' BLAS made single-threaded, as on first use without an explicit
    ``OPENBLAS_NUM_THREADS`` (which the test process may have); restored after."""
    from runtime.kernels import blas
    before = blas.blas_threads()
    if before is None:
        pytest.skip("numba's BLAS here is not an OpenBLAS whose threads we can set")
    try:
        with mock.patch.dict(os.environ), mock.patch.object(
                cpu, "_blas_single_threaded", functools.lru_cache(maxsize=1)(
                    cpu._blas_single_threaded.__wrapped__)):
            os.environ.pop("OPENBLAS_NUM_THREADS", None)
            yield
    finally:
        blas.set_blas_threads(before)


def test_a_few_rows_product_first_in_a_process_already_runs_on_one_blas_thread():
    """The BLAS is made single-threaded on the first float MatMul, whatever its rows:
    before, a process whose first products had few rows ran them on the BLAS's own
    threads until a big one came."""
    from runtime.kernels import blas
    with single_threaded_blas():
        blas.set_blas_threads(2)
        # (the kernel's own thresholds: run() lowers them to reach the parallel paths)
        get_kernel("MatMul", "CPU")(KernelContext("CPU", intra_op_threads=1),
                                    (np.ones((16, 64), np.float32), np.ones((64, 64), np.float32)), {})
        assert blas.blas_threads() == 1


def test_an_explicit_openblas_num_threads_keeps_one_gemm_call():
    """``OPENBLAS_NUM_THREADS`` set (the experiments' ``--blas-threads``): the BLAS keeps
    its thread count and a float MatMul is one gemm call, as before row blocks."""
    from runtime.kernels import blas
    a = np.ones((300, 4), np.float32)
    b = np.ones((4, 5), np.float32)
    before = blas.blas_threads()
    with mock.patch.dict(os.environ, {"OPENBLAS_NUM_THREADS": "2"}), mock.patch.object(
            cpu, "_blas_single_threaded", functools.lru_cache(maxsize=1)(
                cpu._blas_single_threaded.__wrapped__)), \
            mock.patch.object(cpu, "_matmul_blas_parallel") as blocks:
        (out,) = run("MatMul", (a, b), threads=2)
    assert blocks.call_count == 0
    assert blas.blas_threads() == before
    np.testing.assert_array_equal(out, np.full((300, 5), 4, np.float32))


@pytest.mark.parametrize("kernels_split, blas_threads, expected",
                         [(True, 1, True), (False, 1, False), (False, 4, True), (False, None, True)])
def test_products_split_unless_the_process_fixed_its_blas_at_one_thread(
        kernels_split, blas_threads, expected):
    """Row blocks of one-thread gemms split; a BLAS the process fixed at one thread does
    not (``OPENBLAS_NUM_THREADS=1``); one on several threads of its own, or one we
    cannot ask, does."""
    with mock.patch.object(cpu, "_blas_single_threaded", return_value=kernels_split), \
            mock.patch.object(cpu, "blas_threads", return_value=blas_threads):
        assert cpu.products_split() is expected


@pytest.mark.parametrize("dtype, threads", [("float32", 1), ("float32", 2), ("float64", 2),
                                            ("int64", 1), ("int64", 2)])
def test_matmul_with_a_fused_relu_is_the_relu_of_the_product(dtype, threads):
    """The executor's MatMul + Relu fusion: serial gemm, row blocks (each relu'd after its
    gemm) and the integer loop."""
    rng = np.random.default_rng(2)
    a = (rng.standard_normal((131, 40)) * 5).astype(dtype)
    b = (rng.standard_normal((40, 33)) * 5).astype(dtype)
    expected = np.maximum(a.astype(np.float64) @ b.astype(np.float64), 0)
    with single_threaded_blas():
        (out,) = run("MatMul", (a, b), {"_fused_relu": True}, threads=threads)
    assert (expected == 0).any() and (expected > 0).any()
    assert_close(out, expected.astype(dtype), dtype, scale=100 * 40)


def test_a_fused_relu_applies_to_the_row_blocks_of_a_transposed_operand():
    rng = np.random.default_rng(3)
    a = (rng.standard_normal((40, 300)) * 5).astype(np.float32)  # used as its transpose
    b = (rng.standard_normal((40, 33)) * 5).astype(np.float32)
    expected = np.maximum(a.T.astype(np.float64) @ b.astype(np.float64), 0)
    with single_threaded_blas():
        (out,) = run("MatMul", (a, b), {"_fused_relu": True, "transpose_a": True}, threads=2)
    assert (expected == 0).any() and (expected > 0).any()
    assert_close(out, expected.astype(np.float32), "float32", scale=100 * 40)


@pytest.mark.parametrize("dtype, threads", [("float32", 1), ("float32", 2), ("int64", 2)])
def test_matmul_writes_its_product_into_an_offered_buffer_that_fits(dtype, threads):
    """``ctx.out`` (a fetched tensor's destination, offered by the executor): the product
    goes there when the buffer has the product's shape and dtype, else into a new array."""
    rng = np.random.default_rng(4)
    a = (rng.standard_normal((300, 40)) * 5).astype(dtype)
    b = (rng.standard_normal((40, 33)) * 5).astype(dtype)
    expected = (a.astype(np.float64) @ b.astype(np.float64)).astype(dtype)
    given = np.full((300, 33), 7, dtype)
    with single_threaded_blas():
        (out,) = run("MatMul", (a, b), threads=threads, out=given)
        assert out is given
        assert_close(out, expected, dtype, scale=100 * 40)
        for misfit in (np.full((300, 34), 7, dtype), np.full((300, 33), 7, "float64"),
                       np.full((33, 300), 7, dtype).T):
            (out,) = run("MatMul", (a, b), threads=threads, out=misfit)
            assert out is not misfit and (misfit == 7).all()
            assert_close(out, expected, dtype, scale=100 * 40)


def test_float_matmul_without_blas_thread_control_is_one_gemm_call():
    """A BLAS whose threads we cannot set keeps its own threading: no row blocks."""
    a = np.arange(12.0, dtype=np.float32).reshape(4, 3)
    b = np.arange(6.0, dtype=np.float32).reshape(3, 2)
    with mock.patch.object(cpu, "_blas_single_threaded", return_value=False), \
            mock.patch.object(cpu, "_matmul_blas_parallel") as blocks:
        (out,) = run("MatMul", (a, b), threads=2)
    assert blocks.call_count == 0
    np.testing.assert_array_equal(out, a @ b)


def test_blas_thread_count_is_set_on_the_library_numba_calls():
    from runtime.kernels import blas
    if blas.blas_library() is None or blas.blas_threads() is None:
        pytest.skip("numba's BLAS here is not an OpenBLAS whose threads we can set")
    before = blas.blas_threads()
    try:
        assert blas.set_blas_threads(3)
        assert blas.blas_threads() == 3
        assert blas.set_blas_threads(1)
        assert blas.blas_threads() == 1
    finally:
        blas.set_blas_threads(before)
    # numpy's own BLAS is another library (when both bundle one), left alone.
    assert "numpy" not in Path(blas.blas_library()).name


@st.composite
def reduce_case(draw):
    op = draw(st.sampled_from(["Sum", "Mean"]))
    dtype, threads = draw(dtype_and_threads())
    x = draw(arrays(dtype, hnp.array_shapes(min_dims=0, max_dims=4, min_side=1, max_side=5)))
    axis = draw(st.none() | st.lists(st.integers(-max(x.ndim, 1), max(x.ndim - 1, 0)),
                                      max_size=x.ndim, unique=True).map(tuple))
    if x.ndim == 0 and axis is not None:
        axis = ()
    return op, dtype, threads, x, axis, draw(st.booleans())


def reference_reduce(op, x, axis, keepdims):
    axes = None if axis is None else tuple(sorted({a % x.ndim for a in axis})) if x.ndim else ()
    if x.dtype.kind == "f":
        wide = x.astype(np.float64)
        return (np.sum if op == "Sum" else np.mean)(wide, axis=axes, keepdims=keepdims)
    total = np.sum(x.astype(np.int64), axis=axes, keepdims=keepdims)
    if op == "Sum":
        return total
    count = x.size // max(np.size(total), 1) if x.size else 1
    return np.sign(total) * (np.abs(total) // count)  # truncation toward zero


@prop
@given(reduce_case())
def test_reductions_match_numpy(case):
    op, dtype, threads, x, axis, keepdims = case
    (out,) = run(op, (x,), {"axis": axis, "keepdims": keepdims}, threads=threads)
    expected = np.asarray(reference_reduce(op, x, axis, keepdims)).astype(dtype)
    assert_close(out, expected, dtype, scale=10 * max(x.size, 1))


def test_integer_mean_truncates_toward_zero():
    x = np.array([[-3, -4], [3, 4]], dtype=np.int32)
    (out,) = run("Mean", (x,), {"axis": (1,)})
    np.testing.assert_array_equal(out, np.array([-3, 3], np.int32))


@pytest.mark.parametrize("shape", [(1, 200_000), (200_000, 1), (3, 100_000)])
def test_large_reductions_take_either_parallel_split(shape):
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    for axis in ((0,), (1,), None):
        (out,) = get_kernel("Sum", "CPU")(KernelContext(intra_op_threads=2), (x,), {"axis": axis})
        np.testing.assert_allclose(out, np.sum(x.astype(np.float64), axis=axis).astype(np.float32),
                                   rtol=1e-5, atol=1e-5 * x.size)


@st.composite
def softmax_case(draw):
    dtype = draw(st.sampled_from(FLOAT))
    threads = draw(st.sampled_from((1, 2))) if dtype in PARALLEL_DTYPES else 1
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=6))
    return dtype, threads, draw(arrays(dtype, shape, 50)), draw(arrays(dtype, shape))


@prop
@given(softmax_case())
def test_softmax_and_its_gradient_match_numpy(case):
    dtype, threads, x, g = case
    (y,) = run("Softmax", (x,), threads=threads)
    wide = x.astype(np.float64)
    e = np.exp(wide - wide.max(axis=-1, keepdims=True))
    expected = e / e.sum(axis=-1, keepdims=True)
    assert_close(y, expected.astype(dtype), dtype)
    (dx,) = run("SoftmaxGrad", (y, g), threads=threads)
    yw, gw = y.astype(np.float64), g.astype(np.float64)
    expected = yw * (gw - np.sum(gw * yw, axis=-1, keepdims=True))
    assert_close(dx, expected.astype(dtype), dtype, scale=100)


def test_softmax_is_stable_for_huge_logits():
    (y,) = run("Softmax", (np.array([[1000.0, 1000.0], [-1000.0, 0.0]]),))
    np.testing.assert_allclose(y, [[0.5, 0.5], [0.0, 1.0]])


# --- data movement -----------------------------------------------------------------------------

@st.composite
def movement_case(draw):
    dtype = draw(st.sampled_from(ALL))
    op = draw(st.sampled_from(["BroadcastTo", "Reshape", "Transpose", "Concat", "Slice"]))
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=4, min_side=0, max_side=4))
    if op == "BroadcastTo":
        x_shape = tuple(draw(st.sampled_from([n, 1])) for n in shape)
        x = draw(arrays(dtype, x_shape[draw(st.integers(0, len(shape))):]))
        return op, dtype, (x,), {"shape": shape}, np.broadcast_to(x, shape)
    x = draw(arrays(dtype, shape))
    if op == "Reshape":
        new = draw(st.sampled_from([(x.size,), shape[::-1], (1,) + shape]))
        return op, dtype, (x,), {"shape": new}, x.reshape(new)
    if op == "Transpose":
        perm = tuple(draw(st.permutations(range(x.ndim))))
        return op, dtype, (x,), {"perm": perm}, np.transpose(x, perm)
    if op == "Concat":
        axis = draw(st.integers(-x.ndim, x.ndim - 1))
        others = [draw(arrays(dtype, shape[:axis % x.ndim] + (draw(st.integers(0, 3)),)
                              + shape[axis % x.ndim + 1:]))
                  for _ in range(draw(st.integers(0, 2)))]
        return op, dtype, (x, *others), {"axis": axis}, np.concatenate((x, *others), axis)
    begin = tuple(draw(st.integers(0, n)) for n in shape)
    size = tuple(draw(st.sampled_from([-1, draw(st.integers(0, n - b))]))
                 for b, n in zip(begin, shape))
    index = tuple(slice(b, None if s == -1 else b + s) for b, s in zip(begin, size))
    return op, dtype, (x,), {"begin": begin, "size": size}, x[index]


@prop
@given(movement_case())
def test_data_movement_matches_numpy(case):
    op, dtype, inputs, attrs, expected = case
    (out,) = run(op, inputs, attrs)
    assert_close(out, expected, dtype)
    assert out.flags.c_contiguous
    assert not any(np.shares_memory(out, x) for x in inputs)


# --- registry ------------------------------------------------------------------------------------

def test_registry_agrees_with_the_op_table():
    from core.ops import OPS
    table = {(op, dev): set(dtypes) for op, d in OPS.items()
             for dev, dtypes in d.kernels.items() if dtypes}
    assert registered() == set(table)
    for key, dtypes in table.items():
        assert supported_dtypes(*key) == dtypes, key


def test_no_kernel_names_what_is_missing_and_what_exists():
    with pytest.raises(NoKernel) as err:
        get_kernel("Add", "TPU")
    assert (err.value.op_type, err.value.device_type) == ("Add", "TPU")
    assert err.value.available == ["CPU", "GPU"]
    assert "'Add'" in str(err.value) and "TPU" in str(err.value) and "['CPU', 'GPU']" in str(err.value)
    with pytest.raises(NoKernel, match="device types with one: \\[\\]"):
        get_kernel("NoSuchOp", "CPU")
    with pytest.raises(NoKernel) as err:
        get_kernel("Variable", "gpu", "int32")
    assert err.value.dtype == "int32"
    assert err.value.available == ["float32", "float64", "int64"]
    assert isinstance(err.value, LookupError)
    assert get_kernel("Variable", "gpu", "int64") is get_kernel("Variable", "GPU")
    assert supported_dtypes("NoSuchOp", "CPU") == set()


def test_kernel_context_rejects_an_empty_pool():
    with pytest.raises(ValueError, match="intra_op_threads"):
        KernelContext(intra_op_threads=0)


# --- concurrency -----------------------------------------------------------------------------------

def test_parallel_kernels_run_from_four_inter_op_threads_at_once():
    """Inter-op threads each enter numba parallel regions concurrently (workqueue would
    abort the process here); every result must still be right."""
    assert kernels.THREADING_LAYER in ("omp", "tbb")
    rng = np.random.default_rng(2)
    a = rng.standard_normal((256, 128)).astype(np.float32)
    b = rng.standard_normal((128, 256)).astype(np.float32)
    x = rng.standard_normal((512, 256)).astype(np.float32)
    expected = {
        "MatMul": a.astype(np.float64) @ b.astype(np.float64),
        "Sum": x.astype(np.float64).sum(axis=0),
        "Softmax": np.exp(x) / np.exp(x).sum(axis=-1, keepdims=True),
        "Add": x + x,
        "Relu": np.maximum(x, 0),
    }
    cases = [("MatMul", (a, b), {}), ("Sum", (x,), {"axis": (0,)}), ("Softmax", (x,), {}),
             ("Add", (x, x), {}), ("Relu", (x,), {})]
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def inter_op_thread(worker: int):
        try:
            ctx = KernelContext("CPU", intra_op_threads=2)
            barrier.wait()
            for step in range(12):
                op, inputs, attrs = cases[(worker + step) % len(cases)]
                (out,) = get_kernel(op, "CPU")(ctx, inputs, attrs)
                np.testing.assert_allclose(out, expected[op], rtol=1e-4, atol=1e-3)
        except BaseException as exc:  # noqa: BLE001  (reported by the main thread)
            errors.append(exc)

    threads = [threading.Thread(target=inter_op_thread, args=(i,)) for i in range(4)]
    with parallel_everywhere():  # these sizes are below the parallel thresholds
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a kernel hung"
    assert not errors, errors


def test_warmup_compiles_the_cpu_kernels():
    kernels.warmup(dtypes=("float32",))
    with pytest.raises(ValueError, match="unknown device type"):
        kernels.warmup(dtypes=(), device_types=("TPU",))


@contextmanager
def numba_calls():
    """Record ``(function name, argument types)`` of every call from Python into a CPU
    numba function, typed as numba types them (``readonly`` included) to pick the code."""
    calls = set()
    call = numba.core.registry.CPUDispatcher.__call__

    def recording_call(self, *args, **kws):
        calls.add((self.py_func.__name__, tuple(numba.typeof(a) for a in args)))
        return call(self, *args, **kws)

    with mock.patch.object(numba.core.registry.CPUDispatcher, "__call__", recording_call):
        yield calls


def cpu_signatures() -> dict:
    """The compiled signatures of the base family's numba functions, by name."""
    return {name: len(f.signatures) for module in (cpu, cpu_reduce)
            for name, f in vars(module).items()
            if isinstance(f, numba.core.registry.CPUDispatcher)}


def test_after_warmup_read_only_inputs_compile_nothing():
    """Constants, fed and received (shared-memory) tensors are read-only arrays, which
    numba compiles apart from writable ones.  After warmup, a step with them, and every
    kernel with one in each input position, serial and parallel, hand numba only the
    argument types warmup did: nothing compiles (and the variable updated stays writable)."""
    with numba_calls() as warmed:
        kernels.warmup(dtypes=("float32",))
    received = np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8)
    received.setflags(write=False)
    g = tf.Graph()
    with g.as_default():
        c = tf.constant(np.ones((8, 8), np.float32))
        x = tf.placeholder(tf.float32, (8, 8))
        v = tf.Variable(np.ones((8, 8), np.float32))
        h = tf.relu(tf.matmul(c, v) + c) * x
        h = tf.matmul(x, tf.tanh(h), transpose_a=True) - tf.sigmoid(c)
        loss = tf.reduce_sum(tf.softmax(h) * c, axis=1) + tf.reduce_mean(x, axis=0)
        grads = tf.gradients(loss, [v])  # the *Grad ops
        update = tf.assign_add(v, c)
        init = tf.global_variables_initializer()
    before = cpu_signatures()
    with numba_calls() as stepped:
        with Session(graph=g) as sess:
            sess.run(init)
            sess.run([loss, grads], feed_dict={x: received})
            sess.run(update)
        # The session's ops get the host's free cores: call the kernels for the parallel paths.
        for threads in (1, 2):
            for op, arity, attrs in [("Add", 2, {}), ("TanhGrad", 2, {}), ("SoftmaxGrad", 2, {}),
                                     ("MatMul", 2, {}), ("MatMul", 2, {"transpose_a": True}),
                                     ("MatMul", 2, {"transpose_b": True}), ("Relu", 1, {}),
                                     ("Tanh", 1, {}), ("Sigmoid", 1, {}), ("Softmax", 1, {}),
                                     ("Mean", 1, {"axis": 1})]:
                for k in range(arity):
                    inputs = [received.copy() for _ in range(arity)]
                    inputs[k] = received
                    run(op, inputs, attrs, threads=threads)
    called = {name for name, _ in stepped}
    assert called >= {"_binary_serial", "_matmul_blas_serial", "_softmax_grad_serial",
                      "_reduce_serial"}
    assert cpu._NUMBA_THREADS == 1 or "_binary_parallel" in called
    assert stepped <= warmed, sorted(map(str, stepped - warmed))
    assert cpu_signatures() == before
