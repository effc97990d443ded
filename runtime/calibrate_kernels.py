"""Calibration of the fixed cost of each op type's kernel.

A roofline (``flops / rate``, ``bytes / bandwidth``) says nothing about small tensors,
where calling a kernel costs more than its arithmetic: the call from Python into the
compiled kernel, argument checks, the output's allocation.  On graphs of many small ops
(the recurrent and transformer workloads) that fixed cost is most of the step; and on
mid-sized tensors a simple kernel runs well below the device's peak rates.  So
:func:`measure_kernel_costs` measures, per op type, a fixed cost and a factor on the
roofline: one graph holding every CPU op type (forward, gradients and updates) runs
traced in an in-process session, on tiny tensors and on a few larger sizes (the trace
times the kernel call alone).  The same graph, untraced, gives the executor's work
between kernels, per op (:func:`untraced_dispatch`: on a graph with a real workload's
fan-in and fan-out it is several times what a chain of Identity ops shows).  :func:`with_kernel_costs`
writes both into a cluster's CPU devices (``Device.kernel_costs`` and ``op_overhead``),
where :class:`core.costs.StaticCostModel` reads them.

>>> costs, dispatch = measure_kernel_costs(calibrate(quick=True).devices[0])  # doctest: +SKIP
>>> costs["Add"]                                                                # doctest: +SKIP
(1.1e-05, 2.3)
"""

from __future__ import annotations

import math
import statistics
import time

import numpy as np

import core as tf
from core.cluster import Cluster

__all__ = ["kernel_calibration_graph", "measure_kernel_costs", "kernel_costs_from_traces",
           "with_kernel_costs", "fit_factors", "untraced_dispatch", "warm_small_steps",
           "session_step_times",
           "FIT_SIZES"]


def kernel_calibration_graph(n: int = 8, seed: int = 0, device: str | None = None,
                             copies: int = 1):
    """``(graph, init, fetches)``: a small training step on ``n x n`` tensors that uses
    every CPU op type the workloads' steps use (with its gradients and the
    optimizers' updates; ``n`` at least 4).

    Its MatMuls come in the two shapes of the workloads: square, and a few rows by large
    weights (``[n/8, 4n] @ [4n, n]``, a recurrent or dense layer's batch by its weights),
    whose rate per flop is lower (a gemm packs the weights on every call): one factor
    on the roofline is fitted over both.  The models' op types (convolutions, pooling,
    batch normalisation, embeddings, batched products, the losses and the optimizers'
    fused updates: :func:`_model_ops`) ride on the same ``n x n`` activations, so that
    no type a model's step uses falls back to the ``"*"`` guess (a type the graph lacks
    takes the median of the others' figures, which for an elementwise type like
    ``Maximum`` was 1.7x its own factor).  ``device``: where every op goes (None: the
    session's choice).

    ``copies``: that many independent copies of the step in one graph (the first's
    ops under their own names, copy ``i``'s under the name scope ``copy<i>``), so that
    each op type runs many times per step among the other types, as in a model's
    step, rather than once.  An op that runs the first of its type in a step takes
    longer than the same op later in the step (its code and data are not in the
    caches yet: ``docs/probes/tf_warm_kernels_probe.py``), and a model's step runs
    each type many times.

    >>> g, _, _ = kernel_calibration_graph(4, copies=2)
    >>> sum(op.type == "Tanh" for op in g.get_operations())
    2
    """
    rng = np.random.default_rng(seed)
    g = tf.Graph()
    with g.as_default(), tf.device(device):
        steps = []
        for i in range(copies):
            with tf.name_scope(f"copy{i}" if i else None):
                steps.append(_calibration_step(n, rng))
        init = tf.global_variables_initializer()
    return g, init, steps


def _calibration_step(n: int, rng):
    """The update op of one copy of :func:`kernel_calibration_graph`'s step, built in
    the current graph."""
    x = tf.constant(rng.standard_normal((n, n)).astype(np.float32), name="x")
    w = tf.Variable(rng.standard_normal((n, n)).astype(np.float32) * 0.1, name="w")
    b = tf.Variable(np.zeros(n, np.float32), name="b")
    rows = max(1, n // 8)
    xb = tf.constant(rng.standard_normal((rows, 4 * n)).astype(np.float32), name="xb")
    wb = tf.Variable(rng.standard_normal((4 * n, n)).astype(np.float32) * 0.05, name="wb")
    batch = tf.matmul(xb, wb, name="batch_by_weights")  # [rows, n]
    h = tf.matmul(x, w) + b + tf.reduce_mean(batch)
    r, t, s = tf.relu(h), tf.tanh(h), tf.sigmoid(h)
    c = tf.slice(tf.concat([r, t], axis=1), [0, 0], [n, n])
    c = tf.reshape(tf.reshape(tf.transpose(c), [n * n]), [n, n])
    d = tf.softmax(c) - s
    e = tf.negative(tf.multiply(d, d)) + tf.broadcast_to(b, [n, n])
    model_loss, model_vars = _model_ops(h, n, rng)
    loss = tf.reduce_mean(tf.square(e)) + tf.reduce_sum(t) + model_loss
    gw, gb, gwb, *g_model = tf.gradients(loss, [w, b, wb, *model_vars])
    momentum = tf.train.MomentumOptimizer(0.01, 0.9)
    adam = tf.train.AdamOptimizer(0.001)
    half = len(model_vars) // 2
    step = tf.group(tf.assign_sub(w, 0.01 * gw), tf.assign_sub(b, 0.01 * gb),
                    tf.assign_sub(wb, 0.01 * gwb),
                    tf.assign_add(b, tf.constant(np.zeros(n, np.float32))),
                    momentum.apply_gradients(list(zip(g_model[:half], model_vars[:half]))),
                    adam.apply_gradients(list(zip(g_model[half:], model_vars[half:]))))
    return step


def _model_ops(h, n: int, rng):
    """``(loss, variables)``: the models' op types on the ``[n, n]`` activations ``h``:
    a convolution with bias, batch normalisation and ReLU on ``h`` seen as an
    ``[1, n/4, n/4, 16]`` image, both poolings, an embedding lookup, a batched
    product, a sparse cross-entropy, and the elementwise types of attention and
    normalisation layers; each reduced into one scalar loss.  (With ``n`` not a
    multiple of 4, on the largest such corner of ``h``.)"""
    if n % 4:
        n -= n % 4
        h = h[:n, :n]
    side, ch = n // 4, 16
    image = tf.reshape(h, [1, side, side, ch])
    kernel = tf.Variable(rng.standard_normal((3, 3, ch, ch)).astype(np.float32) * 0.1,
                         name="conv_kernel")
    bias = tf.Variable(np.zeros(ch, np.float32), name="conv_bias")
    scale = tf.Variable(np.ones(ch, np.float32), name="bn_scale")
    conv = tf.nn.bias_add(tf.nn.conv2d(image, kernel, [1, 1, 1, 1], "SAME"), bias)
    normed = tf.nn.relu(tf.nn.fused_batch_norm(conv, scale, is_training=True)[0])
    pooled = (tf.nn.max_pool(normed, [1, 2, 2, 1], [1, 2, 2, 1], "SAME")
              + tf.nn.avg_pool(normed, [1, 2, 2, 1], [1, 2, 2, 1], "SAME"))
    table = tf.Variable(rng.standard_normal((n, n)).astype(np.float32) * 0.1, name="embedding")
    ids = tf.constant(rng.integers(0, n, n // 2).astype(np.int32), name="ids")
    looked = tf.nn.embedding_lookup(table, ids)  # [n/2, n]
    blocks = tf.reshape(h, [2, n // 2, n])[:, :, : n // 2]
    attention = tf.batch_matmul(blocks, blocks, adj_y=True)
    labels = tf.constant(rng.integers(0, n, n).astype(np.int32), name="labels")
    xent = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=h)
    # (split by rows: each half is contiguous, as the elementwise ops' inputs in a
    # model are; a strided half ran Maximum at half its speed)
    left, right = tf.split(h, 2, axis=0)
    norm = tf.rsqrt(tf.squared_difference(left, tf.stop_gradient(right)) + 1.0)
    bounded = tf.minimum(tf.maximum(left, -1.0), 1.0) * tf.exp(-tf.square(right))
    logs = tf.log(tf.square(right) + 1.0) * tf.fill([n // 2, n], 0.5)
    loss = (tf.reduce_mean(pooled) + tf.reduce_mean(looked) + tf.reduce_mean(attention)
            + tf.reduce_mean(xent) + tf.reduce_mean(norm * bounded + logs))
    return loss, [kernel, bias, scale, table]


def _traced_steps(n: int, steps: int, config, device: str | None = None):
    """``(graph, traces)``: ``steps`` traced steps of the graph on ``n x n`` tensors."""
    return _interleaved_traced_steps((n,), steps, config, device)[n]


def _interleaved_traced_steps(sizes, steps: int, config, device: str | None = None
                              ) -> dict[int, tuple]:
    """Per size ``n``: ``(graph, traces)`` of ``steps`` traced steps of the graph on
    ``n x n`` tensors, the sizes taking turns step by step (one session each), every op
    on ``device`` (None: the session's choice).

    Why in turns: this machine's speed flips between two states about 1.7x apart
    within seconds.  Twenty steps of the small graph in one burst (a tenth of a second)
    caught one state or the other: in four calibrations in a row the dispatch cost per
    op spread by 73% and 83% (max / min - 1, two runs of
    ``python -m experiments.calibration_spread``), and by 9% to 60% in four runs with
    the sizes taking turns.  The steps an experiment times are spread over seconds,
    and their fastest is in the fast state; spread over the whole calibration, each
    size's fastest step is more likely in that state too."""
    import contextlib

    import runtime
    runs = {}
    with contextlib.ExitStack() as stack:
        for n in sizes:
            graph, init, fetches = kernel_calibration_graph(n, device=device)
            session = stack.enter_context(runtime.Session(graph=graph, config=config))
            session.run(init)
            for _ in range(2):
                session.run(fetches)
            runs[n] = (graph, session, fetches, [])
        for _ in range(steps):
            for graph, session, fetches, traces in runs.values():
                traces.append(session.run(fetches, trace=True)[1])
    return {n: (graph, traces) for n, (graph, _, _, traces) in runs.items()}


def _fastest(traces):
    """The trace of the fastest step: other load on a shared machine only ever adds
    time (a median over steps would count it), and the experiments time the fastest
    step too."""
    return min(traces, key=lambda trace: trace.step_time)


def _fastest_kernels(traces) -> dict[str, float]:
    """Each op's fastest kernel time over ``traces``: its undisturbed time.  Taken per
    op, not from the fastest step, whose every op may still hold a disturbed one."""
    best: dict[str, float] = {}
    for trace in traces:
        for rec in trace.ops:
            t = rec.end - rec.start
            if t < best.get(rec.op, math.inf):
                best[rec.op] = t
    return best


def _median_by_type(graph, times: dict[str, float], value) -> dict[str, float]:
    """Per op type, the median over its ops of ``value(op, time)`` (None: left out)."""
    samples: dict[str, list[float]] = {}
    for name, t in times.items():
        op = graph.get_operation_by_name(name)
        v = value(op, t)
        if v is not None:
            samples.setdefault(op.type, []).append(v)
    return {op_type: statistics.median(v) for op_type, v in sorted(samples.items())}


def fit_factors(samples: dict[str, list[tuple[float, float]]],
                fixed: dict[str, float]) -> dict[str, float]:
    """Per op type, the factor of ``time = fixed + factor * roofline`` that fits its
    ``(roofline, time)`` samples best in relative terms (least squares of
    ``(fixed + factor * roofline - time) / time``), at least 0.1.  Samples whose roofline
    is below half the type's fixed cost are left out, and types without a fixed cost or
    without samples left get no factor.

    >>> fit_factors({"Add": [(10.0, 21.0), (100.0, 201.0), (0.1, 5.0)]}, {"Add": 1.0})
    {'Add': 2.0}
    """
    out = {}
    for op_type, points in samples.items():
        if op_type not in fixed:
            continue
        base = fixed[op_type]
        num = den = 0.0
        for model, t in points:
            if t <= 0 or model < 0.5 * max(base, 1e-6):
                continue
            num += (model / t) * ((t - base) / t)
            den += (model / t) ** 2
        if den > 0:
            out[op_type] = max(0.1, num / den)
    return out


#: The tensor sizes (n x n) whose kernel times fit each type's factor on the roofline.
FIT_SIZES = (128, 256, 512)


def measure_kernel_costs(device, steps: int = 20, small: int = 8,
                         large: int | tuple[int, ...] = FIT_SIZES, config=None,
                         parallel_min_elements: int = 0
                         ) -> tuple[dict[str, tuple[float, float]], float]:
    """``(kernel_costs, dispatch)`` of this machine's kernels for ``device`` (a
    :class:`core.cluster.Device`, a CPU or a GPU, whose rates are already calibrated).

    :func:`kernel_calibration_graph`, every op pinned to ``device`` (a session on a
    machine with a GPU would place them there), runs ``steps`` traced steps in an
    in-process session on ``small`` square tensors, taking turns with its untraced steps
    (:func:`warm_small_steps`), and on each size of ``large``, the sizes taking turns
    step by step (:func:`_interleaved_traced_steps`); each op's fastest kernel time
    over its steps counts (other load on a shared machine only adds time).  Per op
    type, ``fixed`` is the median time of its ops on the small tensors, and ``factor``
    the least-squares fit of ``time = fixed + factor * roofline`` (the
    roofline on ``device``'s rates) over its ops on all the large sizes, in relative
    terms (each time weighs by its inverse: a 20 us and a 3 ms kernel count alike).
    Ops whose roofline is below half the fixed cost are left out of the fit: there the
    factor is the difference of two noisy numbers (on one size, 128, it came out
    between 0.1 and 1.9 for Mul from one calibration to the next); a type without any
    takes the ``"*"`` factor.  The entry ``"*"`` (the medians over the types) stands
    for types the graph lacks.  ``dispatch`` is the executor's work per op between
    kernels on the small graph, untraced (:func:`warm_small_steps`).

    With ``parallel_min_elements`` (where the kernels switch to their parallel path; see
    :class:`core.cluster.Device`) and more than one intra-op thread on ``device``, the
    graph also runs on tensors of that many elements, and each multithreaded type whose
    ops ran on their parallel path (:func:`core.costs.on_parallel_path`: there, or a
    product of the fit sizes that splits) gets a ``"<type>|parallel"`` entry
    (:func:`parallel_kernel_costs`); those ops stay out of the factors' fit.
    """
    from dataclasses import replace

    if parallel_min_elements:
        # The factors are fitted with the kernels' own threshold: on a device without
        # one (0: every size splits) each multithreaded kernel's arithmetic counted at
        # the intra-op speed-up, and where the kernels split (a process that leaves the
        # BLAS to them) the types' factors came out up to 1.4x (MatMul) and 2.8x
        # (Conv2D) what a kernel on one thread takes.
        device = replace(device, parallel_min_elements=parallel_min_elements)
    sizes = (large,) if isinstance(large, int) else tuple(large)
    # This process's device of that type and index (``device`` may describe a device
    # of another task of its cluster, whose figures this machine's stand for).
    here = f"/device:{device.device_type}:{device.index}"
    graph, traces, dispatch = warm_small_steps(small, steps, config, device=here)
    runs = {small: (graph, traces), **_interleaved_traced_steps(sizes, steps, config, here)}
    costs = kernel_costs_from_traces(device, runs, small)
    if parallel_min_elements and device.intra_op_threads > 1:
        n = math.isqrt(parallel_min_elements - 1) + 1  # n * n reaches the threshold
        runs[n] = _traced_steps(n, max(3, steps // 4), config, here)
        costs.update(parallel_kernel_costs(device, runs, costs))
    return costs, dispatch


def parallel_kernel_costs(device, runs: dict, costs: dict) -> dict[str, tuple[float, float]]:
    """The ``"<type>|parallel"`` entries: per multithreaded type whose ops ran on their
    parallel path in ``runs`` (``{n: (graph, traces)}``; the path as
    :func:`core.costs.on_parallel_path` decides it on ``device``), its serial factor and,
    as fixed cost, the median over those ops of what their fastest kernel took beyond
    that factor on their roofline (at the intra-op speed-up): what waking the kernel's
    threads adds.  A product splits from 256 rows, so the fit sizes' products take part
    (``docs/probes/one_core_products_probe.py``: a 256^3 product split over two threads
    gains 1.7-1.8x, not the speed-up of a large one)."""
    from core.costs import StaticCostModel
    bare = _rates_only(device)
    roofline = StaticCostModel()
    default = costs["*"]
    extras: dict[str, list[float]] = {}
    for graph, traces in runs.values():
        for name, t in _fastest_kernels(traces).items():
            op = graph.get_operation_by_name(name)
            if not _on_parallel_path(op, device):
                continue
            factor = costs.get(op.type, default)[1]
            extras.setdefault(op.type, []).append(
                max(0.0, _less_side_costs(op, t, device) - factor * roofline.op_time(op, bare)))
    return {f"{t}|parallel": (statistics.median(v), costs.get(t, default)[1])
            for t, v in sorted(extras.items())}


def _on_parallel_path(op, device) -> bool:
    """:func:`core.costs.on_parallel_path` of the graph op ``op`` on ``device``."""
    from core.costs import on_parallel_path
    return on_parallel_path(op.op_def, [x.spec for x in op.inputs],
                            [x.spec for x in op.outputs], op.attrs, device)


def kernel_costs_from_traces(device, runs: dict, small: int) -> dict[str, tuple[float, float]]:
    """The kernel costs fitted to traced steps of the kernel calibration graph:
    ``runs`` maps each size ``n`` to ``(graph, traces)`` (the graph on ``n x n``
    tensors, its traced steps on whichever runtime ran it), ``small`` is the size whose
    fastest kernels give each type's fixed cost, the others fit the factors on the
    roofline of ``device`` (:func:`measure_kernel_costs` says how; the entry ``"*"``
    stands for the types the graph lacks).  Ops on their parallel path on ``device``
    (:func:`core.costs.on_parallel_path`) are left to :func:`parallel_kernel_costs`:
    the factor is a kernel's on one thread."""
    from core.costs import StaticCostModel
    bare = _rates_only(device)
    roofline = StaticCostModel()
    graph, traces = runs[small]
    fixed = _median_by_type(graph, _fastest_kernels(traces),
                            lambda op, t: _less_side_costs(op, t, device))
    samples: dict[str, list[tuple[float, float]]] = {}
    for n, (graph, traces) in runs.items():
        if n == small:
            continue
        for name, t in _fastest_kernels(traces).items():
            op = graph.get_operation_by_name(name)
            if _on_parallel_path(op, device):
                continue
            samples.setdefault(op.type, []).append(
                (roofline.op_time(op, bare), _less_side_costs(op, t, device)))
    factors = fit_factors(samples, fixed)
    default = (statistics.median(fixed.values()),
               statistics.median(factors.values()) if factors else 1.0)
    costs = {t: (fixed[t], factors.get(t, default[1])) for t in fixed}
    costs["*"] = default
    return costs


def _rates_only(device):
    """``device`` with its rates alone: no dispatch overhead, kernel costs, window or
    allocation prices, so that the cost model gives a kernel's bare roofline on it (what
    the fitted factor scales)."""
    from dataclasses import replace
    return replace(device, op_overhead=0.0, kernel_costs=(), window_copy_costs=(),
                   alloc_costs=())


def _less_side_costs(op, seconds: float, device) -> float:
    """A kernel's measured ``seconds`` less what the cost model adds beside its roofline
    on ``device`` (:func:`core.costs.beside_roofline`: window gathering, outputs'
    allocation): the fixed cost and the factor describe the rest."""
    from core.costs import beside_roofline
    return seconds - beside_roofline(op.op_def, [t.spec for t in op.inputs],
                                     [t.spec for t in op.outputs], op.attrs, device)


def session_step_times(runs, steps: int) -> list[float]:
    """The fastest wall time of ``session.run(fetches)`` of each ``(session, fetches)``
    of ``runs`` over ``steps`` rounds, the runs taking turns (see
    :func:`_interleaved_traced_steps` for why in turns)."""
    best = [math.inf] * len(runs)
    for _ in range(steps):
        for k, (session, fetches) in enumerate(runs):
            t0 = time.perf_counter()
            session.run(fetches)
            best[k] = min(best[k], time.perf_counter() - t0)
    return best


def untraced_dispatch(n: int, kernels: dict[str, float] | None = None, steps: int = 20,
                      config=None, target: str | None = None, device: str | None = None
                      ) -> float:
    """Seconds per op of the executor's own work between kernels on
    :func:`kernel_calibration_graph` on ``n x n`` tensors: :func:`warm_small_steps`'s
    dispatch, or with ``kernels`` (each op's fastest kernel time, measured elsewhere)
    the untraced step less those.  ``target`` and ``device``: where the sessions run
    and the ops go (None: in this process, the session's choice), e.g. a server's CPU
    (:func:`runtime.calibrate.measure_server_dispatch`)."""
    return warm_small_steps(n, steps, config, target, device, kernels)[2]


def warm_small_steps(n: int, steps: int = 20, config=None, target: str | None = None,
                     device: str | None = None, kernels: dict[str, float] | None = None
                     ) -> tuple:
    """``(graph, traces, dispatch)`` of :func:`kernel_calibration_graph` on ``n x n``
    tensors in one session: ``steps`` traced steps, and per op the executor's work
    between kernels (``dispatch``, seconds): the fastest untraced step, less the
    fastest step of a graph of one ``NoOp`` (what every step costs: the session's
    call, the plan's look-up, the fetches' return) and less each op's fastest kernel
    time over the traced steps (or ``kernels``), over the ops that ran.  The three
    kinds of step take turns, so a change of the machine's speed hits them alike.

    Untraced, because a traced step does more between kernels (it records each op's
    times and allocations): the recurrent workload's traced steps spanned 15% more
    than its untraced ones, all of it between kernels, so the gaps of a traced step
    (:func:`core.costs.dispatch_gaps`) overstate the dispatch.  The kernels are timed
    in the same session, warm as the untraced steps' are: taken from steps that took
    turns with the graph on large tensors (whose kernels flush the caches), the tiny
    kernels came out about 1.7 us per op slower, which the subtraction took out of the
    dispatch (1.8 against 3.6 us per op), and a tiny Tanh cost 5.8 us.  Under one
    inter-op thread (as :func:`runtime.calibrate` runs it) the ops run one after
    another, so the step is the sum of its kernels and the work between them."""
    import runtime
    graph, init, fetches = kernel_calibration_graph(n, device=device)
    empty = tf.Graph()
    with empty.as_default(), tf.device(device):
        nothing = tf.no_op(name="nothing")
    traces = []
    with runtime.Session(target, graph=graph, config=config) as session, \
            runtime.Session(target, graph=empty, config=config) as bare:
        session.run(init)
        for _ in range(2):
            session.run(fetches)
            bare.run(nothing)
        step = fixed = math.inf
        for _ in range(steps):
            traces.append(session.run(fetches, trace=True)[1])
            untraced, alone = session_step_times([(session, fetches), (bare, nothing)], 1)
            step, fixed = min(step, untraced), min(fixed, alone)
    kernels = kernels if kernels is not None else _fastest_kernels(traces)
    return graph, traces, max(0.0, (step - fixed - sum(kernels.values())) / max(1, len(kernels)))


def with_kernel_costs(cluster: Cluster, costs: dict[str, tuple[float, float]],
                      dispatch: float | None = None) -> Cluster:
    """``cluster`` with ``costs`` as every CPU device's ``kernel_costs`` (and
    ``dispatch``, when given, as its ``op_overhead``)."""
    for device in cluster.devices:
        if device.is_cpu:
            changes = {"kernel_costs": costs}
            if dispatch is not None:
                changes["op_overhead"] = dispatch
            cluster = cluster.replace_device(device.name, **changes)
    return cluster
