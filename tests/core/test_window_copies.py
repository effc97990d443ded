"""The convolutions' window gathering (im2col / col2im): counted by the op table, priced
by a device's ``window_copy_costs``, beside the roofline."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given, strategies as st

import core as tf
from core.cluster import Cluster, InvalidCluster
from core.costs import StaticCostModel, window_copy_time
from core.dtypes import float32
from core.ops import TensorSpec, get_op_def

SAME1 = {"strides": [1, 1, 1, 1], "padding": "SAME"}


def _conv_specs(x, f, attrs):
    xs, fs = TensorSpec(float32, x), TensorSpec(float32, f)
    return [xs, fs], get_op_def("Conv2D").infer([xs, fs], attrs)


@given(n=st.integers(1, 3), side=st.integers(3, 12), c=st.integers(1, 8),
       k=st.sampled_from([1, 3, 5]), stride=st.integers(1, 3))
def test_a_conv_copies_one_tap_per_output_pixel_and_filter_tap(n, side, c, k, stride):
    attrs = {"strides": [1, stride, stride, 1], "padding": "SAME"}
    ins, outs = _conv_specs((n, side, side, c), (k, k, c, 4), attrs)
    taps, elements = get_op_def("Conv2D").window_copies(ins, outs, attrs)
    _, ho, wo, _ = outs[0].shape
    if k == 1 and stride == 1:  # the input's rows are the matrix: no gathering
        assert (taps, elements) == (0, 0)
    else:
        assert taps == n * ho * wo * k * k and elements == taps * c


def test_the_backprops_copy_what_their_forward_conv_does():
    """Conv2DBackpropFilter gathers the same windows (im2col), Conv2DBackpropInput
    scatters them back (col2im)."""
    attrs = {"strides": [1, 2, 2, 1], "padding": "VALID"}
    (x, f), (y,) = _conv_specs((2, 9, 9, 3), (3, 3, 3, 5), attrs)
    forward = get_op_def("Conv2D").window_copies([x, f], [y], attrs)
    assert forward == (2 * 4 * 4 * 9, 2 * 4 * 4 * 9 * 3)
    assert get_op_def("Conv2DBackpropFilter").window_copies([x, y], [f], attrs) == forward
    assert get_op_def("Conv2DBackpropInput").window_copies([f, y], [x], attrs) == forward
    assert get_op_def("MatMul").window_copies is None


def _graph():
    g = tf.Graph()
    with g.as_default():
        x = tf.constant(0.0, shape=[2, 16, 16, 3], name="x")
        w = tf.constant(0.0, shape=[3, 3, 3, 8], name="w")
        y = tf.nn.conv2d(x, w, [1, 1, 1, 1], "SAME", name="conv")
        tf.nn.relu(y, name="relu")
    return g


def test_the_cost_model_adds_the_copies_to_the_conv_alone():
    g = _graph()
    cpu = Cluster.single_host().devices[0]
    priced = replace(cpu, window_copy_costs=(3e-9, 4e-11))
    model = StaticCostModel()
    conv, relu = g.get_operation_by_name("conv"), g.get_operation_by_name("relu")
    taps = 2 * 16 * 16 * 9
    added = model.op_time(conv, priced) - model.op_time(conv, cpu)
    assert added == pytest.approx((taps * 3e-9 + taps * 3 * 4e-11) / cpu.intra_op_speedup)
    assert model.op_time(relu, priced) == model.op_time(relu, cpu)
    # beside the roofline: the kernel's calibrated factor does not scale it
    fitted = priced.replace_kernel_costs({"Conv2D": (1e-6, 3.0)})
    base = cpu.replace_kernel_costs({"Conv2D": (1e-6, 3.0)})
    assert model.op_time(conv, fitted) - model.op_time(conv, base) == pytest.approx(added)
    assert window_copy_time(conv.op_def, [t.spec for t in conv.inputs],
                            [t.spec for t in conv.outputs], conv.attrs, cpu) == 0.0


@pytest.mark.parametrize("bad", [(1e-9,), (1e-9, -1.0), (float("inf"), 0.0), ("a", 0.0),
                                 (True, 0.0)])
def test_bad_window_copy_costs_are_refused_naming_the_device(bad):
    cpu = Cluster.single_host().devices[0]
    with pytest.raises(InvalidCluster, match="window_copy_costs"):
        replace(cpu, window_copy_costs=bad)


def test_the_costs_survive_a_save_and_an_old_file_without_them_loads(tmp_path):
    cluster = Cluster.single_host()
    cpu = cluster.devices[0].name
    priced = cluster.replace_device(cpu, window_copy_costs=(3e-9, 4e-11))
    path = tmp_path / "c.json"
    priced.save(path)
    assert Cluster.load(path).devices[0].window_copy_costs == (3e-9, 4e-11)
    data = json.loads(path.read_text())
    for device in data["devices"]:
        del device["window_copy_costs"]
    path.write_text(json.dumps(data))
    assert Cluster.load(path).devices[0].window_copy_costs == ()
