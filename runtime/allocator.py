"""The process's heap keeps what a step frees, so that the next step's buffers reuse it.

glibc's ``malloc`` gives large blocks back to the system: a block over its mmap
threshold is unmapped when freed, and the heap's free top is trimmed past its trim
threshold (both thresholds move with the program's recent frees).  The next step's
``np.empty`` of that size then gets fresh pages, and the kernel that first writes the
buffer pays a page fault per 4 KiB page: in a step of mixed ops, a 1024 x 1024 float32
Add or Relu wrote at 7-10 GB/s where the same op, its buffer reused, wrote at 45 GB/s
(one op of the pair took 1.27 ms, the other 0.18 ms).  TensorFlow's allocator keeps
the memory it frees for the same reason.  :func:`keep_freed_memory` fixes both
thresholds high once per process, so freed buffers of up to 32 MiB (glibc's largest
mmap threshold) stay in the heap for the next step; larger ones are still mapped
afresh.  The cost: a process's memory stays at its largest step's until it exits.

On a C library other than glibc it does nothing and returns False.

>>> keep_freed_memory() in (True, False)
True
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading

__all__ = ["keep_freed_memory", "MMAP_THRESHOLD", "TRIM_THRESHOLD"]

#: Blocks up to this size come from the heap and go back to it when freed (glibc's
#: largest mmap threshold on 64-bit systems).
MMAP_THRESHOLD = 32 << 20
#: The heap's free top is given back to the system only past this size.
TRIM_THRESHOLD = 1 << 30

# mallopt(3) parameter numbers (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3

_lock = threading.Lock()
_done: bool | None = None


def keep_freed_memory() -> bool:
    """Set glibc's mmap and trim thresholds (:data:`MMAP_THRESHOLD`,
    :data:`TRIM_THRESHOLD`) for this process, once; True when they are set (now or
    before), False where the C library has no ``mallopt`` that takes them."""
    global _done
    with _lock:
        if _done is None:
            _done = _set_thresholds()
        return _done


def _set_thresholds() -> bool:
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
        if not hasattr(libc, "gnu_get_libc_version"):  # glibc's parameter numbers only
            return False
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and \
        bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
