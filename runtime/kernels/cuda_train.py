"""GPU kernels of the training op family (:mod:`core.ops_train`), registered at import;
the device code (:mod:`.cuda_train_kernels`) is compiled on first use and
``numba.cuda`` is imported only then (see :mod:`.cuda` for the conventions).  Each
updates the variable and its slots in place on the device and returns the variable.
"""

from __future__ import annotations

from .cuda import GPU, _flat, _launch, _to_device
from .registry import FLOATING, register

__all__: list[str] = []


def _kernels():
    from . import cuda_train_kernels
    return cuda_train_kernels


def _vec(ctx, x):
    """A tensor as a flat device array (a host scalar is copied in)."""
    x = _to_device(ctx, x)
    return x.reshape(x.size) if x.shape != (x.size,) else x


@register("ApplyGradientDescent", GPU, FLOATING)
def apply_gradient_descent(ctx, inputs, attrs):
    """``var -= alpha * delta`` on the device; returns var."""
    var, alpha, delta = inputs
    _launch(_kernels().gradient_descent, var.size, ctx, _flat(var), _vec(ctx, alpha), _vec(ctx, delta))
    return (var,)


@register("ApplyMomentum", GPU, FLOATING)
def apply_momentum(ctx, inputs, attrs):
    """Momentum's update of var and accum on the device; returns var."""
    var, accum, lr, grad, momentum = inputs
    _launch(_kernels().momentum, var.size, ctx, _flat(var), _flat(accum), _vec(ctx, lr),
            _vec(ctx, grad), _vec(ctx, momentum), bool(attrs.get("use_nesterov", False)))
    return (var,)


@register("ApplyAdam", GPU, FLOATING)
def apply_adam(ctx, inputs, attrs):
    """Adam's update of var, m and v on the device; returns var."""
    var, m, v, *scalars, grad = inputs
    _launch(_kernels().adam, var.size, ctx, _flat(var), _flat(m), _flat(v),
            *(_vec(ctx, s) for s in scalars), _vec(ctx, grad))
    return (var,)
