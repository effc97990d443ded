import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import core as tf
from core.devices import DeviceSpec, InvalidDeviceSpec
from core.graph import GraphCycleError, ops_needed, topological_order
from strategies import dags


@pytest.fixture
def g():
    graph = tf.Graph()
    with graph.as_default():
        yield graph


def names(graph):
    return [op.name for op in graph.get_operations()]


def test_default_graph_stack():
    tf.reset_default_graph()
    outer = tf.get_default_graph()
    inner = tf.Graph()
    with inner.as_default():
        assert tf.get_default_graph() is inner
        tf.constant(1.0)
        with pytest.raises(tf.GraphError):
            tf.reset_default_graph()
    assert tf.get_default_graph() is outer and len(inner) == 1
    tf.constant(1.0)
    tf.reset_default_graph()
    assert tf.get_default_graph() is not outer and len(tf.get_default_graph()) == 0


def test_tf_naming(g):
    a = tf.constant(1.0)
    b = tf.constant(2.0)
    c = a + b
    d = a + b
    e = tf.add(a, b)
    f = a * 2
    # As in TensorFlow, names collide case-insensitively: "Add" after "add", "add_1".
    assert names(g) == ["Const", "Const_1", "add", "add_1", "Add_2", "mul/y", "mul"]
    assert (c.name, d.name, e.name, f.name) == ("add:0", "add_1:0", "Add_2:0", "mul:0")
    with tf.name_scope("layer") as scope:
        assert scope == "layer/"
        h = tf.relu(c)
        with tf.name_scope("inner"):
            k = tf.identity(h)
    with tf.name_scope("layer"):
        m = tf.relu(c)
    assert (h.op.name, k.op.name, m.op.name) == ("layer/Relu", "layer/inner/Identity", "layer_1/Relu")
    assert tf.constant(1.0, name="add").op.name == "add_3"


def test_variable_ops_and_accessors(g):
    with tf.device("/cpu:0"):
        a = tf.Variable(3.0, name="a")
    assert names(g) == ["a/initial_value", "a", "a/Assign", "a/read"]
    assert a.op.type == "Variable" and a.name == "a:0" and a.dtype is tf.float32
    assert a.initializer.type == "Assign" and a.initializer.name == "a/Assign"
    for op in g.get_operations():
        assert op.device == "/device:CPU:0"
    assert g.get_operation_by_name("a/read").colocation_groups() == ["loc:@a"]
    assert g.get_operation_by_name("a/Assign").colocation_groups() == ["loc:@a"]
    assert g.get_tensor_by_name("a/read:0") is a.value()
    i = tf.Variable(3)
    assert i.dtype is tf.int32 and i.op.name == "Variable"
    with pytest.raises(KeyError, match="nope"):
        g.get_operation_by_name("nope")
    with pytest.raises(KeyError):
        g.get_tensor_by_name("a:3")
    op = g.get_operation_by_name("a/Assign")
    assert [t.name for t in op.inputs] == ["a:0", "a/initial_value:0"]
    assert op.outputs[0].op is op and op.outputs[0].shape == ()


def test_dtypes_accept_numpy_and_names(g):
    assert tf.as_dtype(np.float32) is tf.float32
    assert tf.as_dtype("int64") is tf.int64
    assert tf.as_dtype(np.dtype("float64")) is tf.float64
    assert tf.placeholder("float32", (None, 3)).shape == (None, 3)
    assert tf.constant(np.zeros(3, np.float64)).dtype is tf.float64
    assert tf.constant(3).dtype is tf.int32
    with pytest.raises(TypeError):
        tf.as_dtype("complex128")


def test_operators_with_scalars_and_tensors(g):
    x = tf.constant(np.ones((2, 3), np.float32))
    w = tf.constant(np.ones((3, 4), np.float32))
    assert (x + 1).shape == (2, 3) and (1 - x).op.type == "Sub"
    assert (2 * x).op.inputs[0].op.name == "mul/x"
    assert (x @ w).shape == (2, 4) and (x @ w).op.type == "MatMul"
    assert (-x).op.type == "Neg"
    v = tf.Variable(np.ones((2, 3), np.float32))
    assert (v + x).op.inputs[0] is v.value()
    i = tf.constant(1)
    with pytest.raises(TypeError):
        i + 2.5


def test_shape_errors_name_the_op(g):
    a = tf.constant(np.ones((2, 3), np.float32))
    b = tf.constant(np.ones((2, 3), np.float32))
    with pytest.raises(tf.ShapeError, match=r"MatMul op 'MatMul'.*inner dimensions"):
        tf.matmul(a, b)
    with pytest.raises(tf.ShapeError, match="broadcast"):
        a + tf.constant(np.ones((4,), np.float32))
    with pytest.raises(tf.ShapeError, match="dtype"):
        a + tf.constant(np.ones((2, 3), np.float64))
    with pytest.raises(tf.ShapeError, match="Assign op"):
        tf.Variable(np.ones(3, np.float32)).assign(np.ones(4, np.float32))
    assert tf.matmul(a, b, transpose_b=True).shape == (2, 2)


def test_device_scope_merging(g):
    with tf.device("/job:ps/task:0/cpu:0"):
        with tf.device("/gpu:1"):
            a = tf.constant(1.0)
            with tf.device("/job:worker"):
                b = tf.constant(1.0)
            with tf.device(""):
                c = tf.constant(1.0)
            with tf.device(None):
                d = tf.constant(1.0)
                with tf.device("/cpu:0"):
                    e = tf.constant(1.0)
    assert a.device == "/job:ps/task:0/device:GPU:1"
    assert b.device == "/job:worker/task:0/device:GPU:1"
    assert c.device == a.device
    assert d.device == "" and e.device == "/device:CPU:0"


def test_device_functions(g):
    def variables_on_cpu(op):
        return "/cpu:0" if op.type == "Variable" else "/gpu:0"

    with tf.device(variables_on_cpu):
        with tf.device("/gpu:3"):
            a = tf.Variable(3.0)
            b = tf.constant(4.0)
        c = a * b
    # An outer function ignores what the inner string set.
    assert a.op.device == "/device:CPU:0" and b.device == "/device:GPU:0"
    assert c.device == "/device:GPU:0"
    seen = []
    with tf.device(lambda op: seen.append(op.device)):
        with tf.device("/task:2"):
            tf.constant(1.0)
    assert seen == ["/task:2"]
    with tf.device(lambda op: None):
        assert tf.constant(1.0).device == ""


def test_malformed_device_raises_when_entering(g):
    with pytest.raises(InvalidDeviceSpec, match="task:x"):
        with tf.device("/task:x"):
            pytest.fail("the block must not run")


def test_control_dependencies(g):
    a = tf.constant(1.0)
    b = tf.constant(2.0)
    with tf.control_dependencies([a, b.op]):
        x = tf.constant(3.0)
        y = a + 1.0  # a is already a data input: no duplicate control edge
        with tf.control_dependencies([x]):
            z = tf.constant(4.0)
            with tf.control_dependencies(None):
                w = tf.constant(5.0)
    assert [op.name for op in x.op.control_inputs] == ["Const", "Const_1"]
    assert [op.name for op in y.op.control_inputs] == ["Const_1"]
    assert [op.name for op in z.op.control_inputs] == ["Const_2", "Const", "Const_1"]
    assert w.op.control_inputs == ()


def test_colocate_with_takes_the_device(g):
    with tf.device("/job:ps/task:1"):
        v = tf.Variable(1.0, name="v")
    with tf.device("/job:worker"):
        with tf.colocate_with(v):
            r = tf.identity(v)
            with tf.device("/cpu:0"):
                s = tf.identity(v)
    assert r.device == "/job:ps/task:1" and r.op.colocation_groups() == ["loc:@v"]
    assert s.device == "/job:ps/task:1/device:CPU:0"


def test_assign_is_colocated_with_its_variable(g):
    v = tf.Variable(1.0, name="v")
    with tf.device("/gpu:0"):
        upd = v.assign_add(2.0)
    assert upd.op.colocation_groups() == ["loc:@v"]


def test_group_and_initializer(g):
    a = tf.Variable(1.0)
    b = tf.Variable(2.0)
    init = tf.global_variables_initializer()
    assert init.type == "NoOp" and init.name == "init"
    assert set(op.name for op in init.control_inputs) == {"Variable/Assign", "Variable_1/Assign"}
    assert tf.global_variables() == [a, b]


def test_cycles_are_detected_and_named(g):
    a = tf.constant(1.0, name="a")
    b = tf.identity(a, name="b")
    c = tf.identity(b, name="c")
    g.validate()
    a.op.add_control_input(c.op)
    with pytest.raises(GraphCycleError) as info:
        topological_order(g.get_operations())
    assert set(info.value.cycle) == {"a", "b", "c"}
    with pytest.raises(GraphCycleError):
        g.validate()


def test_ops_needed_prunes(g):
    a = tf.constant(1.0, name="a")
    b = tf.constant(2.0, name="b")
    c = tf.identity(a, name="c")
    with tf.control_dependencies([b]):
        d = tf.identity(c, name="d")
    tf.identity(b, name="unused")
    assert [op.name for op in ops_needed([d.op])] == ["a", "b", "c", "d"]


def test_tensors_of_another_graph_are_rejected(g):
    a = tf.constant(1.0)
    other = tf.Graph()
    with other.as_default():
        b = tf.constant(1.0)
        with pytest.raises(tf.GraphError):
            tf.get_default_graph().create_op("Add", [a, b])


@given(st.lists(st.sampled_from(["/job:ps", "/task:1", "/gpu:0", "/cpu:1", "", None,
                                 "/job:worker/task:2", "/device:GPU:*", "fn"]), max_size=6))
def test_random_scope_nests_follow_the_merge_rules(nest):
    """Model: walk scopes innermost first; strings fill unset fields, a function's result
    replaces, None stops, "" is skipped."""
    g = tf.Graph()
    with g.as_default():
        stack = []
        for s in nest:
            stack.append(tf.device((lambda op: "/job:fn") if s == "fn" else s))
            stack[-1].__enter__()
        op = tf.constant(1.0).op
        for cm in reversed(stack):
            cm.__exit__(None, None, None)
    expected = DeviceSpec()
    for s in reversed(nest):
        if s == "":
            continue
        if s is None:
            break
        if s == "fn":
            expected = DeviceSpec(job="fn")
        else:
            expected = DeviceSpec.from_string(s).merged(expected)
    assert op.device_spec == expected


def test_colocate_gradients_with_ops_puts_each_layers_backward_pass_on_its_device():
    import placers
    from core.autodiff import gradients
    from core.cluster import Cluster

    g = tf.Graph()
    with g.as_default():
        x = tf.constant(np.ones((4, 8), np.float32), name="x")
        h, params = x, []
        for layer in range(2):
            with tf.device(f"/gpu:{layer}"), tf.name_scope(f"layer{layer}"):
                w = tf.Variable(np.ones((8, 8), np.float32), name="w")
                h = tf.tanh(tf.matmul(h, w))
                params.append(w)
        loss = tf.reduce_sum(h)
        colocated = gradients(loss, params, colocate_gradients_with_ops=True)
        plain = gradients(loss, params, name="plain")
    placement = placers.SimplePlacer().place(g, Cluster.single_host(gpus=2))
    for layer, grad in enumerate(colocated):
        assert placement[grad.op.name].endswith(f"GPU:{layer}")
    backward = [op for op in g.get_operations() if op.name.startswith("gradients/layer1")]
    assert backward and all(placement[op.name].endswith("GPU:1") for op in backward)
    # Without colocation the gradient ops take the scopes at the call: the default device.
    assert placement[plain[1].op.name].endswith("GPU:0")


def test_tensorflow_spellings_of_op_types_build_the_tables_ops():
    from core.ops import OPS, canonical_op_type, get_op_def
    g = tf.Graph()
    with g.as_default():
        a = tf.constant([1.0, 2.0])
        op = g.create_op("AddV2", [a, a])
    assert op.type == "Add" and get_op_def("ConcatV2") is OPS["Concat"]
    assert canonical_op_type("VariableV2") == "Variable"
    with pytest.raises(KeyError, match="unknown op type 'AddV9'"):
        get_op_def("AddV9")


@settings(max_examples=40, deadline=None)
@given(dags(), st.randoms(use_true_random=False))
def test_topological_order_of_any_order_and_as_given_when_it_is_one(dag, rnd):
    ops = dag[0].get_operations()
    try:
        in_order = topological_order(ops)
    except GraphCycleError:
        return
    shuffled = list(ops)
    rnd.shuffle(shuffled)
    for given_order in (ops, shuffled):
        out = topological_order(given_order)
        assert sorted(op.name for op in out) == sorted(op.name for op in ops)
        at = {op.name: i for i, op in enumerate(out)}
        for op in out:
            preds = [t.op for t in op.inputs] + list(op._control_inputs)
            assert all(at[p.name] < at[op.name] for p in preds)
    assert topological_order(in_order) == in_order  # already one: kept as given
