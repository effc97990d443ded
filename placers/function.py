"""The function placer: a user function says where each op goes.

``FunctionPlacer(fn)`` asks ``fn(op)`` for every op's device (a string, a ``DeviceSpec``
or None for no preference) and ignores what the device scopes requested, then fills unset
fields as the simple placer does.  An op colocated with another (a variable's read and
assign ops) is not asked: it follows the op it is colocated with.  It is the seed's ``variables_on_cpu`` applied at
placement time, as an outermost device scope would be.

>>> import core as tf
>>> from core.cluster import Cluster
>>> def variables_on_cpu(op):
...     return "/cpu:0" if op.type == "Variable" else "/gpu:0"
>>> g = tf.Graph()
>>> with g.as_default():
...     a = tf.Variable(3.0, name="a")
...     c = a * tf.constant(4.0)
>>> p = FunctionPlacer(variables_on_cpu).place(g, Cluster.single_host(gpus=1))
>>> p["a"][-5:], p["mul"][-5:]
('CPU:0', 'GPU:0')
"""

from __future__ import annotations

from typing import Callable

from core.devices import DeviceSpec
from placers.base import BasePlacer, register
from placers.constraints import resolve

__all__ = ["FunctionPlacer"]


@register("function")
class FunctionPlacer(BasePlacer):
    """Place every op where ``fn(op)`` says (None: no preference, the default device)."""

    def __init__(self, fn: Callable, **options):
        super().__init__(**options)
        if not callable(fn):
            raise TypeError(f"FunctionPlacer needs a function op -> device, got {fn!r}")
        self.fn = fn

    def _pin_of(self, op) -> DeviceSpec:
        # An op colocated with another (a variable's read and assign ops) follows it, as
        # ops created under colocate_with() escape the device functions in TensorFlow.
        if f"loc:@{op.name}" not in op.colocation_groups():
            return DeviceSpec()
        return DeviceSpec.from_string(self.fn(op))

    def resolve(self, graph, cluster, previous):
        return resolve(graph, cluster, previous, allow_soft_placement=self.allow_soft_placement,
                       pin_of=self._pin_of)

    def choose(self, constraints):
        return {g.index: g.default for g in constraints.to_place()}

    def __repr__(self) -> str:
        return f"FunctionPlacer({getattr(self.fn, '__name__', self.fn)!r})"
