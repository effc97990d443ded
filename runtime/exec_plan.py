"""``ExecPlan``: what the executor runs for one part of a step, built once and reused.

The part of a step a task runs is not a closed subgraph: a fed tensor's producer
becomes a source with no inputs, an op of another task a source whose tensors arrive by
``recv``, and a *sink* on each remote device collects the tensors sent there. So the
plan is built over the part's own ops, never by changing the graph: ops of no graph
(:class:`core.graph.Operation` with ``graph`` None, :meth:`ExecPlan._build_plan`) for
the sources, the needed ops (each reading the part's ops) and the sinks; each with its
kind (``KERNEL``, ``FED``, ``REMOTE``, ``SINK``) and its op of the user's graph kept
beside it.  The plan is a :class:`core.dataflow.StepPlan` over them plus the per-op facts
the executor's hot path reads (:class:`_Node`: kernel, buffers, cores, checks), the
transfers' kinds and the fetched buffers. :func:`fuse_matmul_relu` and
:func:`fetch_writers` are the plan's two rewrites (a Relu folded into its MatMul; a
fetched tensor written into an offered buffer).
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from core.dataflow import StepPlan
from core.devices import DeviceSpec
from core.graph import Operation, topological_order
from core.partition import ops_needed
from core.runtime_model import INTERPRETER, forwarded_reads
from runtime.errors import InvalidArgument

__all__ = ["ExecPlan", "fuse_matmul_relu", "fetch_writers", "KERNEL", "VARIABLE", "FED",
           "REMOTE", "SINK", "LOCAL_COPY", "RECV", "SEND"]

# Node kinds: what the executor does with each op of a plan.
KERNEL, VARIABLE, FED, REMOTE, SINK = range(5)
# Transfer kinds.
LOCAL_COPY, RECV, SEND = range(3)


class _Node:
    """Per-op facts the hot path reads (one per op of the plan)."""

    __slots__ = ("name", "type", "kind", "device", "kernel", "attrs", "in_bufs", "out_base",
                 "n_out", "want_cores", "contexts", "checks", "var_name", "init_var",
                 "ctrl_sends", "gpu_ctx", "shape", "dtype", "remote_ctrl", "forward", "cheap",
                 "fused", "then", "var_lock")


class ExecPlan:
    """A StepPlan plus what the executor needs to run it fast; built once, reused.

    Built in phases: :meth:`_walk` (the ops the part needs, cut at fed tensors and other
    tasks' ops), :func:`_destinations` of each output (what goes to other tasks),
    :meth:`_build_plan` (the part's ops and the :class:`core.dataflow.StepPlan`),
    :meth:`_make_nodes` (per-op facts the hot path reads), :meth:`_transfers` and
    :meth:`_fetches`.
    """

    def __init__(self, executor, ops: Sequence[Operation], placement,
                 fetches: tuple, targets: tuple, fed: frozenset, send_to):
        devices = executor.devices
        self.placement = placement  # keeps the cache key's identity alive
        self.graph = ops[0].graph if ops else None
        local = set(devices.names)
        self.cpu_name = next((d.name for d in devices if d.is_cpu), devices.names[0])
        for op in ops:
            d = _device_of(placement, op.name)
            if d not in local:
                raise InvalidArgument(f"op {op.name!r} is placed on {d}, which is not a device of "
                                      f"this task ({', '.join(devices.names)})")
        needed, fed_ops, remote, node_device = self._walk(ops, placement, local, fetches,
                                                          targets, fed)
        # What goes to other tasks: tensors (and control announcements) per device.
        send_tensors: dict[str, list] = {}
        ctrl_sends: dict[str, list[str]] = {}
        my_task = (devices.job, devices.task)
        for op in needed.values():
            for t in op.outputs:
                for dst in _destinations(t.name, t.consumers(), placement, local, send_to, my_task,
                                         control=False, producer=op):
                    send_tensors.setdefault(dst, []).append(t)
            dsts = _destinations("^" + op.name, op.graph._consumers.get(op.name, ()), placement,
                                 local, send_to, my_task, control=True, producer=op)
            if dsts:
                ctrl_sends[op.name] = dsts
        # The plan's ops are the part's own (see _build_plan); each one's kind and op of
        # the user's graph (None: a sink) are kept beside it, index for index.
        self.plan, self.kinds, self.graph_ops = self._build_plan(
            needed, fed_ops, remote, node_device, send_tensors, ctrl_sends, placement)
        self.dev_objs = [devices.get(name) for name in self.plan.devices]  # None: another task's
        remote_ctrl = {name for name, info in remote.items() if info["ctrl"]}
        self.nodes = self._make_nodes(devices, remote_ctrl, ctrl_sends, executor.variable_lock)
        self._transfers(devices)
        self._fetches(fetches)

    def _walk(self, ops, placement, local, fetches, targets, fed) -> tuple:
        """The ops the part needs (:func:`core.partition.ops_needed` from its roots:
        fetched producers, targets, ops nothing in the part consumes), cut at fed
        tensors, at ops with a fed output and at other tasks' ops, which become the
        part's sources; return ``(needed, fed_ops, remote, node_device)``."""
        given = {op.name: op for op in ops}
        fed_ops: dict[str, Operation] = {}  # producer of a fed tensor -> the op
        remote: dict[str, dict] = {}
        node_device: dict[str, str] = {}

        def fed_source(op) -> None:
            if op.name not in fed_ops:
                fed_ops[op.name] = op
                d = placement.get(op.name)
                node_device[op.name] = d if d in local else self.cpu_name

        def has_fed_output(op) -> bool:
            return any(t.name in fed for t in op.outputs)

        consumed: set[str] = set()
        for op in ops:
            consumed.update(t.op.name for t in op.inputs)
            consumed.update(c.name for c in op._control_inputs)
        roots: list[str] = []
        for name in fetches:
            op_name = name.rpartition(":")[0]
            if name in fed:
                fed_source(_tensor(self.graph, name, given).op)
            elif op_name not in given:
                raise InvalidArgument(f"fetch {name!r} is neither fed nor produced by an op of "
                                      "this part of the step")
            else:
                roots.append(op_name)
        for name in targets:
            if name not in given:
                raise InvalidArgument(f"target op {name!r} is not among the ops of this part "
                                      "of the step")
            roots.append(name)
        roots += [op.name for op in ops if op.name not in consumed]

        # An op with a fed output is a source (it does not run), as another task's op is.
        producers = {name.rpartition(":")[0] for name in fed}  # (of the fed tensors)
        within = given
        if fed:
            within = given.keys() - {p for p in producers
                                     if p in given and has_fed_output(given[p])}
        reached = ops_needed([given[name] for name in dict.fromkeys(roots)], fed, within)
        needed = {op.name: op for op in reached if op.name in within}
        for op in reached:
            if op.name not in within and op.name in given:
                fed_source(op)
        # The sources the needed ops read: fed tensors' producers and other tasks' ops
        # (an op of the part that is not needed has a fed output).
        for op in needed.values():
            for t in op.inputs:
                p = t.op
                name = p.name
                if name in needed:
                    continue
                if name in producers and t.name in fed:
                    fed_source(p)
                    continue
                if name in given:  # p has another output fed, so it does not run
                    raise InvalidArgument(
                        f"op {op.name!r} reads {t.name!r}, which is not fed, while another "
                        f"output of op {name!r} is: feed every output of {name!r} the step "
                        "reads, or none")
                src = _device_of(placement, name)
                if src in local:
                    raise InvalidArgument(
                        f"op {op.name!r} reads {t.name!r}, made by op {name!r} on this task's "
                        f"device {src}, which is not among the ops of the step")
                remote.setdefault(name, {"op": p, "ctrl": False})
            for c in op._control_inputs:
                if c.name in needed or c.name in fed_ops:
                    continue
                if c.name in producers and has_fed_output(c):
                    fed_source(c)  # a fed op counts as done
                else:  # (an op of the part would be needed or fed)
                    src = _device_of(placement, c.name)
                    if src in local:
                        raise InvalidArgument(
                            f"op {op.name!r} waits for op {c.name!r} on this task's device "
                            f"{src}, which is not among the ops of the step")
                    remote.setdefault(c.name, {"op": c, "ctrl": False})["ctrl"] = True
        return needed, fed_ops, remote, node_device

    @staticmethod
    def _build_plan(needed, fed_ops, remote, node_device, send_tensors, ctrl_sends,
                    placement) -> tuple:
        """The part's ops, of no graph (:class:`core.graph.Operation` with ``graph``
        None): a source for each fed op and each other task's op (its type, attributes
        and outputs, no inputs), each needed op in topological order reading the part's
        ops, and a sink (``NoOp``) per destination device of sends, reading what goes
        there.  Returns their :class:`core.dataflow.StepPlan`, and for each op of the
        plan its kind and its op of the graph (None for a sink)."""
        part: dict[str, Operation] = {}
        kinds: list[int] = []
        graph_ops: list = []
        for kind, sources in ((FED, fed_ops), (REMOTE, {n: i["op"] for n, i in remote.items()})):
            for name, op in sources.items():
                part[name] = Operation(None, name, op.type, (), op.attrs, op.outputs)
                kinds.append(kind)
                graph_ops.append(op)
                if kind == REMOTE:
                    node_device[name] = _device_of(placement, name)
        order = list(part.values())
        for op in topological_order(list(needed.values())):
            controls = op._control_inputs
            own = part[op.name] = Operation(
                None, op.name, op.type,
                tuple(part[t.op.name].outputs[t.value_index] for t in op.inputs), op.attrs,
                op.outputs, [part[c.name] for c in controls] if controls else ())
            order.append(own)
            kinds.append(KERNEL)
            graph_ops.append(op)
            node_device[op.name] = placement[op.name]
        for dst in sorted(set(send_tensors) | {d for ds in ctrl_sends.values() for d in ds}):
            name = f"^send:{dst}"
            order.append(Operation(
                None, name, "NoOp", [part[t.op.name].outputs[t.value_index]
                                     for t in send_tensors.get(dst, ())], {}, (),
                [part[n] for n, ds in ctrl_sends.items() if dst in ds]))
            kinds.append(SINK)
            graph_ops.append(None)
            node_device[name] = dst
        plan = StepPlan.build(order, node_device)
        if plan.ops != order:  # (in topological order already: kept as given)
            at = {op.name: i for i, op in enumerate(order)}
            kinds = [kinds[at[name]] for name in plan.op_names]
            graph_ops = [graph_ops[at[name]] for name in plan.op_names]
        return plan, kinds, graph_ops

    def _make_nodes(self, devices, remote_ctrl: set, ctrl_sends: dict,
                    variable_lock) -> list:
        """The per-op facts (:class:`_Node`) of every op of the plan; an op that updates
        a variable with ``use_locking`` holds ``variable_lock(name)`` while it runs."""
        from runtime.kernels import KernelContext, get_kernel
        from runtime.kernels.cpu import PARALLEL_MIN_ELEMENTS, products_split
        products = products_split()

        plan, dev_objs = self.plan, self.dev_objs
        n_tensors = plan.n_tensors
        transfer_of = {(plan.transfer_tensor[k], plan.transfer_dst[k]): k
                       for k in range(plan.n_transfers)}
        nodes = []
        gpu_count = sum(1 for d in devices if not d.is_cpu)
        self.has_gpu = False
        kinds, graph_ops = self.kinds, self.graph_ops
        for i, m in enumerate(plan.ops):
            op, kind = graph_ops[i], kinds[i]
            node = _Node()
            node.name, node.type = m.name, m.type
            d = plan.op_device[i]
            node.device = dev_objs[d]
            node.out_base, node.n_out = int(plan.tensor_base[i]), len(m.outputs)
            node.kernel = node.attrs = node.contexts = node.var_name = node.init_var = None
            node.checks = ()
            node.want_cores = 0
            node.gpu_ctx = None
            node.remote_ctrl = kind == REMOTE and m.name in remote_ctrl
            node.ctrl_sends = ctrl_sends.get(m.name, ())
            node.kind = kind
            node.fused = False  # a Relu folded into its MatMul (fuse_matmul_relu)
            node.then = None  # that Relu's index, on the MatMul: it ends with it
            node.var_lock = None
            if kind != KERNEL:
                node.in_bufs = ()
                nodes.append(node)
                continue
            dev = node.device
            dev.check_usable(op.name)
            if not dev.is_cpu:
                self.has_gpu = True
                if gpu_count > 1:
                    node.gpu_ctx = dev.index
            in_bufs = []
            for t in m.inputs:
                j = plan.op_index[t.op.name]
                tid = int(plan.tensor_base[j]) + t.value_index
                in_bufs.append(tid if plan.op_device[j] == d else
                               int(n_tensors + transfer_of[(tid, d)]))
            node.in_bufs = tuple(in_bufs)
            if op.type == "Placeholder":
                raise InvalidArgument(
                    f"You must feed a value for placeholder tensor '{op.outputs[0].name}' with "
                    f"dtype {op.outputs[0].dtype.name} and shape {op.outputs[0].shape}")
            if op.type == "Variable":
                node.kind = VARIABLE
                node.var_name = op.name
                node.shape = tuple(op.outputs[0].shape)
                node.dtype = op.outputs[0].dtype.np
            else:
                node.kind = KERNEL
                node.kernel = get_kernel(op.type, dev.device_type)
                node.attrs = op.attrs
                # The pool's cores only for a kernel that may split its work over them
                # (OpDef.splits, as the simulator decides): a small one runs on one core,
                # and holding the others kept the other inter-op threads waiting.
                multi = dev.is_cpu and op.op_def.multithreaded and op.op_def.splits(
                    [t.spec for t in op.inputs], [t.spec for t in op.outputs], op.attrs,
                    PARALLEL_MIN_ELEMENTS, products)
                node.want_cores = (dev.intra_op_threads if multi else 1) if dev.is_cpu else 0
                if dev.is_cpu:
                    node.contexts = [None] + [KernelContext("CPU", k) for k in
                                              range(1, max(node.want_cores, 1) + 1)]
                else:
                    node.contexts = [KernelContext(dev.device_type, 1)]
                checks = []
                for pos, t in enumerate(op.inputs):
                    if t.op.type == "Variable":
                        if op.type == "Assign" and pos == 0:
                            node.init_var = t.op.name
                        else:
                            checks.append(t.op.name)
                node.checks = tuple(dict.fromkeys(checks))
                if (op.op_def.ref_inputs and op.attrs.get("use_locking")
                        and op.inputs[op.op_def.ref_inputs[0]].op.type == "Variable"):
                    node.var_lock = variable_lock(op.inputs[op.op_def.ref_inputs[0]].op.name)
            nodes.append(node)
        # A variable's read (Identity of a Variable op) forwards the variable's buffer
        # instead of copying it, as TensorFlow's IdentityOp does, when nothing in the
        # step writes that variable in place (then the copy keeps the read consistent).
        forwarded = forwarded_reads(op for op in graph_ops if op is not None)
        for node, op in zip(nodes, graph_ops):
            node.forward = node.kind == KERNEL and op.name in forwarded
        # Cheap ops may run inline on a thread that would only wait (Step._run_ready):
        # by the runtime model the simulator predicts this executor with (variables,
        # CPU kernels on small tensors of known shape), and forwarded variable reads,
        # which do no kernel work.
        is_cheap = INTERPRETER.is_cheap
        for node, op in zip(nodes, graph_ops):
            node.cheap = node.kind == VARIABLE or node.forward or (
                node.kind == KERNEL and is_cheap(
                    op.type, [t.shape for t in (*op.inputs, *op.outputs)],
                    node.device.is_cpu))
        # One sink per destination device of sends; it finishes once its sends are done.
        self.n_sinks = sum(1 for n in nodes if n.kind == SINK)
        # Tensors that are a variable's live buffer (copied before they leave the step).
        self.aliases = frozenset(
            nodes[i].out_base for i, m in enumerate(plan.ops) if nodes[i].n_out and (
                nodes[i].forward or m.type in ("Variable", "Assign", "AssignAdd", "AssignSub")))
        # Variables an Assign may create in this step (no buffer yet -> allocate one).
        self.assigned_vars = {n.init_var for n in nodes if n.init_var}
        return nodes

    def _transfers(self, devices) -> None:
        """Each transfer's kind (a recv, a send, a copy between local devices), links
        and names."""
        plan, dev_objs = self.plan, self.dev_objs
        kinds = []
        links = []
        for k in range(plan.n_transfers):
            src, dst = dev_objs[plan.transfer_src[k]], dev_objs[plan.transfer_dst[k]]
            kinds.append(RECV if src is None else SEND if dst is None else LOCAL_COPY)
            try:
                route = devices.cluster.route(plan.devices[plan.transfer_src[k]],
                                              plan.devices[plan.transfer_dst[k]])
                links.append(tuple(link.name for link in route))
            except Exception:  # a device another task's cluster view lacks: no links known
                links.append(())
        self.transfer_kind, self.transfer_links = kinds, links
        self.transfer_names = [plan.tensor_name(plan.transfer_tensor[k])
                               for k in range(plan.n_transfers)]
        self.n_recv = kinds.count(RECV)
        # Every recv of a step may wait in a recv-pool thread at once (without
        # recv_async): tensors, and the control edges from other tasks.
        self.n_recv_waits = self.n_recv + sum(1 for node in self.nodes if node.remote_ctrl)
        self.recv_consumer = [plan.ops[plan.transfer_consumers[k][0]].name
                              if plan.transfer_consumers[k] else "" for k in range(plan.n_transfers)]

    def _fetches(self, fetches) -> None:
        """The buffer of each fetched tensor (held to the end), whether it must be
        copied out, the fed names, the fused MatMul+Relu pairs, the kernels that may
        write a fetched tensor into an offered buffer, and the resident memory."""
        plan, nodes = self.plan, self.nodes
        self.fetch_bufs = {}
        for name in fetches:
            op_name, _, idx = name.rpartition(":")
            self.fetch_bufs[name] = int(plan.tensor_base[plan.op_index[op_name]]) + int(idx)
        self.keep = frozenset(self.fetch_bufs.values())
        self.copy_fetch = {name: plan.ops[plan.tensor_op[b]].type in
                           ("Variable", "Assign", "AssignAdd", "AssignSub")
                           or nodes[plan.tensor_op[b]].forward
                           for name, b in self.fetch_bufs.items()}
        self.fed_names = {n.name: [t.name for t in plan.ops[i].outputs]
                          for i, n in enumerate(nodes) if n.kind == FED}
        fuse_matmul_relu(nodes, plan, self.keep)
        self.fetch_writers = fetch_writers(nodes, plan, self.fetch_bufs, self.copy_fetch)
        # Memory: resident bytes per local device at the start.
        self.resident = {}
        for b in plan.resident:
            d = self.dev_objs[plan.buffer_device[b]]
            if d is not None:
                self.resident[d.name] = self.resident.get(d.name, 0) + plan.buffer_bytes[b]


def _device_of(placement, name: str) -> str:
    d = placement.get(name)
    if d is None:
        raise InvalidArgument(f"op {name!r} is needed by the step but has no device in "
                              "the placement")
    return d


def fuse_matmul_relu(nodes: list, plan, keep: frozenset) -> int:
    """Fold each Relu into the float MatMul that feeds it, where nothing else reads the
    MatMul's output: the MatMul kernel applies the relu to its output (each row block
    right after its gemm, in the parallel path) and the Relu hands that buffer on, as
    TensorFlow's remapper fuses MatMul + BiasAdd + Relu into one kernel.  The separate
    pass re-read and re-wrote the whole product (0.3-0.6 ms of each 1024x1024 layer of
    bench_runtime's MLP).  Only on CPU devices, for a Relu big enough not to be cheap
    (small ones cost the executor more than the pass), when the MatMul's output is not
    fetched nor sent.  Both ops keep their trace records (the Relu's takes no time and
    no core; memory is accounted as before; it ends when the MatMul ends, in the same
    round of the executor, unless it waits for something else too).  Returns how many
    were fused.
    """
    readers: dict[int, list[int]] = {}
    for j, node in enumerate(nodes):
        for b in node.in_bufs:
            readers.setdefault(b, []).append(j)
    sent = {int(plan.transfer_tensor[k]) for k in range(plan.n_transfers)}
    fused = 0
    for j, relu in enumerate(nodes):
        if relu.kind != KERNEL or relu.type != "Relu" or relu.cheap or not relu.device.is_cpu:
            continue
        b = relu.in_bufs[0]
        if b >= plan.n_tensors or b in keep or b in sent or readers.get(b) != [j]:
            continue
        i = int(plan.tensor_op[b])
        mm = nodes[i]
        if (mm.kind != KERNEL or mm.type != "MatMul" or mm.device is not relu.device
                or mm.attrs.get("_fused_relu")
                or np.dtype(plan.ops[i].outputs[0].dtype.np).kind != "f"):
            continue
        mm.attrs = {**mm.attrs, "_fused_relu": True}  # a copy: the graph's attrs stay
        relu.fused = True
        relu.cheap = True
        relu.want_cores = 0
        if not relu.ctrl_sends:  # else it sends them in a round of its own
            mm.then = j
        fused += 1
    return fused


def fetch_writers(nodes: list, plan, fetch_bufs: Mapping, copy_fetch: Mapping) -> dict:
    """``fetched tensor name -> index of the CPU kernel op that writes it`` as its first
    output: its producer, or the MatMul a fetched Relu was folded into (which writes the
    Relu's output).  ``run_step(fetch_into=...)`` offers such an op a buffer to write the
    tensor into (``KernelContext.out``).  Not for a fetch that is copied anyway (a
    variable's buffer) nor a variable's read."""
    writers = {}
    for name, b in fetch_bufs.items():
        i = int(plan.tensor_op[b])
        node = nodes[i]
        if node.fused:
            b = node.in_bufs[0]
            i = int(plan.tensor_op[b])
            node = nodes[i]
        if (node.kind == KERNEL and not node.forward and node.device.is_cpu
                and b == node.out_base and not copy_fetch[name]):
            writers[name] = i
    return writers


def _tensor(graph, name: str, given: dict):
    op_name, _, idx = name.rpartition(":")
    op = given.get(op_name) or graph.get_operation_by_name(op_name)
    return op.outputs[int(idx)]


def _task_of(device: str) -> tuple:
    spec = DeviceSpec.from_string(device)
    return (spec.job, spec.task)


def _destinations(key, consumers, placement, local, send_to, my_task, control, producer):
    """Remote devices ``key`` (a tensor name or ``^op``) goes to, sorted."""
    if send_to is not None:
        return sorted(send_to.get(key, ()))
    out = set()
    for c in consumers:
        if control and producer not in c._control_inputs:
            continue
        if not control and not any(t.op is producer and f"{t.name}" == key for t in c.inputs):
            continue
        d = placement.get(c.name)
        if d is not None and d not in local and _task_of(d) != my_task:
            out.add(d)
    return sorted(out)
