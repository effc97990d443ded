"""Shared hypothesis strategies: random DAGs, clusters and device scopes.

Import with ``from strategies import ...`` (tests/ is put on sys.path by conftest).
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

import core as tf
from core.cluster import Cluster, ClusterSpec

SHAPE = (4, 4)


@st.composite
def clusters(draw, max_gpus: int = 2):
    """A single-host cluster or a ps/worker cluster, some tasks with GPUs."""
    if draw(st.booleans()):
        return Cluster.single_host(gpus=draw(st.integers(0, max_gpus)))
    ps = draw(st.integers(1, 2))
    workers = draw(st.integers(1, 3))
    spec = ClusterSpec({"ps": [f"127.0.0.1:{2000 + i}" for i in range(ps)],
                        "worker": [f"127.0.0.1:{3000 + i}" for i in range(workers)]})
    gpus = {"ps": 0, "worker": draw(st.integers(0, max_gpus))}
    return Cluster.from_spec(spec, gpus_per_task=gpus)


device_strings = st.sampled_from([
    "", "/cpu:0", "/gpu:0", "/gpu:1", "/job:ps", "/job:worker", "/task:1", "/job:ps/task:1",
    "/job:worker/task:0/gpu:0", "/job:localhost", "/device:CPU:0", "/job:worker/task:2",
])


@st.composite
def dags(draw, max_ops: int = 25, pins: bool = True, controls: bool = True):
    """A random graph of (4, 4) tensors: constants and variables (float32, some int32),
    then Add/Mul/MatMul/Relu/Identity ops, random device scopes and control edges.

    Returns ``(graph, fetches)`` where fetches are the last few tensors.
    """
    g = tf.Graph()
    n_sources = draw(st.integers(1, 4))
    n_ops = draw(st.integers(1, max_ops))
    floats: list = []
    ints: list = []
    ops: list = []
    with g.as_default():
        for i in range(n_sources):
            pin = draw(device_strings) if pins else ""
            with tf.device(pin):
                kind = draw(st.sampled_from(["const", "var", "int_var"]))
                if kind == "const":
                    floats.append(tf.constant(np.full(SHAPE, i + 1.0, np.float32)))
                elif kind == "var":
                    floats.append(tf.Variable(np.ones(SHAPE, np.float32)).value())
                else:
                    ints.append(tf.Variable(np.ones(SHAPE, np.int32)).value())
        if not floats:
            floats.append(tf.constant(np.ones(SHAPE, np.float32)))
        for _ in range(n_ops):
            pin = draw(device_strings) if pins else ""
            deps = []
            if controls and ops and draw(st.booleans()):
                deps = [ops[draw(st.integers(0, len(ops) - 1))]]
            with tf.device(pin), tf.control_dependencies(deps):
                kind = draw(st.sampled_from(["add", "mul", "matmul", "relu", "identity", "int_add"]))
                x = floats[draw(st.integers(0, len(floats) - 1))]
                y = floats[draw(st.integers(0, len(floats) - 1))]
                if kind == "int_add" and ints:
                    a = ints[draw(st.integers(0, len(ints) - 1))]
                    out = tf.add(a, a)
                    ints.append(out)
                elif kind == "add":
                    out = x + y
                elif kind == "mul":
                    out = x * y
                elif kind == "matmul":
                    out = tf.matmul(x, y)
                elif kind == "relu":
                    out = tf.relu(x)
                else:
                    out = tf.identity(x)
                if out.dtype == tf.float32:
                    floats.append(out)
                ops.append(out.op)
    fetches = floats[-3:]
    return g, fetches
