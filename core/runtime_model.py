"""How a runtime dispatches ops: one definition that the simulator, the placers' step
estimate and the executor share.

A runtime is more than its devices' rates.  TensorFlow's C++ executor dispatches an op
in about a microsecond and runs many at once; this lab's own executor dispatches each op
from a Python interpreter, one at a time per server process, and the interpreters share
the host's cores with the kernels.  A :class:`RuntimeModel` names which of those
behaviours a prediction includes.  Its parts mean something only together, so the
model is one value with named instances (:data:`IDEAL`, :data:`INTERPRETER`), checked
when it is made, rather than loose flags that are silently ignored alone.  A calibrated
:class:`core.cluster.Cluster` records the model it was calibrated for
(``Cluster.runtime_model``), so ``sim.simulate(graph, placement, cluster)`` predicts
that runtime with nothing else set.

>>> INTERPRETER.serial_dispatch, IDEAL.serial_dispatch, TENSORFLOW.crossing_cores
(True, False, True)
>>> TENSORFLOW.parts_together, IDEAL.parts_together
(True, False)
>>> get_runtime_model("interpreter") is INTERPRETER
True
>>> RuntimeModel(dispatch_cores=True)
Traceback (most recent call last):
...
ValueError: RuntimeModel: dispatch_cores needs serial_dispatch (it describes how a serial dispatcher shares the host's cores)
>>> INTERPRETER.is_cheap("Mul", [(64, 64), (64, 64)], on_cpu=True)
True
>>> INTERPRETER.is_cheap("Mul", [(None, 64)], on_cpu=True)
False
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Iterable, Mapping

__all__ = ["RuntimeModel", "IDEAL", "INTERPRETER", "TENSORFLOW", "RUNTIME_MODELS",
           "get_runtime_model", "CHEAP_ELEMENTS", "forwarded_reads"]

#: The interpreter runtime's cheap-op limit: a CPU kernel whose every input and output
#: has at most this many elements (a 64x64 matmul at most) runs serially, below the
#: kernels' parallel thresholds, so a thread that would only wait may run it inline.
CHEAP_ELEMENTS = 4096

_NEEDS_SERIAL = {
    "dispatch_cores": "it describes how a serial dispatcher shares the host's cores",
    "copies_on_cores": "a crossing's copy is work of the serial dispatchers at its ends",
    "step_costs_on_cores": "a step's fixed costs are work of the serial dispatchers",
    "inline_elements": "running cheap ops inline is how a serial dispatcher's thread goes on",
}


@dataclass(frozen=True)
class RuntimeModel:
    """What the simulator assumes of the runtime that runs a step.

    Attributes
    ----------
    name : what the model is called in a saved cluster and in reports.
    serial_dispatch : each task dispatches one op at a time, as a runtime whose executor
        runs in one Python interpreter does (its GIL): an op's first part, the device's
        ``op_overhead`` plus its kernel type's fixed cost, waits for the task's
        dispatcher and holds it; the kernel's work runs in parallel.  A crossing between
        tasks costs its route's latency as work on its two ends' dispatchers, half each.
        False: dispatch costs nothing beyond each op's overhead, as in TensorFlow's C++
        executor.
    dispatch_cores : the dispatchers' work also needs one of its host's cores, shared
        with the kernels (three server processes on two cores do not all run at once).
    copies_on_cores : a crossing between two tasks of one host is work of its two ends'
        dispatchers for its whole transfer time (the runtime copies with the host's
        cores, no DMA engine), not bytes on a link; less, where the link measured its
        ends' CPU (``Link.cpu_costs``), for crossings that come in a burst (see
        :meth:`crossing_work`).
    step_costs_on_cores : a step's fixed costs (the tasks' ``step_overhead`` and
        ``part_overhead``) are dispatcher work, not only a delay.
    inline_elements : the thread that finished an op goes on with the cheap ops it made
        ready on its device (see :meth:`is_cheap`) and one other, as the runtime's
        executor does; None: every ready op queues for the pool.
    crossing_cores : a crossing over links that measured ``Link.busy_cores`` (two tasks
        of one host) holds that many of its host's cores while it holds the links,
        queued with the host's kernels for them (:meth:`crossing_cores_of`): the
        runtime's threads copy, encode and decode the tensor at both ends at once, and
        kernels and crossings take turns on the cores.  A control edge between two such
        tasks too (the runtime sends it as an empty tensor): it holds them for its
        route's latency less the links' ``wait``.  A runtime without serial
        dispatch only: with it, ``copies_on_cores`` books a copy as its ends' work.
    parts_together : every task of a step starts its part at once, when the master has
        made all its calls (its ``step_overhead`` and each other involved task's
        ``part_overhead``), instead of each task as its call is made, the master's own
        part last: TensorFlow's master sends its RunGraph calls without waiting for one
        to be taken: in traced steps the ps's and worker 1's parts started within about
        0.15 ms of each other (medians), both 0.3 to 0.5 ms after the master's own
        (``docs/probes/tf_part_ends_probe.py``; the master's part is not moved before
        them, as ``part_overhead`` is calibrated with it after the calls).  A runtime without
        serial dispatch only: with it, ``step_costs_on_cores`` books each call as the
        dispatchers' work when it is made.

    copies_forwarding_ops : the kernels of the ops that TensorFlow runs by handing their
        input's buffer on (``OpDef.forwards_input``: Identity, Reshape, StopGradient,
        Squeeze) copy it instead, as this lab's executor's do ("outputs never alias
        inputs"), but for a variable's read that nothing in the step writes
        (:func:`forwarded_reads`): each costs its bytes' time
        (:meth:`core.costs.CostModel.copy_time`; a training step's reads of the
        variables it updates copy them: 10-15 us for each 256 KiB weight matrix of the
        mlp workload, where the cost model had 0.6 us:
        ``docs/probes/copying_reads_probe.py``).
        False: they all hand the buffer on, as TensorFlow's do.  The memory
        the simulator books is not changed: such an op still allocates nothing there
        (:mod:`sim.memory`).

    Every part but ``serial_dispatch``, ``crossing_cores``, ``parts_together`` and
    ``copies_forwarding_ops`` refines a serial dispatcher, so each needs it; a model
    that sets one without it, or ``crossing_cores`` or ``parts_together`` with it,
    raises ValueError.  See :mod:`sim.engine` for how the simulator carries each part
    out.
    """

    name: str = "custom"
    serial_dispatch: bool = False
    dispatch_cores: bool = False
    copies_on_cores: bool = False
    step_costs_on_cores: bool = False
    inline_elements: int | None = None
    crossing_cores: bool = False
    parts_together: bool = False
    copies_forwarding_ops: bool = False

    def __post_init__(self):
        if self.inline_elements is not None and (
                not isinstance(self.inline_elements, int) or isinstance(self.inline_elements, bool)
                or self.inline_elements < 0):
            raise ValueError("RuntimeModel: inline_elements must be a non-negative integer or "
                             f"None, not {self.inline_elements!r}")
        if not self.serial_dispatch:
            for part, why in _NEEDS_SERIAL.items():
                value = getattr(self, part)
                if value not in (False, None):
                    raise ValueError(f"RuntimeModel: {part} needs serial_dispatch ({why})")
        elif self.crossing_cores:
            raise ValueError("RuntimeModel: crossing_cores excludes serial_dispatch (a serial "
                             "dispatcher's copies are its work: copies_on_cores)")
        elif self.parts_together:
            raise ValueError("RuntimeModel: parts_together excludes serial_dispatch (a serial "
                             "dispatcher takes each call as it is made: step_costs_on_cores)")

    def copying_ops(self, ops, forwarded: set[str] | None = None) -> set[str]:
        """The names of the ops among ``ops`` (a step's operations) whose kernels copy
        their input under this runtime where TensorFlow's would hand its buffer on: with
        ``copies_forwarding_ops``, every op with an input that ``OpDef.forwards_input``
        marks, but the variable reads that forward (:func:`forwarded_reads`, or
        ``forwarded`` when the caller has them already); else none.

        >>> import core as tf
        >>> g = tf.Graph()
        >>> with g.as_default():
        ...     v = tf.Variable(tf.zeros([64, 64]), name="v")
        ...     y = tf.reshape(tf.identity(v, name="r") * 2.0, [4096], name="y")
        >>> step = [op for op in g.get_operations() if op.name not in ("zeros", "v/Assign")]
        >>> sorted(INTERPRETER.copying_ops(step)), TENSORFLOW.copying_ops(step)
        (['r', 'y'], set())
        """
        if not self.copies_forwarding_ops:
            return set()
        ops = list(ops)
        if forwarded is None:
            forwarded = forwarded_reads(ops)
        return {op.name for op in ops
                if op.op_def.forwards_input and op.inputs and op.name not in forwarded}

    def crossing_cores_of(self, links, host_cores: int) -> int:
        """The cores of its host a crossing over the route ``links`` holds while on it:
        with ``crossing_cores``, the links' measured ``busy_cores`` (the largest),
        rounded, at least one and at most ``host_cores``, where every link of the route
        is a host's ``memcpy`` link that measured it; else 0.

        >>> from core.hardware import Link
        >>> link = Link("memcpy:h", "memcpy", 1e9, 1e-4, busy_cores=1.8)
        >>> TENSORFLOW.crossing_cores_of([link], 2), TENSORFLOW.crossing_cores_of([link], 1)
        (2, 1)
        >>> IDEAL.crossing_cores_of([link], 2), TENSORFLOW.crossing_cores_of([], 2)
        (0, 0)
        """
        if not self.crossing_cores or not links or host_cores < 1:
            return 0
        if not all(link.kind == "memcpy" and link.busy_cores > 0 for link in links):
            return 0
        return min(host_cores, max(1, round(max(link.busy_cores for link in links))))

    def is_cheap(self, op_type: str, shapes: Iterable, on_cpu: bool) -> bool:
        """Whether the runtime counts an op cheap enough to run inline: a ``Variable``
        on a CPU, or a CPU kernel whose every input and output shape (``shapes``) is
        fully known with at most ``inline_elements`` elements.  Always False when the
        model runs nothing inline."""
        limit = self.inline_elements
        if limit is None or not on_cpu:
            return False
        if op_type == "Variable":
            return True
        for shape in shapes:
            if shape is None or any(d is None for d in shape) or math.prod(shape) > limit:
                return False
        return True

    def crossing_work(self, links, nbytes: int, seconds: float) -> tuple[float, float, float]:
        """``(sent, taken, taken_in_burst)``: with serial dispatch, the work of each end's
        dispatcher for a crossing of ``nbytes`` over the route ``links`` that takes
        ``seconds`` in all: the sender's before the tensor leaves; the receiver's before
        its consumers may start, ``taken`` when it comes alone, ``taken_in_burst`` when
        it comes while the receiver still takes in another crossing of a burst and
        takes it in straight after that one (no other work of the receiver's
        dispatcher between: its reader thread goes on from one tensor to the next; a
        burst starts with a crossing that finds the receiver's dispatcher free).  The
        links carry the rest, ``seconds - sent - taken``.

        By default each end does half the route's latency.  With ``copies_on_cores``, a
        route of ``memcpy`` links (two tasks of one host) is all its ends' work: half
        its time each, unless the links measured the ends' CPU (``Link.crossing_cpu``,
        by a calibration of the runtime with many crossings at once).  Then the sender
        does its part (its executor's thread, running, encodes and writes the tensor),
        and the receiver the rest of the crossing's time when the crossing comes alone
        (its reader thread wakes for it: a crossing alone costs the processes about its
        whole time of CPU), but only its own part in a burst (its reader, awake, goes on
        to the next tensor).  The parts are scaled down to fit ``seconds``.

        >>> from core.hardware import Link
        >>> link = Link("memcpy:h", "memcpy", 1e9, 1e-4, cpu_costs=[(0, 2e-5, 4e-5)])
        >>> [round(x, 9) for x in INTERPRETER.crossing_work([link], 0, 1e-4)]
        [2e-05, 8e-05, 4e-05]
        >>> [round(x, 9) for x in INTERPRETER.crossing_work([link], 0, 3e-5)]
        [1e-05, 2e-05, 2e-05]
        >>> RuntimeModel(serial_dispatch=True).crossing_work([link], 0, 1e-4)
        (5e-05, 5e-05, 5e-05)
        """
        if self.copies_on_cores and all(link.kind == "memcpy" for link in links):
            cpu = [link.crossing_cpu(nbytes) for link in links]
            if not cpu or any(c is None for c in cpu):
                return seconds / 2, seconds / 2, seconds / 2
            sent, taken = sum(c[0] for c in cpu), sum(c[1] for c in cpu)
            if sent + taken > seconds:  # (more CPU than time: the processes overlap)
                scale = seconds / (sent + taken)
                sent, taken = sent * scale, taken * scale
            return sent, seconds - sent, taken
        half = sum(link.latency for link in links) / 2
        return half, half, half

    def to_dict(self) -> dict:
        """The model as plain data (a cluster's JSON keeps it)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: "Mapping | str") -> "RuntimeModel":
        """A model from :meth:`to_dict`'s output or from a known model's name."""
        if isinstance(data, str):
            return get_runtime_model(data)
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"RuntimeModel: unknown field(s) {unknown}; known: {sorted(known)}")
        return cls(**data)


#: A runtime whose dispatch costs nothing beyond each op's overhead and that runs ops
#: on every free inter-op thread at once: TensorFlow's C++ executor, nearly.
IDEAL = RuntimeModel("ideal")

#: This lab's executor: ops dispatched from a Python interpreter per server process,
#: sharing the host's cores with the kernels and the copies between processes, cheap
#: ops run inline by the thread that made them ready.
INTERPRETER = RuntimeModel("interpreter", serial_dispatch=True, dispatch_cores=True,
                           copies_on_cores=True, step_costs_on_cores=True,
                           inline_elements=CHEAP_ELEMENTS, copies_forwarding_ops=True)

#: TensorFlow's runtime: :data:`IDEAL`'s dispatch, and its crossings between the server
#: processes of a host keep the host's cores busy at both ends while they cross
#: (``docs/probes/tf_crossing_cores_probe.py``), taking turns with the kernels; the
#: tasks' parts of a step start together (``docs/probes/tf_part_ends_probe.py``).
TENSORFLOW = RuntimeModel("tensorflow", crossing_cores=True, parts_together=True)

#: The named models, by name.
RUNTIME_MODELS: dict[str, RuntimeModel] = {m.name: m for m in (IDEAL, INTERPRETER, TENSORFLOW)}


def get_runtime_model(model: "str | RuntimeModel | None") -> RuntimeModel:
    """``model`` itself, the named model, or :data:`IDEAL` for None; an unknown name
    raises ValueError listing the known ones."""
    if model is None:
        return IDEAL
    if isinstance(model, RuntimeModel):
        return model
    try:
        return RUNTIME_MODELS[model]
    except KeyError:
        raise ValueError(f"unknown runtime model {model!r}; known: {sorted(RUNTIME_MODELS)}"
                         ) from None


def forwarded_reads(ops) -> set[str]:
    """The names of the ops among ``ops`` (a step's operations) that read a variable of
    the step by handing its buffer on: an ``Identity`` of a ``Variable`` that no op of
    the step writes in place (then the read must copy, to stay consistent).  The
    executor runs them without a kernel, so it counts them cheap whatever their size.

    >>> import core as tf
    >>> g = tf.Graph()
    >>> with g.as_default():
    ...     v = tf.Variable(tf.zeros([64, 64]), name="v")
    ...     r = tf.identity(v, name="r")
    >>> step = [g.get_operation_by_name(n) for n in ("v", "v/read", "r")]
    >>> sorted(forwarded_reads(step))   # (r reads the read, not the variable)
    ['v/read']
    >>> sorted(forwarded_reads(g.get_operations()))   # v/Assign writes v in place
    []
    """
    ops = list(ops)
    names = {op.name for op in ops}
    written = {op.inputs[0].op.name for op in ops if op.op_def.ref_inputs and op.inputs}
    return {op.name for op in ops
            if op.type == "Identity" and op.inputs and op.inputs[0].op.type == "Variable"
            and op.inputs[0].op.name in names and op.inputs[0].op.name not in written}
