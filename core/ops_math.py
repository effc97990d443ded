"""The op table's math and array ops: BatchMatMul, the unary and binary math ops (Exp, Log, RealDiv, Pow, ...), Cast, AddN, Fill and the like, Pad, Split, Tile, StridedSlice, StopGradient, and the seeded random initializers.

Each op is an :class:`core.opdef.OpDef`; :mod:`core.ops` merges this family's table into
``OPS``, the single table the rest of the lab reads.  Op type names are TensorFlow's, as
``tf.compat.v1`` writes them into a GraphDef.
"""

from __future__ import annotations

from core.opdef import OpDef, table  # noqa: F401

__all__ = ["MATH_OPS"]

MATH_OPS: dict[str, OpDef] = table(
)
