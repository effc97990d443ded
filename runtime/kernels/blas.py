"""The thread count of the BLAS library that numba's ``np.dot`` calls.

numba's ``np.dot`` calls the gemm of :mod:`scipy.linalg.cython_blas`, which is scipy's
own BLAS (scipy's wheels bundle an OpenBLAS, a different copy from numpy's).  The float
MatMul kernel splits a big product into row blocks over its intra-op threads and wants
each block's gemm single-threaded: two levels of threads on the same cores would fight.
OpenBLAS's own threads are also what makes a gemm slow on a busy machine: they spin on
each other at every block of the product, so one of them losing its core stalls the
other (on this shared 2-core VM beside one other busy process, a 1024^3 float32 gemm took
median 37-50 ms on OpenBLAS's two threads, 24-31 ms on one).

The library is found from cython_blas's module (``dladdr`` of its sgemm) and the library
that module's ``sgemm_`` resolves to, so the call reaches the very copy numba uses, not
numpy's.  Only OpenBLAS builds are known (their
``openblas_set_num_threads``, plain or with scipy's symbol prefix and suffixes); with any
other BLAS :func:`set_blas_threads` returns False and the kernel keeps one gemm call per
product, threaded as that library likes.

>>> set_blas_threads(1) in (True, False)
True
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

__all__ = ["blas_library", "blas_threads", "set_blas_threads"]

#: Names of OpenBLAS's thread-count functions: scipy's wheels prefix their copy's symbols
#: (``scipy_``) and suffix the 64-bit-integer build's (``64_``).
_SETTERS = ("openblas_set_num_threads", "scipy_openblas_set_num_threads",
            "scipy_openblas_set_num_threads64_", "openblas_set_num_threads64_")
_GETTERS = ("openblas_get_num_threads", "scipy_openblas_get_num_threads",
            "scipy_openblas_get_num_threads64_", "openblas_get_num_threads64_")


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def _sgemm_address() -> int | None:
    """The address of the sgemm numba calls (the one scipy.linalg.cython_blas exports)."""
    try:
        from scipy.linalg import cython_blas
    except ImportError:
        return None
    capsule = cython_blas.__pyx_capi__["sgemm"]
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype, get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype, get_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object,
                                                                   ctypes.c_char_p]
    return get_pointer(capsule, get_name(capsule))


@functools.lru_cache(maxsize=1)
def blas_library() -> str | None:
    """The file of the BLAS library numba's ``np.dot`` calls, or None if not found."""
    address = _sgemm_address()
    if not address:
        return None
    # cython_blas's sgemm is a thin wrapper in cython_blas's own module; it calls
    # the library's sgemm_, so look that symbol up from the wrapper's module.
    wrapper = _dladdr(address)
    if wrapper is None:
        return None
    try:
        module = ctypes.CDLL(wrapper)
    except OSError:
        return None
    for name in ("scipy_sgemm_", "sgemm_", "scipy_sgemm64_", "sgemm64_"):
        fn = getattr(module, name, None)
        if fn is not None:
            found = _dladdr(ctypes.cast(fn, ctypes.c_void_p).value)
            if found is not None and found != wrapper:
                return found
    return None


def _dladdr(address: int) -> str | None:
    libdl = ctypes.CDLL(ctypes.util.find_library("dl") or None)
    info = _DlInfo()
    if not libdl.dladdr(ctypes.c_void_p(address), ctypes.byref(info)) or not info.dli_fname:
        return None
    return info.dli_fname.decode()


@functools.lru_cache(maxsize=1)
def _functions():
    """``(setter, getter)`` of the library's thread count, or ``(None, None)``."""
    path = blas_library()
    if path is None:
        return None, None
    try:
        lib = ctypes.CDLL(path)
    except OSError:
        return None, None
    setter = next((getattr(lib, n) for n in _SETTERS if hasattr(lib, n)), None)
    getter = next((getattr(lib, n) for n in _GETTERS if hasattr(lib, n)), None)
    if setter is None or getter is None:
        return None, None
    setter.argtypes, setter.restype = [ctypes.c_int], None
    getter.argtypes, getter.restype = [], ctypes.c_int
    return setter, getter


def set_blas_threads(threads: int) -> bool:
    """Set how many threads the BLAS of numba's ``np.dot`` runs (process-wide); False
    (and nothing done) when that library is not a known OpenBLAS."""
    setter, _ = _functions()
    if setter is None:
        return False
    setter(int(threads))
    return True


def blas_threads() -> int | None:
    """The thread count of the BLAS of numba's ``np.dot``; None when unknown."""
    _, getter = _functions()
    return None if getter is None else getter()
