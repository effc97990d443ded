"""Reverse-mode differentiation over the op set: :func:`gradients`.

Each differentiable op's :class:`core.ops.OpDef` points at one function here,
``<name>_grad(op, grads) -> [grad of each input]`` (None for an input that gets none).
Gradient ops are built in a ``gradients`` name scope under the device scopes active at
the call (TensorFlow's default, ``colocate_gradients_with_ops=False``).

>>> from core import builders as tf
>>> g = Graph()
>>> with g.as_default():
...     x = tf.Variable([[1.0, 2.0]], name="x")
...     loss = tf.reduce_sum(x * x)
...     (dx,) = gradients(loss, [x])
>>> dx.shape
(1, 2)
"""

from __future__ import annotations

import contextlib
from typing import Sequence

from core import builders as b
from core import builders_math as m
from core.graph import Graph, GraphError, Operation, Tensor, topological_order

__all__ = ["gradients"]


def gradients(ys, xs, grad_ys=None, name: str = "gradients",
              colocate_gradients_with_ops: bool = False) -> list[Tensor | None]:
    """Symbolic gradients of ``sum(ys)`` with respect to each of ``xs``.

    ``ys`` and ``xs`` are tensors (or variables: a variable's gradient is taken at its
    value); ``grad_ys`` defaults to ones.  An ``x`` that ``ys`` does not depend on gets
    None, as in TensorFlow.  With ``colocate_gradients_with_ops``, the ops that
    differentiate a forward op are colocated with it (TensorFlow's rule, how TF 1.x
    users write model parallelism: each layer's backward pass runs where its forward
    pass runs); otherwise they take the device scopes active at the call.

    >>> from core import builders as tf
    >>> g = Graph()
    >>> with g.as_default():
    ...     x = tf.Variable([[1.0, 2.0]], name="x")
    ...     with tf.device("/gpu:1"):
    ...         y = tf.tanh(x)
    ...     (dx,) = gradients(tf.reduce_sum(y), [x], colocate_gradients_with_ops=True)
    >>> dx.op.type, dx.op.colocation_groups()
    ('TanhGrad', ['loc:@Tanh'])
    """
    ys = _as_list(ys)
    xs = _as_list(xs)
    ys = [b.convert_to_tensor(y) for y in ys]
    xs = [x.ref if isinstance(x, b.Variable) else b.convert_to_tensor(x) for x in xs]
    graph: Graph = ys[0].graph
    grad_ys = [None] * len(ys) if grad_ys is None else _as_list(grad_ys)

    between = _ops_between([x.op for x in xs], [y.op for y in ys])
    between_names = {op.name for op in between}
    with graph.name_scope(name):
        pending: dict[Tensor, list[Tensor]] = {}
        for y, gy in zip(ys, grad_ys):
            if gy is None and any(d is None for d in y.shape):
                gy = m.ones_like(y, name=f"grad_ys_{ys.index(y)}")  # shaped at run time
            elif gy is None:
                gy = b.constant(1.0, dtype=y.dtype, shape=y.shape, name=f"grad_ys_{ys.index(y)}")
            pending.setdefault(y, []).append(b.convert_to_tensor(gy))

        for op in reversed(topological_order(between)):
            out_grads = [_sum(pending.get(t)) for t in op.outputs]
            if all(g is None for g in out_grads) or op.op_def.gradient is None:
                continue
            with graph.name_scope(f"{op.name}_grad"), _colocated(graph, op,
                                                                 colocate_gradients_with_ops):
                in_grads = op.op_def.gradient(op, out_grads)
            for t, g in zip(op.inputs, in_grads):
                if g is not None and t.op.name in between_names:
                    pending.setdefault(t, []).append(g)
        return [_sum(pending.get(x)) for x in xs]


def _colocated(graph: Graph, op: Operation, colocate: bool):
    """``graph.colocate_with(op)`` when ``colocate``, else a scope that changes nothing."""
    return graph.colocate_with(op) if colocate else contextlib.nullcontext()


def _as_list(v) -> list:
    return list(v) if isinstance(v, (list, tuple)) else [v]


def _sum(grads: list[Tensor] | None) -> Tensor | None:
    """The sum of a tensor's gradients, one ``AddN`` as TensorFlow builds it."""
    if not grads:
        return None
    if len(grads) == 1:
        return grads[0]
    total = m.add_n(grads, name="AddN")
    grads[:] = [total]  # accumulate once even if asked again
    return total


def _ops_between(from_ops: Sequence[Operation], to_ops: Sequence[Operation]) -> list[Operation]:
    """Ops reachable forward from ``from_ops`` that also lead to ``to_ops`` (data edges)."""
    forward: set[str] = set()
    stack = list(from_ops)
    while stack:
        op = stack.pop()
        if op.name in forward:
            continue
        forward.add(op.name)
        for t in op.outputs:
            stack.extend(t.consumers())
    result: dict[str, Operation] = {}
    stack = [op for op in to_ops if op.name in forward]
    while stack:
        op = stack.pop()
        if op.name in result:
            continue
        result[op.name] = op
        stack.extend(t.op for t in op.inputs if t.op.name in forward)
    order = {op.name: i for i, op in enumerate(to_ops[0].graph.get_operations())} if to_ops else {}
    return sorted(result.values(), key=lambda op: order[op.name])


# --- helpers -----------------------------------------------------------------------------

def _may_stretch(a: tuple, b: tuple) -> bool:
    """Whether broadcasting shapes ``a`` and ``b`` may stretch an unknown dimension at run
    time: an unknown length against one that is not a static 1 (it may be 1 itself)."""
    for i in range(1, min(len(a), len(b)) + 1):
        da, db = a[-i], b[-i]
        if (da is None and db != 1) or (db is None and da != 1):
            return True
    return False


def unbroadcast_pair(x: Tensor, y: Tensor, gx: Tensor | None, gy: Tensor | None,
                     x_shape: tuple | None = None, y_shape: tuple | None = None,
                     shapes: tuple[Tensor, Tensor] | None = None) -> list:
    """The gradients ``gx``, ``gy`` of a broadcasting binary op summed back to the shapes
    of its operands ``x`` and ``y`` (None stays None).  With static shapes that decide
    it, a static sum; when an unknown dimension may have been stretched, TensorFlow's
    way: ``BroadcastGradientArgs(Shape(x), Shape(y))`` gives the axes to sum at run time.
    ``x_shape``/``y_shape`` and ``shapes`` (their run-time tensors) name the broadcast
    part when it is not the whole shape (BatchMatMul's batch axes)."""
    xs = tuple(x.shape) if x_shape is None else x_shape
    ys = tuple(y.shape) if y_shape is None else y_shape
    if not _may_stretch(xs, ys):
        return [None if gx is None else _unbroadcast(gx, x.shape, like=x),
                None if gy is None else _unbroadcast(gy, y.shape, like=y)]
    sx, sy = shapes if shapes is not None else (m.shape(x), m.shape(y))
    rx, ry = m.broadcast_gradient_args(sx, sy)
    return [None if gx is None else m.sum_to_like(gx, rx, x),
            None if gy is None else m.sum_to_like(gy, ry, y)]


def _unbroadcast(grad: Tensor, shape: tuple, like: Tensor | None = None) -> Tensor:
    """Sum ``grad`` over the axes that broadcasting added or stretched, back to ``shape``
    (the shape of ``like``, which gives it at run time when it has unknown dimensions).

    An unknown dimension is taken not to have been stretched (as the shape inference of
    broadcasting takes it): only a static 1 against a larger or unknown length is."""
    if tuple(grad.shape) == tuple(shape):
        return grad
    lead = len(grad.shape) - len(shape)
    axes = list(range(lead))
    axes += [lead + i for i, d in enumerate(shape) if d == 1 and grad.shape[lead + i] != 1]
    reduced = b.reduce_sum(grad, axis=axes, keepdims=True) if axes else grad
    if tuple(shape).count(None) > 1:
        if like is None:
            raise GraphError(f"cannot reshape the gradient {grad.name} to shape {tuple(shape)} "
                             "with several unknown dimensions")
        return m.reshape_like(reduced, like)
    return b.reshape(reduced, [-1 if d is None else d for d in shape])


# --- one function per differentiable op (named in core.ops) ---------------------------------

def identity_grad(op, grads):
    return [grads[0]]


def neg_grad(op, grads):
    return [b.negative(grads[0])]


def add_grad(op, grads):
    x, y = op.inputs
    return unbroadcast_pair(x, y, grads[0], grads[0])


def sub_grad(op, grads):
    x, y = op.inputs
    return unbroadcast_pair(x, y, grads[0], b.negative(grads[0]))


def mul_grad(op, grads):
    x, y = op.inputs
    g = grads[0]
    return unbroadcast_pair(x, y, b.multiply(g, y), b.multiply(g, x))


def matmul_grad(op, grads):
    a, bb = op.inputs
    g = grads[0]
    ta, tb = op.attrs.get("transpose_a", False), op.attrs.get("transpose_b", False)
    if not ta and not tb:
        return [b.matmul(g, bb, transpose_b=True), b.matmul(a, g, transpose_a=True)]
    if not ta and tb:
        return [b.matmul(g, bb), b.matmul(g, a, transpose_a=True)]
    if ta and not tb:
        return [b.matmul(bb, g, transpose_b=True), b.matmul(a, g)]
    return [b.matmul(bb, g, transpose_a=True, transpose_b=True),
            b.matmul(g, a, transpose_a=True, transpose_b=True)]


def relu_grad(op, grads):
    g = op.graph
    return [g.create_op("ReluGrad", [grads[0], op.outputs[0]], name="ReluGrad").outputs[0]]


def tanh_grad(op, grads):
    g = op.graph
    return [g.create_op("TanhGrad", [op.outputs[0], grads[0]], name="TanhGrad").outputs[0]]


def sigmoid_grad(op, grads):
    g = op.graph
    return [g.create_op("SigmoidGrad", [op.outputs[0], grads[0]], name="SigmoidGrad").outputs[0]]


def softmax_grad(op, grads):
    g = op.graph
    return [g.create_op("SoftmaxGrad", [op.outputs[0], grads[0]], name="SoftmaxGrad").outputs[0]]


def _reduced_shape(op) -> tuple:
    x = op.inputs[0]
    axis = op.attrs.get("axis")
    rank = len(x.shape)
    axes = range(rank) if axis is None else [a % rank for a in axis]
    return tuple(1 if i in axes else d for i, d in enumerate(x.shape))


def _kept_shape_tensor(op) -> Tensor:
    """``x``'s run-time shape with the reduced axes set to 1 (TF's reduced_shape)."""
    x = op.inputs[0]
    kept = _reduced_shape(op)
    shape = m.shape(x)
    keep = b.constant([0 if d == 1 and full != 1 else 1 for d, full in zip(kept, x.shape)],
                      dtype=shape.dtype)
    return b.add(b.multiply(shape, keep), b.subtract(1, keep))


def sum_grad(op, grads):
    """The gradient broadcast back over the reduced axes (through ``Shape(x)`` when ``x``
    has unknown dimensions)."""
    x = op.inputs[0]
    g = grads[0]
    if len(op.inputs) == 2:  # axes known at run time (keepdims): g broadcasts to x as it is
        return [m.broadcast_like(g, x), None]
    kept_shape = _reduced_shape(op)
    if None not in x.shape:
        return [b.broadcast_to(b.reshape(g, kept_shape), x.shape)]
    if tuple(g.shape) != kept_shape:  # reduced axes were dropped: put them back as 1s
        if kept_shape.count(None) <= 1:
            g = b.reshape(g, [-1 if d is None else d for d in kept_shape])
        else:
            g = m.reshape_to(g, _kept_shape_tensor(op))
    return [m.broadcast_like(g, x)]


def mean_grad(op, grads):
    x, y = op.inputs[0], op.outputs[0]
    spread = sum_grad(op, grads)[0]
    if None not in x.shape and None not in y.shape:
        count = 1
        for full, kept in zip(x.shape, _reduced_shape(op)):
            count *= full // kept
        return [b.multiply(spread, 1.0 / count)]
    # Elements per mean at run time: Size(x) / max(Size(y), 1), as TensorFlow's _MeanGrad.
    size_x = m.cast(m.size(x), x.dtype)
    size_y = m.maximum(m.cast(m.size(y), x.dtype), b.constant(1, dtype=x.dtype))
    return [m.realdiv(spread, m.realdiv(size_x, size_y))] + [None] * (len(op.inputs) - 1)


def broadcast_to_grad(op, grads):
    x = op.inputs[0]
    return unbroadcast_pair(x, op.outputs[0], grads[0], None)[:1] + [None] * (len(op.inputs) - 1)


def reshape_grad(op, grads):
    return [m.reshape_like(grads[0], op.inputs[0])] + [None] * (len(op.inputs) - 1)


def transpose_grad(op, grads):
    perm = op.attrs["perm"]
    inverse = [0] * len(perm)
    for i, p in enumerate(perm):
        inverse[p] = i
    return [b.transpose(grads[0], inverse)]


def concat_grad(op, grads):
    """Each input's part of the gradient, a StridedSlice along the axis (other axes may
    be unknown; the parts' lengths along the axis must be known)."""
    rank = len(op.outputs[0].shape)
    axis = op.attrs["axis"] % rank
    out, offset = [], 0
    if None not in op.outputs[0].shape:
        for t in op.inputs:
            begin = [0] * rank
            begin[axis] = offset
            out.append(b.slice(grads[0], begin, t.shape))
            offset += t.shape[axis]
        return out
    for t in op.inputs:
        if t.shape[axis] is None:
            raise GraphError(f"gradient of {op.name}: input {t.name} has an unknown length "
                             f"along the concat axis {axis}")
        begin, end = [0] * rank, [0] * rank
        begin[axis], end[axis] = offset, offset + t.shape[axis]
        mask = ((1 << rank) - 1) & ~(1 << axis)
        out.append(m.strided_slice(grads[0], begin, end, begin_mask=mask, end_mask=mask))
        offset += t.shape[axis]
    return out
