"""The two backends behind one question: how long does a step of this placement take?

:func:`predict` asks the simulator; :func:`measure` really runs the placement on a
:class:`runtime.LocalCluster` of server processes on this machine.  Both take a placement
computed beforehand: :func:`pinned_graph` copies the graph with every op pinned to its
placed device, so the master's simple placer keeps the placement exactly.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import runtime
import sim
from core.costs import CostModel
from core.graph import Graph
from core.placement import Placement
from core.serialize import graph_to_nodes, nodes_to_graph
from core.trace import Trace
from experiments.workloads.mlp import Workload

__all__ = ["Measurement", "pinned_graph", "predict", "measure", "runtime_cluster_spec"]


@dataclass
class Measurement:
    """A measured placement: the median wall-clock step (``step_time``, seconds, as the
    client sees it), every timed step, and one traced step's :class:`Trace`."""

    step_time: float
    steps: list
    trace: Trace


def pinned_graph(graph: Graph, placement: Placement) -> Graph:
    """A copy of ``graph`` with each op's requested device set to its placed device."""
    nodes = graph_to_nodes(graph.get_operations())
    for node in nodes:
        node["device"] = placement[node["name"]]
    return nodes_to_graph(nodes)


def runtime_cluster_spec(cluster) -> dict:
    """The task counts of ``cluster`` (``{"ps": 1, "worker": 2}``), for a LocalCluster."""
    counts: dict[str, int] = {}
    for task in cluster.tasks:
        counts[task.job] = max(counts.get(task.job, 0), task.index + 1)
    return counts


def predict(workload: Workload, placement: Placement, cluster, cost_model: CostModel | None = None,
            config: sim.SimConfig | None = None) -> Trace:
    """The simulator's trace of one step of ``workload`` under ``placement``."""
    return sim.simulate(workload.graph, placement, cluster, fetches=workload.fetch_ops,
                        cost_model=cost_model, config=config)


def measure(workload: Workload, placement: Placement, local_cluster, *, repeats: int = 5,
            warmup: int = 2, master=("worker", 0), config: runtime.SessionConfig | None = None
            ) -> Measurement:
    """Run ``workload`` under ``placement`` on ``local_cluster`` (a started
    :class:`runtime.LocalCluster`) and time it.

    The session opens at ``master``; the variables are initialised, ``warmup`` steps run
    untimed (they also compile or load the kernels), then ``repeats`` timed steps and one
    traced step.
    """
    graph = pinned_graph(workload.graph, placement)
    fetches = [graph.get_operation_by_name(op.name) for op in workload.fetch_ops]
    with runtime.Session(local_cluster.target(*master), graph=graph, config=config) as session:
        if workload.init is not None:
            session.run(graph.get_operation_by_name(workload.init.name))
        for _ in range(warmup):
            session.run(fetches, feed_dict=workload.feeds or None)
        steps = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            session.run(fetches, feed_dict=workload.feeds or None)
            steps.append(time.perf_counter() - t0)
        _, trace = session.run(fetches, feed_dict=workload.feeds or None, trace=True)
    return Measurement(statistics.median(steps), steps, trace)
