"""The simple placer: TensorFlow 1.x's default rules, exactly.

Every group goes to the device :func:`placers.constraints.resolve` computed as its
default: kept from an earlier run, else where its pin says with unset fields filled, else
the master task's default device (GPU:0, or CPU:0 when there is no GPU).

>>> import core as tf
>>> from core.cluster import Cluster
>>> g = tf.Graph()
>>> with g.as_default():
...     with tf.device("/cpu:0"):
...         a = tf.Variable(3.0, name="a")
...     c = a * 2.0
>>> p = SimplePlacer().place(g, Cluster.single_host(gpus=1))
>>> p["a"], p["mul"]
('/job:localhost/replica:0/task:0/device:CPU:0', '/job:localhost/replica:0/task:0/device:GPU:0')
"""

from __future__ import annotations

from placers.base import BasePlacer, register

__all__ = ["SimplePlacer"]


@register("simple")
class SimplePlacer(BasePlacer):
    """TensorFlow's simple placer (see the module docstring for its rules).

    Parameters
    ----------
    allow_soft_placement : fall back to the CPU of the same task when a pinned device has
        no kernel for an op or does not exist, instead of raising ``PlacementError``.
    log_device_placement : log ``name: device`` for every op placed.
    """

    def choose(self, constraints):
        return {g.index: g.default for g in constraints.to_place()}
