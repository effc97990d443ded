"""GraphDef import/export (core.graph_def): round trips, TF's spellings, bad input.

No TensorFlow here; tests/interop/test_tensorflow.py checks the same against TF itself.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from google.protobuf import text_format

import core as tf
from core.graph_def import (GraphDefError, UnsupportedOpError, graph_to_graph_def,
                            import_graph_def, read_graph_def, tensor_from_proto,
                            tensor_to_proto, write_graph)
from core.protos import tf_graph_pb2 as pb
from strategies import dags


def _signature(graph, prefix=""):
    """What an import must keep of each op (names without ``prefix``)."""
    out = {}
    for op in graph.get_operations():
        attrs = {k: (v.tolist() if isinstance(v, np.ndarray) else v)
                 for k, v in op.attrs.items()}
        if "axis" in attrs and attrs["axis"] is None:  # TF writes "every axis" out
            attrs["axis"] = tuple(range(len(op.inputs[0].shape)))
        out[op.name[len(prefix):]] = (
            op.type, [t.name[len(prefix):] for t in op.inputs],
            sorted(c.name[len(prefix):] for c in op.control_inputs), op.device,
            sorted(g[len("loc:@"):][len(prefix):] for g in op.colocation_groups()), attrs,
            [(t.dtype, t.shape) for t in op.outputs])
    return out


def _reimport(graph, name=""):
    h = tf.Graph()
    with h.as_default():
        import_graph_def(graph.as_graph_def().SerializeToString(), name=name)
    return h


@settings(max_examples=25)
@given(dags(max_ops=12))
def test_random_graphs_round_trip_with_names_devices_colocation_and_controls(drawn):
    g, _ = drawn
    h = _reimport(g)
    assert _signature(h) == _signature(g)
    h.validate()


def test_every_table_op_kind_round_trips_with_const_inputs_folded():
    g = tf.Graph()
    with g.as_default(), tf.device("/job:worker/task:1"):
        x = tf.placeholder(tf.float32, (None, 4), name="x")
        w = tf.Variable(np.arange(12, dtype=np.float32).reshape(4, 3), name="w")
        h = tf.matmul(x, w, transpose_b=False)
        r = tf.reshape(tf.transpose(tf.softmax(h)), (1, -1))
        c = tf.concat([r, r], axis=1)
        s = tf.slice(c, [0, 1], [1, 4])
        m = tf.reduce_mean(tf.broadcast_to(s, (2, 4)), axis=0, keepdims=True)
        tot = tf.reduce_sum(-m) + tf.reduce_sum(h, axis=[1])
        tf.assign_sub(w, w.value())
        tf.global_variables_initializer()
    gd = g.as_graph_def()
    by_name = {n.name: n for n in gd.node}
    # TensorFlow's spellings and its const inputs.
    assert by_name["w"].op == "VariableV2" and by_name[tot.op.name].op == "AddV2"
    assert by_name[c.op.name].op == "ConcatV2"
    assert list(by_name[c.op.name].input) == [r.op.name, r.op.name, "concat/axis"]
    assert list(by_name[s.op.name].input)[1:] == ["Slice/begin", "Slice/size"]
    assert by_name[m.op.name].attr["keep_dims"].b is True
    assert by_name[m.op.name].attr["Tidx"].type == pb.DT_INT32
    assert [x.decode() for x in by_name["w/Assign"].attr["_class"].list.s] == ["loc:@w"]
    assert by_name["x"].attr["shape"].shape.dim[0].size == -1
    assert {n.device for n in gd.node} == {"/job:worker/task:1"}
    # Back: the Const nodes folded into attrs are not imported; the rest is as built.
    h = _reimport(g, name="imp")
    assert _signature(h, "imp/") == _signature(g)


def test_softmax_grad_is_written_as_tensorflow_ops():
    g = tf.Graph()
    with g.as_default():
        x = tf.constant(np.ones((2, 3), np.float32))
        (dx,) = tf.gradients(tf.reduce_sum(tf.softmax(x)), [x])
    gd = graph_to_graph_def(g)
    ops = {n.name: n.op for n in gd.node}
    assert "SoftmaxGrad" not in ops.values()
    assert ops[dx.op.name] == "Mul"


def test_text_and_binary_files_and_prefixes(tmp_path):
    g = tf.Graph()
    with g.as_default():
        a = tf.constant(2.0, name="a")
        with tf.control_dependencies([a]):
            tf.constant(3.0, name="b")
    text = write_graph(g, tmp_path, "g.pbtxt")
    binary = write_graph(g, tmp_path, "g.pb", as_text=False)
    assert text_format.Parse(open(text).read(), pb.GraphDef()) == read_graph_def(binary)[0]
    h = tf.Graph()
    with h.as_default():
        first = import_graph_def(text, return_elements=["b:0", "a"])
        second = import_graph_def(binary, return_elements=["b"])
    assert first[0].name == "import/b:0" and first[1].name == "import/a"
    assert second[0].name == "import_1/b"
    assert [c.name for c in second[0].control_inputs] == ["import_1/a"]
    assert import_graph_def(g.as_graph_def(), name="again") is None


def test_tensor_protos_read_typed_value_fields_and_fill_with_the_last():
    tp = pb.TensorProto(dtype=pb.DT_INT32, float_val=[], int_val=[7, 8],
                        tensor_shape=pb.TensorShapeProto(dim=[pb.TensorShapeProto.Dim(size=4)]))
    np.testing.assert_array_equal(tensor_from_proto(tp), [7, 8, 8, 8])
    half = np.array([1.5, -2.0], np.float16)
    tp = pb.TensorProto(dtype=pb.DT_HALF, half_val=half.view(np.uint16).tolist(),
                        tensor_shape=pb.TensorShapeProto(dim=[pb.TensorShapeProto.Dim(size=2)]))
    np.testing.assert_array_equal(tensor_from_proto(tp), half)
    for value in (np.float64(3.5), np.array([[True, False]]), np.arange(6, dtype=np.int64)):
        back = tensor_from_proto(tensor_to_proto(value))
        assert back.dtype == np.asarray(value).dtype and back.shape == np.shape(value)
        np.testing.assert_array_equal(back, value)


def test_input_map_replaces_inputs_and_unmatched_keys_are_named():
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, (2,), name="x")
        tf.multiply(x, 3.0, name="y")
    h = tf.Graph()
    with h.as_default():
        z = tf.constant([1.0, 2.0], name="z")
        (y,) = import_graph_def(g.as_graph_def(), input_map={"x": z}, return_elements=["y:0"])
        assert y.op.inputs[0] is z
        with pytest.raises(GraphDefError, match=r"\['nope:0'\]"):
            import_graph_def(g.as_graph_def(), input_map={"nope:0": z})


def _graph_def(text: str) -> pb.GraphDef:
    return text_format.Parse(text, pb.GraphDef())


def test_unsupported_op_types_are_listed_once_with_counts():
    gd = _graph_def("""
        node { name: "a" op: "VarHandleOp" } node { name: "b" op: "VarHandleOp" }
        node { name: "c" op: "ReadVariableOp" input: "a" } node { name: "d" op: "NoOp" }""")
    with tf.Graph().as_default(), pytest.raises(UnsupportedOpError) as info:
        import_graph_def(gd)
    assert info.value.counts == {"VarHandleOp": 2, "ReadVariableOp": 1}
    message = str(info.value)
    assert "ReadVariableOp (1 node)" in message and "VarHandleOp (2 nodes)" in message


def test_bad_graphs_name_what_is_wrong(tmp_path):
    with tf.Graph().as_default():
        with pytest.raises(GraphDefError, match="node 'b' has input 'ghost'"):
            import_graph_def(_graph_def('node { name: "b" op: "Identity" input: "ghost" }'))
        with pytest.raises(tf.GraphCycleError) as info:
            import_graph_def(_graph_def("""
                node { name: "n1" op: "NoOp" input: "^n2" }
                node { name: "n2" op: "NoOp" input: "^n1" }"""))
        assert sorted(info.value.cycle) == ["n1", "n2"]
        with pytest.raises(GraphDefError, match="needs a consumer of version >= 9999"):
            import_graph_def(_graph_def("versions { producer: 9999 min_consumer: 9999 }"))
        with pytest.raises(UnsupportedOpError, match="older version of ConcatV2"):
            import_graph_def(_graph_def('node { name: "c" op: "Concat" }'))
        with pytest.raises(GraphDefError, match="DT_STRING is not supported"):
            import_graph_def(_graph_def("""node { name: "s" op: "Placeholder"
                attr { key: "dtype" value { type: DT_STRING } }
                attr { key: "shape" value { shape { } } } }"""))
        with pytest.raises(GraphDefError, match="attribute 'f'.*func"):
            import_graph_def(_graph_def("""node { name: "n" op: "NoOp"
                attr { key: "f" value { func { name: "g" } } } }"""))
        dynamic = """
            node { name: "x" op: "Placeholder" attr { key: "dtype" value { type: DT_INT32 } }
                   attr { key: "shape" value { shape { dim { size: 2 } } } } }
            node { name: "r" op: "%s" input: "x" input: "x"
                   attr { key: "_output_shapes" value { list { shape { dim { size: 2 }
                                                                      dim { size: -1 } } } } } }"""
        with pytest.raises(GraphDefError, match="must come from a Const node"):
            import_graph_def(_graph_def(dynamic % "Transpose"))
        # Reshape takes a shape known only at run time; TF's inferred shape is kept.
        (r,) = import_graph_def(_graph_def(dynamic % "Reshape"), return_elements=["r:0"])
        assert len(r.op.inputs) == 2 and r.shape == (2, None)
    good = tf.Graph()
    with good.as_default():
        tf.reshape(tf.constant(np.ones((2, 3), np.float32)), (3, 2))
    data = good.as_graph_def().SerializeToString()
    cut = tmp_path / "cut.pb"
    cut.write_bytes(data[: len(data) // 2])
    garbled = tmp_path / "garbled.pb"
    garbled.write_bytes(b"\xff\xfe not a graph " * 5)
    for path in (cut, garbled):
        with tf.Graph().as_default(), pytest.raises(GraphDefError) as info:
            import_graph_def(str(path))
        assert str(path) in str(info.value) and "not a binary GraphDef" in str(info.value)
    with pytest.raises(GraphDefError, match="missing.pb"):
        read_graph_def(tmp_path / "missing.pb")


def test_device_scopes_around_an_import_apply_as_to_new_ops():
    g = tf.Graph()
    with g.as_default():
        with tf.device("/device:CPU:0"):
            tf.constant(1.0, name="pinned")
        tf.constant(2.0, name="free")
    h = tf.Graph()
    with h.as_default(), tf.device("/job:worker/task:1"):
        pinned, free = import_graph_def(g.as_graph_def(), return_elements=["pinned", "free"])
    assert pinned.device == "/job:worker/task:1/device:CPU:0"
    assert free.device == "/job:worker/task:1"
