"""Tests of runtime.graph_codec: graphs, tensors, errors and step stats as protobuf."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import core as tf
from core.placement import PlacementError
from core.serialize import graph_to_nodes, nodes_to_graph
from core.trace import MemoryRecord, OOMEvent, OpRecord, TransferRecord
from runtime import errors
from runtime.graph_codec import (CodecError, add_named_tensors, attr_from_proto, attr_to_proto,
                                 error_from_proto, error_to_proto, graph_to_proto,
                                 named_tensors, nodes_from_proto, stats_from_proto,
                                 stats_to_proto, tensor_from_proto, tensor_to_proto,
                                 tensors_from_proto)
from runtime.protos import graph_pb2, master_pb2


def _graph():
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, (None, 2), name="x")
        with tf.device("/job:ps/task:1"):
            v = tf.Variable([[1.0, 2.0]], name="v")
        y = tf.reduce_sum(x * v, axis=1)
        with tf.control_dependencies([y]):
            z = tf.slice(x, [0, 0], [1, 1])
        tf.constant(np.arange(6, dtype=np.int64).reshape(2, 3), name="k")
        tf.constant(True, name="flag")
        tf.global_variables_initializer()
    return g


def test_graph_round_trip_keeps_names_devices_edges_colocation_and_attrs():
    g = _graph()
    nodes = graph_to_nodes(g.get_operations())
    wire_bytes = graph_to_proto(nodes).SerializeToString()
    back = nodes_from_proto(graph_pb2.GraphDef.FromString(wire_bytes).node)
    assert len(back) == len(nodes)
    for a, b in zip(nodes, back):
        assert {k: a[k] for k in a if k != "attrs"} == {k: b[k] for k in b if k != "attrs"}
        assert a["attrs"].keys() == b["attrs"].keys()
        for key, value in a["attrs"].items():
            if isinstance(value, np.ndarray):
                assert b["attrs"][key].dtype == value.dtype
                np.testing.assert_array_equal(b["attrs"][key], value)
            else:
                assert b["attrs"][key] == value and type(b["attrs"][key]) is type(value)
    h = nodes_to_graph(back)
    assert [op.name for op in h.get_operations()] == [op.name for op in g.get_operations()]
    assert h.get_operation_by_name("v").device == "/job:ps/task:1"


@pytest.mark.parametrize("value", [None, True, False, 0, -5, 2**40, 1.5, "float32", (), (None, 3),
                                   (1, 2, 3)])
def test_attr_values_round_trip(value):
    back = attr_from_proto("op", "k", attr_to_proto("op", "k", value))
    assert back == value and type(back) is type(value)


def test_attr_that_cannot_be_encoded_is_an_error_naming_op_and_key():
    with pytest.raises(CodecError, match="'op'.*'k'"):
        attr_to_proto("op", "k", {"a": 1})


@given(hnp.arrays(st.sampled_from([np.float32, np.float64, np.int32, np.int64, np.bool_,
                                   np.float16, np.uint8]),
                  hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)))
def test_tensor_round_trip(arr):
    back = tensor_from_proto(tensor_to_proto(arr))
    assert back.dtype == arr.dtype and back.shape == arr.shape
    np.testing.assert_array_equal(back, arr)
    assert back.flags.writeable


def test_named_tensors_added_in_place_are_the_same_messages():
    values = {"a:0": np.arange(6, dtype=np.float32).reshape(2, 3), "b:0": np.int64(7),
              "c:0": np.zeros((0, 4), np.float16), "d:0": [True, False]}
    built = master_pb2.RunStepResponse(values=named_tensors(values))
    added = master_pb2.RunStepResponse()
    add_named_tensors(added.values, values)
    assert added.SerializeToString() == built.SerializeToString()
    back = tensors_from_proto(added.values)
    assert list(back) == list(values)
    for name, value in values.items():
        np.testing.assert_array_equal(back[name], value)
    with pytest.raises(CodecError, match="cannot cross the wire"):
        add_named_tensors(added.values, {"s:0": np.array(["a"])})


def test_tensor_checks_on_arrival():
    proto = tensor_to_proto(np.ones((2, 3), np.float32), "x:0")
    with pytest.raises(CodecError, match="dtype"):
        tensor_from_proto(proto, "x:0", expected_dtype="int32")
    with pytest.raises(CodecError, match="shape"):
        tensor_from_proto(proto, "x:0", expected_shape=(3, None))
    proto.data = proto.data[:-4]
    with pytest.raises(CodecError, match="bytes"):
        tensor_from_proto(proto, "x:0")
    with pytest.raises(CodecError, match="cannot cross the wire"):
        tensor_to_proto(np.array(["a"]))


@pytest.mark.parametrize("err", [
    errors.OpError("mul", "/job:worker/replica:0/task:0/device:CPU:0", "boom"),
    errors.FailedPrecondition("Attempting to use uninitialized value v", "v"),
    errors.InvalidArgument("bad feed"),
    errors.DeadlineExceeded("late", ["a", "b"]),
    errors.Unavailable("/job:worker/replica:0/task:1", "gone"),
    errors.NotFound("no such tensor"),
    PlacementError("Variable", "/device:GPU:0", "no GPU"),
])
def test_errors_round_trip_as_the_same_class(err):
    back = error_from_proto(graph_pb2.ErrorStatus.FromString(
        error_to_proto(err, "/job:ps/replica:0/task:0").SerializeToString()))
    assert type(back) is type(err)
    assert str(back) == str(err)
    for attr in ("op", "device", "name", "task", "waiting", "reason"):
        assert getattr(back, attr, None) == getattr(err, attr, None)


def test_foreign_errors_map_to_runtime_errors():
    assert type(error_from_proto(error_to_proto(KeyError("k")))) is errors.NotFound
    assert type(error_from_proto(error_to_proto(ValueError("v")))) is errors.InvalidArgument
    assert type(error_from_proto(error_to_proto(OSError("o")))) is errors.LabRuntimeError
    sub = CodecError("odd")  # a subclass of InvalidArgument travels as InvalidArgument
    assert type(error_from_proto(error_to_proto(sub))) is errors.InvalidArgument


def test_step_stats_round_trip():
    ops = [OpRecord("a", "Const", "/cpu:0", 1, 0.5, 0.75, 2)]
    transfers = [TransferRecord("a:0", "/cpu:0", "/cpu:1", ("net",), 4, 0.8, 0.9)]
    memory = [MemoryRecord("/cpu:0", 0.5, 4)]
    oom = [OOMEvent(0.5, "/cpu:0", "a", None, 4, 0, 2), OOMEvent(0.6, "/cpu:0", "b", "a:0", 4, 0, 2)]
    sends = [("a:0", "/cpu:1", 0.76, 0.79)]
    s = stats_from_proto(graph_pb2.StepStats.FromString(stats_to_proto(
        ops, transfers, memory, oom, sends, {"/cpu:0": 10}, 0.5, 1.0).SerializeToString()))
    assert s == {"ops": ops, "transfers": transfers, "memory": memory, "oom": oom,
                 "sends": sends, "capacity": {"/cpu:0": 10}, "start": 0.5, "end": 1.0}
