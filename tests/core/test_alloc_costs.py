"""A device's output allocation costs (``Device.alloc_costs``): what allocating a
kernel's output of a size costs beyond a small one's, added beside the roofline."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given, strategies as st

import core as tf
from core.cluster import Cluster, InvalidCluster
from core.costs import StaticCostModel, allocation_time
from core.hardware import alloc_time_at

COSTS = ((1 << 12, 0.0), (1 << 16, 80e-6), (1 << 24, 100e-6))


def _gpu():
    return Cluster.single_host(gpus=1).devices[1]


def _graph():
    g = tf.Graph()
    with g.as_default():
        x = tf.constant(0.0, shape=[128, 256], name="x")          # 128 KiB
        y = tf.nn.relu(x, name="relu")
        tf.reshape(y, [256, 128], name="reshape")                  # forwards its input
        tf.reduce_sum(y, name="sum")                               # 4 bytes out
    return g


def test_the_cost_model_adds_each_output_s_allocation_beside_the_roofline():
    g = _graph()
    gpu, model = _gpu(), StaticCostModel()
    priced = replace(gpu, alloc_costs=COSTS)
    relu, reshape, total = (g.get_operation_by_name(n) for n in ("relu", "reshape", "sum"))
    added = model.op_time(relu, priced) - model.op_time(relu, gpu)
    assert added == pytest.approx(alloc_time_at(COSTS, 128 * 256 * 4))
    assert 80e-6 < added < 100e-6
    assert model.op_time(reshape, priced) == model.op_time(reshape, gpu)  # no buffer of its own
    # ... unless its runtime's kernel copies its input (RuntimeModel.copies_forwarding_ops)
    assert model.copy_time(reshape, priced) - model.copy_time(reshape, gpu) == pytest.approx(added)
    assert model.op_time(total, priced) == model.op_time(total, gpu)      # below the first point
    # not scaled by the kernel's calibrated factor
    fitted = priced.replace_kernel_costs({"Relu": (1e-5, 4.0)})
    base = gpu.replace_kernel_costs({"Relu": (1e-5, 4.0)})
    assert model.op_time(relu, fitted) - model.op_time(relu, base) == pytest.approx(added)
    assert allocation_time(relu.op_def, [t.spec for t in relu.outputs], gpu) == 0.0


@given(st.integers(1, 1 << 30), st.integers(1, 1 << 30))
def test_the_cost_grows_with_the_size_between_points_and_holds_beyond_them(a, b):
    lo, hi = sorted((a, b))
    assert 0.0 <= alloc_time_at(COSTS, lo) <= alloc_time_at(COSTS, hi) <= 100e-6


@pytest.mark.parametrize("bad", [((1024, -1.0),), ((0, 1e-6),), ((1024, float("inf")),),
                                 ((1024, 1e-6), (1024, 2e-6)), ("ab",), ((1024,),)])
def test_bad_alloc_costs_are_refused_naming_the_device(bad):
    with pytest.raises(InvalidCluster, match="alloc_costs"):
        replace(_gpu(), alloc_costs=bad)


def test_the_costs_survive_a_save_and_an_old_file_without_them_loads(tmp_path):
    cluster = Cluster.single_host(gpus=1)
    gpu = cluster.devices[1].name
    path = tmp_path / "c.json"
    cluster.replace_device(gpu, alloc_costs=COSTS).save(path)
    assert Cluster.load(path).device(gpu).alloc_costs == COSTS
    data = json.loads(path.read_text())
    for device in data["devices"]:
        del device["alloc_costs"]
    path.write_text(json.dumps(data))
    assert Cluster.load(path).device(gpu).alloc_costs == ()
