"""Shape arithmetic shared by the CPU and GPU kernels (pure Python, no numba).

Kernels address every operand as a flat C-ordered buffer plus per-dimension element
strides (0 along a broadcast dimension).  Adjacent dimensions that every operand walks
contiguously are merged first, so the common cases collapse to one or two dimensions:

>>> broadcast_layout((4, 3), [(4, 3), (3,)])
((4, 3), [(3, 1), (0, 1)])
>>> broadcast_layout((2, 3, 4), [(2, 3, 4), (2, 3, 4)])
((24,), [(1,), (1,)])
"""

from __future__ import annotations

import math
from typing import Sequence

__all__ = ["broadcast_layout", "contiguous_strides", "normalize_axes", "reduce_layout"]


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Element strides of a C-ordered array of ``shape``."""
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= n
    return tuple(reversed(strides))


def broadcast_layout(out_shape: Sequence[int], in_shapes: Sequence[Sequence[int]]
                     ) -> tuple[tuple[int, ...], list[tuple[int, ...]]]:
    """Collapsed iteration shape and each input's element strides for numpy broadcasting.

    Inputs are C-contiguous buffers of ``in_shapes``; the output is C-contiguous of
    ``out_shape``.  The returned shape has the same number of elements as the output and at
    least one dimension.
    """
    rank = len(out_shape)
    all_strides = []
    for s in in_shapes:
        s = (1,) * (rank - len(s)) + tuple(s)
        full = contiguous_strides(s)
        all_strides.append([0 if s[d] == 1 else full[d] for d in range(rank)])
    shape: list[int] = []
    strides: list[list[int]] = [[] for _ in in_shapes]
    for d in range(rank):
        n = out_shape[d]
        if n == 1:
            continue  # a size-1 output dimension is never stepped along
        if shape and all(st[-1] == src[d] * n for st, src in zip(strides, all_strides)):
            shape[-1] *= n
            for st, src in zip(strides, all_strides):
                st[-1] = src[d]
        else:
            shape.append(n)
            for st, src in zip(strides, all_strides):
                st.append(src[d])
    if not shape:
        return (1,), [(0,) for _ in in_shapes]
    return tuple(shape), [tuple(st) for st in strides]


def normalize_axes(axis, rank: int) -> tuple[int, ...]:
    """Sorted, non-negative, unique reduction axes (None: all of them)."""
    if axis is None:
        return tuple(range(rank))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    return tuple(sorted({a % rank for a in axes})) if rank else ()


def reduce_layout(shape: Sequence[int], axes: Sequence[int]
                  ) -> tuple[tuple[int, ...] | None, tuple[int, int, int]]:
    """How to view a reduction as ``(outer, reduced, inner)``.

    Returns ``(perm, (O, R, I))``: ``perm`` is None when the reduced axes are already one
    contiguous block (no copy needed), else the transpose that moves them last (then
    ``I == 1``).

    >>> reduce_layout((2, 3, 4), (1,))
    (None, (2, 3, 4))
    >>> reduce_layout((2, 3, 4), (0, 2))
    ((1, 0, 2), (3, 8, 1))
    """
    axes = tuple(axes)
    if not axes:
        return None, (math.prod(shape), 1, 1)
    if axes == tuple(range(axes[0], axes[-1] + 1)):
        return None, (math.prod(shape[:axes[0]]), math.prod(shape[axes[0]:axes[-1] + 1]),
                      math.prod(shape[axes[-1] + 1:]))
    kept = tuple(d for d in range(len(shape)) if d not in axes)
    return kept + axes, (math.prod(shape[d] for d in kept), math.prod(shape[d] for d in axes), 1)
