"""CPU kernels of the training op family (:mod:`core.ops_train`): TensorFlow's fused
optimizer updates, in place on the variable's and the slots' buffers.

Each is one numba ``@njit(cache=True, nogil=True)`` loop over the flat buffers: every
element reads and writes only its own index, so the update is a single pass over the
variable, its slots and the gradient, as TensorFlow's Eigen kernels make it.  The
gradient reaches numba as a read-only view (see :func:`.cpu._readonly`), the scalars as
Python floats.  The kernels return the variable's buffer (the op's output aliases it).

>>> import numpy as np
>>> from runtime.kernels import KernelContext, get_kernel
>>> var = np.array([1.0, 2.0], np.float32)
>>> out = get_kernel("ApplyGradientDescent", "CPU")(
...     KernelContext(), (var, np.float32(0.5), np.array([2.0, 2.0], np.float32)), {})
>>> out[0] is var, var
(True, array([0., 1.], dtype=float32))
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .registry import FLOATING, register

__all__: list[str] = []

CPU = "CPU"


@njit(cache=True, nogil=True)
def _gradient_descent(var, alpha, delta):
    for i in range(var.size):
        var[i] -= alpha * delta[i]


@njit(cache=True, nogil=True)
def _momentum(var, accum, lr, grad, momentum, nesterov):
    if nesterov:
        for i in range(var.size):
            a = accum[i] * momentum + grad[i]
            accum[i] = a
            var[i] -= grad[i] * lr + a * momentum * lr
    else:
        for i in range(var.size):
            a = accum[i] * momentum + grad[i]
            accum[i] = a
            var[i] -= lr * a


@njit(cache=True, nogil=True)
def _adam(var, m, v, lr_t, beta1, beta2, epsilon, grad):
    for i in range(var.size):
        g = grad[i]
        mi = m[i] + (g - m[i]) * (1 - beta1)
        vi = v[i] + (g * g - v[i]) * (1 - beta2)
        m[i] = mi
        v[i] = vi
        var[i] -= lr_t * mi / (math.sqrt(vi) + epsilon)


def _flat(a: np.ndarray) -> np.ndarray:
    """The flat view of a variable's buffer (variables are allocated C-contiguous)."""
    if not a.flags.c_contiguous or not a.flags.writeable:
        raise ValueError("an Apply op needs the variable's own writable, C-contiguous buffer")
    return a.reshape(-1)


def _grad(g: np.ndarray, like: np.ndarray) -> np.ndarray:
    v = np.ascontiguousarray(g, dtype=like.dtype).reshape(-1)
    if v.size != like.size:
        raise ValueError(f"gradient of {v.size} elements for a variable of {like.size}")
    v = v.view()
    v.setflags(write=False)
    return v


def _scalar(x, dtype) -> float:
    """A scalar input as a Python float, rounded to the variable's dtype first (so the
    arithmetic sees the value TensorFlow's kernel sees)."""
    return float(np.asarray(x, dtype=dtype).reshape(()))


@register("ApplyGradientDescent", CPU, FLOATING)
def apply_gradient_descent(ctx, inputs, attrs):
    """``var -= alpha * delta``; returns var."""
    var, alpha, delta = inputs
    _gradient_descent(_flat(var), _scalar(alpha, var.dtype), _grad(delta, var))
    return (var,)


@register("ApplyMomentum", CPU, FLOATING)
def apply_momentum(ctx, inputs, attrs):
    """``accum = accum * momentum + grad; var -= lr * accum`` (Nesterov: ``var -= lr *
    grad + lr * momentum * accum``); returns var."""
    var, accum, lr, grad, momentum = inputs
    _momentum(_flat(var), _flat(accum), _scalar(lr, var.dtype), _grad(grad, var),
              _scalar(momentum, var.dtype), bool(attrs.get("use_nesterov", False)))
    return (var,)


def adam_step_size(lr: float, beta1_power: float, beta2_power: float) -> float:
    """TensorFlow's ``lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t)``.

    >>> round(adam_step_size(0.001, 0.9, 0.999), 6)
    0.000316
    """
    return lr * math.sqrt(1 - beta2_power) / (1 - beta1_power)


@register("ApplyAdam", CPU, FLOATING)
def apply_adam(ctx, inputs, attrs):
    """Adam's update of var, m and v (see :mod:`core.ops_train`); returns var."""
    var, m, v, b1p, b2p, lr, beta1, beta2, epsilon, grad = inputs
    d = var.dtype
    lr_t = adam_step_size(_scalar(lr, d), _scalar(b1p, d), _scalar(b2p, d))
    _adam(_flat(var), _flat(m), _flat(v), lr_t, _scalar(beta1, d), _scalar(beta2, d),
          _scalar(epsilon, d), _grad(grad, var))
    return (var,)
