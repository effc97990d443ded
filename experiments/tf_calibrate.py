"""Calibration of TensorFlow's runtime: the micro-benchmarks of :mod:`runtime.calibrate`,
run on TensorFlow's servers, so that the simulator predicts a runtime nobody here wrote.

:func:`calibrate_tensorflow` fills the same figures as :func:`runtime.calibrate` and
:func:`runtime.calibrate.calibrate_distributed` do for this lab's runtime, measured on
``tf.distribute.Server`` processes (:class:`experiments.tf_backend.TFLocalCluster`): the
cluster's own tasks (each with its CPU's thread counts) and, for the device figures, a
server whose CPU has one inter-op thread and the device's intra-op threads (``alone``:
each kernel timed alone, as :func:`runtime.calibrate` times ours) and one with one
thread of each (``single``).  Kernel times are TensorFlow's own, from its step stats
(``op_start`` to ``op_end`` of the node), the fastest over several traced steps:

============================  ==============================================================
figure                        measured by
============================  ==============================================================
``peak_flops``                a MatMul of two ``n x n`` float32 matrices on ``single``
``intra_op_speedup``          the same on ``alone``, over the above
``bandwidth_curve``,          :func:`measure_tf_bandwidth_curve`: an Add of two float32
``mem_bandwidth``             arrays per size on ``alone``, written into its first input's
                              buffer as a step's elementwise ops are (TensorFlow's
                              elementwise kernels split a large array over the intra-op
                              threads, as in a step); ``mem_bandwidth`` is its largest
                              size's rate
``Host.shared_bandwidth``     the same with two Adds at once, on the master task's server
                              (its inter-op threads run them together)
``kernel_costs``              :func:`runtime.calibrate_kernels.kernel_calibration_graph` at
                              a tiny size (eight copies of the step in one graph) and at
                              :data:`~runtime.calibrate_kernels.FIT_SIZES` on ``alone``,
                              pinned and exported as a GraphDef, traced with
                              ``FULL_TRACE``; per op type the fixed cost (tiny tensors) and
                              the factor on the roofline, fitted by
                              :func:`runtime.calibrate_kernels.kernel_costs_from_traces`,
                              less the products TensorFlow split over the intra-op
                              threads (the large sizes run on ``single`` too:
                              :func:`split_products`)
``op_overhead``               the median gap between kernels in the fastest traced step of
                              the tiny calibration graph on ``alone``
                              (:func:`core.costs.dispatch_gaps`); the untraced step less a
                              NoOp step and its kernels (:func:`measure_tf_dispatch`, how
                              :func:`runtime.calibrate` measures ours) and a chain of tiny
                              Identity ops (:func:`runtime.calibrate.
                              measure_dispatch_overhead`) are kept beside it
crossing figures              :func:`runtime.calibrate.calibrate_distributed` on the
                              cluster's servers, the same graphs timed the same way as on
                              ours (:func:`tensorflow_session` opens the sessions)
``step_overhead``,            the same steps as ``calibrate_distributed``'s, their tiny ops
``part_overhead``             fetched as targets, as a training step fetches its train op
                              (:func:`_with_op_fetch_overheads`)
``Link.wait`` of ``memcpy``   the crossing's latency less the servers' CPU time per
                              crossing (:func:`measure_crossing_cpu`) over the host's
                              cores: the part of a crossing that overlaps others
``Link.busy_cores`` of        the servers' CPU per crossing of a 4 MiB tensor over the time
``memcpy``                    it adds to a step, along a chain of them
                              (:func:`measure_crossing_cores`)
============================  ==============================================================

Why between the kernels of the calibration graph and not along a chain: TensorFlow's executor runs an op
it counts inexpensive inline, on the thread that made it ready, so along a chain of
Identity ops it pays almost nothing per op, and the slope over chain lengths is a
difference of two step times that the machine's noise swamps (on this shared machine
quick calibrations gave 0.1 to 128 us per op, while the traced gap gave 1.7 to 2.0 us in
five, 2026-11-27).  Between the kernels of a graph with a workload's fan-in and fan-out the executor
does what it does in a workload's step: the rest of each node (TensorFlow's step stats
bound a kernel by ``op_start``/``op_end`` inside ``all_start``/``all_end``: its inputs
gathered, outputs propagated, consumers scheduled, possibly on another thread).  A
traced step also pays the step-stats collector per node, which an untraced one does
not: the gap is an upper bound.  (The untraced step less its kernels, how ours is
measured now, does not work for TensorFlow: see :func:`measure_tf_kernel_costs`.)

Why a crossing's wait: TensorFlow's crossings are RPCs, many in flight at once; what
they take turns on is the host's CPU, which serialises and copies each tensor at both
ends.  32 tiny tensors crossing at once added to a step 29 to 49 us each (one alone:
0.23 to 0.30 ms, its latency), about the servers' CPU time per crossing (63 to 112 us)
over the host's two cores (``docs/probes/tf_crossings_probe.py``; 2026-11-27).  So each
crossing holds the host's ``memcpy`` link for its share of that CPU time (its CPU time
over the host's cores, :func:`_with_crossing_waits`) and its bytes, and waits out the
rest of its latency.

Why a crossing's cores: a crossing keeps both its ends' threads busy while it crosses
(encoding and writing, reading and decoding), on the cores the kernels run on: a 4 MiB
one used 3.3 to 3.8 ms of the servers' CPU per 1.6 to 2.4 ms it added to a step
(``docs/probes/tf_fan_in_probe.py``, ``docs/probes/tf_crossing_cores_probe.py``: about
two cores at every size from 64 KiB to 4 MiB), and tiny ones beside a chain of MatMuls
took 80-95% of the two apart (``docs/probes/tf_core_contention_probe.py``).  So while a
crossing holds the host's link it also holds ``busy_cores`` of its cores, queued with
the kernels for them (:data:`core.runtime_model.TENSORFLOW`'s ``crossing_cores``).

The result records :data:`core.runtime_model.TENSORFLOW` as its runtime model:
TensorFlow's executor is C++, dispatches ops from every inter-op thread at once, and no
interpreter lock serialises them (:data:`core.runtime_model.IDEAL`'s dispatch; the
per-op work it does is in ``op_overhead``), and its crossings hold cores as above.

Needs ``tensorflow``; importing this module does not import it.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
from dataclasses import replace

import numpy as np

from core.cluster import Cluster, ClusterSpec
from core.hardware import memcpy_link_name
from core.graph import Graph
from core.placement import Placement
from core.runtime_model import TENSORFLOW
from experiments.machine_load import OtherLoad
from experiments.tf_backend import (TFLocalCluster, import_tensorflow, placed_graph_def,
                                    session_config, trace_from_step_stats)

__all__ = ["calibrate_tensorflow", "tensorflow_session", "traced_tensorflow_steps",
           "measure_tf_matmul_rate", "measure_tf_bandwidth_curve", "measure_tf_kernel_costs",
           "measure_crossing_cpu", "crossings_graph", "crossing_chain_graph",
           "measure_crossing_cores", "with_crossing_cores", "split_products", "SPLIT_SPEEDUP", "TF_RUNTIME_MODEL"]

_log = logging.getLogger(__name__)

#: Numbers the containers of the calibration graphs' variables: a server keeps a
#: variable by name after its session closes, and graphs of one name and another shape
#: (each size of the kernel calibration graph) need containers of their own.
_CONTAINERS = itertools.count()

#: The runtime model a TensorFlow calibration records (see the module's docstring).
TF_RUNTIME_MODEL = TENSORFLOW


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
        for key, (graph, init, fetches) in builds.items():
            placement = _pinned(graph, device)
            sess = stack.enter_context(_opened(tf, target, graph, placement=placement,
                                               init=init,
                                               container=f"calibration{next(_CONTAINERS)}"))
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


def _fastest_span(traces, prefix: str) -> float:
    """The fastest step's time from the first start to the last end of the ops whose
    names start with ``prefix``."""
    def span(trace):
        recs = [r for r in trace.ops if r.op.startswith(prefix)]
        return max(r.end for r in recs) - min(r.start for r in recs)
    return min(span(trace) for trace in traces)


def _binary_graph(shape, op: str, copies: int = 1, in_place: bool = False):
    """A graph of ``copies`` independent ``op`` (``matmul`` or ``add``, named ``op0``,
    ``op1``...) each on two float32 variables of ``shape``, filled by the initializer
    (a GraphDef of large constants would be as large; a Fill in the step would run
    with it): ``(graph, init, fetches)``.

    ``in_place`` (``add`` only): each ``op<k>`` adds a variable to the output of an
    Add before it (``pre<k>``, of the two variables), whose buffer no other op reads,
    so TensorFlow's kernel writes its result into it, as most elementwise ops of a
    step do; an Add of two variables cannot (a variable's buffer is its own) and
    allocates its output, which costs more than the Add itself at large sizes
    (``docs/probes/tf_membw_probe.py``)."""
    import core as ctf
    g = Graph()
    with g.as_default():
        outs = []
        for k in range(copies):
            a = ctf.Variable(ctf.fill(list(shape), 1.0), name=f"a{k}").value()
            b = ctf.Variable(ctf.fill(list(shape), 0.5), name=f"b{k}").value()
            if op == "matmul":
                outs.append(ctf.matmul(a, b, name=f"op{k}"))
            elif in_place:
                outs.append(ctf.add(ctf.add(a, b, name=f"pre{k}"), b, name=f"op{k}"))
            else:
                outs.append(ctf.add(a, b, name=f"op{k}"))
        init = ctf.global_variables_initializer()
    return g, init, [t.op for t in outs]


def measure_tf_matmul_rate(target: str, device: str, n: int = 512, repeat: int = 5) -> float:
    """FLOP/s of TensorFlow's MatMul on ``n x n`` float32 matrices on ``device`` of the
    server at ``target``: the fastest kernel time of ``repeat`` traced steps."""
    runs = traced_tensorflow_steps(target, {"mm": _binary_graph((n, n), "matmul")}, device,
                                   repeat)
    return 2.0 * n ** 3 / _fastest_kernel(runs["mm"][1], "op0")


def measure_tf_bandwidth_curve(target: str, device: str, elements, repeat: int = 7,
                               arrays: int = 1, in_place: bool = True
                               ) -> list[tuple[int, float]]:
    """``[(working set bytes, bytes/s)]`` of TensorFlow's Add on ``device`` of the server
    at ``target``, as :func:`runtime.calibrate.measure_bandwidth_curve` (``arrays=1``)
    and :func:`runtime.calibrate.measure_shared_bandwidth` (``arrays=2``: two Adds of
    one step at once, their bytes over the time from the first's start to the last's
    end) measure ours: for each size of ``elements``, two float32 arrays read and one
    written per Add, the fixed cost of an Add on one element taken off; the fastest of
    ``repeat`` traced steps, the sizes taking turns.

    ``in_place`` (default): each timed Add writes into its first input's buffer, the
    output of an Add before it (:func:`_binary_graph`), as a step's elementwise ops
    do; else it adds two variables and allocates its output.  The kernels' factors
    (:func:`measure_tf_kernel_costs`) are fitted on ops that mostly reuse a buffer, so
    an allocating Add's rate, five times lower at 1M elements
    (``docs/probes/tf_membw_probe.py``), made ``Host.shared_bandwidth`` a fifth of what
    the kernels ask of memory: two kernels at once were predicted ten times slower
    each (a random graph of million-element ops: 10.3 ms predicted, 4.6 ms measured)."""
    builds = {n: _binary_graph((n,), "add", arrays, in_place) for n in (1, *elements)}
    runs = traced_tensorflow_steps(target, builds, device, repeat)
    took = {n: _fastest_span(traces, "op") for n, (_, traces) in runs.items()}
    return [(12 * n * arrays, 12 * n * arrays / max(took[n] - took[1], 1e-9)) for n in elements]


#: How many times faster than on one thread a kernel of the calibration graph ran on
#: its device's intra-op threads to count as split over them (TensorFlow's products
#: ran 1.5 to 2 times faster when split and 0.8 to 1.2 times when not, one small one
#: 1.33: ``docs/probes/tf_matmul_threads_probe.py``).
SPLIT_SPEEDUP = 1.4


def split_products(device, alone: dict, single: dict) -> dict[int, set[str]]:
    """Per size ``n`` of ``alone``, the names of the compute-bound ops (the flops part
    of their roofline on ``device`` above zero and at least its memory part: the
    products) whose fastest kernel in ``alone[n]`` ran at least :data:`SPLIT_SPEEDUP`
    times faster than in ``single[n]``: the products TensorFlow split over the device's
    intra-op threads.  ``alone`` and ``single`` map sizes to ``(graph, traces)`` of one
    graph on the device's intra-op threads and on one thread (a size ``single`` lacks
    splits nothing).

    Why: TensorFlow's oneDNN products run on one thread while their operands and
    result fit the L2 cache (``ExecuteSingleThreadedGemm`` in its
    ``mkl_matmul_ops_common.h``), on the intra-op pool above; a ``[256, 256]`` product
    ran at the single-thread rate on two intra-op threads, a ``[512, 512]`` one at
    twice that.  One factor fitted over both regimes predicted the small products of
    the workloads' steps a third faster than they ran (mlp's ``[64, 256] @ [256,
    256]``: 57 us predicted, 78 to 85 us measured with no other kernel beside it)."""
    from core.costs import StaticCostModel
    from runtime.calibrate_kernels import _fastest_kernels
    bare = replace(device, op_overhead=0.0, kernel_costs=())
    model = StaticCostModel()
    out: dict[int, set[str]] = {}
    for n, (graph, traces) in alone.items():
        many = _fastest_kernels(traces)
        one = _fastest_kernels(single[n][1]) if n in single else {}
        out[n] = set()
        for name, t in many.items():
            op = graph.get_operation_by_name(name)
            memory = model.memory_traffic(op, bare)[1]
            compute = model.op_time(op, bare) - memory
            if name in one and 0 < compute >= memory and one[name] >= SPLIT_SPEEDUP * t:
                out[n].add(name)
    return out


def _without(traces, names) -> list:
    """``traces`` less the op records of ``names``."""
    return [replace(trace, ops=[r for r in trace.ops if r.op not in names]) for trace in traces]


def measure_tf_kernel_costs(target: str, device, steps: int = 20, small: int = 8,
                            large=None, pin: str | None = None, copies: int = 8,
                            single: tuple[str, str] | None = None
                            ) -> tuple[dict, dict, list, dict]:
    """``(kernel_costs, dispatch, fused, split)`` of TensorFlow's CPU kernels for ``device``
    (a :class:`core.cluster.Device` with its rates already calibrated) on the server at
    ``target``: the kernel calibration graph on ``small`` and on each size of ``large``
    (default :data:`runtime.calibrate_kernels.FIT_SIZES`), ``steps`` traced steps each
    (:func:`traced_tensorflow_steps`, pinned to ``pin``, default ``device``'s name: a
    device of that server), fitted by
    :func:`runtime.calibrate_kernels.kernel_costs_from_traces`.

    The small size's graph holds ``copies`` copies of the step, so that each type's
    fixed cost is the median over many of its ops among the others, as in a model's
    step: TensorFlow runs the first op of a type in a step several times slower than
    the next ones (``docs/probes/tf_warm_kernels_probe.py``: a MatMul of 8 x 8 took
    3.4 us as the graph's only one, 1.4 us as the median of eight copies' ones;
    2026-11-27), and a graph with one op of a type gave fixed costs that overstated the
    recurrent workload's small kernels two- to fourfold (its kernels summed to 2.2
    times what TensorFlow measured with one copy, 1.05 times with eight, over three
    calibrations each; the transformer's MatMuls, median error per op 0.65 and 0.35).

    ``dispatch`` holds the executor's work per op between kernels: ``"gap"``, the
    median gap between kernels of the fastest traced step
    (:func:`core.costs.dispatch_gaps`: what the devices get), and ``"untraced"``
    (:func:`measure_tf_dispatch`, as :func:`runtime.calibrate_kernels.untraced_dispatch`
    measures ours), kept to compare: TensorFlow's executor runs ops at once even with
    one inter-op thread (an inexpensive op inline on the thread that made it ready,
    beside the pool's thread), so the step less its kernels is no sum of gaps; it came
    out at or below zero in seven of eight quick calibrations (2026-11-27).

    ``fused`` lists the op types of the step that TensorFlow's step stats never show:
    with oneDNN on (TensorFlow's default on x86) a graph pass that runs whatever the
    session's rewrite options fuses, e.g., a Conv2D into its BiasAdd's node (recorded
    under the BiasAdd's name, its kernel doing both) and a BiasAddGrad into the
    Conv2DBackpropFilter's.  Those types take the ``"*"`` entry, while the node that
    absorbed them fits a factor that includes their work (at the calibration graph's
    shapes).

    ``single``: ``(target, device)`` of a server whose CPU has one intra-op thread.
    The large sizes' graphs then run there too (half the steps), and the products
    TensorFlow split over ``device``'s intra-op threads (:func:`split_products`) are
    left out of the fit: the factors are those of the products it runs on one thread,
    as it runs those of the workloads' steps, whose operands fit the L2 cache (a
    product split over the pool is then predicted at the single-thread rate, times
    ``device``'s ``intra_op_speedup``).  ``split`` holds, per size, the products left
    out, and ``"all_sizes"`` the kernel costs fitted with them (to compare)."""
    from core.graph import ops_needed
    from runtime.calibrate_kernels import (FIT_SIZES, kernel_calibration_graph,
                                           kernel_costs_from_traces)
    sizes = (small, *(FIT_SIZES if large is None else large))
    builds = {n: kernel_calibration_graph(n, copies=copies if n == small else 1) for n in sizes}
    runs = traced_tensorflow_steps(target, builds, pin or device.name, steps)
    from core.costs import dispatch_gaps
    from runtime.calibrate_kernels import _fastest, _fastest_kernels
    costs = all_sizes = kernel_costs_from_traces(device, runs, small)
    split: dict = {"sizes": {}}
    if single is not None:
        large_builds = {n: builds[n] for n in sizes if n != small}
        one = traced_tensorflow_steps(single[0], large_builds, single[1], max(5, steps // 2))
        names = split_products(device, {n: runs[n] for n in large_builds}, one)
        fit = {n: (graph, _without(traces, names.get(n, ())))
               for n, (graph, traces) in runs.items()}
        costs = kernel_costs_from_traces(device, fit, small)
        split = {"sizes": {n: sorted(v) for n, v in names.items()}, "all_sizes": all_sizes}
    graph, _, fetches = builds[small]
    kernels = _fastest_kernels(runs[small][1])
    dispatch = {"untraced": measure_tf_dispatch(target, pin or device.name, small, kernels,
                                                steps, copies),
                "gap": dispatch_gaps([_fastest(runs[small][1])], graph).get("CPU", 0.0)}
    step = ops_needed([getattr(f, "op", f) for f in fetches])
    seen = {rec.op for trace in runs[small][1] for rec in trace.ops}
    fused = sorted({op.type for op in step if op.name not in seen} - set(costs))
    return costs, dispatch, fused, split


def measure_tf_dispatch(target: str, device: str, n: int, kernels: dict, steps: int = 20,
                        copies: int = 1) -> float:
    """Seconds per op of TensorFlow's executor between kernels, untraced: the fastest
    step of the kernel calibration graph on ``n x n`` tensors pinned to ``device`` of
    the server at ``target``, less the fastest step of a graph of one ``NoOp`` there and
    less ``kernels`` (each op's fastest kernel time, from traced steps), over the ops
    that ran, as :func:`runtime.calibrate_kernels.untraced_dispatch` measures ours."""
    import core as ctf
    from runtime.calibrate_kernels import kernel_calibration_graph, session_step_times
    tf = import_tensorflow()
    graph, init, fetches = kernel_calibration_graph(n, copies=copies)
    empty = Graph()
    with empty.as_default():
        nothing = ctf.no_op(name="nothing")
    with _opened(tf, target, graph, placement=_pinned(graph, device), init=init,
                 container=f"calibration{next(_CONTAINERS)}") as session, \
            _opened(tf, target, empty, placement=_pinned(empty, device)) as bare:
        names = [f.name for f in fetches]
        for _ in range(2):
            session.run(names)
            bare.run(nothing.name)
        step, fixed = session_step_times([(session, names), (bare, nothing.name)], steps)
    return max(0.0, (step - fixed - sum(kernels.values())) / max(1, len(kernels)))


def crossings_graph(tasks: list[str], crossings: int, crossing: bool = True):
    """``(graph, reads)``: ``crossings`` scalars, the ``i``-th made on the ``i % n``-th
    of the ``n`` devices ``tasks`` and read (an ``Identity``, in ``reads``) on the next
    one round them, or with ``crossing`` False on its maker: tensors crossing at once,
    and the same graph without the crossings."""
    import core as ctf
    graph = Graph()
    reads = []
    with graph.as_default():
        for i in range(crossings):
            maker = tasks[i % len(tasks)]
            with ctf.device(maker):
                x = ctf.identity(ctf.constant(np.float32(i), name=f"c{i}"), name=f"x{i}")
            with ctf.device(tasks[(i + 1) % len(tasks)] if crossing else maker):
                reads.append(ctf.identity(x, name=f"y{i}").op)
    return graph, reads


def measure_crossing_cpu(servers: TFLocalCluster, master=None, crossings: int = 32,
                         steps: int = 100) -> float:
    """Seconds of the servers' CPU one tiny crossing costs TensorFlow: ``steps`` steps
    (at ``master``, default the first task) of a graph of ``crossings`` scalars, the
    ``i``-th made on the ``i % n``-th of the ``n`` tasks and read on the next one round
    them (each read fetched), less as many steps of the same graph with each read on
    its maker, over the crossings (:meth:`TFLocalCluster.cpu_seconds`; at least 0).

    A hundred steps: the processes' CPU time comes in clock ticks (10 ms on Linux), and
    thirty steps of 32 crossings put a tick at 10 us per crossing (the figure went from
    83 to 188 us in 24 calibrations, in steps of 10 us; 2026-11-27)."""
    tasks = [f"/job:{job}/replica:0/task:{index}/device:CPU:0" for job, index in servers.tasks]
    used = []
    for crossing in (True, False):
        graph, reads = crossings_graph(tasks, crossings, crossing)
        with tensorflow_session(servers.target(*(master or servers.tasks[0])), graph,
                                reads) as run:
            for _ in range(3):
                run()
            before = servers.cpu_seconds()
            for _ in range(steps):
                run()
            used.append(servers.cpu_seconds() - before)
    return max(0.0, (used[0] - used[1]) / (steps * crossings))


def crossing_chain_graph(src: str, dst: str, nbytes: int, hops: int, crossing: bool = True):
    """``(graph, fetches)``: a float32 tensor of ``nbytes`` made on ``src`` and passed
    on by ``hops`` Identity ops alternating between ``dst`` and ``src`` (each hop a
    crossing, one after another), or with ``crossing`` False all on ``dst``; a tiny
    op on ``src`` in both (both graphs involve both tasks)."""
    import core as ctf
    graph = Graph()
    with graph.as_default():
        with ctf.device(src if crossing else dst):
            x = ctf.constant(np.ones(max(1, nbytes // 4), np.float32), name="a")
        for i in range(hops):
            with ctf.device((dst if i % 2 == 0 else src) if crossing else dst):
                x = ctf.identity(x, name=f"hop{i}")
        with ctf.device(src):
            tiny = ctf.identity(ctf.constant(np.float32(1.0), name="t"), name="tiny")
    return graph, [x.op, tiny.op]


def measure_crossing_cores(servers: TFLocalCluster, master=None, src=None,
                           nbytes: int = 4 << 20, hops: int = 8, steps: int = 30
                           ) -> tuple[float, float, float]:
    """``(cores, cpu, seconds)``: how many of the host's cores one crossing of a large
    tensor (``nbytes``) between two of TensorFlow's servers keeps busy while it
    crosses: the servers' CPU seconds per crossing (``cpu``) over the time each adds
    to a step (``seconds``), along a chain of ``hops`` crossings one after another
    between ``src`` (default: the first task that is not the master) and ``master``
    (default the first task; :func:`crossing_chain_graph`), less the same chain on the
    master alone; ``steps`` steps of each, the two graphs taking turns step by step
    (the CPU seconds over all of them, the time the fastest step of each).

    Why a large tensor: its crossing's own work (encoding, copying, decoding it at both
    ends) is most of its time, so CPU over time says how many cores it holds; a tiny
    crossing's time is mostly a wait (``docs/probes/tf_crossing_cores_probe.py``)."""
    from time import perf_counter
    master = tuple(master or servers.tasks[0])
    src = tuple(src or next(t for t in servers.tasks if tuple(t) != master))
    names = {t: f"/job:{t[0]}/replica:0/task:{t[1]}/device:CPU:0" for t in (master, src)}
    cpu = {True: 0.0, False: 0.0}
    fastest = {True: float("inf"), False: float("inf")}
    with contextlib.ExitStack() as stack:
        runs = {}
        for crossing in (True, False):
            graph, fetches = crossing_chain_graph(names[src], names[master], nbytes, hops,
                                                  crossing)
            runs[crossing] = stack.enter_context(
                tensorflow_session(servers.target(*master), graph, fetches))
            for _ in range(3):
                runs[crossing]()
        for _ in range(steps):
            for crossing, run in runs.items():
                before, t0 = servers.cpu_seconds(), perf_counter()
                run()
                fastest[crossing] = min(fastest[crossing], perf_counter() - t0)
                cpu[crossing] += servers.cpu_seconds() - before
    used = max(0.0, (cpu[True] - cpu[False]) / (steps * hops))
    seconds = max(1e-9, (fastest[True] - fastest[False]) / hops)
    return used / seconds, used, seconds


def _with_op_fetch_overheads(cluster: Cluster, servers: TFLocalCluster, figures: dict
                             ) -> Cluster:
    """``cluster`` with every task's ``step_overhead`` and ``part_overhead`` measured
    again on ``servers`` with the tiny ops fetched as targets
    (:func:`runtime.calibrate.measure_step_overheads` with ``fetch_tensors=False``), as
    a training step fetches its train op; ``figures`` gets the new ones, and
    calibrate_distributed's, with a tensor fetched from each task, as
    ``part_overhead_fetched``.  On TensorFlow's servers a tensor fetched from each
    extra task doubled the slope (``docs/probes/tf_parts_probe.py``), and that slope,
    once per remote task before the master's own part starts, put the round-robin
    placements' parts milliseconds late."""
    from runtime.calibrate import measure_step_overheads
    step, part, samples = measure_step_overheads(servers, cluster.master,
                                                 open_session=tensorflow_session,
                                                 fetch_tensors=False)
    figures.update(part_overhead_fetched=figures["part_overhead"], step_overhead=step,
                   part_overhead=part, step_samples=samples)
    for t in cluster.tasks:
        cluster = cluster.replace_task(t.job, t.index, step_overhead=step, part_overhead=part)
    return cluster


def _with_crossing_waits(cluster: Cluster, cpu: float) -> Cluster:
    """``cluster`` with every ``memcpy`` link's ``wait`` its latency less ``cpu`` over
    its host's cores (at least 0): the link holds each crossing for its share of the
    host's CPU, the bytes at the link's bandwidth on top.

    Why over the cores: the servers' CPU work per crossing runs on whichever core is
    free, and a step of many crossings took about their CPU time over the host's two
    cores (32 tiny ones at once; in a round-robin placement of the recurrent workload,
    295 crossings, 57 ms of the servers' CPU per step against a 30 ms step), while
    large tensors took turns at the link's bandwidth (32 of 1 MiB at once, each about
    what one alone takes; ``docs/probes/tf_crossings_probe.py``).  One link per host
    holding each crossing for its CPU time ran the round-robin placements' crossings
    one at a time, at twice their measured steps."""
    hosts = {memcpy_link_name(h.name): max(1, h.cpu_cores) for h in cluster.hosts}
    for name, link in cluster.links.items():
        if link.kind == "memcpy":
            share = cpu / hosts.get(name, 1)
            cluster = cluster.replace_link(name, wait=max(0.0, link.latency - share))
    return cluster


def with_crossing_cores(cluster: Cluster, cores: float) -> Cluster:
    """``cluster`` with every ``memcpy`` link's ``busy_cores`` set to ``cores`` (the
    host's cores one crossing keeps busy, :func:`measure_crossing_cores`), which a
    runtime model with ``crossing_cores`` makes each crossing of the host hold while
    on the link, queued with the kernels.

    >>> from core.cluster import Cluster
    >>> c = with_crossing_cores(Cluster.single_host(), 1.7)
    >>> sorted((l.kind, l.busy_cores) for l in c.links.values())
    [('memcpy', 1.7), ('network', 0.0)]
    """
    for name, link in cluster.links.items():
        if link.kind == "memcpy":
            cluster = cluster.replace_link(name, busy_cores=max(0.0, float(cores)))
    return cluster


def _calibration_servers(cpu) -> Cluster | None:
    """The servers the device figures of ``cpu`` are measured on besides its own task's,
    one process each (a process's intra-op pool is fixed when its first session or
    server starts): ``alone``, one inter-op thread and the device's intra-op threads
    (each kernel timed alone, as the simulator's figures mean it: kernels at once slow
    each other through the host's shared memory bandwidth, measured on its own), unless
    the device's own task runs one op at a time; ``single``, one thread of each (the
    single-threaded MatMul rate), unless the device has one intra-op thread.  None when
    neither is needed."""
    jobs = {}
    if cpu.inter_op_threads > 1:
        jobs["alone"] = ["127.0.0.1:0"]
    if cpu.intra_op_threads > 1:
        jobs["single"] = ["127.0.0.1:0"]
    if not jobs:
        return None
    cluster = Cluster.from_spec(ClusterSpec(jobs), cpu_cores=cpu.intra_op_threads,
                                cpu_inter_op_threads=1, cpu_intra_op_threads=cpu.intra_op_threads)
    if "single" in jobs:
        cluster = cluster.replace_device(_cpu("single"), intra_op_threads=1)
    return cluster


def _cpu(job: str) -> str:
    return f"/job:{job}/replica:0/task:0/device:CPU:0"


def _device_figures(cluster: Cluster, servers: TFLocalCluster, env, quick: bool
                    ) -> tuple[dict, dict, list]:
    """``(CPU figures, kernel costs, fused types)`` of TensorFlow on this host for the
    master's CPU of ``cluster``, and the host's shared bandwidth among the figures
    (``"shared_bandwidth"``, measured on the master's server ``servers``, whose
    inter-op threads run the two Adds at once) and the products left out of the
    kernels' fit (``"split"``, see :func:`measure_tf_kernel_costs`)."""
    from runtime.calibrate import CURVE_ELEMENTS, QUICK_CURVE_ELEMENTS
    n, repeat = (192, 10) if quick else (1024, 7)
    # Twenty traced steps even when quick: a TensorFlow step of these graphs takes a
    # millisecond or a few, and fewer left the fastest kernels to the machine's noise
    # (MatMul's fixed cost 8.6 us from three, 1.3 us from twenty; an Add of 1M elements
    # 20 GB/s from three, against 82 GB/s from fifteen; a loaded machine, 2026-11-27).
    # Likewise ten MatMuls for the rate: from three, quick calibrations minutes apart
    # gave 71 to 111 GFLOP/s (this machine's speed flips between two states within
    # seconds), from ten 103 to 111 in eight.
    steps = curve_repeat = 20
    elements = QUICK_CURVE_ELEMENTS if quick else CURVE_ELEMENTS
    job, index = cluster.master
    cpu = next(d for d in cluster.devices_of_task(job, index) if d.is_cpu)
    extra = _calibration_servers(cpu)
    with contextlib.ExitStack() as stack:
        own = extra and stack.enter_context(TFLocalCluster(extra, env=env))
        alone, pin = ((own.target("alone", 0), _cpu("alone")) if cpu.inter_op_threads > 1
                      else (servers.target(job, index), cpu.name))
        multi = measure_tf_matmul_rate(alone, pin, n, repeat)
        single = (measure_tf_matmul_rate(own.target("single", 0), _cpu("single"), n, repeat)
                  if cpu.intra_op_threads > 1 else multi)
        curve = measure_tf_bandwidth_curve(alone, pin, elements, curve_repeat)
        figures = {"peak_flops": single, "intra_op_speedup": max(1.0, multi / single),
                   "bandwidth_curve": curve, "mem_bandwidth": curve[-1][1]}
        costs, dispatch, fused, split = measure_tf_kernel_costs(
            alone, replace(cpu, **figures), steps, pin=pin,
            single=(own.target("single", 0), _cpu("single")) if cpu.intra_op_threads > 1
            else None)
    figures["op_overhead"] = dispatch["gap"]
    shared = ()
    if cpu.inter_op_threads > 1 and cluster.host(cpu.host).cpu_cores > 1:
        shared = measure_tf_bandwidth_curve(servers.target(job, index), cpu.name, elements,
                                            curve_repeat, arrays=2)
    return ({**figures, "shared_bandwidth": shared, "untraced_dispatch": dispatch["untraced"],
             "split": split}, costs, fused)


def calibrate_tensorflow(cluster: Cluster, *, quick: bool = False, env: dict | None = None,
                         one_process: bool = False) -> tuple[Cluster, dict]:
    """``(cluster, figures)``: ``cluster`` (its tasks on this host, e.g.
    :func:`experiments.backends.this_host_cluster`) with the figures of TensorFlow's
    runtime measured on this machine, as :func:`experiments.backends.calibrate_this_host`
    measures ours (see the module's docstring for each figure), recording
    :data:`TF_RUNTIME_MODEL`.

    The servers start for the calibration with ``env`` (one process per task, or all in
    one with ``one_process``: faster to start, but the tasks then share one intra-op
    pool), beside those of the device figures (:func:`_calibration_servers`), and stop
    after it; every CPU device gets the master CPU's figures, every host with a
    calibrated CPU and two cores the shared bandwidth.  ``figures`` holds the
    measurements (``calibrate_distributed``'s, plus the device figures,
    ``kernel_costs``, ``fused`` (the op types TensorFlow fused into others, see
    :func:`measure_tf_kernel_costs`), ``op_overhead`` and ``dispatch_gap`` (the
    devices': the traced gap between kernels), ``untraced_dispatch`` and
    ``chain_op_overhead`` (the two other measures, to compare), ``crossing_cpu`` (the
    servers' CPU time per crossing, :func:`measure_crossing_cpu`; with two tasks or
    more), ``crossing_cores``, ``crossing_cores_cpu`` and ``crossing_cores_seconds``
    (the host's cores a large crossing keeps busy, its CPU and its time:
    :func:`measure_crossing_cores`; with two tasks or more), ``split_products`` and ``kernel_costs_all_sizes`` (the products TensorFlow
    split over the intra-op threads, per size, left out of the kernels' fit, and the
    fit with them: :func:`measure_tf_kernel_costs`) and ``other_cores``, the cores
    other programs kept busy).  ``quick``: small sizes and few repeats (for tests)."""
    from runtime.calibrate import calibrate_distributed
    from runtime.calibrate_kernels import with_kernel_costs
    with OtherLoad() as load, TFLocalCluster(cluster, env=env, one_process=one_process) as servers:
        device, costs, fused = _device_figures(cluster, servers, env, quick)
        shared = device.pop("shared_bandwidth")
        untraced = device.pop("untraced_dispatch")
        split = device.pop("split")
        for d in cluster.devices:
            if d.is_cpu:
                # (our executor's warm kernel costs and its BLAS's paths and threads, if
                # the cluster had them, are not TensorFlow's: its kernels are priced at
                # their calibrated fixed costs and factors on the roofline, and its
                # products split over its intra-op pool)
                cluster = cluster.replace_device(d.name, kernel_costs=(), warm_kernel_costs=(),
                                                 warm_span=0, gemm_costs=(), products_split=True,
                                                 **device)
                if shared and cluster.host(d.host).cpu_cores > 1:
                    cluster = cluster.replace_host(d.host, shared_bandwidth=shared)
        # The distributed figures at their full count even when quick: TensorFlow's
        # steps of those tiny graphs take half a millisecond, so it costs seconds, and
        # the quick count's few steps left the step overhead anywhere between 0.40 and
        # 1.21 ms from one calibration to the next (0.40 to 0.45 ms in ten at the full
        # count; 2026-11-27).
        cluster, figures = calibrate_distributed(
            cluster, servers, quick=False, runtime_model=TF_RUNTIME_MODEL,
            open_session=tensorflow_session)
        if len(servers.tasks) > 1:
            cluster = _with_op_fetch_overheads(cluster, servers, figures)
            figures["crossing_cpu"] = measure_crossing_cpu(servers, cluster.master)
            cluster = _with_crossing_waits(cluster, figures["crossing_cpu"])
            cores, cpu, seconds = measure_crossing_cores(servers, cluster.master)
            figures.update(crossing_cores=cores, crossing_cores_cpu=cpu,
                           crossing_cores_seconds=seconds)
            cluster = with_crossing_cores(cluster, cores)
    cluster = with_kernel_costs(cluster, costs, dispatch=device["op_overhead"])
    figures.update(device, kernel_costs=costs, fused=fused, shared_bandwidth=shared,
                   dispatch_gap=device["op_overhead"], untraced_dispatch=untraced,
                   other_cores=load.other_cores,
                   chain_op_overhead=figures["op_overhead"],
                   split_products=split["sizes"],
                   kernel_costs_all_sizes=split.get("all_sizes", costs))
    _log.info("calibrated TensorFlow's runtime in %.1f s; other programs kept %.1f cores busy",
              load.seconds, load.other_cores)
    return cluster, figures
