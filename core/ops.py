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

from core.dtypes import DType, as_dtype, float32  # noqa: F401  (float32: doctest)
from core.opdef import (FLOAT, GPU_NO_INT32, NUMERIC, OpDef, Shape, ShapeError,  # noqa: F401
                        TensorSpec, flops_matmul, flops_per_input, flops_per_output,
                        lazy_gradient, infer_assign, infer_binary, infer_broadcast_to,
                        infer_concat, infer_float_unary, infer_grad_pair, infer_matmul,
                        infer_none, infer_reduce, infer_reshape, infer_slice,
                        infer_source, infer_transpose, infer_unary, kernels_for, known_shape,
                        table, broadcast_shapes, nbytes, num_elements)

__all__ = ["OpDef", "OPS", "TensorSpec", "ShapeError", "get_op_def", "canonical_op_type",
           "TF_SPELLINGS", "has_kernel",
           "kernel_device_types", "num_elements", "nbytes", "broadcast_shapes"]

OPS: dict[str, OpDef] = table(
    # Sources.
    OpDef("Const", infer_source, kernels=kernels_for()),
    OpDef("Placeholder", infer_source),
    OpDef("Variable", infer_source, tf_type="VariableV2", kernels=kernels_for(gpu=GPU_NO_INT32), stateful=True,
          persistent=True),
    OpDef("NoOp", infer_none, min_inputs=0, max_inputs=0),
    # State changes: output 0 aliases the variable.
    OpDef("Assign", infer_assign, kernels=kernels_for(gpu=GPU_NO_INT32), stateful=True,
          ref_inputs=(0,), min_inputs=2, max_inputs=2),
    OpDef("AssignAdd", infer_assign, flops_per_output(1), kernels=kernels_for(gpu=GPU_NO_INT32),
          stateful=True, ref_inputs=(0,), min_inputs=2, max_inputs=2),
    OpDef("AssignSub", infer_assign, flops_per_output(1), kernels=kernels_for(gpu=GPU_NO_INT32),
          stateful=True, ref_inputs=(0,), min_inputs=2, max_inputs=2),
    # Elementwise.
    OpDef("Identity", infer_unary, forwards_input=True, gradient=lazy_gradient("identity_grad"), min_inputs=1, max_inputs=1),
    OpDef("Neg", infer_unary, flops_per_output(1), gradient=lazy_gradient("neg_grad"),
          min_inputs=1, max_inputs=1),
    OpDef("Add", infer_binary, flops_per_output(1), tf_type="AddV2", multithreaded=True,
          gradient=lazy_gradient("add_grad"), min_inputs=2, max_inputs=2),
    OpDef("Sub", infer_binary, flops_per_output(1), multithreaded=True,
          gradient=lazy_gradient("sub_grad"), min_inputs=2, max_inputs=2),
    OpDef("Mul", infer_binary, flops_per_output(1), multithreaded=True,
          gradient=lazy_gradient("mul_grad"), min_inputs=2, max_inputs=2),
    OpDef("Relu", infer_unary, flops_per_output(1), multithreaded=True,
          gradient=lazy_gradient("relu_grad"), min_inputs=1, max_inputs=1),
    OpDef("ReluGrad", infer_grad_pair, flops_per_output(2), multithreaded=True,
          min_inputs=2, max_inputs=2),
    OpDef("Tanh", infer_float_unary, flops_per_output(6), kernels=kernels_for(FLOAT, FLOAT),
          multithreaded=True, gradient=lazy_gradient("tanh_grad"), min_inputs=1, max_inputs=1),
    OpDef("TanhGrad", infer_grad_pair, flops_per_output(3), kernels=kernels_for(FLOAT, FLOAT),
          multithreaded=True, min_inputs=2, max_inputs=2),
    OpDef("Sigmoid", infer_float_unary, flops_per_output(6), kernels=kernels_for(FLOAT, FLOAT),
          multithreaded=True, gradient=lazy_gradient("sigmoid_grad"), min_inputs=1, max_inputs=1),
    OpDef("SigmoidGrad", infer_grad_pair, flops_per_output(3), kernels=kernels_for(FLOAT, FLOAT),
          multithreaded=True, min_inputs=2, max_inputs=2),
    OpDef("Softmax", infer_float_unary, flops_per_output(5), kernels=kernels_for(FLOAT, FLOAT),
          multithreaded=True, gradient=lazy_gradient("softmax_grad"), min_inputs=1, max_inputs=1),
    OpDef("SoftmaxGrad", infer_grad_pair, flops_per_output(4), kernels=kernels_for(FLOAT, FLOAT),
          multithreaded=True, min_inputs=2, max_inputs=2),
    # Linear algebra and reductions.
    OpDef("MatMul", infer_matmul, flops_matmul, multithreaded=True,
          gradient=lazy_gradient("matmul_grad"), min_inputs=2, max_inputs=2),
    # (Sum and Mean also take TF's axis input at run time, with keepdims: the reduction
    # of a gradient over the axes broadcasting stretched, BroadcastGradientArgs' output)
    OpDef("Sum", infer_reduce, flops_per_input(1), const_inputs=((1, "axis"),), multithreaded=True,
          gradient=lazy_gradient("sum_grad"), min_inputs=1, max_inputs=2),
    OpDef("Mean", infer_reduce, flops_per_input(1), const_inputs=((1, "axis"),), multithreaded=True,
          gradient=lazy_gradient("mean_grad"), min_inputs=1, max_inputs=2),
    # Data movement.
    # BroadcastTo and Reshape take their shape as an attr, or (TF's input 1) as an int
    # vector tensor computed at run time (a Shape op's output: unknown dimensions).
    OpDef("BroadcastTo", infer_broadcast_to, const_inputs=((1, "shape"),), gradient=lazy_gradient("broadcast_to_grad"),
          min_inputs=1, max_inputs=2),
    OpDef("Reshape", infer_reshape, forwards_input=True, const_inputs=((1, "shape"),),
          gradient=lazy_gradient("reshape_grad"), min_inputs=1, max_inputs=2),
    OpDef("Transpose", infer_transpose, const_inputs=((1, "perm"),), gradient=lazy_gradient("transpose_grad"),
          min_inputs=1, max_inputs=1),
    OpDef("Concat", infer_concat, tf_type="ConcatV2", const_inputs=((-1, "axis"),), gradient=lazy_gradient("concat_grad"), min_inputs=1, max_inputs=None),
    OpDef("Slice", infer_slice, const_inputs=((1, "begin"), (2, "size")), min_inputs=1, max_inputs=1),
)


def _merge_families() -> None:
    """Add the op families' tables to ``OPS``; an op type defined twice is an error."""
    from core.ops_math import MATH_OPS
    from core.ops_nn import NN_OPS
    from core.ops_train import TRAIN_OPS
    for family in (MATH_OPS, NN_OPS, TRAIN_OPS):
        twice = sorted(set(family) & set(OPS))
        if twice:
            raise ValueError(f"op types defined twice in the op table: {twice}")
        OPS.update(family)


_merge_families()


class UnknownOpType(KeyError):
    """An op type the table does not have."""

    def __init__(self, op_type: str):
        self.op_type = op_type
        super().__init__(f"unknown op type {op_type!r}; known: {sorted(OPS)}")

    def __str__(self) -> str:
        return self.args[0]


def _tf_spellings() -> dict[str, str]:
    """TensorFlow's op type name -> ours, for the ops whose names differ."""
    return {d.tf_type: d.type for d in OPS.values() if d.tf_type and d.tf_type != d.type}


#: TensorFlow's spelling of an op type -> the table's (``"AddV2" -> "Add"``).
TF_SPELLINGS: dict[str, str] = _tf_spellings()


def canonical_op_type(op_type: str) -> str:
    """The table's name for ``op_type``, which may be TensorFlow's spelling.

    >>> canonical_op_type("AddV2"), canonical_op_type("Add")
    ('Add', 'Add')
    """
    return TF_SPELLINGS.get(op_type, op_type)


def get_op_def(op_type: str) -> OpDef:
    """The :class:`OpDef` of ``op_type`` (the table's name or TensorFlow's spelling);
    raises :class:`UnknownOpType`."""
    try:
        return OPS[op_type]
    except KeyError:
        try:
            return OPS[TF_SPELLINGS[op_type]]
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

