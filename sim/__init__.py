"""sim: predict the step time of a placed graph with a discrete-event model on SimPy.

:func:`simulate` returns the same :class:`core.trace.Trace` a measured run of the
runtime returns.  Modules, one job each: :mod:`sim.engine` (the event loop),
:mod:`sim.pools` (inter-op threads, host cores, intra-op speed-up), :mod:`sim.links`
(transfers and link contention), :mod:`sim.memory` (allocation rules and capacity),
:mod:`sim.config` (:class:`SimConfig`), :mod:`sim.errors`.

>>> import core as tf
>>> from core.cluster import Cluster
>>> from core.placement import Placement
>>> g = tf.Graph()
>>> with g.as_default():
...     x = tf.constant(1.0, name="x")
...     y = tf.identity(x, name="y")
>>> cpu = Cluster.single_host().devices[0].name
>>> trace = simulate(g, Placement({"x": cpu, "y": cpu}), Cluster.single_host())
>>> [r.op for r in trace.ops]
['x', 'y']
"""

from core.version import __version__
from sim.config import SimConfig
from sim.engine import simulate
from sim.errors import InvalidCost, OutOfMemory, SimulationStalled, UnknownPlacedDevice

__all__ = ["simulate", "SimConfig", "OutOfMemory", "UnknownPlacedDevice", "InvalidCost",
           "SimulationStalled"]
