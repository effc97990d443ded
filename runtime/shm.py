"""Same-host tensor handoff through POSIX shared memory.

Between two tasks on one host, copying a tensor through a socket is wasteful. The
sender instead copies it into a fresh named segment (``multiprocessing.shared_memory``)
and sends only a small ``ShmRef`` inside a ``TensorChunk``; the receiver maps the
segment, **unlinks it at once**, and copies the tensor out (or keeps a view).

Ownership rule: *the receiver unlinks*. The moment a ``ShmRef`` is sent, the segment
belongs to whoever receives it. :func:`import_array` unlinks the name right after
mapping it, before any check can fail, so a bad or rejected tensor never leaks; the
mapping itself stays valid until it is unmapped (POSIX semantics). A sender whose
RPC failed unlinks the segment itself (:func:`unlink_segment` is a no-op when the
receiver got there first); a server that hands out refs keeps a
:class:`SegmentLedger` and unlinks the unclaimed ones when it shuts down.

Segments are files of :data:`SHM_DIR` mapped with ``mmap`` (:func:`create_segment`),
not ``multiprocessing.shared_memory.SharedMemory``, for two reasons. Its resource
tracker unlinks every segment the process created or attached when it exits (with a
"leaked shared_memory objects" warning): wrong for a segment created in one process
and unlinked in another (the creator's tracker would unlink a segment the receiver
may not have read yet). And its ``close()``, which its ``__del__`` calls too, raises
``BufferError: cannot close exported pointers exist`` while any array still views
the mapping: an array can outlive the code that made it (a frame of a kernel kept by
a reference cycle until the garbage collector runs: numba's compiler leaves such
cycles when it compiles in the middle of a step), so whoever lets a mapping go calls
:func:`release_mapping`: unmapped now if nothing uses it, else when the last array
over it goes (the array's base chain holds the ``mmap``).

Segments are named ``plab_<pid>_<random>`` (:data:`SEGMENT_PREFIX`) so that leaks
are easy to spot: ``ls /dev/shm/plab_*``, or :func:`list_segments`.

Linux only (segments are read through :data:`SHM_DIR`); :func:`shm_available` says
whether this host supports it.

Example::

    >>> import numpy as np
    >>> chunk = export_array(np.arange(4.0), key="k")
    >>> chunk.shm.nbytes
    32
    >>> import_array(chunk).tolist()
    [0.0, 1.0, 2.0, 3.0]
"""

from __future__ import annotations

import mmap
import os
import secrets
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np

from runtime.protos import tensor_pb2
from runtime.tensor_codec import WireError, as_wire_array, check_meta, make_meta

__all__ = ["SHM_DIR", "SEGMENT_PREFIX", "ShmError", "SegmentLedger", "shm_available",
           "export_array", "import_array", "create_segment", "release_mapping",
           "unlink_segment", "list_segments"]

#: Where Linux exposes POSIX shared-memory segments as files.
SHM_DIR = Path("/dev/shm")

#: Prefix of every segment this module creates.
SEGMENT_PREFIX = "plab_"


class ShmError(WireError):
    """A shared-memory handoff failed: segment missing, too small, or malformed ref."""


def shm_available() -> bool:
    """True where segments can be handed over (Linux with a ``/dev/shm``)."""
    return sys.platform.startswith("linux") and SHM_DIR.is_dir()


def list_segments(prefix: str = SEGMENT_PREFIX) -> list[str]:
    """Names of the segments on this host that start with ``prefix``, sorted."""
    if not SHM_DIR.is_dir():
        return []
    return sorted(p.name for p in SHM_DIR.iterdir() if p.name.startswith(prefix))


def unlink_segment(name: str) -> bool:
    """Unlink segment ``name``; return False if it was already gone."""
    try:
        os.unlink(SHM_DIR / name)
    except FileNotFoundError:
        return False
    return True


class SegmentLedger:
    """Names of segments this process exported and a receiver may not have claimed.

    A server that answers with ``ShmRef`` cannot tell whether the client received it;
    if the client died, the segment would stay in ``/dev/shm`` until reboot. The
    ledger remembers every exported name, and :meth:`unlink_all` (at shutdown)
    removes whichever are still there. Thread-safe.
    """

    def __init__(self) -> None:
        self._names: set[str] = set()
        self._lock = threading.Lock()

    def record(self, name: str) -> None:
        with self._lock:
            self._names.add(name)

    def discard(self, name: str) -> None:
        with self._lock:
            self._names.discard(name)

    def __len__(self) -> int:
        with self._lock:
            return len(self._names)

    def unlink_all(self) -> int:
        """Unlink every recorded segment still present; return how many were."""
        with self._lock:
            names, self._names = self._names, set()
        return sum(unlink_segment(name) for name in names)


def create_segment(name: str, size: int) -> mmap.mmap:
    """Create segment ``name`` of ``size`` (> 0) bytes, zeroed, and map it read-write.

    Raises ``FileExistsError`` if the name is taken, ``OSError`` if ``/dev/shm`` is full.
    Nothing unlinks it but :func:`unlink_segment` (no resource tracker hears of it); let
    the mapping go with :func:`release_mapping`.
    """
    fd = os.open(SHM_DIR / name, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.ftruncate(fd, size)
        return mmap.mmap(fd, size)
    except BaseException:
        unlink_segment(name)
        raise
    finally:
        os.close(fd)


def release_mapping(mapping: mmap.mmap) -> None:
    """Let a segment's mapping go: unmapped now when nothing uses it; else, arrays still
    viewing it (each holds it through its base chain), when the last of them goes.
    Never raises (``mmap.close()`` refuses, with ``BufferError``, while arrays view it)."""
    try:
        mapping.close()
    except BufferError:
        pass


def export_array(array: Any, key: str = "", *, ledger: SegmentLedger | None = None,
                 ) -> tensor_pb2.TensorChunk:
    """Copy ``array`` into a new segment; return the one ``TensorChunk`` to send.

    The chunk carries ``key``, the ``TensorMeta`` and a ``ShmRef``; send it like any
    chunk stream (``iter([chunk])``). From then on the receiver owns the segment. If
    the send fails, call :func:`unlink_segment` with ``chunk.shm.name``. With a
    ``ledger``, the name is recorded there too.

    Raises :class:`WireError` for a dtype off the whitelist, ``OSError`` if
    ``/dev/shm`` is full.
    """
    arr = as_wire_array(array, key)
    nbytes = arr.nbytes
    name = f"{SEGMENT_PREFIX}{os.getpid()}_{secrets.token_hex(8)}"
    # A segment cannot be empty; an empty tensor gets one unused byte.
    mapping = create_segment(name, max(nbytes, 1))
    try:
        if nbytes:
            np.copyto(np.frombuffer(mapping, dtype=np.uint8, count=nbytes),
                      arr.reshape(-1).view(np.uint8))
    except BaseException:
        unlink_segment(name)  # first: it cannot fail
        raise
    finally:
        # Unmap here; the segment lives on until the receiver unlinks it.
        release_mapping(mapping)
    if ledger is not None:
        ledger.record(name)
    return tensor_pb2.TensorChunk(key=key, meta=make_meta(arr), offset=0,
                                  shm=tensor_pb2.ShmRef(name=name, offset=0, nbytes=nbytes))


def _map_and_unlink(name: str, key: str) -> mmap.mmap:
    """Map segment ``name`` read-write and unlink its name (the mapping stays valid)."""
    if "/" in name or not name or name in (".", ".."):
        raise ShmError(key, "shm", f"bad segment name {name!r}")
    path = SHM_DIR / name
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        raise ShmError(key, "shm", f"segment {name!r} does not exist (already taken, "
                       "or the sender is on another host)") from None
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            raise ShmError(key, "shm", f"segment {name!r} is empty")
        return mmap.mmap(fd, size)
    finally:
        os.close(fd)
        unlink_segment(name)


def import_array(chunk: tensor_pb2.TensorChunk, *, copy: bool = True) -> np.ndarray:
    """Read the tensor a ``ShmRef`` chunk points to, and unlink its segment.

    The segment's name is unlinked first, whatever happens next, so it never leaks.
    The chunk's ``TensorMeta`` is checked as in :func:`runtime.wire.check_meta`, and
    the ref must lie inside the segment.

    Args:
        chunk: a ``TensorChunk`` whose payload is ``shm`` (from :func:`export_array`).
        copy: True (default) returns an ordinary array and unmaps the segment at
            once. False returns a writable array that *is* the mapping, saving one
            copy: the memory stays mapped for as long as that array, or any view of
            it, is alive, and is freed when the last one is garbage-collected. Use it
            for large tensors consumed right away.

    Usually called through :func:`runtime.wire.decode_chunks`, which also checks
    ``expected_dtype`` / ``expected_shape``.
    """
    key = chunk.key
    if chunk.WhichOneof("payload") != "shm":
        raise ShmError(key, "shm", "chunk carries no ShmRef")
    ref = chunk.shm
    mapping = _map_and_unlink(ref.name, key)
    try:
        if not chunk.HasField("meta"):
            raise ShmError(key, "meta", "shared-memory chunk carries no TensorMeta")
        dtype, shape = check_meta(chunk.meta, key)
        if ref.nbytes != chunk.meta.nbytes:
            raise ShmError(key, "nbytes", "ShmRef size differs from TensorMeta",
                           expected=chunk.meta.nbytes, got=ref.nbytes)
        if ref.offset < 0 or ref.offset + ref.nbytes > len(mapping):
            raise ShmError(key, "shm", f"ref [{ref.offset}, +{ref.nbytes}) lies outside "
                           f"segment {ref.name!r} of {len(mapping)} bytes")
        view = np.frombuffer(mapping, dtype=np.uint8, count=ref.nbytes,
                             offset=ref.offset).view(dtype).reshape(shape)
    except BaseException:
        mapping.close()
        raise
    if not copy:
        # The array's base chain holds the mmap; it is unmapped when the array dies.
        return view
    result = view.copy()
    del view  # drop the export so the mapping can be closed now
    mapping.close()
    return result
