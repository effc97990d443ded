"""The time of a float matrix product on one core, by the two paths its BLAS takes.

A product's time is not its arithmetic at one rate.  OpenBLAS (numpy's and numba's
BLAS here) runs a product of at most about a million multiply-adds in a *direct*
kernel straight from its operands, at the core's full rate; above that it *packs* its
operands into cache-sized panels first, and a product with few rows pays for packing
all of its second operand with little arithmetic to spread it over.  On this
project's 2-core machine (``docs/probes/gemm_paths_probe.py``) a ``16 x 128 @ 128 x
488`` product ran at 103 GFLOP/s and a ``16 x 128 @ 128 x 500`` one at 52; square
products of 256 and 512 at 100-104, and ``64 x 2048 @ 2048 x 512`` at 85.  One
factor on the roofline, fitted over both kinds, over-predicted the squares by 20-30%.

:class:`GemmCosts` models the two paths, each with figures measured on the machine
(:func:`runtime.calibrate_gemm.measure_gemm_costs`): the direct kernel's rate and the
largest product it takes; the packed path's rate, plus a cost per element of the
second operand (packed on every call) and per element of the product (written and
read back per panel of the shared dimension).  :class:`core.costs.StaticCostModel`
uses it for ``MatMul`` on a device whose ``gemm_costs`` are set.

>>> costs = GemmCosts(direct_macs=1e6, direct_flops=1e11, transposed_direct_outputs=1200,
...                   packed_flops=1e11, per_packed_element=3e-10, per_output_element=1e-10)
>>> round(costs.seconds(16, 128, 488) * 1e6, 2)          # direct
19.99
>>> round(costs.seconds(16, 128, 500) * 1e6, 2)          # packed: 20.48 + 19.2 + 0.8
40.48
>>> costs.takes_direct(4, 128, 256, transpose_b=True), costs.takes_direct(16, 128, 256, True)
(True, False)
"""

from __future__ import annotations

import math
from dataclasses import astuple, dataclass, fields

__all__ = ["GemmCosts", "MIN_ROWS_PER_BLOCK", "product_dims"]

#: Fewest rows in one block of a float product the CPU kernel splits over its intra-op
#: threads (``runtime.kernels.cpu.matmul``: one single-threaded gemm per row block, each
#: packing all of the second operand again, so few and big blocks; a 128-row block
#: already paid +25% for it).  :meth:`core.opdef.OpDef.splits` applies the same rule.
MIN_ROWS_PER_BLOCK = 128


def product_dims(a_shape, b_shape, attrs) -> tuple:
    """``(m, k, n)`` of a MatMul's ``op(a) @ op(b)`` on operands of these shapes, ``op``
    transposing where ``attrs`` sets ``transpose_a`` / ``transpose_b``.

    >>> product_dims((128, 16), (512, 128), {"transpose_a": True, "transpose_b": True})
    (16, 128, 512)
    """
    m, k = (a_shape[1], a_shape[0]) if attrs.get("transpose_a") else a_shape
    n = b_shape[0] if attrs.get("transpose_b") else b_shape[1]
    return m, k, n


@dataclass(frozen=True)
class GemmCosts:
    """Figures of a BLAS's float matrix product on one core (see the module docstring).

    ``direct_macs``: products of at most this many multiply-adds take the direct
    kernel (0: the BLAS has none), at ``direct_flops`` FLOP/s; a product whose second
    operand is stored transposed takes it only if its result has at most
    ``transposed_direct_outputs`` elements too (OpenBLAS's kernel for that layout runs
    only small results directly; 0: none).  Any other
    product takes the packed path: ``packed_flops`` FLOP/s of arithmetic, plus
    ``per_packed_element`` seconds per element of the second operand and
    ``per_output_element`` per element of the product.  A product's fixed cost (the
    call, the checks) is not here: it is its kernel's fixed cost
    (``Device.kernel_costs``).
    """

    direct_macs: float
    direct_flops: float
    transposed_direct_outputs: float
    packed_flops: float
    per_packed_element: float
    per_output_element: float

    def __post_init__(self):
        for name in ("direct_flops", "packed_flops"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and 0 < value < math.inf):
                raise ValueError(f"GemmCosts.{name} must be a positive rate, not {value!r}")
        for name in ("direct_macs", "transposed_direct_outputs", "per_packed_element",
                     "per_output_element"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and 0 <= value < math.inf):
                raise ValueError(f"GemmCosts.{name} must be finite and at least 0, not {value!r}")

    def takes_direct(self, m: int, k: int, n: int, transpose_b: bool = False) -> bool:
        """Whether the product ``(m, k) @ (k, n)`` runs in the direct kernel."""
        return m * k * n <= self.direct_macs and (
            not transpose_b or m * n <= self.transposed_direct_outputs)

    def seconds(self, m: int, k: int, n: int, transpose_b: bool = False) -> float:
        """Seconds of ``(m, k) @ (k, n)`` on one core, beside its fixed cost."""
        if self.takes_direct(m, k, n, transpose_b):
            return 2.0 * m * k * n / self.direct_flops
        return self.packed_seconds(m, k, n)

    def packed_seconds(self, m: int, k: int, n: int) -> float:
        """Seconds of ``(m, k) @ (k, n)`` on the packed path, whatever its size."""
        return 2.0 * m * k * n / self.packed_flops + self._packing(m, k, n)

    def memory_seconds(self, m: int, k: int, n: int, transpose_b: bool = False) -> float:
        """The part of :meth:`seconds` spent moving memory (packing the second operand,
        going over the product): none on the direct path."""
        if self.takes_direct(m, k, n, transpose_b):
            return 0.0
        return self._packing(m, k, n)

    def _packing(self, m: int, k: int, n: int) -> float:
        return k * n * self.per_packed_element + m * n * self.per_output_element

    def as_tuple(self) -> tuple:
        """The figures in field order (``Device.gemm_costs``; :meth:`from_tuple`)."""
        return astuple(self)

    @classmethod
    def from_tuple(cls, values) -> "GemmCosts":
        """The costs from :meth:`as_tuple`'s figures (a list, as JSON gives them)."""
        values = tuple(values)
        if len(values) != len(fields(cls)):
            raise ValueError(f"GemmCosts takes {len(fields(cls))} figures "
                             f"({', '.join(f.name for f in fields(cls))}), not {values!r}")
        return cls(*values)
