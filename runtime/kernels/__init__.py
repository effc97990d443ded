"""Kernels: what each op type computes on each device type, found by name.

The public face is a registry keyed by ``(op_type, device_type)``:

* :func:`get_kernel` ``(op_type, device_type, dtype=None) -> Kernel`` (raises
  :class:`NoKernel`, listing what exists);
* :func:`registered` ``() -> set[(op_type, device_type)]``;
* :func:`supported_dtypes` ``(op_type, device_type) -> set[str]``;
* a :class:`Kernel` is ``kernel(ctx, inputs, attrs) -> tuple of outputs`` with ``ctx`` a
  :class:`KernelContext`.

CPU kernels (:mod:`.cpu`) are numba-compiled; GPU kernels (:mod:`.cuda`) are numba CUDA
kernels on device arrays, compiled on first use, and ``numba.cuda`` is imported only then,
so the CPU path never needs CUDA.  :func:`cuda_available` says whether a GPU (or numba's
simulator, ``NUMBA_ENABLE_CUDASIM=1``) can run them.  Importing this package fixes
numba's threading layer (see :mod:`.threading_layer`).

>>> import numpy as np
>>> from runtime.kernels import KernelContext, get_kernel
>>> mm = get_kernel("MatMul", "CPU")
>>> mm(KernelContext(), (np.eye(2), np.arange(4.0).reshape(2, 2)), {"transpose_b": True})[0]
array([[0., 2.],
       [1., 3.]])
"""

from __future__ import annotations

from .threading_layer import THREADING_LAYER  # first: before anything compiles a parallel kernel
from .context import KernelContext
from .registry import Kernel, NoKernel, get_kernel, registered, supported_dtypes
from . import cpu as _cpu  # noqa: F401  (registers the CPU kernels)
from . import cpu_reduce as _cpu_reduce  # noqa: F401  (the base family's reductions)
from . import cpu_math as _cpu_math  # noqa: F401  (the math family's CPU kernels)
from . import cpu_nn as _cpu_nn  # noqa: F401  (the nn family's CPU kernels)
from . import cpu_train as _cpu_train  # noqa: F401  (the training ops' CPU kernels)
from . import cuda as _cuda  # noqa: F401  (registers the GPU kernels; imports no CUDA yet)
from . import cuda_math as _cuda_math  # noqa: F401  (the math family's GPU kernels)
from . import cuda_nn as _cuda_nn  # noqa: F401  (the nn family's GPU kernels)
from . import cuda_train as _cuda_train  # noqa: F401  (the training ops' GPU kernels)
from .cuda import cuda_available

__all__ = ["Kernel", "KernelContext", "NoKernel", "THREADING_LAYER", "cuda_available",
           "families_of", "get_kernel", "registered", "supported_dtypes", "warmup",
           "warmup_for"]


#: The kernel families that warm up apart: ``name -> (CPU modules, GPU module, the op
#: table's family or None for the base table)``; a graph that uses none of a family's ops
#: need not compile its kernels (the nn family's take a minute on a cold cache).
def _families() -> dict:
    from core.ops_math import MATH_OPS
    from core.ops_nn import NN_OPS
    return {"base": ((_cpu, _cpu_reduce), _cuda, None),
            "math": ((_cpu_math,), _cuda_math, MATH_OPS),
            "nn": ((_cpu_nn,), _cuda_nn, NN_OPS)}


def families_of(op_types) -> list[str]:
    """The kernel families whose warmup a graph with these op types needs (the base
    family always: it holds the sources, variables and elementwise ops).

    >>> families_of(["Const", "Conv2D"]), families_of(["MatMul"])
    (['base', 'nn'], ['base'])
    """
    op_types = set(op_types)
    return [name for name, (_, _, table) in _families().items()
            if table is None or op_types & set(table)]


def warmup(dtypes=("float32", "float64", "int32", "int64"), device_types=("CPU",),
           parallel: bool = True, families=None) -> None:
    """Compile (or load from numba's cache) the kernels for ``dtypes`` ahead of measuring.

    On a CPU, every numba function a kernel calls, with the argument types the kernels
    pass (inputs as read-only views), so a step after it compiles nothing, whether its
    inputs are writable or read-only (constants, fed or received tensors); see
    :func:`.cpu.warmup` (each family's CPU modules have one).  ``device_types`` may
    include ``"GPU"`` (compiles the CUDA kernels; needs :func:`cuda_available`).
    ``parallel`` also prepares the CPU multithreaded variants.  ``families``: the kernel
    families to warm (:func:`families_of` a graph's op types; None: all of them).

    >>> warmup(dtypes=("float64",), families=["base"])
    """
    table = _families()
    names = list(table) if families is None else list(families)
    unknown = sorted(set(names) - set(table))
    if unknown:
        raise ValueError(f"unknown kernel families {unknown}; known: {sorted(table)}")
    for device_type in device_types:
        if device_type.upper() not in ("CPU", "GPU"):
            raise ValueError(f"unknown device type {device_type!r}; known: ['CPU', 'GPU']")
        for name in names:
            cpu_modules, gpu_module, _ = table[name]
            if device_type.upper() == "CPU":
                for cpu_module in cpu_modules:
                    cpu_module.warmup(dtypes, parallel=parallel)
            else:
                gpu_module.warmup(dtypes)


#: The dtypes kernels are compiled for (the warmups' default).
_WARM_DTYPES = frozenset({"float32", "float64", "int32", "int64"})


def warmup_for(ops, device_types=("CPU",), done: set | None = None) -> None:
    """Compile (or load) what a step of ``ops`` runs: the kernel families their op types
    use (:func:`families_of`), for their outputs' dtypes, on ``device_types``.

    ``done`` (a set of ``(device type, family, dtype)``, updated) skips what was warmed
    before; callers that share it across threads hold their own lock around the call.

    >>> import core as tf
    >>> g = tf.Graph()
    >>> with g.as_default():
    ...     _ = tf.constant([1.0]) * 2.0
    >>> done = set()
    >>> warmup_for(g.get_operations(), done=done)
    >>> sorted(done)
    [('CPU', 'base', 'float32')]
    """
    done = set() if done is None else done
    dtypes = {t.dtype.name for op in ops for t in op.outputs} & _WARM_DTYPES
    families = families_of({op.type for op in ops})
    missing = {(t.upper(), f, d) for t in device_types for f in families for d in dtypes} - done
    for device_type, family in sorted({(t, f) for t, f, _ in missing}):
        todo = sorted(d for t, f, d in missing if (t, f) == (device_type, family))
        warmup(dtypes=tuple(todo), device_types=(device_type,), families=[family])
    done |= missing
