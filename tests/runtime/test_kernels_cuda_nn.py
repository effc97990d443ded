"""The nn family's GPU kernels agree with its CPU kernels (tested against numpy in
test_kernels_nn.py), on numba's CUDA simulator, or a real GPU on request.

As test_kernels_cuda.py: the ordinary run collects one test that reruns this file in a
fresh interpreter with ``NUMBA_ENABLE_CUDASIM=1``; ``PLACEMENT_LAB_GPU_TESTS=1`` (and no
simulator) runs the cases in-process on a real GPU.  The simulator runs each CUDA
thread as a Python thread: shapes stay tiny.
"""

from __future__ import annotations

import numpy as np
import pytest
from cuda_sim import ON_DEVICE, run_on_simulator


if not ON_DEVICE:

    def test_gpu_nn_kernels_on_the_cuda_simulator():
        """Run this file's GPU cases in a child interpreter with the simulator on."""
        run_on_simulator(__file__)

else:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from runtime.kernels import KernelContext, cuda_available, get_kernel

    FLOAT = ("float32", "float64")
    few = settings(max_examples=4, deadline=None, derandomize=True,
                   suppress_health_check=[HealthCheck.too_slow])

    def gpu(op_type, inputs, attrs):
        """The op's outputs on the GPU, checked to stay there, then copied back."""
        from numba import cuda
        device_inputs = tuple(cuda.to_device(np.ascontiguousarray(x)) for x in inputs)
        outs = get_kernel(op_type, "GPU")(KernelContext("GPU"), device_inputs, attrs)
        assert all(not isinstance(o, np.ndarray) for o in outs), "an output left the device"
        return tuple(o.copy_to_host() for o in outs)

    def assert_same(op_type, inputs, attrs):
        """The GPU kernel's outputs equal the CPU kernel's on the same inputs."""
        outs = gpu(op_type, inputs, attrs)
        expected = get_kernel(op_type, "CPU")(KernelContext("CPU"), tuple(inputs), attrs)
        assert len(outs) == len(expected)
        for out, ref in zip(outs, expected):
            assert out.dtype == ref.dtype and out.shape == ref.shape, (op_type, out.shape, ref.shape)
            if ref.dtype.kind == "f":
                tol = {"float32": 1e-4, "float64": 1e-10}[ref.dtype.name]
                np.testing.assert_allclose(out, ref, rtol=tol, atol=tol * max(1, np.abs(ref).max(
                    initial=0)))
            else:
                np.testing.assert_array_equal(out, ref)
        return outs

    def test_cuda_is_available():
        assert cuda_available()

    @few
    @given(shape=st.tuples(st.integers(1, 2), st.integers(1, 4), st.integers(1, 4),
                           st.integers(1, 2)),
           k=st.integers(1, 2), stride=st.integers(1, 2), dilation=st.integers(1, 2),
           padding=st.sampled_from(["SAME", "VALID"]), dtype=st.sampled_from(FLOAT),
           seed=st.integers(0, 99))
    def test_conv2d_and_backprops(shape, k, stride, dilation, padding, dtype, seed):
        if padding == "VALID" and min(shape[1:3]) < (k - 1) * dilation + 1:
            padding = "SAME"
        rng = np.random.default_rng(seed)
        x = rng.standard_normal(shape).astype(dtype)
        f = rng.standard_normal((k, k, shape[3], 2)).astype(dtype)
        attrs = {"strides": (1, stride, stride, 1), "padding": padding,
                 "dilations": (1, dilation, dilation, 1)}
        (y,) = assert_same("Conv2D", (x, f), attrs)
        dy = rng.standard_normal(y.shape).astype(dtype)
        assert_same("Conv2DBackpropInput", (f, dy), dict(attrs, input_sizes=(None,) + shape[1:]))
        assert_same("Conv2DBackpropFilter", (x, dy), dict(attrs, filter_sizes=f.shape))

    def test_conv2d_rows_beyond_one_grid_run_in_row_blocks():
        """A grid holds _MAX_GRID_Y row tiles: lowered to 1, 36 rows take 3 launches."""
        from unittest import mock
        from runtime.kernels import cuda_nn
        rng = np.random.default_rng(3)
        x = rng.standard_normal((1, 6, 6, 2))
        f = rng.standard_normal((3, 3, 2, 3))
        attrs = {"strides": (1, 1, 1, 1), "padding": "SAME"}
        with mock.patch.object(cuda_nn, "_MAX_GRID_Y", 1):
            (y,) = assert_same("Conv2D", (x, f), attrs)
            assert_same("Conv2DBackpropInput", (f, y), dict(attrs, input_sizes=x.shape))

    @few
    @given(shape=st.tuples(st.integers(1, 2), st.integers(1, 4), st.integers(1, 4),
                           st.integers(1, 2)),
           k=st.integers(1, 3), stride=st.integers(1, 2),
           padding=st.sampled_from(["SAME", "VALID"]), dtype=st.sampled_from(FLOAT),
           seed=st.integers(0, 99))
    def test_pooling_and_gradients(shape, k, stride, padding, dtype, seed):
        if padding == "VALID" and min(shape[1:3]) < k:
            padding = "SAME"
        rng = np.random.default_rng(seed)
        x = np.round(rng.standard_normal(shape) * 2).astype(dtype)  # ties: the first max wins
        attrs = {"ksize": (1, k, k, 1), "strides": (1, stride, stride, 1), "padding": padding}
        (mp,) = assert_same("MaxPool", (x,), attrs)
        assert_same("AvgPool", (x,), attrs)
        g = rng.standard_normal(mp.shape).astype(dtype)
        assert_same("MaxPoolGrad", (x, mp, g), attrs)
        assert_same("AvgPoolGrad", (g,), dict(attrs, orig_input_shape=shape))

    @pytest.mark.parametrize("dtype", FLOAT)
    @pytest.mark.parametrize("training", [True, False])
    def test_bias_and_batch_norm(dtype, training):
        rng = np.random.default_rng(0)
        x = (rng.standard_normal((2, 3, 2, 3)) * 3 + 10).astype(dtype)
        c = [rng.standard_normal(3).astype(dtype) for _ in range(3)] + [
            rng.uniform(0.5, 2, 3).astype(dtype)]
        assert_same("BiasAdd", (x, c[0]), {})
        assert_same("BiasAddGrad", (x,), {})
        attrs = {"epsilon": 1e-3, "is_training": training, "exponential_avg_factor": 0.5}
        outs = assert_same("FusedBatchNormV3", (x, *c), attrs)
        dy = rng.standard_normal(x.shape).astype(dtype)
        assert_same("FusedBatchNormGradV3", (dy, x, c[0], outs[3], outs[4], outs[5]), attrs)
        if training:  # empty mean and variance, as TensorFlow allows with factor 1
            empty = np.zeros(0, dtype)
            assert_same("FusedBatchNormV3", (x, c[0], c[1], empty, empty), {"is_training": True})

    @pytest.mark.parametrize("dtype", ["float32", "int64"])
    @pytest.mark.parametrize("index", ["int32", "int64"])
    def test_gather_and_segment_sum(dtype, index):
        rng = np.random.default_rng(1)
        params = (rng.standard_normal((3, 4, 2)) * 10).astype(dtype)
        ids = np.array([[3, 0], [1, 3]], index)
        for axis in (0, 1):
            assert_same("GatherV2", (params, ids % params.shape[axis]), {"axis": axis})
        (out,) = gpu("GatherV2", (params, np.array([0, 9], index)), {"axis": 1})
        np.testing.assert_array_equal(out[:, 1], 0)  # out of range: zeros, as TF's GPU kernel
        seg = np.array([[2, -1], [0, 2]], index)  # -1: dropped
        assert_same("UnsortedSegmentSum", (params[:2, :2], seg), {"num_segments": 4})

    @pytest.mark.parametrize("dtype", FLOAT)
    def test_losses(dtype):
        rng = np.random.default_rng(2)
        x = (rng.standard_normal((3, 4)) * 10).astype(dtype)
        labels = rng.dirichlet(np.ones(4), 3).astype(dtype)
        assert_same("SoftmaxCrossEntropyWithLogits", (x, labels), {})
        assert_same("SparseSoftmaxCrossEntropyWithLogits", (x, np.array([0, 3, 1])), {})
        assert_same("LogSoftmax", (x.reshape(3, 1, 4),), {})
        loss, back = gpu("SparseSoftmaxCrossEntropyWithLogits", (x, np.array([0, 7, 1])), {})
        assert np.isnan(loss[1]) and np.isnan(back[1]).all() and not np.isnan(loss[0])

    def test_warmup_compiles_the_nn_kernels():
        from runtime.kernels import cuda_nn
        cuda_nn.warmup(("float64",))
