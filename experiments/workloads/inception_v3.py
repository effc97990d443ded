"""Inception-v3 (Szegedy et al., "Rethinking the Inception Architecture for Computer
Vision", CVPR 2016), one training step, as ``tf.keras.applications.InceptionV3`` builds it.

The architecture is Keras' (``keras/applications/inception_v3.py``): a stem of five
convolutions and two max pools, then the eleven Inception blocks ``mixed0`` ...
``mixed10`` (35x35, 17x17 with factorised 7x7 convolutions, 8x8 with split 3x3
branches), global average pooling and a 1000-way classifier.  Each convolution is
Keras' ``conv2d_bn``: no bias, batch normalisation without a scale (epsilon 1e-3,
moving averages at momentum 0.99), ReLU.  With the defaults the model's variables hold
exactly as many parameters as Keras' ``InceptionV3(weights=None)``: 23,851,784 in all,
23,817,352 trainable (the moving means and variances are the rest), checked against
tensorflow 2.21 (tests/experiments/test_models.py).  The auxiliary classifier of the
paper is not in Keras' model, nor here.
"""

from __future__ import annotations

import re

import core as tf
from experiments.workloads.common import ModelBuilder, check_options, gpu_devices, scope_device_fn
from experiments.workloads.mlp import Workload

__all__ = ["inception_v3"]

BN_EPSILON, BN_MOMENTUM = 1e-3, 0.99


class _Inception:
    def __init__(self, m: ModelBuilder, depth_multiplier: float):
        self.m, self.multiplier = m, depth_multiplier
        self.updates: list = []
        self._count = 0

    def depth(self, filters: int) -> int:
        return max(1, int(filters * self.multiplier))

    def conv(self, x, filters: int, rows: int, cols: int, stride: int = 1, padding: str = "SAME"):
        """Keras' ``conv2d_bn``: Conv2D (no bias) + BatchNorm (offset, no scale) + ReLU."""
        filters, c_in = self.depth(filters), x.shape[-1]
        self._count += 1
        with tf.name_scope(f"conv{self._count}"):
            w = self.m.glorot("kernel", (rows, cols, c_in, filters), fan_in=rows * cols * c_in,
                              fan_out=rows * cols * filters)
            y = tf.nn.conv2d(x, w, strides=stride, padding=padding)
            with tf.name_scope("bn"):
                beta = self.m.filled("beta", (filters,), 0.0)
                moving_mean = self.m.filled("moving_mean", (filters,), 0.0, trainable=False)
                moving_var = self.m.filled("moving_variance", (filters,), 1.0, trainable=False)
                ones = tf.fill((filters,), tf.constant(1.0, dtype=y.dtype), name="scale")
                y, mean, var = tf.nn.fused_batch_norm(y, ones, beta, epsilon=BN_EPSILON,
                                                      is_training=True)
                for moving, batch in ((moving_mean, mean), (moving_var, var)):
                    with tf.colocate_with(moving):
                        self.updates.append(moving.assign_sub((moving - batch) * (1 - BN_MOMENTUM)))
            return tf.nn.relu(y)

    def branches(self, name: str, *branches):
        """The block ``name``: each branch a function of the block's input, built in scope
        ``<name>/branch<i>``; their outputs concatenated on channels."""
        def build(x):
            with tf.name_scope(name):
                outs = []
                for i, branch in enumerate(branches):
                    with tf.name_scope(f"branch{i}"):
                        outs.append(branch(x))
                return tf.concat(outs, axis=3, name="concat")
        return build


def _avg_pool_conv(net, filters):
    return lambda x: net.conv(tf.nn.avg_pool2d(x, 3, 1, "SAME"), filters, 1, 1)


def _blocks(net: _Inception) -> list:
    """The eleven mixed blocks, as functions of their input."""
    c = net.conv
    blocks = []
    for i, pool in enumerate((32, 64, 64)):  # mixed0-2: 35 x 35
        blocks.append(net.branches(
            f"mixed{i}",
            lambda x: c(x, 64, 1, 1),
            lambda x: c(c(x, 48, 1, 1), 64, 5, 5),
            lambda x: c(c(c(x, 64, 1, 1), 96, 3, 3), 96, 3, 3),
            _avg_pool_conv(net, pool)))
    blocks.append(net.branches(  # mixed3: to 17 x 17
        "mixed3",
        lambda x: c(x, 384, 3, 3, 2, "VALID"),
        lambda x: c(c(c(x, 64, 1, 1), 96, 3, 3), 96, 3, 3, 2, "VALID"),
        lambda x: tf.nn.max_pool2d(x, 3, 2, "VALID")))
    for i, width in zip(range(4, 8), (128, 160, 160, 192)):  # mixed4-7: 17 x 17
        blocks.append(net.branches(
            f"mixed{i}",
            lambda x: c(x, 192, 1, 1),
            lambda x, w=width: c(c(c(x, w, 1, 1), w, 1, 7), 192, 7, 1),
            lambda x, w=width: c(c(c(c(c(x, w, 1, 1), w, 7, 1), w, 1, 7), w, 7, 1), 192, 1, 7),
            _avg_pool_conv(net, 192)))
    blocks.append(net.branches(  # mixed8: to 8 x 8
        "mixed8",
        lambda x: c(c(x, 192, 1, 1), 320, 3, 3, 2, "VALID"),
        lambda x: c(c(c(c(x, 192, 1, 1), 192, 1, 7), 192, 7, 1), 192, 3, 3, 2, "VALID"),
        lambda x: tf.nn.max_pool2d(x, 3, 2, "VALID")))

    def split_3x3(x):
        return tf.concat([c(x, 384, 1, 3), c(x, 384, 3, 1)], axis=3)

    for i in (9, 10):  # mixed9-10: 8 x 8
        blocks.append(net.branches(
            f"mixed{i}",
            lambda x: c(x, 320, 1, 1),
            lambda x: split_3x3(c(x, 384, 1, 1)),
            lambda x: split_3x3(c(c(x, 448, 1, 1), 384, 3, 3)),
            _avg_pool_conv(net, 192)))
    return blocks


def inception_v3(batch: int = 32, image_size: int = 299, num_classes: int = 1000,
                 depth_multiplier: float = 1.0, blocks: int = 11, optimizer: str = "momentum",
                 learning_rate: float = 0.045, seed: int = 0) -> Workload:
    """One training step of Inception-v3 (forward, backward, update) on a synthetic batch.

    ``depth_multiplier`` scales every convolution's filters (as TF-slim's
    ``inception_v3``), ``blocks`` keeps the first mixed blocks (11: all); with small
    values and ``image_size=75`` (the least the valid-padded stem takes) the model runs
    on this machine.  The expert placement spreads each block's towers (its parallel
    branches) over the GPUs, branch ``i`` on GPU ``i`` of each block, the stem and the
    classifier on the first; Mirhoseini et al. (ICML 2017) report that their human
    expert keeps Inception-v3 on one GPU, which :class:`placers.SimplePlacer` gives.

    >>> w = inception_v3(batch=1, image_size=75, num_classes=10, depth_multiplier=0.05, blocks=4)
    >>> w.name, w.loss.shape
    ('inception_v3', ())
    """
    check_options(batch=batch, image_size=image_size, num_classes=num_classes, blocks=blocks)
    if not 0 < depth_multiplier:
        raise ValueError(f"depth_multiplier must be positive, not {depth_multiplier!r}")
    if image_size < 75:
        raise ValueError(f"image_size must be at least 75 (the valid-padded stem), not {image_size}")
    if blocks > 11:
        raise ValueError(f"blocks must be at most 11 (mixed0 to mixed10), not {blocks}")
    g = tf.Graph()
    with g.as_default():
        m = ModelBuilder(seed)
        net = _Inception(m, depth_multiplier)
        images = m.data("images", (batch, image_size, image_size, 3))
        labels = m.labels("labels", (batch,), num_classes)
        with tf.name_scope("stem"):
            x = net.conv(images, 32, 3, 3, 2, "VALID")
            x = net.conv(x, 32, 3, 3, padding="VALID")
            x = net.conv(x, 64, 3, 3)
            x = tf.nn.max_pool2d(x, 3, 2, "VALID")
            x = net.conv(x, 80, 1, 1, padding="VALID")
            x = net.conv(x, 192, 3, 3, padding="VALID")
            x = tf.nn.max_pool2d(x, 3, 2, "VALID")
        for block in _blocks(net)[:blocks]:
            x = block(x)
        loss = m.image_classifier_loss(x, labels, num_classes)
    return m.training_step("inception_v3", loss, optimizer, learning_rate, net.updates,
                           expert=_expert)


_BRANCH = re.compile(r"mixed\d+/branch(\d+)/")


def _expert(cluster):
    """Branch ``i`` of every mixed block on GPU ``i`` (mod the GPUs); the rest (stem,
    concatenations, classifier) on the first GPU."""
    devices = gpu_devices(cluster)

    def slot(name: str) -> int | None:
        match = _BRANCH.match(name)
        if match:
            return int(match.group(1))
        if name.startswith(("stem/", "predictions/", "loss/", "mixed")):
            return 0
        return None

    return scope_device_fn(slot, devices)
