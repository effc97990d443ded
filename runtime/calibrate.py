"""Calibration: measure this machine's devices and links into a :class:`core.cluster.Cluster`.

The simulator and the cost-model placer read a cluster's figures; the presets hold round
numbers.  :func:`calibrate` replaces them with micro-benchmarks run here, through the
runtime's own kernels and executor, so the figures describe what a measured step pays:

============================  ==============================================================
figure                        measured by
============================  ==============================================================
``peak_flops``                :func:`measure_matmul_rate` with one intra-op thread (the
                              MatMul kernel, float32)
``intra_op_speedup``          the same with the device's intra-op threads, over the above
``mem_bandwidth``             :func:`measure_memory_bandwidth`: a large Add (reads two
                              arrays, writes one)
``op_overhead``               :func:`measure_op_overhead`: a chain of tiny ops through the
                              :class:`~runtime.executor.Executor` (dispatch included)
memcpy link (bandwidth,       :func:`measure_memcpy`: a large array copy in host memory
latency)                      (tasks on one host exchange tensors through it), and a tiny one
pcie link                     :func:`measure_pcie`: ``to_device`` / ``copy_to_host``, only
                              with a real GPU; otherwise the cluster's figure is kept
network link                  kept (a gRPC measurement may be added by the gRPC backend)
============================  ==============================================================

Calibration runs in this process, on this machine: every CPU device of ``devices``
(default: all CPU devices of the cluster) gets the CPU figures measured here, and every
GPU device the figures of the GPU of its index, when this process can use a real GPU
(numba's simulator measures nothing meaningful, so GPUs keep their figures there).

>>> cluster = calibrate(quick=True)              # doctest: +SKIP
>>> cluster.devices[0].peak_flops > 0            # doctest: +SKIP
True
"""

from __future__ import annotations

import os
from time import perf_counter
from typing import Iterable

import numpy as np

from core.cluster import Cluster

__all__ = ["calibrate", "measure_matmul_rate", "measure_memory_bandwidth",
           "measure_op_overhead", "measure_memcpy", "measure_pcie"]


def _best(fn, repeat: int) -> float:
    """The fastest of ``repeat`` timed calls of ``fn`` (seconds)."""
    best = float("inf")
    for _ in range(repeat):
        t0 = perf_counter()
        fn()
        best = min(best, perf_counter() - t0)
    return best


def measure_matmul_rate(threads: int = 1, n: int = 512, repeat: int = 5,
                        dtype: str = "float32") -> float:
    """FLOP/s of the CPU MatMul kernel on ``n x n`` matrices with ``threads`` intra-op
    threads (best of ``repeat``, after one untimed call)."""
    from runtime.kernels import KernelContext, get_kernel
    kernel = get_kernel("MatMul", "CPU")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(dtype)
    b = rng.standard_normal((n, n)).astype(dtype)
    ctx = KernelContext("CPU", max(1, threads))
    kernel(ctx, (a, b), {})
    t = _best(lambda: kernel(ctx, (a, b), {}), repeat)
    return 2.0 * n ** 3 / t


def measure_memory_bandwidth(nbytes: int = 64 << 20, repeat: int = 5) -> float:
    """Bytes/s of the single-threaded CPU Add kernel on float32 arrays of ``nbytes``
    each (it reads two and writes one: ``3 * nbytes`` per call)."""
    from runtime.kernels import KernelContext, get_kernel
    kernel = get_kernel("Add", "CPU")
    n = max(1, nbytes // 4)
    x = np.ones(n, np.float32)
    y = np.ones(n, np.float32)
    ctx = KernelContext("CPU", 1)
    kernel(ctx, (x, y), {})
    return 3.0 * n * 4 / _best(lambda: kernel(ctx, (x, y), {}), repeat)


def measure_op_overhead(cluster: Cluster | None = None, device: str | None = None,
                        ops: int = 200, repeat: int = 5) -> float:
    """Seconds per op of a chain of ``ops`` tiny ``Identity`` ops on a scalar, run by the
    :class:`~runtime.executor.Executor` on ``device`` (default: the master task's CPU):
    kernel call, dependency counting and dispatch together."""
    import core as tf
    from core.placement import Placement
    from runtime.executor import Executor
    from runtime.local_devices import LocalDevices
    from runtime.variables import VariableStore

    cluster = cluster or Cluster.single_host(cpu_cores=1)
    job, task = cluster.master
    dev = cluster.device(device) if device else next(
        d for d in cluster.devices_of_task(job, task) if d.is_cpu)
    g = tf.Graph()
    with g.as_default():
        x = tf.constant(np.float32(1.0), name="x")
        for i in range(ops):
            x = tf.identity(x, name=f"id{i}")
    placement = Placement({op.name: dev.name for op in g.get_operations()})
    from runtime.config import SessionConfig
    devices = LocalDevices.for_task(cluster, dev.job, dev.task,
                                    SessionConfig(use_per_session_threads=True))
    try:
        executor = Executor(devices, VariableStore())
        all_ops = g.get_operations()
        fetch = [x.name]
        executor.run_step(all_ops, placement, fetches=fetch)
        t = _best(lambda: executor.run_step(all_ops, placement, fetches=fetch), repeat)
    finally:
        devices.close()
    return t / (ops + 1)


def measure_memcpy(nbytes: int = 64 << 20, repeat: int = 5) -> tuple[float, float]:
    """``(bandwidth bytes/s, latency s)`` of a host-memory copy: a copy of ``nbytes``
    for the bandwidth, of 8 bytes for the latency."""
    src = np.ones(max(1, nbytes // 8), np.float64)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    bandwidth = src.nbytes / _best(lambda: np.copyto(dst, src), repeat)
    s1, d1 = np.ones(1), np.empty(1)
    latency = _best(lambda: np.copyto(d1, s1), max(repeat, 20))
    return bandwidth, latency


def measure_pcie(gpu_index: int = 0, nbytes: int = 64 << 20,
                 repeat: int = 5) -> tuple[float, float] | None:
    """``(bandwidth, latency)`` of host <-> GPU copies (``to_device`` then
    ``copy_to_host``, averaged), or None without a real GPU (the simulator included)."""
    from numba import config as numba_config
    if numba_config.ENABLE_CUDASIM:
        return None
    from runtime.kernels import cuda_available
    if not cuda_available():
        return None
    from numba import cuda
    with cuda.gpus[gpu_index]:
        host = np.ones(max(1, nbytes // 4), np.float32)
        dev = cuda.to_device(host)
        out = np.empty_like(host)

        def roundtrip():
            cuda.to_device(host, to=dev)
            dev.copy_to_host(out)
        roundtrip()
        bandwidth = 2 * host.nbytes / _best(roundtrip, repeat)
        tiny = np.ones(1, np.float32)
        dtiny = cuda.to_device(tiny)
        latency = _best(lambda: cuda.to_device(tiny, to=dtiny), max(repeat, 20))
    return bandwidth, latency


def calibrate(cluster: Cluster | None = None, *, devices: Iterable[str] | None = None,
              quick: bool = False, path: str | os.PathLike | None = None) -> Cluster:
    """``cluster`` (default: :meth:`Cluster.this_machine`) with its devices' and links'
    figures measured on this machine; saved as JSON to ``path`` when given.

    ``quick`` uses small sizes and few repeats (about a second; for tests).
    """
    from runtime import kernels
    cluster = cluster if cluster is not None else Cluster.this_machine()
    kernels.warmup(dtypes=("float32",))
    names = set(cluster.device(d).name for d in devices) if devices is not None else {
        d.name for d in cluster.devices if d.is_cpu or _real_gpu()}
    n, mem, repeat = (192, 8 << 20, 3) if quick else (1024, 128 << 20, 7)
    cpu_figures = None
    gpu_figures: dict[int, dict] = {}
    for d in cluster.devices:
        if d.name not in names:
            continue
        if d.is_cpu:
            if cpu_figures is None:
                single = measure_matmul_rate(1, n, repeat)
                multi = measure_matmul_rate(d.intra_op_threads, n, repeat) \
                    if d.intra_op_threads > 1 else single
                cpu_figures = {
                    "peak_flops": single,
                    "intra_op_speedup": max(1.0, multi / single),
                    "mem_bandwidth": measure_memory_bandwidth(mem, repeat),
                    "op_overhead": measure_op_overhead(
                        ops=50 if quick else 200, repeat=repeat),
                }
            cluster = cluster.replace_device(d.name, **cpu_figures)
        elif _real_gpu():
            if d.index not in gpu_figures:
                gpu_figures[d.index] = _measure_gpu(d.index, quick)
            cluster = cluster.replace_device(d.name, **gpu_figures[d.index])
            pcie = measure_pcie(d.index, mem, repeat)
            link = f"pcie:{d.name}"
            if pcie is not None and link in cluster.links:
                cluster = cluster.replace_link(link, bandwidth=pcie[0], latency=pcie[1])
    memcpy = measure_memcpy(mem, repeat)
    for host in cluster.hosts:
        link = f"memcpy:{host.name}"
        if link in cluster.links:
            cluster = cluster.replace_link(link, bandwidth=memcpy[0], latency=memcpy[1])
    if path is not None:
        cluster.save(path)
    return cluster


def _real_gpu() -> bool:
    from numba import config as numba_config
    if numba_config.ENABLE_CUDASIM:
        return False
    from runtime.kernels import cuda_available
    return cuda_available()


def _measure_gpu(index: int, quick: bool) -> dict:
    """peak_flops and mem_bandwidth of GPU ``index`` through its kernels."""
    from numba import cuda

    from runtime.kernels import KernelContext, get_kernel
    n = 512 if quick else 2048
    ctx = KernelContext("GPU", 1)
    with cuda.gpus[index]:
        a = cuda.to_device(np.ones((n, n), np.float32))
        mm = get_kernel("MatMul", "GPU")
        mm(ctx, (a, a), {})
        cuda.synchronize()

        def run_mm():
            mm(ctx, (a, a), {})
            cuda.synchronize()
        flops = 2.0 * n ** 3 / _best(run_mm, 3)
        add = get_kernel("Add", "GPU")
        x = cuda.to_device(np.ones(n * n * 4, np.float32))

        def run_add():
            add(ctx, (x, x), {})
            cuda.synchronize()
        run_add()
        bandwidth = 3.0 * x.size * 4 / _best(run_add, 3)
    return {"peak_flops": flops, "mem_bandwidth": bandwidth}
