"""Constraint resolution, done once for every placer.

Given a graph, a cluster and what earlier runs placed, :func:`resolve` works out, for each
*colocation group* (ops that must share a device, joined with union-find), the devices it
may go to and the device TensorFlow's simple placer would choose.  It does not assign
anything: placers only choose among ``group.feasible`` (TensorFlow's ``ColocationGraph``
plays the same role).

Rules (SEMANTICS.md, "Simple placer"):

1. an op placed on an earlier run keeps its device (and so does its whole group);
2. an op pinned (fully or partly) goes where its pin says, with unset fields filled:
   no job -> the master task; job without task -> task 0; no device type -> the task's
   default device (GPU:0 if it has one, else CPU:0);
3. an unpinned op goes to the master task's default device;

and throughout: the group's pins are intersected (a conflict is an error); every op of the
group needs a kernel for its dtype on the device's type (an explicit pin that cannot be
satisfied is an error, or with ``allow_soft_placement`` falls back to the CPU of the same
task); a pin to a device the cluster lacks is an error, or soft-placed the same way.

>>> import core as tf
>>> from core.cluster import Cluster
>>> g = tf.Graph()
>>> with g.as_default(), tf.device("/cpu:0"):
...     v = tf.Variable(1.0, name="v")
>>> c = resolve(g, Cluster.single_host(gpus=1))
>>> [op.name for op in c.group_of("v").ops], c.group_of("v").default.name
(['v', 'v/Assign', 'v/read'], '/job:localhost/replica:0/task:0/device:CPU:0')
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from core.devices import DeviceSpec
from core.graph import Graph, Operation, topological_order
from core.ops import get_op_def
from core.placement import Placement, PlacementError, kernel_dtype

__all__ = ["Group", "Constraints", "resolve"]

_FIELDS = ("job", "replica", "task", "device_type", "device_index")


@dataclass
class Group:
    """A colocation group and what constrains it.

    ``ops`` are in creation order; ``pin`` is the intersection of their explicit device
    requests (empty when none); ``feasible`` lists the devices the group may go to, in the
    cluster's deterministic order; ``default`` is the simple placer's choice; ``fixed`` is
    the device kept from an earlier run (or None); ``soft_placed`` tells that the pin could
    not be honoured and soft placement moved the group.
    """

    index: int
    ops: list[Operation]
    pin: DeviceSpec
    feasible: list = field(default_factory=list)
    default: object = None
    fixed: str | None = None
    soft_placed: bool = False

    @property
    def names(self) -> list[str]:
        return [op.name for op in self.ops]


@dataclass
class Constraints:
    """The resolved constraints: groups, the group of each op, and a topological order;
    with the graph, cluster and earlier placement they were resolved for (placers that
    run other placers or the simulator on the same problem read them here)."""

    groups: list[Group]
    op_group: dict[str, int]
    order: list[Operation]
    cluster: object
    graph: Graph | None = None
    previous: Placement = field(default_factory=Placement)

    def group_of(self, op_name: str) -> Group:
        return self.groups[self.op_group[op_name]]

    def to_place(self) -> list[Group]:
        """Groups not fixed by an earlier run, in order of their first op."""
        return [g for g in self.groups if g.fixed is None]


class _UnionFind:
    def __init__(self, n: int):
        self.parent = list(range(n))

    def find(self, i: int) -> int:
        root = i
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[i] != root:  # path compression
            self.parent[i], i = root, self.parent[i]
        return root

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            # The smaller index stays the root so groups are numbered by their first op.
            self.parent[max(ra, rb)] = min(ra, rb)


def resolve(graph: Graph, cluster, previous: Placement | None = None, *,
            allow_soft_placement: bool = False, ops: Sequence[Operation] | None = None,
            pin_of: Callable[[Operation], DeviceSpec] | None = None) -> Constraints:
    """Resolve the placement constraints of ``ops`` (default: every op of ``graph``).

    ``pin_of(op)`` gives the device an op asks for (default: ``op.device_spec``, what the
    device scopes set); the function placer passes its own.

    Raises :class:`core.graph.GraphCycleError` for a cyclic graph and
    :class:`core.placement.PlacementError` (naming the op, the requested device and the
    reason) for constraints that cannot all hold.
    """
    ops = list(graph.get_operations() if ops is None else ops)
    order = topological_order(ops)
    placed_before = previous or Placement()
    previous = placed_before.to_dict()

    # Colocation groups with union-find over the `loc:@name` keys.
    uf = _UnionFind(len(ops))
    first_with_key: dict[str, int] = {}
    for i, op in enumerate(ops):
        first_with_key.setdefault(f"loc:@{op.name}", i)
    for i, op in enumerate(ops):
        for key in op.colocation_groups():
            j = first_with_key.setdefault(key, i)
            uf.union(i, j)
    members: dict[int, list[Operation]] = {}
    for i, op in enumerate(ops):
        members.setdefault(uf.find(i), []).append(op)

    resolver = _Resolver(cluster, allow_soft_placement, pin_of or (lambda op: op.device_spec))
    groups: list[Group] = []
    op_group: dict[str, int] = {}
    for root in sorted(members):
        group = resolver.group(len(groups), members[root], previous)
        for op in group.ops:
            op_group[op.name] = group.index
        groups.append(group)
    return Constraints(groups, op_group, order, cluster, graph, placed_before)


class _Resolver:
    """Pins, defaults and kernels for one group at a time, with caches for speed."""

    def __init__(self, cluster, allow_soft_placement: bool, pin_of):
        self.cluster = cluster
        self.pin_of = pin_of
        self.soft = allow_soft_placement
        self.devices = list(cluster.devices)
        self.device_by_name = {d.name: d for d in self.devices}
        self.tasks = {(d.job, d.task) for d in self.devices}
        self.master = cluster.master
        self._cache: dict = {}

    # The kernel requirement of a group: the set of (op type, dtype) it must run.
    def _requirements(self, ops: list[Operation]) -> frozenset:
        return frozenset((op.type, kernel_dtype(op)) for op in ops)

    def _supports(self, device, requirements: frozenset) -> bool:
        for op_type, dtype in requirements:
            allowed = get_op_def(op_type).kernels.get(device.device_type)
            if allowed is None or (dtype is not None and dtype not in allowed):
                return False
        return True

    def _first_unsupported(self, ops: list[Operation], device_type: str):
        for op in ops:
            dtype = kernel_dtype(op)
            allowed = op.op_def.kernels.get(device_type)
            if allowed is None or (dtype is not None and dtype not in allowed):
                return op
        return None

    def group(self, index: int, ops: list[Operation], previous: dict[str, str]) -> Group:
        pin = self._intersect_pins(ops)
        kept = [previous[op.name] for op in ops if op.name in previous]
        if kept:
            if len(set(kept)) > 1:
                raise PlacementError(ops[0].name, None, f"its colocation group was split over "
                                     f"{sorted(set(kept))} by an earlier placement")
            device = self.device_by_name.get(kept[0])
            if device is None:
                raise PlacementError(ops[0].name, kept[0], "an earlier run placed it on a device "
                                     "the cluster does not have")
            if not pin.matches(device.name) and not self.soft:
                raise PlacementError(ops[0].name, pin.to_string(), f"its colocation group was "
                                     f"already placed on {device.name} by an earlier run")
            return Group(index, ops, pin, [device], device, fixed=device.name)
        key = (pin, self._requirements(ops))
        cached = self._cache.get(key)
        if cached is None:
            cached = self._cache[key] = self._feasible(ops, pin, key[1])
        feasible, default, soft_placed = cached
        return Group(index, ops, pin, list(feasible), default, soft_placed=soft_placed)

    def _intersect_pins(self, ops: list[Operation]) -> DeviceSpec:
        pin = DeviceSpec()
        owner = None
        for op in ops:
            spec = self.pin_of(op)
            if spec.is_empty:
                continue
            conflict = next((f for f in _FIELDS if getattr(pin, f) is not None
                             and getattr(spec, f) is not None and getattr(pin, f) != getattr(spec, f)),
                            None)
            if conflict is not None:
                if self.soft:
                    continue  # soft placement drops the later, conflicting request
                raise PlacementError(op.name, spec.to_string(),
                                     f"it is colocated with '{owner.name}', which is pinned to "
                                     f"'{pin.to_string()}' (conflicting {conflict})")
            pin = DeviceSpec(*(getattr(pin, f) if getattr(pin, f) is not None else getattr(spec, f)
                               for f in _FIELDS))
            owner = owner or op
        return pin

    def _feasible(self, ops, pin: DeviceSpec, requirements) -> tuple[list, object, bool]:
        """(feasible devices, simple placer's choice, soft-placed?) for a group."""
        supported = [d for d in self.devices if self._supports(d, requirements)]
        if not supported:
            op = self._first_unsupported(ops, "CPU") or ops[0]
            raise PlacementError(op.name, None, f"no device of the cluster has a kernel for "
                                 f"{op.type} with dtype {kernel_dtype(op)}")
        if pin.is_empty:
            return supported, self._default_in_task(self.master, supported), False

        job = pin.job if pin.job is not None else self.master[0]
        task = pin.task if pin.task is not None else (0 if pin.job is not None else self.master[1])
        matching = [d for d in self.devices if pin.matches(d.name)]
        feasible = [d for d in matching if d in supported]
        if feasible:
            in_task = [d for d in feasible if (d.job, d.task) == (job, task)]
            default = self._pick(in_task, pin) if in_task else self._pick(feasible, pin)
            return feasible, default, False

        # The pin cannot be honoured: say why, or soft-place on the CPU of the same task.
        why = self._why_not(ops, pin, job, task, matching)
        if not self.soft:
            raise PlacementError(why[0], pin.to_string(), why[1])
        fallback_task = (job, task) if (job, task) in self.tasks else self.master
        cpus = [d for d in supported if (d.job, d.task) == fallback_task and d.device_type == "CPU"]
        if not cpus:
            cpus = [d for d in supported if (d.job, d.task) == fallback_task] or supported
        return [cpus[0]], cpus[0], True

    def _why_not(self, ops, pin, job, task, matching) -> tuple[str, str]:
        if (job, task) not in self.tasks:
            known = ", ".join(f"/job:{j}/task:{t}" for j, t in sorted(self.tasks))
            return ops[0].name, (f"the cluster has no task /job:{job}/task:{task} "
                                 f"(it has {known})")
        if not matching:
            known = ", ".join(d.name for d in self.devices if (d.job, d.task) == (job, task))
            return ops[0].name, f"no such device exists (the task has {known})"
        device_type = pin.device_type or matching[0].device_type
        op = self._first_unsupported(ops, device_type) or ops[0]
        if op is not ops[0] and self.pin_of(op).is_empty:
            return ops[0].name, (f"no supported kernel for {device_type} devices is available "
                                 f"for the colocated node '{op.name}' ({op.type}, {kernel_dtype(op)})")
        return op.name, (f"no supported kernel for {device_type} devices is available "
                         f"({op.type} with dtype {kernel_dtype(op)})")

    def _default_in_task(self, task, supported):
        in_task = [d for d in supported if (d.job, d.task) == tuple(task)]
        return self._pick(in_task, DeviceSpec()) if in_task else supported[0]

    @staticmethod
    def _pick(devices, pin: DeviceSpec):
        """The task's default among ``devices``: a GPU before a CPU unless the pin names a
        type, then the lowest index (``/gpu:*`` takes GPU:0)."""
        pool = devices
        if pin.device_type is None:
            pool = [d for d in devices if d.device_type == "GPU"] or devices
        return min(pool, key=lambda d: (d.index, d.device_type))
