"""Hypothesis strategies for the simulator's tests: random DAGs, clusters, placements.

(To move into the shared ``tests/strategies.py`` once it exists.)
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

import core as tf
from core.cluster import Cluster
from core.placement import Placement


@st.composite
def dags(draw, max_ops: int = 14, control: bool = True):
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
def clusters(draw, roomy: bool = False):
    """A single host with 0-2 GPUs, or 2-3 tasks (some sharing a host).  ``roomy``:
    pools and cores large enough that nothing waits for a thread or a core."""
    threads = 64 if roomy else None
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
    del threads
    return Cluster.from_spec(spec, gpus_per_task=draw(st.integers(0, 1)), hosts=shared,
                             cpu_cores=64 if roomy else draw(st.integers(1, 4)), **overrides)


@st.composite
def placements(draw, graph, cluster):
    names = [d.name for d in cluster.devices]
    return Placement({op.name: names[draw(st.integers(0, len(names) - 1))]
                      for op in graph.get_operations()})


@st.composite
def placed_graphs(draw, max_ops: int = 14, roomy: bool = False):
    g = draw(dags(max_ops))
    c = draw(clusters(roomy))
    return g, c, draw(placements(g, c))
