"""TensorFlow's runtime as a measured backend (experiments.tf_backend).

The step-stats conversion is tested on hand-made StepStats (no TensorFlow); the runs
need TensorFlow and skip, saying why, without it.
"""

from __future__ import annotations

import numpy as np
import pytest

import core as tf
import placers
from core.cluster import Cluster
from core.protos import tf_graph_pb2 as pb
from experiments.backends import this_host_cluster
from experiments.tf_backend import TFLocalCluster, measure_on_tensorflow, trace_from_step_stats
from experiments.workloads import mlp_training_step

CPU = "/job:localhost/replica:0/task:0/device:CPU:0"
GPU = "/job:localhost/replica:0/task:0/device:GPU:0"


def _stats(rows):
    """StepStats of ``(device, node, start_us, op_end_rel_us, all_end_rel_us)`` rows."""
    stats = pb.StepStats()
    devices = {}
    for device, node, start, op_end, all_end in rows:
        if device not in devices:
            devices[device] = stats.dev_stats.add(device=device)
        devices[device].node_stats.add(node_name=node, all_start_micros=start,
                                       op_start_rel_micros=0, op_end_rel_micros=op_end,
                                       all_end_rel_micros=all_end)
    return stats


def test_step_stats_become_a_valid_trace_with_transfers_and_slots():
    g = tf.Graph()
    with g.as_default():
        a = tf.constant(np.ones((2, 2), np.float32), name="a")
        b = tf.relu(a, name="b")
        c = tf.identity(a, name="c")
        d = tf.add(b, c, name="d")
    stats = _stats([
        (CPU, "_SOURCE", 1000, 0, 0),
        (CPU, "a", 1000, 5, 40),          # hands a on until 1040: b starts before that
        (CPU, "b", 1010, 10, 12),
        (CPU, "c", 1012, 10, 12),         # overlaps b: a second slot
        (GPU, "a/_send", 1020, 1, 1),     # TensorFlow's own node: left out
        (GPU, "d", 1030, 5, 5),
    ])
    trace = trace_from_step_stats(stats, g)
    cluster = Cluster.single_host(gpus=1)
    trace.validate(g, cluster)
    assert [r.op for r in trace.ops] == ["a", "b", "c", "d"]
    rec = {r.op: r for r in trace.ops}
    assert rec["a"].end == pytest.approx(5e-6) and rec["d"].start == pytest.approx(30e-6)
    assert (rec["b"].thread, rec["c"].thread) == (0, 1)
    assert {(x.tensor, x.src, x.dst) for x in trace.transfers} == {
        (b.name, CPU, GPU), (c.name, CPU, GPU)}
    assert all(x.bytes == 16 and x.end == pytest.approx(30e-6) for x in trace.transfers)
    assert trace.meta["backend"] == "tensorflow"


@pytest.fixture(scope="module")
def tensorflow():
    return pytest.importorskip("tensorflow", reason="TensorFlow is not installed "
                               "(pip install -e '.[dev]' installs tensorflow-cpu)")


def test_in_process_tensorflow_traces_validate(tensorflow):
    w = mlp_training_step(batch=8, layers=3, width=32, inputs=16, outputs=4)
    cluster = Cluster.single_host()
    placement = placers.get("simple").place(w.graph, cluster)
    m = measure_on_tensorflow(w, {"simple": placement}, cluster, repeats=2, warmup=1)["simple"]
    m.trace.validate(w.graph, cluster, tolerance=1e-4)
    step = {op.name for op in tf.graph.ops_needed(w.fetch_ops)}
    assert {r.op for r in m.trace.ops} == step
    assert m.step_time > 0 and len(m.steps) == 2


def test_tensorflow_servers_run_a_placement_across_processes(tensorflow):
    w = mlp_training_step(batch=8, layers=2, width=16, inputs=8, outputs=4)
    cluster = this_host_cluster()
    placement = placers.get("round_robin").place(w.graph, cluster)
    with TFLocalCluster(cluster, one_process=True) as servers:
        m = measure_on_tensorflow(w, {"rr": placement}, cluster, servers, repeats=1,
                                  warmup=1)["rr"]
    m.trace.validate(w.graph, cluster, tolerance=1e-4)
    assert {r.device for r in m.trace.ops} == set(placement[r.op] for r in m.trace.ops)
    assert len({r.device for r in m.trace.ops}) > 1 and m.trace.transfers


def test_compare_placers_backend_tensorflow_runs(tensorflow, tmp_path, capsys):
    from experiments import compare_placers
    frame = compare_placers.main(["--workloads", "mlp", "--backend", "tensorflow",
                                  "--cluster", "this_machine", "--repeats", "1",
                                  "--out", str(tmp_path)])
    assert (frame["tf_step_ms"] > 0).all() and "real_step_ms" not in frame
    assert (frame["best"] == "*").any()
    with pytest.raises(SystemExit):
        compare_placers.main(["--backend", "tensorflow", "--cluster", "two_gpus"])
    assert "--backend tensorflow runs the cluster on this machine" in capsys.readouterr().err


def test_module_doctests():
    import doctest

    import experiments.tf_backend as module
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0 and result.attempted >= 1


def test_a_tensorflow_server_that_cannot_start_says_why(monkeypatch):
    """No TensorFlow needed: the server program fails before importing it."""
    import experiments.tf_backend as backend
    monkeypatch.setattr(backend, "_TF_SERVERS",
                        "raise SystemExit('cannot serve here')\n" + backend._TF_SERVERS)
    servers = TFLocalCluster(this_host_cluster(), start_timeout=30, one_process=True)
    with pytest.raises(RuntimeError, match="exited while starting.*cannot serve here"):
        servers.start()
    assert servers._procs == []


def test_our_run_metadata_reads_back_as_the_trace_it_came_from():
    """compat.v1 writes a traced run's StepStats as TensorFlow does; reading them back
    gives the run's op records (times from the first start, to the nanosecond)."""
    from runtime.compat import v1
    g = tf.Graph()
    with g.as_default():
        a = tf.constant(np.ones((8, 8), np.float32), name="a")
        c = tf.reduce_sum(tf.matmul(a, a) + tf.relu(a), name="c")
    meta = v1.RunMetadata()
    with v1.Session(graph=g) as sess:
        sess.run(c, options=v1.RunOptions(trace_level=v1.RunOptions.FULL_TRACE),
                 run_metadata=meta)
    back = trace_from_step_stats(meta.step_stats, g)
    back.validate(g)
    t0 = min(r.start for r in meta.trace.ops)
    expected = sorted((r.op, r.device, round(r.start - t0, 9), round(r.end - t0, 9))
                      for r in meta.trace.ops)
    got = sorted((r.op, r.device, round(r.start, 9), round(r.end, 9)) for r in back.ops)
    assert [e[:2] for e in got] == [e[:2] for e in expected]
    np.testing.assert_allclose([e[2:] for e in got], [e[2:] for e in expected], atol=2e-9)
