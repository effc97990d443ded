"""The "what runs next" state machine of one step: pure code, no I/O, no clock.

TensorFlow's executor counts, for each op, its unfinished inputs (data and control);
ops with none run at once, and when an op finishes its consumers' counts drop (seed
chapter 12; TensorFlow ``core/common_runtime/executor.cc``, ``PropagateOutputs``).  A
tensor that crosses devices is sent once per (tensor, destination device), and a
tensor's memory is freed when its last consumer and its last outgoing send are done.

Two classes split the work, so that the part that depends only on the graph and the
placement is built once and is cheap to replay:

- :class:`StepPlan` — immutable, integer-indexed: ops in topological order, their
  devices, the transfers (send/recv pairs) the placement needs, the buffers (a tensor on
  its producer's device, or a received copy) and who releases them.
- :class:`StepState` — the mutable counters of one run of a plan.  A driver (the
  simulator's event callbacks, the runtime's threads) tells it what happened
  (:meth:`~StepState.op_finished`, :meth:`~StepState.transfer_done`) and gets back what
  that made possible (:class:`Progress`: ops now ready, transfers to send, buffers to
  free).  It takes no locks: a multi-threaded driver serialises its calls.

>>> import core as tf
>>> from core.placement import Placement
>>> g = tf.Graph()
>>> with g.as_default():
...     a = tf.constant(1.0, name="a"); b = tf.identity(a, name="b")
>>> cpu0, cpu1 = "/job:w/replica:0/task:0/cpu:0", "/job:w/replica:0/task:1/cpu:0"
>>> plan = StepPlan.build(g.get_operations(), Placement({"a": cpu0, "b": cpu1}))
>>> state = StepState(plan)
>>> [plan.op_names[i] for i in state.initial_ready()]
['a']
>>> progress = state.op_finished(plan.op_index["a"])
>>> progress.ready, [plan.transfer_name(k) for k in progress.sends]
([], ['a:0 -> /job:w/replica:0/task:1/device:CPU:0'])
>>> [plan.op_names[i] for i in state.transfer_done(0).ready]
['b']
>>> state.op_finished(plan.op_index["b"]).freed  # b:0 (read by nobody), a:0's copy
[1, 2]
>>> state.done
True
"""

from __future__ import annotations

import heapq
from typing import Iterable, NamedTuple, Sequence

from core.costs import tensor_bytes as _default_tensor_bytes
from core.graph import Operation, Tensor, topological_order

__all__ = ["StepPlan", "StepState", "Progress", "UnplacedOp", "DataflowError"]

# A buffer that never reaches zero references: resident state (a variable's buffer) or
# a fetched tensor, which the client takes at the end of the step.
_HELD = 1 << 60

WAITING, READY, FINISHED = 0, 1, 2


class UnplacedOp(KeyError):
    """An op the step needs has no device in the placement (``op``)."""

    def __init__(self, op: str):
        self.op = op
        super().__init__(f"op {op!r} is needed by the step but the placement has no device "
                         "for it")

    def __str__(self) -> str:
        return self.args[0]


class DataflowError(RuntimeError):
    """A driver told the state machine something impossible (an op finished twice, a
    transfer done before its op ran...) or :meth:`StepState.validate` found a broken
    invariant."""


class Progress(NamedTuple):
    """What one event made possible: op indices now ``ready`` (ascending), transfer
    indices to ``sends`` (ascending), buffer indices ``freed`` (ascending)."""

    ready: list
    sends: list
    freed: list


class StepPlan:
    """The fixed structure of one step of a placed graph, as integer-indexed lists.

    Build with :meth:`build`.  Indices:

    - ops ``0..n_ops-1`` in topological order (creation order where that is one, else
      Kahn's order with creation-order ties, as :func:`core.graph.topological_order`);
    - devices ``0..n_devices-1``: ``devices`` sorted by name;
    - tensors ``0..n_tensors-1``: outputs of the ops, op by op (``tensor_base[i] + k``
      is output ``k`` of op ``i``);
    - transfers ``0..n_transfers-1``: one per (tensor, destination device);
    - buffers: buffer ``t`` is tensor ``t`` on its producer's device; buffer
      ``n_tensors + k`` is the copy transfer ``k`` receives.

    Transfers are ordered as :func:`core.placement.transfers` orders them (first
    consumer in topological order, then input order).

    Attributes (all lists, indexed as above): ``ops``, ``op_names``, ``op_index`` (name
    -> index), ``op_device``, ``op_preds`` (the op's dependencies: ``("op", j)`` and
    ``("transfer", k)`` entries are kept as two lists, ``op_pred_ops`` and
    ``op_pred_transfers``), ``op_outputs`` (buffer indices allocated when it starts),
    ``op_inputs`` (distinct buffers it reads), ``tensor_op``, ``tensor_bytes``,
    ``transfer_tensor``, ``transfer_src``, ``transfer_dst`` (device indices),
    ``transfer_consumers``, ``buffer_device``, ``buffer_bytes`` (memory: 0 for an output
    that aliases its input, as an ``Assign``'s), ``resident`` (buffers held from the
    start: outputs of persistent ops), ``held`` (fetched tensors' buffers).
    """

    def __init__(self):  # use build()
        pass

    @classmethod
    def build(cls, graph_ops: Sequence[Operation], placement, fetches: Iterable | None = None,
              *, tensor_bytes=_default_tensor_bytes) -> "StepPlan":
        """The plan of running ``fetches`` (ops or tensors; None: every op of
        ``graph_ops``) with ``placement`` (op name -> device name).

        Only the ops the fetches need through data and control inputs run.  Raises
        :class:`core.graph.GraphCycleError` naming a cycle and :class:`UnplacedOp` naming
        an op without a device, before anything runs.  ``tensor_bytes(tensor)`` sizes
        the tensors (default: :func:`core.costs.tensor_bytes`).
        """
        self = cls()
        ops = list(graph_ops)
        held_tensors: list[Tensor] = []
        if fetches is not None:
            targets = []
            for f in fetches:
                if isinstance(f, Tensor):
                    held_tensors.append(f)
                    targets.append(f.op)
                else:
                    targets.append(f)
            ops = _needed(targets, ops)
        ops = _topological(ops)
        self.ops = ops
        n = len(ops)
        self.op_names = names = [op.name for op in ops]
        self.op_index = index = {name: i for i, name in enumerate(names)}
        if len(index) != n:
            raise DataflowError("two ops of the step share a name")

        # Devices: canonical names from the placement, sorted.
        op_device_name = []
        get = placement.get if hasattr(placement, "get") else placement.__getitem__
        for name in names:
            d = get(name)
            if d is None:
                raise UnplacedOp(name)
            op_device_name.append(d)
        self.devices = sorted(set(op_device_name))
        dev_index = {d: i for i, d in enumerate(self.devices)}
        self.op_device = op_device = [dev_index[d] for d in op_device_name]

        # Tensors and their sizes.
        tensor_base = [0] * n
        tensor_op: list[int] = []
        tbytes: list[int] = []
        buffer_bytes: list[int] = []
        resident: list[int] = []
        for i, op in enumerate(ops):
            tensor_base[i] = len(tensor_op)
            op_def = op.op_def
            for k, t in enumerate(op.outputs):
                tensor_op.append(i)
                b = tensor_bytes(t)
                tbytes.append(b)
                # An output that aliases a ref input (Assign's output is the variable)
                # takes no new memory.
                buffer_bytes.append(0 if (k == 0 and op_def.ref_inputs) else b)
            if op_def.persistent:
                resident.extend(range(tensor_base[i], tensor_base[i] + len(op.outputs)))
        n_tensors = len(tensor_op)
        self.tensor_base, self.tensor_op, self.tensor_bytes = tensor_base, tensor_op, tbytes
        self.n_ops, self.n_tensors = n, n_tensors

        # Dependencies, transfers and buffer references.
        op_pred_ops: list[list[int]] = [[] for _ in range(n)]
        op_pred_transfers: list[list[int]] = [[] for _ in range(n)]
        op_inputs: list[list[int]] = [[] for _ in range(n)]
        transfer_of: dict[tuple[int, int], int] = {}  # (tensor, dst device) -> transfer
        pending_transfers: list[tuple[int, int, int]] = []  # (tensor, dst, first consumer)
        for i, op in enumerate(ops):
            dev = op_device[i]
            preds: set[int] = set()
            xfers: set[int] = set()
            bufs: list[int] = []
            for t in op.inputs:
                j = index.get(t.op.name)
                if j is None:  # cannot happen for ops_needed sets; keep the error clear
                    raise DataflowError(f"op {op.name!r} reads {t.name!r}, which is not in the step")
                tid = tensor_base[j] + t.value_index
                if op_device[j] == dev:
                    preds.add(j)
                    if tid not in bufs:
                        bufs.append(tid)
                else:
                    key = (tid, dev)
                    k = transfer_of.get(key)
                    if k is None:
                        k = transfer_of[key] = len(pending_transfers)
                        pending_transfers.append(key)
                    xfers.add(k)
                    if ~k not in bufs:
                        bufs.append(~k)  # fixed up below, once transfers are numbered
            for c in op._control_inputs:
                j = index.get(c.name)
                if j is None:
                    raise DataflowError(f"op {op.name!r} waits for {c.name!r}, which is not in the step")
                preds.add(j)
            op_pred_ops[i] = sorted(preds)
            op_pred_transfers[i] = sorted(xfers)
            op_inputs[i] = bufs
        # Transfers are numbered as found: by first consumer (topological order), then
        # input order, the order of core.placement.transfers.  A transfer that another
        # one's producer waits for is found first.
        n_transfers = len(pending_transfers)
        self.n_transfers = n_transfers
        self.transfer_tensor = [key[0] for key in pending_transfers]
        self.transfer_dst = [key[1] for key in pending_transfers]
        self.transfer_src = [op_device[tensor_op[t]] for t in self.transfer_tensor]
        for i in range(n):
            if op_pred_transfers[i]:
                op_inputs[i] = [b if b >= 0 else n_tensors + ~b for b in op_inputs[i]]
        self.op_pred_ops, self.op_pred_transfers, self.op_inputs = \
            op_pred_ops, op_pred_transfers, op_inputs

        # Reverse edges: what an op's end or a transfer's arrival unblocks.
        op_succ: list[list[int]] = [[] for _ in range(n)]
        transfer_consumers: list[list[int]] = [[] for _ in range(n_transfers)]
        for i in range(n):
            for j in op_pred_ops[i]:
                op_succ[j].append(i)
            for k in op_pred_transfers[i]:
                transfer_consumers[k].append(i)
        op_sends: list[list[int]] = [[] for _ in range(n)]
        for k, t in enumerate(self.transfer_tensor):
            op_sends[tensor_op[t]].append(k)
        self.op_succ, self.op_sends, self.transfer_consumers = op_succ, op_sends, transfer_consumers

        # Buffers and their references (consumers on the device + outgoing sends).
        refs = [0] * (n_tensors + n_transfers)
        for i in range(n):
            for b in op_inputs[i]:
                refs[b] += 1
        for t in self.transfer_tensor:
            refs[t] += 1
        held = sorted({tensor_base[index[t.op.name]] + t.value_index for t in held_tensors})
        for b in resident:
            refs[b] += _HELD
        for b in held:
            refs[b] += _HELD
        self.resident, self.held = resident, held
        self.buffer_refs = refs
        self.buffer_device = [op_device[o] for o in tensor_op] + list(self.transfer_dst)
        self.buffer_bytes = buffer_bytes + [tbytes[t] for t in self.transfer_tensor]
        self.buffer_tensor = list(range(n_tensors)) + list(self.transfer_tensor)
        # Outputs allocated when the op starts (resident ones exist from the start), and
        # outputs nobody reads, freed as soon as the op ends.
        op_outputs: list[list[int]] = []
        op_dead: list[list[int]] = []
        for i in range(n):
            outs = range(tensor_base[i], tensor_base[i] + len(ops[i].outputs))
            op_outputs.append([] if ops[i].op_def.persistent else list(outs))
            op_dead.append([b for b in outs if refs[b] == 0])
        self.op_outputs, self.op_dead_outputs = op_outputs, op_dead
        self.initial_pending = [len(op_pred_ops[i]) + len(op_pred_transfers[i]) for i in range(n)]
        return self

    # -- names ---------------------------------------------------------------------------
    def tensor_name(self, t: int) -> str:
        op = self.ops[self.tensor_op[t]]
        return f"{op.name}:{t - self.tensor_base[self.tensor_op[t]]}"

    def transfer_name(self, k: int) -> str:
        return f"{self.tensor_name(self.transfer_tensor[k])} -> {self.devices[self.transfer_dst[k]]}"

    def __repr__(self) -> str:
        return (f"<StepPlan {self.n_ops} ops on {len(self.devices)} devices, "
                f"{self.n_transfers} transfers>")


class StepState:
    """The counters of one run of a :class:`StepPlan`.

    ``pending[i]`` counts op ``i``'s unfinished dependencies (distinct ops it waits for
    on its own device or through a control edge, and transfers it waits for);
    ``refs[b]`` counts what still has to read buffer ``b``.  See the module docstring
    for an example.
    """

    __slots__ = ("plan", "pending", "refs", "status", "arrived", "ops_left", "transfers_left")

    def __init__(self, plan: StepPlan):
        self.plan = plan
        self.pending = list(plan.initial_pending)
        self.refs = list(plan.buffer_refs)
        self.status = bytearray(plan.n_ops)
        self.arrived = bytearray(plan.n_transfers)
        self.ops_left = plan.n_ops
        self.transfers_left = plan.n_transfers

    def initial_ready(self) -> list[int]:
        """The ops with no dependency, ascending; they are marked ready."""
        ready = [i for i, p in enumerate(self.pending) if p == 0]
        for i in ready:
            self.status[i] = READY
        return ready

    def op_finished(self, i: int) -> Progress:
        """Op ``i`` ended: its consumers' counts drop; its sends may start; the buffers it
        was the last reader of (and its outputs nobody reads) can be freed."""
        status = self.status
        if status[i] != READY:
            raise DataflowError(f"op {self.plan.op_names[i]!r} finished but it was "
                                f"{('waiting', 'ready', 'finished')[status[i]]}, not ready")
        status[i] = FINISHED
        self.ops_left -= 1
        plan, pending, refs = self.plan, self.pending, self.refs
        ready = []
        for j in plan.op_succ[i]:
            pending[j] -= 1
            if pending[j] == 0:
                status[j] = READY
                ready.append(j)
        freed = list(plan.op_dead_outputs[i])
        for b in plan.op_inputs[i]:
            refs[b] -= 1
            if refs[b] == 0:
                freed.append(b)
        if len(freed) > 1:
            freed.sort()
        return Progress(ready, plan.op_sends[i], freed)

    def transfer_done(self, k: int) -> Progress:
        """Transfer ``k`` arrived: the consumers on its destination may become ready; the
        source buffer is freed if this was its last reader."""
        plan = self.plan
        if self.arrived[k]:
            raise DataflowError(f"transfer {plan.transfer_name(k)} arrived twice")
        t = plan.transfer_tensor[k]
        if self.status[plan.tensor_op[t]] != FINISHED:
            raise DataflowError(f"transfer {plan.transfer_name(k)} arrived before its op ran")
        self.arrived[k] = 1
        self.transfers_left -= 1
        pending, status = self.pending, self.status
        ready = []
        for j in plan.transfer_consumers[k]:
            pending[j] -= 1
            if pending[j] == 0:
                status[j] = READY
                ready.append(j)
        self.refs[t] -= 1
        freed = [t] if self.refs[t] == 0 else []
        return Progress(ready, [], freed)

    @property
    def done(self) -> bool:
        """Every op finished and every transfer arrived."""
        return self.ops_left == 0 and self.transfers_left == 0

    def waiting_ops(self) -> list[int]:
        """Ops not yet ready (for diagnosing a driver that stalled)."""
        return [i for i, s in enumerate(self.status) if s == WAITING]

    def validate(self) -> None:
        """Recompute every counter from the finished ops and arrived transfers and
        compare; raise :class:`DataflowError` on any difference."""
        plan = self.plan
        finished = [s == FINISHED for s in self.status]
        problems = []
        for i in range(plan.n_ops):
            want = (sum(not finished[j] for j in plan.op_pred_ops[i])
                    + sum(not self.arrived[k] for k in plan.op_pred_transfers[i]))
            if self.pending[i] != want:
                problems.append(f"op {plan.op_names[i]!r}: pending {self.pending[i]}, expected {want}")
            if (self.status[i] == WAITING) != (want > 0):
                problems.append(f"op {plan.op_names[i]!r}: status {self.status[i]} with {want} pending")
        refs = list(plan.buffer_refs)
        for i in range(plan.n_ops):
            if finished[i]:
                for b in plan.op_inputs[i]:
                    refs[b] -= 1
        for k in range(plan.n_transfers):
            if self.arrived[k]:
                refs[plan.transfer_tensor[k]] -= 1
                if not finished[plan.tensor_op[plan.transfer_tensor[k]]]:
                    problems.append(f"transfer {plan.transfer_name(k)} arrived before its op ran")
        for b, (have, want) in enumerate(zip(self.refs, refs)):
            if have != want or have < 0:
                problems.append(f"buffer {b}: refs {have}, expected {want}")
        if self.ops_left != plan.n_ops - sum(finished):
            problems.append("ops_left is off")
        if self.transfers_left != plan.n_transfers - sum(self.arrived):
            problems.append("transfers_left is off")
        if problems:
            raise DataflowError("invalid step state: " + "; ".join(problems[:10]))


def _needed(targets: list[Operation], ops: Sequence[Operation]) -> list[Operation]:
    """The ops ``targets`` need through data and control inputs, in the order of ``ops``
    (ops outside ``ops`` that are needed are appended in discovery order)."""
    seen: dict[int, Operation] = {}
    stack = list(targets)
    while stack:
        op = stack.pop()
        if id(op) in seen:
            continue
        seen[id(op)] = op
        stack.extend(t.op for t in op.inputs)
        stack.extend(op._control_inputs)
    out = [op for op in ops if id(op) in seen]
    if len(out) != len(seen):
        inside = {id(op) for op in out}
        out += [op for key, op in seen.items() if key not in inside]
    return out


def _topological(ops: list[Operation]) -> list[Operation]:
    """``ops`` in topological order: as given when that already is one, else Kahn's
    order with ties by position; a cycle raises :class:`core.graph.GraphCycleError`
    naming it.

    In creation order (``graph.get_operations()``, or a subset of it) only a control
    input added by ``add_control_input`` can point forward, so only those are checked
    then; any other order is checked edge by edge.
    """
    pos = {id(op): i for i, op in enumerate(ops)}
    graph = ops[0].graph if ops else None
    creation = graph is not None and (ops == graph._ops or _is_creation_order(ops, graph))
    forward = False
    for i, op in enumerate(ops):
        deps = op._control_inputs if creation else [t.op for t in op.inputs] + op._control_inputs
        for c in deps:
            p = pos.get(id(c))
            if p is not None and p >= i:
                forward = True
                break
        if forward:
            break
    if not forward:
        return ops
    preds = [{pos[id(x)] for x in [t.op for t in op.inputs] + op._control_inputs if id(x) in pos}
             for op in ops]
    count = [len(ps) for ps in preds]
    succ: list[list[int]] = [[] for _ in ops]
    for i, ps in enumerate(preds):
        for p in ps:
            succ[p].append(i)
    heap = [i for i, c in enumerate(count) if c == 0]
    heapq.heapify(heap)
    out = []
    while heap:
        i = heapq.heappop(heap)
        out.append(ops[i])
        for j in succ[i]:
            count[j] -= 1
            if count[j] == 0:
                heapq.heappush(heap, j)
    if len(out) != len(ops):
        topological_order(ops)  # raises GraphCycleError naming the ops on a cycle
        raise DataflowError("the graph has a cycle")  # pragma: no cover
    return out


def _is_creation_order(ops: list[Operation], graph) -> bool:
    """Whether ``ops`` is a subsequence of the graph's creation order."""
    order = {id(op): i for i, op in enumerate(graph._ops)}
    last = -1
    for op in ops:
        i = order.get(id(op))
        if i is None or i <= last:
            return False
        last = i
    return True
