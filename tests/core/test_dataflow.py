"""The step state machine: counts, ready sets, transfers, buffer release."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

import core as tf
from core.dataflow import DataflowError, StepPlan, StepState, UnplacedOp
from core.graph import GraphCycleError
from core.placement import Placement, transfers

from strategies import placed_graphs

CPU0 = "/job:w/replica:0/task:0/device:CPU:0"
CPU1 = "/job:w/replica:0/task:1/device:CPU:0"


def diamond():
    g = tf.Graph()
    with g.as_default():
        a = tf.constant(1.0, name="a")
        b = tf.identity(a, name="b")
        c = tf.identity(a, name="c")
        d = tf.add(b, c, name="d")
        with g.control_dependencies([d]):
            e = tf.no_op(name="e")
    return g, e


def names(plan, indices):
    return [plan.op_names[i] for i in indices]


def test_diamond_on_one_device_runs_in_dependency_order():
    g, _ = diamond()
    plan = StepPlan.build(g.get_operations(), Placement({op.name: CPU0 for op in g.get_operations()}))
    s = StepState(plan)
    assert names(plan, s.initial_ready()) == ["a"]
    assert names(plan, s.op_finished(plan.op_index["a"]).ready) == ["b", "c"]
    assert names(plan, s.op_finished(plan.op_index["b"]).ready) == []
    p = s.op_finished(plan.op_index["c"])
    assert names(plan, p.ready) == ["d"]
    assert p.freed == [plan.tensor_base[plan.op_index["a"]]]  # a:0 read by b and c
    assert names(plan, s.op_finished(plan.op_index["d"]).ready) == ["e"]
    s.op_finished(plan.op_index["e"])
    s.validate()
    assert s.done and plan.n_transfers == 0


def test_one_transfer_per_tensor_and_destination():
    g, _ = diamond()
    placement = Placement({"a": CPU0, "b": CPU1, "c": CPU1, "d": CPU0, "e": CPU0})
    plan = StepPlan.build(g.get_operations(), placement)
    got = {(plan.tensor_name(plan.transfer_tensor[k]), plan.devices[plan.transfer_dst[k]])
           for k in range(plan.n_transfers)}
    want = {(t.tensor.name, t.dst) for t in transfers(g.get_operations(), placement)}
    assert got == want == {("a:0", CPU1), ("b:0", CPU0), ("c:0", CPU0)}


def test_fetches_run_only_what_they_need():
    g, _ = diamond()
    plan = StepPlan.build(g.get_operations(), Placement({"a": CPU0, "b": CPU0}),
                          [g.get_tensor_by_name("b:0")])
    assert plan.op_names == ["a", "b"]
    assert plan.held == [plan.tensor_base[1]]  # the fetched tensor stays to the end


def test_unplaced_op_and_cycle_are_named():
    g, _ = diamond()
    with pytest.raises(UnplacedOp, match="'b'") as e:
        StepPlan.build(g.get_operations(), Placement({"a": CPU0}))
    assert e.value.op == "b"
    g.get_operation_by_name("a").add_control_input(g.get_operation_by_name("e"))
    with pytest.raises(GraphCycleError) as e:
        StepPlan.build(g.get_operations(), Placement({op.name: CPU0 for op in g.get_operations()}))
    assert set(e.value.cycle) <= {"a", "b", "c", "d", "e"}


def test_impossible_events_are_refused():
    g, _ = diamond()
    plan = StepPlan.build(g.get_operations(), Placement({op.name: CPU0 for op in g.get_operations()}))
    s = StepState(plan)
    with pytest.raises(DataflowError, match="'b'"):
        s.op_finished(plan.op_index["b"])  # not ready yet
    s.initial_ready()
    s.op_finished(0)
    with pytest.raises(DataflowError, match="'a'"):
        s.op_finished(0)


def test_variable_buffers_are_resident_and_assign_aliases():
    g = tf.Graph()
    with g.as_default():
        v = tf.Variable([1.0, 2.0], name="v")
        upd = tf.assign_sub(v, [1.0, 1.0], name="upd")
    plan = StepPlan.build(g.get_operations(), Placement({op.name: CPU0 for op in g.get_operations()}))
    var = plan.op_index["v"]
    assert plan.resident == [plan.tensor_base[var]] and plan.op_outputs[var] == []
    assert plan.buffer_bytes[plan.tensor_base[plan.op_index["upd"]]] == 0
    del upd


@given(placed_graphs(), st.randoms(use_true_random=False))
def test_any_event_order_keeps_the_counters_right(placed, rnd):
    """Drive the state machine in a random order of the events it allows."""
    g, cluster, placement = placed
    plan = StepPlan.build(g.get_operations(), placement)
    s = StepState(plan)
    ready, sends = list(s.initial_ready()), []
    freed: list[int] = []
    while ready or sends:
        pick = rnd.randrange(len(ready) + len(sends))
        if pick < len(ready):
            p = s.op_finished(ready.pop(pick))
        else:
            p = s.transfer_done(sends.pop(pick - len(ready)))
        ready += p.ready
        sends += p.sends
        freed += p.freed
        s.validate()
    assert s.done
    # Every buffer that is not resident or fetched is freed exactly once.
    expected = [b for b in range(len(plan.buffer_bytes)) if b not in plan.resident]
    assert sorted(freed) == expected
    want = {(t.tensor.name, t.dst) for t in transfers(plan.ops, placement)}
    got = {(plan.tensor_name(plan.transfer_tensor[k]), plan.devices[plan.transfer_dst[k]])
           for k in range(plan.n_transfers)}
    assert got == want


def _plan_fields(plan):
    names = ["op_names", "op_device", "tensor_base", "tensor_op", "tensor_bytes",
             "transfer_tensor", "transfer_src", "transfer_dst", "buffer_refs",
             "buffer_device", "buffer_bytes", "resident", "held", "initial_pending",
             "op_types", "csr_op_pred_ops", "csr_op_pred_transfers", "csr_op_inputs",
             "csr_op_succ", "csr_op_sends", "csr_op_outputs", "csr_op_dead_outputs",
             "csr_transfer_consumers", "csr_op_input_tensors"]
    out = {name: getattr(plan, name) for name in names}
    # Ids are compared only for which items share them (attribute ids within a type).
    out["tensor_spec"] = [plan.tensor_spec.index(s) for s in plan.tensor_spec]
    attrs = list(zip(plan.op_types, plan.op_attr_ids.tolist()))
    out["op_attr_ids"] = [attrs.index(a) for a in attrs]
    return out


@given(placed_graphs(), st.randoms(use_true_random=False))
def test_plans_from_the_graphs_cached_arrays_equal_fresh_ones(placed, rnd):
    """A plan reads a Graph's ops through arrays kept with the graph; a plan of the same
    ops as plain objects (no graph) must be the same, for the whole graph and for the
    part some fetches need."""
    g, cluster, placement = placed
    ops = g.get_operations()
    fetches = rnd.sample(ops, k=min(len(ops), 2))

    class Plain:  # the same op, not of a Graph: read without the cache
        def __init__(self, op):
            self.__dict__.update(op.__dict__)
            self.graph = None

    for wanted in (None, fetches):
        cached = StepPlan.build(ops, placement, wanted)
        again = StepPlan.build(ops, placement, wanted)  # from the kept arrays
        assert _plan_fields(again) == _plan_fields(cached)
        names = {op.name for op in cached.ops}
        plain = {op.name: Plain(op) for op in ops if op.name in names}
        for op in plain.values():  # rewire the copies to each other
            op.inputs = [type(t)(plain[t.op.name], t.value_index, t.dtype, t.shape)
                         for t in op.inputs]
            op._control_inputs = [plain[c.name] for c in op._control_inputs]
            op.outputs = tuple(type(t)(op, t.value_index, t.dtype, t.shape) for t in op.outputs)
        fresh = StepPlan.build([plain[op.name] for op in cached.ops], placement)
        want = _plan_fields(cached)
        if wanted is not None:  # a fetched tensor is held; these plans fetch ops only
            assert want["held"] == []
        assert _plan_fields(fresh) == want


def test_the_graphs_cached_arrays_follow_its_changes():
    g, e = diamond()
    place = {op.name: CPU0 for op in g.get_operations()}
    plan = StepPlan.build(g.get_operations(), Placement(place))
    with g.as_default():
        f = tf.identity(g.get_operation_by_name("d").outputs[0], name="f")
    place["f"] = CPU1
    plan = StepPlan.build(g.get_operations(), Placement(place))
    assert plan.op_names[-1] == "f" and plan.n_transfers == 1
    g.get_operation_by_name("b").add_control_input(g.get_operation_by_name("c"))
    plan = StepPlan.build(g.get_operations(), Placement(place))
    assert plan.op_pred_ops[plan.op_index["b"]] == [plan.op_index["a"], plan.op_index["c"]]
    del e, f
