"""The local transport: calls and pushed tensors between processes of one host over
Unix sockets named after the server's gRPC address.

:class:`LocalPushListener` / :class:`LocalPushSender` carry pushed ``TensorChunk``
frames; :class:`LocalCallListener` / :class:`LocalCaller` the step-path calls (the same
protobuf messages, with :class:`runtime.grpc_calls.StreamCaller`'s interface, falling
back to it where no server of this host listens). A frame is an 8-byte little-endian
length and its bytes. A listener takes only processes of its own user
(:func:`same_user`), at most ``max_connections`` at once and frames of at most
``max_frame_bytes``, whose buffer grows as the bytes arrive.

>>> local_call_name("127.0.0.1:2222")[1:]
'placement-lab-call/127.0.0.1:2222'
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

import grpc

from runtime.grpc_calls import (DEFAULT_DEADLINE, MAX_RECEIVE_BYTES, DeadlineExceeded,
                                PeerUnavailable, StreamCaller, TransportError)

__all__ = ["MAX_LOCAL_FRAME_BYTES", "MAX_LOCAL_CONNECTIONS", "LOCAL_SOCKET_BUFFER",
           "LOCAL_RETRY_SECONDS", "peer_uid", "same_user", "local_push_name",
           "local_call_name", "LocalPushListener", "LocalPushSender", "LocalCallListener",
           "LocalCaller"]

# ---------------------------------------------------------------------------
# Local pushes: frames between tasks of one host over a Unix socket
#
# A small tensor pushed through gRPC-Python costs several thread handoffs on each side
# (the stream's request-consumer thread, the server's polling and handler threads),
# measured ~0.2 ms of CPU per message. Between tasks of one host the same frames go
# over a Unix socket instead: the sender writes from its own thread, one reader thread
# per connection delivers. Each task listens on an abstract socket named after its
# gRPC address (unique on the host: only one server can bind that address).

_FRAME_LENGTH_BYTES = 8

#: Largest frame a local listener takes unless told otherwise (a server passes its
#: ``max_receive_bytes``): a longer announced length closes the connection.
MAX_LOCAL_FRAME_BYTES = MAX_RECEIVE_BYTES

#: Connections a local listener holds at once unless told otherwise; beyond it a new
#: connection is closed at once (each holds a reader thread).
MAX_LOCAL_CONNECTIONS = 64

#: Bytes a frame's buffer starts at; it doubles as the bytes arrive, so the memory a
#: peer makes us hold is at most twice what it sent, never what it announced.
_FIRST_PIECE_BYTES = 1 << 20

#: Socket buffer bytes asked for on local connections (the kernel caps it at its
#: ``net.core.wmem_max``/``rmem_max``). With the default ~200 KiB a 4 MiB answer (an MLP's
#: fetched output) crosses in ~20 pieces, each waking the reader and then the writer.
LOCAL_SOCKET_BUFFER = 4 << 20


def _unix_socket():
    """A Unix stream socket with :data:`LOCAL_SOCKET_BUFFER`-sized buffers."""
    import socket

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    _widen(sock)
    return sock


def _widen(sock) -> None:
    import socket

    for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        try:
            sock.setsockopt(socket.SOL_SOCKET, option, LOCAL_SOCKET_BUFFER)
        except OSError:  # not allowed here: the default size works too, only slower
            pass


def peer_uid(sock) -> int | None:
    """The user id of the process at the other end of Unix socket ``sock`` (Linux's
    ``SO_PEERCRED``); None where the platform does not say."""
    import socket
    import struct

    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return None
    try:
        _pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, option,
                                                              struct.calcsize("3i")))
    except OSError:
        return None
    return uid


def same_user(sock) -> bool:
    """True when the peer of ``sock`` runs as this process's user. Abstract Unix
    sockets carry no file permissions, so this check is what keeps other local users
    out (and, on the connecting side, what tells a squatter of the name from our
    server)."""
    uid = peer_uid(sock)
    return uid is None or uid == os.getuid()


def _connect_local(name: str, timeout: float = 2.0):
    """A connected Unix socket to ``name``, whose listener runs as this user; raises
    ``PermissionError`` (an ``OSError``: treated as no listener) when it does not."""
    sock = _unix_socket()
    sock.settimeout(timeout)
    try:
        sock.connect(name)
        if not same_user(sock):
            raise PermissionError(f"the local socket {name[1:]!r} belongs to another user")
    except OSError:
        sock.close()
        raise
    sock.settimeout(None)
    return sock


def local_push_name(address: str) -> str:
    """The abstract Unix socket name of the task serving ``address`` (Linux)."""
    return "\0placement-lab-push/" + address


def _close_listening(sock) -> None:
    """Close a listening socket so that its name is free at once: a thread blocked in
    ``accept`` keeps the socket (and its name) alive past a plain close; a shutdown
    wakes it first (a server restarted in the same process binds the name again)."""
    import socket

    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


class _UnixListener:
    """A Unix-socket server for processes of this host: accepts connections at
    ``path`` and reads length-prefixed frames on one thread per connection, handing
    each to :meth:`_handle` in order.  A connection ends on EOF, an error, a frame
    longer than ``max_frame_bytes``, or a frame ``_handle`` refuses (it raised, or
    returned False). Only processes of this user may connect (:func:`same_user`), at
    most ``max_connections`` at once; a frame's buffer grows as its bytes arrive."""

    _kind = "local"

    def __init__(self, path: str, *, max_frame_bytes: int = MAX_LOCAL_FRAME_BYTES,
                 max_connections: int = MAX_LOCAL_CONNECTIONS):
        import socket

        self.max_frame_bytes = max_frame_bytes
        self.max_connections = max_connections
        self.refused = 0  # connections refused (another user, too many): for tests
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._sock.bind(path)
            self._sock.listen(64)
        except OSError:
            self._sock.close()
            raise
        self._conns: set = set()
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name=f"{self._kind} accept").start()

    def _handle(self, conn, frame: memoryview) -> bool:
        raise NotImplementedError

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:  # closed
                return
            with self._lock:
                if self._closed:
                    conn.close()
                    return
                if len(self._conns) >= self.max_connections or not same_user(conn):
                    self.refused += 1
                    conn.close()
                    continue
                self._conns.add(conn)
            _widen(conn)
            threading.Thread(target=self._read, args=(conn,), daemon=True,
                             name=f"{self._kind} read").start()

    def _read(self, conn) -> None:
        try:
            while True:
                head = _recv_exact(conn, _FRAME_LENGTH_BYTES)
                if head is None:
                    return
                length = int.from_bytes(head, "little")
                if length > self.max_frame_bytes:
                    return  # refused before a byte of it is held
                frame = _recv_exact(conn, length)
                if frame is None or self._handle(conn, frame) is False:
                    return
        except Exception:  # noqa: BLE001 - a broken or bad connection: drop it
            return
        finally:
            with self._lock:
                self._conns.discard(conn)
            conn.close()

    def close(self) -> None:
        import socket

        with self._lock:
            self._closed = True
            conns, self._conns = list(self._conns), set()
        _close_listening(self._sock)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class LocalPushListener(_UnixListener):
    """Accepts local push connections; ``deliver(frame)`` gets every frame (a
    ``memoryview``), on the connection's reader thread, in the order sent. A connection
    ends on EOF, an error, or a frame that ``deliver`` refuses (it raised)."""

    _kind = "local-push"

    def __init__(self, address: str, deliver: Callable[[memoryview], None], **limits):
        self._deliver = deliver
        super().__init__(local_push_name(address), **limits)

    def _handle(self, conn, frame: memoryview) -> bool:
        self._deliver(frame)
        return True


def _recv_exact(conn, n: int) -> memoryview | None:
    """``n`` bytes from ``conn``; None at EOF before the first byte. Raises
    ``ConnectionError`` on EOF in the middle. The buffer starts at
    :data:`_FIRST_PIECE_BYTES` and doubles as it fills: a peer that announces much and
    sends little holds little of our memory."""
    buf = bytearray(min(n, _FIRST_PIECE_BYTES))
    view = memoryview(buf)
    got = 0
    while got < n:
        if got == len(buf):
            grown = bytearray(min(n, 2 * len(buf)))
            grown[:got] = view
            view.release()
            buf = grown
            view = memoryview(buf)
        k = conn.recv_into(view[got:])
        if k == 0:
            if got == 0:
                return None
            raise ConnectionError("the connection ended in the middle of a frame")
        got += k
    return view


class LocalPushSender:
    """One connection to a :class:`LocalPushListener`. :meth:`send` writes a frame from
    the calling thread when the socket takes it at once (the usual case), else queues
    the rest for a writer thread, so a sender never blocks on a busy receiver (two
    tasks' reader threads pushing to each other could otherwise deadlock). Raises
    ``ConnectionError`` once the connection broke (the peer died)."""

    def __init__(self, address: str, timeout: float = 2.0):
        self._sock = _connect_local(local_push_name(address), timeout)
        self._lock = threading.Lock()
        self._backlog: list = []
        self._writing = False  # the writer thread owns the socket until the backlog drained
        self.error: BaseException | None = None

    def send(self, frame: bytes) -> None:
        import socket

        data = len(frame).to_bytes(_FRAME_LENGTH_BYTES, "little") + frame
        with self._lock:
            if self.error is not None:
                raise ConnectionError(f"the local push connection broke: {self.error}")
            if self._writing:
                self._backlog.append(data)
                return
            try:
                sent = self._sock.send(data, socket.MSG_DONTWAIT)
            except BlockingIOError:
                sent = 0
            except OSError as err:
                self.error = err
                raise ConnectionError(f"the local push connection broke: {err}") from None
            if sent == len(data):
                return
            self._backlog.append(memoryview(data)[sent:])
            self._writing = True
        threading.Thread(target=self._drain, daemon=True, name="local-push write").start()

    def _drain(self) -> None:
        while True:
            with self._lock:
                if not self._backlog or self.error is not None:
                    self._writing = False
                    return
                data = self._backlog.pop(0)
            try:
                self._sock.sendall(data)
            except OSError as err:
                with self._lock:
                    self.error = err
                    self._backlog.clear()
                    self._writing = False
                return

    def close(self) -> None:
        with self._lock:
            if self.error is None:
                self.error = ConnectionError("closed")
        self._sock.close()


# ---------------------------------------------------------------------------
# Local calls: the hot-path calls between processes of one host over a Unix socket
#
# Even as messages on an open stream, a gRPC-Python call costs ~0.1-0.2 ms of CPU on
# each side in thread handoffs (the stream's request-consumer thread, the polling
# threads, the handler thread), several times a step's own work on small graphs. The
# calls on every step's path (a client's RunStep, the master's RunGraph) therefore go
# to a server of the same host over a Unix socket when it listens on one: the same
# protobuf messages, one call in flight per connection, answered in order on the
# connection's own thread. Anything else, and every call to another host, is gRPC.

def local_call_name(address: str) -> str:
    """The abstract Unix socket name on which the server of ``address`` takes local
    calls (Linux). Only a process of this host can serve that name for that address,
    so a successful connection is also the same-host test."""
    return "\0placement-lab-call/" + address


def _send_all(sock, data: bytes, deadline: float) -> None:
    """Write ``data`` before ``deadline`` (``time.monotonic()``), never blocking past it
    (a stopped peer that does not read must not hang the caller)."""
    import select
    import socket

    view = memoryview(data)
    while view:
        try:
            sent = sock.send(view, socket.MSG_DONTWAIT)
        except BlockingIOError:
            sent = 0
        view = view[sent:]
        if view:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([], [sock], [], remaining)[1]:
                raise TimeoutError("the peer did not take the request before the deadline")


def _recv_frame(sock, deadline: float) -> memoryview | None:
    """One length-prefixed frame from ``sock`` before ``deadline``; None at EOF before
    it. Raises TimeoutError past the deadline, ConnectionError on EOF inside it."""
    sock.settimeout(max(1e-3, deadline - time.monotonic()))
    head = _recv_exact(sock, _FRAME_LENGTH_BYTES)
    if head is None:
        return None
    sock.settimeout(max(1e-3, deadline - time.monotonic()))
    frame = _recv_exact(sock, int.from_bytes(head, "little"))
    if frame is None:
        raise ConnectionError("the connection ended inside a frame")
    return frame


class LocalCallListener(_UnixListener):
    """Takes calls from processes of this host on :func:`local_call_name` of
    ``address``. A request frame is an 8-byte little-endian length, one byte giving
    the length of the method name, the method name (``"Worker.RunGraph"``) and the
    serialized request; the answer is an 8-byte length and the serialized response of
    ``handlers[method](request_bytes)``, which runs on the connection's thread (so a
    connection carries one call at a time). An unknown method or a handler that raises
    closes the connection (the caller sees the peer gone)."""

    _kind = "local-call"

    def __init__(self, address: str, handlers: dict[str, Callable[[memoryview], bytes]],
                 **limits):
        self._handlers = handlers
        super().__init__(local_call_name(address), **limits)

    def _handle(self, conn, frame: memoryview) -> bool:
        name_end = 1 + frame[0]
        handler = self._handlers.get(bytes(frame[1:name_end]).decode("ascii", "replace"))
        if handler is None:
            return False
        answer = handler(frame[name_end:])
        head = len(answer).to_bytes(_FRAME_LENGTH_BYTES, "little")
        if len(answer) < 1 << 16:
            conn.sendall(head + answer)  # one write
        else:  # two writes rather than a copy of a large answer (a fetched tensor)
            conn.sendall(head)
            conn.sendall(answer)
        return True


class _LocalConnection:
    """One connection of a :class:`LocalCaller`, with a reader thread that hands each
    answer to the callback of the call in flight."""

    def __init__(self, caller: "LocalCaller"):
        self._caller = caller
        self._sock = _connect_local(local_call_name(caller.address))
        self._lock = threading.Lock()
        self._callback: Callable | None = None
        self._started = 0.0
        self.ended = False
        threading.Thread(target=self._read, daemon=True,
                         name=f"local-call {caller.method} {caller.address}").start()

    def send(self, frame: bytes, callback: Callable, deadline: float) -> bool:
        """Send a request frame; False if the connection already ended."""
        with self._lock:
            if self.ended:
                return False
            self._callback = callback
            self._started = time.perf_counter()
        try:
            _send_all(self._sock, frame, deadline)
        except OSError:  # the peer is gone (or stopped reading): the reader says so
            self._break()
        return True

    def abandon(self, callback: Callable) -> bool:
        """Give up ``callback``'s answer (deadline): close the connection so a late
        answer cannot be taken for the next call's. False if the answer came first."""
        with self._lock:
            if self._callback is not callback:
                return False
            self._callback = None
        self._break()
        return True

    def _break(self) -> None:
        import socket

        try:
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes the reader: it reports
        except OSError:
            pass

    def _read(self) -> None:
        error: BaseException | None = None
        try:
            while True:
                head = _recv_exact(self._sock, _FRAME_LENGTH_BYTES)
                if head is None:
                    break
                frame = _recv_exact(self._sock, int.from_bytes(head, "little"))
                if frame is None:
                    break
                with self._lock:
                    callback, self._callback = self._callback, None
                response = self._caller._deserialize(frame)
                # Back in the pool before the callback runs: it may make the next call.
                self._caller._release(self)
                if callback is not None:
                    callback(response, None)
        except Exception as err:  # noqa: BLE001 - this thread must report, not die
            error = err
        with self._lock:
            self.ended = True
            callback, self._callback = self._callback, None
            started = self._started
        self._caller._forget(self)
        self._sock.close()
        if callback is not None:
            callback(None, PeerUnavailable(
                self._caller.address, self._caller.method, None,
                f"the local connection ended before the answer"
                f"{f' ({error})' if error else ''} (the peer died or restarted?)",
                time.perf_counter() - started))

    def close(self) -> None:
        with self._lock:
            idle = self._callback is None
        if idle:
            self._break()


#: Seconds a :class:`LocalCaller` that found no local listener sends its calls by gRPC
#: before it tries to connect again (a server of another host, or one that takes no
#: local calls: trying on every call cost a socket, a failed connect and a serialized
#: request thrown away, three times per step of the gRPC-only tiny step).
LOCAL_RETRY_SECONDS = 1.0


class LocalCaller(StreamCaller):
    """:class:`StreamCaller`'s calls over :class:`LocalCallListener` connections to a
    server of this host, falling back to ``fallback`` (the gRPC stream caller) when
    none listens (another host, a platform without abstract sockets, a server that is
    not up: then gRPC's own error names the peer). Once no listener answered, calls
    go straight to ``fallback`` for :data:`LOCAL_RETRY_SECONDS`."""

    def __init__(self, address: str, method: str, response_deserializer, fallback: StreamCaller,
                 *, keep_idle: int = 4):
        super().__init__(None, address=address, method=method, keep_idle=keep_idle)
        self._deserialize = response_deserializer
        self._method_bytes = method.encode("ascii")
        self.fallback = fallback
        self._blocking_idle: list = []  # connections of call(), read by the caller
        self._remote_until = 0.0  # time.monotonic() until which calls go by gRPC

    def _by_grpc(self) -> bool:
        """True while no local listener is expected (see :data:`LOCAL_RETRY_SECONDS`)."""
        return time.monotonic() < self._remote_until

    def _no_listener(self) -> None:
        self._remote_until = time.monotonic() + LOCAL_RETRY_SECONDS

    def open(self) -> None:
        pass  # connections open on the first call

    def _new(self) -> _LocalConnection:
        conn = _LocalConnection(self)
        with self._lock:
            self._open.add(conn)
        return conn

    def _frame(self, request: Any) -> bytes:
        payload = request.SerializeToString()
        return b"".join((
            (1 + len(self._method_bytes) + len(payload)).to_bytes(_FRAME_LENGTH_BYTES, "little"),
            bytes((len(self._method_bytes),)), self._method_bytes, payload))

    def call(self, request: Any, timeout: float) -> Any:
        """Like :meth:`StreamCaller.call`, but the calling thread reads the answer
        itself, on a connection of its own kind (no reader thread: one thread handoff
        fewer on each call, which shows on a busy host)."""
        if self._by_grpc():
            return self.fallback.call(request, timeout)
        started = time.perf_counter()
        deadline = time.monotonic() + timeout
        frame = None
        for _ in range(2):
            try:
                sock = self._acquire_blocking()
            except OSError:  # nothing of this host listens: gRPC
                self._no_listener()
                return self.fallback.call(request, timeout)
            if frame is None:
                frame = self._frame(request)
            try:
                _send_all(sock, frame, deadline)
            except (BrokenPipeError, ConnectionResetError):
                sock.close()  # an idle connection to a server that has gone: a new one
                continue
            except OSError as err:
                sock.close()
                raise self._failure(err, started) from None
            try:
                answer = _recv_frame(sock, deadline)
            except OSError as err:
                sock.close()
                raise self._failure(err, started) from None
            if answer is None:
                sock.close()
                raise self._failure(ConnectionError("the connection ended before the answer"),
                                    started)
            self._release_blocking(sock)
            return self._deserialize(answer)
        raise PeerUnavailable(self.address, self.method, None,
                              "the local connection to the peer keeps ending",
                              time.perf_counter() - started)

    def _failure(self, err: OSError, started: float) -> TransportError:
        elapsed = time.perf_counter() - started
        if isinstance(err, TimeoutError):  # a closed connection: no late answer is taken
            return DeadlineExceeded(self.address, self.method, grpc.StatusCode.DEADLINE_EXCEEDED,
                                    "no answer before the deadline", elapsed)
        return PeerUnavailable(self.address, self.method, None,
                               f"the local connection failed ({err}): the peer died?", elapsed)

    def _acquire_blocking(self):
        with self._lock:
            if self._closed:
                raise PeerUnavailable(self.address, self.method, None, "the caller is closed",
                                      0.0)
            if self._blocking_idle:
                return self._blocking_idle.pop()
        return _connect_local(local_call_name(self.address))

    def _release_blocking(self, sock) -> None:
        with self._lock:
            if not self._closed and len(self._blocking_idle) < self._keep_idle:
                self._blocking_idle.append(sock)
                return
        sock.close()

    def call_async(self, request: Any, callback: Callable, timeout: float = DEFAULT_DEADLINE,
                   ) -> Callable[[], bool]:
        if self._by_grpc():
            return self.fallback.call_async(request, callback, timeout)
        deadline = time.monotonic() + timeout
        frame = None
        for _ in range(2):
            try:
                conn = self._acquire()
            except OSError:  # nothing of this host listens: gRPC
                self._no_listener()
                return self.fallback.call_async(request, callback, timeout)
            except TransportError as err:  # closed (the peer was reset meanwhile)
                callback(None, err)
                return lambda: False
            if frame is None:
                frame = self._frame(request)
            if conn.send(frame, callback, deadline):
                return lambda: conn.abandon(callback)
        callback(None, PeerUnavailable(self.address, self.method, None,
                                       "the local connection to the peer keeps ending", 0.0))
        return lambda: False

    def close(self) -> None:
        super().close()
        with self._lock:
            idle, self._blocking_idle = self._blocking_idle, []
        for sock in idle:
            sock.close()
        self.fallback.close()
