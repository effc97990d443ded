"""Device code of the training ops' GPU kernels (numba CUDA); imported only by
:mod:`.cuda_train`, lazily, so ``numba.cuda`` stays out of CPU-only processes.

Grid-stride loops over the flat buffers; the scalar hyper-parameters arrive as
one-element device arrays (they are tensors on the device: Adam's ``beta1_power`` is a
variable there), read once per thread, so no scalar goes through the host.
"""

from __future__ import annotations

import math

from numba import cuda


@cuda.jit
def gradient_descent(var, alpha, delta):
    a = alpha[0]
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, var.size, stride):
        var[i] -= a * delta[i]


@cuda.jit
def momentum(var, accum, lr, grad, mom, nesterov):
    lr0, m0 = lr[0], mom[0]
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, var.size, stride):
        a = accum[i] * m0 + grad[i]
        accum[i] = a
        if nesterov:
            var[i] -= grad[i] * lr0 + a * m0 * lr0
        else:
            var[i] -= lr0 * a


@cuda.jit
def adam(var, m, v, beta1_power, beta2_power, lr, beta1, beta2, epsilon, grad):
    lr_t = lr[0] * math.sqrt(1 - beta2_power[0]) / (1 - beta1_power[0])
    b1, b2, eps = beta1[0], beta2[0], epsilon[0]
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, var.size, stride):
        g = grad[i]
        mi = m[i] + (g - m[i]) * (1 - b1)
        vi = v[i] + (g * g - v[i]) * (1 - b2)
        m[i] = mi
        v[i] = vi
        var[i] -= lr_t * mi / (math.sqrt(vi) + eps)
