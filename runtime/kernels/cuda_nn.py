"""GPU kernels of the nn op family (:mod:`core.ops_nn`), registered at import; the
device code is compiled on first use and ``numba.cuda`` is imported only then (see
:mod:`.cuda` for the conventions).
"""

from __future__ import annotations

from .registry import FLOATING, NUMERIC, register  # noqa: F401

__all__: list[str] = []
