"""The training ops' kernels (ApplyGradientDescent, ApplyMomentum, ApplyAdam) match numpy
references of TensorFlow's formulas, on the CPU and on the GPU (numba's CUDA simulator in
a child interpreter, as tests/runtime/test_kernels_cuda.py; a real GPU with
``PLACEMENT_LAB_GPU_TESTS=1``)."""

from __future__ import annotations

import numpy as np
import pytest
from cuda_sim import ON_DEVICE, run_on_simulator
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.kernels import KernelContext, get_kernel



def reference(op_type, inputs, attrs):
    """TensorFlow's update in float64 numpy: the new (var, slots...)."""
    x = [np.asarray(a, np.float64) for a in inputs]
    if op_type == "ApplyGradientDescent":
        var, alpha, delta = x
        return [var - alpha * delta]
    if op_type == "ApplyMomentum":
        var, accum, lr, grad, mom = x
        accum = accum * mom + grad
        if attrs.get("use_nesterov"):
            return [var - (grad * lr + accum * mom * lr), accum]
        return [var - lr * accum, accum]
    var, m, v, b1p, b2p, lr, b1, b2, eps, grad = x
    lr_t = lr * np.sqrt(1 - b2p) / (1 - b1p)
    m = m + (grad - m) * (1 - b1)
    v = v + (grad * grad - v) * (1 - b2)
    return [var - lr_t * m / (np.sqrt(v) + eps), m, v]


REFS = {"ApplyGradientDescent": 1, "ApplyMomentum": 2, "ApplyAdam": 3}  # op -> ref inputs


def make_inputs(op_type, shape, dtype, seed):
    rng = np.random.default_rng(seed)

    def arr(low=-2.0, high=2.0):
        return rng.uniform(low, high, shape).astype(dtype)

    def scalar(value):
        return np.asarray(value, dtype)

    if op_type == "ApplyGradientDescent":
        return [arr(), scalar(0.3), arr()]
    if op_type == "ApplyMomentum":
        return [arr(), arr(), scalar(0.1), arr(), scalar(0.9)]
    return [arr(), arr(), arr(0.0, 1.0), scalar(0.9 ** 3), scalar(0.999 ** 3), scalar(0.01),
            scalar(0.9), scalar(0.999), scalar(1e-7), arr()]


def check(op_type, run, shape, dtype, seed, attrs):
    inputs = make_inputs(op_type, shape, dtype, seed)
    expected = reference(op_type, inputs, attrs)
    updated = run(op_type, inputs, attrs)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for got, want in zip(updated, expected):
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def cpu_run(op_type, inputs, attrs):
    inputs = [a.copy() for a in inputs]
    out = get_kernel(op_type, "CPU")(KernelContext(), tuple(inputs), attrs)
    assert out[0] is inputs[0]  # the output aliases the variable, updated in place
    return inputs[:REFS[op_type]]


CASES = [("ApplyGradientDescent", {}), ("ApplyMomentum", {}),
         ("ApplyMomentum", {"use_nesterov": True}), ("ApplyAdam", {})]


@pytest.mark.parametrize("op_type, attrs", CASES)
@given(shape=st.lists(st.integers(1, 5), min_size=0, max_size=3).map(tuple),
       dtype=st.sampled_from([np.float32, np.float64]), seed=st.integers(0, 2**16))
@settings(max_examples=15, deadline=None)
def test_cpu_kernels_match_the_reference(op_type, attrs, shape, dtype, seed):
    check(op_type, cpu_run, shape, dtype, seed, attrs)


def test_cpu_kernel_rejects_a_gradient_of_another_size():
    var = np.zeros(4, np.float32)
    with pytest.raises(ValueError, match="gradient of 3 elements"):
        get_kernel("ApplyGradientDescent", "CPU")(
            KernelContext(), (var, np.float32(1), np.zeros(3, np.float32)), {})


if not ON_DEVICE:

    def test_gpu_kernels_on_the_cuda_simulator():
        """Run this file's GPU cases in a child interpreter with the simulator on."""
        run_on_simulator(__file__, "-k", "gpu")

else:
    from numba import cuda

    def gpu_run(op_type, inputs, attrs):
        device = [cuda.to_device(a) for a in inputs]
        out = get_kernel(op_type, "GPU")(KernelContext("GPU"), tuple(device), attrs)
        assert out[0] is device[0]
        return [d.copy_to_host() for d in device[:REFS[op_type]]]

    @pytest.mark.parametrize("op_type, attrs", CASES)
    @pytest.mark.parametrize("shape, dtype", [((3,), np.float32), ((2, 3), np.float64), ((), np.float32)])
    def test_gpu_kernels_match_the_reference(op_type, attrs, shape, dtype):
        check(op_type, gpu_run, shape, dtype, 7, attrs)
