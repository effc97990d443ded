"""Tensors on the wire: chunked encoding, checked decoding, gRPC plumbing.

This is the transport layer that the master and worker services build on. It has
four parts:

1. **Encoding.** :func:`encode_chunks` turns a numpy array into a stream of
   ``TensorChunk`` messages (``runtime/protos/tensor.proto``): the first carries the
   rendezvous key and a ``TensorMeta`` (dtype, shape, byte count), each carries its
   byte offset and about :data:`DEFAULT_CHUNK_BYTES` of raw little-endian bytes.
   Streaming chunks avoids gRPC's 4 MiB message limit and is several times faster
   than one large message. :func:`decode_chunks` assembles a stream into one
   preallocated buffer and checks everything on arrival, raising :class:`WireError`.
   Nothing is ever pickled.
2. **gRPC plumbing.** :func:`create_server` binds to ``127.0.0.1`` on an ephemeral
   port by default; :func:`create_channel` sets raised message limits and keepalive;
   :func:`call_rpc` gives every call a deadline (:data:`DEFAULT_DEADLINE`) and
   ``wait_for_ready=False``, so a dead peer is an error, never a hang, and turns
   ``grpc.RpcError`` into a :class:`TransportError` subclass. :class:`StreamCaller`
   sends calls as messages on bidirectional streams that stay open (the calls on
   every step's path), waiting for each answer with its own deadline. Importing this
   module first switches off gRPC core's EventEngine experiments for the process
   (:data:`GRPC_EXPERIMENTS_OFF`; one thread handoff fewer per message) unless
   ``GRPC_EXPERIMENTS`` is set.
3. **Local transport** between processes of one host, over Unix sockets named after
   the server's address: :class:`LocalPushListener`/:class:`LocalPushSender` carry
   pushed ``TensorChunk`` frames, :class:`LocalCallListener`/:class:`LocalCaller` the
   step-path calls (the same protobuf messages, with :class:`StreamCaller`'s interface,
   falling back to it where no server of this host listens).
4. **TensorStore**, a tiny demo service (key -> tensor) used by the tests and by
   ``experiments/bench_wire.py``: :class:`TensorStoreServicer`,
   :class:`TensorStoreClient`, :func:`start_tensor_store` (in this process) and
   :class:`TensorStoreProcess` (in a child process). The worker service copies its
   patterns: decode with :func:`decode_keyed` in the servicer, abort with
   :func:`abort_with` on :class:`WireError`, call through :func:`call_rpc`.

Same-host handoff through shared memory lives in :mod:`runtime.shm`; a chunk whose
payload is a ``ShmRef`` is accepted by :func:`decode_chunks` transparently.

Example::

    >>> import numpy as np
    >>> x = np.arange(6, dtype=np.float32).reshape(2, 3)
    >>> chunks = list(encode_chunks(x, key="a;x:0;b;1", chunk_bytes=8))
    >>> len(chunks), chunks[0].meta.dtype, list(chunks[0].meta.shape)
    (3, 'float32', [2, 3])
    >>> np.array_equal(decode_chunks(chunks, expected_dtype="float32"), x)
    True
"""

from __future__ import annotations

import math
import multiprocessing
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent import futures
from typing import Any, NamedTuple

#: gRPC core experiments switched off in the processes that load gRPC through this
#: module (the servers, their clients), unless ``GRPC_EXPERIMENTS`` is set already (set
#: it, even empty, to keep gRPC's own defaults). With these on, gRPC 1.85 moves every
#: socket event of the synchronous stack through its EventEngine's thread pool: one
#: more thread handoff per message each way. Measured on the 2-core test machine (3
#: runs each way): a message round trip on an open stream between two processes
#: 240 -> 165 us median, the client's CPU per round trip 150 -> 95 us, its context
#: switches 15 -> 6; in the gRPC-only tiny step the context switches of the four
#: processes drop by ~10-25% (their CPU and the step's time moved within the noise of
#: a busy host). Large streamed tensors were not slower. gRPC reads it when it loads,
#: so it is set before ``import grpc`` (and is inherited by the server processes
#: started here).
GRPC_EXPERIMENTS_OFF = ("-event_engine_client,-event_engine_listener,"
                        "-event_engine_for_all_other_endpoints")
os.environ.setdefault("GRPC_EXPERIMENTS", GRPC_EXPERIMENTS_OFF)

import grpc  # noqa: E402 - after GRPC_EXPERIMENTS
import numpy as np

from runtime.protos import tensor_pb2, tensor_pb2_grpc

__all__ = [
    "DEFAULT_CHUNK_BYTES", "DEFAULT_DEADLINE", "LOCALHOST", "MAX_MESSAGE_BYTES", "WIRE_DTYPES",
    "MAX_RECEIVE_BYTES", "MAX_LOCAL_FRAME_BYTES", "MAX_LOCAL_CONNECTIONS", "same_user",
    "WireError", "TransportError", "PeerUnavailable", "DeadlineExceeded", "RemoteError",
    "BindError",
    "RendezvousKey", "rendezvous_key", "parse_rendezvous_key",
    "as_wire_array", "make_meta", "check_meta", "encode_chunks", "encode_frames",
    "encode_unary", "serialize_frame",
    "decode_chunks", "decode_keyed", "split_frame",
    "channel_options", "server_options", "create_channel", "create_server", "call_rpc",
    "translate_rpc_error", "abort_with", "StreamCaller", "STREAM_LIFETIME",
    "GRPC_EXPERIMENTS_OFF",
    "LocalCallListener", "LocalCaller", "local_call_name",
    "method_path", "add_tensor_store_to_server",
    "TensorStoreServicer", "TensorStoreServer", "TensorStoreClient", "TensorStoreProcess",
    "start_tensor_store",
]

# ---------------------------------------------------------------------------
# Constants

#: Bytes of tensor data per streamed chunk. About 1 MiB is the sweet spot measured on
#: this machine: much smaller and per-message overhead dominates, much larger and
#: gRPC's flow control and copies make it slower (see experiments/bench_wire.py).
DEFAULT_CHUNK_BYTES = 1 << 20

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

#: Element types that may cross the wire, by numpy name. Bytes are little-endian.
WIRE_DTYPES: dict[str, np.dtype] = {
    name: np.dtype(name).newbyteorder("<")
    for name in ("float16", "float32", "float64", "int8", "int16", "int32", "int64",
                 "uint8", "bool")
}


# ---------------------------------------------------------------------------
# Errors

class WireError(ValueError):
    """A tensor could not be encoded, or what arrived is not what was announced/expected.

    Attributes:
        key: the rendezvous key of the tensor ("" when unknown).
        what: which property failed: ``"dtype"``, ``"shape"``, ``"nbytes"``,
            ``"order"``, ``"meta"``, ``"key"``, ``"chunks"`` or ``"shm"``.
        expected, got: the two sides of a mismatch (``None`` when not a mismatch).
    """

    def __init__(self, key: str, what: str, detail: str, *, expected: Any = None,
                 got: Any = None):
        self.key = key
        self.what = what
        self.detail = detail
        self.expected = expected
        self.got = got
        message = f"tensor {key!r}: {what}: {detail}"
        if expected is not None or got is not None:
            message += f" (expected {expected!r}, got {got!r})"
        super().__init__(message)


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
# Rendezvous keys

class RendezvousKey(NamedTuple):
    """The parts of a key naming one tensor in flight for one step."""

    src_device: str
    tensor_name: str
    dst_device: str
    step_id: int


def rendezvous_key(src_device: str, tensor_name: str, dst_device: str, step_id: int) -> str:
    """Build the key ``"src_device;tensor_name;dst_device;step_id"``.

    Modelled on TensorFlow's rendezvous keys: a tensor is sent once per (tensor,
    destination device, step), so the key names all three plus the source.

    >>> rendezvous_key("/job:ps/task:0/device:CPU:0", "w:0", "/job:worker/task:1/device:CPU:0", 7)
    '/job:ps/task:0/device:CPU:0;w:0;/job:worker/task:1/device:CPU:0;7'
    """
    parts = (src_device, tensor_name, dst_device)
    for part in parts:
        if ";" in part or not part:
            raise ValueError(f"rendezvous key parts must be non-empty without ';': {parts!r}")
    if int(step_id) < 0:
        raise ValueError(f"step_id must be >= 0, got {step_id!r}")
    return f"{src_device};{tensor_name};{dst_device};{int(step_id)}"


def parse_rendezvous_key(key: str) -> RendezvousKey:
    """Split a key made by :func:`rendezvous_key`; raise ``ValueError`` otherwise.

    >>> parse_rendezvous_key("/cpu:0;x:0;/cpu:1;3").step_id
    3
    """
    parts = key.split(";")
    if len(parts) != 4 or not all(parts[:3]) or not parts[3].isdigit():
        raise ValueError(f"not a rendezvous key 'src;tensor;dst;step': {key!r}")
    return RendezvousKey(parts[0], parts[1], parts[2], int(parts[3]))


# ---------------------------------------------------------------------------
# Encoding

#: Wire dtype by numpy dtype, for the common case (numpy's ``dtype.name`` is slow
#: enough to matter on every small tensor of a step).
_WIRE_BY_DTYPE: dict[np.dtype, np.dtype] = {d: d for d in WIRE_DTYPES.values()}
_WIRE_BY_DTYPE.update({np.dtype(name): d for name, d in WIRE_DTYPES.items()})
_DTYPE_NAMES: dict[np.dtype, str] = {d: name for name, d in WIRE_DTYPES.items()}


def _wire_dtype(dtype: Any, key: str) -> np.dtype:
    """Map a dtype-like (numpy dtype, name, scalar type, ``core.dtypes.DType``) to its
    little-endian wire dtype, or raise WireError if it is not on the whitelist."""
    if isinstance(dtype, np.dtype):
        wire = _WIRE_BY_DTYPE.get(dtype)
        if wire is not None:
            return wire
    try:
        name = np.dtype(getattr(dtype, "np", dtype)).name  # core DType keeps numpy in .np
    except TypeError:
        name = str(dtype)
    if name not in WIRE_DTYPES:
        raise WireError(key, "dtype", f"{name!r} cannot cross the wire; allowed: "
                        f"{sorted(WIRE_DTYPES)}")
    return WIRE_DTYPES[name]


def as_wire_array(array: Any, key: str = "") -> np.ndarray:
    """Return ``array`` as a C-contiguous little-endian ndarray of a wire dtype.

    No copy when it already is one (the usual case); a copy for strided views or
    big-endian data. Raises :class:`WireError` for dtypes off the whitelist.
    """
    arr = np.asarray(array)
    wire = _wire_dtype(arr.dtype, key)
    if arr.dtype == wire and arr.flags.c_contiguous:  # the usual case: as it is
        return arr
    # astype(copy=False) copies only when needed; it is what turns big-endian input
    # into the little-endian wire layout. (Not np.ascontiguousarray: it makes a 0-d
    # array 1-d.)
    arr = arr.astype(wire, copy=False)
    return arr if arr.flags.c_contiguous else arr.copy(order="C")


def make_meta(array: np.ndarray) -> tensor_pb2.TensorMeta:
    """The ``TensorMeta`` announcing ``array`` (already passed through :func:`as_wire_array`)."""
    return tensor_pb2.TensorMeta(dtype=_DTYPE_NAMES.get(array.dtype) or array.dtype.name,
                                 shape=array.shape, nbytes=array.nbytes)


def _byte_view(array: np.ndarray) -> memoryview:
    """Flat unsigned-byte memoryview over a C-contiguous array (no copy; 0-d too)."""
    return memoryview(array.reshape(-1).view(np.uint8))


def encode_chunks(array: Any, key: str = "", chunk_bytes: int = DEFAULT_CHUNK_BYTES,
                  ) -> Iterator[tensor_pb2.TensorChunk]:
    """Encode ``array`` as a stream of ``TensorChunk`` messages.

    The array is checked and laid out (:func:`as_wire_array`) when this is called, so
    a bad dtype raises :class:`WireError` here rather than inside gRPC's sending
    thread. The returned iterator slices the array's memory lazily: do not modify the
    array until the stream has been consumed. At least one chunk is produced, even
    for an empty tensor; only the first carries ``key`` and ``meta``.

    Each chunk's bytes are copied once out of the array (protobuf's ``bytes`` field
    does not accept a memoryview), so peak extra memory is one chunk, not the tensor.

    Args:
        array: anything ``np.asarray`` accepts, of a dtype in :data:`WIRE_DTYPES`.
        key: rendezvous key, see :func:`rendezvous_key`.
        chunk_bytes: payload bytes per chunk (the last may be shorter).

    Example::

        >>> [len(c.data) for c in encode_chunks(np.zeros(5, np.int16), chunk_bytes=4)]
        [4, 4, 2]
    """
    if chunk_bytes < 1:
        raise ValueError(f"chunk_bytes must be >= 1, got {chunk_bytes}")
    arr = as_wire_array(array, key)
    meta = make_meta(arr)
    return _iter_chunks(_byte_view(arr), key, meta, int(chunk_bytes))


def _iter_chunks(flat: memoryview, key: str, meta: tensor_pb2.TensorMeta,
                 chunk_bytes: int) -> Iterator[tensor_pb2.TensorChunk]:
    total = len(flat)
    yield tensor_pb2.TensorChunk(key=key, meta=meta, offset=0,
                                 data=bytes(flat[:chunk_bytes]))
    for start in range(chunk_bytes, total, chunk_bytes):
        yield tensor_pb2.TensorChunk(offset=start, data=bytes(flat[start:start + chunk_bytes]))


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        bits = value & 0x7F
        value >>= 7
        if value:
            out.append(bits | 0x80)
        else:
            out.append(bits)
            return bytes(out)


# Wire tag of TensorChunk.data: field 4, length-delimited (4 << 3 | 2).
_DATA_TAG = b"\x22"


def encode_frames(array: Any, key: str = "", chunk_bytes: int = DEFAULT_CHUNK_BYTES,
                  ) -> Iterator[bytes]:
    """Like :func:`encode_chunks`, but yield each chunk already serialized.

    Frame *i* is byte-for-byte ``list(encode_chunks(...))[i].SerializeToString()``
    (protobuf writes fields in field-number order and ``data`` is the last field),
    built with one copy of the payload instead of three: the small header fields go
    through protobuf, the data slice is appended straight from the array's memory.
    This is what makes streaming faster than ~1 GB/s on this machine. Send frames
    through a multicallable whose request serializer passes bytes through (see
    :func:`serialize_frame`).

    Example::

        >>> x = np.arange(3, dtype=np.int32)
        >>> list(encode_frames(x, "k", 8)) == [
        ...     c.SerializeToString() for c in encode_chunks(x, "k", 8)]
        True
    """
    if chunk_bytes < 1:
        raise ValueError(f"chunk_bytes must be >= 1, got {chunk_bytes}")
    arr = as_wire_array(array, key)
    meta = make_meta(arr)
    return _iter_frames(_byte_view(arr), key, meta, int(chunk_bytes))


def _iter_frames(flat: memoryview, key: str, meta: tensor_pb2.TensorMeta,
                 chunk_bytes: int) -> Iterator[bytes]:
    total = len(flat)
    start = 0
    while True:
        piece = flat[start:start + chunk_bytes]
        if start == 0:
            head = tensor_pb2.TensorChunk(key=key, meta=meta).SerializeToString()
        else:
            head = tensor_pb2.TensorChunk(offset=start).SerializeToString()
        # join copies the slice once, straight from the array's memory.
        yield b"".join((head, _DATA_TAG, _varint(len(piece)), piece))
        start += chunk_bytes
        if start >= total:
            return


def serialize_frame(message: Any) -> bytes:
    """gRPC serializer accepting both protobuf messages and pre-serialized frames.

    Use it as ``request_serializer`` / ``response_serializer`` for methods that
    carry ``TensorChunk`` streams, so that :func:`encode_frames` output (bytes) and
    ordinary messages (e.g. a ``ShmRef`` chunk) can travel on the same method.
    """
    return message if isinstance(message, bytes) else message.SerializeToString()


def encode_unary(array: Any, key: str = "") -> tensor_pb2.TensorChunk:
    """Encode ``array`` as one ``TensorChunk`` holding all its bytes.

    Only for small tensors or for comparison: a single large message is slow (see
    ``experiments/bench_wire.py``) and needs raised message-size limits.
    """
    arr = as_wire_array(array, key)
    return tensor_pb2.TensorChunk(key=key, meta=make_meta(arr), offset=0,
                                  data=_byte_view(arr).tobytes())


# ---------------------------------------------------------------------------
# Decoding

def check_meta(meta: tensor_pb2.TensorMeta, key: str = "", expected_dtype: Any = None,
               expected_shape: Sequence[int | None] | None = None,
               ) -> tuple[np.dtype, tuple[int, ...]]:
    """Validate a ``TensorMeta`` on its own and against what the receiver expects.

    ``expected_shape`` may hold ``None`` for a dimension the receiver does not know
    (a partial shape, as in TensorFlow). Returns the wire dtype and the shape.
    Raises :class:`WireError` naming the key and what mismatched.
    """
    if meta.dtype not in WIRE_DTYPES:
        raise WireError(key, "dtype", "announced dtype is not on the whitelist",
                        expected=sorted(WIRE_DTYPES), got=meta.dtype)
    dtype = WIRE_DTYPES[meta.dtype]
    shape = tuple(int(d) for d in meta.shape)
    if any(d < 0 for d in shape):
        raise WireError(key, "shape", "negative dimension", got=shape)
    if expected_dtype is not None:
        want = _wire_dtype(expected_dtype, key)
        if want != dtype:
            raise WireError(key, "dtype", "dtype differs from the expected one",
                            expected=want.name, got=dtype.name)
    if expected_shape is not None:
        want_shape = tuple(expected_shape)
        if len(want_shape) != len(shape) or any(
                w is not None and w != -1 and int(w) != d for w, d in zip(want_shape, shape)):
            raise WireError(key, "shape", "shape differs from the expected one",
                            expected=want_shape, got=shape)
    nbytes = math.prod(shape) * dtype.itemsize
    if meta.nbytes != nbytes:
        raise WireError(key, "nbytes", "announced byte count does not match dtype and shape",
                        expected=nbytes, got=meta.nbytes)
    return dtype, shape


def _read_varint(buf: memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while pos < len(buf) and shift < 64:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
    raise ValueError("truncated or overlong varint")


def split_frame(frame: bytes | memoryview, key: str = "",
                ) -> tuple[tensor_pb2.TensorChunk, memoryview]:
    """Parse a serialized ``TensorChunk`` without copying its ``data``.

    Returns the chunk with every field but ``data`` (parsed by protobuf) and a
    memoryview of the ``data`` bytes inside ``frame``. Protobuf's own parser would
    copy the payload twice (into its arena, then into a ``bytes`` on access); on a
    1 MiB chunk that is most of the receiver's work. Accepts any valid encoding
    (fields in any order); raises :class:`WireError` for a malformed frame.
    """
    view = memoryview(frame).cast("B")
    header_spans: list[memoryview] = []
    data: memoryview = view[0:0]
    has_data = False
    pos = 0
    try:
        while pos < len(view):
            start = pos
            tag, pos = _read_varint(view, pos)
            wire_type = tag & 7
            if wire_type == 0:
                _, pos = _read_varint(view, pos)
            elif wire_type == 1:
                pos += 8
            elif wire_type == 5:
                pos += 4
            elif wire_type == 2:
                length, pos = _read_varint(view, pos)
                if tag >> 3 == 4:  # TensorChunk.data
                    if pos + length > len(view):
                        raise ValueError("data runs past the end of the frame")
                    data, has_data = view[pos:pos + length], True
                    pos += length
                    continue
                pos += length
            else:
                raise ValueError(f"unsupported wire type {wire_type}")
            if pos > len(view):
                raise ValueError("field runs past the end of the frame")
            header_spans.append(view[start:pos])
        header = tensor_pb2.TensorChunk.FromString(b"".join(header_spans))
    except Exception as err:  # ValueError from us, DecodeError from protobuf
        raise WireError(key, "chunks", f"malformed TensorChunk frame: {err}") from None
    if has_data and header.WhichOneof("payload") == "shm":
        raise WireError(key, "shm", "frame carries both data and a ShmRef")
    return header, data


def _header_and_data(chunk: Any, key: str) -> tuple[tensor_pb2.TensorChunk, Any]:
    if isinstance(chunk, (bytes, bytearray, memoryview)):
        return split_frame(chunk, key)
    return chunk, chunk.data


def decode_keyed(chunks: Iterable[tensor_pb2.TensorChunk], expected_dtype: Any = None,
                 expected_shape: Sequence[int | None] | None = None, *,
                 expected_key: str | None = None, shm_copy: bool = True,
                 ) -> tuple[str, np.ndarray]:
    """Like :func:`decode_chunks`, but also return the key the first chunk carried."""
    it = iter(chunks)
    item = next(it, None)
    label = expected_key or ""
    if item is None:
        raise WireError(label, "chunks", "stream ended before the first chunk")
    first, data = _header_and_data(item, label)
    key = first.key
    if first.WhichOneof("payload") == "shm":
        # Import (which unlinks the segment) before any check can fail, so a rejected
        # tensor does not leave its segment behind.
        from runtime import shm  # shm imports this module; import late to avoid a cycle
        array = shm.import_array(first, copy=shm_copy)
    if expected_key is not None and key != expected_key:
        raise WireError(key, "key", "first chunk names another tensor",
                        expected=expected_key, got=key)
    if not first.HasField("meta"):
        raise WireError(key, "meta", "first chunk carries no TensorMeta")
    dtype, shape = check_meta(first.meta, key, expected_dtype, expected_shape)
    nbytes = first.meta.nbytes
    if first.WhichOneof("payload") == "shm":
        if next(it, None) is not None:
            raise WireError(key, "chunks", "a shared-memory tensor must be a single chunk")
        return key, array

    # One buffer for the whole tensor; every chunk is copied straight into place.
    buffer = np.empty(nbytes, dtype=np.uint8)
    received = 0
    chunk = first
    index = 0
    while True:
        if index:
            if chunk.HasField("meta"):
                raise WireError(key, "meta", f"chunk {index} carries a second TensorMeta")
            if chunk.key and chunk.key != key:
                raise WireError(key, "key", f"chunk {index} names another tensor",
                                expected=key, got=chunk.key)
            if chunk.WhichOneof("payload") == "shm":
                raise WireError(key, "shm", f"chunk {index} is a ShmRef inside a byte stream")
        if chunk.offset != received:
            raise WireError(key, "order", f"chunk {index} is out of order or a chunk was lost",
                            expected=received, got=chunk.offset)
        end = received + len(data)
        if end > nbytes:
            raise WireError(key, "nbytes", f"chunk {index} overruns the announced size",
                            expected=nbytes, got=end)
        buffer[received:end] = np.frombuffer(data, dtype=np.uint8)
        received = end
        index += 1
        item = next(it, None)
        if item is None:
            break
        chunk, data = _header_and_data(item, key)
    if received != nbytes:
        raise WireError(key, "nbytes", "stream ended early", expected=nbytes, got=received)
    return key, buffer.view(dtype).reshape(shape)


def decode_chunks(chunks: Iterable[tensor_pb2.TensorChunk], expected_dtype: Any = None,
                  expected_shape: Sequence[int | None] | None = None, *,
                  expected_key: str | None = None, shm_copy: bool = True) -> np.ndarray:
    """Assemble a stream of ``TensorChunk`` messages into one array, checking it.

    Items may be messages or their serialized bytes (frames, as a gRPC method
    registered with no deserializer delivers them); frames are parsed by
    :func:`split_frame`, which saves two copies of every payload.

    Checks: a ``TensorMeta`` on the first chunk only; its dtype on the whitelist and
    equal to ``expected_dtype``; its shape equal to ``expected_shape`` (``None`` for an
    unknown dimension); byte count consistent with dtype and shape; chunks in order
    (each ``offset`` equals the bytes received so far); no more and no fewer bytes
    than announced; the key unchanged, and equal to ``expected_key`` if given.
    Any failure raises :class:`WireError` naming the key and what mismatched.

    A single chunk carrying a ``ShmRef`` is read from shared memory (and the segment
    unlinked) by :func:`runtime.shm.import_array`; ``shm_copy=False`` returns a view
    on the mapping instead of a copy (see there for its lifetime).

    The result is a fresh, writable, native-layout array owned by the caller.
    """
    return decode_keyed(chunks, expected_dtype, expected_shape,
                        expected_key=expected_key, shm_copy=shm_copy)[1]


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
                   ) -> grpc.Channel:
    """An insecure channel to ``host:port`` with :func:`channel_options` (or ``options``).

    Connecting is lazy: an unreachable address shows up as :class:`PeerUnavailable`
    on the first call, within that call's deadline.
    """
    return grpc.insecure_channel(address, options=list(options or channel_options()))


def create_server(host: str = LOCALHOST, port: int = 0, *, max_workers: int = 8,
                  options: Sequence[tuple[str, Any]] | None = None,
                  ) -> tuple[grpc.Server, int]:
    """Create a gRPC server bound to ``host:port``; return it (not started) and its port.

    ``port=0`` asks the OS for a free ephemeral port, which is returned. Register the
    servicers, then call ``server.start()``; stop it with ``server.stop(grace)``.
    Binds to ``127.0.0.1`` unless told otherwise. Raises :class:`BindError` if the
    address cannot be bound.

    Example::

        >>> server, port = create_server()
        >>> port > 0
        True
        >>> server.stop(None).wait()
        True
    """
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers,
                                                    thread_name_prefix="grpc-server"),
                         options=list(options or server_options()))
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        bound = server.add_insecure_port(address)
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
    if isinstance(err, WireError):
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
            while self._idle:
                stream = self._idle.pop()
                if not stream.ended:
                    return stream
        return self._new()

    def _release(self, stream: _CallStream) -> None:
        with self._lock:
            if not stream.ended and not self._closed and len(self._idle) < self._keep_idle:
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
