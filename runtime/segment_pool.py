"""Memory reused for large tensors between tasks: the shared-memory pool production uses.

Fresh memory is expensive: the first touch of a large tensor's new pages costs more than
copying it. So large tensors move through memory reused from step to step:

- :class:`SegmentPool`: a sender's pooled shared-memory segments (``plabpool_<pid>_*``,
  :data:`POOL_PREFIX`). To a task of the same host the sender copies a tensor into one
  (the one copy: the tensor may be a variable's live buffer) and pushes only a
  reference; the receiver uses the tensor in place, without a copy, and marks the
  segment free (a flag in its first byte, :data:`SEGMENT_HEADER`) once nothing refers to
  the tensor any more; the sender reuses only segments so marked. A receiver that dies
  leaves its segments marked: they are never reused, and unlinked when the pool holds
  too many or closes.
- :class:`SegmentMaps`: a receiver's mappings of other processes' segments, and
  :class:`BufferPool`: receive buffers of tensors that arrive as bytes.
- :func:`decode_pooled`: a pushed tensor (frames, or a segment's reference) decoded
  into those, with every check of :func:`runtime.wire.decode_keyed`.
- :func:`reap_orphans`: unlink the segments of processes that are gone (a server killed
  with SIGKILL cannot unlink its own); servers call it when they start and stop, and
  :class:`runtime.launcher.LocalCluster` when it restarts or stops a task.

(:mod:`runtime.shm`'s single-use "receiver unlinks" handoff is the TensorStore demo's.)

>>> pool = SegmentPool()
>>> segment = pool.acquire(1000)
>>> segment.name.startswith(POOL_PREFIX), segment.size >= 1000 + SEGMENT_HEADER
(True, True)
>>> pool.close()
"""

from __future__ import annotations

import functools
import os
import secrets
import threading
from typing import Any

import numpy as np

from runtime import wire

__all__ = ["POOL_PREFIX", "SEGMENT_HEADER", "PooledSegment", "SegmentPool", "BufferPool",
           "SegmentMaps", "decode_pooled", "reap_orphans", "owner_pid"]

#: Name prefix of pooled segments (runtime.shm's single-use ones start with "plab_").
POOL_PREFIX = "plabpool_"

#: Bytes before the tensor in a pooled segment. Byte 0 is 1 from the moment the sender
#: hands the tensor over until the receiver no longer refers to it.
SEGMENT_HEADER = 64


class PooledSegment:
    """A segment of a :class:`SegmentPool`: ``name``, ``size`` and ``buf``, its mapping
    (an ``mmap``: ``buf[0]`` is the flag, the tensor follows :data:`SEGMENT_HEADER`)."""

    __slots__ = ("name", "size", "buf")

    def __init__(self, name: str, size: int, buf):
        self.name, self.size, self.buf = name, size, buf

    def __repr__(self) -> str:
        return f"<PooledSegment {self.name} size={self.size}>"


class SegmentPool:
    """Shared-memory segments of this process, reused for same-host pushes.

    The sender owns them (it unlinks them in :meth:`close`); receivers map them by name
    and keep the mapping. An array of this process over a segment's mapping (the master's
    offer of a fetched tensor's memory to its kernel) may outlive the pool's use of it:
    letting a segment go unlinks its name at once and unmaps it once no array views it
    (:func:`runtime.shm.release_mapping`). Thread-safe.
    """

    def __init__(self, keep: int = 4):
        self._lock = threading.Lock()
        self._free: dict[int, list] = {}
        self._all: list = []
        self._keep = keep

    def acquire(self, nbytes: int):
        """A segment with room for ``nbytes`` after :data:`SEGMENT_HEADER` that no
        receiver holds (its flag clear); the caller sets the flag when it hands it over,
        and gives it back with :meth:`release` in any case."""
        from runtime.shm import create_segment

        # Whole MiB: fewer size classes.
        size = -(-(nbytes + SEGMENT_HEADER) // (1 << 20)) * (1 << 20)
        with self._lock:
            free = self._free.get(size, ())
            for i, segment in enumerate(free):
                if segment.buf[0] == 0:  # the last receiver let go of it
                    return free.pop(i)
        name = f"{POOL_PREFIX}{os.getpid()}_{secrets.token_hex(6)}"
        segment = PooledSegment(name, size, create_segment(name, size))
        with self._lock:
            self._all.append(segment)
        return segment

    def release(self, segment) -> None:
        """Back to the pool (reused once its receiver let go). Beyond ``keep`` of a
        size, the oldest one its receiver let go of is unlinked.  One still held (its
        flag set) stays: its receiver may not have opened it by name yet (a push just
        sent), and unlinking it then would lose the tensor; :meth:`close` unlinks
        whatever is left."""
        with self._lock:
            free = self._free.setdefault(segment.size, [])
            free.append(segment)
            if len(free) <= self._keep:
                return
            done = next((s for s in free if s.buf[0] == 0), None)
            if done is None:
                return
            free.remove(done)
            self._all.remove(done)
        _destroy(done)

    def discard(self, segment) -> None:
        """Let ``segment`` (acquired from this pool) go instead of releasing it: never
        reused, whatever its flag says (a kernel of a failed step may still be writing
        into it)."""
        with self._lock:
            free = self._free.get(segment.size, [])
            if segment in free:
                free.remove(segment)
            if segment not in self._all:
                return
            self._all.remove(segment)
        _destroy(segment)

    def close(self) -> None:
        with self._lock:
            segments, self._all, self._free = self._all, [], {}
        for segment in segments:
            _destroy(segment)


def _destroy(segment: PooledSegment) -> None:
    """Unlink ``segment``'s name, and unmap it once no array of this process views it."""
    from runtime.shm import release_mapping, unlink_segment
    unlink_segment(segment.name)
    release_mapping(segment.buf)


class BufferPool:
    """Receive buffers reused from step to step (fresh 64 MiB costs more in page faults
    than the copy into it). :meth:`acquire` lends a buffer out as an array whose views
    all keep it as their ``base``; the buffer comes back to the pool when the last of
    them is gone, like :meth:`SegmentMaps.lease`."""

    def __init__(self, keep: int = 4):
        self._lock = threading.Lock()
        self._free: dict[int, list[np.ndarray]] = {}
        self._keep = keep

    def acquire(self, nbytes: int) -> np.ndarray:
        """A writable uint8 array of ``nbytes``, reused if one is free."""
        import weakref

        with self._lock:
            free = self._free.get(nbytes)
            buf = free.pop() if free else None
        if buf is None:
            buf = np.empty(nbytes, np.uint8)
        # Through a memoryview: views of `lent` then keep `lent` itself as their base
        # (numpy would collapse them onto `buf`), so its finalizer waits for all of them.
        lent = np.frombuffer(memoryview(buf), np.uint8)
        weakref.finalize(lent, self._give_back, buf)
        return lent

    def _give_back(self, buf: np.ndarray) -> None:
        with self._lock:
            free = self._free.setdefault(buf.nbytes, [])
            if len(free) < self._keep:
                free.append(buf)


class SegmentMaps:
    """Mappings of other processes' pooled segments, opened once by name (at most
    ``keep`` of them: beyond that, mappings nothing refers to are closed, e.g. those of
    segments a sender has since unlinked, which would hold their memory otherwise)."""

    def __init__(self, keep: int = 16):
        self._lock = threading.Lock()
        self._maps: dict[str, Any] = {}
        self._keep = keep

    def lease(self, name: str, offset: int, nbytes: int, key: str) -> np.ndarray:
        """The tensor bytes of a pooled segment in place (no copy); the segment's flag
        is cleared, handing it back to its sender, once the array and every view of it
        are gone (views of it keep it as their ``base``)."""
        import weakref

        if offset < SEGMENT_HEADER:
            raise wire.WireError(key, "shm", f"ref offset {offset} lies in the segment header")
        mapping = self._mapping(name, offset, nbytes, key)
        array = np.frombuffer(mapping, np.uint8, count=nbytes, offset=offset)
        weakref.finalize(array, _release_segment, mapping)
        return array

    def view(self, name: str, offset: int, nbytes: int, key: str) -> np.ndarray:
        mapping = self._mapping(name, offset, nbytes, key)
        return np.frombuffer(mapping, np.uint8, count=nbytes, offset=offset)

    def _mapping(self, name: str, offset: int, nbytes: int, key: str):
        import mmap

        from runtime import shm
        with self._lock:
            mapping = self._maps.get(name)
            if mapping is None or len(mapping) < offset + nbytes:
                if "/" in name or not name.startswith(POOL_PREFIX):
                    raise wire.WireError(key, "shm", f"bad pooled segment name {name!r}")
                try:
                    fd = os.open(shm.SHM_DIR / name, os.O_RDWR)
                except FileNotFoundError:
                    raise wire.WireError(key, "shm", f"segment {name!r} does not exist") from None
                try:
                    mapping = mmap.mmap(fd, os.fstat(fd).st_size)
                finally:
                    os.close(fd)
                if len(self._maps) >= self._keep:
                    self._close_unused()
                self._maps[name] = mapping
        if offset < 0 or offset + nbytes > len(mapping):
            raise wire.WireError(key, "shm", f"ref [{offset}, +{nbytes}) lies outside {name!r}")
        return mapping

    def _close_unused(self) -> None:
        # Under the lock. A mapping with live arrays refuses to close (BufferError).
        for name, mapping in list(self._maps.items()):
            try:
                mapping.close()
            except BufferError:
                continue
            del self._maps[name]

    def close(self) -> None:
        with self._lock:
            maps, self._maps = list(self._maps.values()), {}
        for m in maps:
            try:
                m.close()
            except BufferError:
                pass


def _release_segment(mapping) -> None:
    try:
        mapping[0] = 0  # see SEGMENT_HEADER
    except ValueError:  # the mapping was closed (shutting down)
        pass


@functools.lru_cache(maxsize=1)
def _host_memory_bytes() -> int:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):  # not said here: no bound but the allocation's own
        return 1 << 62


def decode_pooled(first, rest, buffers: BufferPool, maps: SegmentMaps) -> tuple[str, np.ndarray]:
    """Like :func:`runtime.wire.decode_keyed` for a pushed tensor (first frame, later
    frames), but into a reused buffer; a pooled segment's tensor is used in place
    (:meth:`SegmentMaps.lease`). The same checks: meta on the first chunk, dtype, byte
    counts, order, key."""
    header, data = wire.split_frame(first)
    key = header.key
    if not header.HasField("meta"):
        raise wire.WireError(key, "meta", "first chunk carries no TensorMeta")
    dtype, shape = wire.check_meta(header.meta, key)
    nbytes = header.meta.nbytes
    if nbytes > _host_memory_bytes():
        raise wire.WireError(key, "nbytes", f"{nbytes} bytes announced, more than this "
                             f"host's memory ({_host_memory_bytes()} bytes)")
    if header.WhichOneof("payload") == "shm":
        ref = header.shm
        if ref.nbytes != nbytes:
            raise wire.WireError(key, "nbytes", "ShmRef size differs from TensorMeta",
                                 expected=nbytes, got=ref.nbytes)
        if next(iter(rest), None) is not None:
            raise wire.WireError(key, "chunks", "a shared-memory tensor must be a single chunk")
        buf = maps.lease(ref.name, ref.offset, nbytes, key)
        return key, buf.view(dtype).reshape(shape)
    buf = buffers.acquire(nbytes)
    received = 0
    index = 0
    it = iter(rest)
    while True:
        if index:
            if header.HasField("meta") or (header.key and header.key != key):
                raise wire.WireError(key, "meta", f"chunk {index} carries a second header")
        if header.offset != received:
            raise wire.WireError(key, "order", f"chunk {index} is out of order",
                                 expected=received, got=header.offset)
        end = received + len(data)
        if end > nbytes:
            raise wire.WireError(key, "nbytes", f"chunk {index} overruns the announced size",
                                 expected=nbytes, got=end)
        buf[received:end] = np.frombuffer(data, np.uint8)
        received = end
        index += 1
        item = next(it, None)
        if item is None:
            break
        header, data = wire.split_frame(item, key)
    if received != nbytes:
        raise wire.WireError(key, "nbytes", "stream ended early", expected=nbytes, got=received)
    return key, buf.view(dtype).reshape(shape)


def owner_pid(name: str) -> int | None:
    """The pid of the process that created segment ``name`` (its name says it:
    ``plabpool_<pid>_…`` or ``plab_<pid>_…``); None for a name of another kind.

    >>> owner_pid("plabpool_1234_abcdef"), owner_pid("plab_77_x"), owner_pid("other")
    (1234, 77, None)
    """
    from runtime.shm import SEGMENT_PREFIX
    for prefix in (POOL_PREFIX, SEGMENT_PREFIX):
        if name.startswith(prefix):
            pid, _, rest = name[len(prefix):].partition("_")
            return int(pid) if pid.isdigit() and rest else None
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def reap_orphans() -> int:
    """Unlink the runtime's segments on this host whose creating process is gone (a
    server killed with SIGKILL leaves its own behind); return how many. Segments of
    live processes stay, and so do other users' (``/dev/shm`` is sticky). A receiver
    that still maps one keeps its mapping (POSIX)."""
    from runtime.shm import SEGMENT_PREFIX, list_segments, unlink_segment
    reaped = 0
    for prefix in (POOL_PREFIX, SEGMENT_PREFIX):
        for name in list_segments(prefix):
            pid = owner_pid(name)
            if pid is None or pid == os.getpid() or _alive(pid):
                continue
            try:
                reaped += unlink_segment(name)
            except PermissionError:
                continue
    return reaped
