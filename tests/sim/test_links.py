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
