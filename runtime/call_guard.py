"""``CallGuard``: what a server checks on every gRPC call before its handler runs.

A :class:`runtime.server.Server` serves every call on a pool of handler threads, and
each open stream holds one for as long as it stays open. So the guard, a
``grpc.ServerInterceptor``:

1. checks the cluster's shared token (``token``) on every call when one is set: the
   call's ``x-plab-token`` metadata must equal it (compared in constant time), else the
   call ends with ``UNAUTHENTICATED`` before its handler runs;
2. bounds the streams open at once: at most ``max_streams`` in all (the pool keeps the
   rest of its threads for unary calls such as ``CreateSession`` and ``Ping``) and at
   most ``max_streams_per_peer`` from one connection (``context.peer()``); a stream past
   either bound ends with ``RESOURCE_EXHAUSTED`` at once;
3. ends a stream that waited longer than ``stream_idle_seconds`` for its next message
   (``CANCELLED``), which frees its thread. The runtime's own callers retire a stream
   idle for half of :data:`STREAM_IDLE_SECONDS` before they use it again
   (:data:`CLIENT_STREAM_IDLE_SECONDS`), so they never send on one the server is
   about to end.

>>> guard = CallGuard(token="s3cret", max_streams=4)
>>> guard.max_streams, guard.check_token([("x-plab-token", "s3cret")])
(4, True)
>>> guard.check_token([("x-plab-token", "guess")]), guard.check_token(None)
(False, False)
"""

from __future__ import annotations

import hmac
import threading
import time
from typing import Any, Callable, Iterator

import grpc

__all__ = ["CallGuard", "TOKEN_METADATA_KEY", "STREAM_IDLE_SECONDS",
           "CLIENT_STREAM_IDLE_SECONDS", "MAX_STREAMS_PER_PEER", "token_interceptor"]

#: The metadata key that carries the shared token.
TOKEN_METADATA_KEY = "x-plab-token"

#: Seconds a server lets a stream wait for its next message before ending it.
STREAM_IDLE_SECONDS = 120.0

#: Seconds after which the runtime's callers open a new stream rather than reuse an
#: idle one (half the server's bound: a stream in use is never one being ended).
CLIENT_STREAM_IDLE_SECONDS = STREAM_IDLE_SECONDS / 2

#: Streams one connection may hold open at once (a client's concurrent steps, a
#: master's RunGraphs and PushStream streams to a peer, with room to spare).
MAX_STREAMS_PER_PEER = 64


class _WatchedIterator:
    """A stream's request iterator that notes since when its handler waits."""

    __slots__ = ("_it", "waiting_since", "context", "peer")

    def __init__(self, it, context, peer: str):
        self._it = iter(it)
        self.context, self.peer = context, peer
        self.waiting_since: float | None = None

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        self.waiting_since = time.monotonic()
        try:
            return next(self._it)
        finally:
            self.waiting_since = None


class CallGuard(grpc.ServerInterceptor):
    """The checks of the module docstring, for one server.

    Args:
        token: the shared token every call must carry (None: no check).
        max_streams: streams open at once (None: no bound).
        max_streams_per_peer: streams open at once from one connection.
        stream_idle_seconds: how long a stream may wait for its next message.
    """

    def __init__(self, *, token: str | None = None, max_streams: int | None = None,
                 max_streams_per_peer: int = MAX_STREAMS_PER_PEER,
                 stream_idle_seconds: float = STREAM_IDLE_SECONDS):
        if token is not None and not token:
            raise ValueError("the shared token must not be empty")
        self._token = token.encode() if token is not None else None
        self.max_streams = max_streams
        self.max_streams_per_peer = max_streams_per_peer
        self.stream_idle_seconds = stream_idle_seconds
        self._lock = threading.Lock()
        self._streams: dict[int, _WatchedIterator] = {}
        self._per_peer: dict[str, int] = {}
        self._closed = threading.Event()
        self._reaper: threading.Thread | None = None
        self.idle_ended = 0  # streams ended for idling (for tests)

    # -- the token ---------------------------------------------------------------------
    def check_token(self, metadata) -> bool:
        """True when ``metadata`` (pairs) carries the token (always, when none is set)."""
        if self._token is None:
            return True
        for key, value in metadata or ():
            if key == TOKEN_METADATA_KEY:
                given = value.encode() if isinstance(value, str) else bytes(value)
                return hmac.compare_digest(given, self._token)
        return False

    # -- the interceptor -----------------------------------------------------------------
    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        if not self.check_token(handler_call_details.invocation_metadata):
            return _refusing(handler, grpc.StatusCode.UNAUTHENTICATED,
                             "the call lacks the cluster's token")
        if not handler.request_streaming:
            return handler
        make = (grpc.stream_stream_rpc_method_handler if handler.response_streaming
                else grpc.stream_unary_rpc_method_handler)
        behavior = handler.stream_stream if handler.response_streaming else handler.stream_unary
        return make(self._guarded(behavior, handler.response_streaming),
                    request_deserializer=handler.request_deserializer,
                    response_serializer=handler.response_serializer)

    def _guarded(self, behavior: Callable, streaming_answer: bool) -> Callable:
        def admit(request_iterator, context) -> _WatchedIterator:
            peer = context.peer()
            with self._lock:
                if self.max_streams is not None and len(self._streams) >= self.max_streams:
                    why = f"the server holds {len(self._streams)} streams, its most"
                elif self._per_peer.get(peer, 0) >= self.max_streams_per_peer:
                    why = f"{peer} holds {self.max_streams_per_peer} streams, its most"
                else:
                    watched = _WatchedIterator(request_iterator, context, peer)
                    self._streams[id(watched)] = watched
                    self._per_peer[peer] = self._per_peer.get(peer, 0) + 1
                    self._start_reaper()
                    return watched
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, why)

        def leave(watched: _WatchedIterator) -> None:
            with self._lock:
                self._streams.pop(id(watched), None)
                left = self._per_peer.get(watched.peer, 1) - 1
                if left:
                    self._per_peer[watched.peer] = left
                else:
                    self._per_peer.pop(watched.peer, None)

        if streaming_answer:
            def stream_stream(request_iterator, context):
                watched = admit(request_iterator, context)
                try:
                    yield from behavior(watched, context)
                finally:
                    leave(watched)
            return stream_stream

        def stream_unary(request_iterator, context):
            watched = admit(request_iterator, context)
            try:
                return behavior(watched, context)
            finally:
                leave(watched)
        return stream_unary

    # -- idle streams ----------------------------------------------------------------------
    def _start_reaper(self) -> None:
        # Under the lock.
        if self._reaper is None:
            self._reaper = threading.Thread(target=self._reap, daemon=True,
                                            name="idle streams")
            self._reaper.start()

    def _reap(self) -> None:
        period = min(1.0, self.stream_idle_seconds / 4)
        while not self._closed.wait(period):
            now = time.monotonic()
            with self._lock:
                idle = [w for w in self._streams.values()
                        if w.waiting_since is not None
                        and now - w.waiting_since > self.stream_idle_seconds]
            for watched in idle:
                self.idle_ended += 1
                watched.context.cancel()  # its handler's next() ends; its thread is free

    @property
    def open_streams(self) -> int:
        with self._lock:
            return len(self._streams)

    def close(self) -> None:
        """Stop the idle-stream thread."""
        self._closed.set()


def _refusing(handler, code: grpc.StatusCode, details: str):
    """A handler of ``handler``'s kind that ends the call with ``code``."""
    def refuse(request_or_iterator, context):
        context.abort(code, details)

    if handler.request_streaming and handler.response_streaming:
        def refuse_stream(request_iterator, context):
            context.abort(code, details)
            yield  # pragma: no cover - abort raised
        return grpc.stream_stream_rpc_method_handler(
            refuse_stream, handler.request_deserializer, handler.response_serializer)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(
            refuse, handler.request_deserializer, handler.response_serializer)
    if handler.response_streaming:
        def refuse_answers(request, context):
            context.abort(code, details)
            yield  # pragma: no cover - abort raised
        return grpc.unary_stream_rpc_method_handler(
            refuse_answers, handler.request_deserializer, handler.response_serializer)
    return grpc.unary_unary_rpc_method_handler(
        refuse, handler.request_deserializer, handler.response_serializer)


class _TokenInterceptor(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
                        grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
    def __init__(self, token: str):
        self._pair = (TOKEN_METADATA_KEY, token)

    def _details(self, details):
        metadata = list(details.metadata or ()) + [self._pair]
        return _CallDetails(details.method, details.timeout, metadata, details.credentials,
                            getattr(details, "wait_for_ready", None),
                            getattr(details, "compression", None))

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation, details, request):
        return continuation(self._details(details), request)

    def intercept_stream_unary(self, continuation, details, request_iterator):
        return continuation(self._details(details), request_iterator)

    def intercept_stream_stream(self, continuation, details, request_iterator):
        return continuation(self._details(details), request_iterator)


class _CallDetails(grpc.ClientCallDetails):
    def __init__(self, method, timeout, metadata, credentials, wait_for_ready, compression):
        self.method, self.timeout, self.metadata = method, timeout, metadata
        self.credentials, self.wait_for_ready, self.compression = (
            credentials, wait_for_ready, compression)


def token_interceptor(token: str) -> grpc.UnaryUnaryClientInterceptor:
    """A client interceptor that adds ``token`` to every call's metadata
    (``grpc.intercept_channel(channel, token_interceptor(token))``)."""
    return _TokenInterceptor(token)
