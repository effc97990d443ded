"""TensorFlow's runtime calibrated by the same micro-benchmarks as ours
(experiments.tf_calibrate): a quick calibration on one one-core task."""

from __future__ import annotations

import numpy as np
import pytest

import core as tf
from core.cluster import Cluster, ClusterSpec
from core.runtime_model import TENSORFLOW
from experiments.tf_calibrate import TF_RUNTIME_MODEL, calibrate_tensorflow, tensorflow_session


@pytest.fixture(scope="module")
def tensorflow():
    return pytest.importorskip("tensorflow", reason="TensorFlow is not installed "
                               "(pip install -e '.[dev]' installs tensorflow-cpu)")


def _one_core_task() -> Cluster:
    # One thread: one server process, no second one for the single-threaded rate.
    return Cluster.from_spec(ClusterSpec({"worker": ["127.0.0.1:0"]}), cpu_cores=1,
                             cpu_inter_op_threads=1, cpu_intra_op_threads=1)


def test_a_quick_calibration_of_tensorflow_fills_every_figure(tensorflow):
    from runtime.calibrate_kernels import kernel_calibration_graph
    cluster, figures = calibrate_tensorflow(_one_core_task(), quick=True)
    assert cluster.runtime_model is TF_RUNTIME_MODEL is TENSORFLOW
    cpu = cluster.devices[0]
    assert cpu.peak_flops > 1e8 and cpu.mem_bandwidth > 1e8 and cpu.intra_op_speedup == 1.0
    assert len(cpu.bandwidth_curve) >= 2 and cpu.mem_bandwidth == cpu.bandwidth_curve[-1][1]
    assert cluster.hosts[0].shared_bandwidth == ()  # one core: kernels never run at once
    # The traced gap between the kernels of the calibration graph; the two other
    # measures beside it.
    assert 0 < cpu.op_overhead < 1e-3
    assert cpu.op_overhead == figures["op_overhead"] == figures["dispatch_gap"]
    assert figures["untraced_dispatch"] >= 0 and figures["chain_op_overhead"] > 0
    assert 0 < cluster.tasks[0].step_overhead < 0.05
    costs = dict((t, (fixed, factor)) for t, fixed, factor in cpu.kernel_costs)
    _, _, fetches = kernel_calibration_graph(8)
    step = tf.graph.ops_needed([f.op if isinstance(f, tf.Tensor) else f for f in fetches])
    # Every type of the step has its cost, but those TensorFlow fused into another
    # node (oneDNN's graph pass: a Conv2D into its BiasAdd), which take "*".
    assert {op.type for op in step} <= set(costs) | set(figures["fused"]) and "*" in costs
    assert not set(figures["fused"]) & set(costs)
    assert all(fixed >= 0 and factor >= 0.1 for fixed, factor in costs.values())
    assert costs == figures["kernel_costs"]
    again = Cluster.from_dict(cluster.to_dict())  # the model survives the JSON
    assert again.runtime_model == TENSORFLOW


def test_tensorflow_session_runs_a_built_graph_in_this_process(tensorflow):
    g = tf.Graph()
    with g.as_default():
        out = tf.add(tf.constant(np.float32(1.0)), tf.constant(np.float32(2.0)), name="out")
    with tensorflow_session("", g, [out]) as run:
        assert run() == [3.0]


def test_a_crossings_cpu_time_leaves_the_rest_of_its_latency_a_wait(tensorflow):
    from experiments.tf_backend import TFLocalCluster
    from experiments.tf_calibrate import _with_crossing_waits, measure_crossing_cpu
    cluster = Cluster.from_spec(ClusterSpec({"ps": ["127.0.0.1:0"], "worker": ["127.0.0.1:0"]}),
                                hosts={("ps", 0): "h", ("worker", 0): "h"}, cpu_cores=1,
                                cpu_inter_op_threads=1, cpu_intra_op_threads=1)
    with TFLocalCluster(cluster, one_process=True) as servers:
        cpu = measure_crossing_cpu(servers, ("worker", 0), crossings=8, steps=5)
    # A tiny crossing costs TensorFlow's servers well under ten milliseconds of CPU.
    assert 0 <= cpu < 0.01
    memcpy = cluster.replace_link("memcpy:h", latency=cpu + 1e-4)
    waited = _with_crossing_waits(memcpy, cpu)
    assert waited.links["memcpy:h"].wait == pytest.approx(1e-4)
    assert _with_crossing_waits(memcpy, 1.0).links["memcpy:h"].wait == 0.0
    assert waited.links["network:h"].wait == 0.0  # only the crossings within a host


def test_a_crossing_of_a_large_tensor_keeps_cores_busy(tensorflow):
    from experiments.tf_backend import TFLocalCluster
    from experiments.tf_calibrate import measure_crossing_cores, with_crossing_cores
    cluster = Cluster.from_spec(ClusterSpec({"ps": ["127.0.0.1:0"], "worker": ["127.0.0.1:0"]}),
                                hosts={("ps", 0): "h", ("worker", 0): "h"}, cpu_cores=1,
                                cpu_inter_op_threads=1, cpu_intra_op_threads=1)
    with TFLocalCluster(cluster, one_process=True) as servers:
        cores, cpu, seconds = measure_crossing_cores(servers, ("worker", 0), nbytes=256 << 10,
                                                     hops=2, steps=3)
    assert cores == pytest.approx(cpu / seconds) and cpu >= 0 and 0 < seconds < 0.1
    busy = with_crossing_cores(cluster, cores)
    assert busy.links["memcpy:h"].busy_cores == pytest.approx(cores)
    assert busy.links["network:h"].busy_cores == 0.0  # only the crossings within a host


def test_a_crossings_cpu_time_is_shared_over_its_hosts_cores():
    from experiments.tf_calibrate import _with_crossing_waits
    cluster = Cluster.from_spec(ClusterSpec({"ps": ["127.0.0.1:0"], "worker": ["127.0.0.1:0"]}),
                                hosts={("ps", 0): "h", ("worker", 0): "h"}, cpu_cores=2)
    cluster = cluster.replace_link("memcpy:h", latency=3e-4)
    # 1e-4 s of CPU per crossing on two cores: the link holds each for half of it.
    waited = _with_crossing_waits(cluster, 1e-4)
    assert waited.links["memcpy:h"].wait == pytest.approx(2.5e-4)
    assert waited.links["network:h"].wait == 0.0


def test_the_bandwidth_adds_write_into_a_buffer_nothing_else_reads():
    from experiments.tf_calibrate import _binary_graph
    g, _, fetches = _binary_graph((16,), "add", copies=2, in_place=True)
    for k, op in enumerate(fetches):
        first = op.inputs[0]
        # The timed Add's first input is made by an Add before it and read by it alone
        # (TensorFlow then forwards that buffer); a variable's buffer it could not.
        assert op.name == f"op{k}" and first.op.type == "Add"
        assert [c.name for c in first.consumers()] == [op.name]
    g, _, fetches = _binary_graph((16,), "add", in_place=False)
    assert fetches[0].inputs[0].op.type != "Add"


def test_products_split_over_the_intra_op_threads_are_told_from_the_rest():
    from core.trace import OpRecord, Trace
    from experiments.tf_calibrate import SPLIT_SPEEDUP, _without, split_products
    g = tf.Graph()
    with g.as_default():
        a = tf.constant(np.ones((256, 256), np.float32))
        split = tf.matmul(a, a, name="split")
        alone = tf.matmul(a, a, name="alone")
        tf.add(a, a, name="add")  # memory-bound: its speed-up is the bandwidth curve's
    device = Cluster.single_host().devices[0]

    def trace(times):
        return Trace(ops=[OpRecord(name, g.get_operation_by_name(name).type, device.name, 0,
                                   0.0, t) for name, t in times.items()])

    const = a.op.name  # no arithmetic: never counted, however its times scatter
    on_pool = {256: (g, [trace({"split": 1.0, "alone": 1.0, "add": 1.0, const: 1.0})])}
    on_one = {256: (g, [trace({"split": SPLIT_SPEEDUP * 1.01, "alone": 1.1, "add": 2.0,
                                const: 2.0})])}
    assert split_products(device, on_pool, on_one) == {256: {"split"}}
    assert [r.op for r in _without(on_pool[256][1], {"split"})[0].ops] == ["alone", "add", const]
    # A size not run on one thread leaves its products in.
    assert split_products(device, on_pool, {}) == {256: set()}
