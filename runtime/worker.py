"""The worker service: runs this task's part of each step and exchanges tensors.

Every :class:`runtime.server.Server` runs one :class:`WorkerService` (protocol:
``service Worker`` in ``runtime/protos/worker.proto``). It holds

- the task's devices (:class:`runtime.local_devices.LocalDevices`) and **one**
  :class:`runtime.variables.VariableStore` per process, so variables keep their values
  across runs and across sessions (seed 004), and one
  :class:`runtime.executor.Executor` that runs partitions with dependency counting on
  the devices' inter-op pools;
- per master session, the graph (rebuilt from ``NodeDef`` messages), its placement, and
  the registered *partitions* (the ops of one step signature on this task);
- a :class:`runtime.rendezvous.Rendezvous`: tensors other tasks pushed, keyed
  ``"src_device;tensor;dst_device;step_id"`` (:func:`runtime.wire.rendezvous_key`).

Tensors are **pushed**: when an op's output is consumed on another task, the executor's
``send`` callback writes a small one as one frame, from the producing thread, on the
peer's local Unix socket (same host, :class:`runtime.wire.LocalPushListener`) or its
open ``PushStream``. A large one is copied once, at once (it may be a variable's live
buffer): to a same-host peer into a pooled shared-memory segment whose reference alone
travels, as one frame, and which the receiver uses in place, without a copy, handing
the segment back when it no longer refers to the tensor (:class:`SegmentPool`,
:meth:`SegmentMaps.lease`); to another host into the chunked frames of a
``PushTensor`` stream (:func:`runtime.wire.encode_frames`, no message-size limit) that
a pusher thread sends straight into the destination worker's rendezvous. The
receiving executor takes tensors from the rendezvous with a callback (``recv_async``):
the thread that delivers a tensor goes on to run the cheap ops it made ready, so no
helper thread waits for it. One exception saves a gRPC message per step: a small tensor
for the master's own task that would be pushed by gRPC, sent once every op of the part
has run (only sends remain, and the part's answer follows at once), travels in the
``RunGraph`` answer (``RunGraphResponse.pushed``), which the master delivers into its
rendezvous before it counts the answer (unless large pushes of the part are still
streaming: then it is pushed as usual, as the answer waits for those).

A step that fails anywhere is aborted everywhere: the master's ``AbortStep`` wakes the
step's pending receives and stops its executor between ops (:meth:`Rendezvous.watch`).
Every RPC has a deadline; a dead peer is an error naming its task.

The master calls :meth:`WorkerService.run_partition` directly for its own task (no RPC)
and ``RunGraph`` for the others (on a local connection to a task of the same host,
else as a message on an open ``RunGraphs`` stream; :class:`WorkerClient`).
"""

from __future__ import annotations

import functools
import json
import os
import queue
import secrets
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Mapping

import grpc
import numpy as np

from core.cluster import Cluster, split_address
from core.devices import DeviceSpec
from core.graph import Graph
from core.placement import Placement
from core.serialize import extend_graph
from runtime import errors, wire
from runtime.config import SessionConfig
from runtime.executor import StepIO, shares_variable
from runtime.graph_codec import (add_named_tensors, error_to_proto, nodes_from_proto,
                                 stats_to_proto, tensor_from_proto)
from runtime.protos import graph_pb2, tensor_pb2, worker_pb2, worker_pb2_grpc
from runtime.rendezvous import (MAX_UNCLAIMED_AGE, MAX_UNCLAIMED_BYTES, Rendezvous,
                                StepAborted)
from runtime.segment_pool import (POOL_PREFIX, SEGMENT_HEADER, BufferPool,  # noqa: F401
                                  PooledSegment, SegmentMaps, SegmentPool, decode_pooled)

__all__ = ["WorkerService", "Rendezvous", "StepAborted", "PeerChannels", "WorkerClient",
           "task_name", "task_of_device", "transport_error", "SHM_MIN_BYTES",
           "UNKNOWN_PARTITION", "MAX_UNCLAIMED_BYTES", "MAX_UNCLAIMED_AGE"]

#: Tensors at least this large go through shared memory to a task on the same host
#: (below it the socket is as fast and needs no segment).
SHM_MIN_BYTES = 256 * 1024

#: Tensors up to this size sent to the master's task by a part whose ops have all run
#: travel in the part's RunGraph answer (``RunGraphResponse.pushed``), which follows at
#: once, instead of as a gRPC push message of their own (not when the push would take
#: a local socket: that leaves at once, from the producing thread).
ANSWER_MAX_BYTES = 64 * 1024

#: ``ErrorStatus.type`` of a RunGraph for a partition the worker does not hold (it
#: restarted, or never got it): the master registers again and retries.
UNKNOWN_PARTITION = "UnknownPartition"

def task_name(job: str, task: int) -> str:
    """``/job:<job>/replica:0/task:<task>``."""
    return f"/job:{job}/replica:0/task:{task}"


@functools.lru_cache(maxsize=4096)  # on every push: parsing costs more than the push
def task_of_device(device: str) -> tuple[str, int]:
    """``(job, task)`` of a full device name."""
    spec = DeviceSpec.from_string(device)
    return spec.job, spec.task


def transport_error(err: wire.TransportError, task: str) -> errors.LabRuntimeError:
    """A :class:`runtime.errors` error for a failed RPC to ``task``."""
    if isinstance(err, wire.DeadlineExceeded):
        return errors.DeadlineExceeded(
            f"{err.method} to {task} ({err.address}) ran past its deadline of "
            f"{err.elapsed:.1f} s")
    if isinstance(err, wire.PeerUnavailable):
        return errors.Unavailable(task, f"{err.method} to {err.address} failed: {err.details}")
    return errors.LabRuntimeError(f"{err.method} to {task} ({err.address}) failed: "
                                  f"{err.code.name if err.code else 'UNKNOWN'}: {err.details}")


# ---------------------------------------------------------------------------
# One part's tensors to and from the other tasks

class _PartIO(StepIO):
    """The :class:`runtime.executor.StepIO` of one part of one step on a worker: takes
    received tensors from the worker's rendezvous, pushes sent ones to their task (see
    the module docstring), and is watched by the rendezvous for the step's abort.
    ``sends`` lists ``(tensor, dst_device, start, end)`` of the pushes; ``failed``, a
    push's error (a peer gone); :meth:`finish` waits for the pushes still streaming."""

    copies_on_send = True

    def __init__(self, worker: "WorkerService", step_id: int, deadline: float,
                 placement: Placement, answer_to: tuple | None):
        self.worker, self.step_id, self.deadline = worker, step_id, deadline
        self.placement, self.answer_to = placement, answer_to
        self.final_sends = answer_to is not None
        self.pushes: list[Future] = []
        self.sends: list = []
        self.failed: list[BaseException] = []
        self.held: list = []  # (dst_task, key, frame) for the answer to carry

    def recv(self, tensor_name: str, src_device: str, dst_device: str):
        key = wire.rendezvous_key(src_device, tensor_name, dst_device, self.step_id)
        return self.worker.rendezvous.take(key, self.step_id, self.deadline)

    def recv_async(self, tensor_name: str, src_device: str, dst_device: str, callback):
        key = wire.rendezvous_key(src_device, tensor_name, dst_device, self.step_id)
        return self.worker.rendezvous.take_async(key, self.step_id, callback)

    def watch(self, abort) -> None:
        self.worker.rendezvous.watch(self.step_id, abort)

    def _on_pushed(self, fut: Future) -> None:
        err = fut.exception()
        if err is not None and not self.failed:
            self.failed.append(err)
            # Our own recvs may wait for a reply the dead peer will never send.
            self.worker.rendezvous.abort(self.step_id, StepAborted(
                f"step {self.step_id} aborted: {err}"))

    def send(self, tensor_name: str, value, dst_device: str, final: bool = False) -> None:
        worker, deadline, sends = self.worker, self.deadline, self.sends
        producer = tensor_name[1:] if tensor_name.startswith("^") else \
            tensor_name.rpartition(":")[0]
        key = wire.rendezvous_key(self.placement[producer], tensor_name, dst_device,
                                  self.step_id)
        dst_task = task_of_device(dst_device)
        nbytes = getattr(value, "nbytes", 0)
        if (final and dst_task == self.answer_to and nbytes <= ANSWER_MAX_BYTES
                and not worker._pushes_locally(dst_task)):
            # The part's answer goes to that task right after this: it carries the
            # tensor (a copy, made here), one gRPC message fewer than a push of its
            # own, which would wait for gRPC's sending thread. (A push on a local
            # socket leaves at once from this thread: held, it would wait for the
            # rest of the part and the answer; measured slower.)
            start = time.perf_counter()
            self.held.append((dst_task, key, next(wire.encode_frames(value, key))))
            sends.append((tensor_name, dst_device, start, time.perf_counter()))
            return
        if nbytes <= wire.DEFAULT_CHUNK_BYTES:
            # One message queued on the open stream: cheap enough to do right here
            # (the frame is a copy: a variable's buffer may change afterwards).
            worker._push(dst_task, key, value, deadline, sends)
            return
        # Large: copy it now, once (a variable's live buffer could change once send
        # returns). To a same-host peer the copy goes into a pooled shared-memory
        # segment and only a reference travels, from here; else the copy is the
        # stream's frames themselves (made anyway), streamed by a pusher thread.
        arr = wire.as_wire_array(value, key)
        staged = time.perf_counter()  # the copy is part of the transfer
        segment = worker._stage_in_segment(dst_task, arr)
        if segment is not None:
            worker._push(dst_task, key, arr, deadline, sends, segment, start=staged)
            return
        if not shares_variable(arr, worker.variables):
            fut = worker._pushers.submit(worker._push, dst_task, key, arr, deadline, sends)
        else:
            # Copied into the frames here, before send returns, while the pusher
            # already streams the first ones.
            frames: queue.SimpleQueue = queue.SimpleQueue()
            fut = worker._pushers.submit(worker._push, dst_task, key, arr, deadline, sends,
                                         None, iter(frames.get, None), staged)
            try:
                for frame in wire.encode_frames(arr, key):
                    frames.put(frame)
            finally:
                frames.put(None)  # the stream ends (early: the receiver refuses it)
        fut.add_done_callback(self._on_pushed)
        self.pushes.append(fut)

    def finish(self, answer_frames: list | None) -> None:
        """After the part ran: the held tensors into ``answer_frames`` (or pushed, when
        the answer must wait for large pushes anyway), and every push done before the
        deadline (else DeadlineExceeded)."""
        if self.held:
            if any(not fut.done() for fut in self.pushes):
                # The answer waits for the large pushes still streaming: not these.
                for dst_task, key, frame in self.held:
                    self.worker._send_frame(dst_task, key, frame)
            else:
                answer_frames.extend(frame for _, _, frame in self.held)
        for fut in list(self.pushes):
            remaining = max(0.0, self.deadline - time.monotonic())
            try:
                fut.result(timeout=remaining)
            except TimeoutError:
                raise errors.DeadlineExceeded(
                    f"pushing tensors from {self.worker.task_name} ran past the step's "
                    "deadline") from None


# ---------------------------------------------------------------------------
# Channels to peers

def _peer_channel_options() -> list:
    # wire's options, plus quick reconnection: a restarted peer is reachable again
    # within ~100 ms instead of after gRPC's default 1 s+ backoff.
    return wire.channel_options() + [
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.min_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", 1000),
    ]


class WorkerClient:
    """Stubs of one peer's Worker service over one long-lived channel."""

    def __init__(self, address: str, security=None):
        self.address = address
        self.channel = wire.create_channel(address, options=_peer_channel_options(),
                                           security=security)
        self.stub = worker_pb2_grpc.WorkerStub(self.channel)
        desc = worker_pb2.DESCRIPTOR.services_by_name["Worker"]
        # PushTensor takes pre-serialized frames (runtime.wire.encode_frames) or messages.
        self.push = self.channel.stream_unary(
            f"/{desc.full_name}/PushTensor", request_serializer=wire.serialize_frame,
            response_deserializer=worker_pb2.PushTensorResponse.FromString)
        self._push_stream_call = self.channel.stream_unary(
            f"/{desc.full_name}/PushStream", request_serializer=wire.serialize_frame,
            response_deserializer=worker_pb2.PushTensorResponse.FromString)
        # RunGraph, the master's call on every step: over a local connection to a peer
        # of this host, else as messages on open gRPC streams.
        self.run_graphs = wire.LocalCaller(
            address, "Worker.RunGraph", worker_pb2.RunGraphResponse.FromString,
            wire.StreamCaller(self.stub.RunGraphs, address=address, method="Worker.RunGraphs"))
        self._stream: _PushStream | None = None
        self._stream_lock = threading.Lock()
        self._local: wire.LocalPushSender | None = None
        self._local_tried = False
        # Open the stream now: besides carrying pushes, an open streaming call keeps
        # the channel's polling thread alive, which gRPC otherwise starts afresh for
        # every asynchronous call (~0.3 ms each, measured).
        self.push_stream()

    def push_stream(self) -> "_PushStream":
        """The open PushStream to this peer (a new one if the last one ended)."""
        from runtime.call_guard import CLIENT_STREAM_IDLE_SECONDS
        with self._stream_lock:
            stream = self._stream
            if stream is not None and not stream.ended and (
                    time.monotonic() - stream.last_sent > CLIENT_STREAM_IDLE_SECONDS):
                stream.close()  # the peer may be ending it for idling: a new one
                stream = None
            if stream is None or stream.ended:
                stream = self._stream = _PushStream(self._push_stream_call)
            stream.last_sent = time.monotonic()
            return stream

    def local_sender(self, fresh: bool = False) -> "wire.LocalPushSender | None":
        """The Unix-socket connection to this peer's local push listener (a peer on
        this host), or None when it has none (then pushes take the PushStream);
        ``fresh``: connect again (the last connection broke: the peer restarted?)."""
        with self._stream_lock:
            if fresh:
                if self._local is not None:
                    self._local.close()
                self._local, self._local_tried = None, False
            if not self._local_tried:
                self._local_tried = True
                try:
                    self._local = wire.LocalPushSender(self.address)
                except OSError:
                    self._local = None
            return self._local

    def close(self) -> None:
        self.run_graphs.close()
        with self._stream_lock:
            if self._stream is not None:
                self._stream.close()
            if self._local is not None:
                self._local.close()
        self.channel.close()


class _PushStream:
    """One long-lived PushStream call: :meth:`send` queues a message and returns; gRPC's
    sending thread writes it on the open stream. ``ended`` turns True when the call
    ends (the peer died or restarted); the next push then opens a new stream."""

    _END = object()

    def __init__(self, call):
        import queue

        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self.ended = False
        self.error: BaseException | None = None
        self.last_sent = time.monotonic()  # when push_stream() last handed it out
        # A long deadline: the stream outlives steps; keepalive and the TCP connection
        # tell a dead peer long before it.
        self._future = call.future(self._messages(), timeout=24 * 3600.0, wait_for_ready=False)
        self._future.add_done_callback(self._done)

    def _messages(self):
        while True:
            item = self._queue.get()
            if item is self._END:
                return
            yield item

    def _done(self, fut) -> None:
        self.ended = True
        try:
            fut.result()
        except BaseException as err:  # noqa: BLE001
            self.error = err

    def send(self, message) -> None:
        if self.ended:
            raise self.error or RuntimeError("the push stream ended")
        self._queue.put(message)

    def close(self) -> None:
        self._queue.put(self._END)


class PeerChannels:
    """One :class:`WorkerClient` per peer address, shared by a server's master and
    worker; :meth:`reset` replaces a peer's channel after it failed (so a restarted
    peer is reached at once). ``security``: the cluster's
    :class:`runtime.security.Security` (TLS, token) for every channel."""

    def __init__(self, security=None):
        self.security = security
        self._lock = threading.Lock()
        self._clients: dict[str, WorkerClient] = {}

    def get(self, address: str) -> WorkerClient:
        with self._lock:
            client = self._clients.get(address)
            if client is None:
                client = self._clients[address] = WorkerClient(address, self.security)
            return client

    def existing(self, address: str) -> WorkerClient | None:
        """The client of ``address`` if one is open (None: no call to it is in flight,
        and none should open a channel, e.g. to a peer just found dead)."""
        with self._lock:
            return self._clients.get(address)

    def reset(self, address: str, client: WorkerClient | None = None) -> None:
        """Drop the channel to ``address`` (only if it is still ``client``, when given)."""
        with self._lock:
            current = self._clients.get(address)
            if current is None or (client is not None and current is not client):
                return
            del self._clients[address]
        # Closed from another thread: reset() may run in a callback on this channel's
        # own polling thread, which close() would wait for (a deadlock).
        threading.Thread(target=current.close, daemon=True, name="close-channel").start()

    def close(self) -> None:
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for c in clients:
            c.close()


# ---------------------------------------------------------------------------
# Sessions and partitions held by the worker

@dataclass
class _Partition:
    handle: str
    ops: tuple  # a tuple: the executor memoises its plan key by the tuple's identity
    placement: Placement
    fetches: tuple
    targets: tuple
    feeds: frozenset
    send_to: dict


@dataclass
class _WorkerSession:
    handle: str
    config: SessionConfig
    graph: Graph = field(default_factory=Graph)
    nodes: int = 0
    placement: Placement = field(default_factory=Placement)
    partitions: dict = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    used: float = 0.0


class WorkerService(worker_pb2_grpc.WorkerServicer):
    """The Worker gRPC service of one task (see the module docstring).

    Args:
        cluster: the hardware view (``core.cluster.Cluster``) with every task's address.
        job, task: this task.
        config: the server's :class:`SessionConfig` (thread counts for the devices).
        peers: the server's :class:`PeerChannels`.
        shm_min_bytes: tensors at least this large go to same-host peers through shared
            memory; ``None`` always uses the socket.
        max_unclaimed_bytes, max_unclaimed_age: the bounds of tensors pushed for steps
            that do not run here (:class:`Rendezvous`).
    """

    def __init__(self, cluster: Cluster, job: str, task: int, config: SessionConfig | None = None,
                 *, peers: PeerChannels | None = None, shm_min_bytes: int | None = SHM_MIN_BYTES,
                 max_sessions: int = 64, max_unclaimed_bytes: int = MAX_UNCLAIMED_BYTES,
                 max_unclaimed_age: float = MAX_UNCLAIMED_AGE):
        from runtime import shm
        from runtime.executor import Executor
        from runtime.local_devices import LocalDevices
        from runtime.variables import VariableStore

        self.cluster = cluster
        self.job, self.task = job, task
        self.task_name = task_name(job, task)
        self.config = config or SessionConfig()
        self.devices = LocalDevices.for_task(cluster, job, task, self.config)
        self.variables = VariableStore()
        self.executor = Executor(self.devices, self.variables)
        self.rendezvous = Rendezvous(max_unclaimed_bytes=max_unclaimed_bytes,
                                     max_unclaimed_age=max_unclaimed_age)
        self._closing = threading.Event()
        threading.Thread(target=self._sweep, daemon=True,
                         name=f"rendezvous sweep {self.task_name}").start()
        self.peers = peers or PeerChannels()
        self.incarnation = secrets.token_hex(8)
        self.shm_min_bytes = shm_min_bytes if shm.shm_available() else None
        self._my_host = self._host_of(job, task)
        self._same_host_cache: dict[tuple[str, int], bool] = {}
        self._sessions: OrderedDict[str, _WorkerSession] = OrderedDict()
        self._sessions_lock = threading.Lock()
        self._max_sessions = max_sessions
        self._pushers = ThreadPoolExecutor(8, thread_name_prefix=f"push {self.task_name}")
        self.segments = SegmentPool()
        self.buffers = BufferPool()
        self.segment_maps = SegmentMaps()
        self._warm: set = set()
        self._warm_lock = threading.Lock()
        self._local_listener: wire.LocalPushListener | None = None
        self._address_of: dict[tuple[str, int], str] = {
            (t.job, t.index): t.address for t in cluster.tasks}
        self._task_names: dict[str, tuple[str, int]] = {}

    # -- helpers ---------------------------------------------------------------------
    def _sweep(self) -> None:
        period = min(5.0, self.rendezvous.max_unclaimed_age / 4)
        while not self._closing.wait(period):
            self.rendezvous.sweep()

    def _host_of(self, job: str, task: int) -> str:
        address = self.cluster.task(job, task).address or ""
        try:
            host = split_address(address)[0]
        except Exception:  # noqa: BLE001 - no address: no shared memory
            return ""
        return "127.0.0.1" if host in ("localhost", "127.0.0.1", "::1", "[::1]") else host

    def _warmup(self, ops) -> None:
        """Compile (or load) the CPU kernels a part of ``ops`` runs, once per process."""
        from runtime import kernels
        with self._warm_lock:
            kernels.warmup_for(ops, ("CPU",), self._warm)

    def status(self) -> worker_pb2.GetStatusResponse:
        caps = self.devices.capacities()
        return worker_pb2.GetStatusResponse(
            task=self.task_name, incarnation=self.incarnation, pid=os.getpid(),
            devices=[worker_pb2.DeviceAttributes(name=d.name, device_type=d.device.device_type,
                                                 memory_limit_bytes=int(caps.get(d.name, 0)))
                     for d in self.devices])

    # -- registration -----------------------------------------------------------------
    def register_graph(self, request: worker_pb2.RegisterGraphRequest) -> int:
        """Apply a RegisterGraph request; return the session's node count.

        Raises :class:`runtime.errors.FailedPrecondition` when ``base_node_count`` does
        not match what this worker holds (the master then starts again from 0).
        """
        handle = request.session_handle
        with self._sessions_lock:
            sess = self._sessions.get(handle)
            if sess is None or request.base_node_count == 0:
                if request.base_node_count != 0:
                    raise errors.FailedPrecondition(
                        f"worker {self.task_name} holds no graph for session {handle!r}",
                        "graph_out_of_sync")
                config = (SessionConfig.from_dict(json.loads(request.config_json))
                          if request.config_json else self.config)
                sess = _WorkerSession(handle, config)
                self._sessions[handle] = sess
                while len(self._sessions) > self._max_sessions:
                    self._sessions.popitem(last=False)
            self._sessions.move_to_end(handle)
        with sess.lock:
            if request.base_node_count != sess.nodes:
                raise errors.FailedPrecondition(
                    f"worker {self.task_name} holds {sess.nodes} nodes of session {handle!r}, "
                    f"not {request.base_node_count}", "graph_out_of_sync")
            if request.nodes:
                extend_graph(sess.graph, nodes_from_proto(request.nodes))
                sess.nodes += len(request.nodes)
            if request.placement:
                sess.placement = sess.placement.updated(
                    {e.op: e.device for e in request.placement})
            for p in request.partitions:
                ops = [sess.graph.get_operation_by_name(n) for n in p.ops]
                sess.partitions[p.handle] = _Partition(
                    p.handle, tuple(ops), sess.placement, tuple(p.fetches), tuple(p.targets),
                    frozenset(p.feeds), {s.tensor: tuple(s.devices) for s in p.send_to})
                self._warmup(ops)
            return sess.nodes

    def partition(self, session_handle: str, partition_handle: str) -> tuple:
        with self._sessions_lock:
            sess = self._sessions.get(session_handle)
        part = sess.partitions.get(partition_handle) if sess is not None else None
        return sess, part

    def close_session(self, handle: str) -> None:
        with self._sessions_lock:
            self._sessions.pop(handle, None)

    # -- running -----------------------------------------------------------------------
    def run_partition(self, sess: _WorkerSession, part: _Partition, step_id: int,
                      feeds: Mapping[str, np.ndarray], *, trace: bool = False,
                      timeout: float | None = None, answer_to: tuple | None = None,
                      answer_frames: list | None = None,
                      fetch_into: Mapping[str, np.ndarray] | None = None):
        """Run one step of ``part``; return ``(StepResult, sends)``.

        ``sends`` lists ``(tensor, dst_device, start, end)`` of the pushes. Raises the
        executor's errors, or :class:`runtime.errors.Unavailable` naming a peer task
        that could not be reached.

        ``answer_to``, ``answer_frames``: the task that asked for this step (the
        master's) and a list: a tensor of at most :data:`ANSWER_MAX_BYTES` for that task,
        sent once every op of the part has run, is appended to the list as a push frame
        instead of pushed by gRPC; the caller's answer carries it (it follows at once).

        ``fetch_into``: buffers offered for fetched tensors (the executor's ``run_step``).
        """
        timeout = sess.config.operation_timeout if timeout is None or timeout <= 0 else timeout
        io = _PartIO(self, step_id, time.monotonic() + timeout, part.placement, answer_to)
        try:
            result = self.executor.run_step(
                part.ops, part.placement, fetches=part.fetches, targets=part.targets,
                feeds=feeds, io=io, send_to=part.send_to, step_id=step_id, trace=trace,
                timeout=timeout, fetch_into=fetch_into)
        except BaseException as err:
            if io.failed:  # the root cause: a peer we push to is gone
                raise io.failed[0] from err
            raise
        io.finish(answer_frames)
        return result, io.sends

    def _task_of_name(self, name: str) -> tuple[str, int] | None:
        """``(job, task)`` of a task name ``/job:j/replica:0/task:i``; None when it is
        not a task of this cluster (then nothing travels in the answer)."""
        task = self._task_names.get(name)
        if task is None:
            try:
                task = task_of_device(name)
            except Exception:  # noqa: BLE001 - a malformed name: push as usual
                return None
            if task not in self._address_of:
                return None
            self._task_names[name] = task
        return task

    def _pushes_locally(self, dst_task: tuple[str, int]) -> bool:
        """True when a push to ``dst_task`` goes on its local socket (same host)."""
        return (self._same_host(dst_task)
                and self.peers.get(self._address_of[dst_task]).local_sender() is not None)

    def _same_host(self, dst_task: tuple[str, int]) -> bool:
        same = self._same_host_cache.get(dst_task)  # asked on every push
        if same is None:
            same = self._same_host_cache[dst_task] = (
                bool(self._my_host) and self._host_of(*dst_task) == self._my_host)
        return same

    def _stage_in_segment(self, dst_task: tuple[str, int], arr: np.ndarray):
        """A pooled segment holding a copy of ``arr`` when it goes to a same-host peer
        through shared memory, else None."""
        if not self._same_host(dst_task):
            return None
        return self.stage_shared(arr)

    def stage_shared(self, arr: np.ndarray, segment=None):
        """A pooled segment holding a copy of ``arr`` (a wire array: contiguous, of a
        whitelisted dtype) after :data:`SEGMENT_HEADER`, its flag set (held until the
        receiver lets go), when ``arr`` is large enough to go through shared memory and
        this server may use it; else None. Hand the segment to :meth:`SegmentPool.release`
        once the reference is on its way. ``segment``: one acquired already, with room
        for ``arr`` (else one is acquired)."""
        if self.shm_min_bytes is None or arr.nbytes < self.shm_min_bytes:
            return None
        if segment is None:
            segment = self.segments.acquire(arr.nbytes)
        target = np.frombuffer(segment.buf, np.uint8, count=arr.nbytes, offset=SEGMENT_HEADER)
        np.copyto(target, arr.reshape(-1).view(np.uint8))
        del target
        segment.buf[0] = 1  # held by the receiver until it lets go (SegmentMaps.lease)
        return segment

    def _push(self, dst_task: tuple[str, int], key: str, value: np.ndarray, deadline: float,
              sends: list, segment=None, frames=None, start: float | None = None) -> None:
        """Send ``value`` into ``dst_task``'s rendezvous under ``key``: a small tensor,
        or a reference to ``segment`` (from :meth:`_stage_in_segment`, holding the
        value), as one frame on the peer's local socket (same host) or its open
        PushStream; a large tensor as a chunked PushTensor call (of ``frames`` when
        already encoded). ``start``: when the transfer began (its copy), for the trace."""
        start = time.perf_counter() if start is None else start
        address = self._address_of[dst_task]
        client = self.peers.get(address)
        arr = wire.as_wire_array(value, key)
        if segment is None:
            segment = self._stage_in_segment(dst_task, arr)
        if segment is not None or arr.nbytes <= wire.DEFAULT_CHUNK_BYTES:
            try:
                if segment is not None:
                    frame = tensor_pb2.TensorChunk(
                        key=key, meta=wire.make_meta(arr), offset=0,
                        shm=tensor_pb2.ShmRef(name=segment.name, offset=SEGMENT_HEADER,
                                              nbytes=arr.nbytes)).SerializeToString()
                else:
                    frame = next(wire.encode_frames(arr, key))
                self._send_frame(dst_task, key, frame, client)
            finally:
                if segment is not None:  # reused once the receiver let go (its flag)
                    self.segments.release(segment)
        else:
            if frames is None:
                frames = wire.encode_frames(arr, key)
            remaining = max(0.001, deadline - time.monotonic())
            try:
                wire.call_rpc(client.push, frames, address=address, method="Worker.PushTensor",
                              timeout=remaining)
            except wire.TransportError as err:
                if isinstance(err, wire.PeerUnavailable):
                    self.peers.reset(address, client)
                raise transport_error(err, task_name(*dst_task)) from None
        parts = key.split(";")
        sends.append((parts[1], parts[2], start, time.perf_counter()))

    def _send_frame(self, dst_task: tuple[str, int], key: str, frame: bytes,
                    client: WorkerClient | None = None) -> None:
        """One push frame to ``dst_task``: on its local socket (same host) or its open
        PushStream. Raises :class:`runtime.errors.Unavailable` when the peer is gone."""
        address = self._address_of[dst_task]
        client = client or self.peers.get(address)
        try:
            local = client.local_sender() if self._same_host(dst_task) else None
            if local is not None:
                try:
                    local.send(frame)
                except ConnectionError:
                    # The peer closed the connection: a restarted peer takes the
                    # frame on a new one; a dead one refuses it (an error below).
                    local = client.local_sender(fresh=True)
                    if local is None:
                        raise
                    local.send(frame)
            else:
                client.push_stream().send(frame)
        except Exception as err:  # noqa: BLE001 - the stream ended: the peer is gone
            self.peers.reset(address, client)
            raise errors.Unavailable(task_name(*dst_task),
                                     f"pushing {key!r} to {address} failed: {err}") from None

    # -- gRPC methods --------------------------------------------------------------------
    def GetStatus(self, request, context):  # noqa: N802 (gRPC's names)
        return self.status()

    def RegisterGraph(self, request, context):  # noqa: N802
        try:
            return worker_pb2.RegisterGraphResponse(node_count=self.register_graph(request))
        except BaseException as err:  # noqa: BLE001 - every error goes back to the master
            return worker_pb2.RegisterGraphResponse(error=error_to_proto(err, self.task_name))

    def RunGraph(self, request, context):  # noqa: N802
        step_id = request.step_id
        sess, part = self.partition(request.session_handle, request.partition_handle)
        if part is None:
            # Not finished here: the master registers and runs this part again in the
            # same step, and tensors already pushed for it must still be taken.
            return worker_pb2.RunGraphResponse(error=graph_pb2.ErrorStatus(
                type=UNKNOWN_PARTITION, task=self.task_name,
                message=f"worker {self.task_name} does not hold partition "
                        f"{request.partition_handle!r}"))
        try:
            feeds = {p.name: tensor_from_proto(p.value, p.name) for p in request.feeds}
            answer_to = self._task_of_name(request.caller) if request.caller else None
            pushed: list = []
            result, sends = self.run_partition(sess, part, step_id, feeds, trace=request.trace,
                                               timeout=request.timeout, answer_to=answer_to,
                                               answer_frames=pushed)
            response = worker_pb2.RunGraphResponse(pushed=pushed)
            add_named_tensors(response.values, result.values)
            if request.trace:
                stats_to_proto(result.ops, result.transfers, result.memory, result.oom, sends,
                               result.capacity, result.start, result.end, into=response.stats)
            return response
        except BaseException as err:  # noqa: BLE001
            self.rendezvous.abort(step_id, StepAborted(f"step {step_id} failed: {err}"))
            return worker_pb2.RunGraphResponse(error=error_to_proto(err, self.task_name))
        finally:
            self.rendezvous.finish_step(step_id)

    def RunGraphs(self, request_iterator, context):  # noqa: N802
        # One RunGraph per message, answered in order; the stream stays open between
        # steps (the master waits for each answer with the step's deadline).
        for request in request_iterator:
            yield self.RunGraph(request, context)

    def PushTensor(self, request_iterator, context):  # noqa: N802
        try:
            it = iter(request_iterator)
            first = next(it, None)
            if first is None:
                raise wire.WireError("", "chunks", "stream ended before the first chunk")
            key, array = decode_pooled(first, it, self.buffers, self.segment_maps)
            self.rendezvous.put(key, array)
        except (wire.WireError, MemoryError) as err:  # MemoryError: ResourceExhausted
            wire.abort_with(context, err)
        except ValueError as err:  # a malformed key
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
        return worker_pb2.PushTensorResponse(key=key, nbytes=array.nbytes)

    def PushStream(self, request_iterator, context):  # noqa: N802
        received = 0
        try:
            for frame in request_iterator:
                self._take_frame(frame)
                received += 1
        except (wire.WireError, MemoryError) as err:
            wire.abort_with(context, err)
        except ValueError as err:  # a malformed key
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
        return worker_pb2.PushTensorResponse(nbytes=received)

    def _take_frame(self, frame) -> None:
        """A tensor pushed as one frame (its bytes, or a pooled segment's reference)
        into the rendezvous; raises WireError (the frame is refused), after failing the
        tensor's step with it: its consumer would otherwise wait for the deadline."""
        try:
            key, array = decode_pooled(frame, (), self.buffers, self.segment_maps)
        except wire.WireError as err:
            try:
                step_id = wire.parse_rendezvous_key(err.key).step_id
            except ValueError:  # no key to tell the step by
                raise err from None
            self.rendezvous.abort(step_id, StepAborted(
                f"a tensor pushed for step {step_id} was refused: {err}"))
            raise
        self.rendezvous.put(key, array)

    def AbortStep(self, request, context):  # noqa: N802
        from runtime.graph_codec import error_from_proto
        err = error_from_proto(request.error) if request.error.type else StepAborted(
            f"step {request.step_id} aborted")
        self.rendezvous.abort(request.step_id, StepAborted(f"step {request.step_id} aborted "
                                                          f"by the master: {err}"))
        return worker_pb2.AbortStepResponse()

    def CloseSession(self, request, context):  # noqa: N802
        self.close_session(request.session_handle)
        return worker_pb2.CloseSessionResponse()

    # -- lifecycle -----------------------------------------------------------------------
    def listen_local(self, **limits) -> bool:
        """Take pushes from tasks of this host on a Unix socket too (see
        :class:`runtime.wire.LocalPushListener`; ``limits``: its ``max_frame_bytes``,
        ``max_connections``); False where that is not possible."""
        if self._local_listener is not None:
            return True

        try:
            self._local_listener = wire.LocalPushListener(
                self._address_of[(self.job, self.task)], self._take_frame, **limits)
        except (OSError, KeyError, TypeError):  # no abstract sockets here, no address
            return False
        return True

    def close(self) -> None:
        """Stop the pushers and the executor's helper threads, free the devices."""
        self._closing.set()
        if self._local_listener is not None:
            self._local_listener.close()
        self._pushers.shutdown(wait=False, cancel_futures=True)
        self.segments.close()
        self.segment_maps.close()
        self.executor.close()
        self.devices.close()


def add_worker_to_server(service: WorkerService, server: grpc.Server) -> None:
    """Register ``service`` on ``server``; ``PushTensor`` requests stay serialized
    frames (decoded without copies by :func:`runtime.wire.decode_keyed`)."""
    descriptor = worker_pb2.DESCRIPTOR.services_by_name["Worker"]
    handlers = {}
    for method in descriptor.methods:
        make = {(False, False): grpc.unary_unary_rpc_method_handler,
                (True, False): grpc.stream_unary_rpc_method_handler,
                (True, True): grpc.stream_stream_rpc_method_handler}[
            (method.client_streaming, method.server_streaming)]
        request_cls = getattr(worker_pb2, method.input_type.name, None) or getattr(
            tensor_pb2, method.input_type.name)
        deserializer = None if request_cls is tensor_pb2.TensorChunk else request_cls.FromString
        handlers[method.name] = make(getattr(service, method.name),
                                     request_deserializer=deserializer,
                                     response_serializer=lambda m: m.SerializeToString())
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(descriptor.full_name, handlers),))
