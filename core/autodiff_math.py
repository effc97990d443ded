"""Gradients of the math and array ops (:mod:`core.ops_math`), one function per op as in
:mod:`core.autodiff`, built the way TensorFlow builds them (``SqrtGrad``,
``StridedSliceGrad``, ``AddN``...), and working with dimensions unknown until run time
(through ``Shape`` and the run-time-shaped ``Reshape``/``BroadcastTo``/``Fill``).

>>> import core as tf
>>> g = tf.Graph()
>>> with g.as_default():
...     x = tf.placeholder(tf.float32, [None, 3])
...     (dx,) = tf.gradients(tf.reduce_sum(tf.sqrt(x)), [x])
>>> dx.op.type, dx.shape
('SqrtGrad', (None, 3))
"""

from __future__ import annotations

from core import builders as b
from core import builders_math as m
from core.autodiff import _unbroadcast

__all__: list[str] = []


def _create(op, op_type: str, inputs, attrs=None, name=None):
    return op.graph.create_op(op_type, list(inputs), attrs, name=name or op_type).outputs[0]


def batch_matmul_grad(op, grads):
    """TensorFlow's _BatchMatMulV2 gradient: products with the other operand (adjoints
    swapped as the attrs say), summed over the batch axes broadcasting added."""
    x, y = op.inputs
    g = grads[0]
    ax, ay = op.attrs.get("adj_x", False), op.attrs.get("adj_y", False)
    mm = m.batch_matmul
    if not ax and not ay:
        gx, gy = mm(g, y, adj_y=True), mm(x, g, adj_x=True)
    elif not ax and ay:
        gx, gy = mm(g, y), mm(g, x, adj_x=True)
    elif ax and not ay:
        gx, gy = mm(y, g, adj_y=True), mm(x, g)
    else:
        gx, gy = mm(y, g, adj_x=True, adj_y=True), mm(g, x, adj_x=True, adj_y=True)
    return [_unbroadcast(gx, x.shape, like=x), _unbroadcast(gy, y.shape, like=y)]


def exp_grad(op, grads):
    return [b.multiply(grads[0], op.outputs[0])]


def log_grad(op, grads):
    return [m.realdiv(grads[0], op.inputs[0])]


def sqrt_grad(op, grads):
    return [_create(op, "SqrtGrad", [op.outputs[0], grads[0]])]


def rsqrt_grad(op, grads):
    return [_create(op, "RsqrtGrad", [op.outputs[0], grads[0]])]


def square_grad(op, grads):
    x = op.inputs[0]
    return [b.multiply(grads[0], b.multiply(x, b.constant(2, dtype=x.dtype)))]


def abs_grad(op, grads):
    return [b.multiply(grads[0], _create(op, "Sign", [op.inputs[0]]))]


def zero_grad(op, grads):
    return [m.zeros_like(op.inputs[0])]


def _is_const(t) -> bool:
    return t.op.type == "Const"


def real_div_grad(op, grads):
    x, y = op.inputs
    g = grads[0]
    gx = _unbroadcast(m.realdiv(g, y), x.shape, like=x)
    if _is_const(y):  # a constant divisor gets no gradient: build none
        return [gx, None]
    gy = b.multiply(g, m.realdiv(m.realdiv(b.negative(x), y), y))
    return [gx, _unbroadcast(gy, y.shape, like=y)]


def _positive_mask(x):
    """1 where ``x > 0``, else 0, of ``x``'s dtype (``Sign(Relu(x))``: no comparison op
    is needed)."""
    return m.sign(b.relu(x))


def pow_grad(op, grads):
    """TensorFlow's: ``dz/dx = y x^(y-1)``, ``dz/dy = z log(x)`` where ``x > 0`` (else 0)."""
    x, y = op.inputs
    z = op.outputs[0]
    g = grads[0]
    one = b.constant(1, dtype=x.dtype)
    gx = b.multiply(g, b.multiply(y, m.pow(x, b.subtract(y, one))))
    gx = _unbroadcast(gx, x.shape, like=x)
    if _is_const(y):
        return [gx, None]
    positive = _positive_mask(x)
    safe_x = b.add(b.relu(x), b.subtract(one, positive))  # x where x > 0, else 1
    gy = b.multiply(g, b.multiply(z, m.log(safe_x)))
    return [gx, _unbroadcast(gy, y.shape, like=y)]


def _select_grads(op, grads, x_mask):
    """The gradient to x where ``x_mask`` is 1 and to y where it is 0."""
    x, y = op.inputs
    g = grads[0]
    gx = b.multiply(g, x_mask)
    gy = b.subtract(g, gx)
    return [_unbroadcast(gx, x.shape, like=x), _unbroadcast(gy, y.shape, like=y)]


def maximum_grad(op, grads):
    """To x where ``x >= y`` (TensorFlow's tie rule), else to y."""
    x, y = op.inputs
    one = b.constant(1, dtype=x.dtype)
    return _select_grads(op, grads, b.subtract(one, _positive_mask(b.subtract(y, x))))


def minimum_grad(op, grads):
    """To x where ``x <= y`` (TensorFlow's tie rule), else to y."""
    x, y = op.inputs
    one = b.constant(1, dtype=x.dtype)
    return _select_grads(op, grads, b.subtract(one, _positive_mask(b.subtract(x, y))))


def squared_difference_grad(op, grads):
    x, y = op.inputs
    d = b.multiply(b.multiply(grads[0], b.constant(2, dtype=x.dtype)), b.subtract(x, y))
    return [_unbroadcast(d, x.shape, like=x), _unbroadcast(b.negative(d), y.shape, like=y)]


def cast_grad(op, grads):
    """Back through a cast between floating types; none through an integer one."""
    src = op.inputs[0].dtype
    if src.is_floating and op.outputs[0].dtype.is_floating:
        return [m.cast(grads[0], src)]
    return [None]


def add_n_grad(op, grads):
    return [grads[0]] * len(op.inputs)


def fill_grad(op, grads):
    total = b.reduce_sum(grads[0])
    return [None, total] if len(op.inputs) == 2 else [total]


def pad_grad(op, grads):
    """The padded gradient's middle, as a StridedSlice (which takes unknown dims)."""
    paddings = op.attrs["paddings"]
    begin = [int(p[0]) for p in paddings]
    end = [-int(p[1]) for p in paddings]
    end_mask = sum(1 << i for i, p in enumerate(paddings) if int(p[1]) == 0)
    return [m.strided_slice(grads[0], begin, end, [1] * len(begin), end_mask=end_mask)]


def split_grad(op, grads):
    """Concat of the parts' gradients (zeros for a part that got none)."""
    parts = [g if g is not None else m.zeros_like(t) for g, t in zip(grads, op.outputs)]
    return [b.concat(parts, axis=op.attrs["axis"])]


def tile_grad(op, grads):
    """TensorFlow's: the gradient reshaped to ``(m0, d0, m1, d1, ...)`` and summed over
    the multiples' axes."""
    x = op.inputs[0]
    multiples = op.attrs["multiples"]
    split = []
    for mult, d in zip(multiples, x.shape):
        split += [int(mult), d]
    g = grads[0]
    if None in x.shape:
        known = [d if d is not None else -1 for d in split]
        if known.count(-1) == 1:
            g = b.reshape(g, known)
        else:  # the interleaved shape at run time: stack(multiples, shape(x))
            shape = m.shape(x)
            mult = b.constant(list(multiples), dtype=shape.dtype)
            pairs = b.concat([b.reshape(mult, [-1, 1]), b.reshape(shape, [-1, 1])], axis=1)
            g = m.reshape_to(g, b.reshape(pairs, [-1]), static_shape=split)
    else:
        g = b.reshape(g, split)
    return [b.reduce_sum(g, axis=list(range(0, 2 * len(multiples), 2)))]


_SLICE_ATTRS = ("begin", "end", "strides", "begin_mask", "end_mask", "ellipsis_mask",
                "new_axis_mask", "shrink_axis_mask")


def strided_slice_grad(op, grads):
    x = op.inputs[0]
    attrs = {k: op.attrs[k] for k in _SLICE_ATTRS if k in op.attrs}
    if None in x.shape:
        inputs = [m.shape(x), grads[0]]
        attrs["_output_shapes"] = [tuple(x.shape)]
    else:
        inputs = [grads[0]]
        attrs["shape"] = tuple(x.shape)
    return [_create(op, "StridedSliceGrad", inputs, attrs)]


def strided_slice_grad_grad(op, grads):
    attrs = {k: op.attrs[k] for k in _SLICE_ATTRS if k in op.attrs}
    dy = m.strided_slice(grads[0], **attrs)
    return [None, dy] if len(op.inputs) == 2 else [dy]


def squeeze_grad(op, grads):
    return [m.reshape_like(grads[0], op.inputs[0])]
