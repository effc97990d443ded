"""ResNet-50 (He et al., "Deep Residual Learning for Image Recognition", CVPR 2016), one
training step, as ``tf.keras.applications.ResNet50`` builds it.

The architecture is Keras' (``keras/applications/resnet.py``): a 7x7/2 convolution and a
3x3/2 max pool, then four stages of bottleneck blocks (3, 4, 6, 3 of them; 64, 128, 256,
512 filters, four times that out), the first block of each stage with a projection
shortcut and the stride of stages 3-5 on its first 1x1 convolution; every convolution
has a bias and is followed by batch normalisation (epsilon 1.001e-5, moving averages at
momentum 0.99); global average pooling and a 1000-way classifier.  Keras pads the stem
explicitly where this graph uses SAME padding: the shapes are the same.  With the
defaults the model's variables hold exactly as many parameters as Keras'
``ResNet50(weights=None)``: 25,636,712 in all, 25,583,592 trainable (the moving means
and variances are the rest), checked against tensorflow 2.21 (tests/experiments/test_models.py).
"""

from __future__ import annotations

from typing import Sequence

import core as tf
from experiments.workloads.common import ModelBuilder, check_options, gpu_devices, scope_device_fn
from experiments.workloads.mlp import Workload

__all__ = ["resnet50"]

#: Keras' BatchNormalization for ResNet: epsilon and moving-average momentum.
BN_EPSILON, BN_MOMENTUM = 1.001e-5, 0.99


class _ResNet:
    def __init__(self, m: ModelBuilder):
        self.m = m
        self.updates: list = []

    def conv_bn(self, x, name: str, kernel: int, filters: int, stride: int = 1, relu: bool = True):
        """Conv2D (with bias) + BatchNorm (+ ReLU), Keras' ``<name>_conv``/``<name>_bn``."""
        c_in = x.shape[-1]
        with tf.name_scope(name):
            w = self.m.glorot("kernel", (kernel, kernel, c_in, filters), fan_in=kernel * kernel * c_in,
                              fan_out=kernel * kernel * filters)
            bias = self.m.filled("bias", (filters,), 0.0)
            y = tf.nn.bias_add(tf.nn.conv2d(x, w, strides=stride, padding="SAME"), bias)
            y = self.batch_norm(y, filters)
        return tf.nn.relu(y) if relu else y

    def batch_norm(self, x, channels: int):
        with tf.name_scope("bn"):
            gamma = self.m.filled("gamma", (channels,), 1.0)
            beta = self.m.filled("beta", (channels,), 0.0)
            moving_mean = self.m.filled("moving_mean", (channels,), 0.0, trainable=False)
            moving_var = self.m.filled("moving_variance", (channels,), 1.0, trainable=False)
            y, mean, var = tf.nn.fused_batch_norm(x, gamma, beta, epsilon=BN_EPSILON, is_training=True)
            for moving, batch in ((moving_mean, mean), (moving_var, var)):
                with tf.colocate_with(moving):
                    self.updates.append(moving.assign_sub((moving - batch) * (1 - BN_MOMENTUM)))
        return y

    def block(self, x, name: str, filters: int, stride: int, projection: bool):
        """Keras' ``block1``: 1x1 (stride) -> 3x3 -> 1x1 (4x filters), plus the shortcut."""
        with tf.name_scope(name):
            shortcut = (self.conv_bn(x, "0", 1, 4 * filters, stride, relu=False) if projection else x)
            y = self.conv_bn(x, "1", 1, filters, stride)
            y = self.conv_bn(y, "2", 3, filters)
            y = self.conv_bn(y, "3", 1, 4 * filters, relu=False)
            return tf.nn.relu(shortcut + y, name="out")


def resnet50(batch: int = 32, image_size: int = 224, num_classes: int = 1000,
             base_width: int = 64, blocks: Sequence[int] = (3, 4, 6, 3),
             optimizer: str = "momentum", learning_rate: float = 0.1, seed: int = 0) -> Workload:
    """One training step of ResNet-50 (forward, backward, update) on a synthetic batch.

    ``base_width`` is the first stage's filters (the others double it), ``blocks`` the
    bottleneck blocks per stage; smaller values make a small ResNet of the same shape
    that runs on this machine.  The optimizer is momentum SGD (tf_cnn_benchmarks'
    default), ``"sgd"`` or ``"adam"``.  The expert placement puts the stem on the first
    GPU and spreads the four stages over the GPUs in order (a pipeline split: ResNets
    are trained data-parallel, and a split by stage is how model-parallel papers cut
    them); the classifier goes with the last stage.

    >>> w = resnet50(batch=2, image_size=32, num_classes=10, base_width=4, blocks=(1, 1, 1, 1))
    >>> w.name, w.parameters() > 0, w.loss.shape
    ('resnet50', True, ())
    """
    check_options(batch=batch, image_size=image_size, num_classes=num_classes, base_width=base_width)
    blocks = tuple(blocks)
    if len(blocks) != 4:
        raise ValueError(f"blocks must list the blocks of the four stages, not {blocks!r}")
    check_options(**{f"blocks[{i}]": n for i, n in enumerate(blocks)})
    if image_size < 32:
        raise ValueError(f"image_size must be at least 32 (five stride-2 steps), not {image_size}")
    g = tf.Graph()
    with g.as_default():
        m = ModelBuilder(seed)
        net = _ResNet(m)
        images = m.data("images", (batch, image_size, image_size, 3))
        labels = m.labels("labels", (batch,), num_classes)
        with tf.name_scope("conv1"):
            x = net.conv_bn(images, "conv", 7, base_width, stride=2)
            x = tf.nn.max_pool2d(x, 3, 2, "SAME", name="pool")
        for stage, n_blocks in enumerate(blocks):
            filters = base_width * 2 ** stage
            for i in range(n_blocks):
                x = net.block(x, f"conv{stage + 2}_block{i + 1}", filters,
                              stride=2 if stage > 0 and i == 0 else 1, projection=i == 0)
        loss = m.image_classifier_loss(x, labels, num_classes)
    return m.training_step("resnet50", loss, optimizer, learning_rate, net.updates,
                           expert=_expert)


def _expert(cluster):
    """Stage k of conv2..conv5 on GPU ``k * n // 4`` of n; the stem on the first, the
    classifier and loss on the last stage's."""
    devices = gpu_devices(cluster)
    n = len(devices)

    def slot(name: str) -> int | None:
        if name.startswith("conv1/"):
            return 0
        if name.startswith("conv") and name[4:5].isdigit():
            return (int(name[4]) - 2) * n // 4
        if name.startswith(("predictions/", "loss/")):
            return 3 * n // 4
        return None

    return scope_device_fn(slot, devices)
