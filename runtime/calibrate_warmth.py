"""Calibration of the kernels' warm fixed costs (``Device.warm_kernel_costs`` and
``warm_span``; :mod:`core.kernel_warmth` says why).

:func:`measure_warm_kernel_costs` runs the kernel calibration graph on tiny tensors
with every kernel op duplicated (:func:`warm_calibration_graph`: ``copies`` more ops of
its type on the same inputs), on one inter-op thread: the executor makes the copies
ready with the original, so they run one after another, each right after a kernel of
its own type.  Per type, the median over the kernels that ran so (each op's fastest
over the traced steps, less what the cost model adds beside the roofline, as the
fixed costs are taken: :func:`runtime.calibrate_kernels.measure_kernel_costs`) is its
warm fixed cost.

``warm_span`` is not fitted per machine: :data:`WARM_SPAN` other kernel types between
two of a type make a kernel as slow as the calibration graph's.  From the warmth
probe (``docs/probes/kernel_warmth_probe.py``): an 8 x 8 MatMul took 2.24 us with
nothing between two of them, 2.28, 2.56 and 2.79 us with 4, 8 and 11 other families
(2026-11-28, a quiet machine); and on saved runs predicted again with the warm costs
of ``docs/probes/warm_duplicates_probe.py``, a span of 8 and one of 16 did alike on
one-thread steps, 8 better on two threads.
"""

from __future__ import annotations

import statistics

__all__ = ["warm_calibration_graph", "measure_warm_kernel_costs", "WARM_SPAN"]

#: Other kernel types after which a kernel runs as cold as in the calibration graph.
WARM_SPAN = 8

# Ops that run no kernel worth a fixed cost, or that must not be repeated.
_LEFT_OUT = {"Const", "Variable", "NoOp", "Identity", "Placeholder"}


def warm_calibration_graph(n: int = 8, copies: int = 3, device: str | None = None):
    """``(graph, init, fetches)``: :func:`runtime.calibrate_kernels.kernel_calibration_graph`
    on ``n x n`` tensors with ``copies`` duplicates of each of its step's kernel ops
    (named ``<op>_warm<k>``, on the same inputs, fetched beside the step; the stateful
    ops, those that write their inputs, and the constants, variables and reads are not
    duplicated).

    >>> g, _, fetches = warm_calibration_graph(4, copies=2)
    >>> sorted(op.name for op in g.get_operations() if op.name.startswith("MatMul_warm"))
    ['MatMul_warm0', 'MatMul_warm1']
    """
    from core.graph import ops_needed
    from runtime.calibrate_kernels import kernel_calibration_graph
    graph, init, fetches = kernel_calibration_graph(n, device=device)
    step = ops_needed([getattr(f, "op", f) for f in fetches])
    extra = []
    with graph.as_default():
        for op in step:
            if (op.type in _LEFT_OUT or op.op_def.stateful or op.op_def.ref_inputs
                    or not op.inputs):
                continue
            for k in range(copies):
                extra.append(graph.create_op(op.type, list(op.inputs), dict(op.attrs),
                                             name=f"{op.name}_warm{k}"))
    return graph, init, list(fetches) + extra


def measure_warm_kernel_costs(device, steps: int = 20, n: int = 8, config=None
                              ) -> dict[str, float]:
    """``{op type: warm fixed seconds}`` of this machine's kernels for ``device`` (a
    calibrated CPU :class:`core.cluster.Device`): :func:`warm_calibration_graph` on
    ``n x n`` tensors, ``steps`` traced steps in bursts of five after two untimed ones,
    in an in-process session of ``config`` (one inter-op thread, so that the copies run
    back to back).  A type counts the kernels that ran right after one of its own type
    (in its step's order), each its fastest over the steps."""
    import runtime
    from runtime.calibrate_kernels import _fastest_kernels, _less_side_costs
    here = f"/device:{device.device_type}:{device.index}"
    graph, init, fetches = warm_calibration_graph(n, device=here)
    traces = []
    with runtime.Session(graph=graph, config=config) as session:
        session.run(init)
        for _ in range(max(1, steps // 5)):
            for _ in range(2):
                session.run(fetches)
            traces += [session.run(fetches, trace=True)[1] for _ in range(5)]
    fastest = _fastest_kernels(traces)
    after_own: set[str] = set()
    for trace in traces:
        order = sorted(trace.ops, key=lambda r: r.start)
        after_own |= {b.op for a, b in zip(order, order[1:]) if a.type == b.type}
    warm: dict[str, list[float]] = {}
    for name in after_own:
        op = graph.get_operation_by_name(name)
        if op.type in _LEFT_OUT or name not in fastest:
            continue
        seconds = _less_side_costs(op, fastest[name], device)
        if seconds > 0:
            warm.setdefault(op.type, []).append(seconds)
    return {t: statistics.median(v) for t, v in sorted(warm.items())}
