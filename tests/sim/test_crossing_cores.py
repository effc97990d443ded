"""RuntimeModel.crossing_cores: a crossing between two tasks of one host holds the host's
cores its link measured (Link.busy_cores) while on the link, queued with the kernels."""

from __future__ import annotations

import numpy as np
import pytest

import core as tf
from core.cluster import Cluster
from core.placement import Placement
from core.runtime_model import IDEAL, TENSORFLOW
from sim import SimConfig, simulate

from strategies import FixedCost


def _crossing_beside_kernels(busy_cores: float, model, cores: int = 1):
    """A 4-byte tensor made on the ps (no time) crosses to worker 1 (1 s on the memcpy
    link) while worker 0 runs ``a`` (0.5 s) then ``k`` (1 s), all three tasks on one
    host of ``cores`` cores: the (validated) trace."""
    g = tf.Graph()
    with g.as_default():
        c = tf.constant(np.ones((1,), np.float32), name="c")
        tf.identity(c, name="r")
        a = tf.constant(np.ones((1,), np.float32), name="a")
        tf.identity(a, name="k")
    cluster = Cluster.from_spec({"ps": ["h:1"], "worker": ["h:2", "h:3"]},
                                hosts={("ps", 0): "h", ("worker", 0): "h", ("worker", 1): "h"},
                                cpu_cores=cores)
    cluster = cluster.replace_link("memcpy:h", bandwidth=1e12, latency=1.0,
                                   busy_cores=busy_cores).with_runtime_model(model)
    ps, w0, w1 = (d.name for d in cluster.devices)
    placement = Placement({"c": ps, "r": w1, "a": w0, "k": w0})
    cost = FixedCost({"a": 0.5, "k": 1.0}, default=0.0)
    trace = simulate(g, placement, cluster, cost_model=cost)
    trace.validate(g, cluster)
    return trace


def _times(trace):
    return ({r.op: (r.start, r.end) for r in trace.ops},
            [(x.tensor, x.start, x.end) for x in trace.transfers])


def test_a_crossing_and_the_kernels_take_turns_on_the_cores():
    trace = _crossing_beside_kernels(1.0, TENSORFLOW)
    ops, [(_, start, end)] = _times(trace)
    # The one core: c, then a (which waited for c) until 0.5; the crossing waits for
    # the core until then and holds it for its second; k waits for it.
    assert (start, end) == pytest.approx((0.5, 1.5))
    assert ops["k"] == pytest.approx((1.5, 2.5))
    assert trace.step_time == pytest.approx(2.5)
    # Holding no core, the crossing runs beside the kernels.
    ideal = _crossing_beside_kernels(1.0, IDEAL)
    ops, [(_, start, end)] = _times(ideal)
    assert (start, end) == pytest.approx((0.0, 1.0)) and ops["k"] == pytest.approx((0.5, 1.5))
    assert ideal.step_time == pytest.approx(1.5)


def test_a_crossing_takes_the_cores_that_are_free_and_at_most_its_hosts():
    # Two cores, the crossing measured two: a holds one, so it starts at once on the
    # other (it does not wait for two), and k (at 0.5) takes the core a leaves.
    trace = _crossing_beside_kernels(2.0, TENSORFLOW, cores=2)
    ops, [(_, start, end)] = _times(trace)
    assert (start, end) == pytest.approx((0.0, 1.0)) and ops["k"] == pytest.approx((0.5, 1.5))
    # One core and two measured: it holds the host's one, as if it measured one.
    assert _times(_crossing_beside_kernels(2.0, TENSORFLOW)) == \
        _times(_crossing_beside_kernels(1.0, TENSORFLOW))


@pytest.mark.parametrize("order", ["static", "ready"])
def test_without_measured_cores_the_model_predicts_what_ideal_does(order):
    def run(model, busy):
        g = tf.Graph()
        with g.as_default():
            for i in range(3):
                x = tf.constant(np.ones((4,), np.float32), name=f"c{i}")
                tf.identity(tf.identity(x, name=f"m{i}"), name=f"r{i}")
        cluster = Cluster.from_spec({"ps": ["h:1"], "worker": ["h:2"]},
                                    hosts={("ps", 0): "h", ("worker", 0): "h"}, cpu_cores=1)
        cluster = cluster.replace_link("memcpy:h", bandwidth=16.0, latency=0.5,
                                       busy_cores=busy).with_runtime_model(model)
        ps, w = (d.name for d in cluster.devices)
        placement = Placement({**{f"c{i}": ps for i in range(3)},
                               **{f"m{i}": w for i in range(3)}, **{f"r{i}": ps for i in range(3)}})
        trace = simulate(g, placement, cluster, cost_model=FixedCost(default=0.25),
                         config=SimConfig(link_order=order))
        trace.validate(g, cluster)
        return _times(trace)

    assert run(TENSORFLOW, 0.0) == run(IDEAL, 0.0) == run(IDEAL, 2.0)
    assert run(TENSORFLOW, 2.0) != run(IDEAL, 2.0)  # (the crossings hold cores here)


def test_a_control_edge_between_tasks_holds_the_cores_as_a_tiny_crossing_does():
    """TensorFlow sends a control edge as an empty tensor: after its route's wait the
    message holds the host's cores for the rest of the latency, queued with kernels."""
    def run(model):
        g = tf.Graph()
        with g.as_default():
            c = tf.constant(np.ones((1,), np.float32), name="c")
            with tf.control_dependencies([c.op]):
                tf.no_op(name="after")
            tf.identity(tf.constant(np.ones((1,), np.float32), name="a"), name="k")
        cluster = Cluster.from_spec({"ps": ["h:1"], "worker": ["h:2", "h:3"]},
                                    hosts={("ps", 0): "h", ("worker", 0): "h",
                                           ("worker", 1): "h"}, cpu_cores=1)
        cluster = cluster.replace_link("memcpy:h", latency=1.0, wait=0.5,
                                       busy_cores=1.0).with_runtime_model(model)
        ps, w0, w1 = (d.name for d in cluster.devices)
        placement = Placement({"c": ps, "after": w0, "a": w1, "k": w1})
        trace = simulate(g, placement, cluster, cost_model=FixedCost({"k": 1.0}, default=0.0))
        trace.validate(g, cluster)
        return {r.op: r.start for r in trace.ops}, trace.step_time

    # Holding no core, the message arrives after the latency (1 s), as k ends.
    starts, step = run(IDEAL)
    assert starts["after"] == pytest.approx(1.0) and step == pytest.approx(1.0)
    # It waits 0.5 s, then for the core k holds until 1 s, then holds it for 0.5 s.
    starts, step = run(TENSORFLOW)
    assert starts["k"] == pytest.approx(0.0)
    assert starts["after"] == pytest.approx(1.5) and step == pytest.approx(1.5)
