"""Sizes for dimensions unknown until run time: :class:`ShapeHints`, what a user states
(``batch=32``, or a shape per placeholder), and the shapes of every tensor that follow.

A graph may have dimensions known only at run time (``placeholder(float32, [None, 784])``
and everything computed from it).  The executor does not care: kernels see real arrays.
A cost does: flops, bytes moved and transfer sizes need every dimension.  So the cost
model, the simulator and the cost-model placers take the sizes from hints the user gives
(see :meth:`core.costs.CostModel.with_shape_hints`), and a cost that needs a dimension
nobody stated raises :class:`UnknownDimension` naming the op and the tensor, never
counting it as 1.

The hinted shapes are propagated through the graph by the op table's own shape inference,
with the small integer tensors that shape ops compute (``Shape``, ``Size`` and arithmetic
on them) evaluated on the way, so a run-time-shaped ``Reshape``/``BroadcastTo``/``Fill``
(as gradients of unknown dimensions build them) gets its size too.

>>> import core as tf
>>> g = tf.Graph()
>>> with g.as_default():
...     x = tf.placeholder(tf.float32, [None, 3], name="x")
...     y = tf.reduce_sum(tf.matmul(x, tf.ones([3, 5])), axis=0)
...     (dx,) = tf.gradients(y, [x])
>>> specs = ShapeHints(batch=32).specs(g)
>>> specs["x:0"].shape, specs[dx.name].shape
((32, 3), (32, 3))
>>> ShapeHints({"x": (8, 3)}).spec(dx).shape
(8, 3)
"""

from __future__ import annotations

import numbers
from typing import Mapping

import numpy as np

from core.opdef import ShapeError, TensorSpec, UnknownDimension

__all__ = ["ShapeHints", "UnknownDimension", "concrete_spec"]

#: Ops whose (small, integer) output values shape propagation computes.
_VALUE_OPS = {"Const", "Shape", "Size", "Add", "Sub", "Mul", "Maximum", "Minimum", "Cast",
              "Reshape", "Concat", "Identity", "Fill"}
#: Largest integer tensor whose value is tracked (shape vectors are short).
_MAX_VALUE_ELEMENTS = 64


def concrete_spec(spec: TensorSpec, op: str, tensor: str | None = None) -> TensorSpec:
    """``spec`` when its shape is fully known, else :class:`UnknownDimension`."""
    if any(d is None for d in spec.shape):
        raise UnknownDimension(op, tensor, spec.shape)
    return spec


class ShapeHints:
    """Sizes stated for dimensions unknown until run time.

    ``shapes``: tensor (or its name, or a placeholder op's name) -> its full shape; a
    dimension the graph knows must agree.  ``batch``: the length of every placeholder's
    unknown *first* dimension not given in ``shapes`` (the batch, as TF 1.x models feed
    it).  Everything else follows by shape inference (:meth:`specs`).

    >>> ShapeHints(batch=32)
    ShapeHints(shapes={}, batch=32)
    """

    def __init__(self, shapes: Mapping | None = None, batch: int | None = None):
        self.shapes: dict[str, tuple] = {}
        for key, shape in (shapes or {}).items():
            name = key if isinstance(key, str) else key.name
            name = name if ":" in name else name + ":0"
            self.shapes[name] = tuple(int(d) for d in shape)
            if min(self.shapes[name], default=0) < 0:
                raise ValueError(f"shape hint {self.shapes[name]} for {name!r} has a negative dimension")
        if batch is not None and (not isinstance(batch, numbers.Integral) or batch < 1):
            raise ValueError(f"batch must be a positive int, got {batch!r}")
        self.batch = batch
        self._cache: dict = {}  # id(graph) -> (graph, version, specs)

    def __repr__(self) -> str:
        return f"ShapeHints(shapes={self.shapes}, batch={self.batch})"

    def spec(self, tensor) -> TensorSpec:
        """``tensor``'s spec with the hinted sizes; :class:`UnknownDimension` if a
        dimension is still unknown."""
        if None not in tensor.shape:
            return tensor.spec
        resolved = self.specs(tensor.graph).get(tensor.name, tensor.spec)
        return concrete_spec(resolved, tensor.op.name, tensor.name)

    def specs(self, graph) -> dict[str, TensorSpec]:
        """Every tensor's spec (by name) with the hints applied and propagated; dimensions
        no hint reaches stay None.  Kept per graph until an op is added."""
        entry = self._cache.get(id(graph))
        if entry is not None and entry[0] is graph and entry[1] == graph.version:
            return entry[2]
        specs = self._propagate(graph)
        self._cache[id(graph)] = (graph, graph.version, specs)
        return specs

    def _placeholder_shape(self, tensor) -> tuple:
        stated = self.shapes.get(tensor.name)
        if stated is not None:
            if len(stated) != len(tensor.shape) or any(
                    d is not None and d != s for d, s in zip(tensor.shape, stated)):
                raise ShapeError(f"shape hint {stated} for {tensor.name!r} contradicts its "
                                 f"shape {tensor.shape}")
            return stated
        shape = tuple(tensor.shape)
        if self.batch is not None and tensor.op.type == "Placeholder" and shape and shape[0] is None:
            shape = (self.batch,) + shape[1:]
        return shape

    def _propagate(self, graph) -> dict[str, TensorSpec]:
        specs: dict[str, TensorSpec] = {}
        values: dict[str, np.ndarray] = {}
        for op in graph.get_operations():  # creation order: inputs come first
            ins = [specs[t.name] for t in op.inputs]
            outs = [t.spec for t in op.outputs]
            if not op.inputs and any(None in t.shape for t in op.outputs):
                outs = [TensorSpec(t.dtype, self._placeholder_shape(t)) for t in op.outputs]
            elif any(None in s.shape for s in outs):
                outs = self._infer(op, ins, values) or outs
            for t, s in zip(op.outputs, outs):
                specs[t.name] = s
            if op.type in _VALUE_OPS and len(op.outputs) == 1:
                value = _evaluate(op, [values.get(t.name) for t in op.inputs], ins)
                if value is not None:
                    values[op.outputs[0].name] = value
        return specs

    @staticmethod
    def _infer(op, ins, values) -> list[TensorSpec] | None:
        """The op's outputs by the table's inference on the resolved inputs, its shape
        tensors (an unfolded const input, as TensorFlow's run-time shape argument) folded
        into attrs where their values are known."""
        op_def = op.op_def
        attrs = dict(op.attrs)
        attrs.pop("_output_shapes", None)
        drop = []
        folded_before = 0
        for position, attr in sorted(op_def.const_inputs):
            if position < 0:
                continue
            if attr in attrs:
                folded_before += 1
                continue
            index = position - folded_before
            if index < len(op.inputs) and op.inputs[index].name in values:
                attrs[attr] = tuple(int(v) for v in values[op.inputs[index].name].reshape(-1))
                drop.append(index)
        ins = [s for i, s in enumerate(ins) if i not in drop]
        try:
            return op_def.infer(ins, attrs)
        except (ShapeError, KeyError, TypeError, ValueError):
            return None  # leave the static shapes; a cost that needs them will say so


def _evaluate(op, inputs: list, specs: list) -> np.ndarray | None:
    """The value of a small integer op whose input values are known (None otherwise)."""
    kind = op.type
    if kind == "Shape":
        shape = specs[0].shape
        if None in shape:
            return None
        return np.array(shape, dtype=op.outputs[0].dtype.np)
    if kind == "Size":
        shape = specs[0].shape
        return None if None in shape else np.array(int(np.prod(shape)), op.outputs[0].dtype.np)
    if kind == "Const":
        value = np.asarray(op.attrs["value"])
        return value if value.dtype.kind in "iu" and value.size <= _MAX_VALUE_ELEMENTS else None
    if any(v is None for v in inputs) or not op.outputs[0].dtype.is_integer:
        return None
    if kind == "Cast":
        return inputs[0].astype(op.outputs[0].dtype.np)
    if kind == "Identity":
        return inputs[0]
    if kind == "Reshape":
        shape = op.attrs.get("shape")
        return inputs[0].reshape(tuple(shape) if shape is not None else tuple(inputs[1]))
    if kind == "Concat":
        return np.concatenate(inputs, axis=op.attrs["axis"])
    if kind == "Fill":
        dims = op.attrs.get("dims")
        return np.full(tuple(dims) if dims is not None else tuple(inputs[0]), inputs[-1])
    binary = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Maximum": np.maximum,
              "Minimum": np.minimum}[kind]
    return binary(inputs[0], inputs[1]).astype(op.outputs[0].dtype.np)
