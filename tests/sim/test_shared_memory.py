"""Kernels at once on one host share its memory bandwidth (sim.pools.HostMemory)."""

from __future__ import annotations

import pytest

import core as tf
import sim
from core.cluster import Cluster
from core.costs import StaticCostModel
from core.placement import Placement

N = 1 << 20  # elements: an Add moves 12 MiB


def _two_adds(cluster, on=None):
    g = tf.Graph()
    with g.as_default():
        xs = [tf.Variable(tf.zeros([N]), name=f"x{i}") for i in range(4)]
        a = tf.add(xs[0], xs[1], name="a")
        b = tf.add(xs[2], xs[3], name="b")
    device = on or cluster.devices[0].name
    placement = Placement({op.name: device for op in g.get_operations()})
    return g, placement, [a, b]


def _cluster(shared=None):
    cluster = Cluster.single_host(cpu_cores=2, gpus=1)
    if shared is not None:
        cluster = cluster.replace_host("host0", shared_bandwidth=shared)
    return cluster


def _durations(trace):
    return {r.op: r.end - r.start for r in trace.ops if r.op in ("a", "b")}


def test_two_streaming_kernels_at_once_share_what_the_host_serves():
    served = 10e9  # well below what the two ask for
    plain, shared = _cluster(), _cluster(((1 << 20, served),))
    g, placement, fetches = _two_adds(plain)
    alone = _durations(sim.simulate(g, placement, plain, fetches=fetches))
    together = _durations(sim.simulate(g, placement, shared, fetches=fetches))
    cpu = plain.devices[0]
    nbytes, seconds = StaticCostModel().memory_traffic(g.get_operation_by_name("a"), cpu)
    asked = 2 * nbytes / seconds
    first, second = sorted(together, key=lambda op: together[op])
    assert together[first] == pytest.approx(alone[first])  # started alone
    assert together[second] == pytest.approx(alone[second] + seconds * (asked / served - 1))


def test_no_slowdown_when_the_host_serves_what_they_ask():
    plain, roomy = _cluster(), _cluster(((1 << 20, 1e15),))
    g, placement, fetches = _two_adds(plain)
    assert _durations(sim.simulate(g, placement, roomy, fetches=fetches)) == pytest.approx(
        _durations(sim.simulate(g, placement, plain, fetches=fetches)))


def test_one_kernel_at_a_time_is_never_slowed():
    shared = _cluster(((1 << 20, 1e9),))
    g, placement, fetches = _two_adds(shared)
    config = sim.SimConfig(inter_op_threads=1)
    slow = sim.simulate(g, placement, shared, fetches=fetches, config=config)
    plain = sim.simulate(g, placement, _cluster(), fetches=fetches, config=config)
    assert slow.step_time == pytest.approx(plain.step_time)


def test_gpu_kernels_do_not_share_the_hosts_memory():
    shared = _cluster(((1 << 20, 1e9),))
    gpu = next(d.name for d in shared.devices if not d.is_cpu)
    g, placement, fetches = _two_adds(shared, on=gpu)
    assert sim.simulate(g, placement, shared, fetches=fetches).step_time == pytest.approx(
        sim.simulate(g, placement, _cluster(), fetches=fetches).step_time)


def test_the_trace_is_still_valid_and_repeatable_with_sharing():
    shared = _cluster(((1 << 20, 5e9), (1 << 26, 2e9)))
    g, placement, fetches = _two_adds(shared)
    first = sim.simulate(g, placement, shared, fetches=fetches)
    first.validate(g)
    assert sim.simulate(g, placement, shared, fetches=fetches).ops == first.ops
