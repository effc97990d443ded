"""Property tests of the simulator over random DAGs, clusters and placements."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from core.runtime_model import RuntimeModel
from core.cluster import Cluster
from core.costs import StaticCostModel
from core.placement import transfers
from sim import SimConfig, simulate

from strategies import placed_graphs

COST = StaticCostModel()


def critical_path(graph, placement, cluster) -> float:
    """Longest path by op times alone (transfers ignored): a lower bound."""
    finish: dict[str, float] = {}
    for op in graph.get_operations():  # creation order is topological here
        start = max([finish[t.op.name] for t in op.inputs] +
                    [finish[c.name] for c in op.control_inputs], default=0.0)
        finish[op.name] = start + COST.op_time(op, cluster.device(placement[op.name]))
    return max(finish.values())


@given(placed_graphs())
def test_traces_keep_the_invariants(placed):
    g, cluster, placement = placed
    trace = simulate(g, placement, cluster)
    trace.validate(g, cluster)  # dependencies, arrivals, threads, cores, memory
    assert len(trace.ops) == len(g.get_operations())
    want = sorted((t.tensor.name, t.dst) for t in transfers(g.get_operations(), placement))
    assert sorted((x.tensor, x.dst) for x in trace.transfers) == want
    for x in trace.transfers:
        assert tuple(link.name for link in cluster.route(x.src, x.dst)) == x.links


@given(placed_graphs())
def test_links_carry_one_transfer_at_a_time(placed):
    g, cluster, placement = placed
    for order in ("static", "ready"):
        trace = simulate(g, placement, cluster, config=SimConfig(link_order=order))
        spans: dict = {}
        for x in trace.transfers:
            for link in x.links:
                spans.setdefault(link, []).append((x.start, x.end))
        for s in spans.values():
            s.sort()
            assert all(e <= s2 for (_, e), (s2, _) in zip(s, s[1:]))


@given(placed_graphs())
def test_step_time_is_at_least_the_critical_path_and_the_busiest_device(placed):
    g, cluster, placement = placed
    trace = simulate(g, placement, cluster)
    slack = 1 + 1e-9
    assert trace.step_time * slack >= critical_path(g, placement, cluster)
    work: dict[str, float] = {}
    for op in g.get_operations():
        device = cluster.device(placement[op.name])
        work[device.name] = work.get(device.name, 0.0) + COST.op_time(op, device)
    for name, w in work.items():
        assert trace.step_time * slack >= w / cluster.device(name).inter_op_threads


@given(placed_graphs())
def test_deterministic(placed):
    g, cluster, placement = placed
    assert simulate(g, placement, cluster) == simulate(g, placement, cluster)


@settings(max_examples=40)
@given(placed_graphs(roomy=True))
def test_a_faster_link_never_makes_a_step_slower(placed):
    """The rule of sim.links: with the static link order and no pool or core
    oversubscribed, step time is monotone in every link's bandwidth."""
    g, cluster, placement = placed
    trace = simulate(g, placement, cluster)
    for link in sorted({link for x in trace.transfers for link in x.links}):
        bandwidth = cluster.links[link].bandwidth
        faster = cluster.replace_link(link, bandwidth=2 * bandwidth)
        assert simulate(g, placement, faster).step_time <= trace.step_time * (1 + 1e-12)


#: How experiments predict the runtime (experiments.backends.RUNTIME_SIM), every host's
#: cores booked by the interpreters, the copies and the step's fixed costs too.
CPU_BOOKED = SimConfig(runtime=RuntimeModel(serial_dispatch=True, dispatch_cores=True, copies_on_cores=True,
                       step_costs_on_cores=True, inline_elements=16))


@given(placed_graphs(), st.sampled_from([0.0, 1e-4, 1e-3]), st.sampled_from([0.0, 2e-4]))
def test_traces_keep_the_invariants_with_every_cpu_cost_booked(placed, step, part):
    g, cluster, placement = placed
    cluster = Cluster(cluster.hosts, [replace(t, step_overhead=step, part_overhead=part)
                                      for t in cluster.tasks],
                      cluster.devices, cluster.links.values(), master=cluster.master,
                      nvlink=cluster.nvlink)
    trace = simulate(g, placement, cluster, config=CPU_BOOKED)
    trace.validate(g, cluster)
    assert len(trace.ops) == len(g.get_operations())
    assert trace == simulate(g, placement, cluster, config=CPU_BOOKED)
