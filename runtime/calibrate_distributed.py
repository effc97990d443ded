"""Calibration of a distributed step, measured from outside the runtime on a started
:class:`runtime.LocalCluster`: the fixed costs of a step and of each task's part, the
crossings between tasks (their latency, sizes and CPU) and the servers' dispatch per op
(:func:`calibrate_distributed`; :mod:`runtime.calibrate` lists each figure and what
measures it).  The functions are importable from :mod:`runtime.calibrate` too.
"""

from __future__ import annotations

import contextlib
import os
import random
import statistics
from dataclasses import replace
from time import perf_counter

import numpy as np

from core.cluster import Cluster
from core.runtime_model import INTERPRETER
from runtime.calibrate import _timed_runs

__all__ = ["measure_step_overheads", "measure_process_transfer", "measure_dispatch_overhead",
           "calibrate_distributed", "runtime_session", "size_costs", "measure_crossing_cpu",
           "CROSSING_CPU_SIZES", "measure_server_dispatch", "combine_blocks",
           "with_distributed_figures", "transfer_bandwidth"]


def _cpu(job: str, task: int) -> str:
    return f"/job:{job}/replica:0/task:{task}/device:CPU:0"


@contextlib.contextmanager
def runtime_session(target: str, graph, fetches):
    """A session of this lab's runtime at ``target`` on ``graph``, in a ``with``: yields
    a callable that runs one step of ``fetches``.  The default ``open_session`` of the
    distributed measurements below; another runtime supplies its own with the same
    signature (:func:`experiments.tf_calibrate.tensorflow_session`), so that the same
    graphs are timed the same way on its servers."""
    import runtime
    with runtime.Session(target, graph=graph) as session:
        yield lambda: session.run(fetches)


def _step_time(local_cluster, build, master, repeats: int,
               open_session=runtime_session) -> float:
    """The fastest step time of the graph ``build()`` returns as ``(graph, fetches)``."""
    graph, fetches = build()
    with open_session(local_cluster.target(*master), graph, fetches) as run:
        return _timed_runs(run, repeats)


def _interleaved_step_times(local_cluster, builds: dict, master, repeats: int,
                            warmup: int = 3, open_session=runtime_session) -> dict:
    """Per key of ``builds``: the wall-clock seconds of ``repeats`` steps of its graph
    (``builds[key]()`` returns ``(graph, fetches)``), in a session at ``master`` opened
    once per graph (``open_session``, as :func:`runtime_session`), after ``warmup``
    untimed steps.  The graphs take turns step by step, in a new order each round (a
    seeded shuffle: in one fixed rotation each graph would always follow the same one,
    and a step right after a large tensor's is slower)."""
    times: dict = {key: [] for key in builds}
    with contextlib.ExitStack() as stack:
        runs = {}
        for key, make in builds.items():
            graph, fetches = make()
            run = stack.enter_context(open_session(local_cluster.target(*master), graph,
                                                   fetches))
            for _ in range(warmup):
                run()
            runs[key] = run
        order = list(builds)
        rng = random.Random(0)
        for _ in range(repeats):
            rng.shuffle(order)
            for key in order:
                run = runs[key]
                t0 = perf_counter()
                run()
                times[key].append(perf_counter() - t0)
    return times


def _fit_line(xs, ys) -> tuple[float, float]:
    """Least-squares ``(intercept, slope)`` of ``ys`` on ``xs``."""
    x = np.asarray(xs, float)
    y = np.asarray(ys, float)
    if len(set(xs)) < 2:
        return float(y.mean()), 0.0
    slope, intercept = np.polyfit(x, y, 1)
    return float(intercept), float(slope)


def measure_step_overheads(local_cluster, master=("worker", 0), repeats: int = 15,
                           rounds: int = 3, open_session=runtime_session,
                           fetch_tensors: bool = True) -> tuple[float, float, dict]:
    """``(step_overhead, part_overhead, samples)`` of steps on ``local_cluster``.

    A step runs one tiny op (a scalar constant and an Identity) on each involved task:
    the master's task alone, then the master with 1, 2, ... other tasks.
    ``step_overhead`` is the master-alone step; ``part_overhead`` the least-squares
    slope of the step time per extra task (intercept held at the master-alone time).
    ``samples`` maps the number of other tasks to the step seconds: the median over
    ``rounds`` of the fastest of ``repeats`` (one round's slope moved between 0.11 and
    0.33 ms per task from one calibration to the next).

    ``fetch_tensors`` (default): each tiny op's tensor is fetched, so each extra task
    also sends the client a tensor; else the ops are fetched as targets, as a training
    step fetches its train op (on TensorFlow's servers a fetched tensor per task
    doubled the slope: ``docs/probes/tf_parts_probe.py``).
    """
    import core as tf
    master = tuple(master)
    others = [t for t in local_cluster.tasks if tuple(t) != master]

    def build(tasks):
        def make():
            g = tf.Graph()
            outs = []
            with g.as_default():
                for i, (job, task) in enumerate(tasks):
                    with tf.device(_cpu(job, task)):
                        out = tf.identity(tf.constant(np.float32(1.0), name=f"c{i}"),
                                          name=f"i{i}")
                        outs.append(out if fetch_tensors else out.op)
            return g, outs
        return make

    runs: dict[int, list[float]] = {k: [] for k in range(len(others) + 1)}
    for _ in range(max(1, rounds)):  # the rounds interleaved: a drift hits every k alike
        for k in runs:
            runs[k].append(_step_time(local_cluster, build([master] + others[:k]), master,
                                      repeats, open_session))
    samples = {k: statistics.median(v) for k, v in runs.items()}
    base = samples[0]
    ks = [k for k in samples if k]
    part = (sum(k * (samples[k] - base) for k in ks) / sum(k * k for k in ks)) if ks else 0.0
    return base, max(0.0, part), samples


def measure_process_transfer(local_cluster, src=("ps", 0), master=("worker", 0),
                             sizes=(4, 64 << 10, 1 << 20, 4 << 20), repeats: int = 30,
                             crossings: int = 32, size_hops: int = 8,
                             open_session=runtime_session) -> tuple[float, float, dict]:
    """``(latency s, bandwidth bytes/s, samples)`` of tensors crossing from task ``src``
    to the master's task on one host (stream, local socket or shared memory, as the
    runtime chooses).

    ``latency`` is what a crossing of a small tensor on the critical path adds to a
    step: a chain of ``crossings`` tiny ops alternating between ``src`` and the master
    (each hop a crossing, from the send to the consumer's start on the other side),
    minus the same chain on the master alone, over ``crossings`` (one crossing alone is
    lost in the noise of a step; independent ones overlap and measure less).  For each of
    ``sizes``, ``samples`` holds the same per crossing for a chain of ``size_hops``
    crossings of a tensor of that size (one crossing's difference of two steps moved a
    64 KiB crossing between 0.27 and 0.51 ms from one calibration to the next, and a
    prediction of data_parallel with it, 3.6 to 6.6 ms); the bandwidth is the slope
    between the smallest and the largest (the runtime switches paths in between, so the
    middle sizes would bend a least-squares line).  Both steps of a pair involve the
    same tasks (a tiny op on ``src`` in the local one).

    Each step time is the fastest of ``repeats``, all the graphs taking turns step by
    step (:func:`_interleaved_step_times`), so that both sides of every difference are
    the fastest steps of one stretch of time (this machine's speed flips between two
    states within seconds; a burst of steps catches one or the other).  Before, each
    graph was timed in bursts of 9 in a fresh session and each difference was the
    median of 3 such pairs: in three runs of calibrations alternating between the two
    ways (5, 5 and 8 of each, 2026-11-26), the predictions of 12 placements moved with
    the crossing figures by 20%, 19%, 19% at the median (max / min - 1 over the
    calibrations; ``experiments.calibration_spread``'s ``crossings``) against 35%, 7%,
    23% before: no steadier, but the measurement takes 3.7 s instead of 6.0."""
    import core as tf
    src, master = tuple(src), tuple(master)

    hops = max(2, size_hops + size_hops % 2)  # even: the last crossing onto the master

    def build(nbytes, crossing):
        # The tensor made on src (master, locally), then passed back and forth.
        def make():
            g = tf.Graph()
            with g.as_default():
                with tf.device(_cpu(*(src if crossing else master))):
                    x = tf.constant(np.ones(max(1, nbytes // 4), np.float32), name="a")
                for i in range(hops):
                    here = (master if i % 2 == 0 else src) if crossing else master
                    with tf.device(_cpu(*here)):
                        x = tf.identity(x, name=f"hop{i}")
                with tf.device(_cpu(*src)):
                    d = tf.identity(tf.constant(np.float32(1.0), name="t"), name="d")
            return g, [x, d]
        return make

    def chain(crossing):
        def make():
            g = tf.Graph()
            with g.as_default():
                with tf.device(_cpu(*master)):
                    x = tf.constant(np.float32(1.0), name="x")
                for i in range(crossings):
                    here = (src if i % 2 == 0 else master) if crossing else master
                    with tf.device(_cpu(*here)):
                        x = tf.identity(x, name=f"hop{i}")
                with tf.device(_cpu(*master)):
                    x = tf.identity(x, name="last")
                with tf.device(_cpu(*src)):
                    d = tf.identity(tf.constant(np.float32(1.0), name="t"), name="d")
            return g, [x, d]
        return make

    builds = {("chain", crossed): chain(crossed) for crossed in (True, False)}
    builds.update({(n, crossed): build(n, crossed) for n in sizes for crossed in (True, False)})
    fastest = {key: min(times) for key, times in
               _interleaved_step_times(local_cluster, builds, master, repeats,
                                       open_session=open_session).items()}

    def added(key, count):
        return (fastest[(key, True)] - fastest[(key, False)]) / count

    samples = {n: added(n, hops) for n in sizes}
    latency = max(added("chain", crossings), 1e-6)
    return latency, transfer_bandwidth(samples), samples


def transfer_bandwidth(samples: dict) -> float:
    """Bytes per second of a crossing from :func:`measure_process_transfer`'s
    ``samples`` (``{bytes: seconds}``): the slope between the smallest and the largest
    size (the runtime switches paths in between), at least 1e-12 seconds a byte.

    >>> transfer_bandwidth({4: 1e-4, 1004: 2e-4})
    10000000.0
    """
    small, large = min(samples), max(samples)
    per_byte = (samples[large] - samples[small]) / max(1, large - small)
    return 1.0 / max(per_byte, 1e-12)


#: The sizes :func:`measure_crossing_cpu` measures in a full calibration, up to the
#: runtime's switch to shared memory (runtime.worker.SHM_MIN_BYTES, 256 KiB), where the
#: processes' CPU time per crossing already exceeds its time on a step's path (larger
#: tensors' crossings are their ends' work for their whole time).
CROSSING_CPU_SIZES = (4, 16 << 10, 64 << 10, 256 << 10)


def measure_crossing_cpu(local_cluster, src=("ps", 0), master=("worker", 0),
                         sizes=CROSSING_CPU_SIZES, crossings: int = 48, steps: int = 100,
                         block: int = 10, open_session=runtime_session) -> dict:
    """``{bytes: (sent, taken)}``: the CPU seconds the server process of task ``src``
    spends sending one tensor of each of ``sizes`` to the master's task, and the
    master's spends taking it in, when many cross at once (``local_cluster``: anything
    with ``target(job, index)`` and ``cpu_seconds(task)``, that task's process's CPU
    seconds so far).  What holds their interpreters and cores, as against the
    crossing's time (:func:`measure_process_transfer`).

    A step (at ``master``) makes ``crossings`` tensors on ``src``, each read by an
    Identity on ``master``, against the same graph with each reader reading a tensor
    made on ``master`` instead (the same ops on each task): each process's CPU seconds
    of ``steps`` steps of each, less, over the crossings (at least 0).  The two graphs
    take turns in blocks of ``block`` steps (the processes' CPU time comes in clock
    ticks of 10 ms: a hundred steps of 48 crossings put a tick at 2 us per crossing).

    Why: a crossing between this runtime's processes holds its ends only for their
    own work when crossings come in a burst; one alone costs about its whole time
    (``docs/probes/lc_crossings_probe.py``: 32 tiny tensors at once from the ps cost it
    about 20 us of CPU each and the reader 60 us, and added 25 us each to a step, where
    each alone took 110 to 180 us and, one after the other, about 130 us of CPU)."""
    import core as tf
    src, master = tuple(src), tuple(master)

    def build(nbytes, crossing):
        graph = tf.Graph()
        ops = []
        shape = np.zeros(max(1, nbytes // 4), np.float32)
        with graph.as_default():
            for i in range(crossings):
                with tf.device(_cpu(*src)):
                    x = tf.identity(tf.constant(shape + i, name=f"c{i}"), name=f"x{i}")
                with tf.device(_cpu(*master)):
                    read = x if crossing else tf.constant(shape + i, name=f"m{i}")
                    ops += [x.op, tf.identity(read, name=f"y{i}").op]
        return graph, ops

    out = {}
    rounds = max(1, steps // block)
    for nbytes in sizes:
        used = {(crossing, task): 0.0 for crossing in (True, False) for task in (src, master)}
        with contextlib.ExitStack() as stack:
            runs = {}
            for crossing in (True, False):
                graph, ops = build(nbytes, crossing)
                runs[crossing] = stack.enter_context(
                    open_session(local_cluster.target(*master), graph, ops))
                for _ in range(3):
                    runs[crossing]()
            for _ in range(rounds):
                for crossing, run in runs.items():
                    before = {task: local_cluster.cpu_seconds(task) for task in (src, master)}
                    for _ in range(block):
                        run()
                    for task in (src, master):
                        used[(crossing, task)] += local_cluster.cpu_seconds(task) - before[task]
        out[nbytes] = tuple(max(0.0, (used[(True, task)] - used[(False, task)])
                                / (rounds * block * crossings)) for task in (src, master))
    return out


def measure_dispatch_overhead(local_cluster, master=("worker", 0), lengths=(1, 100, 300),
                              repeats: int = 9, open_session=runtime_session) -> float:
    """Seconds per op of a chain of tiny Identity ops run by the master task's server:
    the least-squares slope of the step time over the chain lengths (the executor's
    dispatch, dependency counting and the kernel call together)."""
    import core as tf
    master = tuple(master)

    def build(n):
        def make():
            g = tf.Graph()
            with g.as_default(), tf.device(_cpu(*master)):
                x = tf.constant(np.float32(1.0), name="x")
                for i in range(n):
                    x = tf.identity(x, name=f"id{i}")
            return g, [x]
        return make

    times = [_step_time(local_cluster, build(n), master, repeats, open_session)
             for n in lengths]
    _, slope = _fit_line(list(lengths), times)
    return max(slope, 1e-7)


def measure_server_dispatch(local_cluster, master=("worker", 0), n: int = 8,
                            steps: int = 15) -> float:
    """Seconds per op of a server's executor between kernels, on a graph with a
    workload's fan-in and fan-out: :func:`runtime.calibrate_kernels.untraced_dispatch`
    with every op on the master task's CPU, run there (the kernel times from traced
    steps there).  A server's executor does more per op than an in-process one (each
    op's values go through its step's rendezvous)."""
    from runtime.calibrate_kernels import untraced_dispatch
    master = tuple(master)
    return untraced_dispatch(n, steps=steps, target=local_cluster.target(*master),
                             device=_cpu(*master))


def size_costs(latency: float, bandwidth: float, samples: dict) -> tuple:
    """A link's ``size_costs`` from :func:`measure_process_transfer`'s figures: the
    time each size of ``samples`` added to a step, at least the chain's ``latency``, and
    at the smallest size the latency (plus the bytes at ``bandwidth``): one crossing
    alone is lost in the noise of a step (a difference of two steps can even come out
    below zero), and the chain measured the fixed part over many.

    >>> size_costs(1e-4, 1e9, {4: 3e-4, 65536: 2.5e-4, 1 << 20: -1e-5})
    ((4, 0.000100004), (65536, 0.00025), (1048576, 0.0001))
    """
    if not samples:
        return ()
    points = {n: max(t, latency) for n, t in samples.items()}
    smallest = min(points)
    points[smallest] = latency + smallest / bandwidth
    return tuple(sorted(points.items()))


def calibrate_distributed(cluster: Cluster, local_cluster, *, master=None, quick: bool = False,
                          path: str | os.PathLike | None = None, open_session=runtime_session,
                          runtime_model=INTERPRETER, blocks: int = 1,
                          statistic=statistics.median) -> tuple[Cluster, dict]:
    """``(cluster, figures)``: ``cluster`` (whose tasks are those of the started
    :class:`runtime.LocalCluster` ``local_cluster``, all on one host) with the fixed
    costs of a distributed step measured on it: every task's ``step_overhead`` and
    ``part_overhead``, the ``memcpy:<host>`` link's latency, bandwidth and
    ``size_costs`` (what a tensor crossing processes costs; :func:`size_costs`), its
    ``cpu_costs`` when ``runtime_model`` makes crossings of a host its ends' work
    (``copies_on_cores``; :func:`measure_crossing_cpu`, on a ``local_cluster`` with
    ``cpu_seconds``), and
    every CPU's ``op_overhead``: the server's dispatch cost per op between the kernels
    of the kernel calibration graph (:func:`measure_server_dispatch`) for a CPU
    calibrated with kernel costs, else along a chain of tiny ops
    (:func:`measure_dispatch_overhead`).  ``figures`` holds the measurements and their
    samples (:func:`with_distributed_figures` makes the cluster from them).

    ``blocks``: the timed figures (all but the CPU per crossing) are measured that many
    times, one block after the other, and each figure is the ``statistic`` of its
    blocks' values (:func:`combine_blocks`; ``figures["blocks"]`` holds each block's).
    This machine's speed changes within seconds, so one block of steps can catch it
    slow throughout, and blocks seconds apart agree far better than one block of the
    same cost (``docs/probes/lc_calibration_blocks_probe.py``).  The median rather
    than the fastest block: the fastest of several blocks of fastest steps describes
    a machine faster than the one the workloads' fastest steps see (with it,
    ``experiments.sim_vs_real``'s rows came out further from their measurements than
    with one block in most calibrations; with the median, nearer or as near).

    ``local_cluster`` is anything with ``tasks`` (``(job, index)`` pairs) and
    ``target(job, index)``, and ``open_session(target, graph, fetches)`` opens a session
    of its runtime (:func:`runtime_session`, this lab's, by default): the same graphs
    timed the same way calibrate another runtime's servers
    (:func:`experiments.tf_calibrate.calibrate_tensorflow`, whose devices come without
    kernel costs: it measures the dispatch between kernels itself).  The result records
    ``runtime_model`` as the runtime it was calibrated for."""
    master = tuple(master or cluster.master)
    src = next((tuple(t) for t in local_cluster.tasks if tuple(t) != master), None)
    kernels = any(d.is_cpu and d.kernel_costs for d in cluster.devices)
    measured = [_timed_figures(local_cluster, master, src, quick, kernels, open_session)
                for _ in range(max(1, blocks))]
    figures = combine_blocks(measured, statistic)
    cpu_costs: dict = {}
    if (src is not None and runtime_model.serial_dispatch and runtime_model.copies_on_cores
            and hasattr(local_cluster, "cpu_seconds")):
        # What of a crossing holds its ends (the runtime model's crossing_work).
        cpu_costs = measure_crossing_cpu(
            local_cluster, src, master, (4, 64 << 10) if quick else CROSSING_CPU_SIZES,
            steps=30 if quick else 100, open_session=open_session)
    figures.update(crossing_cpu=cpu_costs, blocks=measured)
    out = with_distributed_figures(cluster, figures, runtime_model)
    if path is not None:
        out.save(path)
    return out, figures


def _timed_figures(local_cluster, master, src, quick: bool, kernels: bool,
                   open_session) -> dict:
    """One block of :func:`calibrate_distributed`'s timed figures: the step and part
    overheads, a crossing's latency, bandwidth and time by size (none without a
    ``src`` task), the dispatch per op along a chain and, with ``kernels``, between
    the kernels of the kernel calibration graph (else 0)."""
    repeats = 5 if quick else 15
    step, part, step_samples = measure_step_overheads(local_cluster, master, repeats,
                                                      rounds=1 if quick else 3,
                                                      open_session=open_session)
    # Sizes on both sides of the runtime's switch from socket messages to shared
    # memory (runtime.worker.SHM_MIN_BYTES, 256 KiB): the link's size_costs.
    sizes = (4, 64 << 10, 1 << 20) if quick else (4, 16 << 10, 64 << 10, 192 << 10,
                                                  320 << 10, 1 << 20, 4 << 20)
    latency = bandwidth = None
    x_samples: dict = {}
    if src is not None:
        latency, bandwidth, x_samples = measure_process_transfer(
            local_cluster, src, master, sizes, repeats=5 if quick else 30,
            open_session=open_session)
    dispatch = measure_dispatch_overhead(local_cluster, master,
                                         (1, 50) if quick else (1, 100, 300), repeats,
                                         open_session)
    # A device calibrated with kernel costs gets the server's dispatch between the
    # kernels of a realistic graph (a chain of Identity ops shows less).
    between = (measure_server_dispatch(local_cluster, master, steps=5 if quick else 15)
               if kernels else 0.0)
    return {"step_overhead": step, "part_overhead": part, "step_samples": step_samples,
            "transfer_latency": latency, "transfer_bandwidth": bandwidth,
            "transfer_samples": x_samples, "op_overhead": dispatch,
            "between_kernels": between}


def combine_blocks(blocks: list[dict], statistic=min) -> dict:
    """The figures of several blocks of :func:`calibrate_distributed`'s timed figures
    (each as its ``figures["blocks"]`` holds them), each figure the ``statistic``
    (``min``: the fastest block's; ``statistics.median``) of its blocks' values: the
    overheads, latency and dispatch, per size the crossing time and per number of
    tasks the step (the bandwidth then follows from those sizes, as
    :func:`transfer_bandwidth` takes it), and of the ``between_kernels`` above 0 (0: a
    block's noise hid the work between kernels; 0 when every block's did).

    >>> a = {"step_overhead": 2e-4, "part_overhead": 1e-4, "step_samples": {0: 2e-4},
    ...      "transfer_latency": 1e-4, "transfer_bandwidth": 1e9,
    ...      "transfer_samples": {4: 1e-4, 1000: 2e-4}, "op_overhead": 5e-6,
    ...      "between_kernels": 0.0}
    >>> b = {**a, "step_overhead": 3e-4, "transfer_samples": {4: 1.5e-4, 1000: 1.6e-4},
    ...      "op_overhead": 4e-6, "between_kernels": 6e-6}
    >>> f = combine_blocks([a, b])
    >>> f["step_overhead"], f["op_overhead"], f["between_kernels"], f["transfer_samples"]
    (0.0002, 4e-06, 6e-06, {4: 0.0001, 1000: 0.00016})
    """
    first = blocks[0]
    out = {name: statistic([b[name] for b in blocks])
           for name in ("step_overhead", "part_overhead", "op_overhead")}
    out["step_samples"] = {k: statistic([b["step_samples"][k] for b in blocks])
                           for k in first["step_samples"]}
    positive = [b["between_kernels"] for b in blocks if b["between_kernels"] > 0]
    out["between_kernels"] = statistic(positive) if positive else 0.0
    if first["transfer_latency"] is None:
        out.update(transfer_latency=None, transfer_bandwidth=None, transfer_samples={})
        return out
    samples = {n: statistic([b["transfer_samples"][n] for b in blocks])
               for n in first["transfer_samples"]}
    out.update(transfer_latency=statistic([b["transfer_latency"] for b in blocks]),
               transfer_bandwidth=transfer_bandwidth(samples), transfer_samples=samples)
    return out


def with_distributed_figures(cluster: Cluster, figures: dict,
                             runtime_model=INTERPRETER) -> Cluster:
    """``cluster`` with the figures of :func:`calibrate_distributed` (its ``figures``,
    or one of its ``figures["blocks"]``, whose ``crossing_cpu`` is then none): every
    task's step and part overheads, the host's ``memcpy`` link's latency, bandwidth,
    ``size_costs`` and ``cpu_costs``, every CPU's ``op_overhead`` (``between_kernels``
    for a CPU with kernel costs when measured, else the chain's); recording
    ``runtime_model``."""
    step, part = figures["step_overhead"], figures["part_overhead"]
    tasks = [replace(t, step_overhead=step, part_overhead=part) for t in cluster.tasks]
    links = cluster.links
    latency, bandwidth = figures["transfer_latency"], figures["transfer_bandwidth"]
    if latency is not None:
        costs = size_costs(latency, bandwidth, figures["transfer_samples"])
        cpu_costs = figures.get("crossing_cpu") or {}
        for host in {t.host for t in cluster.tasks}:
            name = f"memcpy:{host}"
            if name in links:
                links[name] = replace(links[name], latency=latency, bandwidth=bandwidth,
                                      size_costs=costs,
                                      cpu_costs=[(n, *c) for n, c in cpu_costs.items()])
    # (between_kernels 0: the steps' noise was larger than the work between their
    # kernels; the chain's figure stands in)
    dispatch = figures["op_overhead"]
    between = figures.get("between_kernels") or dispatch
    devices = [replace(d, op_overhead=between if d.kernel_costs else dispatch)
               if d.is_cpu else d for d in cluster.devices]
    return Cluster(cluster.hosts, tasks, devices, links, cluster.master, cluster.nvlink,
                   runtime_model)
