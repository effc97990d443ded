"""The op table's training ops: TensorFlow's fused optimizer updates, as ``tf.compat.v1``
writes them into a GraphDef (``ApplyGradientDescent``, ``ApplyMomentum``, ``ApplyAdam``).

Each takes its variable and the optimizer's slots (momentum's accumulator, Adam's ``m``
and ``v``) by reference (``ref_inputs``), updates them in place and returns the variable,
as TensorFlow's ops do; the graph colocates the op with every ref input's variable.  The
hyper-parameters are scalar tensors of the variable's dtype.  :mod:`core.ops` merges
this family into ``OPS``; :mod:`core.train` builds them.

>>> from core.opdef import TensorSpec
>>> from core.dtypes import float32
>>> var, s = TensorSpec(float32, (3, 4)), TensorSpec(float32, ())
>>> TRAIN_OPS["ApplyGradientDescent"].infer([var, s, var], {})
[TensorSpec(dtype=core.float32, shape=(3, 4))]
>>> TRAIN_OPS["ApplyAdam"].flops([var, var, var] + [s] * 6 + [var], [var], {})
144
"""

from __future__ import annotations

from core.opdef import FLOAT, OpDef, ShapeError, TensorSpec, flops_per_output, kernels_for, table

__all__ = ["TRAIN_OPS"]


def _infer_apply(n_refs: int, scalars: tuple[int, ...], grad: int):
    """Shape inference of an Apply op: ``n_refs`` ref inputs of the variable's shape and
    dtype, scalar hyper-parameters at positions ``scalars``, the gradient at ``grad``."""
    def infer(ins, attrs):
        var = ins[0]
        if not var.dtype.is_floating:
            raise ShapeError(f"needs a floating-point variable, got {var.dtype.name}")
        for i, spec in enumerate(ins):
            if spec.dtype != var.dtype:
                raise ShapeError(f"input {i} is {spec.dtype.name}, the variable {var.dtype.name}")
        for i in (*range(1, n_refs), grad):
            if not _compatible(ins[i].shape, var.shape):
                raise ShapeError(f"input {i} has shape {ins[i].shape}, the variable {var.shape}")
        for i in scalars:
            if len(ins[i].shape) != 0:
                raise ShapeError(f"input {i} must be a scalar, got shape {ins[i].shape}")
        return [TensorSpec(var.dtype, var.shape)]
    return infer


def _compatible(a, b) -> bool:
    return len(a) == len(b) and all(x is None or y is None or x == y for x, y in zip(a, b))


TRAIN_OPS: dict[str, OpDef] = table(
    # var -= alpha * delta
    OpDef("ApplyGradientDescent", _infer_apply(1, (1,), 2), flops_per_output(2),
          kernels=kernels_for(FLOAT, FLOAT), multithreaded=False, stateful=True, ref_inputs=(0,),
          min_inputs=3, max_inputs=3),
    # accum = accum * momentum + grad; var -= lr * accum (Nesterov: lr * (grad + momentum * accum))
    OpDef("ApplyMomentum", _infer_apply(2, (2, 4), 3), flops_per_output(5),
          kernels=kernels_for(FLOAT, FLOAT), stateful=True, ref_inputs=(0, 1),
          min_inputs=5, max_inputs=5),
    # Adam (Kingma & Ba, 2015) as TensorFlow's kernel: lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t);
    # m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2; var -= lr_t m / (sqrt(v) + eps)
    OpDef("ApplyAdam", _infer_apply(3, (3, 4, 5, 6, 7, 8), 9), flops_per_output(12),
          kernels=kernels_for(FLOAT, FLOAT), stateful=True, ref_inputs=(0, 1, 2),
          min_inputs=10, max_inputs=10),
)
