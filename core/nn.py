"""``tf.nn`` of TensorFlow 1.x (``tf.compat.v1.nn``): builders of the nn op family.

Each builder adds ops to the graph of its inputs (the default graph for plain values),
with TensorFlow's signature, op types and defaults; images are NHWC.  ``import core as
tf`` then reads as TF 1.x code: ``tf.nn.conv2d(x, w, strides=[1, 1, 1, 1],
padding="SAME")``.

>>> import numpy as np
>>> import core as tf
>>> g = tf.Graph()
>>> with g.as_default():
...     x = tf.placeholder(tf.float32, (None, 28, 28, 1))
...     w = tf.Variable(np.zeros((5, 5, 1, 32), np.float32))
...     h = tf.nn.relu(tf.nn.conv2d(x, w, strides=[1, 1, 1, 1], padding="SAME"))
...     p = tf.nn.max_pool(h, ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding="VALID")
>>> p.shape
(None, 14, 14, 32)
"""

from __future__ import annotations

import numbers

import numpy as np

from core import builders as b
from core.builders import Variable, convert_to_tensor, relu, sigmoid, tanh
from core.builders_math import (batch_normalization, layer_normalization, moments,
                                stop_gradient)
from core.graph import Tensor

__all__ = ["conv2d", "max_pool2d", "max_pool", "avg_pool2d", "avg_pool", "bias_add",
           "fused_batch_norm", "embedding_lookup", "softmax_cross_entropy_with_logits",
           "softmax_cross_entropy_with_logits_v2", "sparse_softmax_cross_entropy_with_logits",
           "relu", "softmax", "log_softmax", "sigmoid", "tanh", "moments",
           "batch_normalization", "layer_normalization"]


def _create(op_type: str, inputs, attrs: dict, name: str | None, default: str):
    tensors = [convert_to_tensor(x) for x in inputs]
    g = tensors[0].graph
    return g.create_op(op_type, tensors, attrs, name=name or default)


def _four(value, what: str) -> tuple[int, int, int, int]:
    """TensorFlow's spellings of an NHWC window attr: an int, ``[h, w]`` or
    ``[1, h, w, 1]``."""
    if isinstance(value, numbers.Integral):
        return (1, int(value), int(value), 1)
    value = tuple(int(v) for v in value)
    if len(value) == 1:
        return (1, value[0], value[0], 1)
    if len(value) == 2:
        return (1,) + value + (1,)
    if len(value) == 4:
        return value
    raise ValueError(f"{what} must be an int or a list of 1, 2 or 4 ints, got {list(value)}")


def _padding(padding) -> str:
    if isinstance(padding, str) and padding.upper() in ("SAME", "VALID"):
        return padding.upper()
    raise ValueError(f"padding must be 'SAME' or 'VALID' (explicit paddings are not "
                     f"supported), got {padding!r}")


def conv2d(input, filter=None, strides=None, padding=None, use_cudnn_on_gpu=True,  # noqa: A002
           data_format="NHWC", dilations=(1, 1, 1, 1), name=None, filters=None) -> Tensor:
    """A 2-D convolution (op ``Conv2D``): ``input`` NHWC, ``filter`` HWIO
    ``[height, width, in_channels, out_channels]``.

    >>> import core as tf
    >>> with tf.Graph().as_default():
    ...     x = tf.placeholder(tf.float32, (8, 32, 32, 3))
    ...     w = tf.placeholder(tf.float32, (3, 3, 3, 16))
    ...     conv2d(x, w, strides=2, padding="VALID").shape
    (8, 15, 15, 16)
    """
    filter = filters if filter is None else filter  # noqa: A001 (TensorFlow's name)
    if filter is None or strides is None or padding is None:
        raise ValueError("conv2d() needs filter, strides and padding")
    attrs = {"strides": _four(strides, "strides"), "padding": _padding(padding),
             "data_format": data_format, "dilations": _four(dilations, "dilations")}
    return _create("Conv2D", [input, filter], attrs, name, "Conv2D").outputs[0]


def _pool(op_type, value, ksize, strides, padding, data_format, name):
    attrs = {"ksize": _four(ksize, "ksize"), "strides": _four(strides, "strides"),
             "padding": _padding(padding), "data_format": data_format}
    return _create(op_type, [value], attrs, name, op_type).outputs[0]


def max_pool2d(input, ksize, strides, padding, data_format="NHWC", name=None) -> Tensor:  # noqa: A002
    """Max pooling (op ``MaxPool``); ``ksize`` and ``strides`` an int, ``[h, w]`` or
    ``[1, h, w, 1]``.  SAME padding never takes a padded value.

    >>> import core as tf
    >>> with tf.Graph().as_default():
    ...     max_pool2d(tf.placeholder(tf.float32, (1, 5, 5, 2)), 3, 2, "SAME").shape
    (1, 3, 3, 2)
    """
    return _pool("MaxPool", input, ksize, strides, padding, data_format, name)


def max_pool(value=None, ksize=None, strides=None, padding=None, data_format="NHWC", name=None,
             input=None) -> Tensor:  # noqa: A002
    """TensorFlow 1.x's ``tf.nn.max_pool`` (``value`` or ``input``); see :func:`max_pool2d`."""
    return max_pool2d(input if value is None else value, ksize, strides, padding, data_format,
                      name)


def avg_pool2d(input, ksize, strides, padding, data_format="NHWC", name=None) -> Tensor:  # noqa: A002
    """Average pooling (op ``AvgPool``); with SAME padding each window averages only the
    input values it covers, as TensorFlow's.

    >>> import core as tf
    >>> with tf.Graph().as_default():
    ...     avg_pool2d(tf.placeholder(tf.float32, (1, 4, 4, 2)), 2, 2, "VALID").shape
    (1, 2, 2, 2)
    """
    return _pool("AvgPool", input, ksize, strides, padding, data_format, name)


def avg_pool(value=None, ksize=None, strides=None, padding=None, data_format="NHWC", name=None,
             input=None) -> Tensor:  # noqa: A002
    """TensorFlow 1.x's ``tf.nn.avg_pool`` (``value`` or ``input``); see :func:`avg_pool2d`."""
    return avg_pool2d(input if value is None else value, ksize, strides, padding, data_format,
                      name)


def bias_add(value, bias, data_format=None, name=None) -> Tensor:
    """``value + bias`` along the last axis (op ``BiasAdd``; ``bias`` is 1-D).

    >>> import core as tf
    >>> with tf.Graph().as_default():
    ...     bias_add(tf.placeholder(tf.float32, (None, 4)), [1.0, 2.0, 3.0, 4.0]).shape
    (None, 4)
    """
    value = convert_to_tensor(value)
    bias = convert_to_tensor(bias, dtype=None if isinstance(bias, (Tensor, Variable))
                             else value.dtype)
    return _create("BiasAdd", [value, bias], {"data_format": data_format or "NHWC"}, name,
                   "BiasAdd").outputs[0]


#: TensorFlow's ``fused_batch_norm`` raises a smaller epsilon to this (cuDNN's minimum).
MIN_EPSILON = 1.001e-5


def fused_batch_norm(x, scale, offset=None, mean=None, variance=None, epsilon=0.001,
                     data_format="NHWC", is_training=True, name=None,
                     exponential_avg_factor=1.0) -> tuple[Tensor, Tensor, Tensor]:
    """Batch normalisation in one op (``FusedBatchNormV3``): ``(y, mean, variance)``.

    In training the batch's statistics normalise ``x``, and the mean and variance
    returned are the batch's (the variance Bessel-corrected), blended with ``mean`` and
    ``variance`` by ``exponential_avg_factor`` when it is below 1; in inference ``mean``
    and ``variance`` (required) normalise and come back unchanged.  ``offset`` defaults to
    zeros.  ``epsilon`` is raised to :data:`MIN_EPSILON` as TensorFlow's is.

    >>> import core as tf
    >>> with tf.Graph().as_default():
    ...     x = tf.placeholder(tf.float32, (None, 8, 8, 16))
    ...     y, m, v = fused_batch_norm(x, tf.constant(np.ones(16, np.float32)))
    >>> y.shape, m.shape, y.op.type
    ((None, 8, 8, 16), (16,), 'FusedBatchNormV3')
    """
    x = convert_to_tensor(x)
    channels = x.shape[-1] if x.shape else None
    dtype = x.dtype.np

    def _param(value, default_size, what):
        if value is not None:
            return convert_to_tensor(value, dtype_hint=x.dtype)
        if default_size is None:
            raise ValueError(f"fused_batch_norm() needs {what} when x's channels are unknown")
        return b.constant(np.zeros(default_size, dtype), name=what)

    if not is_training and (mean is None or variance is None):
        raise ValueError("fused_batch_norm(is_training=False) needs mean and variance")
    g = x.graph
    with g.name_scope(name or "FusedBatchNormV3") as scope:
        inputs = [x, convert_to_tensor(scale, dtype_hint=x.dtype),
                  _param(offset, channels, "offset"),
                  _param(mean, 0, "mean"), _param(variance, 0, "variance")]
        attrs = {"epsilon": float(max(epsilon, MIN_EPSILON)), "is_training": bool(is_training),
                 "exponential_avg_factor": float(exponential_avg_factor),
                 "data_format": data_format}
        op = g.create_op("FusedBatchNormV3", inputs, attrs, name=scope)
    return op.outputs[0], op.outputs[1], op.outputs[2]


def embedding_lookup(params, ids, partition_strategy="mod", name=None, validate_indices=True,
                     max_norm=None) -> Tensor:
    """The rows of ``params`` at ``ids`` (op ``GatherV2`` on axis 0): shape
    ``ids.shape + params.shape[1:]``.  Its gradient is dense (an ``UnsortedSegmentSum``).
    ``params`` is one tensor or variable (or a list of one); sharded tables and
    ``max_norm`` are not supported.

    >>> import core as tf
    >>> with tf.Graph().as_default():
    ...     table = tf.Variable(np.zeros((1000, 64), np.float32))
    ...     embedding_lookup(table, tf.placeholder(tf.int32, (None, 20))).shape
    (None, 20, 64)
    """
    if isinstance(params, (list, tuple)):
        if len(params) != 1:
            raise ValueError(f"embedding_lookup() over {len(params)} shards is not supported: "
                             "pass one table")
        params = params[0]
    if max_norm is not None:
        raise ValueError("embedding_lookup(max_norm=...) is not supported")
    params = convert_to_tensor(params)
    ids = convert_to_tensor(ids)
    return _create("GatherV2", [params, ids], {"axis": 0, "batch_dims": 0}, name,
                   "embedding_lookup").outputs[0]


def _flat_rows(t: Tensor, keep: int) -> tuple[Tensor, tuple | None]:
    """``t`` as rank ``keep + 1`` (leading axes merged) and its leading shape to restore
    (None when ``t`` already has that rank)."""
    if len(t.shape) == keep + 1:
        return t, None
    lead = tuple(t.shape[:len(t.shape) - keep])
    if sum(d is None for d in lead) > 1:
        raise ValueError(f"cannot flatten {t.shape}: more than one unknown leading dimension")
    tail = tuple(t.shape[len(t.shape) - keep:])
    if any(d is None for d in tail):
        raise ValueError(f"the class axis of {t.shape} must be known")
    return b.reshape(t, (-1,) + tail), lead


def _restore(loss: Tensor, lead: tuple | None) -> Tensor:
    if lead is None:
        return loss
    return b.reshape(loss, tuple(-1 if d is None else d for d in lead))


def softmax_cross_entropy_with_logits_v2(labels, logits, axis=-1, name=None, dim=None) -> Tensor:
    """Per-example ``-sum(labels * log_softmax(logits))`` (op
    ``SoftmaxCrossEntropyWithLogits``, whose gradient reaches ``labels`` too); the
    class axis is the last; leading axes beyond the batch are flattened and restored.

    >>> import core as tf
    >>> with tf.Graph().as_default():
    ...     logits = tf.placeholder(tf.float32, (None, 10))
    ...     softmax_cross_entropy_with_logits_v2(labels=tf.nn.softmax(logits), logits=logits).shape
    (None,)
    """
    axis = dim if dim is not None else axis
    logits = convert_to_tensor(logits)
    labels = convert_to_tensor(labels, dtype_hint=logits.dtype)
    if axis not in (-1, len(logits.shape) - 1):
        raise ValueError(f"softmax cross-entropy over axis {axis} of {logits.shape}: only the "
                         "last axis is supported")
    flat_logits, lead = _flat_rows(logits, 1)
    flat_labels, _ = _flat_rows(labels, 1)
    op = _create("SoftmaxCrossEntropyWithLogits", [flat_logits, flat_labels], {}, name,
                 "SoftmaxCrossEntropyWithLogits")
    return _restore(op.outputs[0], lead)


def softmax_cross_entropy_with_logits(_sentinel=None, labels=None, logits=None, dim=-1,
                                      name=None, axis=None) -> Tensor:
    """TensorFlow 1.x's keyword-only form of :func:`softmax_cross_entropy_with_logits_v2`,
    which, as TensorFlow 1.x's, passes no gradient to ``labels`` (a ``StopGradient``)."""
    if _sentinel is not None or labels is None or logits is None:
        raise ValueError("softmax_cross_entropy_with_logits() takes labels= and logits= "
                         "by keyword")
    logits = convert_to_tensor(logits)
    labels = stop_gradient(convert_to_tensor(labels, dtype_hint=logits.dtype))
    return softmax_cross_entropy_with_logits_v2(labels, logits, axis=dim if axis is None else axis,
                                                name=name)


def sparse_softmax_cross_entropy_with_logits(_sentinel=None, labels=None, logits=None,
                                             name=None) -> Tensor:
    """Per-example ``-log_softmax(logits)[label]`` for integer ``labels`` (op
    ``SparseSoftmaxCrossEntropyWithLogits``); ``labels`` has ``logits``' shape without
    its last axis.

    >>> import core as tf
    >>> with tf.Graph().as_default():
    ...     logits = tf.placeholder(tf.float32, (4, 7, 10))
    ...     labels = tf.placeholder(tf.int64, (4, 7))
    ...     sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits).shape
    (4, 7)
    """
    if _sentinel is not None or labels is None or logits is None:
        raise ValueError("sparse_softmax_cross_entropy_with_logits() takes labels= and "
                         "logits= by keyword")
    logits = convert_to_tensor(logits)
    labels = convert_to_tensor(labels)
    if len(labels.shape) != len(logits.shape) - 1:
        raise ValueError(f"labels {labels.shape} must have the rank of logits {logits.shape} "
                         "minus one")
    flat_logits, lead = _flat_rows(logits, 1)
    flat_labels, _ = _flat_rows(labels, 0)
    op = _create("SparseSoftmaxCrossEntropyWithLogits", [flat_logits, flat_labels], {}, name,
                 "SparseSoftmaxCrossEntropyWithLogits")
    return _restore(op.outputs[0], lead)


def softmax(logits, axis=None, name=None, dim=None) -> Tensor:
    """Softmax over the last axis (op ``Softmax``)."""
    axis = dim if axis is None else axis
    logits = convert_to_tensor(logits)
    if axis not in (None, -1, len(logits.shape) - 1):
        raise ValueError(f"softmax over axis {axis} of {logits.shape}: only the last axis")
    return b.softmax(logits, name=name)


def log_softmax(logits, axis=None, name=None, dim=None) -> Tensor:
    """``logits - log(sum(exp(logits)))`` over the last axis (op ``LogSoftmax``).

    >>> import core as tf
    >>> with tf.Graph().as_default():
    ...     log_softmax(tf.constant([[1.0, 2.0]])).op.type
    'LogSoftmax'
    """
    axis = dim if axis is None else axis
    logits = convert_to_tensor(logits)
    if axis not in (None, -1, len(logits.shape) - 1):
        raise ValueError(f"log_softmax over axis {axis} of {logits.shape}: only the last axis")
    return _create("LogSoftmax", [logits], {}, name, "LogSoftmax").outputs[0]
