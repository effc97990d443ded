"""TensorStore: a tiny demo service (key -> tensor) over the runtime's codec and gRPC
plumbing, used by the tests and by ``experiments/bench_wire.py``.

:class:`TensorStoreServicer`, :class:`TensorStoreClient`, :func:`start_tensor_store`
(in this process) and :class:`TensorStoreProcess` (in a child process). The worker
service copies its patterns: decode with :func:`runtime.tensor_codec.decode_keyed` in
the servicer, abort with :func:`runtime.grpc_calls.abort_with` on a ``WireError``, call
through :func:`runtime.grpc_calls.call_rpc`.
"""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Callable, Sequence
from typing import Any

import grpc
import numpy as np

from runtime.grpc_calls import (DEFAULT_DEADLINE, LOCALHOST, MAX_MESSAGE_BYTES, TransportError,
                                abort_with, call_rpc, create_channel, create_server,
                                server_options)
from runtime.protos import tensor_pb2, tensor_pb2_grpc
from runtime.tensor_codec import (DEFAULT_CHUNK_BYTES, WireError, decode_chunks, decode_keyed,
                                  encode_frames, encode_unary, serialize_frame)

__all__ = ["method_path", "add_tensor_store_to_server", "TensorStoreServicer",
           "TensorStoreServer", "TensorStoreClient", "TensorStoreProcess",
           "start_tensor_store"]

# ---------------------------------------------------------------------------
# TensorStore: the demo service

class TensorStoreServicer(tensor_pb2_grpc.TensorStoreServicer):
    """Holds tensors by key; thread-safe. See ``service TensorStore`` in the proto.

    Register it with :func:`add_tensor_store_to_server` (``Get`` yields
    pre-serialized frames, which the generated registration would not accept).

    Tensors sent through shared memory to ``Get(via_shm=True)`` callers are recorded
    in a :class:`runtime.shm.SegmentLedger`; :meth:`close` unlinks those a caller
    never picked up.
    """

    def __init__(self) -> None:
        from runtime import shm

        self._tensors: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()
        self.ledger = shm.SegmentLedger()

    def keys(self) -> list[str]:
        """Keys currently stored, sorted."""
        with self._lock:
            return sorted(self._tensors)

    def _store(self, key: str, array: np.ndarray) -> tensor_pb2.PutReply:
        with self._lock:
            self._tensors[key] = array
        return tensor_pb2.PutReply(key=key, nbytes=array.nbytes)

    def Put(self, request_iterator, context):  # noqa: N802 (gRPC's method names)
        try:
            # A tensor handed over in shared memory is kept in its (already unlinked)
            # mapping rather than copied out: the memory is freed when it is replaced.
            key, array = decode_keyed(request_iterator, shm_copy=False)
        except WireError as err:
            abort_with(context, err)
        return self._store(key, array)

    def PutUnary(self, request, context):  # noqa: N802
        try:
            key, array = decode_keyed([request])
        except WireError as err:
            abort_with(context, err)
        return self._store(key, array)

    def Get(self, request, context):  # noqa: N802
        from runtime import shm

        with self._lock:
            array = (self._tensors.pop if request.remove else self._tensors.get)(request.key)
        if array is None:
            abort_with(context, KeyError(f"no tensor stored under {request.key!r}"))
        if request.via_shm:
            yield shm.export_array(array, request.key, ledger=self.ledger)
        else:
            # Pre-serialized frames: register with add_tensor_store_to_server().
            yield from encode_frames(array, request.key,
                                     request.chunk_bytes or DEFAULT_CHUNK_BYTES)

    def Ping(self, request, context):  # noqa: N802
        return tensor_pb2.PingReply(payload=request.payload)

    def close(self) -> int:
        """Forget all tensors and unlink unclaimed segments; return how many."""
        with self._lock:
            self._tensors.clear()
        return self.ledger.unlink_all()


def method_path(service: str, method: str) -> str:
    """gRPC path of a method of a service in ``tensor.proto``, from the descriptor.

    >>> method_path("TensorStore", "Put")
    '/placement_lab.TensorStore/Put'
    """
    descriptor = tensor_pb2.DESCRIPTOR.services_by_name[service]
    return f"/{descriptor.full_name}/{descriptor.methods_by_name[method].name}"


def add_tensor_store_to_server(servicer: TensorStoreServicer, server: grpc.Server) -> None:
    """Register ``servicer`` like the generated ``add_TensorStoreServicer_to_server``,
    except that ``TensorChunk`` requests arrive as serialized frames (decode them with
    :func:`decode_keyed`, which accepts both) and responses go through
    :func:`serialize_frame`, so ``Get`` may yield frames from :func:`encode_frames`."""
    descriptor = tensor_pb2.DESCRIPTOR.services_by_name["TensorStore"]
    handlers = {}
    for method in descriptor.methods:
        request_cls = getattr(tensor_pb2, method.input_type.name)
        make = {(False, False): grpc.unary_unary_rpc_method_handler,
                (True, False): grpc.stream_unary_rpc_method_handler,
                (False, True): grpc.unary_stream_rpc_method_handler,
                (True, True): grpc.stream_stream_rpc_method_handler,
                }[(method.client_streaming, method.server_streaming)]
        # TensorChunk requests stay bytes: decode_keyed() splits them without copying.
        deserializer = None if request_cls is tensor_pb2.TensorChunk else request_cls.FromString
        handlers[method.name] = make(getattr(servicer, method.name),
                                     request_deserializer=deserializer,
                                     response_serializer=serialize_frame)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(descriptor.full_name, handlers),))


class TensorStoreServer:
    """A running TensorStore gRPC server in this process (see :func:`start_tensor_store`)."""

    def __init__(self, server: grpc.Server, servicer: TensorStoreServicer, host: str,
                 port: int):
        self.server = server
        self.servicer = servicer
        self.host = host
        self.port = port

    @property
    def address(self) -> str:
        """``host:port`` for :class:`TensorStoreClient`."""
        return f"{self.host}:{self.port}"

    def stop(self, grace: float | None = None) -> None:
        """Stop serving (waits for it) and release unclaimed shared-memory segments."""
        self.server.stop(grace).wait()
        self.servicer.close()

    def __enter__(self) -> TensorStoreServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_tensor_store(host: str = LOCALHOST, port: int = 0, *,
                       max_workers: int = 8) -> TensorStoreServer:
    """Start a TensorStore server in this process (port 0: an ephemeral one).

    Example::

        >>> with start_tensor_store() as server, TensorStoreClient(server.address) as c:
        ...     _ = c.put("k", np.ones(3))
        ...     c.get("k").tolist()
        [1.0, 1.0, 1.0]
    """
    servicer = TensorStoreServicer()
    # The demo measures one-message (unary) transfers of large tensors too.
    server, bound = create_server(host, port, max_workers=max_workers,
                                  options=server_options(MAX_MESSAGE_BYTES))
    add_tensor_store_to_server(servicer, server)
    server.start()
    return TensorStoreServer(server, servicer, host, bound)


class TensorStoreClient:
    """Client of a TensorStore server. Every call has a deadline.

    Args:
        address: ``host:port``.
        deadline: default seconds per call (:data:`DEFAULT_DEADLINE`); each method
            also takes ``timeout=`` to override it.

    Methods raise :class:`TransportError` subclasses for RPC failures and
    :class:`WireError` for tensors that fail the checks.
    """

    def __init__(self, address: str, *, deadline: float = DEFAULT_DEADLINE,
                 options: Sequence[tuple[str, Any]] | None = None):
        self.address = address
        self.deadline = deadline
        self.channel = create_channel(address, options=options)
        self.stub = tensor_pb2_grpc.TensorStoreStub(self.channel)
        # Put again, with a serializer that passes encode_frames() output through: the
        # generated stub would insist on TensorChunk messages (three copies per chunk).
        self._put_frames = self.channel.stream_unary(
            method_path("TensorStore", "Put"), request_serializer=serialize_frame,
            response_deserializer=tensor_pb2.PutReply.FromString)
        # Get, leaving the chunks serialized: decode_chunks() splits them without copies.
        self._get_frames = self.channel.unary_stream(
            method_path("TensorStore", "Get"),
            request_serializer=tensor_pb2.GetRequest.SerializeToString,
            response_deserializer=None)

    def _call(self, method: str, request: Any, timeout: float | None,
              consume: Callable[[Any], Any] | None = None,
              callable_: Callable[..., Any] | None = None) -> Any:
        return call_rpc(callable_ or getattr(self.stub, method), request,
                        address=self.address,
                        method=f"TensorStore.{method}",
                        timeout=self.deadline if timeout is None else timeout,
                        consume=consume)

    def put(self, key: str, array: Any, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES,
            timeout: float | None = None) -> int:
        """Stream ``array`` to the store under ``key``; return the bytes stored."""
        frames = encode_frames(array, key, chunk_bytes)
        return self._call("Put", frames, timeout, callable_=self._put_frames).nbytes

    def put_unary(self, key: str, array: Any, *, timeout: float | None = None) -> int:
        """Send ``array`` as one message (slow for large tensors; for comparison)."""
        return self._call("PutUnary", encode_unary(array, key), timeout).nbytes

    def put_shm(self, key: str, array: Any, *, timeout: float | None = None) -> int:
        """Hand ``array`` over through a shared-memory segment (same host only).

        The server unlinks the segment once it has read it; if the call fails, the
        segment is unlinked here, so it never leaks.
        """
        from runtime import shm

        chunk = shm.export_array(array, key)
        try:
            return self._call("Put", iter([chunk]), timeout).nbytes
        except BaseException:
            shm.unlink_segment(chunk.shm.name)  # no-op if the server already took it
            raise

    def get(self, key: str, *, expected_dtype: Any = None,
            expected_shape: Sequence[int | None] | None = None, via_shm: bool = False,
            shm_copy: bool = True, chunk_bytes: int = 0, remove: bool = False,
            timeout: float | None = None) -> np.ndarray:
        """Fetch the tensor stored under ``key``, checked like :func:`decode_chunks`.

        ``via_shm=True`` (same host only) gets it through a shared-memory segment,
        which this process unlinks; ``shm_copy=False`` then returns a view on it
        instead of a copy. Raises :class:`RemoteError` (``NOT_FOUND``) for an
        unknown key.
        """
        request = tensor_pb2.GetRequest(key=key, chunk_bytes=chunk_bytes, via_shm=via_shm,
                                        remove=remove)
        return self._call("Get", request, timeout, callable_=self._get_frames,
                          consume=lambda stream: decode_chunks(
                              stream, expected_dtype, expected_shape, expected_key=key,
                              shm_copy=shm_copy))

    def ping(self, payload: bytes = b"", *, timeout: float | None = None) -> bytes:
        """Round trip of ``payload``; for latency measurements and liveness checks."""
        return self._call("Ping", tensor_pb2.PingRequest(payload=payload), timeout).payload

    def close(self) -> None:
        """Close the channel."""
        self.channel.close()

    def __enter__(self) -> TensorStoreClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _serve_in_child(conn: Any, host: str, port: int, max_workers: int) -> None:
    """Child-process body of :class:`TensorStoreProcess`."""
    server = start_tensor_store(host, port, max_workers=max_workers)
    try:
        conn.send(server.port)
        try:
            conn.recv()  # any message means stop; EOF means the parent is gone
        except EOFError:
            pass
    finally:
        server.stop(grace=None)
        conn.close()


class TensorStoreProcess:
    """A TensorStore server in a child process (``spawn``), for cross-process tests.

    The child stops when :meth:`stop` is called or when this process exits (it
    notices the closed pipe), so no server outlives its test.

    Example::

        >>> with TensorStoreProcess() as proc, TensorStoreClient(proc.address) as c:  # doctest: +SKIP
        ...     c.put("k", np.ones(3))
        24
    """

    def __init__(self, host: str = LOCALHOST, port: int = 0, *, max_workers: int = 8,
                 start_timeout: float = 60.0):
        ctx = multiprocessing.get_context("spawn")  # no fork: grpc does not survive it
        self._conn, child_conn = ctx.Pipe()
        self.process = ctx.Process(target=_serve_in_child, name="tensor-store",
                                   args=(child_conn, host, port, max_workers), daemon=True)
        self.process.start()
        child_conn.close()
        self.host = host
        try:
            if not self._conn.poll(start_timeout):
                raise TimeoutError(f"TensorStore child did not start in {start_timeout}s")
            self.port: int = self._conn.recv()
        except BaseException:
            self.stop()
            raise

    @property
    def address(self) -> str:
        """``host:port`` for :class:`TensorStoreClient`."""
        return f"{self.host}:{self.port}"

    def stop(self, timeout: float = 10.0) -> None:
        """Ask the child to stop and wait; terminate it if it does not."""
        try:
            self._conn.send("stop")
        except (BrokenPipeError, OSError):
            pass
        self.process.join(timeout)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(timeout)
        self._conn.close()

    def __enter__(self) -> TensorStoreProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
