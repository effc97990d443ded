"""A control edge between tasks is a message: it arrives after the route's latency (the
runtime announces the op with a ``^op`` send), once per destination device."""

from __future__ import annotations

import numpy as np
import pytest

import core as tf
from core.runtime_model import RuntimeModel
from core.cluster import Cluster, ClusterSpec
from core.placement import Placement
from sim import SimConfig, simulate
from strategies import FixedCost

SPEC = ClusterSpec({"worker": ["127.0.0.1:0", "127.0.0.1:0"]})
W0, W1 = "/job:worker/replica:0/task:0/device:CPU:0", "/job:worker/replica:0/task:1/device:CPU:0"


def cluster(latency):
    c = Cluster.from_spec(SPEC, hosts={("worker", 0): "h", ("worker", 1): "h"}, cpu_cores=4)
    for d in c.devices:
        c = c.replace_device(d.name, op_overhead=0.0)
    return c.replace_link("memcpy:h", latency=latency, bandwidth=1e12)


def graph(consumer_device):
    g = tf.Graph()
    with g.as_default():
        with tf.device(W0):
            a = tf.constant(np.float32(1.0), name="a")
        with tf.device(consumer_device), tf.control_dependencies([a]):
            tf.constant(np.float32(2.0), name="b")
            tf.constant(np.float32(3.0), name="c")
    return g, Placement({op.name: op.device for op in g.get_operations()})


@pytest.mark.parametrize("config", [SimConfig(), SimConfig(runtime=RuntimeModel(serial_dispatch=True))])
def test_a_control_edge_to_another_task_waits_for_the_routes_latency(config):
    g, p = graph(W1)
    trace = simulate(g, p, cluster(2e-3), cost_model=FixedCost(default=1e-3), config=config)
    trace.validate(g, cluster(2e-3))
    start = {r.op: round(r.start, 9) for r in trace.ops}
    assert start["a"] == 0.0 and start["b"] == start["c"] == 3e-3


def test_within_a_task_it_is_free():
    g, p = graph(W0)
    trace = simulate(g, p, cluster(2e-3), cost_model=FixedCost(default=1e-3))
    assert {r.op: round(r.start, 9) for r in trace.ops}["b"] == 1e-3
