"""CPU kernels of the math op family (:mod:`core.ops_math`): numba ``@njit(cache=True,
nogil=True)`` functions behind numpy-level wrappers, registered with
:func:`.registry.register` at import (see :mod:`.cpu` for the conventions).
"""

from __future__ import annotations

from .registry import FLOATING, NUMERIC, register  # noqa: F401

__all__: list[str] = []
