"""core.partition: one walk over what a step needs, and the cut into parts per task."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from core.devices import DeviceSpec
from core.partition import ops_needed, partition
from strategies import placed_graphs


def _task(device: str) -> tuple:
    spec = DeviceSpec.from_string(device)
    return spec.job, spec.task


@settings(max_examples=40, deadline=None)
@given(placed_graphs(), st.data())
def test_every_needed_op_is_in_one_part_and_every_cross_task_edge_is_sent(placed, data):
    g, cluster, placement = placed
    ops = g.get_operations()
    fetches = [data.draw(st.sampled_from([t.name for op in ops for t in op.outputs]))]
    fed = set(data.draw(st.lists(st.sampled_from([t.name for op in ops for t in op.outputs]),
                                 max_size=2)))
    cpu = {(t.job, t.index): next(d.name for d in cluster.devices_of_task(t.job, t.index)
                                  if d.is_cpu) for t in cluster.tasks}
    cut = partition(g, placement, fetches, (), fed, cpu_of=cpu.__getitem__)
    needed = [op for op in ops_needed([g.get_tensor_by_name(f).op for f in fetches
                                       if f not in fed], fed)
              if not (op.outputs and all(t.name in fed for t in op.outputs))]
    placed_in = {}
    for part in cut.parts:
        for name in part.ops:
            assert name not in placed_in, name
            placed_in[name] = part.task
            assert _task(placement[name]) == part.task
    assert sorted(placed_in) == sorted(op.name for op in needed)
    assert cut.fed_fetches == [f for f in fetches if f in fed]
    parts = {p.task: p for p in cut.parts}
    for op in needed:
        for x in op.inputs:
            if x.name in fed:
                assert x.name in parts[placed_in[op.name]].feeds
            elif placed_in[x.op.name] != placed_in[op.name]:
                assert placement[op.name] in parts[placed_in[x.op.name]].send_to[x.name]
        for c in op._control_inputs:
            if c.name in placed_in and placed_in[c.name] != placed_in[op.name]:
                assert cpu[placed_in[op.name]] in parts[placed_in[c.name]].send_to["^" + c.name]
    for part in cut.parts:  # creation order
        order = [g.get_operation_by_name(n)._index for n in part.ops]
        assert order == sorted(order)


def test_ops_needed_cuts_at_fed_tensors():
    import core as tf
    g = tf.Graph()
    with g.as_default():
        a = tf.constant(1.0, name="a")
        b = tf.identity(a, name="b")
        c = tf.identity(b, name="c")
    assert [op.name for op in ops_needed([c.op])] == ["a", "b", "c"]
    assert [op.name for op in ops_needed([c.op], {"b:0"})] == ["c"]  # b is not run
    assert [op.name for op in ops_needed([b.op], {"b:0"})] == ["b"]  # a root: kept, not walked


@settings(max_examples=40, deadline=None)
@given(placed_graphs(), st.data())
def test_ops_needed_within_a_part_stops_at_its_edge(placed, data):
    """Walking within some ops (one task's part) reaches exactly the whole walk's ops
    that have a path to the roots through ops of the part; the others outside are the
    edge: included, not walked through."""
    g, _, _ = placed
    ops = g.get_operations()
    roots = [data.draw(st.sampled_from(ops))]
    within = {op.name for op in ops if data.draw(st.booleans())} | {roots[0].name}
    assert ops_needed(roots, within={op.name for op in ops}) == ops_needed(roots)
    got = ops_needed(roots, within=within)
    walked = [op for op in got if op.name in within]
    # Every op reached is a root or an input (data or control) of a walked op.
    feeds_walked = {x.op.name for op in walked for x in op.inputs}
    feeds_walked |= {c.name for op in walked for c in op._control_inputs}
    assert all(op.name in feeds_walked or op is roots[0] for op in got)
    # Every input of a walked op is reached; nothing is walked past the edge.
    assert feeds_walked <= {op.name for op in got}
    assert {op.name for op in got} <= {op.name for op in ops_needed(roots)}
    order = [op._index for op in got]
    assert order == sorted(order)
