"""The machinery of the op table: :class:`OpDef`, :class:`TensorSpec`, and the shape,
flops and kernel helpers that the op families (:mod:`core.ops` and the ``core.ops_*``
modules) describe their ops with.  No op is defined here; :mod:`core.ops` holds the table.
"""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass, field
from typing import Callable, NamedTuple, Sequence

from core.dtypes import DType, as_dtype
from core.gemm import MIN_ROWS_PER_BLOCK, product_dims

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


class UnknownDimension(ShapeError):
    """A cost needs a dimension that is unknown until run time and that no shape hint
    (:class:`core.shapes.ShapeHints`) states.  ``op`` names the op whose cost needs it
    and ``tensor`` the tensor (either may be None when not known where it is raised);
    ``shape`` is the tensor's static shape."""

    def __init__(self, op: str | None, tensor: str | None, shape):
        self.op, self.tensor, self.shape = op, tensor, tuple(shape)
        what = f"tensor {tensor!r}" if tensor else "a tensor"
        need = f"the cost of op {op!r} needs {what}" if op else f"a cost needs {what}"
        super().__init__(
            f"{need} of shape {self.shape}, whose dimensions are unknown until run time: "
            "state them with core.shapes.ShapeHints (batch=N, or a shape per placeholder) "
            "on the cost model (cost_model.with_shape_hints(...)), or a workload's batch=")


def known_shape(shape: Shape) -> Shape:
    """``shape`` when every dimension is known (what a cost figure needs); raises
    :class:`UnknownDimension` otherwise (a cost model resolves unknown dimensions from
    the user's :class:`core.shapes.ShapeHints` before asking)."""
    if any(d is None for d in shape):
        raise UnknownDimension(None, None, shape)
    return tuple(shape)


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


def same_dtype(specs: Sequence[TensorSpec]) -> DType:
    dtypes = {s.dtype for s in specs}
    if len(dtypes) > 1:
        raise ShapeError(f"inputs must share one dtype, got {sorted(d.name for d in dtypes)}")
    return specs[0].dtype


def normalize_axis(axis, rank: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(rank))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    out = []
    for a in axes:
        if not -rank <= a < max(rank, 1):
            raise ShapeError(f"axis {a} is out of range for a tensor of rank {rank}")
        out.append(a % rank if rank else 0)
    return tuple(sorted(set(out)))


def infer_unary(ins, attrs):
    return [TensorSpec(ins[0].dtype, ins[0].shape)]


def infer_float_unary(ins, attrs):
    if not ins[0].dtype.is_floating:
        raise ShapeError(f"needs a floating-point input, got {ins[0].dtype.name}")
    return infer_unary(ins, attrs)


def infer_binary(ins, attrs):
    dtype = same_dtype(ins)
    return [TensorSpec(dtype, broadcast_shapes(ins[0].shape, ins[1].shape))]


def infer_grad_pair(ins, attrs):
    """Elementwise gradient ops (y, g) or (g, x): both inputs of one shape."""
    dtype = same_dtype(ins)
    return [TensorSpec(dtype, broadcast_shapes(ins[0].shape, ins[1].shape))]


def infer_matmul(ins, attrs):
    a, b = ins
    dtype = same_dtype(ins)
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise ShapeError(f"matmul needs two matrices, got shapes {a.shape} and {b.shape}")
    m, k1 = a.shape[::-1] if attrs.get("transpose_a") else a.shape
    k2, n = b.shape[::-1] if attrs.get("transpose_b") else b.shape
    if k1 is not None and k2 is not None and k1 != k2:
        raise ShapeError(f"matmul inner dimensions differ: {a.shape} @ {b.shape}"
                         f" (transpose_a={bool(attrs.get('transpose_a'))},"
                         f" transpose_b={bool(attrs.get('transpose_b'))})")
    return [TensorSpec(dtype, (m, n))]


def infer_reduce(ins, attrs):
    x = ins[0]
    if "axis" not in attrs and len(ins) == 2:  # TF's axis input, known at run time
        if not attrs.get("keepdims"):
            raise ShapeError("a reduction over axes known only at run time needs "
                             "keepdims=True (its rank would be unknown)")
        if not ins[1].dtype.is_integer or len(ins[1].shape) > 1:
            raise ShapeError(f"reduction axes must be an int vector, got {ins[1].dtype.name} "
                             f"{ins[1].shape}")
        return [TensorSpec(x.dtype, (None,) * len(x.shape))]
    axes = normalize_axis(attrs.get("axis"), len(x.shape))
    if attrs.get("keepdims"):
        shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    else:
        shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
    return [TensorSpec(x.dtype, shape)]


def infer_assign(ins, attrs):
    ref, value = ins
    if ref.dtype != value.dtype:
        raise ShapeError(f"cannot assign a {value.dtype.name} value to a {ref.dtype.name} variable")
    if broadcast_shapes(ref.shape, value.shape) != tuple(ref.shape):
        raise ShapeError(f"cannot assign a value of shape {value.shape} to a variable of shape {ref.shape}")
    return [TensorSpec(ref.dtype, ref.shape)]


def infer_source(ins, attrs):
    return [TensorSpec(as_dtype(attrs["dtype"]), tuple(attrs["shape"]))]


def _run_time_shape(ins, attrs, op: str) -> Shape | None:
    """The output shape of an op that takes its ``shape`` as attr or, as TensorFlow does,
    as an int vector input 1 known only at run time (then: that many unknown dims)."""
    if "shape" in attrs:
        return None
    if len(ins) < 2:
        raise ShapeError(f"{op} needs a 'shape' attr or a shape tensor as input 1")
    return shape_from_tensor(ins[1], attrs, op)


def shape_from_tensor(spec: TensorSpec, attrs, op: str) -> Shape:
    """The static output shape of an op whose shape is the run-time int vector ``spec``:
    unknown dimensions, except those that the op's ``_output_shapes`` attr states (the
    attr TensorFlow writes into a GraphDef with the shapes it inferred; a builder that
    knows ``Shape(x)``'s static part, ``x``'s known dimensions, records it there)."""
    if not spec.dtype.is_integer or len(spec.shape) != 1 or spec.shape[0] is None:
        raise ShapeError(f"{op}'s shape tensor must be an integer vector of known length, "
                         f"got {spec.dtype.name} {spec.shape}")
    stated = attrs.get("_output_shapes")
    if stated and len(stated[0]) == spec.shape[0]:
        return tuple(None if d is None or d < 0 else int(d) for d in stated[0])
    return (None,) * spec.shape[0]


def infer_broadcast_to(ins, attrs):
    run_time = _run_time_shape(ins, attrs, "BroadcastTo")
    if run_time is not None:
        if len(run_time) < len(ins[0].shape):
            raise ShapeError(f"cannot broadcast shape {ins[0].shape} to rank {len(run_time)}")
        return [TensorSpec(ins[0].dtype, run_time)]
    shape = tuple(attrs["shape"])
    if broadcast_shapes(ins[0].shape, shape) != shape:
        raise ShapeError(f"cannot broadcast shape {ins[0].shape} to {shape}")
    return [TensorSpec(ins[0].dtype, shape)]


def infer_reshape(ins, attrs):
    run_time = _run_time_shape(ins, attrs, "Reshape")
    if run_time is not None:
        return [TensorSpec(ins[0].dtype, run_time)]
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


def infer_transpose(ins, attrs):
    perm = tuple(attrs["perm"])
    if sorted(perm) != list(range(len(ins[0].shape))):
        raise ShapeError(f"perm {perm} is not a permutation of the {len(ins[0].shape)} axes")
    return [TensorSpec(ins[0].dtype, tuple(ins[0].shape[p] for p in perm))]


def infer_concat(ins, attrs):
    dtype = same_dtype(ins)
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


def infer_slice(ins, attrs):
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


def infer_none(ins, attrs):
    return []


# --- costs -----------------------------------------------------------------------------

def flops_per_output(k: float):
    def flops(ins, outs, attrs):
        return k * sum(num_elements(known_shape(o.shape)) for o in outs)
    return flops


def flops_per_input(k: float):
    def flops(ins, outs, attrs):
        return k * num_elements(known_shape(ins[0].shape))
    return flops


def flops_matmul(ins, outs, attrs):
    a = known_shape(ins[0].shape)
    k = a[0] if attrs.get("transpose_a") else a[1]
    m, n = known_shape(outs[0].shape)
    return 2.0 * m * n * k


def no_flops(ins, outs, attrs):
    return 0.0


# --- kernels ---------------------------------------------------------------------------

NUMERIC = frozenset({"float32", "float64", "int32", "int64"})
FLOAT = frozenset({"float32", "float64"})
GPU_NO_INT32 = NUMERIC - {"int32"}  # TensorFlow has no int32 GPU kernel for variables


def kernels_for(cpu=NUMERIC, gpu=NUMERIC) -> dict[str, frozenset[str]]:
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
    forwards_input : output 0 is input 0's buffer, as TensorFlow forwards it (a
        variable's read, Identity, Reshape, StopGradient): on the input's device it
        allocates nothing, and the input's buffer lives as long as either is read.
    tf_type : TensorFlow's op type name when it differs from ours (``"AddV2"`` for
        ``"Add"``): a GraphDef export writes it, and :func:`core.ops.get_op_def` and the
        builders accept it as another spelling.  Ops added since take TensorFlow's name
        as their type and leave this None.
    const_inputs : ``(TensorFlow input position, our attr name)`` for each argument that
        TensorFlow takes as a constant tensor input and this table keeps as a static
        attr (Reshape's ``shape``, Conv2DBackpropInput's ``input_sizes``); a negative
        position counts from the end (ConcatV2's axis is its last input).  The GraphDef
        importer folds such inputs into attrs and the exporter writes them back out.
    window_copies : ``(input specs, output specs, attrs) -> (taps, elements)`` for a
        kernel that gathers windows of its input one tap at a time (a convolution's
        im2col and col2im): how many taps it copies, and how many elements in all.  A
        copy of a few channels costs more than its bytes (``runtime.calibrate.
        measure_window_copy_costs``); a device's ``window_copy_costs`` prices them.
        None for every other op.
    """

    type: str
    infer: Callable
    flops: Callable = no_flops
    kernels: dict = field(default_factory=kernels_for)
    multithreaded: bool = False
    stateful: bool = False
    ref_inputs: tuple[int, ...] = ()
    persistent: bool = False
    gradient: Callable | None = None
    min_inputs: int = 0
    max_inputs: int | None = 0
    forwards_input: bool = False
    tf_type: str | None = None
    const_inputs: tuple[tuple[int, str], ...] = ()
    window_copies: Callable | None = None

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
        return sum(nbytes(TensorSpec(s.dtype, known_shape(s.shape))) for s in inputs)

    def bytes_written(self, outputs: Sequence[TensorSpec], attrs) -> int:
        """Bytes the kernel writes to device memory."""
        if self.persistent or self.type in ("Const", "Placeholder", "NoOp"):
            return 0  # the value already exists: fed, stored in the graph or resident
        return sum(nbytes(TensorSpec(s.dtype, known_shape(s.shape))) for s in outputs)

    def splits(self, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec], attrs,
               min_elements: int, products_split: bool = True) -> bool:
        """Whether the kernel may split its work over the intra-op pool on these tensors,
        so that it takes the pool's cores: a multithreaded kernel whose largest tensor
        has at least ``min_elements`` elements (a device's ``parallel_min_elements``;
        0 or less: any size), or whose arithmetic reaches :data:`SPLIT_MIN_MACS`
        multiply-adds (a product splits its rows by arithmetic, not by size), or whose
        sizes are unknown.  Below that the kernel runs on one core, and an executor that
        took the whole pool for it kept the other inter-op threads' kernels waiting for
        nothing.  The executor and the simulator both decide an op's cores by this.
        ``products_split`` False (a device whose process fixed its BLAS at one thread,
        ``Device.products_split``): a float product of :data:`BLAS_PRODUCTS` is one gemm
        call on one core, whatever its size.

        >>> from core.ops import get_op_def, TensorSpec
        >>> from core.dtypes import float32
        >>> small, big = TensorSpec(float32, (64, 64)), TensorSpec(float32, (2048, 2048))
        >>> mul = get_op_def("Mul")
        >>> mul.splits([small, small], [small], {}, 1 << 21)
        False
        >>> mul.splits([big, big], [big], {}, 1 << 21)
        True
        >>> get_op_def("MatMul").splits([TensorSpec(float32, (512, 512))] * 2,
        ...                             [TensorSpec(float32, (512, 512))], {}, 1 << 21)
        True
        >>> few_rows = [TensorSpec(float32, (64, 2048)), TensorSpec(float32, (2048, 2048))]
        >>> get_op_def("MatMul").splits(few_rows, [TensorSpec(float32, (64, 2048))], {}, 1 << 21)
        False
        >>> get_op_def("MatMul").splits([TensorSpec(float32, (512, 512))] * 2,
        ...     [TensorSpec(float32, (512, 512))], {}, 1 << 21, products_split=False)
        False
        """
        if not self.multithreaded:
            return False
        if (not products_split and self.type in BLAS_PRODUCTS and inputs
                and inputs[0].dtype.is_floating):
            return False
        if min_elements <= 0:
            return True
        largest = 0
        for spec in (*inputs, *outputs):
            if any(d is None for d in spec.shape):
                return True
            largest = max(largest, math.prod(spec.shape))
        big_product = self.flops(inputs, outputs, attrs) >= 2 * SPLIT_MIN_MACS
        if self.type == "MatMul" and inputs[0].dtype.is_floating:
            # The CPU kernel splits a float product by row blocks of at least
            # MIN_ROWS_PER_BLOCK rows, and only a big one, whatever its tensors' sizes
            # (runtime.kernels.cpu.matmul): with fewer rows it is one gemm on one core.
            rows = product_dims(inputs[0].shape, inputs[1].shape, attrs)[0]
            return big_product and rows >= 2 * MIN_ROWS_PER_BLOCK
        if self.type in CONVOLUTIONS and inputs[0].dtype.is_floating:
            return big_product and _convolution_splits(self.type, inputs, outputs, attrs)
        return largest >= min_elements or big_product


#: A product's kernel (MatMul, BatchMatMulV2, the convolutions) splits its rows over
#: the intra-op pool from this many multiply-adds (the CPU kernels' own threshold,
#: ``runtime.kernels.cpu.GEMM_PARALLEL_MIN_MACS``, is this figure).
SPLIT_MIN_MACS = 1 << 24

#: The convolutions, whose CPU kernels split a big float product by images, or by rows
#: for a 1 x 1 window (:func:`_convolution_splits`).
CONVOLUTIONS = frozenset({"Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter"})


def _convolution_splits(op_type: str, inputs, outputs, attrs) -> bool:
    """Whether a big float convolution's CPU kernel splits (``runtime.kernels.cpu_nn``):
    by blocks of images, so with at least two; a 1 x 1 window at stride 1 is one
    product, split by rows (two blocks of :data:`core.gemm.MIN_ROWS_PER_BLOCK` rows of
    ``images x output pixels``) for the forward and input-gradient kernels, and never
    for the filter gradient's.  A batch-1 convolution used to take the whole pool and
    run on one core of it."""
    if op_type == "Conv2D":
        window, images, pixels = inputs[1].shape, inputs[0].shape, outputs[0].shape
    elif op_type == "Conv2DBackpropInput":
        window, images, pixels = inputs[0].shape, inputs[1].shape, inputs[1].shape
    else:
        window, images, pixels = outputs[0].shape, inputs[0].shape, inputs[1].shape
    strides = tuple(attrs.get("strides") or (1, 1, 1, 1))
    pointwise = tuple(window[:2]) == (1, 1) and tuple(strides[1:3]) == (1, 1)
    if not pointwise:
        return images[0] >= 2
    if op_type == "Conv2DBackpropFilter":
        return False
    return pixels[0] * pixels[1] * pixels[2] >= 2 * MIN_ROWS_PER_BLOCK


#: The ops whose CPU kernels compute a float product by BLAS gemm calls, split over the
#: intra-op pool only where the process left the BLAS's threads to the kernels
#: (``runtime.kernels.cpu.products_split``).
BLAS_PRODUCTS = CONVOLUTIONS | {"MatMul"}


def lazy_gradient(name: str, module: str = "core.autodiff"):
    """Look up the gradient function ``name`` in ``module`` lazily (gradient functions
    build ops with core.graph, which imports this table)."""
    def grad(op, grads):
        return getattr(importlib.import_module(module), name)(op, grads)
    grad.__name__ = name
    return grad


def table(*defs: OpDef) -> dict[str, OpDef]:
    return {d.type: d for d in defs}


