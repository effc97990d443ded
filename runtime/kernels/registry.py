"""The kernel registry: ``(op type, device type) -> (kernel, dtypes)``.

This is the only mutable module state of the kernels package.  The modules :mod:`.cpu`
and :mod:`.cuda` fill it at import time with :func:`register`; the executor reads it with
:func:`get_kernel`.  Which ops exist is decided by ``core.ops.OPS``; a test checks that
this registry covers exactly that table.

>>> from runtime.kernels import get_kernel, KernelContext
>>> import numpy as np
>>> add = get_kernel("Add", "CPU")
>>> add(KernelContext(), (np.ones(2), np.arange(2.0)), {})[0]
array([1., 2.])
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Protocol, Sequence

__all__ = ["Kernel", "NoKernel", "register", "get_kernel", "registered", "supported_dtypes"]


class Kernel(Protocol):
    """``kernel(ctx, inputs, attrs) -> tuple of outputs``.

    ``inputs`` are numpy arrays on a CPU and ``numba.cuda`` device arrays on a GPU (outputs
    stay on that device); ``attrs`` is the op's attribute dict; ``ctx`` a
    :class:`~runtime.kernels.KernelContext`.  Outputs never alias inputs, except that
    ``Assign``/``AssignAdd``/``AssignSub`` return their (updated) ref and ``Const``,
    ``Placeholder`` and ``Variable`` return the value they were given.
    """

    def __call__(self, ctx: Any, inputs: Sequence[Any], attrs: dict) -> tuple: ...


class NoKernel(LookupError):
    """No kernel is registered for ``op_type`` on ``device_type`` (or for ``dtype`` there).

    Attributes: ``op_type``, ``device_type``, ``dtype`` (or None) and ``available``, the
    device types (or, when a dtype was asked for, the dtypes) that do have one.
    """

    def __init__(self, op_type: str, device_type: str, available: Iterable[str],
                 dtype: str | None = None):
        self.op_type = op_type
        self.device_type = device_type
        self.dtype = dtype
        self.available = sorted(available)
        if dtype is None:
            msg = (f"no {device_type} kernel for op type {op_type!r}; device types with one:"
                   f" {self.available}")
        else:
            msg = (f"no {device_type} kernel for op type {op_type!r} on dtype {dtype};"
                   f" dtypes with one: {self.available}")
        super().__init__(msg)

    def __str__(self) -> str:
        return self.args[0]


_REGISTRY: dict[tuple[str, str], tuple[Kernel, frozenset[str]]] = {}


def register(op_type: str, device_type: str, dtypes: Iterable[str]) -> Callable[[Kernel], Kernel]:
    """Decorator: register ``kernel`` for ``op_type`` on ``device_type`` and ``dtypes``.

    Registering the same pair twice is an error (it would silently shadow a kernel).

    >>> @register("Example", "TPU", {"float32"})          # doctest: +SKIP
    ... def example(ctx, inputs, attrs): return (inputs[0],)
    """
    key = (op_type, device_type.upper())

    def decorate(kernel: Kernel) -> Kernel:
        if key in _REGISTRY:
            raise ValueError(f"a kernel for {key} is already registered")
        _REGISTRY[key] = (kernel, frozenset(dtypes))
        return kernel

    return decorate


def get_kernel(op_type: str, device_type: str, dtype: str | None = None) -> Kernel:
    """The kernel of ``op_type`` on ``device_type`` (``"CPU"``/``"GPU"``, any case).

    With ``dtype`` (a name such as ``"int32"``), also check that the kernel takes it.
    Raises :class:`NoKernel` naming what is missing and listing what exists.

    >>> get_kernel("Variable", "GPU", "int32")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    runtime.kernels.registry.NoKernel: no GPU kernel for op type 'Variable' on dtype int32; ...
    """
    device_type = device_type.upper()
    entry = _REGISTRY.get((op_type, device_type))
    if entry is None:
        raise NoKernel(op_type, device_type, (d for (o, d) in _REGISTRY if o == op_type))
    kernel, dtypes = entry
    if dtype is not None and str(getattr(dtype, "name", dtype)) not in dtypes:
        raise NoKernel(op_type, device_type, dtypes, dtype=str(getattr(dtype, "name", dtype)))
    return kernel


def registered() -> set[tuple[str, str]]:
    """Every ``(op_type, device_type)`` pair that has a kernel.

    >>> ("MatMul", "GPU") in registered()
    True
    """
    return set(_REGISTRY)


def supported_dtypes(op_type: str, device_type: str) -> set[str]:
    """The dtype names the kernel of ``op_type`` on ``device_type`` takes (empty: no kernel).

    The dtype is the op's first output's (first input's when it has none), as in
    ``core.ops.OpDef.kernel_dtype``.

    >>> sorted(supported_dtypes("Tanh", "CPU"))
    ['float32', 'float64']
    """
    entry = _REGISTRY.get((op_type, device_type.upper()))
    return set(entry[1]) if entry else set()


#: dtype sets kernels are registered with (mirroring core.ops: all numeric types, and the
#: floating ones for the transcendental ops).
NUMERIC = frozenset({"float32", "float64", "int32", "int64"})
FLOATING = frozenset({"float32", "float64"})
