"""The simulator charges the calibrated fixed costs of a distributed step: the master's
step overhead, the RunGraph call per other involved task, and a link's latency."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import core as tf
from core.cluster import Cluster, ClusterSpec
from core.placement import Placement
from core.runtime_model import RuntimeModel
from sim import SimConfig, simulate
from sim.engine import step_start_times

SPEC = ClusterSpec({"ps": ["127.0.0.1:0"], "worker": ["127.0.0.1:0", "127.0.0.1:0"]})
HOSTS = {("ps", 0): "h", ("worker", 0): "h", ("worker", 1): "h"}
PS, W0, W1 = ("/job:ps/replica:0/task:0/device:CPU:0", "/job:worker/replica:0/task:0/device:CPU:0",
              "/job:worker/replica:0/task:1/device:CPU:0")


def cluster(step=0.0, part=0.0, latency=None):
    c = Cluster.from_spec(SPEC, hosts=HOSTS)
    c = Cluster(c.hosts, [replace(t, step_overhead=step, part_overhead=part) for t in c.tasks],
                c.devices, c.links, c.master, c.nvlink)
    if latency is not None:
        c = c.replace_link("memcpy:h", latency=latency)
    return c


def two_ops(dev_a, dev_b):
    g = tf.Graph()
    with g.as_default():
        with tf.device(dev_a):
            a = tf.constant(np.float32(1.0), name="a")
        with tf.device(dev_b):
            tf.identity(a, name="b")
    return g, Placement({"a": dev_a, "b": dev_b})


def test_step_overhead_shows_up_in_step_time():
    g, p = two_ops(W0, W0)
    base = simulate(g, p, cluster()).step_time
    charged = simulate(g, p, cluster(step=1e-3)).step_time
    assert charged == pytest.approx(base + 1e-3)
    trace = simulate(g, p, cluster(step=1e-3))
    assert min(r.start for r in trace.ops) == pytest.approx(1e-3)


def test_each_other_task_pays_its_rungraph_call():
    c = cluster(step=1e-3, part=2e-4)
    assert c.master == ("worker", 0)
    assert step_start_times(c, [c.device(W0)]) == [pytest.approx(1e-3)]
    # ps then worker:1 are called in (job, task) order, then the master runs its part.
    starts = step_start_times(c, [c.device(PS), c.device(W0), c.device(W1)])
    assert starts == [pytest.approx(1.2e-3), pytest.approx(1.4e-3), pytest.approx(1.4e-3)]
    g, p = two_ops(PS, W0)
    trace = simulate(g, p, c)
    by_op = {r.op: r for r in trace.ops}
    assert by_op["a"].start == pytest.approx(1.2e-3)
    assert by_op["b"].start >= 1.2e-3 - 1e-12  # not before the master started its part
    trace.validate(g, c)


def test_parts_together_start_when_the_master_has_made_every_call():
    c = cluster(step=1e-3, part=2e-4, latency=1e-4)
    devices = [c.device(PS), c.device(W0), c.device(W1)]
    assert step_start_times(c, devices, together=True) == [pytest.approx(1.4e-3)] * 3
    assert step_start_times(c, devices[1:2], together=True) == [pytest.approx(1e-3)]
    # The ps's tensor, made at the step's start, no longer crosses while the master
    # calls worker 1: the master's op waits the crossing out after its part starts.
    g3, p3 = two_ops(PS, W0)
    with g3.as_default(), tf.device(W1):
        tf.identity(tf.constant(np.float32(2.0), name="c"), name="d")
    p3 = Placement({**dict(p3), "c": W1, "d": W1})
    seq = simulate(g3, p3, c)
    tog = simulate(g3, p3, c, config=SimConfig(runtime=RuntimeModel(parts_together=True)))
    seq_b = next(r for r in seq.ops if r.op == "b")
    tog_b = next(r for r in tog.ops if r.op == "b")
    assert seq_b.start == pytest.approx(1.4e-3)            # the crossing hidden (1.2 + 0.1 ms)
    assert tog_b.start >= 1.5e-3 and tog_b.start == pytest.approx(1.5e-3, abs=1e-5)  # waits
    assert tog.step_time > seq.step_time
    tog.validate(g3, c)
    # One task alone: no calls, the same step either way.
    g1, p1 = two_ops(W0, W0)
    assert simulate(g1, p1, c, config=SimConfig(runtime=RuntimeModel(parts_together=True))
                    ).step_time == pytest.approx(simulate(g1, p1, c).step_time)


def test_a_crossing_pays_the_link_latency():
    g, p = two_ops(PS, W0)
    fast = simulate(g, p, cluster(latency=0.0)).step_time
    slow = simulate(g, p, cluster(latency=5e-4)).step_time
    assert slow == pytest.approx(fast + 5e-4)


def test_same_input_same_trace_with_overheads():
    g, p = two_ops(PS, W1)
    c = cluster(step=1e-3, part=3e-4, latency=1e-4)
    assert simulate(g, p, c) == simulate(g, p, c)


def test_overheads_round_trip_and_old_files_load(tmp_path):
    c = cluster(step=1e-3, part=2e-4)
    assert Cluster.from_dict(c.to_dict()) == c
    old = c.to_dict()
    for t in old["tasks"]:  # a file written before the fields existed
        del t["step_overhead"], t["part_overhead"]
    assert Cluster.from_dict(old) == cluster()
    bad = c.to_dict()
    bad["tasks"][0]["part_overhead"] = -1.0
    with pytest.raises(Exception, match="part_overhead"):
        Cluster.from_dict(bad)
