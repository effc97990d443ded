"""A device's memory rate by working set, and a host's bandwidth shared by kernels at once."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, strategies as st

import core as tf
from core.cluster import Cluster, InvalidCluster, bandwidth_at
from core.costs import StaticCostModel

CURVE = ((1 << 20, 90e9), (12 << 20, 60e9), (192 << 20, 16e9))


def _cluster():
    cluster = Cluster.single_host(cpu_cores=2)
    cpu = cluster.devices[0].name
    return (cluster.replace_device(cpu, bandwidth_curve=CURVE)
            .replace_host("host0", shared_bandwidth=((2 << 20, 170e9), (384 << 20, 17e9))))


def test_the_curve_is_read_between_its_points_on_a_log_axis_and_flat_outside():
    assert bandwidth_at(CURVE, 1) == 90e9 and bandwidth_at(CURVE, 1 << 40) == 16e9
    assert bandwidth_at(CURVE, 12 << 20) == 60e9
    middle = bandwidth_at(CURVE, 3 << 20)  # between 1 and 12 MiB
    assert 60e9 < middle < 90e9


@given(st.integers(1, 1 << 34), st.integers(1, 1 << 34))
def test_the_rate_falls_with_the_working_set_where_the_points_do(a, b):
    small, large = sorted((a, b))
    assert bandwidth_at(CURVE, small) >= bandwidth_at(CURVE, large)


def test_a_device_without_a_curve_keeps_its_one_figure():
    d = Cluster.single_host().devices[0]
    assert d.bandwidth_curve == () and d.bandwidth_at(1 << 30) == d.mem_bandwidth


def test_curves_round_trip_through_json_and_old_files_still_load(tmp_path):
    cluster = _cluster()
    path = tmp_path / "c.json"
    cluster.save(path)
    assert Cluster.load(path) == cluster
    data = json.loads(path.read_text())
    for d in data["devices"]:
        del d["bandwidth_curve"]
    for h in data["hosts"]:
        del h["shared_bandwidth"]
    old = Cluster.from_dict(data)
    assert old.devices[0].bandwidth_curve == () and old.hosts[0].shared_bandwidth == ()


@pytest.mark.parametrize("points, message", [
    ([(0, 1e9)], "positive"),
    ([(10, -1.0)], "positive"),
    ([(10, 1e9), (10, 2e9)], "two points for one size"),
    (["nonsense"], "pairs"),
])
def test_a_bad_curve_is_refused_naming_the_device(points, message):
    cpu = Cluster.single_host().devices[0].name
    with pytest.raises(InvalidCluster, match=message) as e:
        Cluster.single_host().replace_device(cpu, bandwidth_curve=points)
    assert "cpu:0" in str(e.value).lower() or "CPU:0" in str(e.value)


def test_the_cost_model_reads_the_rate_at_the_ops_working_set():
    cluster = _cluster()
    cpu = cluster.devices[0]
    g = tf.Graph()
    with g.as_default():
        small = tf.add(tf.zeros([1 << 14]), tf.zeros([1 << 14]))    # 192 KiB moved
        large = tf.add(tf.zeros([1 << 24]), tf.zeros([1 << 24]))    # 192 MiB moved
    model = StaticCostModel()
    per_byte = [(model.op_time(t.op, cpu) - cpu.op_overhead) / model.memory_traffic(t.op, cpu)[0]
                for t in (small, large)]
    assert per_byte[0] == pytest.approx(1 / 90e9) and per_byte[1] == pytest.approx(1 / 16e9)
    nbytes, seconds = model.memory_traffic(large.op, cpu)
    assert nbytes == 3 * 4 << 24 and seconds == pytest.approx(nbytes / 16e9)


def test_ops_that_forward_their_input_move_nothing():
    cpu = Cluster.single_host().devices[0]
    g = tf.Graph()
    with g.as_default():
        x = tf.zeros([1 << 20])
        views = [tf.identity(x), tf.reshape(x, [1024, 1024]), tf.stop_gradient(x)]
    model = StaticCostModel()
    for v in views:
        assert model.op_time(v.op, cpu) == cpu.op_overhead
        assert model.memory_traffic(v.op, cpu) == (0, 0.0)
