"""runtime.calibrate_warmth: the kernels' warm fixed costs, from the calibration graph
with every kernel op duplicated."""

from dataclasses import replace

from core.cluster import Cluster
from runtime.calibrate_kernels import kernel_calibration_graph
from runtime.calibrate_warmth import WARM_SPAN, measure_warm_kernel_costs, warm_calibration_graph
from runtime.config import SessionConfig

ALONE = SessionConfig(inter_op_parallelism_threads=1, use_per_session_threads=True)


def test_every_kernel_op_but_the_stateful_ones_is_duplicated():
    plain, _, _ = kernel_calibration_graph(4)
    graph, _, fetches = warm_calibration_graph(4, copies=2)
    copies = [op for op in graph.get_operations() if "_warm" in op.name]
    originals = {op.name.rsplit("_warm", 1)[0] for op in copies}
    assert len(copies) == 2 * len(originals)
    for name in originals:
        op = graph.get_operation_by_name(name)
        assert not op.op_def.stateful and op.type not in ("Const", "Variable", "Identity")
        twin = graph.get_operation_by_name(f"{name}_warm0")
        assert twin.type == op.type and twin.inputs == op.inputs
    assert {"MatMul", "Tanh", "Conv2D", "Softmax"} <= {op.type for op in copies}
    # (the optimizers' updates are not repeated: they write their variables)
    assert not any(op.op_def.stateful for op in copies)
    assert len(fetches) == len(copies) + 1
    assert len(graph.get_operations()) == len(plain.get_operations()) + len(copies)


def test_warm_costs_are_measured_per_type_on_kernels_after_their_own_type():
    device = replace(Cluster.single_host().devices[0], intra_op_threads=1)
    warm = measure_warm_kernel_costs(device, steps=5, n=4, config=ALONE)
    assert {"MatMul", "Tanh", "Mul", "Add"} <= set(warm)
    assert all(0 < seconds < 1e-3 for seconds in warm.values())
    assert "Const" not in warm and "Identity" not in warm


def test_calibrate_gives_the_cpus_warm_costs_and_a_span():
    import runtime
    cluster = runtime.calibrate(quick=True)
    cpu = next(d for d in cluster.devices if d.is_cpu)
    assert cpu.warm_span == WARM_SPAN and cpu.warm_kernel_cost("MatMul") > 0
