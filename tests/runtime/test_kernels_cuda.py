"""GPU kernels match numpy, on numba's CUDA simulator (or a real GPU, on request).

``NUMBA_ENABLE_CUDASIM`` is read once, when ``numba.cuda`` is first imported, and in a
whole-suite pytest process something else may import it first.  So the ordinary run
collects one test, which reruns this file in a fresh interpreter with
``NUMBA_ENABLE_CUDASIM=1``; there the GPU cases below are defined and run.  With
``PLACEMENT_LAB_GPU_TESTS=1`` (and no simulator) they run in-process on a real GPU.

The simulator runs each CUDA thread as a Python thread: shapes stay tiny.
"""

from __future__ import annotations

import numpy as np
import pytest
from cuda_sim import ON_DEVICE, run_on_simulator


if not ON_DEVICE:

    def test_gpu_kernels_on_the_cuda_simulator():
        """Run this file's GPU cases in a child interpreter with the simulator on."""
        run_on_simulator(__file__)

else:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp

    from runtime.kernels import KernelContext, cuda_available, get_kernel, supported_dtypes

    ALL = ("float32", "float64", "int32", "int64")
    FLOAT = ("float32", "float64")
    few = settings(max_examples=6, deadline=None, derandomize=True,
                   suppress_health_check=[HealthCheck.too_slow])
    small = dict(min_dims=0, max_dims=3, min_side=1, max_side=3)

    def elements(dtype):
        if np.dtype(dtype).kind == "f":
            return st.floats(-10, 10, allow_nan=False, width=np.dtype(dtype).itemsize * 8)
        return st.integers(-100, 100)

    def arrays(dtype, shape):
        return hnp.arrays(np.dtype(dtype), shape, elements=elements(dtype))

    def gpu(op_type, inputs, attrs=None, **ctx):
        """Run a GPU kernel on host arrays: copy in, run, check outputs stay on the device,
        copy out."""
        from numba import cuda
        context = KernelContext("GPU", **ctx)
        device_inputs = tuple(cuda.to_device(np.asarray(x, order="C")) for x in inputs)
        outs = get_kernel(op_type, "GPU")(context, device_inputs, attrs or {})
        assert all(not isinstance(o, np.ndarray) for o in outs), "an output left the device"
        return tuple(o.copy_to_host() for o in outs), device_inputs

    def assert_close(actual, expected, dtype, scale=1.0):
        assert actual.dtype == np.dtype(dtype) and actual.shape == np.shape(expected)
        if np.dtype(dtype).kind == "f":
            eps = {"float32": 1e-5, "float64": 1e-12}[dtype]
            np.testing.assert_allclose(actual, expected, rtol=eps, atol=eps * scale)
        else:
            np.testing.assert_array_equal(actual, expected)

    def test_cuda_is_available():
        assert cuda_available()

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
        dtype = draw(st.sampled_from(BINARY[op][0]))
        shapes = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=3))
        return op, dtype, draw(arrays(dtype, shapes.input_shapes[0])), \
            draw(arrays(dtype, shapes.input_shapes[1]))

    @settings(few, max_examples=12)
    @given(binary_case())
    def test_binary_ops(case):
        op, dtype, x, y = case
        (out,), _ = gpu(op, (x, y))
        expected = BINARY[op][1](x.astype(np.float64), y.astype(np.float64)).astype(dtype)
        assert_close(out, expected, dtype, scale=1000)

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
        dtype = draw(st.sampled_from(UNARY[op][0]))
        return op, dtype, draw(arrays(dtype, hnp.array_shapes(**small)))

    @settings(few, max_examples=10)
    @given(unary_case())
    def test_unary_ops(case):
        op, dtype, x = case
        (out,), _ = gpu(op, (x,))
        assert_close(out, UNARY[op][1](x), dtype)

    @pytest.mark.parametrize("op", ["Assign", "AssignAdd", "AssignSub"])
    @pytest.mark.parametrize("dtype", ["float32", "int64"])
    def test_assign_ops_update_the_device_ref_in_place(op, dtype):
        ref = np.arange(6, dtype=dtype).reshape(2, 3)
        value = np.array([1, 2, 3], dtype=dtype)
        (out,), (ref_d, _) = gpu(op, (ref, value))
        expected = {"Assign": np.broadcast_to(value, ref.shape), "AssignAdd": ref + value,
                    "AssignSub": ref - value}[op]
        np.testing.assert_array_equal(out, expected)
        np.testing.assert_array_equal(ref_d.copy_to_host(), expected)  # the ref itself changed
        assert "int32" not in supported_dtypes(op, "GPU")

    def test_sources_return_device_arrays():
        from numba import cuda
        value = np.arange(4, dtype=np.int32)
        (c,), _ = gpu("Const", (), {"value": value})
        np.testing.assert_array_equal(c, value)
        (p,), _ = gpu("Placeholder", (), feed=value)
        np.testing.assert_array_equal(p, value)
        buffer = cuda.to_device(np.ones(3))
        assert get_kernel("Variable", "GPU")(KernelContext("GPU", variable=buffer), (), {})[0] is buffer
        assert get_kernel("NoOp", "GPU")(KernelContext("GPU"), (), {}) == ()

    @st.composite
    def matmul_case(draw):
        dtype = draw(st.sampled_from(ALL))
        m, k, n = (draw(st.integers(1, 5)) for _ in range(3))
        ta, tb = draw(st.booleans()), draw(st.booleans())
        return dtype, draw(arrays(dtype, (k, m) if ta else (m, k))), \
            draw(arrays(dtype, (n, k) if tb else (k, n))), ta, tb

    @settings(few, max_examples=6)
    @given(matmul_case())
    def test_matmul(case):
        dtype, a, b, ta, tb = case
        (out,), _ = gpu("MatMul", (a, b), {"transpose_a": ta, "transpose_b": tb})
        expected = (a.T if ta else a).astype(np.float64) @ (b.T if tb else b).astype(np.float64)
        assert_close(out, expected.astype(dtype), dtype, scale=1000)

    def test_matmul_spanning_several_tiles():
        rng = np.random.default_rng(0)
        a = rng.standard_normal((17, 18))
        b = rng.standard_normal((17, 3))
        (out,), _ = gpu("MatMul", (a, b), {"transpose_a": True})
        np.testing.assert_allclose(out, a.T @ b, rtol=1e-12)

    @st.composite
    def reduce_case(draw):
        op = draw(st.sampled_from(["Sum", "Mean"]))
        dtype = draw(st.sampled_from(ALL))
        x = draw(arrays(dtype, hnp.array_shapes(**small)))
        axis = None if x.ndim == 0 else draw(
            st.none() | st.lists(st.integers(0, x.ndim - 1), unique=True).map(tuple))
        return op, dtype, x, axis, draw(st.booleans())

    @settings(few, max_examples=10)
    @given(reduce_case())
    def test_reductions(case):
        op, dtype, x, axis, keepdims = case
        (out,), _ = gpu(op, (x,), {"axis": axis, "keepdims": keepdims})
        wide = x.astype(np.float64 if x.dtype.kind == "f" else np.int64)
        total = np.sum(wide, axis=axis, keepdims=keepdims)
        if op == "Mean":
            count = x.size // max(np.size(total), 1)
            total = total / count if x.dtype.kind == "f" else np.sign(total) * (np.abs(total) // count)
        assert_close(out, np.asarray(total).astype(dtype), dtype, scale=100)

    def test_long_reduction_takes_the_two_pass_path():
        x = np.arange(3 * 5000, dtype=np.int64).reshape(3, 5000) - 7000
        (s,), _ = gpu("Sum", (x,), {"axis": (1,)})
        np.testing.assert_array_equal(s, x.sum(axis=1))
        (m,), _ = gpu("Mean", (x,), {"axis": None})
        total = x.sum()
        np.testing.assert_array_equal(m, np.sign(total) * (abs(total) // x.size))

    @settings(few, max_examples=5)
    @given(st.sampled_from(FLOAT).flatmap(lambda d: st.tuples(
        st.just(d), hnp.array_shapes(min_dims=1, max_dims=3, max_side=4)).flatmap(
        lambda t: st.tuples(st.just(t[0]), arrays(t[0], t[1]), arrays(t[0], t[1])))))
    def test_softmax_and_its_gradient(case):
        dtype, x, g = case
        (y,), _ = gpu("Softmax", (x,))
        e = np.exp(x.astype(np.float64) - x.max(axis=-1, keepdims=True))
        expected = e / e.sum(axis=-1, keepdims=True)
        assert_close(y, expected.astype(dtype), dtype)
        (dx,), _ = gpu("SoftmaxGrad", (y, g))
        yw, gw = y.astype(np.float64), g.astype(np.float64)
        assert_close(dx, (yw * (gw - (gw * yw).sum(-1, keepdims=True))).astype(dtype), dtype,
                     scale=100)

    @st.composite
    def movement_case(draw):
        dtype = draw(st.sampled_from(ALL))
        op = draw(st.sampled_from(["BroadcastTo", "Reshape", "Transpose", "Concat", "Slice"]))
        shape = draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=3))
        if op == "BroadcastTo":
            x_shape = tuple(draw(st.sampled_from([n, 1])) for n in shape)
            x = draw(arrays(dtype, x_shape[draw(st.integers(0, len(shape))):]))
            return op, dtype, (x,), {"shape": shape}, np.broadcast_to(x, shape)
        x = draw(arrays(dtype, shape))
        if op == "Reshape":
            return op, dtype, (x,), {"shape": shape[::-1]}, x.reshape(shape[::-1])
        if op == "Transpose":
            perm = tuple(draw(st.permutations(range(x.ndim))))
            return op, dtype, (x,), {"perm": perm}, np.transpose(x, perm)
        if op == "Concat":
            axis = draw(st.integers(0, x.ndim - 1))
            other = draw(arrays(dtype, shape[:axis] + (2,) + shape[axis + 1:]))
            return op, dtype, (x, other), {"axis": axis}, np.concatenate((x, other), axis)
        begin = tuple(draw(st.integers(0, n - 1)) for n in shape)
        size = tuple(draw(st.sampled_from([-1, n - b])) for b, n in zip(begin, shape))
        index = tuple(slice(b, None if s == -1 else b + s) for b, s in zip(begin, size))
        return op, dtype, (x,), {"begin": begin, "size": size}, x[index]

    @settings(few, max_examples=12)
    @given(movement_case())
    def test_data_movement(case):
        op, dtype, inputs, attrs, expected = case
        (out,), _ = gpu(op, inputs, attrs)
        assert_close(out, expected, dtype)

    def test_warmup_runs_every_gpu_kernel_family():
        from runtime.kernels import warmup
        warmup(dtypes=("float32", "int32"), device_types=("GPU",))

    def test_gpu_allocation_costs_are_measured_per_size_beyond_the_smallest():
        from runtime.calibrate_gpu import measure_gpu_alloc_costs
        costs = measure_gpu_alloc_costs((4096, 1024, 1 << 16), count=3, repeat=1)
        assert [n for n, _ in costs] == [1024, 4096, 1 << 16]
        assert costs[0] == (1024, 0.0) and all(0.0 <= t < 0.1 for _, t in costs)
