"""GPU kernels of the math op family (:mod:`core.ops_math`), registered at import; the
device code (:mod:`.cuda_math_kernels`, and :mod:`.cuda_kernels` for the shared
elementwise and strided-copy kernels) is compiled on first use and ``numba.cuda`` is
imported only then (see :mod:`.cuda` for the conventions).

* Elementwise math runs :mod:`.cuda`'s op-code kernels (broadcasting by strides).
* Data movement (Pad, Split, SplitV, Tile, StridedSlice and its gradient, Fill) is one
  strided copy per output: Tile as a copy over the interleaved ``(m0, d0, m1, d1, ...)``
  view of its output, StridedSlice with the slice's steps as strides.
* BatchMatMulV2: 16x16 shared-memory tiles with the batch on the grid's z axis.
* Random initializers: numba's xoroshiro128+ states seeded from ``(seed, seed2)`` (the
  same pair, the same numbers; another stream than the CPU kernels').
* Shape arguments given as run-time tensors (Fill's dims, StridedSliceGrad's shape) are
  read back to the host: TensorFlow keeps them in host memory too.

>>> from runtime.kernels import supported_dtypes
>>> sorted(supported_dtypes("BatchMatMulV2", "GPU"))
['float32', 'float64']
"""

from __future__ import annotations

import math

import numpy as np

from core.ops_math import broadcast_reduction_axes, pad_pairs, strided_slice_index

from .cuda import GPU, _binary, _copy, _cuda, _empty, _flat, _launch, _strided_copy, _stream, _to_device, _unary
from .cuda import _kernels as _shared_kernels
from .layout import contiguous_strides
from .opcodes import (ABS, ADD, EXP, LOG, MAXIMUM, MINIMUM, POW, REAL_DIV, RSQRT, RSQRT_GRAD, SIGN,
                      SQRT, SQRT_GRAD, SQUARE, SQUARED_DIFFERENCE)
from .registry import FLOATING, NUMERIC, register

__all__ = ["warmup"]


def _kernels():
    """This family's device-code module (imports numba.cuda on first use)."""
    from . import cuda_math_kernels
    return cuda_math_kernels


def _host(a) -> np.ndarray:
    """A (small) tensor on the host: a shape argument."""
    return a if isinstance(a, np.ndarray) else a.copy_to_host()


# --- elementwise ----------------------------------------------------------------------------

def _register_binary(op_type: str, code: int, dtypes) -> None:
    def kernel(ctx, inputs, attrs):
        return (_binary(code, ctx, *inputs),)
    kernel.__name__ = op_type
    register(op_type, GPU, dtypes)(kernel)


def _register_unary(op_type: str, code: int, dtypes, floating: bool) -> None:
    name = "unary_float" if floating else "unary"

    def kernel(ctx, inputs, attrs):
        return (_unary(name, code, ctx, inputs[0]),)
    kernel.__name__ = op_type
    register(op_type, GPU, dtypes)(kernel)


for _op, _code, _dtypes in (("RealDiv", REAL_DIV, FLOATING), ("Pow", POW, FLOATING),
                            ("Maximum", MAXIMUM, NUMERIC), ("Minimum", MINIMUM, NUMERIC),
                            ("SquaredDifference", SQUARED_DIFFERENCE, NUMERIC),
                            ("SqrtGrad", SQRT_GRAD, FLOATING), ("RsqrtGrad", RSQRT_GRAD, FLOATING)):
    _register_binary(_op, _code, _dtypes)

for _op, _code, _dtypes, _floating in (("Exp", EXP, FLOATING, True), ("Log", LOG, FLOATING, True),
                                       ("Sqrt", SQRT, FLOATING, True),
                                       ("Rsqrt", RSQRT, FLOATING, True),
                                       ("Square", SQUARE, NUMERIC, False),
                                       ("Abs", ABS, NUMERIC, False),
                                       ("Sign", SIGN, NUMERIC, False)):
    _register_unary(_op, _code, _dtypes, _floating)


@register("AddN", GPU, NUMERIC)
def add_n(ctx, inputs, attrs):
    """The sum of the inputs, added pairwise into one buffer."""
    out = _copy(ctx, inputs[0])
    for x in inputs[1:]:
        _binary(ADD, ctx, out, x, out=out)
    return (out,)


@register("Cast", GPU, NUMERIC)
def cast(ctx, inputs, attrs):
    """x as ``attrs["DstT"]``."""
    x = inputs[0]
    out = _empty(x.shape, attrs["DstT"], ctx)
    _launch(_kernels().cast, x.size, ctx, _flat(x), _flat(out))
    return (out,)


# --- constants of a shape ---------------------------------------------------------------------

def _filled(ctx, shape, dtype, value) -> object:
    out = _empty(shape, dtype, ctx)
    _launch(_kernels().fill_scalar, out.size, ctx, _flat(out), np.dtype(dtype).type(value))
    return out


@register("Fill", GPU, NUMERIC)
def fill(ctx, inputs, attrs):
    """``dims`` (attr, or input 0 read back to the host) filled with the scalar ``value``
    (a device scalar: copied to every element on the device)."""
    dims = (tuple(attrs["dims"]) if "dims" in attrs
            else tuple(int(d) for d in _host(inputs[0])))
    value = _to_device(ctx, inputs[-1])
    out = _empty(dims, value.dtype, ctx)
    _launch(_kernels().fill_from, out.size, ctx, _flat(out), value.reshape(1))
    return (out,)


@register("ZerosLike", GPU, NUMERIC)
def zeros_like(ctx, inputs, attrs):
    """Zeros of x's shape and dtype."""
    return (_filled(ctx, inputs[0].shape, inputs[0].dtype, 0),)


@register("OnesLike", GPU, NUMERIC)
def ones_like(ctx, inputs, attrs):
    """Ones of x's shape and dtype."""
    return (_filled(ctx, inputs[0].shape, inputs[0].dtype, 1),)


@register("Shape", GPU, frozenset({"int32", "int64"}))
def shape(ctx, inputs, attrs):
    """x's shape as an int vector on the device."""
    dtype = np.dtype(attrs.get("out_type", "int32"))
    return (_to_device(ctx, np.array(inputs[0].shape, dtype=dtype)),)


@register("Size", GPU, frozenset({"int32", "int64"}))
def size(ctx, inputs, attrs):
    """x's number of elements on the device."""
    dtype = np.dtype(attrs.get("out_type", "int32"))
    return (_to_device(ctx, np.array(inputs[0].size, dtype=dtype)),)


@register("BroadcastGradientArgs", GPU, frozenset({"int32", "int64"}))
def broadcast_gradient_args(ctx, inputs, attrs):
    """For two shapes (read back to the host, where TF keeps them), the axes each one's
    gradient is summed over, on the device."""
    s0, s1 = (_host(s) for s in inputs)
    r0, r1 = broadcast_reduction_axes(s0.tolist(), s1.tolist())
    return (_to_device(ctx, np.array(r0, dtype=s0.dtype)), _to_device(ctx, np.array(r1, dtype=s0.dtype)))


@register("StopGradient", GPU, NUMERIC)
def stop_gradient(ctx, inputs, attrs):
    """A copy of x."""
    return (_copy(ctx, inputs[0]),)


@register("Squeeze", GPU, NUMERIC)
def squeeze(ctx, inputs, attrs):
    """A copy of x without its length-1 axes ``squeeze_dims`` (all when empty)."""
    x = inputs[0]
    dims = {d % x.ndim for d in attrs.get("squeeze_dims") or ()} or {
        d for d, n in enumerate(x.shape) if n == 1}
    return (_copy(ctx, x).reshape(tuple(n for d, n in enumerate(x.shape) if d not in dims)),)


# --- data movement -------------------------------------------------------------------------------

@register("Pad", GPU, NUMERIC)
def pad(ctx, inputs, attrs):
    """Zeros of the padded shape, then x copied into the middle."""
    x = inputs[0]
    paddings = pad_pairs(attrs["paddings"])
    out = _filled(ctx, tuple(d + a + b for d, (a, b) in zip(x.shape, paddings)), x.dtype, 0)
    if x.size:
        strides = contiguous_strides(out.shape)
        offset = sum(a * s for (a, _), s in zip(paddings, strides))
        _strided_copy(ctx, x, 0, contiguous_strides(x.shape), out, offset, strides, x.shape)
    return (out,)


def _split_parts(ctx, x, axis: int, sizes) -> tuple:
    strides = contiguous_strides(x.shape)
    parts, start = [], 0
    for n in sizes:
        shape = x.shape[:axis] + (n,) + x.shape[axis + 1:]
        out = _empty(shape, x.dtype, ctx)
        if out.size:
            _strided_copy(ctx, x, start * strides[axis], strides, out, 0,
                          contiguous_strides(shape), shape)
        parts.append(out)
        start += n
    return tuple(parts)


@register("Split", GPU, NUMERIC)
def split(ctx, inputs, attrs):
    """x in ``num_split`` equal parts along ``axis``: one strided copy each."""
    x = inputs[0]
    axis = int(attrs["axis"]) % x.ndim
    n = int(attrs["num_split"])
    return _split_parts(ctx, x, axis, [x.shape[axis] // n] * n)


@register("SplitV", GPU, NUMERIC)
def split_v(ctx, inputs, attrs):
    """x in parts of ``size_splits`` along ``axis`` (one size may be -1)."""
    x = inputs[0]
    axis = int(attrs["axis"]) % x.ndim
    sizes = [int(s) for s in attrs["size_splits"]]
    if -1 in sizes:
        sizes[sizes.index(-1)] = x.shape[axis] - sum(s for s in sizes if s != -1)
    return _split_parts(ctx, x, axis, sizes)


@register("Tile", GPU, NUMERIC)
def tile(ctx, inputs, attrs):
    """x repeated along each axis: one copy over the output seen as (m0, d0, m1, d1, ...)."""
    x = inputs[0]
    multiples = [int(m) for m in attrs["multiples"]]
    out_shape = tuple(d * m for d, m in zip(x.shape, multiples))
    out = _empty(out_shape, x.dtype, ctx)
    if out.size:
        xs, os_ = contiguous_strides(x.shape), contiguous_strides(out_shape)
        shape, x_strides, out_strides = [], [], []
        for d, m, sx, so in zip(x.shape, multiples, xs, os_):
            shape += [m, d]
            x_strides += [0, sx]
            out_strides += [d * so, so]
        _strided_copy(ctx, x, 0, x_strides, out, 0, out_strides, shape)
    return (out,)


def _slice_layout(shape, attrs):
    """``(offset, strides, out_shape)`` of a StridedSlice of a C-ordered array of
    ``shape``: the flat offset of its first element and the element stride per axis of
    the output (0 for a new axis)."""
    index, _ = strided_slice_index(tuple(shape), attrs)
    base = contiguous_strides(shape)
    offset, strides, out_shape, dim = 0, [], [], 0
    for item in index:
        if item is None:
            strides.append(0)
            out_shape.append(1)
            continue
        if isinstance(item, slice):
            start, _, step = item.indices(shape[dim])
            out_shape.append(len(range(shape[dim])[item]))
            offset += start * base[dim] if out_shape[-1] else 0
            strides.append(step * base[dim])
        else:
            offset += (item % shape[dim]) * base[dim]
        dim += 1
    return offset, strides, tuple(out_shape)


@register("StridedSlice", GPU, NUMERIC)
def strided_slice(ctx, inputs, attrs):
    """TF's StridedSlice: one strided copy with the slice's steps as strides."""
    x = inputs[0]
    offset, strides, out_shape = _slice_layout(x.shape, attrs)
    out = _empty(out_shape, x.dtype, ctx)
    if out.size:
        _strided_copy(ctx, x, offset, strides, out, 0, contiguous_strides(out_shape), out_shape)
    return (out,)


@register("StridedSliceGrad", GPU, NUMERIC)
def strided_slice_grad(ctx, inputs, attrs):
    """Zeros of the sliced input's shape, ``dy`` copied where the slice read."""
    dy = inputs[-1]
    full = (tuple(attrs["shape"]) if "shape" in attrs
            else tuple(int(d) for d in _host(inputs[0])))
    offset, strides, out_shape = _slice_layout(full, attrs)
    out = _filled(ctx, full, dy.dtype, 0)
    if dy.size:
        _strided_copy(ctx, dy, 0, contiguous_strides(out_shape), out, offset, strides, out_shape)
    return (out,)


# --- BatchMatMulV2 ---------------------------------------------------------------------------------

def _stack(a):
    """A device array as a stack of its matrices (batch axes flattened)."""
    rows, cols = a.shape[a.ndim - 2], a.shape[a.ndim - 1]  # (the simulator's shapes take
    return a.reshape(a.size // (rows * cols), rows, cols)      # no negative index)


def _batch_ids(own: tuple, batch: tuple, ctx):
    ids = np.arange(math.prod(own), dtype=np.int64).reshape(own)
    return _to_device(ctx, np.ascontiguousarray(np.broadcast_to(ids, batch)).reshape(-1))


@register("BatchMatMulV2", GPU, FLOATING)
def batch_matmul(ctx, inputs, attrs):
    """``x @ y`` over the broadcast batch axes; adjoints read through swapped indices."""
    x, y = inputs
    adj_x, adj_y = bool(attrs.get("adj_x")), bool(attrs.get("adj_y"))
    xs, ys = tuple(x.shape), tuple(y.shape)
    m = xs[-1] if adj_x else xs[-2]
    k = xs[-2] if adj_x else xs[-1]
    n = ys[-2] if adj_y else ys[-1]
    batch = tuple(np.broadcast_shapes(xs[:-2], ys[:-2]))
    out = _empty(batch + (m, n), x.dtype, ctx)
    count = math.prod(batch)
    if out.size == 0:
        return (out,)
    if k == 0:
        _launch(_kernels().fill_scalar, out.size, ctx, _flat(out), np.dtype(x.dtype).type(0))
        return (out,)
    xi, yi = _batch_ids(xs[:-2], batch, ctx), _batch_ids(ys[:-2], batch, ctx)
    tile_side = _kernels().TILE
    grid = (math.ceil(n / tile_side), math.ceil(m / tile_side), count)
    _kernels().batch_matmul_kernel(np.dtype(x.dtype).name)[grid, (tile_side, tile_side), _stream(ctx)](
        _stack(x), _stack(y), out.reshape(count, m, n), xi, yi, adj_x, adj_y, k)
    return (out,)


# --- random initializers ---------------------------------------------------------------------------

_STATES_MAX = 64 * 256  # one generator state per launched thread, at most this many


def _random(ctx, attrs, kind: int):
    shape = tuple(int(d) for d in attrs["shape"])
    dtype = np.dtype(attrs["dtype"])
    out = _empty(shape, dtype, ctx)
    n = out.size
    if n == 0:
        return (out,)
    seed, seed2 = int(attrs.get("seed", 0)), int(attrs.get("seed2", 0))
    # An unsigned 64-bit key, kept so: as a Python int above 2**63 it overflows the
    # int64 argument numba's compiled state initialiser types it as (on a real GPU).
    entropy = None if seed == 0 and seed2 == 0 else [seed, seed2]  # 0, 0: TF's "no seed"
    key = np.random.SeedSequence(entropy).generate_state(1, np.uint64)[0]
    threads = min(256, 32 * math.ceil(n / 32))
    blocks = min(_STATES_MAX // threads, math.ceil(n / threads))
    from numba.cuda.random import create_xoroshiro128p_states
    states = create_xoroshiro128p_states(blocks * threads, seed=key, stream=_stream(ctx))
    _kernels().random_kernel(dtype.name)[blocks, threads, _stream(ctx)](states, kind, _flat(out))
    return (out,)


@register("RandomStandardNormal", GPU, FLOATING)
def random_standard_normal(ctx, inputs, attrs):
    """Standard normal samples of ``attrs["shape"]``."""
    return _random(ctx, attrs, _kernels().NORMAL)


@register("TruncatedNormal", GPU, FLOATING)
def truncated_normal(ctx, inputs, attrs):
    """Standard normal samples within two standard deviations (others redrawn)."""
    return _random(ctx, attrs, _kernels().TRUNCATED)


@register("RandomUniform", GPU, FLOATING)
def random_uniform(ctx, inputs, attrs):
    """Uniform samples in [0, 1)."""
    return _random(ctx, attrs, _kernels().UNIFORM)


def warmup(dtypes=("float32", "float64", "int32", "int64")) -> None:
    """Compile this family's CUDA kernels for ``dtypes`` by running each once on tiny
    arrays (needs :func:`.cuda.cuda_available`)."""
    from .context import KernelContext
    ctx = KernelContext(GPU)
    for name in dtypes:
        x = _to_device(ctx, np.ones((2, 2), dtype=name))
        cast(ctx, (x,), {"DstT": "float32"})
        zeros_like(ctx, (x,), {})
        fill(ctx, (_to_device(ctx, np.array(1, dtype=name)),), {"dims": (2,)})
        if np.dtype(name).kind == "f":
            batch_matmul(ctx, (x.reshape(1, 2, 2), x), {})
            random_standard_normal(ctx, (), {"shape": (2,), "dtype": name, "seed": 1, "seed2": 1})
    _shared_kernels()  # the elementwise ops' kernels are compiled by cuda.warmup
