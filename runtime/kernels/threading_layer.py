"""numba's threading layer, chosen once, before the first parallel kernel runs.

The executor calls kernels from several inter-op threads at once, and kernels of
multithreaded ops open numba parallel regions.  numba's ``workqueue`` layer aborts the
process when two threads enter parallel regions concurrently, so we pick a thread-safe
layer here, in the one place that does it, at import of :mod:`runtime.kernels`:

1. ``NUMBA_THREADING_LAYER`` set in the environment wins (the user asked for it);
2. otherwise ``omp`` (numba's wheel ships it; it needs the system's ``libgomp``), then
   ``tbb`` (pip ``tbb``; its libraries must be on the loader path, which a virtualenv's
   ``lib/`` is not, so it is only the fallback);
3. if neither loads, or numba's pool was already launched with ``workqueue`` by someone
   else, parallel regions are serialised by :data:`parallel_region` (correct, but the
   inter-op threads then wait for each other's parallel sections).

GNU OpenMP is not fork-safe: start worker processes with ``spawn``/``forkserver`` (gRPC
demands this anyway once its threads run).

>>> THREADING_LAYER in ("omp", "tbb", "workqueue")
True
"""

from __future__ import annotations

import contextlib
import importlib
import os
import threading

import numba
from numba.np.ufunc import parallel as _numba_parallel

__all__ = ["THREADING_LAYER", "parallel_region"]

_THREAD_SAFE = ("omp", "tbb")


def _loadable(layer: str) -> bool:
    """Whether numba's pool library for ``layer`` loads in this process."""
    module = {"omp": "omppool", "tbb": "tbbpool"}[layer]
    try:
        importlib.import_module(f"numba.np.ufunc.{module}")
    except (ImportError, OSError):
        return False
    return True


def _configure() -> str:
    """Pick and launch the layer; return the name of the one that runs."""
    if not _numba_parallel._is_initialized and "NUMBA_THREADING_LAYER" not in os.environ:
        numba.config.THREADING_LAYER = next(
            (layer for layer in _THREAD_SAFE if _loadable(layer)), "workqueue")
    # Launch now, so the choice is fixed before any kernel (cached or not) runs.
    _numba_parallel._launch_threads()
    return numba.threading_layer()


THREADING_LAYER: str = _configure()

#: Context manager every parallel kernel call runs in: a no-op on thread-safe layers,
#: a process-wide lock on ``workqueue``.
parallel_region = (contextlib.nullcontext if THREADING_LAYER in _THREAD_SAFE
                   else threading.Lock)()
