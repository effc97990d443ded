"""Session: the TF 1.x API over the local executor (seed examples, training, feeds, traces)."""

from __future__ import annotations

import collections
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import core as tf
from core.cluster import Cluster
from core.placement import PlacementError
from runtime import Session, SessionConfig
from runtime.errors import InvalidArgument, LabRuntimeError, NotFound

REPO = Path(__file__).resolve().parents[2]
CPU0 = "/job:localhost/replica:0/task:0/device:CPU:0"


def session(graph, **config):
    return Session(graph=graph, config=SessionConfig(**config), cluster=Cluster.single_host())


def test_seed_000_variable_times_constant_on_this_machine():
    g = tf.Graph()
    with g.as_default():
        with tf.device("/cpu:0"):
            a = tf.Variable(3.0, name="a")
            b = tf.constant(4.0, name="b")
        c = a * b
        with Session() as sess:  # this machine, the default graph is g inside
            assert sess.graph is g
            sess.run(tf.global_variables_initializer())
            value = sess.run(c)
            assert value == 12.0 and isinstance(value, np.float32)
            assert c.eval() == 12.0  # the default session
            assert sess.placement["mul"] == CPU0
            assert any(d.device_type == "CPU" for d in sess.list_devices())
    assert sess.closed
    with pytest.raises(LabRuntimeError, match="closed Session"):
        sess.run(c)


def test_variables_keep_their_values_across_runs():
    g = tf.Graph()
    with g.as_default():
        v = tf.Variable(np.zeros(2, np.float32), name="v")
        inc = v.assign_add(np.ones(2, np.float32))
    with session(g) as sess:
        sess.run(v.initializer)
        for k in range(1, 4):
            np.testing.assert_array_equal(sess.run(inc), [k, k])
        np.testing.assert_array_equal(sess.run(v), [3, 3])
        assert sess.variables.names() == ["v"]


def test_fetch_structures_and_ops_give_none():
    g = tf.Graph()
    with g.as_default():
        a = tf.constant(1.0, name="a")
        b = tf.constant(2.0, name="b")
        noop = tf.no_op(name="nothing")
    Pair = collections.namedtuple("Pair", "x y")
    with session(g) as sess:
        out = sess.run({"a": a, "rest": [b, (a, "b:0")], "pair": Pair(a, noop), "op": "nothing"})
    assert out == {"a": 1.0, "rest": [2.0, (1.0, 2.0)], "pair": Pair(1.0, None), "op": None}


def test_unknown_fetches_are_clear_errors():
    g = tf.Graph()
    with g.as_default():
        tf.constant(1.0, name="a")
    with session(g) as sess:
        with pytest.raises(NotFound, match="'nope:0' refers to a Tensor which does not exist"):
            sess.run("nope:0")
        with pytest.raises(NotFound, match="has 1 outputs"):
            sess.run("a:3")
        with pytest.raises(TypeError, match="invalid type"):
            sess.run(3)


def test_feeds_are_converted_and_checked():
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, (None, 2), name="x")
        n = tf.placeholder(tf.int32, (), name="n")
        y = x * 2.0
        m = n + 1
    with session(g) as sess:
        np.testing.assert_array_equal(sess.run(y, {x: [[1, 2]]}), [[2, 4]])
        out = sess.run(y, {"x:0": np.array([[0.5, 1.5]], np.float64)})  # float64 is cast
        assert out.dtype == np.float32
        assert sess.run(m, {n: 41}) == 42
        with pytest.raises(InvalidArgument, match=r"shape \(3,\) for Tensor 'x:0', which has "
                                                  r"shape \(None, 2\)"):
            sess.run(y, {x: [1.0, 2.0, 3.0]})
        with pytest.raises(InvalidArgument, match="dtype float64 to Tensor 'n:0' of dtype int32"):
            sess.run(m, {n: 1.5})
        with pytest.raises(InvalidArgument, match="outside"):
            sess.run(m, {n: np.int64(2 ** 40)})
        with pytest.raises(InvalidArgument, match="must feed a value for placeholder tensor 'x:0'"):
            sess.run(y)
        with pytest.raises(NotFound):
            sess.run(y, {"missing:0": 1.0})
        # Feeding an intermediate tensor skips what produced it.
        assert sess.run(m, {m: 7}) == 7


def test_only_the_ops_the_fetches_need_run():
    g = tf.Graph()
    with g.as_default():
        a = tf.constant(1.0, name="a")
        bad = tf.placeholder(tf.float32, (), name="never_fed")
        tf.identity(bad, name="unused")
        b = tf.identity(a, name="b")
    with session(g) as sess:
        values, trace = sess.run(b, trace=True)
    assert values == 1.0 and sorted(r.op for r in trace.ops) == ["a", "b"]


def test_trace_validates_and_has_per_op_thread_slots():
    g = tf.Graph()
    with g.as_default():
        x = tf.constant(np.ones((64, 64), np.float32), name="x")
        ys = [tf.relu(tf.matmul(x, x), name=f"r{i}") for i in range(4)]
        total = ys[0] + ys[1] + ys[2] + ys[3]
    with session(g, inter_op_parallelism_threads=2) as sess:
        value, trace = sess.run(total, trace=True)
        trace.validate(g, sess.cluster)
        assert sess.cluster.devices[0].inter_op_threads == 2
    np.testing.assert_allclose(value, np.full((64, 64), 4 * 64.0))
    assert len(trace.ops) == len(g.get_operations())
    assert {r.thread for r in trace.ops} <= {0, 1}
    assert all(r.device == CPU0 for r in trace.ops)
    assert trace.step_time > 0 and trace.memory and trace.capacity[CPU0] > 0
    assert trace.fetch_end and trace.meta["backend"] == "runtime"


def test_log_device_placement_logs_each_op_once(caplog):
    """Each op's line once, an INFO record of the placer's logger (placers.base)."""
    caplog.set_level(logging.INFO, logger="placers")
    g = tf.Graph()
    with g.as_default():
        a = tf.constant(1.0, name="a")
        b = tf.identity(a, name="b")

    def lines():
        out = [r.getMessage() for r in caplog.records if r.name == "placers.base"]
        assert all(r.levelno == logging.INFO for r in caplog.records if r.name == "placers.base")
        caplog.clear()
        return out

    with session(g, log_device_placement=True) as sess:
        sess.run(b)
        first = lines()
        sess.run(b)
        assert lines() == []
        with g.as_default():
            c = tf.identity(b, name="c")
        sess.run(c)
        later = lines()
    assert first == [f"a: {CPU0}", f"b: {CPU0}"]
    assert later == [f"c: {CPU0}"]


def test_gpu_pins_without_a_gpu_need_soft_placement():
    g = tf.Graph()
    with g.as_default(), tf.device("/gpu:0"):
        a = tf.constant(2.0, name="a")
        b = a * 3.0
    with session(g) as sess:
        with pytest.raises(PlacementError, match="GPU:0"):
            sess.run(b)
    with session(g, allow_soft_placement=True) as sess:
        assert sess.run(b) == 6.0
        assert sess.placement["a"] == CPU0


def test_new_ops_keep_earlier_placements():
    g = tf.Graph()
    with g.as_default():
        a = tf.constant(1.0, name="a")
    with session(g) as sess:
        sess.run(a)
        first = sess.placement
        with g.as_default():
            b = a + 1.0
        assert sess.run(b) == 2.0
        assert sess.placement["a"] == first["a"] and len(sess.placement) == len(g.get_operations())


def _mlp(dtype=np.float64, batch=6, sizes=(5, 7, 3), seed=1):
    rng = np.random.default_rng(seed)
    g = tf.Graph()
    with g.as_default():
        x = tf.constant(rng.standard_normal((batch, sizes[0])).astype(dtype), name="x")
        y = tf.constant(rng.standard_normal((batch, sizes[-1])).astype(dtype), name="y")
        params, h = [], x
        for i, (m, n) in enumerate(zip(sizes[:-1], sizes[1:])):
            w = tf.Variable(rng.standard_normal((m, n)).astype(dtype), name=f"w{i}")
            b = tf.Variable((0.1 * rng.standard_normal(n)).astype(dtype), name=f"b{i}")
            h = tf.matmul(h, w) + b
            if i < len(sizes) - 2:
                h = tf.relu(h)
            params += [w, b]
        loss = tf.reduce_mean(tf.square(h - y))
        grads = tf.gradients(loss, params)
        init = tf.global_variables_initializer()
    return g, params, loss, grads, init


def _numpy_loss(values, x, y):
    w0, b0, w1, b1 = values
    h = np.maximum(x @ w0 + b0, 0)
    return np.mean((h @ w1 + b1 - y) ** 2)


def test_gradients_match_finite_differences():
    g, params, loss, grads, init = _mlp()
    x = g.get_operation_by_name("x").attrs["value"]
    y = g.get_operation_by_name("y").attrs["value"]
    with session(g) as sess:
        sess.run(init)
        values = sess.run(params)
        got_loss, got = sess.run([loss, grads])
    assert got_loss == pytest.approx(_numpy_loss(values, x, y), rel=1e-12)
    eps = 1e-6
    for k, (v, gr) in enumerate(zip(values, got)):
        numeric = np.zeros_like(v)
        for idx in np.ndindex(v.shape):
            plus = [p.copy() for p in values]
            minus = [p.copy() for p in values]
            plus[k][idx] += eps
            minus[k][idx] -= eps
            numeric[idx] = (_numpy_loss(plus, x, y) - _numpy_loss(minus, x, y)) / (2 * eps)
        np.testing.assert_allclose(gr, numeric, rtol=1e-5, atol=1e-8)


def test_mlp_training_step_lowers_the_loss():
    from experiments.workloads.mlp import mlp_training_step
    w = mlp_training_step(batch=16, layers=3, width=32, inputs=16, outputs=4, learning_rate=0.05)
    loss = w.graph.get_tensor_by_name("loss/Mean:0")
    with session(w.graph) as sess:
        sess.run(w.init)
        losses = []
        for _ in range(8):
            losses.append(float(sess.run(loss)))
            sess.run(w.fetches)
        values, trace = sess.run(w.fetches, trace=True)
        trace.validate(w.graph, sess.cluster)
    assert values == [None]
    assert losses[-1] < losses[0] and all(b <= a + 1e-6 for a, b in zip(losses, losses[1:]))


def test_sessions_share_pools_unless_per_session_threads():
    g = tf.Graph()
    with g.as_default():
        tf.constant(1.0, name="a")
    s1, s2 = session(g), session(g)
    s3 = session(g, use_per_session_threads=True)
    pool = lambda s: s._devices[CPU0].pool  # noqa: E731
    assert pool(s1) is pool(s2) and pool(s3) is not pool(s1)
    for s in (s1, s2, s3):
        assert s.run("a:0") == 1.0
        s.close()
    assert pool(s3).closed and not pool(s1).closed


def test_as_default_and_operation_run():
    g = tf.Graph()
    with g.as_default():
        v = tf.Variable(1.0, name="v")
    sess = session(g)
    with sess.as_default():
        v.initializer.run()
        assert v.eval() == 1.0
    assert not sess.closed
    sess.close()


def test_config_round_trips_and_rejects_bad_values():
    c = SessionConfig(log_device_placement=True, per_process_gpu_memory_fraction=0.4,
                      placer="round_robin", operation_timeout=5)
    assert SessionConfig.from_dict(c.to_dict()) == c
    with pytest.raises(InvalidArgument, match="unknown placer 'nope'"):
        SessionConfig(placer="nope")
    with pytest.raises(InvalidArgument, match="inter_op_parallelism_threads"):
        SessionConfig(inter_op_parallelism_threads=-1)
    with pytest.raises(InvalidArgument, match="operation_timeout"):
        SessionConfig(operation_timeout=0)
    with pytest.raises(InvalidArgument, match="unknown SessionConfig fields"):
        SessionConfig.from_dict({"bogus": 1})

    class MyPlacer:
        def place(self, graph, cluster, *, previous=None):
            raise NotImplementedError

    with pytest.raises(InvalidArgument, match="only be used in-process"):
        SessionConfig(placer=MyPlacer()).to_dict()


def test_an_object_placer_is_used_in_process():
    import placers

    g = tf.Graph()
    with g.as_default():
        a = tf.constant(1.0, name="a")
    user_placer = placers.SimplePlacer()
    with session(g, placer=user_placer, log_device_placement=True) as sess:
        assert sess.run(a) == 1.0
    assert user_placer.log_device_placement is False  # the user's object is not changed


def test_unknown_session_targets_are_refused():
    # grpc:// targets are covered by tests/runtime/test_distributed.py.
    with pytest.raises(InvalidArgument, match="unknown session target"):
        Session("http://x", graph=tf.Graph())


def test_timeout_raises_deadline_exceeded_from_a_session():
    from runtime.errors import DeadlineExceeded
    g = tf.Graph()
    with g.as_default():
        x = tf.constant(np.ones((400, 400), np.float64), name="x")
        y = x
        for i in range(40):
            y = tf.matmul(y, x, name=f"mm{i}") * 1e-3
    with session(g, operation_timeout=1e-4) as sess:
        with pytest.raises(DeadlineExceeded, match="deadline") as info:
            sess.run(y)
    assert "mm39" in info.value.waiting


# --- GPU placement on numba's CUDA simulator (in a child interpreter) ------------------

GPU_SCRIPT = r"""
import numpy as np
import core as tf
from core.cluster import Cluster
from runtime import Session, SessionConfig

g = tf.Graph()
with g.as_default():
    with tf.device("/cpu:0"):
        a = tf.Variable(np.float32(3.0), name="a")
    with tf.device("/gpu:0"):
        w = tf.Variable(np.arange(4, dtype=np.float32), name="w")
        c = tf.multiply(a, 4.0, name="c")
        d = tf.add(w, c, name="d")
        upd = tf.assign_add(w, tf.constant(np.ones(4, np.float32)), name="upd")
    e = tf.identity(d, name="e")  # default device: GPU:0
    with tf.device("/cpu:0"):
        f = tf.negative(d, name="f")
cluster = Cluster.single_host(gpus=1, gpu_memory_bytes=1 << 30)
for growth in (False, True):
    config = SessionConfig(per_process_gpu_memory_fraction=0.5, allow_growth=growth)
    with Session(graph=g, cluster=cluster, config=config) as sess:
        sess.run(tf.global_variables_initializer())
        (dv, fv), trace = sess.run([d, f], trace=True)
        trace.validate(g, sess.cluster)
        np.testing.assert_allclose(dv, [12, 13, 14, 15])
        np.testing.assert_allclose(fv, [-12, -13, -14, -15])
        assert sess.placement["c"].endswith("GPU:0") and sess.placement["f"].endswith("CPU:0")
        sent = sorted((x.tensor, x.dst.rsplit(":", 2)[-2][-3:]) for x in trace.transfers)
        assert sent == [("a/read:0", "GPU"), ("d:0", "CPU")], sent
        gpu_links = [x.links for x in trace.transfers]
        assert all(l == ("pcie:/job:localhost/replica:0/task:0/device:GPU:0",) for l in gpu_links)
        sess.run(upd)
        np.testing.assert_allclose(sess.run(w), [1, 2, 3, 4])
        gpu = "/job:localhost/replica:0/task:0/device:GPU:0"
        stats = trace.meta["memory"][gpu]
        assert stats["capacity"] == 1 << 29, stats
        if growth:
            assert 0 < stats["reserved"] < stats["capacity"], stats
        else:
            assert stats["reserved"] == stats["capacity"], stats
print("GPU OK")
"""


def test_gpu_placed_ops_on_the_cuda_simulator():
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    result = subprocess.run([sys.executable, "-c", GPU_SCRIPT], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    assert "GPU OK" in result.stdout
