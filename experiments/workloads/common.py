"""What the literature's model builders share: variables that start from initializer ops,
synthetic input data kept in variables, the optimizer and the training step, option
checks, and the device functions of the expert placements.

A full-size model holds no weight arrays: each variable's initial value is a random or
constant-fill op (Keras' default initializers: Glorot-uniform kernels, zero biases, BN
scales of one), evaluated when the initializer runs.  Input images, tokens and labels are
*synthetic data* as tf_cnn_benchmarks makes it: drawn once by the initializer into
non-trainable variables, so every step sees the same batch (the loss can fall) and a
step reads its input from device memory.  The model's own variables are collected in
``model_variables`` (TensorFlow's ``GraphKeys.MODEL_VARIABLES``): the weights and the
BN moving statistics, not the optimizer's slots, the global step or the data.
"""

from __future__ import annotations

import math
import numbers
from typing import Callable, Iterable, Sequence

import numpy as np

import core as tf
from core.graph import Operation, Tensor
from experiments.workloads.mlp import MODEL_VARIABLES, Workload

__all__ = ["ModelBuilder", "check_options", "make_optimizer", "gpu_devices", "scope_device_fn",
           "OPTIMIZERS"]

#: Optimizer name -> (class, default keyword arguments besides the learning rate).
OPTIMIZERS = {
    "sgd": (lambda lr: tf.train.GradientDescentOptimizer(lr)),
    "momentum": (lambda lr: tf.train.MomentumOptimizer(lr, momentum=0.9)),
    "adam": (lambda lr: tf.train.AdamOptimizer(lr)),
}


def make_optimizer(name: str, learning_rate: float) -> tf.train.Optimizer:
    """``"sgd"``, ``"momentum"`` (0.9) or ``"adam"`` (TensorFlow's defaults)."""
    if name not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {sorted(OPTIMIZERS)}, not {name!r}")
    return OPTIMIZERS[name](learning_rate)


def check_options(**options) -> None:
    """Raise ValueError naming the first option that is not a positive integer.

    >>> check_options(batch=32, layers=0)
    Traceback (most recent call last):
    ...
    ValueError: layers must be a positive integer, not 0
    """
    for name, value in options.items():
        if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive integer, not {value!r}")


class ModelBuilder:
    """Creates a model's variables from initializer ops, with deterministic op seeds (one
    per variable, in creation order), and finishes the training step.

    >>> g = tf.Graph()
    >>> with g.as_default():
    ...     m = ModelBuilder(seed=1)
    ...     w = m.glorot("w", (3, 4), fan_in=3, fan_out=4)
    >>> w.initial_value.op.type, [v.op.name for v in g.get_collection("model_variables")]
    ('Add', ['w'])
    """

    def __init__(self, seed: int = 0, dtype=tf.float32):
        self.seed, self.dtype = seed, tf.as_dtype(dtype)
        self._count = 0

    def _next_seed(self) -> int:
        self._count += 1
        return self.seed * 100_003 + self._count

    def _variable(self, name: str, initial: Tensor, trainable: bool = True) -> tf.Variable:
        v = tf.Variable(initial, name=name, trainable=trainable)
        v.graph.add_to_collection(MODEL_VARIABLES, v)
        return v

    def glorot(self, name: str, shape: Sequence[int], fan_in: int, fan_out: int) -> tf.Variable:
        """A weight drawn from Glorot's uniform distribution (Keras' default kernel
        initializer): ``U(-l, l)`` with ``l = sqrt(6 / (fan_in + fan_out))``."""
        limit = math.sqrt(6.0 / (fan_in + fan_out))
        with tf.name_scope(name + "/Initializer"):
            init = tf.random_uniform(tuple(shape), -limit, limit, dtype=self.dtype,
                                     seed=self._next_seed())
        return self._variable(name, init)

    def uniform(self, name: str, shape: Sequence[int], limit: float) -> tf.Variable:
        """A weight drawn from ``U(-limit, limit)`` (the NMT models' initializer)."""
        with tf.name_scope(name + "/Initializer"):
            init = tf.random_uniform(tuple(shape), -limit, limit, dtype=self.dtype,
                                     seed=self._next_seed())
        return self._variable(name, init)

    def normal(self, name: str, shape: Sequence[int], stddev: float) -> tf.Variable:
        """A weight drawn from a truncated normal (embeddings, Transformer projections)."""
        with tf.name_scope(name + "/Initializer"):
            init = tf.truncated_normal(tuple(shape), stddev=stddev, dtype=self.dtype,
                                       seed=self._next_seed())
        return self._variable(name, init)

    def filled(self, name: str, shape: Sequence[int], value: float,
               trainable: bool = True) -> tf.Variable:
        """A variable of one value (biases, BN offsets and scales, moving statistics)."""
        with tf.name_scope(name + "/Initializer"):
            init = tf.fill(tuple(shape), tf.constant(value, dtype=self.dtype))
        return self._variable(name, init, trainable)

    def data(self, name: str, shape: Sequence[int], low: float = -1.0, high: float = 1.0) -> Tensor:
        """Synthetic float input: uniform in ``[low, high)``, drawn once into a
        non-trainable variable (not a model variable); the value of its read."""
        with tf.name_scope(name + "/Initializer"):
            init = tf.random_uniform(tuple(shape), low, high, dtype=self.dtype,
                                     seed=self._next_seed())
        return tf.Variable(init, name=name, trainable=False).value()

    def labels(self, name: str, shape: Sequence[int], classes: int) -> Tensor:
        """Synthetic integer labels in ``[0, classes)`` (a small int32 constant: labels
        are a few bytes per example, and int32 has no random op in the table)."""
        rng = np.random.default_rng(self.seed)
        return tf.constant(rng.integers(0, classes, size=tuple(shape)).astype(np.int32), name=name)

    def image_classifier_loss(self, features: Tensor, labels: Tensor,
                              num_classes: int) -> Tensor:
        """The Keras image models' head and loss: global average pooling of NHWC
        ``features``, a dense layer to ``num_classes`` logits (Glorot kernel, zero bias),
        and the mean sparse softmax cross-entropy against ``labels``."""
        with tf.name_scope("predictions"):
            pooled = tf.reduce_mean(features, axis=[1, 2], name="avg_pool")
            c = pooled.shape[-1]
            w = self.glorot("kernel", (c, num_classes), fan_in=c, fan_out=num_classes)
            bias = self.filled("bias", (num_classes,), 0.0)
            logits = tf.nn.bias_add(tf.matmul(pooled, w), bias)
        with tf.name_scope("loss"):
            return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=labels, logits=logits))

    def training_step(self, name: str, loss: Tensor, optimizer: str, learning_rate: float,
                      updates: Iterable = (), expert: Callable | None = None,
                      colocate_gradients_with_ops: bool = True) -> Workload:
        """The step: ``optimizer.minimize(loss, global_step)`` grouped with ``updates``
        (the BN moving averages: TensorFlow's ``UPDATE_OPS``), the initializer of every
        variable, and the :class:`Workload` around them."""
        g = loss.graph
        with g.as_default():
            step = tf.train.get_or_create_global_step()
            train = make_optimizer(optimizer, learning_rate).minimize(
                loss, global_step=step, colocate_gradients_with_ops=colocate_gradients_with_ops)
            fetch = tf.group(train, *updates, name="train_step")
            init = tf.global_variables_initializer()
        return Workload(name, g, [fetch], init, loss=loss, expert=expert)


# --- expert placements ----------------------------------------------------------------------

def gpu_devices(cluster) -> list[str]:
    """The cluster's GPUs (its CPUs when it has none), in cluster order."""
    gpus = [d.name for d in cluster.devices if d.device_type == "GPU"]
    return gpus or [d.name for d in cluster.devices if d.is_cpu]


def scope_device_fn(slot_of: Callable[[str], int | None], devices: Sequence[str]) -> Callable:
    """A device function from a rule on op names: ``slot_of(name)`` gives an index into
    ``devices`` (taken modulo their number) or None.  A gradient op is named after its
    forward op (``gradients/<forward name>_grad/...``), so it goes where its forward op
    goes; an op the rule does not know follows the first of its inputs that it knows (a
    sum of gradients follows the gradients), else the first device.

    >>> fn = scope_device_fn(lambda n: 1 if n.startswith("b/") else None, ["/gpu:0", "/gpu:1"])
    >>> g = tf.Graph()
    >>> with g.as_default():
    ...     with tf.name_scope("b"):
    ...         x = tf.relu(tf.constant(1.0))
    ...     y = tf.identity(x)
    >>> fn(x.op), fn(y.op), fn(x.op.inputs[0].op)
    ('/gpu:1', '/gpu:1', '/gpu:1')
    """
    memo: dict[str, str] = {}

    def device_of(op: Operation) -> str:
        stack = [op]
        while stack:  # iterative: graphs are deep
            o = stack.pop()
            if o.name in memo:
                continue
            name = o.name[len("gradients/"):] if o.name.startswith("gradients/") else o.name
            slot = slot_of(name)
            if slot is not None:
                memo[o.name] = devices[slot % len(devices)]
                continue
            if o.inputs and o.inputs[0].op.name not in memo:
                stack.append(o)
                stack.append(o.inputs[0].op)
                continue
            memo[o.name] = memo[o.inputs[0].op.name] if o.inputs else devices[0]
        return memo[op.name]

    return device_of
