"""Calibration of TensorFlow's runtime: the micro-benchmarks of :mod:`runtime.calibrate`,
run on TensorFlow's servers, so that the simulator predicts a runtime nobody here wrote.

:func:`calibrate_tensorflow` fills the same figures as :func:`runtime.calibrate` and
:func:`runtime.calibrate.calibrate_distributed` do for this lab's runtime, measured on
``tf.distribute.Server`` processes (:class:`experiments.tf_backend.TFLocalCluster`, one
per task of the cluster, each with its CPU's thread counts):

============================  ==============================================================
figure                        measured by
============================  ==============================================================
``peak_flops``                a MatMul of two ``n x n`` float32 matrices on a server whose
                              CPU has one intra-op thread: the kernel's time in TensorFlow's
                              step stats (``op_start`` to ``op_end``), the fastest of several
``intra_op_speedup``          the same on the master task's server (its intra-op threads),
                              over the above
``mem_bandwidth``             a large Add on the master task's server (reads two arrays,
                              writes one), timed the same way: TensorFlow's elementwise
                              kernels split a large array over the intra-op threads, as they
                              do in the measured steps
``kernel_costs``              :func:`runtime.calibrate_kernels.kernel_calibration_graph` at
                              a tiny size and at :data:`~runtime.calibrate_kernels.FIT_SIZES`,
                              pinned to the master's CPU and exported as a GraphDef, traced
                              with ``FULL_TRACE``; per op type the fixed cost (tiny tensors)
                              and the factor on the roofline, fitted by
                              :func:`runtime.calibrate_kernels.kernel_costs_from_traces`
``op_overhead``               the median gap between kernels in the fastest traced step of
                              the tiny calibration graph (:func:`core.costs.dispatch_gaps`),
                              as :func:`runtime.calibrate` takes it for ours; the chain of
                              tiny Identity ops (:func:`runtime.calibrate.
                              measure_dispatch_overhead`) is kept as
                              ``figures["chain_op_overhead"]``
step, part, crossing figures  :func:`runtime.calibrate.calibrate_distributed` on the servers,
                              the same graphs timed the same way as on ours
                              (:func:`tensorflow_session` opens the sessions)
============================  ==============================================================

Why the gaps between kernels and not the chain's slope: TensorFlow's executor runs an op
it counts inexpensive inline, on the thread that made it ready, so along a chain of
Identity ops it pays almost nothing per op, and the slope over chain lengths is a
difference of two step times that the machine's noise swamps (on this shared machine
quick calibrations gave 0.1 to 128 us per op, while the traced gap gave 1.7 to 2.0 us in
five, 2026-11-27).  Between the kernels of a graph with a workload's fan-in and fan-out the executor
does what it does in a workload's step: the rest of each node (TensorFlow's step stats
bound a kernel by ``op_start``/``op_end`` inside ``all_start``/``all_end``: its inputs
gathered, outputs propagated, consumers scheduled, possibly on another thread).  A
traced step also pays the step-stats collector per node, which an untraced one does
not: the gap is an upper bound.

The result records :data:`core.runtime_model.IDEAL` as its runtime model: TensorFlow's
executor is C++, dispatches ops from every inter-op thread at once, and no interpreter
lock serialises them; the per-op work it does is in ``op_overhead``.

Needs ``tensorflow``; importing this module does not import it.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import replace

from core.cluster import Cluster, ClusterSpec
from core.graph import Graph
from core.placement import Placement
from core.runtime_model import IDEAL
from experiments.machine_load import OtherLoad
from experiments.tf_backend import (TFLocalCluster, import_tensorflow, placed_graph_def,
                                    session_config, trace_from_step_stats)

__all__ = ["calibrate_tensorflow", "tensorflow_session", "traced_tensorflow_steps",
           "measure_tf_matmul_rate", "measure_tf_memory_bandwidth", "measure_tf_kernel_costs",
           "TF_RUNTIME_MODEL"]

_log = logging.getLogger(__name__)

#: The runtime model a TensorFlow calibration records (see the module's docstring).
TF_RUNTIME_MODEL = IDEAL


def _tf_graph(tf, graph: Graph, placement: Placement | None, container: str | None):
    """``graph`` as a TensorFlow graph (pinned to ``placement`` when given); its
    variables in ``container`` when given (a server keeps variables across sessions, by
    name: graphs of one name and other shapes need containers of their own)."""
    v1 = tf.compat.v1
    data = (placed_graph_def(graph, placement) if placement is not None
            else graph.as_graph_def().SerializeToString())
    graph_def = v1.GraphDef.FromString(data)
    if container:
        for node in graph_def.node:
            if node.op in ("Variable", "VariableV2", "VarHandleOp"):
                node.attr["container"].s = container.encode()
    out = tf.Graph()
    with out.as_default():
        v1.import_graph_def(graph_def, name="")
    return out


@contextlib.contextmanager
def _opened(tf, target: str, graph: Graph, *, placement=None, init=None, container=None):
    """A TensorFlow session at ``target`` on ``graph`` (its rewrites off), its
    variables (in ``container``, if given) initialised.  The servers keep the
    variables after the session closes (resetting a container closes every session of
    the master): calibration servers stop after the calibration."""
    v1 = tf.compat.v1
    with v1.Session(target, graph=_tf_graph(tf, graph, placement, container),
                    config=session_config(tf)) as sess:
        if init is not None:
            sess.run(init.name)
        yield sess


@contextlib.contextmanager
def tensorflow_session(target: str, graph: Graph, fetches):
    """:func:`runtime.calibrate.runtime_session` for TensorFlow: a session of
    TensorFlow's runtime at ``target`` (``grpc://...``; ``""``: in this process) on
    ``graph`` (its ops pinned by their own device fields), in a ``with``; yields a
    callable that runs one step of ``fetches``."""
    tf = import_tensorflow()
    names = [f.name for f in fetches]
    with _opened(tf, target, graph) as sess:
        yield lambda: sess.run(names)


def _pinned(graph: Graph, device: str) -> Placement:
    return Placement({op.name: device for op in graph.get_operations()})


def traced_tensorflow_steps(target: str, builds: dict, device: str, steps: int,
                            warmup: int = 2) -> dict:
    """Per key of ``builds`` (``builds[key]`` is ``(graph, init or None, fetches)``):
    ``(graph, traces)``, ``steps`` traced steps (``FULL_TRACE``; their step stats as
    :class:`core.Trace`) of the graph pinned to ``device``, in a session at ``target``
    opened once per graph after ``warmup`` untimed steps.  The graphs take turns step
    by step, as :func:`runtime.calibrate_kernels.measure_kernel_costs` runs ours (the
    machine's speed drifts; each graph's fastest kernels then come from one stretch
    of time)."""
    tf = import_tensorflow()
    v1 = tf.compat.v1
    out: dict = {}
    with contextlib.ExitStack() as stack:
        runs = {}
        for i, (key, (graph, init, fetches)) in enumerate(builds.items()):
            placement = _pinned(graph, device)
            sess = stack.enter_context(_opened(tf, target, graph, placement=placement,
                                               init=init, container=f"calibration{i}"))
            names = [f.name for f in fetches]
            for _ in range(warmup):
                sess.run(names)
            runs[key] = (graph, placement, sess, names)
            out[key] = (graph, [])
        options = v1.RunOptions(trace_level=v1.RunOptions.FULL_TRACE)
        for _ in range(steps):
            for key, (graph, placement, sess, names) in runs.items():
                meta = v1.RunMetadata()
                sess.run(names, options=options, run_metadata=meta)
                out[key][1].append(trace_from_step_stats(meta.step_stats, graph, placement))
    return out


def _fastest_kernel(traces, op_name: str) -> float:
    return min(rec.end - rec.start for trace in traces for rec in trace.ops if rec.op == op_name)


def _binary_graph(shape, op: str):
    """A graph of ``op`` (``matmul`` or ``add``) on two filled float32 arrays of
    ``shape`` (made in the graph: a GraphDef of large constants would be as large)."""
    import core as ctf
    g = Graph()
    with g.as_default():
        a = ctf.fill(list(shape), 1.0, name="a")
        b = ctf.fill(list(shape), 0.5, name="b")
        out = ctf.matmul(a, b, name="op") if op == "matmul" else ctf.add(a, b, name="op")
    return g, None, [out.op]


def measure_tf_matmul_rate(target: str, device: str, n: int = 512, repeat: int = 5) -> float:
    """FLOP/s of TensorFlow's MatMul on ``n x n`` float32 matrices on ``device`` of the
    server at ``target``: the fastest kernel time of ``repeat`` traced steps."""
    runs = traced_tensorflow_steps(target, {"mm": _binary_graph((n, n), "matmul")}, device,
                                   repeat)
    return 2.0 * n ** 3 / _fastest_kernel(runs["mm"][1], "op")


def measure_tf_memory_bandwidth(target: str, device: str, nbytes: int = 64 << 20,
                                repeat: int = 5) -> float:
    """Bytes/s of TensorFlow's Add on float32 arrays of ``nbytes`` each (it reads two and
    writes one) on ``device`` of the server at ``target``, timed as
    :func:`measure_tf_matmul_rate`."""
    n = max(1, nbytes // 4)
    runs = traced_tensorflow_steps(target, {"add": _binary_graph((n,), "add")}, device, repeat)
    return 3.0 * n * 4 / _fastest_kernel(runs["add"][1], "op")


def measure_tf_kernel_costs(target: str, device, steps: int = 20, small: int = 8,
                            large=None) -> tuple[dict, float]:
    """``(kernel_costs, dispatch_gap)`` of TensorFlow's CPU kernels for ``device`` (a
    :class:`core.cluster.Device` with its rates already calibrated) on the server at
    ``target``: the kernel calibration graph on ``small`` and on each size of ``large``
    (default :data:`runtime.calibrate_kernels.FIT_SIZES`), ``steps`` traced steps each
    (:func:`traced_tensorflow_steps`), fitted by
    :func:`runtime.calibrate_kernels.kernel_costs_from_traces`."""
    from runtime.calibrate_kernels import (FIT_SIZES, kernel_calibration_graph,
                                           kernel_costs_from_traces)
    sizes = (small, *(FIT_SIZES if large is None else large))
    runs = traced_tensorflow_steps(target, {n: kernel_calibration_graph(n) for n in sizes},
                                   device.name, steps)
    return kernel_costs_from_traces(device, runs, small)


def _one_thread_cluster() -> Cluster:
    """One task whose CPU has one inter-op and one intra-op thread: where the
    single-threaded MatMul rate is measured (a process's intra-op pool is fixed when
    its first session or server starts, so it takes a server of its own)."""
    return Cluster.from_spec(ClusterSpec({"calibration": ["127.0.0.1:0"]}), cpu_cores=1,
                             cpu_inter_op_threads=1, cpu_intra_op_threads=1)


def calibrate_tensorflow(cluster: Cluster, *, quick: bool = False, env: dict | None = None,
                         one_process: bool = False) -> tuple[Cluster, dict]:
    """``(cluster, figures)``: ``cluster`` (its tasks on this host, e.g.
    :func:`experiments.backends.this_host_cluster`) with the figures of TensorFlow's
    runtime measured on this machine, as :func:`experiments.backends.calibrate_this_host`
    measures ours (see the module's docstring for each figure), recording
    :data:`TF_RUNTIME_MODEL`.

    The servers start for the calibration with ``env`` (one process per task, or all in
    one with ``one_process``: faster to start, but the tasks then share one intra-op
    pool) and stop after it; every CPU device gets the master CPU's figures.
    ``figures`` holds the measurements (``calibrate_distributed``'s, plus
    ``peak_flops``, ``intra_op_speedup``, ``mem_bandwidth``, ``kernel_costs``,
    ``dispatch_gap``, the ``op_overhead`` the devices got, ``chain_op_overhead``, the
    chain's, and ``other_cores``, the cores other programs kept busy).
    ``quick``: small sizes and few repeats (for tests)."""
    from runtime.calibrate import calibrate_distributed
    from runtime.calibrate_kernels import with_kernel_costs
    # Ten traced steps even when quick: a TensorFlow step of the tiny graph takes a
    # millisecond, and three left the fastest kernels to the machine's noise (MatMul's
    # fixed cost 8.6 us from three, 1.3 us from twenty, on a loaded machine).
    n, mem, repeat, steps = (192, 8 << 20, 3, 10) if quick else (1024, 128 << 20, 7, 20)
    job, index = cluster.master
    cpu = next(d for d in cluster.devices_of_task(job, index) if d.is_cpu)
    with OtherLoad() as load, contextlib.ExitStack() as stack:
        servers = stack.enter_context(TFLocalCluster(cluster, env=env, one_process=one_process))
        target = servers.target(job, index)
        multi = measure_tf_matmul_rate(target, cpu.name, n, repeat)
        if cpu.intra_op_threads > 1:
            one = stack.enter_context(TFLocalCluster(_one_thread_cluster(), env=env))
            single_cpu = "/job:calibration/replica:0/task:0/device:CPU:0"
            single = measure_tf_matmul_rate(one.target("calibration", 0), single_cpu, n, repeat)
        else:
            single = multi
        rates = {"peak_flops": single, "intra_op_speedup": max(1.0, multi / single),
                 "mem_bandwidth": measure_tf_memory_bandwidth(target, cpu.name, mem, repeat)}
        costs, gap = measure_tf_kernel_costs(target, replace(cpu, **rates), steps)
        for d in cluster.devices:
            if d.is_cpu:
                cluster = cluster.replace_device(d.name, kernel_costs=(), **rates)
        cluster, figures = calibrate_distributed(
            cluster, servers, quick=quick, runtime_model=TF_RUNTIME_MODEL,
            open_session=tensorflow_session)
    cluster = with_kernel_costs(cluster, costs, dispatch=gap)
    figures.update(rates, kernel_costs=costs, dispatch_gap=gap, other_cores=load.other_cores,
                   chain_op_overhead=figures["op_overhead"], op_overhead=gap)
    _log.info("calibrated TensorFlow's runtime in %.1f s; other programs kept %.1f cores busy",
              load.seconds, load.other_cores)
    return cluster, figures
