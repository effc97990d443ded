"""Per-op-type kernel calibration: what it measures and where it goes."""

from __future__ import annotations

import pytest

from core.cluster import Cluster
from core.costs import StaticCostModel
from runtime.calibrate_kernels import (fit_factors, kernel_calibration_graph,
                                       measure_kernel_costs, with_kernel_costs)

# The op types the workloads use most, which the calibration graph must cover.
COVERED = {"MatMul", "Add", "Sub", "Mul", "Neg", "Relu", "Tanh", "Sigmoid", "Softmax", "Concat",
           "Slice", "Transpose", "Reshape", "BroadcastTo", "Sum", "AssignSub", "TanhGrad",
           "SigmoidGrad", "Identity"}


def test_the_calibration_graph_covers_the_common_op_types():
    graph, init, fetches = kernel_calibration_graph(4)
    assert COVERED <= {op.type for op in graph.get_operations()}


def test_copies_of_the_calibration_step_are_independent_and_each_fetched():
    from collections import Counter
    from core.graph import ops_needed
    graph, _, (step,) = kernel_calibration_graph(4)
    copied, _, fetches = kernel_calibration_graph(4, copies=3)
    assert len(fetches) == 3 and graph.get_operation_by_name("w").type == "Variable"
    once = Counter(op.type for op in graph.get_operations())
    assert Counter(op.type for op in copied.get_operations()) == Counter(
        {t: 3 * k for t, k in once.items()}) - Counter({"NoOp": 2})  # one initializer
    # No op is needed by two copies' steps (each its own variables, optimizers' too).
    needed = [{op.name for op in ops_needed([fetch])} for fetch in fetches]
    assert not (needed[0] & needed[1] or needed[1] & needed[2] or needed[0] & needed[2])
    assert all(n.startswith("copy2/") for n in needed[2] if "beta" not in n)


@pytest.mark.parametrize("name", ["transformer", "resnet50", "inception_v3", "gnmt"])
def test_every_op_type_of_a_models_step_is_calibrated(name):
    """No type a model's step runs falls back to the "*" guess (the median of the other
    types' figures)."""
    from core.graph import ops_needed
    from experiments import workloads
    w = workloads.get(name)
    roots = [f.op if hasattr(f, "op") else f for f in w.fetches]
    step_types = {op.type for op in ops_needed(roots)}
    graph, _, _ = kernel_calibration_graph(8)
    calibrated = {op.type for op in graph.get_operations()}
    assert step_types <= calibrated, sorted(step_types - calibrated)


def test_kernel_costs_are_measured_per_type_and_written_into_the_cpus():
    cluster = Cluster.from_spec({"ps": ["a:1"], "worker": ["a:2"]},
                                hosts={("ps", 0): "h", ("worker", 0): "h"})
    costs, dispatch = measure_kernel_costs(cluster.devices[0], steps=2, small=4, large=64)
    assert COVERED <= set(costs) and "*" in costs
    assert all(fixed >= 0 and factor > 0 for fixed, factor in costs.values())
    assert costs["MatMul"][0] > 0 and 0 < dispatch < 0.01
    calibrated = with_kernel_costs(cluster, costs, dispatch)
    for device in calibrated.devices:
        assert device.kernel_cost("Tanh") == costs["Tanh"] and device.op_overhead == dispatch
    graph, _, _ = kernel_calibration_graph(4)
    tanh = next(op for op in graph.get_operations() if op.type == "Tanh")
    plain = StaticCostModel().op_time(tanh, cluster.devices[0])
    roofline = plain - cluster.devices[0].op_overhead
    fixed, factor = costs["Tanh"]
    assert StaticCostModel().op_time(tanh, calibrated.devices[0]) == pytest.approx(
        dispatch + fixed + factor * roofline)


def test_runtime_calibrate_stays_the_function_after_the_submodule_is_imported():
    import runtime
    import runtime.calibrate  # noqa: F401 - would rebind the package's name to the module
    assert callable(runtime.calibrate)


def test_one_calibration_serves_other_cluster_shapes():
    from dataclasses import replace

    from runtime.calibrate import CPU_FIGURES, with_cpu_figures
    measured = replace(Cluster.single_host().devices[0], peak_flops=1.5e11, intra_op_speedup=1.2,
                       mem_bandwidth=2e10, op_overhead=7e-6,
                       kernel_costs={"Add": (1e-5, 0.5)})
    cluster = with_cpu_figures(Cluster.from_spec({"ps": ["a:1"], "worker": ["a:2", "a:3"]}),
                               measured)
    for device in cluster.devices:
        assert all(getattr(device, f) == getattr(measured, f) for f in CPU_FIGURES)


def test_the_parallel_path_gets_its_own_entries_from_the_threshold_up():
    from dataclasses import replace
    device = replace(Cluster.single_host(cpu_cores=2).devices[0], intra_op_threads=2)
    costs, _ = measure_kernel_costs(device, steps=2, small=4, large=16, parallel_min_elements=1024)
    parallel = {k.split("|")[0] for k in costs if k.endswith("|parallel")}
    assert {"Add", "Mul", "Tanh", "Sum"} <= parallel  # multithreaded types on 32 x 32
    assert "Reshape" not in parallel and "Identity" not in parallel
    for t in parallel:
        assert costs[f"{t}|parallel"][1] == costs[t][1] and costs[f"{t}|parallel"][0] >= 0
    alone, _ = measure_kernel_costs(replace(device, intra_op_threads=1), steps=2, small=4,
                                    large=16, parallel_min_elements=1024)
    assert not any(k.endswith("|parallel") for k in alone)


def test_the_factor_fits_every_size_in_relative_terms():
    """Samples on a line are fitted exactly; a slow outlier on a small kernel moves the
    factor no more than one on a large kernel would in absolute terms; samples lost in
    the fixed cost, and types without a fixed cost, give nothing."""
    line = [(r, 5e-6 + 2.0 * r) for r in (1e-5, 1e-4, 1e-3)]
    assert fit_factors({"Mul": line}, {"Mul": 5e-6})["Mul"] == pytest.approx(2.0)
    small_outlier = line + [(1e-5, 10 * (5e-6 + 2.0 * 1e-5))]
    large_outlier = line + [(1e-3, 10 * (5e-6 + 2.0 * 1e-3))]
    assert fit_factors({"Mul": small_outlier}, {"Mul": 5e-6})["Mul"] == pytest.approx(
        fit_factors({"Mul": large_outlier}, {"Mul": 5e-6})["Mul"], rel=0.2)
    assert fit_factors({"Mul": [(1e-6, 9e-6)]}, {"Mul": 5e-6}) == {}
    assert fit_factors({"Tanh": line}, {"Mul": 5e-6}) == {}
    assert fit_factors({"Mul": [(1e-3, 1e-6)]}, {"Mul": 5e-6}) == {"Mul": 0.1}


def test_the_sizes_take_turns_step_by_step(monkeypatch):
    """Each size's traced steps are spread over the whole measurement, one step of
    every size in turn, so that a change of the machine's speed hits them alike."""
    import runtime
    from runtime.calibrate_kernels import _interleaved_traced_steps
    traced_graphs = []
    run = runtime.Session.run

    def recording_run(self, fetches, *args, trace=False, **kwargs):
        if trace:
            traced_graphs.append(self.graph)
        return run(self, fetches, *args, trace=trace, **kwargs)

    monkeypatch.setattr(runtime.Session, "run", recording_run)
    runs = _interleaved_traced_steps((4, 8), steps=3, config=None)
    assert set(runs) == {4, 8} and all(len(traces) == 3 for _, traces in runs.values())
    size_of = {id(graph): n for n, (graph, _) in runs.items()}
    assert [size_of[id(g)] for g in traced_graphs] == [4, 8] * 3


def test_the_small_graph_s_kernels_are_timed_in_the_session_its_dispatch_is(monkeypatch):
    """The kernel times subtracted from the untraced step come from traced steps of the
    same session, taking turns with its untraced steps (warm as they are), not from a
    session whose steps took turns with large tensors."""
    import runtime
    from runtime.calibrate_kernels import warm_small_steps
    calls = []
    run = runtime.Session.run

    def recording_run(self, fetches, *args, trace=False, **kwargs):
        calls.append((id(self), self.graph, trace))
        return run(self, fetches, *args, trace=trace, **kwargs)

    monkeypatch.setattr(runtime.Session, "run", recording_run)
    graph, traces, dispatch = warm_small_steps(4, steps=3)
    assert len(traces) == 3 and 0 <= dispatch < 1e-3
    mine = [(session, trace) for session, g, trace in calls if g is graph]
    assert len({session for session, _ in mine}) == 1  # one session, traced and not
    timed = [trace for _, trace in mine][-6:]
    assert timed == [True, False] * 3  # the traced and untraced steps take turns


def test_the_fit_leaves_the_window_copies_to_their_own_figure():
    """A convolution's traced time holds its window gathering, which the cost model adds
    on its own (``window_copy_costs``): the fit takes it out first, so kernels timed as
    fixed + copies + factor x roofline (the tiny ones as fixed + copies) give back that
    fixed cost and factor, and the model predicts them."""
    from dataclasses import replace as dc_replace

    from core.costs import window_copy_time
    from core.trace import OpRecord, Trace
    from runtime.calibrate_kernels import kernel_costs_from_traces
    cpu = dc_replace(Cluster.single_host().devices[0], intra_op_speedup=1.0,
                     window_copy_costs=(5e-9, 1e-10))
    bare = dc_replace(cpu, op_overhead=0.0, window_copy_costs=())
    model = StaticCostModel()
    runs = {}
    for n in (8, 64, 128):
        graph, _, _ = kernel_calibration_graph(n)
        convs = [op for op in graph.get_operations() if op.type == "Conv2D"]
        records = []
        for op in convs:
            copies = window_copy_time(op.op_def, [t.spec for t in op.inputs],
                                      [t.spec for t in op.outputs], op.attrs, cpu)
            assert copies > 0
            roofline = model.op_time(op, bare) if n > 8 else 0.0  # (fixed: the tiny one)
            t = 7e-6 + copies + 1.5 * roofline
            records.append(OpRecord(op.name, op.type, cpu.name, 0, 0.0, t))
        runs[n] = (graph, [Trace(ops=records)])
    costs = kernel_costs_from_traces(cpu, runs, small=8)
    assert costs["Conv2D"] == pytest.approx((7e-6, 1.5))
    fitted = cpu.replace_kernel_costs(costs)
    graph, traces = runs[128]
    for rec in traces[0].ops:
        op = graph.get_operation_by_name(rec.op)
        assert model.op_time(op, fitted) - fitted.op_overhead == pytest.approx(rec.end)


def test_every_calibration_graph_is_pinned_to_the_calibrated_device(monkeypatch):
    """On a machine with a GPU a session places an unpinned graph's ops there: the CPU
    kernels' calibration graphs name the type and index of the device they calibrate."""
    from dataclasses import replace

    import runtime.calibrate_kernels as ck
    from core.cluster import Cluster
    asked = []
    build = ck.kernel_calibration_graph

    def recording(n, *args, device=None, **kwargs):
        asked.append(device)
        return build(n, *args, device=device, **kwargs)

    monkeypatch.setattr(ck, "kernel_calibration_graph", recording)
    cpu = replace(Cluster.single_host(cpu_cores=2).devices[0], intra_op_threads=2)
    ck.measure_kernel_costs(cpu, steps=1, large=(16,), parallel_min_elements=400)
    assert asked == ["/device:CPU:0"] * 3


def test_the_fit_leaves_the_outputs_allocation_to_its_own_figure():
    """On a GPU an op's traced time holds its outputs' allocation, which the cost model
    adds on its own (``alloc_costs``): the fit takes it out first, so kernels timed as
    fixed + allocation + factor x roofline give back that fixed cost and factor."""
    from dataclasses import replace as dc_replace

    from core.costs import allocation_time
    from core.trace import OpRecord, Trace
    from runtime.calibrate_kernels import kernel_costs_from_traces
    gpu = dc_replace(Cluster.single_host(gpus=1).devices[1], peak_flops=1e9,
                     mem_bandwidth=1e9, alloc_costs=((1 << 10, 0.0), (1 << 16, 1e-4)))
    bare = dc_replace(gpu, op_overhead=0.0, alloc_costs=())
    model = StaticCostModel()
    runs = {}
    for n in (8, 64, 128):
        graph, _, _ = kernel_calibration_graph(n)
        records, allocated = [], []
        for op in graph.get_operations():
            if op.type != "Mul":
                continue
            alloc = allocation_time(op.op_def, [t.spec for t in op.outputs], gpu)
            roofline = model.op_time(op, bare) if n > 8 else 0.0
            records.append(OpRecord(op.name, op.type, gpu.name, 0, 0.0,
                                    2e-5 + alloc + 3.0 * roofline))
            allocated.append(alloc)
        assert (max(allocated) > 1e-5) == (n > 8)
        runs[n] = (graph, [Trace(ops=records)])
    costs = kernel_costs_from_traces(gpu, runs, small=8)
    assert costs["Mul"] == pytest.approx((2e-5, 3.0))


def test_the_factors_are_fitted_with_the_kernels_own_threshold(monkeypatch):
    """Fitted on a device that did not know where its kernels split (0: every size), a
    multithreaded kernel's arithmetic counted at the intra-op speed-up whatever its
    size, and its factor came out that much too large for a kernel that runs on one
    thread: the fit sees the threshold it is given."""
    from dataclasses import replace

    import runtime.calibrate_kernels as ck
    from core.costs import kernel_speedup
    fitted_on = []
    fit = ck.kernel_costs_from_traces

    def recording(device, runs, small):
        fitted_on.append(device)
        return fit(device, runs, small)

    monkeypatch.setattr(ck, "kernel_costs_from_traces", recording)
    cpu = replace(Cluster.single_host(cpu_cores=2).devices[0], intra_op_threads=2,
                  intra_op_speedup=1.9, parallel_min_elements=0)
    ck.measure_kernel_costs(cpu, steps=1, small=4, large=(16,), parallel_min_elements=400)
    (device,) = fitted_on
    assert device.parallel_min_elements == 400
    graph, _, _ = kernel_calibration_graph(16)
    tanh = next(op for op in graph.get_operations() if op.type == "Tanh")  # 256 elements
    specs = [t.spec for t in tanh.inputs], [t.spec for t in tanh.outputs]
    assert kernel_speedup(tanh.op_def, *specs, tanh.attrs, device) == 1.0
    assert kernel_speedup(tanh.op_def, *specs, tanh.attrs, cpu) == 1.9  # (as it was)


def test_a_product_that_splits_at_a_fit_size_prices_the_parallel_path():
    """A product the kernel splits (512^3: two row blocks of 256) is left out of
    MatMul's factor and gives its "MatMul|parallel" entry what it took beyond the
    factor on its roofline; a small op on one thread gives none."""
    from dataclasses import replace
    from types import SimpleNamespace

    import core as tf
    from runtime.calibrate_kernels import kernel_costs_from_traces, parallel_kernel_costs
    cpu = replace(Cluster.single_host(cpu_cores=2).devices[0], intra_op_threads=2,
                  intra_op_speedup=2.0, parallel_min_elements=1 << 21)
    g = tf.Graph()
    with g.as_default():
        x = tf.zeros([512, 512], name="x")
        tf.matmul(x, x, name="split")
        y = tf.zeros([64, 512], name="y")
        tf.matmul(y, x, name="serial")  # 64 rows: one gemm on one thread
    model = StaticCostModel()
    bare = replace(cpu, op_overhead=0.0, kernel_costs=())
    took = {"split": 1.5 * model.op_time(g.get_operation_by_name("split"), bare) + 1e-4,
            "serial": 1.2 * model.op_time(g.get_operation_by_name("serial"), bare)}
    trace = SimpleNamespace(ops=[SimpleNamespace(op=name, start=0.0, end=t)
                                 for name, t in took.items()])
    small_graph, _, _ = kernel_calibration_graph(4)
    small_trace = SimpleNamespace(ops=[SimpleNamespace(op=op.name, start=0.0, end=1e-6)
                                       for op in small_graph.get_operations()
                                       if op.type == "MatMul"])
    runs = {4: (small_graph, [small_trace]), 512: (g, [trace])}
    costs = kernel_costs_from_traces(cpu, runs, small=4)
    assert costs["MatMul"][1] == pytest.approx(1.2, rel=0.02)  # the serial product alone
    parallel = parallel_kernel_costs(cpu, runs, costs)
    assert set(parallel) == {"MatMul|parallel"}
    fixed, factor = parallel["MatMul|parallel"]
    split = g.get_operation_by_name("split")
    assert factor == costs["MatMul"][1]
    assert fixed == pytest.approx(took["split"] - factor * model.op_time(split, bare), rel=1e-6)
    # ...and the cost model prices the split product by that entry, the other not
    priced = replace(cpu, op_overhead=0.0, kernel_costs={**costs, **parallel})
    assert model.op_time(split, priced) == pytest.approx(
        fixed + factor * model.op_time(split, bare), rel=1e-6)
    serial = g.get_operation_by_name("serial")
    assert model.op_time(serial, priced) == pytest.approx(
        costs["MatMul"][0] + factor * model.op_time(serial, bare), rel=1e-6)
