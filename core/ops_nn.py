"""The op table's neural-network ops: convolution, pooling, bias, batch and layer normalisation, embedding lookup (Gather and its scatter-add gradient), softmax cross-entropy losses.

Each op is an :class:`core.opdef.OpDef`; :mod:`core.ops` merges this family's table into
``OPS``, the single table the rest of the lab reads.  Op type names are TensorFlow's, as
``tf.compat.v1`` writes them into a GraphDef.
"""

from __future__ import annotations

from core.opdef import OpDef, table  # noqa: F401

__all__ = ["NN_OPS"]

NN_OPS: dict[str, OpDef] = table(
)
