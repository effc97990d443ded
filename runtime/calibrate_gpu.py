"""Calibration of a GPU device: what an op placed there costs the CUDA executor.

The executor's step on a GPU is bound by the host, not by the card: every op is a call
from the interpreter into numba's kernel launcher, and every kernel's output a fresh
device allocation.  On an H200 (``docs/probes/gpu_probe.py``) a chain of tiny Adds took
about 160 us per op, untraced, against kernels of a few microseconds; allocating a
buffer of 4 MiB or more cost 70-190 us more than a small one; and the card's own rates
mattered only for the largest kernels.  So a GPU's figures are the CPU's in kind,
measured through the GPU's kernels:

============================  ==============================================================
figure                        measured by
============================  ==============================================================
``peak_flops``                :func:`measure_gpu_rates`: the MatMul kernel on two sizes, the
                              extra flops of the larger over its extra time (the fixed
                              cost of a launch cancels)
``mem_bandwidth``             the same with the Add kernel on two sizes
``alloc_costs``               :func:`measure_gpu_alloc_costs`: an output buffer's allocation
                              by its size, beyond a small one's
``kernel_costs``,             :func:`runtime.calibrate_kernels.measure_kernel_costs` with
``op_overhead``               the calibration graph on this GPU: each op type's fixed cost
                              (launch, tiny kernel and the trace's synchronisation) and the
                              executor's work between kernels
============================  ==============================================================

:func:`runtime.calibrate.calibrate` calls :func:`measure_gpu_figures` for each GPU of
the cluster when this process can use a real GPU (numba's simulator measures nothing
meaningful).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

__all__ = ["measure_gpu_figures", "measure_gpu_rates", "measure_gpu_alloc_costs",
           "ALLOC_SIZES"]

#: The buffer sizes (bytes) :func:`measure_gpu_alloc_costs` allocates: 1 KiB to 64 MiB.
ALLOC_SIZES = tuple(1 << k for k in range(10, 27, 2))


def measure_gpu_figures(device, quick: bool = False) -> dict:
    """The figures of the GPU ``device`` (a :class:`core.cluster.Device`) measured on
    this process's GPU of its index, as ``Device`` fields: ``peak_flops``,
    ``mem_bandwidth``, ``alloc_costs``, ``kernel_costs`` and ``op_overhead`` (see the
    module's table).  ``quick``: small sizes and few repeats (for tests)."""
    from numba import cuda

    from runtime.calibrate_kernels import measure_kernel_costs
    from runtime.config import SessionConfig
    with cuda.gpus[device.index]:
        figures = measure_gpu_rates(quick)
        figures["alloc_costs"] = measure_gpu_alloc_costs(
            ALLOC_SIZES[:4] if quick else ALLOC_SIZES, count=10 if quick else 50,
            repeat=2 if quick else 5)
    # (the kernels' fixed costs and factors are fitted less the allocations)
    # One op at a time, as the simulator's figures mean each kernel.
    alone = SessionConfig(inter_op_parallelism_threads=1, use_per_session_threads=True)
    costs, dispatch = measure_kernel_costs(replace(device, **figures),
                                           steps=3 if quick else 10, config=alone)
    figures.update(kernel_costs=costs, op_overhead=dispatch or device.op_overhead)
    return figures


def measure_gpu_rates(quick: bool = False) -> dict:
    """``{"peak_flops", "mem_bandwidth"}`` of the current GPU through its kernels: the
    MatMul kernel on ``n/2`` and ``n`` square float32 matrices, the Add kernel on ``m/4``
    and ``m`` elements, each rate the larger size's extra work over its extra time
    (fastest of three synchronised calls each), so that the fixed cost of a call, on
    this executor many times a small kernel's, is not counted as the card's slowness.
    A larger size that was not slower (noise) gives its own work over its own time."""
    from numba import cuda

    from runtime.calibrate import _best
    from runtime.kernels import KernelContext, get_kernel
    ctx = KernelContext("GPU", 1)
    n, m = (512, 1 << 20) if quick else (2048, 1 << 24)

    def seconds(kernel, x) -> float:
        def run():
            kernel(ctx, (x, x), {})
            cuda.synchronize()
        run()  # (compiles)
        return _best(run, 3)

    def rate(kernel, small, large, work) -> float:
        t_small, t_large = (seconds(kernel, cuda.to_device(a)) for a in (small, large))
        if t_large > t_small:
            return (work(large) - work(small)) / (t_large - t_small)
        return work(large) / t_large

    flops = rate(get_kernel("MatMul", "GPU"), np.ones((n // 2, n // 2), np.float32),
                 np.ones((n, n), np.float32), lambda a: 2.0 * a.shape[0] ** 3)
    bandwidth = rate(get_kernel("Add", "GPU"), np.ones(m // 4, np.float32),
                     np.ones(m, np.float32), lambda a: 3.0 * a.nbytes)  # two read, one written
    return {"peak_flops": flops, "mem_bandwidth": bandwidth}


def measure_gpu_alloc_costs(sizes=ALLOC_SIZES, count: int = 50, repeat: int = 5) -> tuple:
    """``((bytes, seconds), ...)``: what allocating a device buffer of each size of
    ``sizes`` costs on the current GPU beyond the smallest size, as the kernels allocate
    their outputs (``numba.cuda.device_array``, given back when dropped: numba frees
    in batches, and each allocation here pays its share).  Per size, the fastest of
    ``repeat`` runs of ``count`` allocations."""
    from numba import cuda

    from runtime.calibrate import _best
    sizes = sorted(sizes)

    def allocate(nbytes):
        for _ in range(count):
            cuda.device_array(nbytes, np.uint8)

    per_buffer = {}
    for nbytes in sizes:
        allocate(nbytes)
        per_buffer[nbytes] = _best(lambda: allocate(nbytes), repeat) / count
    base = per_buffer[sizes[0]]
    return tuple((nbytes, max(0.0, per_buffer[nbytes] - base)) for nbytes in sizes)
