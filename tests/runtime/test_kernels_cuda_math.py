"""GPU kernels of the math family match numpy, on numba's CUDA simulator (or a real GPU
with ``PLACEMENT_LAB_GPU_TESTS=1``); as in test_kernels_cuda.py, the ordinary run reruns
this file in a child interpreter with ``NUMBA_ENABLE_CUDASIM=1``.  Tiny shapes: the
simulator runs each CUDA thread as a Python thread.
"""

from __future__ import annotations

import numpy as np
import pytest
from cuda_sim import ON_DEVICE, run_on_simulator


if not ON_DEVICE:

    def test_math_gpu_kernels_on_the_cuda_simulator():
        """Run this file's GPU cases in a child interpreter with the simulator on."""
        run_on_simulator(__file__)

else:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp

    from core.builders_math import _slice_spec
    from runtime.kernels import KernelContext, get_kernel

    ALL = ("float32", "float64", "int32", "int64")
    FLOAT = ("float32", "float64")
    few = settings(max_examples=6, deadline=None, derandomize=True,
                   suppress_health_check=[HealthCheck.too_slow])
    small = dict(min_dims=1, max_dims=3, min_side=1, max_side=3)

    def arrays(dtype, shape, lo=-4.0, hi=4.0):
        if np.dtype(dtype).kind == "f":
            elements = st.floats(lo, hi, allow_nan=False, width=np.dtype(dtype).itemsize * 8)
        else:
            elements = st.integers(int(lo) * 10, int(hi) * 10)
        return hnp.arrays(np.dtype(dtype), shape, elements=elements)

    def gpu(op_type, inputs, attrs=None):
        """Run a GPU kernel on host arrays; its outputs must stay on the device."""
        from numba import cuda
        device_inputs = tuple(cuda.to_device(np.asarray(x, order="C")) for x in inputs)
        outs = get_kernel(op_type, "GPU")(KernelContext("GPU"), device_inputs, attrs or {})
        assert all(not isinstance(o, np.ndarray) for o in outs), "an output left the device"
        return tuple(o.copy_to_host() for o in outs)

    def close(actual, expected, dtype):
        assert actual.dtype == np.dtype(dtype) and actual.shape == np.shape(expected)
        rtol = {"float32": 1e-5, "float64": 1e-12}.get(dtype, 0)
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol)

    ELEMENTWISE = {  # op: (dtypes, reference, value ranges of the inputs)
        "RealDiv": (FLOAT, np.divide, [(-4, 4), (0.5, 4)]),
        "Pow": (FLOAT, np.power, [(0.5, 3), (-2, 2)]),
        "Maximum": (ALL, np.maximum, [(-4, 4), (-4, 4)]),
        "Minimum": (ALL, np.minimum, [(-4, 4), (-4, 4)]),
        "SquaredDifference": (ALL, lambda x, y: (x - y) * (x - y), [(-4, 4), (-4, 4)]),
        "SqrtGrad": (FLOAT, lambda y, g: g * 0.5 / y, [(0.5, 4), (-4, 4)]),
        "RsqrtGrad": (FLOAT, lambda y, g: -0.5 * g * y ** 3, [(-2, 2), (-4, 4)]),
        "Exp": (FLOAT, np.exp, [(-4, 4)]),
        "Log": (FLOAT, np.log, [(0.5, 4)]),
        "Sqrt": (FLOAT, np.sqrt, [(0, 4)]),
        "Rsqrt": (FLOAT, lambda x: 1 / np.sqrt(x), [(0.5, 4)]),
        "Square": (ALL, np.square, [(-4, 4)]),
        "Abs": (ALL, np.abs, [(-4, 4)]),
        "Sign": (ALL, np.sign, [(-2, 2)]),
    }

    @pytest.mark.parametrize("op", sorted(ELEMENTWISE))  # every op, a few cases each
    @settings(few, max_examples=3)
    @given(st.data())
    def test_elementwise_math(op, data):
        dtypes, _, ranges = ELEMENTWISE[op]
        dtype = data.draw(st.sampled_from(dtypes))
        shapes = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=len(ranges), max_dims=2,
                                                             max_side=3))
        inputs = [data.draw(arrays(dtype, s, *r)) for s, r in zip(shapes.input_shapes, ranges)]
        (out,) = gpu(op, inputs)
        close(out, np.asarray(ELEMENTWISE[op][1](*inputs), dtype=dtype), dtype)

    @settings(few)
    @given(st.sampled_from(ALL), hnp.array_shapes(**small), st.data())
    def test_add_n_cast_fill_and_likes(dtype, shape, data):
        x, y = data.draw(arrays(dtype, shape)), data.draw(arrays(dtype, shape))
        close(gpu("AddN", (x, y, x))[0], (x + y + x).astype(dtype), dtype)
        to = data.draw(st.sampled_from(ALL))
        np.testing.assert_array_equal(gpu("Cast", (x,), {"DstT": to})[0], x.astype(to))
        np.testing.assert_array_equal(gpu("Fill", (x.reshape(-1)[:1].reshape(()),),
                                          {"dims": shape})[0], np.full(shape, x.flat[0]))
        np.testing.assert_array_equal(gpu("Fill", (np.array(shape, np.int32), x.flat[0]))[0],
                                      np.full(shape, x.flat[0]))
        np.testing.assert_array_equal(gpu("ZerosLike", (x,))[0], np.zeros_like(x))
        np.testing.assert_array_equal(gpu("OnesLike", (x,))[0], np.ones_like(x))
        assert gpu("Shape", (x,), {"out_type": "int32"})[0].tolist() == list(shape)
        assert gpu("Size", (x,), {"out_type": "int64"})[0] == x.size
        np.testing.assert_array_equal(gpu("StopGradient", (x,))[0], x)
        r0, r1 = gpu("BroadcastGradientArgs", (np.array(shape, np.int32), np.array(shape[-1:], np.int32)))
        assert r0.tolist() == [] and r1.tolist() == list(range(len(shape) - 1))
        np.testing.assert_array_equal(
            gpu("Sum", (x, np.array([0], np.int64)), {"keepdims": True})[0],
            x.sum(axis=0, keepdims=True).astype(dtype))
        np.testing.assert_array_equal(gpu("Squeeze", (x[None],), {"squeeze_dims": (0,)})[0], x)

    @settings(few)
    @given(st.sampled_from(ALL), hnp.array_shapes(**small), st.data())
    def test_pad_tile_split(dtype, shape, data):
        x = data.draw(arrays(dtype, shape))
        paddings = [tuple(data.draw(st.integers(0, 1)) for _ in range(2)) for _ in shape]
        np.testing.assert_array_equal(gpu("Pad", (x,), {"paddings": paddings})[0], np.pad(x, paddings))
        multiples = [data.draw(st.integers(1, 2)) for _ in shape]
        np.testing.assert_array_equal(gpu("Tile", (x,), {"multiples": multiples})[0],
                                      np.tile(x, multiples))
        axis = data.draw(st.integers(0, len(shape) - 1))
        for got, want in zip(gpu("Split", (x,), {"axis": axis, "num_split": 1}), [x]):
            np.testing.assert_array_equal(got, want)
        first = data.draw(st.integers(0, shape[axis]))
        parts = gpu("SplitV", (x,), {"axis": axis, "size_splits": (first, -1), "num_split": 2})
        np.testing.assert_array_equal(np.concatenate(parts, axis=axis), x)

    KEYS = [(slice(None, None, -1),), (0,), (Ellipsis, None, slice(1, None)), (slice(None), -1),
            (None, slice(0, 2, 2), Ellipsis)]

    @settings(few)
    @given(st.sampled_from(ALL), hnp.array_shapes(min_dims=2, max_dims=3, min_side=2, max_side=3),
           st.sampled_from(KEYS), st.data())
    def test_strided_slice_and_gradient(dtype, shape, key, data):
        x = data.draw(arrays(dtype, shape))
        attrs = _slice_spec(key)
        np.testing.assert_array_equal(gpu("StridedSlice", (x,), attrs)[0], x[key])
        dy = data.draw(arrays(dtype, x[key].shape))
        expected = np.zeros_like(x)
        expected[key] = dy
        np.testing.assert_array_equal(gpu("StridedSliceGrad", (dy,), dict(attrs, shape=shape))[0],
                                      expected)
        np.testing.assert_array_equal(
            gpu("StridedSliceGrad", (np.array(shape, np.int64), dy), attrs)[0], expected)

    @settings(few)
    @given(st.sampled_from(FLOAT), st.booleans(), st.booleans(), st.data())
    def test_batch_matmul(dtype, adj_x, adj_y, data):
        batch = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=2, max_side=2))
        m, k, n = (data.draw(st.integers(1, 3)) for _ in range(3))
        x = data.draw(arrays(dtype, batch.input_shapes[0] + ((k, m) if adj_x else (m, k))))
        y = data.draw(arrays(dtype, batch.input_shapes[1] + ((n, k) if adj_y else (k, n))))
        (out,) = gpu("BatchMatMulV2", (x, y), {"adj_x": adj_x, "adj_y": adj_y})
        ref = np.matmul(np.swapaxes(x, -1, -2) if adj_x else x, np.swapaxes(y, -1, -2) if adj_y else y)
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)

    def test_random_ops_key_numba_s_generator_with_an_unsigned_64_bit_seed(monkeypatch):
        """The key drawn from ``(seed, seed2)`` spans 64 bits: as a Python int above
        2**63 it overflowed the compiled state initialiser's int64 argument on a real
        GPU (the simulator runs it uncompiled)."""
        import numba.cuda.random as curand
        seeds = []
        create = curand.create_xoroshiro128p_states

        def recording(n, seed, *args, **kwargs):
            seeds.append(seed)
            return create(n, seed, *args, **kwargs)

        monkeypatch.setattr(curand, "create_xoroshiro128p_states", recording)
        for pair in ((3, 9), (0, 0)):
            gpu("RandomUniform", (), {"shape": (4,), "dtype": "float32", "seed": pair[0],
                                      "seed2": pair[1]})
        assert len(seeds) == 2 and all(isinstance(s, np.uint64) for s in seeds), seeds

    @pytest.mark.parametrize("op", ["RandomStandardNormal", "TruncatedNormal", "RandomUniform"])
    def test_random_ops_are_deterministic_per_seed_pair(op):
        attrs = {"shape": (8, 8), "dtype": "float32", "seed": 3, "seed2": 9}
        (a,), (b,) = gpu(op, (), attrs), gpu(op, (), attrs)
        (c,) = gpu(op, (), dict(attrs, seed2=10))
        np.testing.assert_array_equal(a, b)
        assert a.dtype == np.float32 and not np.array_equal(a, c)
        if op == "RandomUniform":
            assert a.min() >= 0 and a.max() < 1
        elif op == "TruncatedNormal":
            assert np.abs(a).max() <= 2
