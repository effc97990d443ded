"""Gradient functions of the nn op family (:mod:`core.ops_nn`), as TensorFlow defines them.

Each is ``<name>(op, grads) -> [grad of each input]`` (None for an input that gets
none, or when no gradient reaches the op's outputs), found through
``lazy_gradient(name, "core.grads_nn")`` in the op table.  They build ops with the graph
machinery, so this module is imported only when :func:`core.autodiff.gradients` first
differentiates one of these ops.

>>> import numpy as np
>>> import core as tf
>>> g = tf.Graph()
>>> with g.as_default():
...     x = tf.placeholder(tf.float32, (None, 8, 8, 3))
...     w = tf.Variable(np.ones((3, 3, 3, 4), np.float32))
...     y = tf.nn.conv2d(x, w, strides=[1, 2, 2, 1], padding="SAME")
...     dx, dw = tf.gradients(tf.reduce_sum(y), [x, w])
>>> dx.op.type, dx.shape, dw.op.type, dw.shape
('Conv2DBackpropInput', (None, 8, 8, 3), 'Conv2DBackpropFilter', (3, 3, 3, 4))
"""

from __future__ import annotations

from core import builders as b
from core.graph import GraphError, Operation, Tensor

__all__: list[str] = []

_CONV_ATTRS = ("strides", "padding", "dilations", "data_format")
_POOL_ATTRS = ("ksize", "strides", "padding", "data_format")


def _attrs(op: Operation, keys) -> dict:
    return {k: op.attrs[k] for k in keys if k in op.attrs}


def _create(op: Operation, op_type: str, inputs, attrs, outputs: int | None = 0):
    """Create ``op_type`` in ``op``'s graph; its output ``outputs`` (all when None)."""
    new = op.graph.create_op(op_type, list(inputs), attrs, name=op_type)
    return new.outputs if outputs is None else new.outputs[outputs]


def _sizes(t: Tensor) -> tuple:
    return tuple(t.shape)


def conv2d_grad(op, grads):
    """dx = Conv2DBackpropInput(filter, g), dfilter = Conv2DBackpropFilter(x, g)."""
    x, f = op.inputs
    g = grads[0]
    attrs = _attrs(op, _CONV_ATTRS)
    dx = _create(op, "Conv2DBackpropInput", [f, g], dict(attrs, input_sizes=_sizes(x)))
    df = _create(op, "Conv2DBackpropFilter", [x, g], dict(attrs, filter_sizes=_sizes(f)))
    return [dx, df]


def conv2d_backprop_input_grad(op, grads):
    """Conv2DBackpropInput(f, dy) is linear in each: its gradients are a backprop to the
    filter and a forward convolution (TensorFlow's ``_Conv2DBackpropInputGrad``)."""
    f, dy = op.inputs
    g = grads[0]
    attrs = _attrs(op, _CONV_ATTRS)
    df = _create(op, "Conv2DBackpropFilter", [g, dy], dict(attrs, filter_sizes=_sizes(f)))
    ddy = _create(op, "Conv2D", [g, f], attrs)
    return [df, ddy]


def conv2d_backprop_filter_grad(op, grads):
    """Conv2DBackpropFilter(x, dy): to x a backprop to the input, to dy a convolution."""
    x, dy = op.inputs
    g = grads[0]
    attrs = _attrs(op, _CONV_ATTRS)
    dx = _create(op, "Conv2DBackpropInput", [g, dy], dict(attrs, input_sizes=_sizes(x)))
    ddy = _create(op, "Conv2D", [x, g], attrs)
    return [dx, ddy]


def max_pool_grad(op, grads):
    return [_create(op, "MaxPoolGrad", [op.inputs[0], op.outputs[0], grads[0]],
                    _attrs(op, _POOL_ATTRS))]


def avg_pool_grad(op, grads):
    attrs = dict(_attrs(op, _POOL_ATTRS), orig_input_shape=_sizes(op.inputs[0]))
    return [_create(op, "AvgPoolGrad", [grads[0]], attrs)]


def avg_pool_grad_grad(op, grads):
    """AvgPoolGrad is linear and the adjoint of AvgPool: its gradient is an AvgPool."""
    return [_create(op, "AvgPool", [grads[0]], _attrs(op, _POOL_ATTRS))]


def bias_add_grad(op, grads):
    g = grads[0]
    return [g, _create(op, "BiasAddGrad", [g], _attrs(op, ("data_format",)))]


def bias_add_grad_grad(op, grads):
    """The bias's gradient spread back over every row of out_backprop."""
    x = op.inputs[0]
    gg = grads[0]
    if all(d is not None for d in x.shape):
        return [b.broadcast_to(gg, x.shape)]
    # Unknown rows: add the bias to zeros of x's run-time shape.
    return [_create(op, "BiasAdd", [_create(op, "ZerosLike", [x], {}), gg], {})]


def fused_batch_norm_grad(op, grads):
    """FusedBatchNormGradV3 on the batch statistics kept in the reserve spaces (training)
    or on the population statistics given (inference); only y's gradient counts, as in
    TensorFlow's ``_FusedBatchNormV3Grad``."""
    dy = grads[0]
    if dy is None:
        return [None] * 5
    x, scale, _, mean, variance = op.inputs
    training = bool(op.attrs.get("is_training", True))
    if training:
        stats = [op.outputs[3], op.outputs[4]]
    else:
        stats = [mean, variance]
    attrs = {"epsilon": float(op.attrs.get("epsilon", 1e-4)), "is_training": training,
             "data_format": op.attrs.get("data_format", "NHWC")}
    outs = _create(op, "FusedBatchNormGradV3", [dy, x, scale] + stats + [op.outputs[5]], attrs,
                   outputs=None)
    return [outs[0], outs[1], outs[2], None, None]


def gather_grad(op, grads):
    """GatherV2's gradient as a dense UnsortedSegmentSum of the gathered rows' gradients
    into the table (TensorFlow returns IndexedSlices, the same values kept sparse)."""
    params, indices = op.inputs
    g = grads[0]
    rank = len(params.shape)
    axis = op.attrs.get("axis", 0) % rank
    rows = params.shape[axis]
    if rows is None:
        raise GraphError(f"GatherV2 op {op.name!r}: the gradient needs params' size along "
                         f"axis {axis}, unknown in {params.shape}")
    if axis == 0:
        return [_create(op, "UnsortedSegmentSum", [g, indices], {"num_segments": rows}), None]
    # Bring the index axes first, sum into rows, then put the rows back at ``axis``.
    r = len(indices.shape)
    to_front = (tuple(range(axis, axis + r)) + tuple(range(axis))
                + tuple(range(axis + r, len(g.shape))))
    summed = _create(op, "UnsortedSegmentSum", [b.transpose(g, to_front), indices],
                     {"num_segments": rows})
    back = tuple(range(1, axis + 1)) + (0,) + tuple(range(axis + 1, rank))
    return [b.transpose(summed, back), None]


def unsorted_segment_sum_grad(op, grads):
    """Each data row gets its segment's gradient: a gather (segment ids must then be
    non-negative; the GatherV2 kernel rejects a negative one)."""
    return [_create(op, "GatherV2", [grads[0], op.inputs[1]], {"axis": 0}), None]


def _column(t: Tensor) -> Tensor:
    """A per-row value as a column, ``[batch] -> [batch, 1]`` (batch may be unknown)."""
    return b.reshape(t, (-1, 1))


def _softmax_second_order(op, g_backprop):
    """The gradient reaching ``backprop = softmax(features) - labels`` (TensorFlow's
    second-order term): SoftmaxGrad(softmax(features), g)."""
    softmax = _create(op, "Softmax", [op.inputs[0]], {})
    return _create(op, "SoftmaxGrad", [softmax, g_backprop], {})


def softmax_xent_grad(op, grads):
    """d features = g_loss * (softmax - labels); d labels = -g_loss * log_softmax(features)
    (plus the terms of a gradient reaching the backprop output)."""
    g_loss, g_backprop = grads
    features = op.inputs[0]
    d_features = d_labels = None
    if g_loss is not None:
        column = _column(g_loss)
        d_features = b.multiply(column, op.outputs[1])
        log_softmax = _create(op, "LogSoftmax", [features], {})
        d_labels = b.multiply(column, b.negative(log_softmax))
    if g_backprop is not None:
        second = _softmax_second_order(op, g_backprop)
        d_features = second if d_features is None else b.add(d_features, second)
        minus = b.negative(g_backprop)
        d_labels = minus if d_labels is None else b.add(d_labels, minus)
    return [d_features, d_labels]


def sparse_softmax_xent_grad(op, grads):
    """d features = g_loss * (softmax - onehot(labels)); integer labels get none."""
    g_loss, g_backprop = grads
    d_features = None
    if g_loss is not None:
        d_features = b.multiply(_column(g_loss), op.outputs[1])
    if g_backprop is not None:
        second = _softmax_second_order(op, g_backprop)
        d_features = second if d_features is None else b.add(d_features, second)
    return [d_features, None]


def log_softmax_grad(op, grads):
    """dx = g - sum(g, -1) * softmax(x)."""
    g = grads[0]
    softmax = _create(op, "Softmax", [op.inputs[0]], {})
    total = b.reduce_sum(g, axis=-1, keepdims=True)
    return [b.subtract(g, b.multiply(total, softmax))]
