"""Tensors as bytes: the runtime's message codec (no gRPC here).

:func:`encode_chunks` turns a numpy array into a stream of ``TensorChunk`` messages
(``runtime/protos/tensor.proto``): the first carries the rendezvous key and a
``TensorMeta`` (dtype, shape, byte count), each carries its byte offset and about
:data:`DEFAULT_CHUNK_BYTES` of raw little-endian bytes (:func:`encode_frames`: the
same, serialized). Streaming chunks avoids gRPC's message limits and is several times
faster than one large message. :func:`decode_chunks` / :func:`decode_keyed` assemble a
stream into one preallocated buffer and check everything on arrival (dtype from
:data:`WIRE_DTYPES`, shape, byte counts, order, key), raising :class:`WireError`.
Nothing is ever pickled. A chunk whose payload is a ``ShmRef`` (same-host shared
memory, :mod:`runtime.shm`) is accepted by :func:`decode_chunks` transparently.

Rendezvous keys name a tensor in flight: ``"src_device;tensor;dst_device;step_id"``
(:func:`rendezvous_key`, :func:`parse_rendezvous_key`).

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
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np

from runtime.protos import tensor_pb2

__all__ = [
    "DEFAULT_CHUNK_BYTES", "WIRE_DTYPES", "WireError",
    "RendezvousKey", "rendezvous_key", "parse_rendezvous_key", "wire_dtype",
    "as_wire_array", "make_meta", "check_meta", "encode_chunks", "encode_frames",
    "encode_unary", "serialize_frame", "decode_chunks", "decode_keyed", "split_frame",
]

#: Bytes of tensor data per streamed chunk. About 1 MiB is the sweet spot measured on
#: this machine: much smaller and per-message overhead dominates, much larger and
#: gRPC's flow control and copies make it slower (see experiments/bench_wire.py).
DEFAULT_CHUNK_BYTES = 1 << 20

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


def wire_dtype(dtype: Any, key: str) -> np.dtype:
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
    wire = wire_dtype(arr.dtype, key)
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
        want = wire_dtype(expected_dtype, key)
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
