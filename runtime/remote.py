"""``RemoteSession``: the client side of a ``grpc://`` session.

:class:`runtime.session.Session` hands every call of a ``Session("grpc://host:port")``
to a :class:`RemoteSession`; the server at that address is the session's master.
Opening the session sends the graph as it stands (``CreateSession``); each run is one
``RunStepRequest`` message, on a local connection when the master is a server of this
host (:class:`runtime.wire.LocalCaller`) or else on a ``RunSteps`` stream that stays
open between runs (:class:`runtime.wire.StreamCaller`), with the run's deadline on the
answer. It also carries the ops added to the graph since the last call, the feeds,
and gets back the fetched values inline (or, on a local connection, large ones in the
master's shared-memory segments, copied out here), the placement of newly placed ops,
and, when asked, every task's trace records, merged here into one
:class:`core.trace.Trace`.
Errors raised on a server come back as the same :mod:`runtime.errors` class (or
``core.placement.PlacementError``); a server that cannot be reached is
:class:`runtime.errors.Unavailable`, within the call's deadline.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Mapping

import numpy as np

from core.cluster import Cluster
from core.graph import Graph
from core.placement import Placement, log_placement
from core.serialize import graph_to_nodes
from core.trace import Trace
from runtime import errors, wire
from runtime.config import SessionConfig
from runtime.graph_codec import (CodecError, add_named_tensors, error_from_proto, graph_to_proto,
                                 node_to_proto, stats_from_proto, tensors_from_proto)
from runtime.master import RPC_MARGIN, master_in_this_process
from runtime.protos import master_pb2, master_pb2_grpc, worker_pb2
from runtime.shm import shm_available
from runtime.segment_pool import SegmentMaps

__all__ = ["RemoteSession", "build_trace", "take_shared"]

_log = logging.getLogger(__name__)


def build_trace(stats: Mapping, fetch_names=(), target_names=(), meta: Mapping | None = None,
                ) -> Trace:
    """A :class:`core.trace.Trace` from merged records (:func:`stats_from_proto`).

    Times are shifted so the step starts at 0. A transfer is recorded by its receiver
    from the moment it waited for it; it starts no earlier than its sender pushed it
    (so that a trace shows the transfer after its producer, as in the simulator). A
    fed tensor consumed on several tasks is recorded once.
    """
    ops_by_name = {}
    for r in sorted(stats["ops"], key=lambda r: r.start):
        ops_by_name.setdefault(r.op, r)
    ops = list(ops_by_name.values())
    origin = min([stats["start"]] + [r.start for r in ops]) if ops or stats["start"] else 0.0
    pushed = {(t, d): a for t, d, a, _ in stats["sends"]}
    transfers = []
    for x in stats["transfers"]:
        start = max(x.start, pushed.get((x.tensor, x.dst), x.start))
        transfers.append(x._replace(start=min(start, x.end)))
    o = origin
    trace = Trace(
        ops=[r._replace(start=r.start - o, end=r.end - o) for r in ops],
        transfers=[r._replace(start=r.start - o, end=r.end - o) for r in transfers],
        memory=sorted((r._replace(time=r.time - o) for r in stats["memory"]),
                      key=lambda r: (r.time, r.device)),
        oom_events=[r._replace(time=r.time - o) for r in stats["oom"]],
        capacity=dict(stats["capacity"]), meta=dict(meta or {}))
    ends = {r.op: r.end for r in trace.ops}
    wanted = [n.rpartition(":")[0] for n in fetch_names] + list(target_names)
    trace.fetch_end = {n: ends[n] for n in wanted if n in ends}
    return trace


def take_shared(maps: SegmentMaps, value: master_pb2.SharedTensor) -> np.ndarray:
    """A fresh, writable array with the bytes of a fetched value the master left in
    one of its pooled segments (``RunStepResponse.shared_values``), checked as
    :func:`runtime.graph_codec.tensor_from_proto` checks an inline one. The segment goes
    back to the master (its flag cleared, :meth:`SegmentMaps.lease`) once the bytes are
    copied, or the check failed. Raises :class:`runtime.graph_codec.CodecError`."""
    name, ref = value.name, value.shm
    try:
        leased = maps.lease(ref.name, ref.offset, ref.nbytes, name)
    except wire.WireError as err:
        raise CodecError(str(err)) from None
    try:
        dtype, shape = wire.check_meta(value.meta, name)
        if ref.nbytes != value.meta.nbytes:
            raise CodecError(f"tensor {name!r}: a {ref.nbytes}-byte segment ref for "
                             f"{value.meta.nbytes} announced bytes")
        # The copy is the caller's (native byte order); the segment is reused.
        return leased.view(dtype).reshape(shape).astype(dtype.newbyteorder("="), copy=True)
    except wire.WireError as err:
        raise CodecError(str(err)) from None
    finally:
        del leased  # its finalizer hands the segment back


class RemoteSession:
    """A session whose master is the server at ``target`` (``grpc://host:port``).

    The contract with :class:`runtime.session.Session`: ``run(fetch_names, target_names,
    feeds, trace) -> (values by tensor name, Trace | None)``, ``close()``, ``placement``
    (the master's :class:`core.placement.Placement` of the graph), ``cluster`` (the
    hardware view it places on) and ``list_devices()``.

    Raises :class:`runtime.errors.Unavailable` when nothing answers at ``target``.
    """

    def __init__(self, target: str, graph: Graph, config: SessionConfig | None = None,
                 security=None):
        if not target.startswith("grpc://"):
            raise errors.InvalidArgument(f"a remote target looks like 'grpc://host:port', not "
                                         f"{target!r}")
        self.target = target
        self.address = target[len("grpc://"):]
        self.graph = graph
        self.config = config or SessionConfig()
        self._lock = threading.Lock()
        self._closed = False
        self._placement_entries: dict[str, str] = {}
        self._placement: Placement | None = None
        self._channel = wire.create_channel(self.address, security=security)
        self._stub = master_pb2_grpc.MasterStub(self._channel)
        # Steps as messages on a connection or stream that stays open: a message costs
        # a fraction of a call's set-up on both sides (runtime.wire.StreamCaller).
        self._steps = wire.LocalCaller(
            self.address, "Master.RunStep", master_pb2.RunStepResponse.FromString,
            wire.StreamCaller(self._stub.RunSteps, address=self.address,
                              method="Master.RunSteps"))
        self._connect_timeout = min(self.config.operation_timeout, 10.0) + RPC_MARGIN
        # Mappings of the master's segments that large fetched values come back in
        # (only on a local connection: the master decides), kept open between steps.
        self._shared = SegmentMaps() if shm_available() else None
        try:
            ops = graph.get_operations()
            nodes = graph_to_nodes(ops)
            reply = self._call("CreateSession", master_pb2.CreateSessionRequest(
                graph=graph_to_proto(nodes), config_json=json.dumps(self.config.to_dict())),
                self._connect_timeout)
            if reply.error.type:
                raise error_from_proto(reply.error)
        except BaseException:
            self._channel.close()
            raise
        self._sent = len(ops)
        self.handle = reply.session_handle
        self.master_task = reply.task
        self.cluster = Cluster.from_dict(json.loads(reply.cluster_json))

    def _call(self, method: str, request, timeout: float):
        try:
            if method == "RunStep":
                return self._steps.call(request, timeout)
            return wire.call_rpc(getattr(self._stub, method), request, address=self.address,
                                 method=f"Master.{method}", timeout=timeout)
        except wire.PeerUnavailable as err:
            raise errors.Unavailable(self.target, f"{err.method} failed: {err.details}") from None
        except wire.DeadlineExceeded as err:
            raise errors.DeadlineExceeded(
                f"{err.method} to {self.target} got no answer within {err.elapsed:.1f} s") from None
        except wire.TransportError as err:
            raise errors.LabRuntimeError(str(err)) from None

    @property
    def placement(self) -> Placement | None:
        """The master's placement of the ops placed so far (None before the first run)."""
        with self._lock:
            if self._placement is None and self._placement_entries:
                self._placement = Placement(self._placement_entries)
            return self._placement

    def list_devices(self):
        from runtime.session import DeviceAttributes
        reply = self._call("ListDevices", master_pb2.ListDevicesRequest(), self._connect_timeout)
        return [DeviceAttributes(d.name, d.device_type, d.memory_limit_bytes)
                for d in reply.devices]

    def run(self, fetch_names: list[str], target_names: list[str],
            feeds: Mapping[str, np.ndarray], trace: bool = False):
        """One step on the cluster; see the class docstring."""
        if self._closed:
            raise errors.LabRuntimeError("Attempted to use a closed Session.")
        request = master_pb2.RunStepRequest(
            session_handle=self.handle, fetches=fetch_names, targets=target_names, trace=trace,
            shared_fetches=self._shared is not None)
        add_named_tensors(request.feeds, feeds)
        with self._lock:
            ops = self.graph.get_operations()
            if len(ops) > self._sent:
                request.nodes.extend(node_to_proto(n) for n in graph_to_nodes(ops[self._sent:]))
            request.base_node_count = self._sent
            sent_after = len(ops)
        reply = self._call("RunStep", request, self.config.operation_timeout + 2 * RPC_MARGIN)
        with self._lock:
            if reply.node_count >= sent_after:
                self._sent = max(self._sent, reply.node_count)
            if reply.new_placement:
                for e in reply.new_placement:
                    self._placement_entries[e.op] = e.device
                self._placement = None
        if reply.placement_log and self.config.log_device_placement and \
                not master_in_this_process(self.handle):
            log_placement(reply.placement_log, _log)
        if reply.error.type:
            raise error_from_proto(reply.error)
        values = tensors_from_proto(reply.values)
        if reply.shared_values:
            values.update(self._take_all_shared(reply.shared_values))
        tr = None
        if trace:
            tr = build_trace(stats_from_proto(reply.stats), fetch_names, target_names,
                             {"target": self.target, "master": self.master_task,
                              "config": self.config.to_dict(), "backend": "runtime"})
        return values, tr

    def _take_all_shared(self, shared) -> dict:
        """The values of ``RunStepResponse.shared_values``; every segment goes back to
        the master, even when one of them fails its checks (the first error is raised)."""
        if self._shared is None:
            raise errors.LabRuntimeError("the master answered with shared-memory values, "
                                         "which this client did not ask for")
        values, first_error = {}, None
        for value in shared:
            try:
                values[value.name] = take_shared(self._shared, value)
            except CodecError as err:
                first_error = first_error or err
        if first_error is not None:
            raise first_error
        return values

    def close(self) -> None:
        """Close the session on the master (best effort) and the channel (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._steps.close()
        if self._shared is not None:
            self._shared.close()
        try:
            self._call("CloseSession", worker_pb2.CloseSessionRequest(session_handle=self.handle),
                       2.0)
        except errors.LabRuntimeError:
            pass
        self._channel.close()

    def __del__(self):
        try:
            if not self._closed:
                self._steps.close()  # its local connections and the server's threads
                self._channel.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass
