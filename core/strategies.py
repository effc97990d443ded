"""Hypothesis strategies for property tests of placements: random graphs (with device
scopes for the placers, plain float ones for the simulator), clusters, placements, and
two helpers (a fixed cost model, everything on one device).

Needs hypothesis (``pip install 'placement-lab[testing]'``); importing :mod:`core` does
not import this module.

>>> from hypothesis import given, settings
>>> @settings(max_examples=5, deadline=None)
... @given(placed_graphs())
... def test_every_op_is_placed(case):
...     graph, cluster, placement = case
...     placement.validate(graph, cluster)
>>> test_every_op_is_placed()
"""

from __future__ import annotations

import numpy as np

try:
    from hypothesis import strategies as st
except ImportError as e:  # an optional dependency: say which extra brings it
    raise ImportError("core.strategies needs hypothesis: pip install 'placement-lab[testing]'"
                      ) from e

import core as tf
from core.cluster import Cluster, ClusterSpec
from core.costs import CostModel
from core.placement import Placement

__all__ = ["clusters", "dags", "device_strings", "float_dags", "sim_clusters", "placements",
           "placed_graphs", "FixedCost", "place_all", "SHAPE"]

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


# --- for the simulator and dataflow tests ----------------------------------------------


@st.composite
def float_dags(draw, max_ops: int = 14, control: bool = True):
    """A random DAG of small float32 ops: constants, then add / relu / matmul / identity
    drawing inputs from earlier ops, and a few control edges."""
    n = draw(st.integers(2, max_ops))
    size = draw(st.sampled_from([4, 16, 64]))
    g = tf.Graph()
    value = np.ones((size, size), np.float32)
    tensors = []
    with g.as_default():
        n_sources = draw(st.integers(1, min(3, n)))
        for i in range(n_sources):
            tensors.append(tf.constant(value, name=f"c{i}"))
        for i in range(n_sources, n):
            kind = draw(st.sampled_from(["add", "relu", "matmul", "identity"]))
            x = tensors[draw(st.integers(0, len(tensors) - 1))]
            y = tensors[draw(st.integers(0, len(tensors) - 1))]
            deps = []
            if control and draw(st.integers(0, 4)) == 0:
                deps = [tensors[draw(st.integers(0, len(tensors) - 1))].op]
            with g.control_dependencies(deps):
                if kind == "add":
                    t = tf.add(x, y, name=f"op{i}")
                elif kind == "relu":
                    t = tf.relu(x, name=f"op{i}")
                elif kind == "matmul":
                    t = tf.matmul(x, y, name=f"op{i}")
                else:
                    t = tf.identity(x, name=f"op{i}")
            tensors.append(t)
    return g


@st.composite
def sim_clusters(draw, roomy: bool = False):
    """A single host with 0-2 GPUs, or 2-3 tasks (some sharing a host).  ``roomy``:
    pools and cores large enough that nothing waits for a thread or a core."""
    overrides = {}
    if roomy:
        overrides = dict(cpu_inter_op_threads=64, gpu_inter_op_threads=64, cpu_intra_op_threads=1)
    if draw(st.booleans()):
        return Cluster.single_host(gpus=draw(st.integers(0, 2)),
                                   cpu_cores=64 if roomy else draw(st.integers(1, 4)),
                                   nvlink=draw(st.booleans()), **overrides)
    tasks = draw(st.integers(2, 3))
    spec = {"worker": [f"w{i}:2222" for i in range(tasks)]}
    shared = {} if draw(st.booleans()) else {("worker", 0): "big", ("worker", 1): "big"}
    return Cluster.from_spec(spec, gpus_per_task=draw(st.integers(0, 1)), hosts=shared,
                             cpu_cores=64 if roomy else draw(st.integers(1, 4)), **overrides)


@st.composite
def placements(draw, graph, cluster):
    """Each op on a random device of the cluster."""
    names = [d.name for d in cluster.devices]
    return Placement({op.name: names[draw(st.integers(0, len(names) - 1))]
                      for op in graph.get_operations()})


@st.composite
def placed_graphs(draw, max_ops: int = 14, roomy: bool = False):
    """``(graph, cluster, placement)`` for the simulator and dataflow tests."""
    g = draw(float_dags(max_ops))
    c = draw(sim_clusters(roomy))
    return g, c, draw(placements(g, c))


# --- helpers ------------------------------------------------------------------------------

class FixedCost(CostModel):
    """Op times by name (default ``default``); transfers as the base class prices them."""

    def __init__(self, times=None, default: float = 1.0):
        self.times, self.default = dict(times or {}), default

    def op_time(self, op, device) -> float:
        return self.times.get(op.name, self.default)


def place_all(graph, device: str):
    """Every op of ``graph`` on ``device``."""
    return Placement({op.name: device for op in graph.get_operations()})
