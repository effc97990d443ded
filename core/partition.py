"""A placed step cut into parts per task, with explicit send edges (TensorFlow's
graph_partition, as pure code: no I/O, the graph is never changed).

1. :func:`ops_needed` — the one walk over what a step needs: the ops the roots reach
   through data and control inputs, cut at fed tensors (the producer of a fed tensor
   is not reached through it; a root whose outputs are all fed is included but not
   walked through), in creation order.  The session, the master,
   :class:`core.dataflow.StepPlan` and the executor (over one task's part, ``within``
   its ops) all walk with it.
2. :func:`partition` — those ops split by the task of their device
   (:class:`TaskPart` per task, sorted by task): each part lists its ops (creation
   order), the fed tensors it reads, its fetches and targets, and ``send_to``: every
   tensor it produces that a part of another task consumes, with the devices it goes
   to (once per (tensor, destination device)); a control edge across tasks is a send
   of ``"^op"`` to the receiving task's CPU (``cpu_of``). Fetched tensors that are fed
   are answered without running anything (``fed_fetches``).

Ordering (one topological order) is :func:`core.graph.topological_order`'s.

>>> import core as tf
>>> from core.placement import Placement
>>> g = tf.Graph()
>>> with g.as_default():
...     a = tf.constant(1.0, name="a")
...     b = tf.multiply(a, 2.0, name="b")
>>> w0, w1 = "/job:w/replica:0/task:0/device:CPU:0", "/job:w/replica:0/task:1/device:CPU:0"
>>> p = Placement({"a": w0, "b/y": w1, "b": w1})
>>> [op.name for op in ops_needed([b.op])]
['a', 'b/y', 'b']
>>> parts = partition(g, p, fetches=["b:0"], cpu_of=lambda task: w1 if task[1] else w0)
>>> [(part.task, part.ops, part.send_to) for part in parts.parts]
[(('w', 0), ['a'], {'a:0': {'/job:w/replica:0/task:1/device:CPU:0'}}), (('w', 1), ['b/y', 'b'], {})]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import attrgetter
from typing import Callable, Container, Iterable, Mapping

from core.devices import DeviceSpec
from core.graph import Graph, Operation

__all__ = ["ops_needed", "partition", "TaskPart", "Partition"]


def ops_needed(roots: Iterable[Operation], fed: Iterable[str] = (),
               within: Container[str] | None = None) -> list[Operation]:
    """The ops ``roots`` need through data and control inputs, cutting at the tensors
    named in ``fed``; an op whose outputs are all fed is included but not walked
    through, and so is an op whose name is not in ``within`` (when given: the ops of
    one task's part of a step, where another task's op is a source). In creation order.

    >>> import core as tf
    >>> g = tf.Graph()
    >>> with g.as_default():
    ...     a = tf.constant(1.0, name="a")
    ...     b = tf.identity(a, name="b")
    ...     c = tf.identity(b, name="c")
    >>> [op.name for op in ops_needed([c.op], fed=["b:0"])]
    ['c']
    >>> [op.name for op in ops_needed([c.op], within={"c"})]
    ['b', 'c']
    """
    fed = fed if isinstance(fed, (set, frozenset)) else set(fed)
    # A tensor's name is made on each read: look at it only when its op feeds some.
    producers = {name.rpartition(":")[0] for name in fed}
    seen: dict[str, Operation] = {}
    stack = list(roots)
    while stack:
        op = stack.pop()
        name = op.name
        if name in seen:
            continue
        seen[name] = op
        if within is not None and name not in within:
            continue
        if name in producers and op.outputs and all(t.name in fed for t in op.outputs):
            continue
        if producers:
            stack.extend(t.op for t in op.inputs
                         if t.op.name not in producers or t.name not in fed)
        else:
            stack.extend(t.op for t in op.inputs)
        stack.extend(op._control_inputs)
    return sorted(seen.values(), key=_creation_index)


_creation_index = attrgetter("_index")


@dataclass
class TaskPart:
    """One task's part of a step: see the module docstring."""

    task: tuple
    ops: list = field(default_factory=list)       # op names, creation order
    fetches: list = field(default_factory=list)   # tensor names
    targets: list = field(default_factory=list)   # op names
    feeds: list = field(default_factory=list)     # fed tensor names it reads
    send_to: dict = field(default_factory=dict)   # tensor (or "^op") -> destination devices


@dataclass
class Partition:
    """The parts (sorted by task) and the fetched tensors that are fed."""

    parts: list
    fed_fetches: list


def partition(graph: Graph, placement: Mapping[str, str], fetches: Iterable[str] = (),
              targets: Iterable[str] = (), fed: Iterable[str] = (), *,
              cpu_of: Callable[[tuple], str]) -> Partition:
    """Cut the step (``fetches``, ``targets``, ``fed`` tensor names) of ``graph`` placed
    by ``placement`` (op name -> full device name) into parts per task; ``cpu_of(task)``
    names the device a control edge into ``task`` goes to. See the module docstring."""
    fed = frozenset(fed)
    fetches, targets = list(fetches), list(targets)
    fed_fetches = [name for name in fetches if name in fed]
    roots = [graph.get_tensor_by_name(name).op for name in fetches if name not in fed]
    roots += [graph.get_operation_by_name(name) for name in targets]
    ops = ops_needed(roots, fed)
    task_of = {}
    for op in ops:
        spec = DeviceSpec.from_string(placement[op.name])
        task_of[op.name] = (spec.job, spec.task)
    parts: dict[tuple, TaskPart] = {}

    def part(task) -> TaskPart:
        p = parts.get(task)
        if p is None:
            p = parts[task] = TaskPart(task)
        return p

    fed_ops = {op.name for op in ops if op.outputs and all(t.name in fed for t in op.outputs)}
    for op in ops:
        if op.name in fed_ops:
            continue
        t = task_of[op.name]
        p = part(t)
        p.ops.append(op.name)
        dst = placement[op.name]
        for x in op.inputs:
            if x.name in fed:
                if x.name not in p.feeds:
                    p.feeds.append(x.name)
                continue
            src_task = task_of[x.op.name]
            if src_task != t:
                part(src_task).send_to.setdefault(x.name, set()).add(dst)
        for c in op._control_inputs:
            if c.name in fed_ops:
                name = next(x.name for x in c.outputs if x.name in fed)
                if name not in p.feeds:
                    p.feeds.append(name)
                continue
            src_task = task_of[c.name]
            if src_task != t:
                part(src_task).send_to.setdefault("^" + c.name, set()).add(cpu_of(t))
    for name in fetches:
        if name not in fed:
            p = part(task_of[name.rpartition(":")[0]])
            if name not in p.fetches:
                p.fetches.append(name)
    for name in targets:
        if name not in fed_ops:
            part(task_of[name]).targets.append(name)
    return Partition([parts[t] for t in sorted(parts)], fed_fetches)
