"""The master service: places, partitions and runs the steps of a client's session.

Every :class:`runtime.server.Server` runs one :class:`MasterService` (protocol:
``service Master`` in ``runtime/protos/master.proto``). A client's session on a server
makes that server its master:

1. **Place.** The first run places the whole graph with the session's placer
   (``SessionConfig.placer``) on the server's hardware view (a
   :class:`core.cluster.Cluster` whose master task is this server's task, so unpinned
   ops land on its default device); a run after the client added ops places only the new
   ones (earlier ones keep their device). The placement of newly placed ops (and the
   ``log_device_placement`` lines) go back to the client with the run's reply.
2. **Partition.** For each step signature (fetches, targets, fed tensors, graph size) the
   ops the fetches need are split per task; every tensor consumed on another task is
   sent once per (tensor, destination device) (``send_to``), and a control edge across
   tasks once per receiving task. Fed tensors go to the tasks that consume them.
3. **Register.** Each task's part is registered with its worker once (per graph version):
   the new nodes, their placement and the partition, in one ``RegisterGraph`` call. A
   worker that restarted answers ``UnknownPartition``; the master registers again from
   node 0 and retries (its variables are gone: reading one raises FailedPrecondition).
4. **Run.** A ``RunGraph`` request goes to every involved worker at once: on a local
   connection to a worker of the same host, else as a message on a ``RunGraphs`` stream
   that stays open between steps (``WorkerClient.run_graphs``: :class:`runtime.wire.
   LocalCaller`, :class:`runtime.wire.StreamCaller`; the master's own part runs
   in-process, without an RPC); workers push tensors directly to each other (a part's
   last small tensors for this task that would cross by gRPC ride in its answer,
   ``RunGraphResponse.pushed``, delivered into this task's rendezvous before the answer
   counts). The first
   failure aborts the step on every other worker and is the answer at once (a dead
   peer breaks its connection or stream), so nobody waits for a dead peer; the error
   names the task. An answer that does not come within the step's deadline (plus
   :data:`RPC_MARGIN`) is a DeadlineExceeded naming the task, and its connection or
   stream is closed. Fetched values come back inline; to a client on a local
   connection that asked for it (``RunStepRequest.shared_fetches``), a large value of
   the master's own part comes back in one of its pooled shared-memory segments
   (``RunStepResponse.shared_values``): one copy into memory reused from step to step
   instead of the bytes through the message and the socket (on this 2-core host a
   4 MiB fetch added 3.0 ms to a step inline, 0.4 ms this way: medians of 300
   interleaved steps). Not even that copy when the kernel that makes the tensor can
   write it there: the segment is offered to it before the step (``fetch_into``;
   MatMul takes it).
"""

from __future__ import annotations

import itertools
import json
import logging
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import grpc
import numpy as np

from core.cluster import Cluster
from core.devices import DeviceSpec
from core.graph import Graph, GraphError, Operation
from core.ops import ShapeError
from core.placement import Placement, log_placement
from core.serialize import extend_graph
from runtime import errors, wire
from runtime.config import SessionConfig
from runtime.session import needed_ops
from runtime.graph_codec import (add_named_tensors, error_from_proto, error_to_proto,
                                 node_to_proto, nodes_from_proto, stats_to_proto,
                                 tensor_from_proto)
from runtime.protos import graph_pb2, master_pb2, master_pb2_grpc, tensor_pb2, worker_pb2
from runtime.segment_pool import SEGMENT_HEADER
from runtime.worker import (UNKNOWN_PARTITION, PeerChannels, StepAborted,
                            WorkerService, task_name, transport_error)

__all__ = ["MasterService", "needed_ops", "RPC_MARGIN", "master_in_this_process"]

_log = logging.getLogger(__name__)

#: Handles of the sessions that masters in this process opened.
_HANDLES_HERE: set[str] = set()


def master_in_this_process(handle: str) -> bool:
    """Whether the session ``handle`` is served by a master in this process (which
    logged its placement already: a client here need not log it again, so a program
    that starts its own servers, as the seed texts' do, prints each line once)."""
    return handle in _HANDLES_HERE

#: Seconds added to a step's ``operation_timeout`` for the RPC deadlines around it, so
#: that the workers' own deadline error (naming the ops not finished) arrives first.
RPC_MARGIN = 5.0


@dataclass
class _TaskPart:
    """One task's partition of a step signature."""

    task: tuple
    handle: str
    ops: list
    fetches: list
    targets: list
    feeds: list
    send_to: dict

    def to_proto(self) -> worker_pb2.PartitionDef:
        return worker_pb2.PartitionDef(
            handle=self.handle, ops=self.ops, fetches=self.fetches, targets=self.targets,
            feeds=self.feeds,
            send_to=[worker_pb2.SendTo(tensor=k, devices=sorted(v))
                     for k, v in sorted(self.send_to.items())])


@dataclass
class _Signature:
    parts: list            # of _TaskPart
    fed_fetches: list      # fetched names that are fed (answered by the master)
    node_count: int
    # (name, shape, dtype, elements) of this task's fetches a segment is offered for (_offers);
    # None until the first step that returns values in shared memory.
    offer_specs: list | None = None


@dataclass
class _MasterSession:
    handle: str
    config: SessionConfig
    placer: Any
    graph: Graph = field(default_factory=Graph)
    nodes: list = field(default_factory=list)        # NodeDef messages, in order
    placement: Placement = field(default_factory=Placement)
    placed_nodes: int = 0
    signatures: dict = field(default_factory=dict)
    # (job, task) -> (node count registered, set of partition handles)
    registered: dict = field(default_factory=dict)
    lock: threading.RLock = field(default_factory=threading.RLock)
    register_locks: dict = field(default_factory=dict)
    log_lines: list = field(default_factory=list)


class MasterService(master_pb2_grpc.MasterServicer):
    """The Master gRPC service of one server (see the module docstring).

    Args:
        cluster: the hardware view, master task set to this server's task.
        worker: this server's :class:`runtime.worker.WorkerService` (called directly).
        peers: the server's :class:`runtime.worker.PeerChannels`.
    """

    def __init__(self, cluster: Cluster, worker: WorkerService, peers: PeerChannels, *,
                 max_sessions: int = 256):
        self.cluster = cluster
        self.worker = worker
        self.peers = peers
        self.task = (worker.job, worker.task)
        self.task_name = worker.task_name
        self._sessions: dict[str, _MasterSession] = {}
        self._sessions_lock = threading.Lock()
        self._max_sessions = max_sessions
        self._address = {(t.job, t.index): t.address for t in cluster.tasks}
        self._cpu_of = {}
        for t in cluster.tasks:
            devs = cluster.devices_of_task(t.job, t.index)
            cpu = next((d for d in devs if d.is_cpu), devs[0])
            self._cpu_of[(t.job, t.index)] = cpu.name
        self._inflight: set = set()
        self._inflight_lock = threading.Lock()
        # Step ids: random base (several masters share the workers) + counter.
        self._step_ids = itertools.count(secrets.randbits(52) << 8)

    # -- sessions -------------------------------------------------------------------------
    def create_session(self, graph_def: graph_pb2.GraphDef, config_json: str) -> str:
        config = SessionConfig.from_dict(json.loads(config_json)) if config_json else SessionConfig()
        sess = _MasterSession(f"{self.task_name}/{secrets.token_hex(8)}", config, None)
        sess.placer = config.make_placer(log=lambda line: sess.log_lines.append(line))
        self._extend(sess, 0, graph_def.node)
        with self._sessions_lock:
            if len(self._sessions) >= self._max_sessions:  # forget the oldest
                self._sessions.pop(next(iter(self._sessions)))
            self._sessions[sess.handle] = sess
        _HANDLES_HERE.add(sess.handle)
        return sess.handle

    def _session(self, handle: str) -> _MasterSession:
        with self._sessions_lock:
            sess = self._sessions.get(handle)
        if sess is None:
            raise errors.NotFound(f"session {handle!r} is not open on {self.task_name} (closed, "
                                  "or the server restarted)")
        return sess

    def _extend(self, sess: _MasterSession, base: int, nodes) -> None:
        """Append the client's nodes ``[base, base + len(nodes))``; those the master
        already holds (a resend after a failed run, concurrent runs) are skipped."""
        with sess.lock:
            have = len(sess.nodes)
            if base > have:
                raise errors.FailedPrecondition(
                    f"the client sent nodes from {base}, the master holds {have}",
                    "graph_out_of_sync")
            fresh = list(nodes)[have - base:]
            if fresh:
                try:
                    extend_graph(sess.graph, nodes_from_proto(fresh))
                except (GraphError, ShapeError, TypeError, ValueError, KeyError) as err:
                    # The builders' checks, for a graph that did not come through them.
                    raise errors.InvalidArgument(
                        f"the graph sent to {self.task_name} is invalid: "
                        f"{err.args[0] if isinstance(err, KeyError) and err.args else err}"
                    ) from None
                sess.nodes.extend(fresh)

    def close_session(self, handle: str) -> None:
        _HANDLES_HERE.discard(handle)
        with self._sessions_lock:
            sess = self._sessions.pop(handle, None)
        if sess is None:
            return
        for task in list(sess.registered):
            if task == self.task:
                self.worker.close_session(handle)
                continue
            client = self.peers.get(self._address[task])
            try:
                self._keep_until_done(client.stub.CloseSession.future(
                    worker_pb2.CloseSessionRequest(session_handle=handle), timeout=2.0))
            except Exception:  # noqa: BLE001 - best effort
                pass

    # -- placement and partitions ------------------------------------------------------------
    def _place(self, sess: _MasterSession) -> tuple[list, list]:
        """Place new ops; return (new placement entries, log lines)."""
        with sess.lock:
            if sess.placed_nodes == len(sess.nodes):
                return [], []
            sess.log_lines = lines = []
            placement = sess.placer.place(sess.graph, self.cluster, previous=sess.placement)
            new = [(op, dev) for op, dev in placement.items() if op not in sess.placement]
            sess.placement = placement
            sess.placed_nodes = len(sess.nodes)
            log_placement(lines, _log)
            return new, lines

    def _signature(self, sess: _MasterSession, fetches: tuple, targets: tuple,
                   fed: frozenset) -> _Signature:
        key = (fetches, targets, fed, len(sess.nodes))
        sig = sess.signatures.get(key)
        if sig is not None:
            return sig
        with sess.lock:
            graph, placement = sess.graph, sess.placement
            roots = []
            fed_fetches = []
            for name in fetches:
                if name in fed:
                    fed_fetches.append(name)
                    continue
                roots.append(graph.get_tensor_by_name(name).op)
            roots += [graph.get_operation_by_name(n) for n in targets]
            ops = needed_ops(roots, set(fed))
            order = {op.name: i for i, op in enumerate(graph.get_operations())}
            ops.sort(key=lambda op: order[op.name])
            task_of = {}
            for op in ops:
                spec = DeviceSpec.from_string(placement[op.name])
                task_of[op.name] = (spec.job, spec.task)
            parts: dict[tuple, _TaskPart] = {}

            def part(task) -> _TaskPart:
                p = parts.get(task)
                if p is None:
                    p = parts[task] = _TaskPart(task, "", [], [], [], [], {})
                return p

            is_fed_op = {op.name for op in ops if op.outputs and all(t.name in fed for t in op.outputs)}
            for op in ops:
                if op.name in is_fed_op:
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
                    if c.name in is_fed_op:
                        name = next(x.name for x in c.outputs if x.name in fed)
                        if name not in p.feeds:
                            p.feeds.append(name)
                        continue
                    src_task = task_of[c.name]
                    if src_task != t:
                        part(src_task).send_to.setdefault("^" + c.name, set()).add(self._cpu_of[t])
            for name in fetches:
                if name not in fed:
                    op_name = name.rpartition(":")[0]
                    p = part(task_of[op_name])
                    if name not in p.fetches:
                        p.fetches.append(name)
            for name in targets:
                if name not in is_fed_op:
                    part(task_of[name]).targets.append(name)
            index = len(sess.signatures)
            for task, p in sorted(parts.items()):
                p.handle = f"{sess.handle}/{index}/{task[0]}/{task[1]}"
            sig = _Signature([parts[t] for t in sorted(parts)], fed_fetches, len(sess.nodes))
            sess.signatures[key] = sig
            return sig

    # -- registration ------------------------------------------------------------------------
    def _register(self, sess: _MasterSession, p: _TaskPart, node_count: int, *,
                  fresh: bool = False, deadline: float) -> None:
        """Make sure ``p``'s worker holds the graph up to ``node_count`` nodes and ``p``
        (``fresh``: it forgot everything; send from node 0)."""
        task = p.task
        with sess.lock:
            task_lock = sess.register_locks.setdefault(task, threading.Lock())
        with task_lock:
            for _ in range(2):
                have, handles = (0, set()) if fresh else sess.registered.get(task, (0, set()))
                if have >= node_count and p.handle in handles:
                    return
                with sess.lock:
                    nodes = sess.nodes[have:node_count]
                    placement = sess.placement
                request = worker_pb2.RegisterGraphRequest(
                    session_handle=sess.handle, base_node_count=have, nodes=nodes,
                    placement=[graph_pb2.PlacementEntry(op=n.name, device=placement[n.name])
                               for n in nodes],
                    partitions=[p.to_proto()],
                    config_json=json.dumps(sess.config.to_dict()) if have == 0 else "")
                if task == self.task:
                    self.worker.register_graph(request)
                else:
                    address = self._address[task]
                    for attempt in range(2):
                        client = self.peers.get(address)
                        try:
                            reply = wire.call_rpc(
                                client.stub.RegisterGraph, request, address=address,
                                method="Worker.RegisterGraph",
                                timeout=max(0.001, deadline - time.monotonic()))
                            break
                        except wire.TransportError as err:
                            if not isinstance(err, wire.PeerUnavailable):
                                raise transport_error(err, task_name(*task)) from None
                            self.peers.reset(address, client)
                            if attempt:
                                raise transport_error(err, task_name(*task)) from None
                            # Once more on a new channel: the old one may still be in
                            # reconnect backoff from before the peer restarted (a dead
                            # peer refuses the new one at once). Registering is idempotent.
                    if reply.error.type:
                        err = error_from_proto(reply.error)
                        if (isinstance(err, errors.FailedPrecondition)
                                and err.name == "graph_out_of_sync" and not fresh):
                            fresh = True  # the worker restarted: start again from node 0
                            continue
                        raise err
                handles = set(handles)
                handles.add(p.handle)
                sess.registered[task] = (node_count, handles)
                return

    # -- running ---------------------------------------------------------------------------
    def run_step(self, request: master_pb2.RunStepRequest, *, local: bool = False,
                 ) -> master_pb2.RunStepResponse:
        """One client step (see the module docstring). ``local``: the request came on a
        local connection (same host), so ``request.shared_fetches`` may be honoured."""
        offers: dict = {}  # fetched name -> (pooled segment, array over its bytes)
        failed = True
        try:
            response = self._run_step(request, local, offers)
            failed = False
            return response
        finally:
            # The answer refers to the segments it uses (their flag set: held until the
            # client let go); the others are free again. The arrays over them first.
            # After a failed step a kernel may still be writing into its offer (the
            # executor does not wait for the ops running when a step fails): such a
            # segment is never reused.
            segments = [segment for segment, _ in offers.values()]
            offers.clear()
            for segment in segments:
                if failed:
                    self.worker.segments.discard(segment)
                else:
                    self.worker.segments.release(segment)

    def _offers(self, graph: Graph, sig: _Signature, part: _TaskPart, offers: dict) -> None:
        """Fill ``offers`` with a pooled segment for each of ``part``'s fetches that goes
        back through shared memory when the tensor lands there (a static shape, large
        enough), and an array of its shape and dtype over the segment's bytes, which the
        kernel that makes the tensor may write it into (``fetch_into``): the answer then
        refers to the segment without a copy (see :meth:`_add_values`)."""
        if sig.offer_specs is None:
            specs = []
            least = self.worker.shm_min_bytes
            for name in part.fetches if least is not None else ():
                t = graph.get_tensor_by_name(name)
                if t.shape is None or None in tuple(t.shape):
                    continue
                try:
                    dtype = wire.wire_dtype(t.dtype, name)
                except wire.WireError:
                    continue
                shape = tuple(int(d) for d in t.shape)
                count = int(np.prod(shape))
                if count * dtype.itemsize >= least:
                    specs.append((name, shape, dtype, count))
            sig.offer_specs = specs
        for name, shape, dtype, count in sig.offer_specs:
            segment = self.worker.segments.acquire(count * dtype.itemsize)
            offers[name] = (segment, np.frombuffer(segment.buf, dtype, count=count,
                                                   offset=SEGMENT_HEADER).reshape(shape))

    def _run_step(self, request: master_pb2.RunStepRequest, local: bool, offers: dict,
                  ) -> master_pb2.RunStepResponse:
        sess = self._session(request.session_handle)
        shared = local and request.shared_fetches
        if request.nodes or request.base_node_count != len(sess.nodes):
            self._extend(sess, request.base_node_count, request.nodes)
        response = master_pb2.RunStepResponse()
        new, lines = self._place(sess)
        response.new_placement.extend(graph_pb2.PlacementEntry(op=o, device=d) for o, d in new)
        response.placement_log.extend(lines)
        response.node_count = len(sess.nodes)

        graph = sess.graph
        fetches = tuple(request.fetches)
        targets = tuple(request.targets)
        feeds_by_name = _checked_feeds(graph, request.feeds)
        _check_fetches(graph, fetches, targets)
        sig = self._signature(sess, fetches, targets, frozenset(feeds_by_name))
        timeout = sess.config.operation_timeout
        deadline = time.monotonic() + timeout + RPC_MARGIN
        step_id = next(self._step_ids)
        trace = request.trace

        for name in sig.fed_fetches:
            response.values.append(graph_pb2.NamedTensor(name=name, value=feeds_by_name[name].value))
        if not sig.parts:
            return response

        results: dict = {}
        first_error: list = []
        lock = threading.Lock()
        involved = [p.task for p in sig.parts]
        # Set when a RunGraph's answer was handled or the step failed: the wait below
        # wakes on either.
        changed = threading.Event()
        answered: list = []    # parts whose answer (or failure) was handled

        def fail(err: BaseException) -> None:
            with lock:
                if first_error:
                    return
                first_error.append(err)
            changed.set()
            self._abort(step_id, involved, err)

        def run_again(p: _TaskPart, request) -> None:
            # At once, on its own thread: the other parts may be waiting for this one's
            # tensors (a producer that restarted), so it cannot wait for their answers.
            try:
                reply = self._run_again(sess, p, sig, request, deadline)
                with lock:
                    results[p.task] = reply
            except BaseException as err:  # noqa: BLE001
                fail(err)
            finally:
                with lock:
                    answered.append(p)
                changed.set()

        def on_answer(p: _TaskPart, client, request, reply, error) -> None:
            # On the stream's reader thread: must not raise.
            try:
                if error is not None:
                    if isinstance(error, wire.PeerUnavailable):
                        self.peers.reset(client.address, client)
                    fail(transport_error(error, task_name(*p.task)))
                elif reply.error.type == UNKNOWN_PARTITION:
                    # The worker restarted: register the part with it again and rerun
                    # it in this step; answered when that ends.
                    threading.Thread(target=run_again, args=(p, request), daemon=True,
                                     name="run-again").start()
                    return
                elif reply.error.type:
                    fail(error_from_proto(reply.error))
                else:
                    self._deliver_pushed(reply)
                    with lock:
                        results[p.task] = reply
            except BaseException as err:  # noqa: BLE001
                fail(err)
            with lock:
                answered.append(p)
            changed.set()

        # Remote parts first (messages on open streams), then this task's part in this
        # thread.
        calls = []  # (part, abandon)
        local = None
        for p in sig.parts:
            if p.task == self.task:
                local = p
                continue
            try:
                self._register(sess, p, sig.node_count, deadline=deadline)
                request = worker_pb2.RunGraphRequest(
                    session_handle=sess.handle, partition_handle=p.handle, step_id=step_id,
                    feeds=[feeds_by_name[n] for n in p.feeds], trace=trace, timeout=timeout,
                    caller=self.task_name)
                client = self.peers.get(self._address[p.task])
                calls.append((p, client.run_graphs.call_async(
                    request, lambda reply, error, p=p, client=client, request=request:
                    on_answer(p, client, request, reply, error),
                    max(0.001, deadline - time.monotonic()))))
            except BaseException as err:  # noqa: BLE001
                fail(err)
                break
        if local is not None and not first_error:
            try:
                results[self.task] = self._run_own_part(
                    sess, sig, local, step_id, feeds_by_name, trace, deadline,
                    offers if shared else None)
            except BaseException as err:  # noqa: BLE001
                fail(err)
            finally:
                self.worker.rendezvous.finish_step(step_id)
        # Wait for every remote part, or only until the step failed: the first error
        # is the answer, and the other parts were told to abort (a dead or stuck peer
        # must not hold the client until the deadline).
        while True:
            changed.clear()
            if first_error or len(answered) >= len(calls):
                break
            if not changed.wait(max(0.0, deadline - time.monotonic())):
                break
        if not first_error and len(answered) < len(calls):
            # Past the deadline: give up the calls still unanswered (an answer that
            # raced in is handled by its callback; wait for those).
            late = [p for p, abandon in calls if p not in answered and abandon()]
            if late:
                p = late[0]
                fail(transport_error(wire.DeadlineExceeded(
                    self._address[p.task], "Worker.RunGraphs", grpc.StatusCode.DEADLINE_EXCEEDED,
                    "no answer", timeout + RPC_MARGIN), task_name(*p.task)))
            while not first_error and len(answered) < len(calls) - len(late):
                changed.clear()
                changed.wait(1.0)
        if not first_error and any(p.task not in results for p in sig.parts):
            fail(errors.DeadlineExceeded(f"step {step_id} ran past its deadline of {timeout} s"))
        if first_error:
            raise first_error[0]

        own_values = _gather(sig, results, trace, response)
        # Last: nothing may fail once a value sits in a segment held for the client.
        self._add_values(response, own_values, shared, offers)
        return response

    def _run_own_part(self, sess, sig: _Signature, part: _TaskPart, step_id: int,
                      feeds_by_name: dict, trace: bool, deadline: float,
                      offers: dict | None) -> tuple:
        """Run this task's part of the step in this thread (no RPC), registered first;
        ``offers``: fill it with segments the fetched tensors may be written into
        (:meth:`_offers`; None: no shared answer). Returns ``(StepResult, sends)``."""
        self._register(sess, part, sig.node_count, deadline=deadline)
        wsess, wpart = self.worker.partition(sess.handle, part.handle)
        if wpart is None:  # evicted from the worker's session table
            self._register(sess, part, sig.node_count, fresh=True, deadline=deadline)
            wsess, wpart = self.worker.partition(sess.handle, part.handle)
        feeds = {n: tensor_from_proto(feeds_by_name[n].value, n) for n in part.feeds}
        if offers is not None:
            self._offers(sess.graph, sig, part, offers)
        return self.worker.run_partition(
            wsess, wpart, step_id, feeds, trace=trace, timeout=sess.config.operation_timeout,
            fetch_into={name: view for name, (_, view) in (offers or {}).items()} or None)

    def _add_values(self, response: master_pb2.RunStepResponse, values: dict,
                    shared: bool, offers: dict | None = None) -> None:
        """This task's fetched ``values`` into ``response``: inline, or, ``shared``,
        those large enough in pooled shared-memory segments (``shared_values``; the
        worker's :meth:`~runtime.worker.WorkerService.stage_shared`), which the client
        hands back by clearing their flag once it copied the bytes out. A client that
        dies first leaves its segment held: never reused, unlinked when the server
        stops, as a peer's pushed segments. ``offers`` (from :meth:`_offers`; the caller
        releases them): a value that is its offer's array is in its segment already (its
        kernel wrote it there): no copy; another value is copied into its offer's
        segment."""
        if not shared:
            add_named_tensors(response.values, values)
            return
        offers = offers or {}
        inline = {}
        staged = []
        try:
            for name, value in values.items():
                segment = None
                if isinstance(value, np.ndarray):
                    offer = offers.get(name)
                    if offer is not None and value is offer[1]:
                        arr, segment = value, offer[0]
                        segment.buf[0] = 1  # as stage_shared: held until the client let go
                    else:
                        try:
                            arr = wire.as_wire_array(value, name)
                        except wire.WireError:
                            arr = None  # add_named_tensors names the problem
                        if arr is not None:
                            fits = offer is not None and offer[1].nbytes == arr.nbytes
                            segment = self.worker.stage_shared(arr, offer[0] if fits else None)
                if segment is None:
                    inline[name] = value
                    continue
                staged.append(segment)
                entry = response.shared_values.add()
                entry.name = name
                entry.meta.CopyFrom(wire.make_meta(arr))
                entry.shm.name = segment.name
                entry.shm.offset = SEGMENT_HEADER
                entry.shm.nbytes = arr.nbytes
            add_named_tensors(response.values, inline)
        except BaseException:
            for segment in staged:  # no answer will refer to them: free for reuse
                segment.buf[0] = 0
            raise
        finally:
            offered = {id(segment) for segment, _ in offers.values()}
            for segment in staged:
                if id(segment) not in offered:
                    self.worker.segments.release(segment)

    def _run_again(self, sess, p: _TaskPart, sig: _Signature, request, deadline: float):
        """Run ``p`` again on a worker that restarted (it answered UnknownPartition),
        registering the graph with it from node 0 first."""
        address = self._address[p.task]
        self._register(sess, p, sig.node_count, fresh=True, deadline=deadline)
        client = self.peers.get(address)
        try:
            reply = client.run_graphs.call(request, max(0.001, deadline - time.monotonic()))
        except wire.TransportError as err:
            if isinstance(err, wire.PeerUnavailable):
                self.peers.reset(address, client)
            raise transport_error(err, task_name(*p.task)) from None
        if reply.error.type:
            raise error_from_proto(reply.error)
        self._deliver_pushed(reply)
        return reply

    def _deliver_pushed(self, reply: worker_pb2.RunGraphResponse) -> None:
        """The tensors a part's answer carries for this task (``RunGraphResponse.pushed``),
        into the rendezvous as pushes are (checked the same way; a bad one fails the
        step). Before the answer counts: this task's part may be waiting for them."""
        for frame in reply.pushed:
            self.worker._take_frame(frame)

    def _abort(self, step_id: int, tasks: list, err: BaseException) -> None:
        """Abort ``step_id`` on every task of ``tasks`` (fire and forget)."""
        status = error_to_proto(err, self.task_name)
        for task in tasks:
            if task == self.task:
                self.worker.rendezvous.abort(step_id, StepAborted(
                    f"step {step_id} aborted: {err}"))
                continue
            # Only over an open channel: the failed peer's was dropped, and a new one
            # to a dead address would sit in reconnect backoff when the peer restarts.
            client = self.peers.existing(self._address[task])
            if client is None:
                continue
            try:
                self._keep_until_done(client.stub.AbortStep.future(
                    worker_pb2.AbortStepRequest(step_id=step_id, error=status), timeout=2.0))
            except Exception:  # noqa: BLE001 - best effort; the step deadline still holds
                pass

    def _keep_until_done(self, future) -> None:
        """Hold a fire-and-forget call's future until it completes: gRPC cancels a call
        whose future is garbage-collected."""
        with self._inflight_lock:
            self._inflight.add(future)

        def drop(f) -> None:
            with self._inflight_lock:
                self._inflight.discard(f)

        future.add_done_callback(drop)

    # -- gRPC methods --------------------------------------------------------------------
    def CreateSession(self, request, context):  # noqa: N802
        try:
            handle = self.create_session(request.graph, request.config_json)
            return master_pb2.CreateSessionResponse(
                session_handle=handle, task=self.task_name,
                cluster_json=json.dumps(self.cluster.to_dict()))
        except BaseException as err:  # noqa: BLE001
            return master_pb2.CreateSessionResponse(error=error_to_proto(err, self.task_name))

    def RunStep(self, request, context):  # noqa: N802
        return self._answer(request, local=False)

    def run_local_step(self, request: master_pb2.RunStepRequest) -> master_pb2.RunStepResponse:
        """``RunStep`` for a call on a local connection (:class:`runtime.wire.
        LocalCallListener`): the client runs on this host."""
        return self._answer(request, local=True)

    def _answer(self, request, local: bool) -> master_pb2.RunStepResponse:
        try:
            return self.run_step(request, local=local)
        except BaseException as err:  # noqa: BLE001
            return master_pb2.RunStepResponse(error=error_to_proto(err, self.task_name))

    def RunSteps(self, request_iterator, context):  # noqa: N802
        # One step per message, answered in order; the stream stays open between steps
        # (the client waits for each answer with the step's deadline).
        for request in request_iterator:
            yield self.RunStep(request, context)

    def CloseSession(self, request, context):  # noqa: N802
        self.close_session(request.session_handle)
        return worker_pb2.CloseSessionResponse()

    def ListDevices(self, request, context):  # noqa: N802
        return master_pb2.ListDevicesResponse(
            devices=[worker_pb2.DeviceAttributes(name=d.name, device_type=d.device_type,
                                                 memory_limit_bytes=d.memory_bytes)
                     for d in self.cluster.devices],
            cluster_json=json.dumps(self.cluster.to_dict()))

    def Ping(self, request, context):  # noqa: N802
        return tensor_pb2.PingReply(payload=request.payload)

    def close(self) -> None:
        pass



def _checked_feeds(graph: Graph, feeds) -> dict:
    """The request's feeds by tensor name, each checked against its tensor (it exists,
    its dtype and shape fit)."""
    feeds_by_name = {}
    for f in feeds:
        try:
            t = graph.get_tensor_by_name(f.name)
        except (KeyError, ValueError):
            raise errors.NotFound(f"cannot feed {f.name!r}: the graph has no such tensor") from None
        meta = f.value.meta
        shape = tuple(t.shape) if t.shape is not None else None
        if meta.dtype != t.dtype.name:
            raise errors.InvalidArgument(
                f"Cannot feed a value of dtype {meta.dtype} to Tensor {f.name!r} of dtype "
                f"{t.dtype.name}")
        if shape is not None and (len(meta.shape) != len(shape) or any(
                d is not None and d != s for d, s in zip(shape, meta.shape))):
            raise errors.InvalidArgument(
                f"Cannot feed value of shape {tuple(meta.shape)} for Tensor {f.name!r}, "
                f"which has shape {shape}")
        feeds_by_name[f.name] = f
    return feeds_by_name


def _check_fetches(graph: Graph, fetches, targets) -> None:
    """Every fetched tensor and target op exists (NotFound naming it otherwise)."""
    for name in fetches:
        try:
            graph.get_tensor_by_name(name)
        except (KeyError, ValueError):
            raise errors.NotFound(f"The name {name!r} refers to a Tensor which does not "
                                  "exist in the session's graph") from None
    for name in targets:
        if name not in graph:
            raise errors.NotFound(f"The name {name!r} refers to an Operation not in the "
                                  "graph.") from None


def _gather(sig, results: dict, trace: bool, response: master_pb2.RunStepResponse) -> dict:
    """The parts' answers into ``response`` (the remote parts' values, and the step's
    stats when traced); return this task's own fetched values."""
    stats = graph_pb2.StepStats() if trace else None
    own_values: dict = {}
    for p in sig.parts:
        r = results[p.task]
        if isinstance(r, worker_pb2.RunGraphResponse):
            response.values.extend(r.values)
            if trace:
                _merge_stats(stats, r.stats)
        else:
            result, sends = r
            own_values = result.values
            if trace:
                _merge_stats(stats, stats_to_proto(result.ops, result.transfers, result.memory,
                                                   result.oom, sends, result.capacity,
                                                   result.start, result.end))
    if trace:
        response.stats.CopyFrom(stats)
    return own_values

def _merge_stats(into: graph_pb2.StepStats, part: graph_pb2.StepStats) -> None:
    """Append ``part``'s records to ``into``; the step spans both."""
    first = not (into.ops or into.start or into.end)
    into.ops.extend(part.ops)
    into.transfers.extend(part.transfers)
    into.memory.extend(part.memory)
    into.oom.extend(part.oom)
    into.sends.extend(part.sends)
    for k, v in part.capacity.items():
        into.capacity[k] = v
    if first:
        into.start, into.end = part.start, part.end
    else:
        into.start, into.end = min(into.start, part.start), max(into.end, part.end)
