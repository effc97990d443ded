"""The local executor: runs one task's part of a step on its devices' inter-op pools.

Contract (the in-process :class:`runtime.session.Session` and the gRPC worker service
both call it):

``Executor(devices: LocalDevices, variables: VariableStore)``, then
``run_step(ops, placement, *, fetches=(), targets=(), feeds=None, io=None,
send_to=None, step_id=0, trace=False, timeout=None, fetch_into=None) -> StepResult``.
``io`` is the step's :class:`StepIO`, the one object through which the part exchanges
tensors with the other tasks (its ``recv``, ``send``, ``recv_async`` and ``watch``
below; TensorFlow's per-step rendezvous).

1. ``ops`` are the ops of this task's part of the step (every op the step needs that is
   placed on one of this task's devices, any order).  The executor builds a
   :class:`core.dataflow.StepPlan` over them (cached, keyed by the op names, the
   placement object's identity, the fetches, targets, fed names and ``send_to``) and
   drives a :class:`core.dataflow.StepState` from the pools' threads; StepState calls
   are serialised by one lock per step, kernels run outside it.  An op of ``ops``
   whose outputs are neither consumed in the part, fetched, targeted nor sent runs
   anyway (the caller said the step needs it); what only a fed tensor needed does not.
2. ``feeds`` (tensor name -> numpy array) replace any tensor; the producer of a fed
   tensor does not run (it is recorded as a zero-length op at the step's start, so
   the trace validates).  An unfed ``Placeholder`` among the ops raises
   :class:`~runtime.errors.InvalidArgument` before anything runs.
3. An input whose producer is not in ``ops`` (placed on another task) comes from
   ``recv(tensor_name, src_device, dst_device) -> np.ndarray``, called once per
   (tensor, destination device) at the start of the step, from a helper thread
   (blocking is fine).  A control input from another task is waited for with
   ``recv("^" + op_name, src_device, dst_device)`` (its value is ignored).  If ``recv``
   raises, the step is aborted and :class:`~runtime.errors.OpError` names the op that
   needed the tensor (the original exception is its ``__cause__``).
4. An output consumed on another task is pushed once per (tensor, destination device)
   with ``send(tensor_name, host_numpy_value, dst_device)`` as soon as it is produced,
   from the thread that produced it; an op that a remote op waits for through a control
   edge is announced with ``send("^" + op_name, np.zeros(0, np.float32), dst_device)``.
   The destinations are ``send_to`` (tensor name or ``"^op"`` -> destination devices)
   when given, else every device of another task holding a consumer of it in the
   placement (which over-sends if the step does not need that consumer: the master,
   which knows the step, should pass ``send_to``).
5. Between devices of this task (CPU <-> GPU, GPU <-> GPU) a tensor is copied directly
   (``to_device`` / ``copy_to_host``), once per (tensor, destination device), recorded
   as a :class:`core.trace.TransferRecord` over the cluster's route.  A ``recv`` is
   recorded as a transfer from the remote device, from the call to its return.
6. ``fetches`` (tensor names, produced or fed in this part) come back as host numpy
   arrays (copies when they alias a variable; with ``fetch_into``, possibly the buffer
   offered for it, written by its kernel); ``targets`` (op names) must run.
   Variable ops read the :class:`~runtime.variables.VariableStore` (the executor serves
   them itself, without a kernel call); an ``Assign`` to an uninitialised variable
   gets a fresh buffer of the variable's shape and dtype on its device, stored once the
   assign ran; any other use of an uninitialised variable raises
   :class:`~runtime.errors.FailedPrecondition` (``Attempting to use uninitialized value
   <name>``).  A variable's ``read`` (an Identity of a Variable op) hands on the
   variable's buffer without a copy, as TensorFlow's IdentityOp does, when no op of the
   step writes that variable in place; values that alias a variable are copied before
   they leave the step (fetches, sends).
7. :class:`StepResult` ``(values, ops, transfers, memory, oom, start, end, sent,
   capacity, meta)``: times from ``time.perf_counter()`` (absolute: CLOCK_MONOTONIC is
   shared by the processes of one host, so a master can merge the records of several
   workers); ``ops``, ``transfers``, ``memory`` and ``oom`` are filled only with
   ``trace=True``.  ``sent`` lists ``(tensor, dst_device, time)`` of the remote sends.
   :meth:`StepResult.to_trace` shifts the times so the step starts at 0.
8. ``OpRecord.thread`` is the inter-op slot that ran the op.  A CPU op holds host cores
   while it runs (:class:`runtime.local_devices.HostCores`): one, or for a
   multithreaded kernel up to the device's intra-op threads; the kernel gets
   ``ctx.intra_op_threads`` = the cores it holds, and ``OpRecord.cores`` says how many.
   GPU ops hold no core (``cores=0``).
9. Errors: a kernel exception aborts the step (ops already running finish, no new one
   starts) and raises :class:`~runtime.errors.OpError` naming the op and its device,
   chained to the original; a step running past ``timeout`` seconds raises
   :class:`~runtime.errors.DeadlineExceeded` naming the ops not finished.
10. Memory (traced runs): each device starts with its resident buffers (the variables the
    step touches); an op's outputs are allocated when it starts and freed after their
    last reader (a fetched tensor is held to the end); an allocation that passes the
    device's capacity is an :class:`core.trace.OOMEvent` (recorded, not raised).
11. A Relu on a CPU device whose input is a float MatMul's product that nothing else
    reads (not fetched, not sent) is folded into that MatMul (:func:`fuse_matmul_relu`):
    the MatMul's record includes the relu, the Relu's takes no time and holds no core.

>>> import numpy as np, core as tf
>>> from core.cluster import Cluster
>>> from core.placement import Placement
>>> from runtime.local_devices import LocalDevices
>>> from runtime.variables import VariableStore
>>> g = tf.Graph()
>>> with g.as_default():
...     c = tf.constant(3.0, name="a") * tf.constant(4.0, name="b")
>>> cluster = Cluster.single_host()
>>> cpu = cluster.devices[0].name
>>> placement = Placement({op.name: cpu for op in g.get_operations()})
>>> ex = Executor(LocalDevices.for_task(cluster, "localhost", 0), VariableStore())
>>> ex.run_step(g.get_operations(), placement, fetches=["mul:0"]).values["mul:0"]
array(12., dtype=float32)
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from time import perf_counter
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np

from core.dataflow import FINISHED, StepState
from core.graph import Operation
from core.trace import TransferRecord
from runtime.allocator import keep_freed_memory
from runtime.errors import (DeadlineExceeded, FailedPrecondition, InvalidArgument,
                            LabRuntimeError, OpError, Unavailable)
from runtime.exec_plan import (FED, RECV, REMOTE, SEND, SINK, VARIABLE, ExecPlan, _Node,
                                fetch_writers, fuse_matmul_relu)
from runtime.local_devices import LocalDevices
from runtime.rendezvous import StepIO
from runtime.step_result import StepResult, add_records
from runtime.variables import VariableStore

__all__ = ["Executor", "StepResult", "StepIO", "fuse_matmul_relu"]


_CONTROL_VALUE = np.zeros(0, np.float32)


def _cuda():
    from numba import cuda
    return cuda


def _to_host(value):
    """A host numpy array of a kernel output (a device array is copied back)."""
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "copy_to_host"):
        return value.copy_to_host()
    return np.asarray(value)


def shares_variable(value, store: VariableStore) -> bool:
    """Whether a host array is (a view of) a variable's live buffer in ``store``."""
    for name in store.names() if len(store) < 64 else ():
        buf = store._values.get(name)
        if isinstance(buf, np.ndarray) and np.shares_memory(value, buf):
            return True
    return len(store) >= 64  # many variables: copy rather than search


_NO_IO = StepIO()


class _Step:
    """The mutable state of one run: buffers, counters, records, completion."""

    __slots__ = ("ex", "xp", "plan", "state", "lock", "vals", "done", "error", "aborted",
                 "recv", "send", "trace", "op_times", "xfer_records", "mem_events", "sent",
                 "pending_vars", "fetch_bufs", "keep", "start", "send_copies", "recv_async",
                 "send_final", "sinks_left", "out_into")

    def __init__(self, ex: "Executor", xp: ExecPlan, recv, send, trace: bool):
        self.ex, self.xp, self.plan = ex, xp, xp.plan
        self.state = StepState(xp.plan)
        self.lock = threading.Lock()
        self.vals = [None] * (xp.plan.n_tensors + xp.plan.n_transfers)
        self.done = threading.Event()
        self.error = None
        self.aborted = False
        self.recv, self.send, self.trace = recv, send, trace
        self.op_times = {}  # op index -> (start, end, slot, cores)
        self.xfer_records = []
        self.mem_events = []  # (time, seq, device name, delta, op, tensor)
        self.sent = []
        self.send_copies = False
        self.recv_async = None
        self.send_final = False
        self.sinks_left = xp.n_sinks
        self.pending_vars = {}
        self.keep = xp.keep
        self.out_into = None  # op index -> buffer offered for its first output (fetch_into)

    # -- failure ---------------------------------------------------------------------
    def fail(self, error: BaseException) -> None:
        with self.lock:
            if self.error is None:
                self.error = error
            self.aborted = True
        self.done.set()

    def let_go(self) -> None:
        """Drop the step's values once ``run_step`` gives up on it (it failed): the step
        object may outlive the call (ops still running, a pool thread's last item,
        callbacks of its transfers, the frames of its error's traceback), and must not
        keep the buffers offered for the fetches (``fetch_into``: the caller's) or any
        other value alive meanwhile."""
        self.out_into = None
        vals = self.vals
        vals[:] = [None] * len(vals)  # in place: the list is shared with running ops

    # -- state changes (call with self.lock held) ---------------------------------------
    def _progress(self, progress, now: float, ready_out: list, sends_out: list) -> None:
        """Absorb a Progress: free buffers, finish ready sinks, collect ready ops/sends."""
        ready, sends, freed = progress
        if freed:
            vals, keep, plan = self.vals, self.keep, self.plan
            for b in freed:
                if b in keep:
                    continue
                vals[b] = None
                if self.trace and b not in self.xp.aliases:
                    d = self.xp.dev_objs[plan.buffer_device[b]]
                    if d is not None and plan.buffer_bytes[b]:
                        self.mem_events.append((now, len(self.mem_events), d.name,
                                                -plan.buffer_bytes[b], None, None))
        if sends:
            sends_out.extend(sends)
        nodes = self.xp.nodes
        for j in ready:
            if nodes[j].kind == SINK:
                self.sinks_left -= 1
                self._progress(self.state.op_finished(j), now, ready_out, sends_out)
            else:
                ready_out.append(j)
        if self.state.done:
            self.done.set()

    # -- running ops -------------------------------------------------------------------
    def run_op(self, slot: int, i: int, cheap_only: bool = False) -> None:
        """Pool entry point: run op ``i`` and, inline, the ready ops of the same device
        that it makes ready (``cheap_only``: only cheap ones, queueing the others)."""
        try:
            work = [i]
            nodes = self.xp.nodes
            while work:
                if self.aborted:
                    return
                i = work.pop()
                if cheap_only and not nodes[i].cheap:
                    nodes[i].device.pool.submit(self.run_op, i)
                    continue
                work.extend(self._run_one(slot, i))
        except BaseException as e:  # noqa: BLE001 - a pool thread must never die
            self.fail(e)

    def _run_one(self, slot: int, i: int):
        xp = self.xp
        node = xp.nodes[i]
        dev = node.device
        vals = self.vals
        cores = 0
        t0 = perf_counter()
        try:
            if node.kind == VARIABLE:
                outs = (self._variable_buffer(node),)
                t1 = t0
            elif node.forward:
                if node.checks[0] not in self.ex.variables:
                    raise FailedPrecondition(
                        f"Attempting to use uninitialized value {node.checks[0]} (read by op "
                        f"{node.name!r} on {dev.name})", node.checks[0])
                outs = (vals[node.in_bufs[0]],)
                t1 = perf_counter()
            elif node.fused:  # its MatMul applied it: hand the buffer on
                outs = (vals[node.in_bufs[0]],)
                t1 = perf_counter()
            else:
                store = self.ex.variables
                for var in node.checks:
                    if var not in store:
                        raise FailedPrecondition(
                            f"Attempting to use uninitialized value {var} (read by op "
                            f"{node.name!r} on {dev.name})", var)
                inputs = [vals[b] for b in node.in_bufs]
                if dev.is_cpu:
                    cores = dev.cores.take(node.want_cores)
                    ctx = node.contexts[cores]
                    if self.out_into is not None and i in self.out_into:
                        ctx = type(ctx)("CPU", ctx.intra_op_threads, out=self.out_into[i])
                    try:
                        t0 = perf_counter()
                        if node.var_lock is None:
                            outs = node.kernel(ctx, inputs, node.attrs)
                        else:  # use_locking: updates of the variable do not interleave
                            with node.var_lock:
                                outs = node.kernel(ctx, inputs, node.attrs)
                        t1 = perf_counter()
                    finally:
                        dev.cores.give(cores)
                elif node.var_lock is not None:
                    with node.var_lock:
                        outs = self._gpu_call(node, inputs)
                    t1 = perf_counter()
                else:
                    outs = self._gpu_call(node, inputs)
                    t1 = perf_counter()
                if node.init_var is not None and node.init_var not in store:
                    store.setdefault(node.init_var, outs[0])
        except LabRuntimeError as e:
            self.fail(e)
            return ()
        except Exception as e:  # noqa: BLE001
            err = OpError(node.name, dev.name, f"{type(e).__name__}: {e}")
            err.__cause__ = e
            self.fail(err)
            return ()
        base = node.out_base
        for k in range(node.n_out):
            vals[base + k] = outs[k]
        if self.trace:
            self.op_times[i] = (t0, t1, slot, cores)
        ready: list = []
        sends: list = []
        with self.lock:
            if self.aborted:
                return ()
            if self.trace and not node.forward:
                self._alloc_outputs(i, node, t0)
            self._progress(self.state.op_finished(i), t1, ready, sends)
            j = node.then
            if j is not None and j in ready:
                # The Relu folded into this MatMul ends with it, here: a round of its
                # own through the pool thread's loop cost ~30 us between the layers of
                # an MLP (caches cold after the gemm).
                ready.remove(j)
                vals[xp.nodes[j].out_base] = outs[0]
                if self.trace:
                    self.op_times[j] = (t1, t1, slot, 0)
                    self._alloc_outputs(j, xp.nodes[j], t1)
                self._progress(self.state.op_finished(j), t1, ready, sends)
        if node.ctrl_sends:
            for dst in node.ctrl_sends:
                self._remote_send("^" + node.name, _CONTROL_VALUE, dst, node.name)
        if sends:
            self._do_sends(sends, ready)
        return self._dispatch(ready, dev)

    def _alloc_outputs(self, i: int, node: _Node, t0: float) -> None:
        plan = self.plan
        for b in plan.op_outputs[i]:
            n = plan.buffer_bytes[b]
            if n:
                self.mem_events.append((t0, len(self.mem_events), node.device.name, n,
                                        node.name, None))

    def _variable_buffer(self, node: _Node):
        store = self.ex.variables
        try:
            buf = store.get(node.var_name)
        except FailedPrecondition:
            if node.var_name not in self.xp.assigned_vars:
                raise
        else:
            if tuple(buf.shape) != tuple(node.shape) or np.dtype(buf.dtype) != np.dtype(node.dtype):
                # Variables outlive sessions (TensorFlow's resource containers), so another
                # graph may have left one of the same name; TensorFlow refuses to share it.
                raise InvalidArgument(
                    f"Trying to share variable {node.var_name}, but specified shape "
                    f"{tuple(node.shape)} {np.dtype(node.dtype).name} and found shape "
                    f"{tuple(buf.shape)} {np.dtype(buf.dtype).name} on {node.device.name} "
                    "(variables outlive sessions on a cluster: use another name or a new "
                    "cluster)")
            return buf
        # An Assign in this step initialises it: give it a buffer to write.
        buf = self.pending_vars.get(node.var_name)
        if buf is None:
            if node.device.is_cpu:
                buf = np.empty(node.shape, node.dtype)
            else:
                buf = self._on_gpu(node.device, lambda: _cuda().device_array(node.shape,
                                                                              node.dtype))
            self.pending_vars[node.var_name] = buf
        return buf

    def _on_gpu(self, dev, fn):
        if sum(1 for d in self.ex.devices if not d.is_cpu) > 1:
            with _cuda().gpus[dev.index]:
                return fn()
        return fn()

    def _gpu_call(self, node: _Node, inputs):
        if node.gpu_ctx is not None:
            with _cuda().gpus[node.gpu_ctx]:
                outs = node.kernel(node.contexts[0], inputs, node.attrs)
        else:
            outs = node.kernel(node.contexts[0], inputs, node.attrs)
        if self.trace:
            _cuda().synchronize()  # so the recorded end is when the kernel ended
        return outs

    # -- transfers -----------------------------------------------------------------------
    def _do_sends(self, sends: list, ready: list) -> None:
        """Run the transfers ``sends`` (and those they make possible); collect ready ops."""
        xp, plan = self.xp, self.plan
        while sends:
            k = sends.pop(0)
            kind = xp.transfer_kind[k]
            if kind == RECV:
                if self.recv_async is None or not xp.dev_objs[plan.transfer_dst[k]].is_cpu:
                    self.ex._recv_pool(xp.n_recv_waits).submit(self._recv, k)
                    continue
                # No helper thread: the value is here already, or the thread that
                # delivers it later finishes the transfer (_recv_done).
                start = perf_counter()
                try:
                    value = self.recv_async(
                        xp.transfer_names[k], plan.devices[plan.transfer_src[k]],
                        plan.devices[plan.transfer_dst[k]],
                        lambda value, error, k=k, start=start: self._recv_done(k, start, value, error))
                except BaseException as e:  # noqa: BLE001
                    self._recv_failed(k, e)
                    return
                if value is None:
                    continue
                self.vals[plan.n_tensors + k] = np.asarray(value)
                now = perf_counter()
                if self.trace:
                    self._record_transfer(k, start, now)
                with self.lock:
                    if self.aborted:
                        return
                    self._progress(self.state.transfer_done(k), now, ready, sends)
                continue
            t = plan.transfer_tensor[k]
            value = self.vals[t]
            name = xp.transfer_names[k]
            if kind == SEND:
                dst = plan.devices[plan.transfer_dst[k]]
                producer = plan.ops[plan.tensor_op[t]].name
                if not self._remote_send(name, value, dst, producer):
                    return
                self.vals[plan.n_tensors + k] = None
                now = perf_counter()
            else:
                start = perf_counter()
                dst_dev = xp.dev_objs[plan.transfer_dst[k]]
                try:
                    copy = self._copy(value, dst_dev)
                except Exception as e:  # noqa: BLE001
                    err = OpError(plan.ops[plan.tensor_op[t]].name,
                                  plan.devices[plan.transfer_src[k]],
                                  f"copying {name} to {dst_dev.name} failed: {type(e).__name__}: {e}")
                    err.__cause__ = e
                    self.fail(err)
                    return
                self.vals[plan.n_tensors + k] = copy
                now = perf_counter()
                if self.trace:
                    self._record_transfer(k, start, now)
            with self.lock:
                if self.aborted:
                    return
                self._progress(self.state.transfer_done(k), now, ready, sends)

    def _record_transfer(self, k: int, start: float, end: float) -> None:
        plan, xp = self.plan, self.xp
        nbytes = plan.tensor_bytes[plan.transfer_tensor[k]]
        self.xfer_records.append(TransferRecord(
            xp.transfer_names[k], plan.devices[plan.transfer_src[k]],
            plan.devices[plan.transfer_dst[k]], xp.transfer_links[k], nbytes, start, end))
        d = xp.dev_objs[plan.transfer_dst[k]]
        if d is not None and nbytes:
            with self.lock:
                self.mem_events.append((start, len(self.mem_events), d.name, nbytes,
                                        self.recv_or_consumer(k), xp.transfer_names[k]))

    def recv_or_consumer(self, k: int) -> str:
        return self.xp.recv_consumer[k] or self.xp.transfer_names[k]

    def _copy(self, value, dst_dev):
        if dst_dev.is_cpu:
            return _to_host(value)
        cuda = _cuda()
        host = value if isinstance(value, np.ndarray) else _to_host(value)
        return self._on_gpu(dst_dev, lambda: cuda.to_device(np.ascontiguousarray(host)))

    def _remote_send(self, name: str, value, dst: str, producer: str) -> bool:
        if self.send is None:
            self.fail(InvalidArgument(f"op {producer!r} has a consumer on {dst}, another task, "
                                      "but run_step got no send callback"))
            return False
        try:
            value = _to_host(value)
            # A variable's live buffer could change under a send still reading it;
            # a send that copies anyway (send_copies) takes the buffer itself.
            if (not self.send_copies and value is not _CONTROL_VALUE
                    and shares_variable(value, self.ex.variables)):
                value = value.copy()
            if self.send_final:
                # Every op of the part but the send sinks has run: only sends remain,
                # and the step ends when they returned (read without the lock: a stale
                # count can only say no).
                self.send(name, value, dst, self.state.ops_left == self.sinks_left)
            else:
                self.send(name, value, dst)
        except Unavailable as e:  # the peer is gone: that, not this op, is what failed
            self.fail(e)
            return False
        except Exception as e:  # noqa: BLE001
            err = OpError(producer, "", f"sending {name} to {dst} failed: {type(e).__name__}: {e}")
            err.__cause__ = e
            self.fail(err)
            return False
        self.sent.append((name, dst, perf_counter()))
        return True

    def _recv_done(self, k: int, start: float, value, error) -> None:
        """``recv_async``'s callback: transfer ``k`` arrived (or failed). Never raises:
        it runs on the thread delivering tensors, which must go on delivering."""
        try:
            if error is not None:
                self._recv_failed(k, error)
                return
            if self.aborted:
                return
            self._arrived(k, np.asarray(value), start, perf_counter())
        except BaseException as e:  # noqa: BLE001
            self.fail(e)

    def _arrived(self, k: int, value, start: float, now: float) -> None:
        """Transfer ``k``'s value is here: store it, record it, and run what it readied."""
        self.vals[self.plan.n_tensors + k] = value
        if self.trace:
            self._record_transfer(k, start, now)
        ready: list = []
        sends: list = []
        with self.lock:
            if self.aborted:
                return
            self._progress(self.state.transfer_done(k), now, ready, sends)
        if sends:
            self._do_sends(sends, ready)
        self._run_ready(ready)

    def _recv_failed(self, k: int, e: BaseException) -> None:
        xp, plan = self.xp, self.plan
        name = xp.transfer_names[k]
        err = OpError(xp.recv_consumer[k] or name, plan.devices[plan.transfer_dst[k]],
                      f"receiving {name} from {plan.devices[plan.transfer_src[k]]} failed: "
                      f"{type(e).__name__}: {e}")
        err.__cause__ = e
        self.fail(err)

    def _recv(self, k: int) -> None:
        """Recv-pool entry point: fetch transfer ``k`` from another task."""
        xp, plan = self.xp, self.plan
        name = xp.transfer_names[k]
        src = plan.devices[plan.transfer_src[k]]
        dst_dev = xp.dev_objs[plan.transfer_dst[k]]
        try:
            if self.aborted:
                return
            if self.recv is None:
                raise InvalidArgument(f"{name} comes from {src}, another task, but run_step got "
                                      "no recv callback")
            start = perf_counter()
            value = self.recv(name, src, dst_dev.name)
            if not dst_dev.is_cpu:
                value = self._copy(value, dst_dev)
            elif not isinstance(value, np.ndarray):
                value = np.asarray(value)
            now = perf_counter()
        except BaseException as e:  # noqa: BLE001
            self._recv_failed(k, e)
            return
        self._arrived(k, value, start, now)

    def _await_control(self, i: int) -> None:
        """Go on past remote op ``i`` (a control edge) once it ran: with ``recv_async``,
        the thread that delivers its message does (or this one, if it is here already),
        as for a tensor; else a recv-pool thread waits for it (:meth:`_recv_control`).
        A waiting thread per control edge cost a pool hand-over, a blocked thread and
        two wake-ups each: ~10% of a worker's interpreter time in a step with 20 of
        them (py-spy, transformer with its variables on other tasks)."""
        if self.recv_async is None:
            self.ex._recv_pool(self.xp.n_recv_waits).submit(
                self._recv_control, i)
            return
        src, dst = self.plan.devices[self.plan.op_device[i]], self.xp.cpu_name
        try:
            value = self.recv_async("^" + self.xp.nodes[i].name, src, dst,
                                    lambda value, error, i=i: self._control_done(i, error))
        except BaseException as e:  # noqa: BLE001
            self._control_failed(i, e)
            return
        if value is not None:
            self._finish_virtual(i)

    def _control_done(self, i: int, error) -> None:
        """``recv_async``'s callback for control edge ``i``. Never raises (see
        :meth:`_recv_done`)."""
        try:
            if error is not None:
                self._control_failed(i, error)
            elif not self.aborted:
                self._finish_virtual(i)
        except BaseException as e:  # noqa: BLE001
            self.fail(e)

    def _control_failed(self, i: int, e: BaseException) -> None:
        plan = self.plan
        name = self.xp.nodes[i].name
        src, dst = plan.devices[plan.op_device[i]], self.xp.cpu_name
        waiting = [plan.ops[j].name for j in plan.op_succ[i]]
        err = OpError(waiting[0] if waiting else name, dst,
                      f"waiting for {name!r} on {src} failed: {type(e).__name__}: {e}")
        err.__cause__ = e
        self.fail(err)

    def _recv_control(self, i: int) -> None:
        """Recv-pool entry point: wait until remote op ``i`` ran (a control edge)."""
        plan = self.plan
        src = plan.devices[plan.op_device[i]]
        try:
            if self.recv is None:
                raise InvalidArgument(f"an op waits for {self.xp.nodes[i].name!r} on {src}, "
                                      "another task, but run_step got no recv callback")
            self.recv("^" + self.xp.nodes[i].name, src, self.xp.cpu_name)
        except BaseException as e:  # noqa: BLE001
            self._control_failed(i, e)
            return
        self._finish_virtual(i)

    def _finish_virtual(self, i: int) -> None:
        ready: list = []
        sends: list = []
        with self.lock:
            if self.aborted:
                return
            self._progress(self.state.op_finished(i), perf_counter(), ready, sends)
        if sends:
            self._do_sends(sends, ready)
        self._run_ready(ready)

    # -- scheduling ------------------------------------------------------------------------
    def _run_ready(self, ready: list) -> None:
        """From a thread that is no pool's (the step's caller, a recv helper), which
        would only wait otherwise: run the cheap ``ready`` ops here, in a free slot of
        their device's pool, and queue the others on their pools (a thread handoff
        costs more than a small op; TensorFlow's executor runs cheap ops inline too)."""
        if self.aborted or not ready:
            return
        nodes = self.xp.nodes
        # Only cheap ops: a big one goes to the pool, whose threads keep the kernels'
        # own thread teams (BLAS, numba's) warm; a new calling thread starts new ones.
        cheap = [j for j in ready if nodes[j].cheap]
        if len(cheap) < len(ready):
            self._dispatch([j for j in ready if not nodes[j].cheap], None)
        for device in {nodes[j].device for j in cheap}:
            mine = [j for j in cheap if nodes[j].device is device]
            slot = device.pool.try_slot()
            if slot is None:  # the pool is busy: its free threads take them
                self._dispatch(mine, None)
                continue
            try:
                for j in mine:
                    self.run_op(slot, j, cheap_only=True)
            finally:
                device.pool.release(slot)

    def _dispatch(self, ready: list, here) -> list:
        """Queue ``ready`` ops on their devices' pools; return those to run inline on
        ``here`` (this thread's device): its cheap ones and one other."""
        if self.aborted:
            return []
        inline = []
        other = False
        nodes = self.xp.nodes
        for j in ready:
            node = nodes[j]
            if node.device is here and (node.cheap or not other):
                other = other or not node.cheap
                inline.append(j)
            else:
                node.device.pool.submit(self.run_op, j)
        return inline


class Executor:
    """Runs one task's part of a step (see the module docstring for the contract)."""

    def __init__(self, devices: LocalDevices, variables: VariableStore | None = None,
                 plan_cache_size: int = 64):
        # Freed buffers stay in the heap for the next step (no page faults on them).
        keep_freed_memory()
        self.devices = devices
        self.variables = variables if variables is not None else VariableStore()
        self._plans: OrderedDict = OrderedDict()
        self._plan_cache_size = plan_cache_size
        self._plans_lock = threading.Lock()
        self._names_memo: dict = {}  # id(ops tuple) -> (the tuple, its op names)
        self._recv_executor: ThreadPoolExecutor | None = None
        self._recv_size = 0
        self._recv_lock = threading.Lock()
        self._var_locks: dict[str, threading.Lock] = {}

    def variable_lock(self, name: str) -> threading.Lock:
        """The lock that updates of variable ``name`` with ``use_locking`` hold (one per
        variable for every step this executor runs: the concurrent steps of a task)."""
        with self._plans_lock:
            lock = self._var_locks.get(name)
            if lock is None:
                lock = self._var_locks[name] = threading.Lock()
            return lock

    # -- plans ---------------------------------------------------------------------------
    def plan_for(self, ops: Sequence[Operation], placement, fetches=(), targets=(),
                 fed: Iterable[str] = (), send_to: Mapping | None = None) -> ExecPlan:
        """The cached execution plan of this part of a step (built on first use)."""
        fetches, targets = tuple(fetches), tuple(targets)
        fed = frozenset(fed)
        send_key = None if send_to is None else frozenset(
            (k, tuple(sorted(v))) for k, v in send_to.items())
        key = (self._op_names(ops), id(placement), fetches, targets, fed, send_key)
        with self._plans_lock:
            xp = self._plans.get(key)
            if xp is not None and xp.placement is placement:
                self._plans.move_to_end(key)
                return xp
        xp = ExecPlan(self, list(ops), placement, fetches, targets, fed, send_to)
        with self._plans_lock:
            self._plans[key] = xp
            while len(self._plans) > self._plan_cache_size:
                self._plans.popitem(last=False)
        return xp

    def _op_names(self, ops: Sequence[Operation]) -> tuple:
        """The names of ``ops``, the plan's key.  Remembered for a tuple of ops (the
        session and the worker pass the same tuple every step; a tuple cannot change and
        the memo keeps it alive, so its identity is not reused): on a 350-op graph
        making the names each step was ~3% of the step."""
        if type(ops) is not tuple:
            return tuple(op.name for op in ops)
        hit = self._names_memo.get(id(ops))
        if hit is not None and hit[0] is ops:
            return hit[1]
        names = tuple(op.name for op in ops)
        with self._plans_lock:
            if len(self._names_memo) >= 4 * self._plan_cache_size:
                self._names_memo.clear()
            self._names_memo[id(ops)] = (ops, names)
        return names

    def _recv_pool(self, needed: int) -> ThreadPoolExecutor:
        with self._recv_lock:
            if self._recv_executor is None or self._recv_size < needed:
                # Every recv of a step may block at once: one thread each, or a deadlock.
                size = max(8, needed)
                self._recv_executor = ThreadPoolExecutor(size, thread_name_prefix="recv")
                self._recv_size = size
            return self._recv_executor

    # -- running ---------------------------------------------------------------------------
    def run_step(self, ops: Sequence[Operation], placement, *, fetches: Sequence[str] = (),
                 targets: Sequence[str] = (), feeds: Mapping[str, np.ndarray] | None = None,
                 io: StepIO | None = None, send_to: Mapping | None = None, step_id: int = 0,
                 trace: bool = False, timeout: float | None = None,
                 fetch_into: Mapping[str, np.ndarray] | None = None) -> StepResult:
        """Run this task's part of one step; see the module docstring.

        ``io``: the step's :class:`StepIO` (its tensors to and from other tasks; None:
        the part has no such edges). With its ``recv_async`` no helper thread waits for
        a tensor: cheap ops the tensor makes ready run in the delivering thread. Its
        ``watch`` gets a function ``abort(error)`` that stops the step (no further op
        starts; ``run_step`` raises ``error``).

        ``fetch_into`` (fetched tensor name -> numpy array): buffers offered for fetched
        tensors, each to the CPU kernel that writes that tensor (:func:`fetch_writers`)
        as ``KernelContext.out``; a kernel that takes it (MatMul, when the shape and
        dtype fit) writes the tensor there, and the fetched value is that very array
        (test with ``is``); otherwise the value is allocated as usual and the buffer is
        left alone.  The master offers pieces of shared memory the client reads the
        values from, saving a copy of each.
        """
        feeds = feeds or {}
        xp = self.plan_for(ops, placement, fetches, targets, feeds.keys(), send_to)
        io = io if io is not None else _NO_IO
        step = _Step(self, xp, io.recv if io is not _NO_IO else None,
                     io.send if io is not _NO_IO else None, trace)
        step.send_copies = io.copies_on_send
        step.recv_async = io.recv_async
        step.send_final = io.final_sends
        if fetch_into:
            writers = xp.fetch_writers
            step.out_into = {writers[n]: buf for n, buf in fetch_into.items()
                             if n in writers} or None
        io.watch(step.fail)
        plan = xp.plan
        start = perf_counter()
        step.start = start
        if trace:
            for dname, n in xp.resident.items():
                step.mem_events.append((start, -1, dname, n, None, None))
        # Sources: fed values, other tasks' ops, ops with no input.
        ready: list = []
        sends: list = []
        recv_ctrl = []
        with step.lock:
            initial = step.state.initial_ready()
            for i in initial:
                node = xp.nodes[i]
                if node.kind == FED:
                    self._feed(step, i, node, feeds, start)
                    step._progress(step.state.op_finished(i), start, ready, sends)
                elif node.kind == REMOTE:
                    if node.remote_ctrl:
                        recv_ctrl.append(i)
                    else:
                        step._progress(step.state.op_finished(i), start, ready, sends)
                elif node.kind == SINK:
                    step.sinks_left -= 1
                    step._progress(step.state.op_finished(i), start, ready, sends)
                else:
                    ready.append(i)
            if step.state.done:
                step.done.set()
        if step.error is None:
            for i in recv_ctrl:
                step._await_control(i)
            if sends:
                step._do_sends(sends, ready)
            step._run_ready(ready)
        # The deadline counts from the start (this thread may have run ops meanwhile).
        remaining = None if timeout is None else max(0.0, timeout - (perf_counter() - start))
        if not step.done.wait(remaining):
            step.aborted = True
            with step.lock:
                waiting = [plan.op_names[i] for i in range(plan.n_ops)
                           if step.state.status[i] != FINISHED and xp.nodes[i].kind != SINK]
            step.let_go()
            raise DeadlineExceeded(
                f"step {step_id} ran past its deadline of {timeout} s; ops not finished: "
                f"{waiting[:20]}{' ...' if len(waiting) > 20 else ''}", waiting)
        end = perf_counter()
        if step.error is not None:
            step.let_go()
            raise step.error
        values = {}
        for name, b in xp.fetch_bufs.items():
            v = step.vals[b]
            if isinstance(v, np.ndarray):
                if xp.copy_fetch[name] or not v.flags.writeable:
                    v = v.copy()
            else:
                v = _to_host(v)
            values[name] = v
        # The step object may outlive this call (callbacks of its transfers): it must
        # not hold the offered buffers (fetch_into), which belong to the caller now.
        step.out_into = None
        for b in xp.fetch_bufs.values():
            step.vals[b] = None
        result = StepResult(values, start=start, end=end, sent=step.sent,
                            capacity=self.devices.capacities())
        if trace or xp.has_gpu:
            add_records(result, xp, step.op_times, step.xfer_records, step.mem_events, trace)
            result.meta = {"backend": "runtime", "memory": self.devices.memory_stats()}
        return result

    def _feed(self, step: _Step, i: int, node: _Node, feeds, now: float) -> None:
        xp = step.xp
        plan = xp.plan
        dev = xp.dev_objs[plan.op_device[i]]
        for k, tname in enumerate(xp.fed_names[node.name]):
            if tname in feeds:
                value = feeds[tname]
                if not isinstance(value, np.ndarray):
                    value = np.asarray(value)
                if dev is not None and not dev.is_cpu:
                    value = step._copy(value, dev)
                step.vals[node.out_base + k] = value
        if step.trace:
            step.op_times[i] = (now, now, 0, 0)
            step._alloc_outputs(i, node, now)

    def close(self) -> None:
        """Stop the recv helper threads (the device pools belong to ``devices``)."""
        with self._recv_lock:
            if self._recv_executor is not None:
                self._recv_executor.shutdown(wait=False)
                self._recv_executor = None
