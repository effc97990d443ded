"""The objective of the simulator-driven placers (:mod:`placers.search`,
:mod:`placers.optimal`): a callable ``objective(graph, placement, cluster) -> seconds``,
passed in as networkx passes a weight function.

:func:`simulated_step` is the default: the simulator's step time, infinite when the
placement runs out of memory.  The dependency direction is ``core <- placers <- sim``,
so this module is the one place where a placer reaches the simulator, and it does so
at call time (``import sim`` inside the function), never at import time.

>>> import core as tf
>>> from core.cluster import Cluster
>>> from core.placement import Placement
>>> g = tf.Graph()
>>> with g.as_default():
...     a = tf.constant([1.0] * 1024, name="a")
>>> cpu = Cluster.single_host().devices[0].name
>>> simulated_step(g, Placement({"a": cpu}), Cluster.single_host()) > 0
True
"""

from __future__ import annotations

import math
from typing import Callable

__all__ = ["simulated_step", "simulated_peaks", "simulated_memory", "Objective",
           "step_objective"]

Objective = Callable[..., float]


def simulated_step(graph, placement, cluster, *, fetches=None, cost_model=None,
                   config=None) -> float:
    """The step time :func:`sim.simulate` predicts (``fetches``, ``cost_model`` and
    ``config`` passed on), or ``math.inf`` when a device runs out of memory."""
    import sim  # at call time: sim imports placers, not the other way round
    try:
        return sim.simulate(graph, placement, cluster, fetches=fetches, cost_model=cost_model,
                            config=config).step_time
    except sim.OutOfMemory:
        return math.inf


def simulated_peaks(graph, placement, cluster, *, fetches=None) -> dict[str, int]:
    """The most bytes each device holds during the simulated step (device name ->
    bytes), an allocation past a device's capacity counted as if it were made."""
    import sim  # at call time, as in simulated_step
    trace = sim.simulate(graph, placement, cluster, fetches=fetches,
                         config=sim.SimConfig(record_oom=True))
    return dict(trace.peak_memory)


def simulated_memory(graph, placement, cluster, *, fetches=None) -> tuple[dict, dict]:
    """``(peaks, schedule)``: as :func:`simulated_peaks`, and when the simulated step
    ran each op (op name -> ``(start, end)`` in seconds)."""
    import sim  # at call time, as in simulated_step
    trace = sim.simulate(graph, placement, cluster, fetches=fetches,
                         config=sim.SimConfig(record_oom=True))
    return dict(trace.peak_memory), {r.op: (r.start, r.end) for r in trace.ops}


def step_objective(objective: Objective | None, fetches=None) -> Objective:
    """``objective`` (default :func:`simulated_step`) as a three-argument callable,
    with ``fetches`` bound when the default is used (a given objective is used as
    it is: it knows its step)."""
    if objective is not None:
        return objective
    if fetches is None:
        return simulated_step
    return _WithFetches(fetches)


class _WithFetches:
    """:func:`simulated_step` with the step's fetches bound (a class, not a lambda, so
    that process pools and Dask can ship it)."""

    def __init__(self, fetches):
        self.fetches = fetches

    def __call__(self, graph, placement, cluster) -> float:
        return simulated_step(graph, placement, cluster, fetches=self.fetches)
