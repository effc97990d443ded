"""Round-robin placement: ``replica_device_setter`` for graph building, and a placer.

``replica_device_setter`` is TensorFlow's (``tf.train.replica_device_setter``): a device
function for a ``device()`` scope that sends variable ops to the ps job, one task after
another (or by a strategy such as greedy-by-bytes), and every other op to the worker
device.  It *merges*: fields set by an inner scope win over it.

>>> import core as tf
>>> g = tf.Graph()
>>> with g.as_default(), tf.device(replica_device_setter(ps_tasks=2)):
...     v1 = tf.Variable(1.0, name="v1")
...     v2 = tf.Variable(2.0, name="v2")
...     s = v1 + v2
>>> v1.device, v2.device, s.device
('/job:ps/task:0', '/job:ps/task:1', '/job:worker')

:class:`RoundRobinPlacer` spreads ops (or only variables) over all feasible devices in
turn, a baseline for the smarter placers.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from core.devices import DeviceSpec
from core.ops import TensorSpec, nbytes
from placers.base import BasePlacer, register

__all__ = ["replica_device_setter", "RoundRobinStrategy", "GreedyLoadBalancingStrategy",
           "byte_size_load_fn", "RoundRobinPlacer"]

# Op types that hold parameters and so go to the ps job (TensorFlow's STANDARD_PS_OPS).
PS_OPS = ("Variable",)


class RoundRobinStrategy:
    """Choose ps tasks 0, 1, ..., N-1, 0, ... in turn."""

    def __init__(self, num_tasks: int):
        self._num_tasks = num_tasks
        self._next = 0

    def __call__(self, op) -> int:
        task = self._next
        self._next = (self._next + 1) % self._num_tasks
        return task


def byte_size_load_fn(op) -> int:
    """The load of a variable op: the bytes of its value."""
    spec = op.outputs[0].spec if op.outputs else None
    if spec is None:
        return 0
    return nbytes(TensorSpec(spec.dtype, tuple(1 if d is None else d for d in spec.shape))) or 0


class GreedyLoadBalancingStrategy:
    """Choose the ps task with the least load so far (ties: the lowest task), then add
    ``load_fn(op)`` to it (TensorFlow's ``GreedyLoadBalancingStrategy``)."""

    def __init__(self, num_tasks: int, load_fn: Callable = byte_size_load_fn):
        self._loads = np.zeros(num_tasks)
        self._load_fn = load_fn

    def __call__(self, op) -> int:
        task = int(np.argmin(self._loads))
        self._loads[task] += self._load_fn(op)
        return task


def replica_device_setter(ps_tasks: int = 0, ps_device: str = "/job:ps",
                          worker_device: str = "/job:worker", merge_devices: bool = True,
                          cluster=None, ps_ops: Sequence[str] | None = None,
                          ps_strategy: Callable | str | None = None):
    """A device function placing variables on ps tasks and other ops on the worker.

    Parameters
    ----------
    ps_tasks : number of ps tasks; with ``cluster`` (a ``ClusterSpec`` or ``Cluster``)
        it is the size of the ``ps`` job instead.  With 0 tasks the function is None (no
        device function), as in TensorFlow.
    ps_device, worker_device : device strings for the two kinds of ops.
    merge_devices : merge with the op's current device (inner scopes win); when False an
        op that already has a device keeps it unchanged.
    ps_ops : op types that go to the ps job (default ``("Variable",)``).
    ps_strategy : ``op -> task index``; ``"round_robin"`` (default) or ``"greedy"``
        (greedy by bytes), or any callable.

    An op already pinned to another job than the ps job keeps that job.
    """
    if cluster is not None:
        spec = cluster.cluster_spec() if hasattr(cluster, "cluster_spec") else cluster
        ps_tasks = spec.num_tasks("ps") if "ps" in spec.jobs else 0
    if ps_tasks < 0:
        raise ValueError(f"ps_tasks must be >= 0, got {ps_tasks}")
    if ps_tasks == 0:
        return None
    if ps_strategy is None or ps_strategy == "round_robin":
        strategy = RoundRobinStrategy(ps_tasks)
    elif ps_strategy == "greedy":
        strategy = GreedyLoadBalancingStrategy(ps_tasks)
    elif callable(ps_strategy):
        strategy = ps_strategy
    else:
        raise ValueError(f"unknown ps_strategy {ps_strategy!r}; use 'round_robin', 'greedy' "
                         "or a callable")
    ps_spec = DeviceSpec.from_string(ps_device)
    worker_spec = DeviceSpec.from_string(worker_device)
    ps_ops = tuple(ps_ops or PS_OPS)

    def device_function(op) -> str:
        if not merge_devices and op.device:
            return op.device
        current = op.device_spec
        if op.type in ps_ops:
            target = ps_spec
            if ps_spec.job and (not current.job or current.job == ps_spec.job):
                target = ps_spec.replace(task=strategy(op))
            return target.merged(current).to_string()
        return worker_spec.merged(current).to_string()

    return device_function


@register("round_robin")
class RoundRobinPlacer(BasePlacer):
    """Spread colocation groups over the cluster's devices in turn.

    Devices are visited in the cluster's order; each group takes the next device that is
    feasible for it.  With ``variables_only`` only groups holding a variable are spread
    and the rest go where the simple placer puts them.
    """

    def __init__(self, variables_only: bool = False, **options):
        super().__init__(**options)
        self.variables_only = variables_only

    def choose(self, constraints):
        devices = list(constraints.cluster.devices)
        position = 0
        chosen = {}
        for group in constraints.to_place():
            if self.variables_only and not any(op.type in PS_OPS for op in group.ops):
                chosen[group.index] = group.default
                continue
            feasible = {d.name for d in group.feasible}
            for step in range(len(devices)):
                device = devices[(position + step) % len(devices)]
                if device.name in feasible:
                    chosen[group.index] = device
                    position = (position + step + 1) % len(devices)
                    break
        return chosen

    def __repr__(self) -> str:
        return f"RoundRobinPlacer(variables_only={self.variables_only})"
