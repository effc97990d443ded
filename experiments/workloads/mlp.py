"""The MLP training step: forward, backward and update, the unit of every other workload."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

import core as tf
from core.graph import Graph, Operation, Tensor

__all__ = ["Workload", "mlp_training_step", "mlp_forward", "MODEL_VARIABLES"]

#: The collection of a model's own variables (TensorFlow's ``GraphKeys.MODEL_VARIABLES``):
#: weights and moving statistics, not optimizer slots, the global step or input data.
MODEL_VARIABLES = "model_variables"


@dataclass
class Workload:
    """A built benchmark graph and what to run: ``fetches`` (the step), ``init`` (the
    variables' initializer, run once before the steps) and ``feeds`` (placeholder ->
    array, possibly empty).

    ``flops`` is the step's arithmetic where the builder counts it; ``loss`` the scalar
    the step lowers (None for a graph without one).  ``expert``, where the papers place
    the model by hand, is ``expert(cluster) -> device function`` (``op -> device name or
    None``), the hand placement for that cluster's GPUs (see :meth:`expert_placement`).
    """

    name: str
    graph: Graph
    fetches: list
    init: Operation | None = None
    feeds: dict = field(default_factory=dict)
    flops: float = 0.0
    loss: Tensor | None = None
    expert: Callable | None = None

    @property
    def fetch_ops(self) -> list[Operation]:
        return [f.op if isinstance(f, Tensor) else f for f in self.fetches]

    def parameters(self, trainable_only: bool = False) -> int:
        """Elements of the model's variables (``trainable_only``: of its trainable ones):
        the ``model_variables`` collection where the builder fills it, else every global
        variable.

        >>> mlp_training_step(batch=2, layers=2, width=8, inputs=4, outputs=2).parameters()
        58
        """
        variables = (self.graph.get_collection(MODEL_VARIABLES)
                     or tf.global_variables(self.graph))
        return sum(math.prod(v.shape) for v in variables if v.trainable or not trainable_only)

    def expert_placement(self, cluster):
        """The papers' hand placement of this model on ``cluster`` (a
        :class:`core.placement.Placement`, through :class:`placers.FunctionPlacer`).
        Raises ValueError when the workload has none."""
        if self.expert is None:
            raise ValueError(f"workload {self.name!r} has no expert placement")
        import placers  # experiments may import placers; the module stays light without it
        return placers.FunctionPlacer(self.expert(cluster)).place(self.graph, cluster)


def _layer_sizes(layers: int, width: int, inputs: int, outputs: int) -> list[int]:
    return [inputs] + [width] * (layers - 1) + [outputs]


def mlp_training_step(batch: int = 64, layers: int = 4, width: int = 256, inputs: int = 256,
                      outputs: int = 16, learning_rate: float = 0.01, seed: int = 0,
                      dtype=np.float32) -> Workload:
    """One SGD step of an MLP with ReLU layers and a mean-squared-error loss.

    The batch and labels are constants (no feeds), the gradients come from
    :func:`core.gradients`, and the step's fetch is a ``group`` of the variable updates.

    >>> w = mlp_training_step(batch=8, layers=2, width=16, inputs=16, outputs=4)
    >>> w.fetches[0].type, len(tf.global_variables(w.graph))
    ('NoOp', 4)
    """
    rng = np.random.default_rng(seed)
    sizes = _layer_sizes(layers, width, inputs, outputs)
    g = tf.Graph()
    flops = 0.0
    with g.as_default():
        x = tf.constant(rng.standard_normal((batch, inputs)).astype(dtype), name="x")
        y = tf.constant(rng.standard_normal((batch, outputs)).astype(dtype), name="labels")
        params = []
        h = x
        for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
            with tf.name_scope(f"layer{i}"):
                w = tf.Variable((rng.standard_normal((n_in, n_out)) / np.sqrt(n_in)).astype(dtype),
                                name="w")
                b = tf.Variable(np.zeros(n_out, dtype), name="b")
                h = tf.matmul(h, w) + b
                if i < layers - 1:
                    h = tf.relu(h)
            params += [w, b]
            flops += 3 * 2.0 * batch * n_in * n_out  # forward + two backward matmuls
        with tf.name_scope("loss"):
            loss = tf.reduce_mean(tf.square(h - y))
        grads = tf.gradients(loss, params)
        with tf.name_scope("update"):
            updates = [p.assign_sub(learning_rate * gr) for p, gr in zip(params, grads)]
        step = tf.group(*updates, name="train_step")
        init = tf.global_variables_initializer()
    return Workload("mlp_train", g, [step], init, flops=flops)


def mlp_forward(batch: int = 64, layers: int = 8, width: int = 1024, seed: int = 0,
                dtype=np.float32) -> Workload:
    """A forward pass of ``layers`` matmul+relu layers of ``width`` (issue 4's MLP benchmark)."""
    rng = np.random.default_rng(seed)
    g = tf.Graph()
    with g.as_default():
        h = tf.constant(rng.standard_normal((batch, width)).astype(dtype), name="x")
        for i in range(layers):
            with tf.name_scope(f"layer{i}"):
                w = tf.Variable((rng.standard_normal((width, width)) / np.sqrt(width)).astype(dtype),
                                name="w")
                h = tf.relu(tf.matmul(h, w))
        init = tf.global_variables_initializer()
    return Workload("mlp_forward", g, [h], init, flops=2.0 * batch * width * width * layers)
