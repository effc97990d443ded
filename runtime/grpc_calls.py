"""gRPC plumbing of the runtime: servers, channels, calls with deadlines, and calls as
messages on long-lived streams.

:func:`create_server` binds ``127.0.0.1`` on an ephemeral port by default (TLS and a
:class:`runtime.call_guard.CallGuard` when given); :func:`create_channel` sets raised
message limits and keepalive (TLS and a token with a :class:`runtime.security.Security`);
:func:`call_rpc` gives every call a deadline (:data:`DEFAULT_DEADLINE`) and
``wait_for_ready=False``, so a dead peer is an error, never a hang, and turns
``grpc.RpcError`` into a :class:`TransportError` subclass. :class:`StreamCaller` sends
calls as messages on bidirectional streams that stay open (the calls on every step's
path), waiting for each answer with its own deadline. Importing :mod:`runtime` first
switches off gRPC core's EventEngine experiments for the process
(:data:`runtime.GRPC_EXPERIMENTS_OFF`) unless ``GRPC_EXPERIMENTS`` is set.

    >>> server, port = create_server()
    >>> port > 0
    True
    >>> server.stop(None).wait()
    True
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent import futures
from typing import Any

import grpc

from runtime import GRPC_EXPERIMENTS_OFF  # noqa: F401 - set before grpc loads
from runtime.call_guard import CLIENT_STREAM_IDLE_SECONDS
from runtime.tensor_codec import WireError

__all__ = [
    "DEFAULT_DEADLINE", "LOCALHOST", "MAX_MESSAGE_BYTES", "MAX_RECEIVE_BYTES",
    "TransportError", "PeerUnavailable", "DeadlineExceeded", "RemoteError", "BindError",
    "channel_options", "server_options", "create_channel", "create_server", "call_rpc",
    "translate_rpc_error", "abort_with", "StreamCaller", "STREAM_LIFETIME",
]

#: Seconds a call may take when the caller gives no ``timeout``. It bounds how long a
#: dead or stuck peer can block us; it is generous enough for a 1 GiB tensor at the
#: slowest rate measured here (one unary message, ~0.3 GB/s) with margin.
DEFAULT_DEADLINE = 10.0

#: Servers bind here unless told otherwise: nothing outside the host can reach them.
LOCALHOST = "127.0.0.1"

#: Largest single message either side accepts. Streamed tensors never come near it;
#: it is raised from gRPC's 4 MiB default so that one-message (unary) transfers of
#: large tensors work too. Protobuf cannot serialize messages of 2 GiB or more.
MAX_MESSAGE_BYTES = (1 << 31) - 1

#: Largest message a server of the runtime takes unless told otherwise (gRPC's receive
#: limit, and a local socket's frame limit). Tensors between tasks travel in chunks of
#: :data:`DEFAULT_CHUNK_BYTES` (or as shared-memory references), so only feeds and
#: fetches, which travel whole in a step's request and answer, come near it: a 64 MiB
#: one fits with room for the message around it. A larger message is refused with
#: ``RESOURCE_EXHAUSTED`` before it is read: a peer cannot make a server hold (and
#: glibc keep) hundreds of MiB with one message.
MAX_RECEIVE_BYTES = 65 << 20


# ---------------------------------------------------------------------------
# Errors

class TransportError(RuntimeError):
    """An RPC failed. Subclasses say why; attributes say where.

    Attributes:
        address: ``host:port`` of the peer.
        method: the RPC, e.g. ``"TensorStore.Put"``.
        code: the ``grpc.StatusCode``.
        details: gRPC's explanation.
        elapsed: seconds from the call to the failure.
    """

    def __init__(self, address: str, method: str, code: grpc.StatusCode | None,
                 details: str, elapsed: float):
        self.address = address
        self.method = method
        self.code = code
        self.details = details
        self.elapsed = elapsed
        code_name = code.name if code is not None else "UNKNOWN"
        super().__init__(f"{method} to {address} failed after {elapsed:.3f}s: "
                         f"{code_name}: {details}")


class PeerUnavailable(TransportError):
    """Nothing answers at the address (refused, reset, or the server went away)."""


class DeadlineExceeded(TransportError):
    """The peer did not answer within the call's deadline."""


class RemoteError(TransportError):
    """The peer answered with an error status (bad tensor, unknown key, a bug...)."""


class BindError(OSError):
    """A server could not bind its address (port taken, bad host)."""


# ---------------------------------------------------------------------------
# gRPC plumbing

_MAX_HTTP2_FRAME = (1 << 24) - 1  # the largest HTTP/2 allows


def channel_options(max_message_bytes: int = MAX_MESSAGE_BYTES) -> list[tuple[str, Any]]:
    """Options for client channels: raised size limits, keepalive, no proxy."""
    return [
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.max_receive_message_length", max_message_bytes),
        # Probe an idle connection every 30 s and drop it if no answer in 10 s, so a
        # peer that vanished without closing its socket is noticed between calls.
        ("grpc.keepalive_time_ms", 30_000),
        ("grpc.keepalive_timeout_ms", 10_000),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
        # HTTP/2 frames up to 16 MiB instead of 16 KiB: fewer frames per 1 MiB chunk;
        # measured 1.1-1.3 -> 1.2-1.7 GB/s for 64 MiB streamed between two processes.
        ("grpc.http2.max_frame_size", _MAX_HTTP2_FRAME),
        # An http_proxy variable in the environment must not reroute cluster traffic.
        ("grpc.enable_http_proxy", 0),
        # Each channel its own connections: by default channels to one address share
        # them, so a channel made anew to a restarted peer (PeerChannels.reset) took
        # over the old one's connection, still in its reconnect backoff, and failed
        # at once ("failed to connect to all addresses") for up to a second.
        ("grpc.use_local_subchannel_pool", 1),
    ]


def server_options(max_receive_bytes: int = MAX_RECEIVE_BYTES) -> list[tuple[str, Any]]:
    """Options for servers: messages up to ``max_receive_bytes`` taken (larger ones are
    refused with ``RESOURCE_EXHAUSTED`` before they are read), any size sent; accept
    the clients' keepalive pings."""
    return [
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", max_receive_bytes),
        ("grpc.http2.max_frame_size", _MAX_HTTP2_FRAME),  # see channel_options
        # Without these the server answers our clients' idle pings with GOAWAY
        # ("too_many_pings") and drops the connection.
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_recv_ping_interval_without_data_ms", 10_000),
        # gRPC sets SO_REUSEPORT by default, which lets a second server bind a port that
        # is already served and silently split the traffic; we want an error instead.
        ("grpc.so_reuseport", 0),
    ]


def create_channel(address: str, *, options: Sequence[tuple[str, Any]] | None = None,
                   security: Any = None) -> grpc.Channel:
    """A channel to ``host:port`` with :func:`channel_options` (or ``options``):
    plaintext, or TLS and a token on every call as ``security`` (a
    :class:`runtime.security.Security`) says.

    Connecting is lazy: an unreachable address shows up as :class:`PeerUnavailable`
    on the first call, within that call's deadline.
    """
    if security is None:
        return grpc.insecure_channel(address, options=list(options or channel_options()))
    from runtime.security import secure_channel
    return secure_channel(address, list(options or channel_options()), security)


def create_server(host: str = LOCALHOST, port: int = 0, *, max_workers: int = 8,
                  options: Sequence[tuple[str, Any]] | None = None,
                  interceptors: Sequence[Any] = (),
                  credentials: grpc.ServerCredentials | None = None,
                  ) -> tuple[grpc.Server, int]:
    """Create a gRPC server bound to ``host:port``; return it (not started) and its port.

    ``port=0`` asks the OS for a free ephemeral port, which is returned. Register the
    servicers, then call ``server.start()``; stop it with ``server.stop(grace)``.
    Binds to ``127.0.0.1`` unless told otherwise. Raises :class:`BindError` if the
    address cannot be bound. ``interceptors``: ``grpc.ServerInterceptor`` s (a
    :class:`runtime.call_guard.CallGuard`); ``credentials``: serve TLS
    (``grpc.ssl_server_credentials``) instead of plaintext.

    Example::

        >>> server, port = create_server()
        >>> port > 0
        True
        >>> server.stop(None).wait()
        True
    """
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers,
                                                    thread_name_prefix="grpc-server"),
                         options=list(options or server_options()),
                         interceptors=list(interceptors) or None)
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        bound = (server.add_secure_port(address, credentials) if credentials is not None
                 else server.add_insecure_port(address))
    except RuntimeError as err:  # grpcio raises RuntimeError("Failed to bind ...")
        server.stop(None)
        raise BindError(f"cannot bind gRPC server to {address}: {err}") from err
    if bound == 0:  # older grpcio returned 0 instead of raising
        server.stop(None)
        raise BindError(f"cannot bind gRPC server to {address}")
    return server, bound


_TRANSPORT_ERRORS: dict[grpc.StatusCode, type[TransportError]] = {
    grpc.StatusCode.UNAVAILABLE: PeerUnavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
}


def translate_rpc_error(err: grpc.RpcError, address: str, method: str,
                        elapsed: float) -> TransportError:
    """The :class:`TransportError` subclass for a ``grpc.RpcError``."""
    code = err.code() if hasattr(err, "code") else None
    details = (err.details() if hasattr(err, "details") else None) or str(err)
    cls = _TRANSPORT_ERRORS.get(code, RemoteError)
    return cls(address, method, code, details, elapsed)


def call_rpc(callable_: Callable[..., Any], request: Any, *, address: str, method: str,
             timeout: float | None = None, consume: Callable[[Any], Any] | None = None,
             ) -> Any:
    """Call a stub method with a deadline, failing fast on a dead peer.

    ``timeout`` defaults to :data:`DEFAULT_DEADLINE`; ``wait_for_ready=False`` makes
    an unreachable peer fail at once with ``UNAVAILABLE`` instead of waiting for it
    to come up. For a server-streaming method pass ``consume``, which is applied to
    the response iterator inside the error translation (the deadline covers the
    whole stream). ``grpc.RpcError`` becomes a :class:`TransportError` subclass;
    other exceptions (e.g. :class:`WireError` from ``consume``) pass through.
    """
    deadline = DEFAULT_DEADLINE if timeout is None else timeout
    start = time.perf_counter()
    try:
        response = callable_(request, timeout=deadline, wait_for_ready=False)
        return consume(response) if consume is not None else response
    except grpc.RpcError as err:
        raise translate_rpc_error(err, address, method,
                                  time.perf_counter() - start) from None


def abort_with(context: grpc.ServicerContext, err: Exception) -> None:
    """Abort the current RPC with a status that matches ``err`` (always raises).

    :class:`WireError` -> ``INVALID_ARGUMENT``, ``KeyError`` -> ``NOT_FOUND``,
    anything else -> ``INTERNAL``. The message reaches the client's
    :class:`RemoteError`.
    """
    if isinstance(err, MemoryError):  # runtime.errors.ResourceExhausted: a bound
        code = grpc.StatusCode.RESOURCE_EXHAUSTED
    elif isinstance(err, WireError):
        code = grpc.StatusCode.INVALID_ARGUMENT
    elif isinstance(err, KeyError):
        code = grpc.StatusCode.NOT_FOUND
    else:
        code = grpc.StatusCode.INTERNAL
    context.abort(code, f"{type(err).__name__}: {err}")


# ---------------------------------------------------------------------------
# Calls as messages on long-lived streams
#
# A gRPC-Python call costs 0.3-0.6 ms of CPU on each side (call set-up, thread handoffs)
# where a message on an open bidirectional stream costs about a third of that (measured
# here), so the calls on every step's path (a client's RunStep, the master's RunGraph)
# travel as messages on streams that stay open between steps. A stream carries one call
# at a time (each request is answered by the next response), so no ids are needed; a
# caller with calls in flight at once gets one stream each from a small pool.

#: Lifetime of a stream's gRPC call. Not a deadline of any step: each message's answer
#: is awaited with that call's own deadline; a dead peer ends the stream at once (its
#: connection breaks) or through keepalive (channel_options).
STREAM_LIFETIME = 24 * 3600.0


class _CallStream:
    """One open stream of a :class:`StreamCaller`, with a reader thread that hands each
    response to the callback of the request in flight."""

    _END = object()

    def __init__(self, caller: "StreamCaller"):
        self._caller = caller
        self._requests: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._callback: Callable | None = None
        self._started = 0.0
        self.ended = False
        self.idle_since = time.monotonic()
        self._call = caller._multicallable(self._request_iter(), timeout=STREAM_LIFETIME,
                                           wait_for_ready=False)
        threading.Thread(target=self._read, daemon=True,
                         name=f"stream {caller.method} {caller.address}").start()

    def _request_iter(self):
        while True:
            item = self._requests.get()
            if item is self._END:
                return
            yield item

    def send(self, request: Any, callback: Callable) -> bool:
        """Send ``request``; ``callback(response, None)`` or ``callback(None,
        TransportError)`` follows once. False if the stream already ended."""
        with self._lock:
            if self.ended:
                return False
            self._callback = callback
            self._started = time.perf_counter()
        self._requests.put(request)
        return True

    def abandon(self, callback: Callable) -> bool:
        """Give up waiting for ``callback``'s answer (its deadline passed): cancel the
        stream so that a late answer cannot be taken for the next request's. False if
        the answer came first (the callback ran or is running)."""
        with self._lock:
            if self._callback is not callback:
                return False
            self._callback = None
        self._call.cancel()
        return True

    def _take(self) -> Callable | None:
        with self._lock:
            callback, self._callback = self._callback, None
            return callback

    def _read(self) -> None:
        error: BaseException | None = None
        try:
            for response in self._call:
                callback = self._take()
                # Back in the pool before the callback runs: it may send the next call.
                self._caller._release(self)
                if callback is not None:
                    callback(response, None)
        except grpc.RpcError as err:
            error = err
        except BaseException as err:  # noqa: BLE001 - this thread must report, not die
            error = err
        with self._lock:
            self.ended = True
            callback, self._callback = self._callback, None
            started = self._started
        self._caller._forget(self)
        if callback is None:
            return
        elapsed = time.perf_counter() - started
        if isinstance(error, grpc.RpcError):
            failure = translate_rpc_error(error, self._caller.address, self._caller.method,
                                          elapsed)
            if failure.code == grpc.StatusCode.CANCELLED:
                # Not by us (abandon took the callback first): the peer went away.
                failure = PeerUnavailable(failure.address, failure.method, failure.code,
                                          failure.details, elapsed)
        else:
            failure = PeerUnavailable(
                self._caller.address, self._caller.method, None,
                f"the stream ended before the answer ({error!r})" if error else
                "the peer closed the stream before the answer", elapsed)
        callback(None, failure)

    def close(self) -> None:
        self._requests.put(self._END)


class _Deadlines:
    """One thread for the process that cancels a :class:`_ReadStream`'s call when the
    answer it waits for passes its deadline (the waiting thread reads the stream
    itself, with no timeout of its own). It sleeps until the earliest deadline in
    force; a call's deadline is later than the one it sleeps for in the usual case
    (calls one after the other with one timeout), so watching a call costs no wake-up."""

    def __init__(self):
        self._cond = threading.Condition()
        self._streams: set = set()
        self._wake = math.inf
        self._thread: threading.Thread | None = None

    def watch(self, stream: "_ReadStream", deadline: float) -> None:
        with self._cond:
            stream.deadline = deadline
            self._streams.add(stream)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="stream deadlines")
                self._thread.start()
            if deadline < self._wake:
                self._wake = deadline
                self._cond.notify()

    def unwatch(self, stream: "_ReadStream") -> bool:
        """Stop watching; False if the deadline passed first (the call was cancelled)."""
        with self._cond:
            stream.deadline = None
            self._streams.discard(stream)
            return not stream.expired

    def _run(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                live = set()
                for stream in self._streams:
                    if stream.deadline is None:
                        continue
                    if stream.deadline <= now:
                        stream.deadline = None
                        stream.expired = True
                        stream.call.cancel()  # the waiting thread wakes with CANCELLED
                    else:
                        live.add(stream)
                self._streams = live
                self._wake = min((st.deadline for st in live), default=math.inf)
                self._cond.wait(None if self._wake == math.inf else self._wake - now)


_DEADLINES = _Deadlines()


class _ReadStream:
    """One open stream of :meth:`StreamCaller.call`: the calling thread sends the
    request and reads the answer itself (no reader thread: one thread handoff fewer on
    the answer's way, as in :meth:`LocalCaller.call`); :data:`_DEADLINES` cancels the
    call if its deadline passes first."""

    _END = object()

    def __init__(self, caller: "StreamCaller"):
        self._requests: queue.SimpleQueue = queue.SimpleQueue()
        self.call = caller._multicallable(iter(self._requests.get, self._END),
                                          timeout=STREAM_LIFETIME, wait_for_ready=False)
        self.deadline: float | None = None
        self.expired = False
        self.ended = False
        self.idle_since = time.monotonic()

    def ask(self, request: Any, deadline: float) -> Any:
        """Send ``request`` and return the next response; raises ``grpc.RpcError``
        (``CANCELLED`` with ``expired`` set when the deadline passed), or
        ``StopIteration`` when the peer closed the stream."""
        _DEADLINES.watch(self, deadline)
        try:
            self._requests.put(request)
            response = next(self.call)
        except BaseException:
            self.ended = True
            _DEADLINES.unwatch(self)
            raise
        if not _DEADLINES.unwatch(self):
            self.ended = True  # cancelled just after the answer came: not reusable
        return response

    def close(self) -> None:
        self.ended = True
        self._requests.put(self._END)


def _stale(stream) -> bool:
    """True when ``stream`` sat idle long enough that its server may be ending it
    (:data:`runtime.call_guard.CLIENT_STREAM_IDLE_SECONDS`): a new one is opened."""
    return time.monotonic() - stream.idle_since > CLIENT_STREAM_IDLE_SECONDS


class StreamCaller:
    """Unary-style calls of one bidirectional-streaming method (``rpc M(stream Req)
    returns (stream Resp)``, answering each request with one response, in order), sent
    as messages on long-lived streams.

    :meth:`call` blocks for the answer with a deadline, reading it in the calling thread
    (its streams have no reader thread); :meth:`call_async` returns at once and calls
    back from the stream's reader thread. Failures are
    :class:`TransportError` subclasses as from :func:`call_rpc`: a dead or unreachable
    peer is :class:`PeerUnavailable` as soon as its stream breaks, a missed deadline
    :class:`DeadlineExceeded` (and that stream is cancelled). Thread-safe.

    Args:
        multicallable: ``channel.stream_stream(...)`` (or a generated stub's attribute).
        address, method: for error messages (``"Worker.RunGraphs"``).
        keep_idle: open streams kept for later calls (more are opened while calls
            overlap, and closed once answered).
    """

    def __init__(self, multicallable, *, address: str, method: str, keep_idle: int = 4):
        self._multicallable = multicallable
        self.address = address
        self.method = method
        self._keep_idle = keep_idle
        self._lock = threading.Lock()
        self._idle: list[_CallStream] = []
        self._open: set = set()
        self._read_idle: list[_ReadStream] = []  # the streams of call()
        self._closed = False

    def open(self) -> None:
        """Open one stream now (connecting ahead of the first call)."""
        with self._lock:
            if self._closed or self._idle:
                return
        self._release(self._new())

    def _new(self) -> _CallStream:
        stream = _CallStream(self)
        with self._lock:
            self._open.add(stream)
        return stream

    def _acquire(self) -> _CallStream:
        with self._lock:
            if self._closed:
                raise PeerUnavailable(self.address, self.method, None, "the channel is closed",
                                      0.0)
            stale = []
            stream = None
            while self._idle:
                candidate = self._idle.pop()
                if candidate.ended:
                    continue
                if _stale(candidate):
                    stale.append(candidate)
                    continue
                stream = candidate
                break
        for old in stale:
            old.close()
        return stream if stream is not None else self._new()

    def _release(self, stream: _CallStream) -> None:
        with self._lock:
            if not stream.ended and not self._closed and len(self._idle) < self._keep_idle:
                stream.idle_since = time.monotonic()
                self._idle.append(stream)
                return
        stream.close()

    def _forget(self, stream: _CallStream) -> None:
        with self._lock:
            self._open.discard(stream)
            if stream in self._idle:
                self._idle.remove(stream)

    def call_async(self, request: Any, callback: Callable, timeout: float = DEFAULT_DEADLINE,
                   ) -> Callable[[], bool]:
        """Send ``request``; ``callback(response, None)`` or ``callback(None, error)``
        runs once, on a reader thread. Returns ``abandon()``: call it when the deadline
        (``timeout`` seconds: the caller waits for it) passed; True means the callback
        will not run (the stream was cancelled)."""
        for _ in range(2):
            try:
                stream = self._acquire()
            except Exception as err:  # noqa: BLE001 - closed (the peer was reset meanwhile)
                callback(None, err if isinstance(err, TransportError) else PeerUnavailable(
                    self.address, self.method, None, f"cannot open a stream: {err}", 0.0))
                return lambda: False
            if stream.send(request, callback):
                return lambda: stream.abandon(callback)
        # A stream that ended between the pool and the send, twice: report as the
        # stream would have.
        callback(None, PeerUnavailable(self.address, self.method, None,
                                       "the stream to the peer keeps ending", 0.0))
        return lambda: False

    def call(self, request: Any, timeout: float) -> Any:
        """Send ``request`` and wait up to ``timeout`` seconds for the answer, read in
        this thread (see :class:`_ReadStream`)."""
        started = time.perf_counter()
        deadline = time.monotonic() + max(0.0, timeout)
        with self._lock:
            if self._closed:
                raise PeerUnavailable(self.address, self.method, None, "the channel is closed",
                                      0.0)
            stream = self._read_idle.pop() if self._read_idle else None
        if stream is not None and _stale(stream):
            stream.close()
            with self._lock:
                self._open.discard(stream)
            stream = None
        if stream is None:
            stream = _ReadStream(self)
            with self._lock:
                self._open.add(stream)
        try:
            response = stream.ask(request, deadline)
        except grpc.RpcError as err:
            elapsed = time.perf_counter() - started
            if stream.expired:
                raise DeadlineExceeded(self.address, self.method,
                                       grpc.StatusCode.DEADLINE_EXCEEDED,
                                       f"no answer within {timeout:.3f} s", elapsed) from None
            failure = translate_rpc_error(err, self.address, self.method, elapsed)
            if failure.code == grpc.StatusCode.CANCELLED:  # not by us: the peer went away
                failure = PeerUnavailable(failure.address, failure.method, failure.code,
                                          failure.details, elapsed)
            raise failure from None
        except StopIteration:
            raise PeerUnavailable(self.address, self.method, None,
                                  "the peer closed the stream before the answer",
                                  time.perf_counter() - started) from None
        finally:
            if stream.ended:
                with self._lock:
                    self._open.discard(stream)
        if not stream.ended:
            with self._lock:
                if not self._closed and len(self._read_idle) < self._keep_idle:
                    stream.idle_since = time.monotonic()
                    self._read_idle.append(stream)
                    stream = None
            if stream is not None:
                stream.close()
                with self._lock:
                    self._open.discard(stream)
        return response

    def close(self) -> None:
        """End the idle streams; the channel's close ends the others."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            read_idle, self._read_idle = self._read_idle, []
        for stream in idle + read_idle:
            stream.close()
