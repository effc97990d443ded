"""The op table: one :class:`OpDef` per op type, the single source of truth.

Every part of the lab reads this table and no other list of op types exists: the graph
builders infer output shapes and dtypes with it, placers ask it which device types have a
kernel, the cost model asks it for flops and bytes, the simulator asks whether a kernel is
multithreaded, the executor's kernel registry is tested against it, and
:func:`core.autodiff.gradients` finds each op's gradient here.

>>> OPS["MatMul"].infer([TensorSpec(float32, (2, 3)), TensorSpec(float32, (3, 4))], {})
[TensorSpec(dtype=core.float32, shape=(2, 4))]
>>> has_kernel("Variable", "GPU", "int32")
False
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, NamedTuple, Sequence

from core.dtypes import DType, as_dtype, float32  # noqa: F401  (float32: doctest)

__all__ = ["OpDef", "OPS", "TensorSpec", "ShapeError", "get_op_def", "has_kernel",
           "kernel_device_types", "num_elements", "nbytes", "broadcast_shapes"]

Shape = tuple  # of int | None (None: a dimension not known until run time)


class TensorSpec(NamedTuple):
    """The static type of a tensor: dtype and shape (dimensions may be None)."""

    dtype: DType
    shape: Shape


class ShapeError(ValueError):
    """Inputs whose shapes or dtypes an op cannot take; the builder adds the op's name."""


def num_elements(shape: Shape) -> int | None:
    """Number of elements, or None when a dimension is unknown."""
    if any(d is None for d in shape):
        return None
    return math.prod(shape)


def nbytes(spec: TensorSpec) -> int | None:
    """Size in bytes of a tensor of this type, or None when its shape is not fully known."""
    n = num_elements(spec.shape)
    return None if n is None else n * spec.dtype.itemsize


def _known(shape: Shape) -> Shape:
    """A fully known shape, unknown dimensions counted as 1 (used only for cost estimates)."""
    return tuple(1 if d is None else d for d in shape)


# --- shape inference helpers ------------------------------------------------------------

def broadcast_shapes(a: Shape, b: Shape) -> Shape:
    """numpy broadcasting on static shapes; None stands for an unknown dimension."""
    out = []
    for i in range(max(len(a), len(b))):
        x = a[len(a) - 1 - i] if i < len(a) else 1
        y = b[len(b) - 1 - i] if i < len(b) else 1
        if x == 1:
            out.append(y)
        elif y == 1 or x == y:
            out.append(x)
        elif x is None or y is None:
            out.append(x if y is None else y)
        else:
            raise ShapeError(f"shapes {tuple(a)} and {tuple(b)} cannot be broadcast")
    return tuple(reversed(out))


def _same_dtype(specs: Sequence[TensorSpec]) -> DType:
    dtypes = {s.dtype for s in specs}
    if len(dtypes) > 1:
        raise ShapeError(f"inputs must share one dtype, got {sorted(d.name for d in dtypes)}")
    return specs[0].dtype


def _normalize_axis(axis, rank: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(rank))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    out = []
    for a in axes:
        if not -rank <= a < max(rank, 1):
            raise ShapeError(f"axis {a} is out of range for a tensor of rank {rank}")
        out.append(a % rank if rank else 0)
    return tuple(sorted(set(out)))


def _infer_unary(ins, attrs):
    return [TensorSpec(ins[0].dtype, ins[0].shape)]


def _infer_float_unary(ins, attrs):
    if not ins[0].dtype.is_floating:
        raise ShapeError(f"needs a floating-point input, got {ins[0].dtype.name}")
    return _infer_unary(ins, attrs)


def _infer_binary(ins, attrs):
    dtype = _same_dtype(ins)
    return [TensorSpec(dtype, broadcast_shapes(ins[0].shape, ins[1].shape))]


def _infer_grad_pair(ins, attrs):
    """Elementwise gradient ops (y, g) or (g, x): both inputs of one shape."""
    dtype = _same_dtype(ins)
    return [TensorSpec(dtype, broadcast_shapes(ins[0].shape, ins[1].shape))]


def _infer_matmul(ins, attrs):
    a, b = ins
    dtype = _same_dtype(ins)
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise ShapeError(f"matmul needs two matrices, got shapes {a.shape} and {b.shape}")
    m, k1 = a.shape[::-1] if attrs.get("transpose_a") else a.shape
    k2, n = b.shape[::-1] if attrs.get("transpose_b") else b.shape
    if k1 is not None and k2 is not None and k1 != k2:
        raise ShapeError(f"matmul inner dimensions differ: {a.shape} @ {b.shape}"
                         f" (transpose_a={bool(attrs.get('transpose_a'))},"
                         f" transpose_b={bool(attrs.get('transpose_b'))})")
    return [TensorSpec(dtype, (m, n))]


def _infer_reduce(ins, attrs):
    x = ins[0]
    axes = _normalize_axis(attrs.get("axis"), len(x.shape))
    if attrs.get("keepdims"):
        shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    else:
        shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
    return [TensorSpec(x.dtype, shape)]


def _infer_assign(ins, attrs):
    ref, value = ins
    if ref.dtype != value.dtype:
        raise ShapeError(f"cannot assign a {value.dtype.name} value to a {ref.dtype.name} variable")
    if broadcast_shapes(ref.shape, value.shape) != tuple(ref.shape):
        raise ShapeError(f"cannot assign a value of shape {value.shape} to a variable of shape {ref.shape}")
    return [TensorSpec(ref.dtype, ref.shape)]


def _infer_source(ins, attrs):
    return [TensorSpec(as_dtype(attrs["dtype"]), tuple(attrs["shape"]))]


def _infer_broadcast_to(ins, attrs):
    shape = tuple(attrs["shape"])
    if broadcast_shapes(ins[0].shape, shape) != shape:
        raise ShapeError(f"cannot broadcast shape {ins[0].shape} to {shape}")
    return [TensorSpec(ins[0].dtype, shape)]


def _infer_reshape(ins, attrs):
    shape = list(attrs["shape"])
    n = num_elements(ins[0].shape)
    if shape.count(-1) > 1:
        raise ShapeError(f"reshape to {tuple(shape)}: at most one dimension may be -1")
    if -1 in shape:
        rest = math.prod(d for d in shape if d != -1)
        if n is None:
            shape[shape.index(-1)] = None
        elif rest == 0 or n % rest:
            raise ShapeError(f"cannot reshape {ins[0].shape} to {tuple(attrs['shape'])}")
        else:
            shape[shape.index(-1)] = n // rest
    elif n is not None and math.prod(shape) != n:
        raise ShapeError(f"cannot reshape {ins[0].shape} ({n} elements) to {tuple(shape)}")
    return [TensorSpec(ins[0].dtype, tuple(shape))]


def _infer_transpose(ins, attrs):
    perm = tuple(attrs["perm"])
    if sorted(perm) != list(range(len(ins[0].shape))):
        raise ShapeError(f"perm {perm} is not a permutation of the {len(ins[0].shape)} axes")
    return [TensorSpec(ins[0].dtype, tuple(ins[0].shape[p] for p in perm))]


def _infer_concat(ins, attrs):
    dtype = _same_dtype(ins)
    rank = len(ins[0].shape)
    axis = attrs["axis"] % rank if rank else 0
    if any(len(s.shape) != rank for s in ins):
        raise ShapeError(f"concat needs inputs of one rank, got {[s.shape for s in ins]}")
    shape = list(ins[0].shape)
    for s in ins[1:]:
        for i, (d, e) in enumerate(zip(shape, s.shape)):
            if i == axis:
                shape[i] = None if d is None or e is None else d + e
            elif d is not None and e is not None and d != e:
                raise ShapeError(f"concat along axis {axis}: shapes {[s.shape for s in ins]} differ on axis {i}")
    return [TensorSpec(dtype, tuple(shape))]


def _infer_slice(ins, attrs):
    begin, size = tuple(attrs["begin"]), tuple(attrs["size"])
    shape = ins[0].shape
    if not len(begin) == len(size) == len(shape):
        raise ShapeError(f"slice begin {begin} and size {size} must match the rank of {shape}")
    out = []
    for b, s, d in zip(begin, size, shape):
        s = (d - b if d is not None else None) if s == -1 else s
        if b < 0 or (d is not None and s is not None and b + s > d):
            raise ShapeError(f"slice begin {begin} size {size} is out of bounds for shape {shape}")
        out.append(s)
    return [TensorSpec(ins[0].dtype, tuple(out))]


def _infer_none(ins, attrs):
    return []


# --- costs -----------------------------------------------------------------------------

def _flops_per_output(k: float):
    def flops(ins, outs, attrs):
        return k * sum(num_elements(_known(o.shape)) for o in outs)
    return flops


def _flops_per_input(k: float):
    def flops(ins, outs, attrs):
        return k * num_elements(_known(ins[0].shape))
    return flops


def _flops_matmul(ins, outs, attrs):
    a = _known(ins[0].shape)
    k = a[0] if attrs.get("transpose_a") else a[1]
    m, n = _known(outs[0].shape)
    return 2.0 * m * n * k


def _no_flops(ins, outs, attrs):
    return 0.0


# --- kernels ---------------------------------------------------------------------------

_NUMERIC = frozenset({"float32", "float64", "int32", "int64"})
_FLOAT = frozenset({"float32", "float64"})
_GPU_NO_INT32 = _NUMERIC - {"int32"}  # TensorFlow has no int32 GPU kernel for variables


def _kernels(cpu=_NUMERIC, gpu=_NUMERIC) -> dict[str, frozenset[str]]:
    return {"CPU": frozenset(cpu), "GPU": frozenset(gpu)}


@dataclass(frozen=True)
class OpDef:
    """What an op type is, what it costs and where it can run.

    Attributes
    ----------
    type : the op type name (``"MatMul"``).
    infer : ``(input specs, attrs) -> output specs``; raises :class:`ShapeError`.
    flops : ``(input specs, output specs, attrs) -> float`` floating-point operations.
    kernels : device type -> dtype names that have a kernel there.  The dtype checked is
        the op's first output's (first input's when it has no output); an op with neither
        (``NoOp``) runs anywhere it has an entry.
    multithreaded : the kernel splits its work over the device's intra-op pool.
    stateful : the op owns or changes variable state (never pruned or duplicated).
    ref_inputs : inputs taken by reference (the variable an ``Assign`` writes); the op is
        colocated with the producer of each and its output aliases input 0.
    persistent : the output is resident state (a variable's buffer), not a per-step tensor.
    gradient : ``(op, grads of outputs) -> grads of inputs``; None when not differentiable.
    """

    type: str
    infer: Callable
    flops: Callable = _no_flops
    kernels: dict = field(default_factory=_kernels)
    multithreaded: bool = False
    stateful: bool = False
    ref_inputs: tuple[int, ...] = ()
    persistent: bool = False
    gradient: Callable | None = None
    min_inputs: int = 0
    max_inputs: int | None = 0

    def kernel_dtype(self, inputs: Sequence, outputs: Sequence) -> str | None:
        """The dtype name the kernel is chosen by (None when the op has no tensors).

        ``inputs`` and ``outputs`` are tensors or :class:`TensorSpec` (anything with a
        ``dtype``)."""
        if outputs:
            return outputs[0].dtype.name
        if inputs:
            return inputs[0].dtype.name
        return None

    def bytes_read(self, inputs: Sequence[TensorSpec], attrs) -> int:
        """Bytes the kernel reads from device memory."""
        if self.persistent or self.type in ("Const", "Placeholder", "NoOp"):
            return 0
        return sum(nbytes(TensorSpec(s.dtype, _known(s.shape))) for s in inputs)

    def bytes_written(self, outputs: Sequence[TensorSpec], attrs) -> int:
        """Bytes the kernel writes to device memory."""
        if self.persistent or self.type in ("Const", "Placeholder", "NoOp"):
            return 0  # the value already exists: fed, stored in the graph or resident
        return sum(nbytes(TensorSpec(s.dtype, _known(s.shape))) for s in outputs)


def _gradient(name: str):
    """Look up a gradient function in core.autodiff lazily (it builds ops with core.graph)."""
    def grad(op, grads):
        from core import autodiff
        return getattr(autodiff, name)(op, grads)
    grad.__name__ = name
    return grad


def _table(*defs: OpDef) -> dict[str, OpDef]:
    return {d.type: d for d in defs}


OPS: dict[str, OpDef] = _table(
    # Sources.
    OpDef("Const", _infer_source, kernels=_kernels()),
    OpDef("Placeholder", _infer_source),
    OpDef("Variable", _infer_source, kernels=_kernels(gpu=_GPU_NO_INT32), stateful=True,
          persistent=True),
    OpDef("NoOp", _infer_none, min_inputs=0, max_inputs=0),
    # State changes: output 0 aliases the variable.
    OpDef("Assign", _infer_assign, kernels=_kernels(gpu=_GPU_NO_INT32), stateful=True,
          ref_inputs=(0,), min_inputs=2, max_inputs=2),
    OpDef("AssignAdd", _infer_assign, _flops_per_output(1), kernels=_kernels(gpu=_GPU_NO_INT32),
          stateful=True, ref_inputs=(0,), min_inputs=2, max_inputs=2),
    OpDef("AssignSub", _infer_assign, _flops_per_output(1), kernels=_kernels(gpu=_GPU_NO_INT32),
          stateful=True, ref_inputs=(0,), min_inputs=2, max_inputs=2),
    # Elementwise.
    OpDef("Identity", _infer_unary, gradient=_gradient("identity_grad"), min_inputs=1, max_inputs=1),
    OpDef("Neg", _infer_unary, _flops_per_output(1), gradient=_gradient("neg_grad"),
          min_inputs=1, max_inputs=1),
    OpDef("Add", _infer_binary, _flops_per_output(1), multithreaded=True,
          gradient=_gradient("add_grad"), min_inputs=2, max_inputs=2),
    OpDef("Sub", _infer_binary, _flops_per_output(1), multithreaded=True,
          gradient=_gradient("sub_grad"), min_inputs=2, max_inputs=2),
    OpDef("Mul", _infer_binary, _flops_per_output(1), multithreaded=True,
          gradient=_gradient("mul_grad"), min_inputs=2, max_inputs=2),
    OpDef("Relu", _infer_unary, _flops_per_output(1), multithreaded=True,
          gradient=_gradient("relu_grad"), min_inputs=1, max_inputs=1),
    OpDef("ReluGrad", _infer_grad_pair, _flops_per_output(2), multithreaded=True,
          min_inputs=2, max_inputs=2),
    OpDef("Tanh", _infer_float_unary, _flops_per_output(6), kernels=_kernels(_FLOAT, _FLOAT),
          multithreaded=True, gradient=_gradient("tanh_grad"), min_inputs=1, max_inputs=1),
    OpDef("TanhGrad", _infer_grad_pair, _flops_per_output(3), kernels=_kernels(_FLOAT, _FLOAT),
          multithreaded=True, min_inputs=2, max_inputs=2),
    OpDef("Sigmoid", _infer_float_unary, _flops_per_output(6), kernels=_kernels(_FLOAT, _FLOAT),
          multithreaded=True, gradient=_gradient("sigmoid_grad"), min_inputs=1, max_inputs=1),
    OpDef("SigmoidGrad", _infer_grad_pair, _flops_per_output(3), kernels=_kernels(_FLOAT, _FLOAT),
          multithreaded=True, min_inputs=2, max_inputs=2),
    OpDef("Softmax", _infer_float_unary, _flops_per_output(5), kernels=_kernels(_FLOAT, _FLOAT),
          multithreaded=True, gradient=_gradient("softmax_grad"), min_inputs=1, max_inputs=1),
    OpDef("SoftmaxGrad", _infer_grad_pair, _flops_per_output(4), kernels=_kernels(_FLOAT, _FLOAT),
          multithreaded=True, min_inputs=2, max_inputs=2),
    # Linear algebra and reductions.
    OpDef("MatMul", _infer_matmul, _flops_matmul, multithreaded=True,
          gradient=_gradient("matmul_grad"), min_inputs=2, max_inputs=2),
    OpDef("Sum", _infer_reduce, _flops_per_input(1), multithreaded=True,
          gradient=_gradient("sum_grad"), min_inputs=1, max_inputs=1),
    OpDef("Mean", _infer_reduce, _flops_per_input(1), multithreaded=True,
          gradient=_gradient("mean_grad"), min_inputs=1, max_inputs=1),
    # Data movement.
    OpDef("BroadcastTo", _infer_broadcast_to, gradient=_gradient("broadcast_to_grad"),
          min_inputs=1, max_inputs=1),
    OpDef("Reshape", _infer_reshape, gradient=_gradient("reshape_grad"), min_inputs=1, max_inputs=1),
    OpDef("Transpose", _infer_transpose, gradient=_gradient("transpose_grad"),
          min_inputs=1, max_inputs=1),
    OpDef("Concat", _infer_concat, gradient=_gradient("concat_grad"), min_inputs=1, max_inputs=None),
    OpDef("Slice", _infer_slice, min_inputs=1, max_inputs=1),
)


class UnknownOpType(KeyError):
    """An op type the table does not have."""

    def __init__(self, op_type: str):
        self.op_type = op_type
        super().__init__(f"unknown op type {op_type!r}; known: {sorted(OPS)}")

    def __str__(self) -> str:
        return self.args[0]


def get_op_def(op_type: str) -> OpDef:
    """The :class:`OpDef` of ``op_type``; raises :class:`UnknownOpType`."""
    try:
        return OPS[op_type]
    except KeyError:
        raise UnknownOpType(op_type) from None


def has_kernel(op_type: str, device_type: str, dtype: str | DType | None) -> bool:
    """Whether ``device_type`` has a kernel for ``op_type`` on ``dtype`` (None: any)."""
    allowed = get_op_def(op_type).kernels.get(device_type.upper())
    if allowed is None:
        return False
    return dtype is None or as_dtype(dtype).name in allowed


def kernel_device_types(op_type: str) -> list[str]:
    """Device types with a kernel for ``op_type`` (for any dtype), sorted."""
    return sorted(t for t, dtypes in get_op_def(op_type).kernels.items() if dtypes)

