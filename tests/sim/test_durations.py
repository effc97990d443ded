"""Op and transfer times: the static model is called once per signature, and that
memo must give each op exactly what a call for it would."""

from __future__ import annotations

import pytest
from hypothesis import given

from core.cluster import Cluster
from core.costs import StaticCostModel
from core.dataflow import StepPlan
from core.placement import Placement
from experiments.workloads import (mlp_training_step, random_layered_dag,
                                   transformer_training_step)
from sim.durations import _same_signature, op_durations

from strategies import placed_graphs


def signature(op, device):
    """What StaticCostModel.op_time depends on, as a plain key (attributes by repr, so
    unhashable values compare too)."""
    return (op.type, device, tuple((t.dtype, t.shape) for t in op.inputs),
            tuple((t.dtype, t.shape) for t in op.outputs), repr(tuple(op.attrs.items())))


def check_groups(plan):
    """Ops in one group share a signature; ops with a hashable equal signature share a
    group (those with an unhashable attribute may be costed alone)."""
    same = _same_signature(plan).tolist()
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
