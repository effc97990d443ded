"""The op table's neural-network ops: convolution, pooling, bias, batch normalisation,
embedding lookup (Gather and its scatter-add gradient), softmax cross-entropy losses.

Each op is an :class:`core.opdef.OpDef`; :mod:`core.ops` merges this family's table into
``OPS``, the single table the rest of the lab reads.  Op type names are TensorFlow's, as
``tf.compat.v1`` writes them into a GraphDef, with TensorFlow's inputs, outputs and
attrs; images are NHWC only (any other ``data_format`` is a :class:`ShapeError`).  The
arguments TensorFlow takes as constant tensor inputs (Conv2DBackpropInput's
``input_sizes``, GatherV2's ``axis``) are attrs here, declared in ``const_inputs``.

A size in ``input_sizes`` / ``orig_input_shape`` may be None (unknown when the graph is
built) only in the batch position: the kernel takes it from the gradient's batch, so the
gradients of a graph fed with ``placeholder(float32, (None, 32, 32, 3))`` build and run.

>>> from core.dtypes import float32
>>> x, w = TensorSpec(float32, (8, 32, 32, 3)), TensorSpec(float32, (3, 3, 3, 16))
>>> attrs = {"strides": (1, 2, 2, 1), "padding": "SAME"}
>>> NN_OPS["Conv2D"].infer([x, w], attrs)
[TensorSpec(dtype=core.float32, shape=(8, 16, 16, 16))]
>>> NN_OPS["Conv2D"].flops([x, w], NN_OPS["Conv2D"].infer([x, w], attrs), attrs)
1769472.0
"""

from __future__ import annotations

from typing import Sequence

from core.opdef import (FLOAT, NUMERIC, OpDef, ShapeError, TensorSpec, kernels_for,
                        known_shape, lazy_gradient, nbytes, num_elements, same_dtype, table)

__all__ = ["NN_OPS", "window_geometry", "conv_output_size", "PADDINGS"]

PADDINGS = ("SAME", "VALID")
_INDEX_DTYPES = ("int32", "int64")


def _grad(name: str):
    return lazy_gradient(name, "core.grads_nn")


# --- attrs --------------------------------------------------------------------------------

def _nhwc(attrs) -> None:
    fmt = attrs.get("data_format", "NHWC")
    if fmt != "NHWC":
        raise ShapeError(f"data_format {fmt!r} is not supported: the lab's image ops are NHWC only")


def _four(attrs, key: str, default=None) -> tuple[int, int]:
    """``(h, w)`` of a ``[1, h, w, 1]`` attr (strides, ksize, dilations)."""
    value = attrs.get(key, default)
    if value is None:
        raise ShapeError(f"needs the attr {key!r} ([1, h, w, 1])")
    value = tuple(value)
    if len(value) != 4 or value[0] != 1 or value[3] != 1:
        raise ShapeError(f"{key} must be [1, h, w, 1] (NHWC; no batch or channel stride), "
                         f"got {list(value)}")
    if any(not isinstance(v, int) or v < 1 for v in value):
        raise ShapeError(f"{key} must hold positive integers, got {list(value)}")
    return value[1], value[2]


def _padding(attrs) -> str:
    padding = attrs.get("padding")
    if padding not in PADDINGS:
        raise ShapeError(f"padding must be one of {list(PADDINGS)}, got {padding!r}")
    return padding


def conv_output_size(size: int | None, window: int, stride: int, padding: str,
                     dilation: int = 1) -> int | None:
    """Output length of a convolution or pooling along one axis (TensorFlow's rule).

    >>> conv_output_size(7, 3, 2, "SAME"), conv_output_size(7, 3, 2, "VALID")
    (4, 3)
    """
    if size is None:
        return None
    effective = (window - 1) * dilation + 1
    if padding == "SAME":
        return -(-size // stride)
    if size < effective:
        raise ShapeError(f"a window of {effective} (size {window}, dilation {dilation}) is "
                         f"larger than the input's {size} with VALID padding")
    return (size - effective) // stride + 1


def window_geometry(size: int, window: int, stride: int, padding: str,
                    dilation: int = 1) -> tuple[int, int]:
    """``(output length, padding before)`` along one axis of a known length; SAME pads
    ``max((out - 1) * stride + effective window - size, 0)`` split with the extra one
    after, as TensorFlow does.

    >>> window_geometry(7, 3, 2, "SAME")
    (4, 1)
    """
    out = conv_output_size(size, window, stride, padding, dilation)
    if padding == "VALID":
        return out, 0
    total = max((out - 1) * stride + (window - 1) * dilation + 1 - size, 0)
    return out, total // 2


def _check_rank(spec: TensorSpec, rank: int, what: str) -> None:
    if len(spec.shape) != rank:
        raise ShapeError(f"{what} must have rank {rank}, got shape {spec.shape}")


def _float(spec: TensorSpec, what: str) -> None:
    if not spec.dtype.is_floating:
        raise ShapeError(f"{what} must be floating-point, got {spec.dtype.name}")


def _index(spec: TensorSpec, what: str) -> None:
    if spec.dtype.name not in _INDEX_DTYPES:
        raise ShapeError(f"{what} must be int32 or int64, got {spec.dtype.name}")


def _agree(a, b) -> bool:
    return a is None or b is None or a == b


def _either(a, b):
    return a if a is not None else b


# --- convolution ------------------------------------------------------------------------

def _conv_out(x_shape, f_shape, attrs) -> tuple:
    """Conv2D's output shape for an NHWC input and HWIO filter (after checks)."""
    _nhwc(attrs)
    sh, sw = _four(attrs, "strides")
    dh, dw = _four(attrs, "dilations", (1, 1, 1, 1))
    padding = _padding(attrs)
    n, h, w, c = x_shape
    kh, kw, ci, co = f_shape
    if not _agree(c, ci):
        raise ShapeError(f"input channels differ: input {tuple(x_shape)} has {c}, "
                         f"filter {tuple(f_shape)} (HWIO) takes {ci}")
    try:
        ho = conv_output_size(h, kh, sh, padding, dh)
        wo = conv_output_size(w, kw, sw, padding, dw)
    except ShapeError as e:
        raise ShapeError(f"filter {tuple(f_shape)} on input {tuple(x_shape)}: {e}") from None
    return (n, ho, wo, co)


def _conv_specs(ins, what=("input", "filter")):
    for spec, name in zip(ins, what):
        _check_rank(spec, 4, f"{name} ({'HWIO' if name == 'filter' else 'NHWC'})")
        _float(spec, name)
    return same_dtype(ins)


def infer_conv2d(ins, attrs):
    dtype = _conv_specs(ins)
    return [TensorSpec(dtype, _conv_out(ins[0].shape, ins[1].shape, attrs))]


def _sizes(attrs, key: str) -> tuple:
    value = attrs.get(key)
    if value is None or len(tuple(value)) != 4:
        raise ShapeError(f"needs the attr {key!r}, a 4-element shape, got {value!r}")
    value = tuple(None if d is None or d == -1 else int(d) for d in value)
    if any(d is not None and d < 1 for d in value):
        raise ShapeError(f"{key} {value} must hold positive sizes")
    return value


def _check_backprop(x_shape, f_shape, dy: TensorSpec, attrs) -> None:
    expected = _conv_out(x_shape, f_shape, attrs)
    if not all(_agree(a, b) for a, b in zip(expected, dy.shape)):
        raise ShapeError(f"out_backprop {dy.shape} is not the shape {expected} of the Conv2D "
                         f"of an input {tuple(x_shape)} with a filter {tuple(f_shape)}")


def infer_conv2d_backprop_input(ins, attrs):
    f, dy = ins
    dtype = _conv_specs(ins, ("filter", "out_backprop"))
    sizes = _sizes(attrs, "input_sizes")
    if sizes[3] is None or any(d is None for d in sizes[1:3]):
        raise ShapeError(f"input_sizes {sizes}: only the batch may be unknown")
    shape = (_either(sizes[0], dy.shape[0]),) + sizes[1:]
    _check_backprop(shape, f.shape, dy, attrs)
    return [TensorSpec(dtype, shape)]


def infer_conv2d_backprop_filter(ins, attrs):
    x, dy = ins
    dtype = _conv_specs(ins, ("input", "out_backprop"))
    sizes = _sizes(attrs, "filter_sizes")
    if any(d is None for d in sizes):
        raise ShapeError(f"filter_sizes {sizes} must be fully known")
    _check_backprop(x.shape, sizes, dy, attrs)
    return [TensorSpec(dtype, sizes)]


def _conv_flops(n, ho, wo, f_shape) -> float:
    kh, kw, ci, co = known_shape(f_shape)
    n, ho, wo = known_shape((n, ho, wo))
    return 2.0 * n * ho * wo * co * kh * kw * ci


def flops_conv2d(ins, outs, attrs):
    n, ho, wo, _ = outs[0].shape
    return _conv_flops(n, ho, wo, ins[1].shape)


def flops_conv2d_backprop_input(ins, outs, attrs):
    n, ho, wo, _ = ins[1].shape
    return _conv_flops(n, ho, wo, ins[0].shape)


def flops_conv2d_backprop_filter(ins, outs, attrs):
    n, ho, wo, _ = ins[1].shape
    return _conv_flops(n, ho, wo, outs[0].shape)


def _window_copies(x_shape, f_shape, dy_shape, attrs) -> tuple[int, int]:
    """``(taps, elements)`` of a convolution whose CPU kernel gathers each output
    pixel's window into a row of a matrix (im2col; col2im scatters it back): one copy
    per (output pixel, filter tap), of the input's channels.  A 1x1 window at stride
    1 copies nothing (its input's rows are the matrix already)."""
    kh, kw = known_shape(f_shape)[:2]
    sh, sw = _four(attrs, "strides")
    if kh == kw == 1 and sh == sw == 1:
        return 0, 0
    n, ho, wo = known_shape(tuple(dy_shape)[:3])
    taps = n * ho * wo * kh * kw
    return taps, taps * known_shape((tuple(x_shape)[3],))[0]


def window_copies_conv2d(ins, outs, attrs):
    """Conv2D's window copies (:func:`_window_copies`): im2col of its input."""
    return _window_copies(ins[0].shape, ins[1].shape, outs[0].shape, attrs)


def window_copies_conv2d_backprop_input(ins, outs, attrs):
    """Conv2DBackpropInput's window copies: col2im of the gradient's rows into dx."""
    return _window_copies(outs[0].shape, ins[0].shape, ins[1].shape, attrs)


def window_copies_conv2d_backprop_filter(ins, outs, attrs):
    """Conv2DBackpropFilter's window copies: im2col of its input."""
    return _window_copies(ins[0].shape, outs[0].shape, ins[1].shape, attrs)


# --- pooling ----------------------------------------------------------------------------

def _pool_out(x_shape, attrs) -> tuple:
    _nhwc(attrs)
    kh, kw = _four(attrs, "ksize")
    sh, sw = _four(attrs, "strides")
    padding = _padding(attrs)
    n, h, w, c = x_shape
    try:
        ho = conv_output_size(h, kh, sh, padding)
        wo = conv_output_size(w, kw, sw, padding)
    except ShapeError as e:
        raise ShapeError(f"ksize {tuple(attrs['ksize'])} on input {tuple(x_shape)}: {e}") from None
    return (n, ho, wo, c)


def infer_pool(ins, attrs):
    x = ins[0]
    _check_rank(x, 4, "input (NHWC)")
    _float(x, "input")
    return [TensorSpec(x.dtype, _pool_out(x.shape, attrs))]


def infer_max_pool_grad(ins, attrs):
    x, y, g = ins
    dtype = same_dtype(ins)
    for spec, name in zip(ins, ("orig_input", "orig_output", "grad")):
        _check_rank(spec, 4, f"{name} (NHWC)")
        _float(spec, name)
    expected = _pool_out(x.shape, attrs)
    for spec, name in ((y, "orig_output"), (g, "grad")):
        if not all(_agree(a, b) for a, b in zip(expected, spec.shape)):
            raise ShapeError(f"{name} {spec.shape} is not the shape {expected} of the MaxPool "
                             f"of orig_input {x.shape}")
    return [TensorSpec(dtype, x.shape)]


def infer_avg_pool_grad(ins, attrs):
    g = ins[0]
    _check_rank(g, 4, "grad (NHWC)")
    _float(g, "grad")
    sizes = _sizes(attrs, "orig_input_shape")
    if any(d is None for d in sizes[1:]):
        raise ShapeError(f"orig_input_shape {sizes}: only the batch may be unknown")
    shape = (_either(sizes[0], g.shape[0]),) + sizes[1:]
    expected = _pool_out(shape, attrs)
    if not all(_agree(a, b) for a, b in zip(expected, g.shape)):
        raise ShapeError(f"grad {g.shape} is not the shape {expected} of the AvgPool of an "
                         f"input {shape}")
    return [TensorSpec(g.dtype, shape)]


def _window_flops(x_shape, attrs) -> float:
    kh, kw = _four(attrs, "ksize")
    return float(num_elements(known_shape(x_shape)) * kh * kw)


def flops_pool(ins, outs, attrs):
    return _window_flops(outs[0].shape, attrs)


def flops_pool_grad(ins, outs, attrs):
    return _window_flops(ins[-1].shape, attrs)


# --- bias ------------------------------------------------------------------------------

def infer_bias_add(ins, attrs):
    _nhwc(attrs)
    value, bias = ins
    dtype = same_dtype(ins)
    if len(value.shape) < 2:
        raise ShapeError(f"value must have rank 2 or more, got shape {value.shape}")
    _check_rank(bias, 1, "bias")
    if not _agree(value.shape[-1], bias.shape[0]):
        raise ShapeError(f"bias {bias.shape} does not match the last dimension of value "
                         f"{value.shape}")
    shape = value.shape[:-1] + (_either(value.shape[-1], bias.shape[0]),)
    return [TensorSpec(dtype, shape)]


def infer_bias_add_grad(ins, attrs):
    _nhwc(attrs)
    g = ins[0]
    if len(g.shape) < 2:
        raise ShapeError(f"out_backprop must have rank 2 or more, got shape {g.shape}")
    return [TensorSpec(g.dtype, (g.shape[-1],))]


# --- batch normalisation ------------------------------------------------------------------

def _channel_params(ins: Sequence[TensorSpec], names, c, allow_empty=()) -> None:
    for spec, name in zip(ins, names):
        _check_rank(spec, 1, name)
        size = spec.shape[0]
        if name in allow_empty and size == 0:
            continue
        if not _agree(size, c):
            raise ShapeError(f"{name} {spec.shape} does not match the {c} channels of x")


def infer_fused_batch_norm(ins, attrs):
    _nhwc(attrs)
    x = ins[0]
    _check_rank(x, 4, "x (NHWC)")
    _float(x, "x")
    dtype = same_dtype(ins)
    c = x.shape[3]
    # In training with exponential_avg_factor 1, TF lets mean and variance be empty.
    training = bool(attrs.get("is_training", True))
    _channel_params(ins[1:], ("scale", "offset", "mean", "variance"), c,
                    ("mean", "variance") if training else ())
    channel = TensorSpec(dtype, (c,))
    return [TensorSpec(dtype, x.shape), channel, channel, channel, channel,
            TensorSpec(dtype, (0,))]


def infer_fused_batch_norm_grad(ins, attrs):
    _nhwc(attrs)
    dy, x = ins[0], ins[1]
    for spec, name in ((dy, "y_backprop"), (x, "x")):
        _check_rank(spec, 4, f"{name} (NHWC)")
        _float(spec, name)
    dtype = same_dtype(ins[:5])
    if not all(_agree(a, b) for a, b in zip(dy.shape, x.shape)):
        raise ShapeError(f"y_backprop {dy.shape} and x {x.shape} differ")
    c = _either(x.shape[3], dy.shape[3])
    _channel_params(ins[2:5], ("scale", "reserve_space_1", "reserve_space_2"), c)
    channel = TensorSpec(dtype, (c,))
    return [TensorSpec(dtype, x.shape), channel, channel, TensorSpec(dtype, (0,)),
            TensorSpec(dtype, (0,))]


# --- embedding lookup --------------------------------------------------------------------

def _axis(attrs, rank: int) -> int:
    axis = attrs.get("axis", 0)
    if not isinstance(axis, int) or not -rank <= axis < rank:
        raise ShapeError(f"axis {axis!r} is out of range for params of rank {rank}")
    if attrs.get("batch_dims", 0) != 0:
        raise ShapeError(f"batch_dims {attrs['batch_dims']} is not supported (only 0)")
    return axis % rank


def infer_gather(ins, attrs):
    params, indices = ins
    if not params.shape:
        raise ShapeError("params must have rank 1 or more, got a scalar")
    _index(indices, "indices")
    axis = _axis(attrs, len(params.shape))
    shape = params.shape[:axis] + tuple(indices.shape) + params.shape[axis + 1:]
    return [TensorSpec(params.dtype, shape)]


def infer_unsorted_segment_sum(ins, attrs):
    data, ids = ins
    _index(ids, "segment_ids")
    segments = attrs.get("num_segments")
    if not isinstance(segments, int) or segments < 0:
        raise ShapeError(f"num_segments must be a non-negative int, got {segments!r}")
    rank = len(ids.shape)
    if len(data.shape) < rank or not all(_agree(a, b) for a, b in zip(data.shape, ids.shape)):
        raise ShapeError(f"segment_ids {ids.shape} must be a prefix of data's shape {data.shape}")
    return [TensorSpec(data.dtype, (segments,) + data.shape[rank:])]


class GatherDef(OpDef):
    """GatherV2 reads the rows it gathers, not the whole table: an embedding lookup of
    a few ids costs a few rows of memory traffic, however large the vocabulary."""

    def bytes_read(self, inputs, attrs):
        params, indices = inputs
        axis = _axis(attrs, len(params.shape))
        rows = num_elements(known_shape(indices.shape))
        row = num_elements(known_shape(params.shape[:axis] + params.shape[axis + 1:]))
        return rows * row * params.dtype.itemsize + nbytes(
            TensorSpec(indices.dtype, known_shape(indices.shape)))


# --- losses -------------------------------------------------------------------------------

def infer_softmax_xent(ins, attrs):
    features, labels = ins
    dtype = same_dtype(ins)
    _float(features, "features")
    _check_rank(features, 2, "features ([batch, classes])")
    _check_rank(labels, 2, "labels ([batch, classes])")
    if not all(_agree(a, b) for a, b in zip(features.shape, labels.shape)):
        raise ShapeError(f"features {features.shape} and labels {labels.shape} differ")
    b, c = (_either(a, b) for a, b in zip(features.shape, labels.shape))
    return [TensorSpec(dtype, (b,)), TensorSpec(dtype, (b, c))]


def infer_sparse_softmax_xent(ins, attrs):
    features, labels = ins
    _float(features, "features")
    _check_rank(features, 2, "features ([batch, classes])")
    _index(labels, "labels")
    _check_rank(labels, 1, "labels ([batch])")
    if not _agree(features.shape[0], labels.shape[0]):
        raise ShapeError(f"features {features.shape} and labels {labels.shape} differ in batch")
    b = _either(features.shape[0], labels.shape[0])
    return [TensorSpec(features.dtype, (b,)), TensorSpec(features.dtype, (b, features.shape[1]))]


def infer_log_softmax(ins, attrs):
    x = ins[0]
    _float(x, "logits")
    if not x.shape:
        raise ShapeError("logits must have rank 1 or more, got a scalar")
    return [TensorSpec(x.dtype, x.shape)]


def _per_input(k: float, index: int = 0):
    def flops(ins, outs, attrs):
        return k * num_elements(known_shape(ins[index].shape))
    return flops


def _per_output(k: float, index: int = 0):
    def flops(ins, outs, attrs):
        return k * num_elements(known_shape(outs[index].shape))
    return flops


INDEXED = NUMERIC  # the gathered/summed values' dtypes (indices: int32 or int64, as TF)


def _kernels(dtypes):
    """CPU and GPU kernels for ``dtypes`` (the op's first output's dtype)."""
    return kernels_for(dtypes, dtypes)

NN_OPS: dict[str, OpDef] = table(
    OpDef("Conv2D", infer_conv2d, flops_conv2d, kernels=_kernels(FLOAT),
          multithreaded=True, window_copies=window_copies_conv2d, gradient=_grad("conv2d_grad"),
          min_inputs=2, max_inputs=2),
    OpDef("Conv2DBackpropInput", infer_conv2d_backprop_input, flops_conv2d_backprop_input,
          kernels=_kernels(FLOAT), multithreaded=True,
          window_copies=window_copies_conv2d_backprop_input,
          const_inputs=((0, "input_sizes"),), gradient=_grad("conv2d_backprop_input_grad"),
          min_inputs=2, max_inputs=2),
    OpDef("Conv2DBackpropFilter", infer_conv2d_backprop_filter, flops_conv2d_backprop_filter,
          kernels=_kernels(FLOAT), multithreaded=True,
          window_copies=window_copies_conv2d_backprop_filter,
          const_inputs=((1, "filter_sizes"),), gradient=_grad("conv2d_backprop_filter_grad"),
          min_inputs=2, max_inputs=2),
    OpDef("MaxPool", infer_pool, flops_pool, kernels=_kernels(FLOAT),
          multithreaded=True, gradient=_grad("max_pool_grad"), min_inputs=1, max_inputs=1),
    OpDef("MaxPoolGrad", infer_max_pool_grad, flops_pool_grad, kernels=_kernels(FLOAT),
          multithreaded=True, min_inputs=3, max_inputs=3),
    OpDef("AvgPool", infer_pool, flops_pool, kernels=_kernels(FLOAT),
          multithreaded=True, gradient=_grad("avg_pool_grad"), min_inputs=1, max_inputs=1),
    OpDef("AvgPoolGrad", infer_avg_pool_grad, flops_pool_grad, kernels=_kernels(FLOAT),
          multithreaded=True, const_inputs=((0, "orig_input_shape"),),
          gradient=_grad("avg_pool_grad_grad"), min_inputs=1, max_inputs=1),
    OpDef("BiasAdd", infer_bias_add, _per_output(1), kernels=_kernels(NUMERIC),
          multithreaded=True, gradient=_grad("bias_add_grad"), min_inputs=2, max_inputs=2),
    OpDef("BiasAddGrad", infer_bias_add_grad, _per_input(1), kernels=_kernels(NUMERIC),
          multithreaded=True, gradient=_grad("bias_add_grad_grad"), min_inputs=1, max_inputs=1),
    OpDef("FusedBatchNormV3", infer_fused_batch_norm, _per_input(8),
          kernels=_kernels(FLOAT), multithreaded=True,
          gradient=_grad("fused_batch_norm_grad"), min_inputs=5, max_inputs=5),
    OpDef("FusedBatchNormGradV3", infer_fused_batch_norm_grad, _per_input(10),
          kernels=_kernels(FLOAT), multithreaded=True, min_inputs=6, max_inputs=6),
    GatherDef("GatherV2", infer_gather, kernels=_kernels(INDEXED),
              multithreaded=True, const_inputs=((2, "axis"),), gradient=_grad("gather_grad"),
              min_inputs=2, max_inputs=2),
    OpDef("UnsortedSegmentSum", infer_unsorted_segment_sum, _per_input(1),
          kernels=_kernels(INDEXED), multithreaded=True,
          const_inputs=((2, "num_segments"),), gradient=_grad("unsorted_segment_sum_grad"),
          min_inputs=2, max_inputs=2),
    OpDef("SoftmaxCrossEntropyWithLogits", infer_softmax_xent, _per_input(6),
          kernels=_kernels(FLOAT), multithreaded=True,
          gradient=_grad("softmax_xent_grad"), min_inputs=2, max_inputs=2),
    OpDef("SparseSoftmaxCrossEntropyWithLogits", infer_sparse_softmax_xent, _per_input(5),
          kernels=_kernels(FLOAT), multithreaded=True,
          gradient=_grad("sparse_softmax_xent_grad"), min_inputs=2, max_inputs=2),
    OpDef("LogSoftmax", infer_log_softmax, _per_input(5), kernels=_kernels(FLOAT),
          multithreaded=True, gradient=_grad("log_softmax_grad"), min_inputs=1, max_inputs=1),
)
