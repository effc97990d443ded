"""Op and transfer times: the static model is called once per signature, and that
memo must give each op exactly what a call for it would."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given

import core as tf
from core.cluster import Cluster
from core.costs import StaticCostModel
from core.dataflow import StepPlan
from core.placement import Placement
from experiments.workloads import (mlp_training_step, random_layered_dag,
                                   transformer_training_step)
from sim.durations import same_signature, op_durations

from strategies import placed_graphs


def signature(op, device):
    """What StaticCostModel.op_time depends on, as a plain key (attributes by repr, so
    unhashable values compare too)."""
    return (op.type, device, tuple((t.dtype, t.shape) for t in op.inputs),
            tuple((t.dtype, t.shape) for t in op.outputs), repr(tuple(op.attrs.items())))


def check_groups(plan):
    """Ops in one group share a signature; ops with a hashable equal signature share a
    group (those with an unhashable attribute may be costed alone)."""
    same = same_signature(plan).tolist()
    keys = [signature(op, d) for op, d in zip(plan.ops, plan.op_device)]
    for i, first in enumerate(same):
        assert first <= i and keys[first] == keys[i]
    for i, op in enumerate(plan.ops):
        try:
            hash(tuple(op.attrs.items()))
        except TypeError:
            continue
        assert same[i] == same[keys.index(keys[i])]


@pytest.mark.parametrize("build", [lambda: mlp_training_step().graph,
                                   lambda: transformer_training_step().graph,
                                   lambda: random_layered_dag(500, width=8)])
def test_signatures_of_workloads(build):
    graph = build()
    cluster = Cluster.single_host(gpus=2)
    names = [d.name for d in cluster.devices]
    placement = Placement({op.name: names[i % 3] for i, op in enumerate(graph.get_operations())})
    plan = StepPlan.build(graph.get_operations(), placement)
    check_groups(plan)
    devices = [cluster.device(name) for name in plan.devices]
    model = StaticCostModel()
    assert op_durations(plan, devices, model) == [
        float(model.op_time(op, devices[d])) for op, d in zip(plan.ops, plan.op_device)]


@given(placed_graphs())
def test_signatures_of_random_graphs(placed):
    graph, cluster, placement = placed
    check_groups(StepPlan.build(graph.get_operations(), placement))


def test_signatures_of_a_fetched_part_whose_attribute_ids_exceed_its_op_count():
    """A plan of the ops some fetches need reads the graph's attribute ids, which are
    positions in the whole graph (here up to 5 for a 3-op plan): packed by the op count
    alone, Relu b (type 1, id 4) and Identity c (type 2, id 1) met at 1*3+4 == 2*3+1."""
    g = tf.Graph()
    with g.as_default():
        x = tf.constant(np.ones((8, 8), np.float32), name="x")
        tf.identity(x, name="first_identity")
        tf.constant(np.ones((8, 8), np.float32), name="y")
        tf.constant(np.ones((8, 8), np.float32), name="z")
        tf.relu(x, name="first_relu")
        a = tf.constant(np.ones((8, 8), np.float32), name="a")
        b = tf.relu(a, name="b")
        c = tf.identity(b, name="c")
    cpu = Cluster.single_host().devices[0].name
    placement = Placement({op.name: cpu for op in g.get_operations()})
    plan = StepPlan.build(g.get_operations(), placement, [c])
    assert plan.op_names == ["a", "b", "c"]
    assert plan.op_attr_ids.max() >= plan.n_ops  # the case this is about
    check_groups(plan)
