import numpy as np
import pytest

import core as tf
from core.graph import GraphError
from core.serialize import extend_graph, graph_to_nodes, nodes_to_graph
from experiments.workloads import mlp_training_step


def describe(graph):
    return [(op.name, op.type, op.device, [t.name for t in op.inputs],
             [c.name for c in op.control_inputs], op.colocation_groups(),
             [(t.dtype, t.shape) for t in op.outputs]) for op in graph.get_operations()]


def test_round_trip_keeps_everything():
    w = mlp_training_step(batch=4, layers=2, width=8, inputs=8, outputs=2)
    with w.graph.as_default(), tf.device("/job:ps/task:1"):
        tf.Variable(np.ones(3, np.int32), name="counter")
    copy = nodes_to_graph(graph_to_nodes(w.graph.get_operations()))
    assert describe(copy) == describe(w.graph)
    const = copy.get_operation_by_name("x")
    np.testing.assert_array_equal(const.attrs["value"], w.graph.get_operation_by_name("x").attrs["value"])


def test_extend_adds_only_new_ops_and_checks_inputs():
    g = tf.Graph()
    with g.as_default():
        a = tf.constant(1.0, name="a")
    copy = nodes_to_graph(graph_to_nodes(g.get_operations()))
    with g.as_default():
        tf.identity(a, name="b")
    added = extend_graph(copy, graph_to_nodes(g.get_operations()))
    assert [op.name for op in added] == ["b"]
    with pytest.raises(GraphError, match="missing:0"):
        extend_graph(copy, [{"name": "c", "type": "Identity", "inputs": ["missing:0"],
                             "control_inputs": [], "device": "", "attrs": {}}])


def test_unserializable_attrs_are_refused():
    g = tf.Graph()
    with g.as_default():
        op = g.create_op("NoOp", [], {"fn": object()})
    with pytest.raises(GraphError, match="fn"):
        graph_to_nodes([op])
