"""Link contention: the static order is monotone in bandwidth, the ready order is not."""

from __future__ import annotations

import numpy as np
import pytest

import core as tf
from core.cluster import Cluster
from core.placement import Placement
from sim import SimConfig, simulate

from strategies import FixedCost


def overtaking_case():
    """Host A sends T (4 B) to C over A's slow card; C turns it into H (20 B) for B.
    C also makes I (4 B, at t=3) for B, where a 100 s op waits for it.  H and I share
    C's and B's cards.  Doubling A's card delivers T sooner, so H reaches the card
    before I and, first come first served, delays the critical I."""
    g = tf.Graph()
    with g.as_default():
        t = tf.constant(np.ones((1,), np.float32), name="p0")
        h = tf.broadcast_to(t, (5,), name="q")
        i = tf.constant(np.ones((1,), np.float32), name="r")
        tf.identity(h, name="hc")
        tf.identity(i, name="tail")
    cluster = Cluster.from_spec({"worker": ["a:1", "b:1", "c:1"]}, network_bandwidth=2.0,
                                network_latency=0.0)
    a, b, c = (d.name for d in cluster.devices)
    placement = Placement({"p0": a, "q": c, "r": c, "hc": b, "tail": b})
    cost = FixedCost({"r": 3.0, "tail": 100.0}, default=0.0)
    slow = cluster.replace_link("network:host0", bandwidth=1.0)
    return g, placement, cost, slow, cluster


def test_first_come_first_served_can_be_slower_on_a_faster_link():
    g, placement, cost, slow, fast = overtaking_case()
    ready = SimConfig(link_order="ready")
    before = simulate(g, placement, slow, cost_model=cost, config=ready).step_time
    after = simulate(g, placement, fast, cost_model=cost, config=ready).step_time
    assert (before, after) == (pytest.approx(106.0), pytest.approx(114.0))


def test_the_static_order_is_not():
    g, placement, cost, slow, fast = overtaking_case()
    before = simulate(g, placement, slow, cost_model=cost).step_time
    after = simulate(g, placement, fast, cost_model=cost).step_time
    assert after <= before
    assert (before, after) == (pytest.approx(116.0), pytest.approx(114.0))


def test_a_link_carries_one_transfer_at_a_time():
    g, placement, cost, slow, _ = overtaking_case()
    for order in ("static", "ready"):
        trace = simulate(g, placement, slow, cost_model=cost, config=SimConfig(link_order=order))
        by_link: dict = {}
        for x in trace.transfers:
            for link in x.links:
                by_link.setdefault(link, []).append((x.start, x.end))
        for spans in by_link.values():
            spans.sort()
            assert all(e <= s for (_, e), (s, _) in zip(spans, spans[1:]))


def _two_crossings(wait: float, order: str = "static"):
    """The (validated) trace of two 4-byte tensors made at once on the ps and read on
    the worker, over a memcpy link of 1 s latency (``wait`` of it a wait) and 4
    bytes/s; ops take no time."""
    g = tf.Graph()
    with g.as_default():
        for i in range(2):
            tf.identity(tf.constant(np.ones((1,), np.float32), name=f"c{i}"), name=f"r{i}")
    cluster = Cluster.from_spec({"ps": ["h:1"], "worker": ["h:2"]},
                                hosts={("ps", 0): "h", ("worker", 0): "h"})
    cluster = cluster.replace_link("memcpy:h", bandwidth=4.0, latency=1.0, wait=wait)
    ps, worker = (d.name for d in cluster.devices)
    placement = Placement({"c0": ps, "c1": ps, "r0": worker, "r1": worker})
    trace = simulate(g, placement, cluster, cost_model=FixedCost(default=0.0),
                     config=SimConfig(link_order=order))
    trace.validate(g, cluster)
    return trace


@pytest.mark.parametrize("order", ["static", "ready"])
def test_a_links_wait_overlaps_other_transfers_and_its_rest_takes_turns(order):
    # No wait: the whole 2 s (1 s latency, 1 s of bytes) holds the link, one after
    # the other.  Half the latency a wait: both wait 0.5 s at once, then take turns
    # for 1.5 s each.
    for wait, ends in ((0.0, [2.0, 4.0]), (0.5, [2.0, 3.5])):
        trace = _two_crossings(wait, order)
        assert sorted(x.end for x in trace.transfers) == pytest.approx(ends)
        assert trace.step_time == pytest.approx(ends[-1])
