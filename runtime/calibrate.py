"""Calibration: measure this machine's devices and links into a :class:`core.cluster.Cluster`.

The simulator and the cost-model placer read a cluster's figures; the presets hold round
numbers.  :func:`calibrate` replaces them with micro-benchmarks run here, through the
runtime's own kernels and executor, so the figures describe what a measured step pays:

============================  ==============================================================
figure                        measured by
============================  ==============================================================
``peak_flops``                :func:`measure_matmul_rates` with one intra-op thread (the
                              MatMul kernel, float32)
``intra_op_speedup``          the same with the device's intra-op threads, timed in turns
                              with the above, over it
``bandwidth_curve``           :func:`measure_bandwidth_curve`: the Add kernel's rate by
                              working set (reads two arrays, writes one), one thread
``mem_bandwidth``             that curve's rate on the largest arrays (main memory)
``window_copy_costs``         :func:`measure_window_copy_costs`: the convolutions' window
                              gathering (im2col) per tap and per element
``gemm_costs``                :func:`runtime.calibrate_gemm.measure_gemm_costs`: the float
                              MatMul by its BLAS's direct and packed paths, one thread
``products_split``            :func:`runtime.kernels.cpu.products_split`: whether this
                              process's float products spread over the intra-op threads
``Host.shared_bandwidth``     :func:`measure_shared_bandwidth`: two Add kernels at once,
                              by their working sets added up (hosts of 2+ cores)
``Task.step_overhead``        :func:`measure_session_overhead`: an in-process step of one
                              ``NoOp`` (what every step costs besides its ops)
``Task.lock_wakeup``          :func:`measure_lock_wakeup`: two threads handing a lock to
                              each other (how late a waiting thread gets a lock given up)
``op_overhead``               :func:`measure_op_overhead`: a chain of tiny ops through the
                              :class:`~runtime.executor.Executor` (dispatch included); with
                              ``kernel_costs``, the median gap between kernels of a traced
                              graph of every op type instead
``kernel_costs``              :func:`runtime.calibrate_kernels.measure_kernel_costs`: per op
                              type, the kernel's fixed cost and a factor on the roofline,
                              and on the multithreaded kernels' parallel path
``parallel_min_elements``     the kernels' own threshold for their parallel path
``warm_kernel_costs``         :func:`runtime.calibrate_warmth.measure_warm_kernel_costs`:
                              per op type, the fixed cost of a kernel right after one of
                              its type (``warm_span``: :data:`runtime.calibrate_warmth.
                              WARM_SPAN`)
memcpy link (bandwidth,       :func:`measure_memcpy`: a large array copy in host memory
latency)                      (tasks on one host exchange tensors through it), and a tiny one
GPU figures                   :func:`runtime.calibrate_gpu.measure_gpu_figures` (rates,
                              allocation costs, kernel costs and dispatch through the
                              GPU's kernels), only with a real GPU
pcie link                     :func:`measure_pcie`: ``to_device`` / ``copy_to_host``, only
                              with a real GPU; otherwise the cluster's figure is kept
network link                  kept (a gRPC measurement may be added by the gRPC backend)
============================  ==============================================================

:func:`calibrate_distributed` adds what a distributed step costs on a started
:class:`runtime.LocalCluster`, measured from outside the runtime (the fastest wall-clock
step of ``Session.run`` on tiny graphs, of several):

============================  ==============================================================
figure                        measured by
============================  ==============================================================
``Task.step_overhead``        :func:`measure_step_overheads`: a step of one tiny op on the
                              master's task (client RunStep round trip, master bookkeeping)
``Task.part_overhead``        the same with 1..n other tasks involved: the least-squares
                              slope per extra task (the master's RunGraph calls)
memcpy link (latency,         :func:`measure_process_transfer`: tensors made on another task
bandwidth, size_costs)        and read on the master's, minus the same graph without the
                              crossings: a chain of tiny hops between the two tasks for
                              the latency, a chain of 8 hops per size for the sizes
memcpy link (``cpu_costs``)   :func:`measure_crossing_cpu`: the sending and the receiving
                              server process's CPU time per crossing, by size (many
                              tensors crossing at once, less the same graph with each
                              read made on its reader's task)
CPU ``op_overhead``           :func:`measure_dispatch_overhead`: a chain of tiny ops on the
                              master's task, the slope per op (the server's executor)
============================  ==============================================================

With ``blocks`` > 1 every timed figure above (all but ``cpu_costs``) is measured that
many times, one block after the other, and each is the median of its blocks' values
(:func:`combine_blocks`).  :func:`calibrate` measures its CPU figures in blocks too, but
keeps all of them from the one block of the median dispatch cost: its kernel costs are a
table fitted together, not figures to take one by one.

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
import statistics
from dataclasses import replace
from time import perf_counter
from typing import Iterable

import numpy as np

from core.cluster import Cluster
from core.runtime_model import INTERPRETER
from runtime.calibrate_gemm import measure_gemm_costs

__all__ = ["calibrate", "measure_matmul_rate", "measure_matmul_rates",
           "measure_memory_bandwidth", "measure_op_overhead", "measure_lock_wakeup",
           "measure_memcpy", "measure_pcie",
           "measure_step_overheads", "measure_process_transfer", "measure_dispatch_overhead",
           "calibrate_distributed", "runtime_session", "size_costs", "measure_crossing_cpu",
           "measure_bandwidth_curve", "measure_shared_bandwidth", "CROSSING_CPU_SIZES",
           "measure_session_overhead", "measure_server_dispatch", "combine_blocks",
           "with_distributed_figures", "transfer_bandwidth",
           "CPU_FIGURES", "with_cpu_figures", "measure_cpu_figures", "CPU_BLOCKS",
           "measure_window_copy_costs", "WINDOW_CHANNELS"]


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
    return _matmul_rates((max(1, threads),), n, repeat, dtype)[0]


def measure_matmul_rates(threads: int, n: int = 512, repeat: int = 5,
                         dtype: str = "float32") -> tuple[float, float]:
    """``(one thread, threads)``: FLOP/s of the CPU MatMul kernel on ``n x n``
    matrices with one intra-op thread and with ``threads``, the two timed in turns
    (fastest of ``repeat`` each, after one untimed call of each).

    In turns, not one after the other: the speed-up is their ratio, and this machine's
    second core is sometimes busy for a while with other work, which slows only the
    multithreaded product; timed after the single-threaded ones, all of its calls once
    fell in such a spell (a calibration's speed-up of 1.07 against 1.93 a minute
    before, its 256^3 products priced as on one core).  Fifteen speed-ups of 1024^3
    products each way, the two ways taking turns (2026-11-28 21:3x): one after the
    other 1.01-2.10, in turns 1.60-2.00.
    """
    rates = _matmul_rates(sorted({1, max(1, threads)}), n, repeat, dtype)
    return rates[0], rates[-1]


def _matmul_rates(thread_counts, n: int, repeat: int, dtype: str) -> list[float]:
    """FLOP/s of the CPU MatMul kernel on ``n x n`` matrices with each of
    ``thread_counts`` intra-op threads, the counts taking turns (fastest of ``repeat``
    each, after one untimed call of each)."""
    from runtime.kernels import KernelContext, get_kernel
    kernel = get_kernel("MatMul", "CPU")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(dtype)
    b = rng.standard_normal((n, n)).astype(dtype)
    contexts = [KernelContext("CPU", k) for k in thread_counts]
    best = [float("inf")] * len(contexts)
    for ctx in contexts:
        kernel(ctx, (a, b), {})
    for _ in range(repeat):
        for k, ctx in enumerate(contexts):
            t0 = perf_counter()
            kernel(ctx, (a, b), {})
            best[k] = min(best[k], perf_counter() - t0)
    return [2.0 * n ** 3 / t for t in best]


#: Input channels of the two convolutions whose window gathering
#: :func:`measure_window_copy_costs` times: a narrow input (an image's colours), where
#: the tap's loop is the cost, and a wide one, where its elements are.
WINDOW_CHANNELS = (2, 64)


def measure_window_copy_costs(repeat: int = 7, side: int = 32) -> tuple[float, float]:
    """``(seconds per tap, seconds per element)`` of the CPU convolution kernels' window
    gathering (im2col, which Conv2D and Conv2DBackpropFilter run; col2im, which
    Conv2DBackpropInput runs, is taken to cost the same): the kernels' gathering loop timed
    alone on a ``[1, side, side, C]`` input with a 3x3 window, for each ``C`` of
    :data:`WINDOW_CHANNELS` (fastest of ``repeat`` after one untimed call), the time
    per tap straight through the two channel counts.

    Why a figure of its own: a tap copies its input's channels in a loop, and with
    few channels the loop's turn, not the bytes, is the cost; the first convolution
    of inception_v3 (three channels, 2 x 37 x 37 pixels, 9 taps each) took 100-160 us
    against a roofline of 23-34 us, most of it gathering.  The roofline's factor,
    fitted on wide convolutions, does not see it."""
    from runtime.kernels.cpu_nn import _conv_geometry, _im2col
    per_tap = []
    for channels in WINDOW_CHANNELS:
        x = np.random.default_rng(0).standard_normal((1, side, side, channels)).astype("float32")
        geo = _conv_geometry(x.shape, (3, 3, channels, 1), (1, 1, 1, 1), (1, 1, 1, 1), "SAME")
        taps = side * side * 9
        cols = np.empty((side * side, 9 * channels), np.float32)
        _im2col(x, 0, 1, geo, cols)
        per_tap.append(_best(lambda: _im2col(x, 0, 1, geo, cols), repeat) / taps)
    (c0, t0), (c1, t1) = zip(WINDOW_CHANNELS, per_tap)
    per_element = max(0.0, (t1 - t0) / (c1 - c0))
    return max(0.0, t0 - c0 * per_element), per_element


def measure_memory_bandwidth(nbytes: int = 64 << 20, repeat: int = 5) -> float:
    """Bytes/s of the single-threaded CPU Add kernel on float32 arrays of ``nbytes``
    each (it reads two and writes one: ``3 * nbytes`` per call): one point of
    :func:`measure_bandwidth_curve`, which :func:`calibrate` measures instead."""
    return measure_bandwidth_curve((max(1, nbytes // 4),), repeat)[0][1]


#: Elements per array of the Add kernel at which :func:`measure_bandwidth_curve` and
#: :func:`measure_shared_bandwidth` time it: working sets (12 bytes an element) from
#: the middle cache level to well past the last.  Smaller arrays are left out: there
#: the call's fixed cost is most of the time, and the rate a difference of two noisy
#: numbers; below the first point the curve keeps its first rate.
CURVE_ELEMENTS = (1 << 16, 1 << 18, 1 << 20, 1 << 22, 1 << 24)
QUICK_CURVE_ELEMENTS = (1 << 16, 1 << 20, 1 << 22)


def _add_calls(n: int):
    """A function that runs the single-threaded CPU Add kernel on ``n``-element float32
    arrays enough times to move ~200 MB (at most 2,000 calls), and the number of calls
    it makes."""
    from runtime.kernels import KernelContext, get_kernel
    kernel = get_kernel("Add", "CPU")
    ctx = KernelContext("CPU", 1)
    x, y = np.ones(n, np.float32), np.ones(n, np.float32)
    calls = max(1, min(2000, (1 << 24) // n))

    def run():
        for _ in range(calls):
            kernel(ctx, (x, y), {})
    run()
    return run, calls


def _two_at_once(run):
    """A function that runs ``run`` and a copy of it on two threads at once (each on its
    own arrays) and returns the time the slower took."""
    import threading
    copies = [run(), run()]
    start = threading.Barrier(2)
    took = [0.0, 0.0]

    def timed(k):
        start.wait()
        t0 = perf_counter()
        copies[k][0]()
        took[k] = perf_counter() - t0

    def both():
        other = threading.Thread(target=timed, args=(1,))
        other.start()
        timed(0)
        other.join()
        return max(took)
    return both, copies[0][1]


def _add_rates(elements, repeat: int, arrays: int) -> list[tuple[int, float]]:
    """``[(working set bytes, bytes/s)]`` of ``arrays`` (1 or 2) Add kernels at once on
    each size of ``elements``: their bytes over the time the slower took per call, the
    fixed cost of a call (on one element) taken off.  The sizes take turns round by
    round, ``repeat`` rounds, and each keeps its fastest: this machine's speed flips
    between states within seconds (see runtime.calibrate_kernels), and a size timed in
    one burst would catch one state or the other."""
    def timer(n):
        if arrays == 1:
            run, calls = _add_calls(n)

            def once():
                t0 = perf_counter()
                run()
                return perf_counter() - t0
            return once, calls
        return _two_at_once(lambda: _add_calls(n))
    fixed_run, fixed_calls = timer(1)
    timers = [(n, *timer(n)) for n in elements]
    best = {n: float("inf") for n in (1, *elements)}
    for _ in range(repeat):
        best[1] = min(best[1], fixed_run() / fixed_calls)
        for n, once, calls in timers:
            best[n] = min(best[n], once() / calls)
    return [(12 * n * arrays, 12 * n * arrays / max(best[n] - best[1], 1e-9)) for n in elements]


def measure_bandwidth_curve(elements=CURVE_ELEMENTS, repeat: int = 7) -> list[tuple[int, float]]:
    """``[(working set bytes, bytes/s)]``: the memory rate of the single-threaded CPU
    Add kernel by the bytes it moves (two float32 arrays of each size of ``elements``
    read, one written; best of ``repeat`` rounds).  Rates fall by several times between
    arrays that fit the caches and arrays that stream from main memory
    (:attr:`core.cluster.Device.bandwidth_curve`)."""
    return _add_rates(elements, repeat, arrays=1)


def measure_shared_bandwidth(elements=CURVE_ELEMENTS, repeat: int = 7) -> list[tuple[int, float]]:
    """``[(working set bytes, bytes/s)]``: what the host's memory serves two CPU Add
    kernels running at once (each on its own thread and core, as two inter-op threads
    run them), by their two working sets added up: both kernels' bytes over the time
    the slower took.  Needs two usable cores (:attr:`core.cluster.Host.shared_bandwidth`)."""
    return _add_rates(elements, repeat, arrays=2)


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


#: Blocks of a full calibration's CPU figures (:func:`calibrate`'s ``blocks``).
CPU_BLOCKS = 3


def calibrate(cluster: Cluster | None = None, *, devices: Iterable[str] | None = None,
              quick: bool = False, kernel_costs: bool = True, blocks: int | None = None,
              path: str | os.PathLike | None = None) -> Cluster:
    """``cluster`` (default: :meth:`Cluster.this_machine`) with its devices' and links'
    figures measured on this machine; saved as JSON to ``path`` when given.

    ``quick`` uses small sizes and few repeats (about a second; for tests).
    ``kernel_costs`` also measures each op type's kernel cost on the CPUs and the
    executor's dispatch cost per op between kernels
    (:func:`runtime.calibrate_kernels.measure_kernel_costs`; that dispatch figure replaces
    the chain of tiny ops' ``op_overhead``).

    ``blocks``: the CPU figures (and a real GPU's beside them) are measured that many
    times, one block after the other, and the block of the median dispatch cost
    (``op_overhead``) gives them all (default :data:`CPU_BLOCKS`, 1 when ``quick``;
    :func:`_device_figures`).  This machine slows down for seconds at a time: a block
    measured in such a spell had its dispatch and kernel fixed costs 1.6-1.8x the other
    blocks' (its rates held), and a calibration made in one put every prediction 20% or
    more too slow.  The figures are kept from one block, not mixed, so that they
    describe one state of the machine.
    """
    from runtime import kernels
    from runtime.allocator import keep_freed_memory
    keep_freed_memory()  # the kernels' buffers as the executor's steps get them
    cluster = cluster if cluster is not None else Cluster.this_machine()
    blocks = (1 if quick else CPU_BLOCKS) if blocks is None else blocks
    if blocks < 1:
        raise ValueError(f"calibrate: blocks must be at least 1, not {blocks}")
    kernels.warmup(dtypes=("float32",))
    names = set(cluster.device(d).name for d in devices) if devices is not None else {
        d.name for d in cluster.devices if d.is_cpu or _real_gpu()}
    mem, repeat = (8 << 20, 3) if quick else (128 << 20, 7)
    cpu_figures, gpu_figures = _device_figures(cluster, names, quick, kernel_costs, blocks)
    for d in cluster.devices:
        if d.name not in names:
            continue
        if d.is_cpu:
            cluster = cluster.replace_device(d.name, **cpu_figures)
        elif d.index in gpu_figures:
            cluster = cluster.replace_device(d.name, **gpu_figures[d.index])
            pcie = measure_pcie(d.index, mem, repeat)
            link = f"pcie:{d.name}"
            if pcie is not None and link in cluster.links:
                cluster = cluster.replace_link(link, bandwidth=pcie[0], latency=pcie[1])
    if cpu_figures is not None:
        cluster = _with_shared_bandwidth(cluster, names, quick)
        cluster = _with_task_figures(
            cluster, names, step_overhead=measure_session_overhead(5 if quick else 30),
            lock_wakeup=measure_lock_wakeup(3 if quick else 9))
    memcpy = measure_memcpy(mem, repeat)
    for host in cluster.hosts:
        link = f"memcpy:{host.name}"
        if link in cluster.links:
            cluster = cluster.replace_link(link, bandwidth=memcpy[0], latency=memcpy[1])
    # The figures describe this lab's executor: simulate() predicts it by default.
    cluster = cluster.with_runtime_model(INTERPRETER)
    if path is not None:
        cluster.save(path)
    return cluster


def _device_figures(cluster: Cluster, names, quick: bool, kernel_costs: bool, blocks: int
                    ) -> tuple[dict | None, dict[int, dict]]:
    """``(cpu figures, {gpu index: figures})`` of the devices of ``cluster`` named in
    ``names`` (the CPU's from :func:`measure_cpu_figures`, once for every CPU; each GPU
    index's from :func:`runtime.calibrate_gpu.measure_gpu_figures` when a real GPU is
    usable), measured in ``blocks`` blocks one after the other, all from the block of
    the median dispatch cost (the CPU's ``op_overhead``, else the first GPU's).

    The GPUs' figures are measured in each block beside the CPU's and kept from the same
    block: a GPU's fixed costs are the host's time (numba's launch from Python, the
    output's allocation), and two GPU calibrations a minute apart differed by 1.5x in
    them, as the host's own figures did (``docs/probes/gpu_probe.py``)."""
    from runtime.calibrate_gpu import measure_gpu_figures
    wanted = [d for d in cluster.devices if d.name in names]
    cpu = next((d for d in wanted if d.is_cpu), None)
    gpus = {}
    if _real_gpu():
        for d in wanted:
            if not d.is_cpu:
                gpus.setdefault(d.index, d)
    measured = [({} if cpu is None else measure_cpu_figures(cpu, quick, kernel_costs),
                 {i: measure_gpu_figures(d, quick) for i, d in gpus.items()})
                for _ in range(blocks)]

    def dispatch(block):
        cpu_figures, gpu_figures = block
        if cpu is not None:
            return cpu_figures["op_overhead"]
        return next(iter(gpu_figures.values()), {}).get("op_overhead", 0.0)

    cpu_figures, gpu_figures = sorted(measured, key=dispatch)[(blocks - 1) // 2]
    return (cpu_figures if cpu is not None else None), gpu_figures


def measure_cpu_figures(device, quick: bool = False, kernel_costs: bool = True) -> dict:
    """One block of :func:`calibrate`'s figures of the CPU ``device`` (a
    :class:`core.cluster.Device`), as ``Device`` fields: its rates (``peak_flops``,
    ``intra_op_speedup``, ``bandwidth_curve``, ``mem_bandwidth``), its ``op_overhead``,
    ``window_copy_costs``, ``gemm_costs`` and ``products_split``, and with
    ``kernel_costs`` its ``kernel_costs`` and ``parallel_min_elements``."""
    from runtime.kernels.cpu import products_split
    n, repeat = (192, 3) if quick else (1024, 7)
    single, multi = measure_matmul_rates(device.intra_op_threads, n, repeat)
    curve = measure_bandwidth_curve(QUICK_CURVE_ELEMENTS if quick else CURVE_ELEMENTS,
                                    3 if quick else 15)
    figures = {
        "peak_flops": single,
        "intra_op_speedup": max(1.0, multi / single),
        "bandwidth_curve": curve,
        "mem_bandwidth": curve[-1][1],  # streaming from main memory
        "op_overhead": measure_op_overhead(ops=50 if quick else 200, repeat=repeat),
        "window_copy_costs": measure_window_copy_costs(repeat),
        "gemm_costs": measure_gemm_costs(quick).as_tuple(),
        "products_split": products_split(),
    }
    if kernel_costs:
        from runtime.calibrate_kernels import measure_kernel_costs
        from runtime.config import SessionConfig
        from runtime.kernels.cpu import PARALLEL_MIN_ELEMENTS
        # One kernel at a time: each is timed alone, as the simulator's figures mean
        # it; kernels at once slow each other through the host's shared memory
        # bandwidth, which is measured on its own.
        alone = SessionConfig(inter_op_parallelism_threads=1,
                              intra_op_parallelism_threads=device.intra_op_threads,
                              use_per_session_threads=True)
        costs, dispatch = measure_kernel_costs(
            replace(device, **figures), steps=3 if quick else 20,
            parallel_min_elements=PARALLEL_MIN_ELEMENTS, config=alone)
        # (0: the step's noise was larger than the work between its kernels; the
        # chain of tiny ops' figure stands in)
        figures.update(kernel_costs=costs, op_overhead=dispatch or figures["op_overhead"],
                       parallel_min_elements=PARALLEL_MIN_ELEMENTS)
        from runtime.calibrate_warmth import WARM_SPAN, measure_warm_kernel_costs
        warm = measure_warm_kernel_costs(replace(device, **figures),
                                         steps=5 if quick else 20, config=alone)
        figures.update(warm_kernel_costs=warm, warm_span=WARM_SPAN if warm else 0)
    return figures


def _with_shared_bandwidth(cluster: Cluster, calibrated: set, quick: bool) -> Cluster:
    """``cluster`` with the memory bandwidth its hosts' kernels share, measured here,
    on every host with a calibrated CPU and at least two cores (with one, kernels never
    run at once), when this process can use two cores."""
    from core.cluster import usable_cpu_cores
    hosts = {d.host for d in cluster.devices if d.is_cpu and d.name in calibrated
             and cluster.host(d.host).cpu_cores > 1}
    if not hosts or usable_cpu_cores() < 2:
        return cluster
    shared = measure_shared_bandwidth(QUICK_CURVE_ELEMENTS if quick else CURVE_ELEMENTS,
                                      3 if quick else 15)
    for host in sorted(hosts):
        cluster = cluster.replace_host(host, shared_bandwidth=shared)
    return cluster


def measure_session_overhead(repeat: int = 30) -> float:
    """Seconds of the fastest of ``repeat`` in-process steps of a graph of one
    ``NoOp``: what every step costs besides its ops (the session's call, the plan's
    look-up, the fetches' return)."""
    import core as tf
    from runtime.session import Session
    graph = tf.Graph()
    with graph.as_default():
        nothing = tf.no_op(name="nothing")
    with Session(graph=graph) as session:
        return _timed_runs(lambda: session.run(nothing), repeat, warmup=1)


def _with_task_figures(cluster: Cluster, calibrated: set, **figures) -> Cluster:
    """``cluster`` whose tasks with a calibrated CPU have the task ``figures`` measured
    in this process (``Task.step_overhead``: :func:`measure_session_overhead`, a step
    run in this process pays it before its first op, where :func:`calibrate_distributed`
    measures a step across server processes instead; ``Task.lock_wakeup``:
    :func:`measure_lock_wakeup`)."""
    for job, task in sorted({(d.job, d.task) for d in cluster.devices
                             if d.is_cpu and d.name in calibrated}):
        cluster = cluster.replace_task(job, task, **figures)
    return cluster


def measure_lock_wakeup(batches: int = 9, handoffs: int = 200) -> float:
    """Seconds a thread waiting for a lock takes to run once another thread gives it
    up: two threads hand two locks back and forth ``handoffs`` times, half a round
    trip each; the median over ``batches``.

    A thread that waits for the interpreter's lock sleeps in the kernel; on a virtual
    machine, waking it on another core can cost tens of microseconds, many times the
    dispatch of an op.  Meanwhile the thread that gave the lock up for a short kernel
    takes it back, so the waiting thread gets it only when the lock stays free that
    long (:attr:`core.cluster.Task.lock_wakeup`).  The median, not the fastest batch:
    how fast a sleeping core wakes changes from one batch to the next, and the steps
    see them all.
    """
    import threading

    ping, pong = threading.Lock(), threading.Lock()
    ping.acquire()
    pong.acquire()

    def answer(n):
        for _ in range(n):
            ping.acquire()
            pong.release()

    times = []
    for _ in range(max(1, batches)):
        helper = threading.Thread(target=answer, args=(handoffs,), daemon=True)
        helper.start()
        t0 = perf_counter()
        for _ in range(handoffs):
            ping.release()
            pong.acquire()
        times.append((perf_counter() - t0) / (2 * handoffs))
        helper.join()
    return statistics.median(times)


#: The fields of a CPU device that :func:`calibrate` measures.
CPU_FIGURES = ("peak_flops", "intra_op_speedup", "mem_bandwidth", "bandwidth_curve",
               "warm_kernel_costs", "warm_span", "gemm_costs", "products_split",
               "op_overhead", "kernel_costs", "parallel_min_elements", "window_copy_costs")


def with_cpu_figures(cluster: Cluster, calibrated) -> Cluster:
    """``cluster`` with every CPU device given the :data:`CPU_FIGURES` of ``calibrated``
    (a CPU device of a cluster :func:`calibrate` returned): one calibration here serves
    clusters of other shapes on this machine."""
    figures = {name: getattr(calibrated, name) for name in CPU_FIGURES}
    for d in cluster.devices:
        if d.is_cpu:
            cluster = cluster.replace_device(d.name, **figures)
    return cluster


def _real_gpu() -> bool:
    from numba import config as numba_config
    if numba_config.ENABLE_CUDASIM:
        return False
    from runtime.kernels import cuda_available
    return cuda_available()


def _timed_runs(run, repeats: int, warmup: int = 3) -> float:
    """The fastest wall-clock seconds of ``run()`` (one step) over ``repeats`` calls:
    the undisturbed step (other load on the machine only ever adds time), as the
    experiments measure steps."""
    for _ in range(warmup):
        run()
    best = float("inf")
    for _ in range(repeats):
        t0 = perf_counter()
        run()
        best = min(best, perf_counter() - t0)
    return best


# The figures of a distributed step live in runtime.calibrate_distributed; they are
# importable from here too (with the private helpers the probes use).
from runtime.calibrate_distributed import (  # noqa: E402  (it imports this module's helpers)
    CROSSING_CPU_SIZES, _cpu, _fit_line, _interleaved_step_times, _step_time,
    calibrate_distributed, combine_blocks, measure_crossing_cpu, measure_dispatch_overhead,
    measure_process_transfer, measure_server_dispatch, measure_step_overheads,
    runtime_session, size_costs, transfer_bandwidth, with_distributed_figures)
