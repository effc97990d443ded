"""Tensor element types.

A :class:`DType` wraps a numpy dtype and gives it TensorFlow's name.  Every public
function that takes a dtype accepts a :class:`DType`, a numpy dtype or scalar type, or
a name (``"float32"``).

>>> as_dtype("float32") is float32
True
>>> as_dtype(np.int64).name
'int64'
"""

from __future__ import annotations

import numpy as np

__all__ = ["DType", "as_dtype", "float16", "float32", "float64", "int32", "int64", "bool_",
           "ALL_DTYPES"]


class DType:
    """An element type; one instance per type, so ``is`` and ``==`` agree."""

    __slots__ = ("name", "np", "itemsize")

    def __init__(self, name: str):
        self.name = name
        self.np = np.dtype(name)
        self.itemsize = self.np.itemsize

    @property
    def is_floating(self) -> bool:
        return self.np.kind == "f"

    @property
    def is_integer(self) -> bool:
        return self.np.kind in "iu"

    def __repr__(self) -> str:
        return f"core.{self.name}"

    def __reduce__(self):
        return as_dtype, (self.name,)


float16 = DType("float16")
float32 = DType("float32")
float64 = DType("float64")
int32 = DType("int32")
int64 = DType("int64")
bool_ = DType("bool")

ALL_DTYPES = {d.name: d for d in (float16, float32, float64, int32, int64, bool_)}


def as_dtype(value) -> DType:
    """Convert a :class:`DType`, numpy dtype, scalar type or name to a :class:`DType`."""
    if isinstance(value, DType):
        return value
    try:
        name = np.dtype(value).name
    except TypeError:
        raise TypeError(f"cannot interpret {value!r} as a dtype; known: {sorted(ALL_DTYPES)}") from None
    if name not in ALL_DTYPES:
        raise TypeError(f"unsupported dtype {name!r}; known: {sorted(ALL_DTYPES)}")
    return ALL_DTYPES[name]
