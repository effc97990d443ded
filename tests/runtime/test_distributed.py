"""The distributed runtime with real server processes (runtime.launcher.LocalCluster).

One cluster of 2 ps + 3 worker processes serves the whole module (seed 002's cluster);
every test opens its own sessions. The fault test kills and restarts a worker at the
end of the module.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import core as tf
from core.placement import PlacementError
from placers.round_robin import replica_device_setter
from runtime import errors, shm
from runtime.config import SessionConfig
from runtime.launcher import LocalCluster, free_ports
from runtime.remote import RemoteSession
from runtime.session import Session

REPO = Path(__file__).resolve().parents[2]
PS0 = "/job:ps/replica:0/task:0/device:CPU:0"
PS1 = "/job:ps/replica:0/task:1/device:CPU:0"
W0 = "/job:worker/replica:0/task:0/device:CPU:0"
W1 = "/job:worker/replica:0/task:1/device:CPU:0"
W2 = "/job:worker/replica:0/task:2/device:CPU:0"


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster({"ps": 2, "worker": 3}, start_timeout=90) as c:
        yield c


def _seed002_example1():
    g = tf.Graph()
    with g.as_default():
        with tf.device("/job:ps"):
            a = tf.Variable(1.0, name="a")
        with tf.device("/job:worker"):
            b = a + 2
        with tf.device("/job:worker/task:1"):
            c = a + b
    return g, a, b, c


def _good_run(target):
    """A run that must succeed (after a bad one)."""
    g, a, b, c = _seed002_example1()
    with Session(target, graph=g) as sess:
        sess.run(a.initializer)
        assert sess.run(c) == 4.0


# ---------------------------------------------------------------------------
# The seeds

def test_seed000_session_on_another_server_places_on_its_default_device(cluster):
    g = tf.Graph()
    with g.as_default():
        a = tf.constant(1.0)
        b = a + 2
        c = a * 3
        d = b * 3  # the value the book prints (9.0) is this one's; c is 3.0 in TF 1.x
    with Session(cluster.target("worker", 1), graph=g) as sess:
        assert c.eval() == 3.0
        assert d.eval() == 9.0
        assert set(sess.placement.values()) == {W1}


def test_seed002_example1_pinned_ops_land_where_pinned(cluster):
    g, a, b, c = _seed002_example1()
    with Session(cluster.target("ps", 0), graph=g) as sess:
        sess.run(a.initializer)
        assert c.eval() == 4.0
        p = sess.placement
    assert (p["a"], p[b.op.name], p[c.op.name]) == (PS0, W0, W1)


def test_seed002_example2_replica_device_setter_and_log_device_placement(cluster, caplog):
    g = tf.Graph()
    with g.as_default():
        with tf.device(replica_device_setter(ps_tasks=2, ps_device="/job:ps",
                                             worker_device="/job:worker")):
            v1 = tf.Variable(1.0, name="v1")
            v2 = tf.Variable(2.0, name="v2")
            v3 = tf.Variable(3.0, name="v3")
            s = v1 + v2
            with tf.device("/task:1"):
                p1 = 2 * s
                with tf.device("/cpu:0"):
                    p2 = 3 * s
    config = SessionConfig(log_device_placement=True)
    caplog.set_level(logging.INFO, logger="runtime.remote")
    with Session(cluster.target("ps", 0), graph=g, config=config) as sess:
        v1.initializer.run()
        place = sess.placement
        # The master's lines come back with the reply and are logged by the client.
        logged = [r.getMessage() for r in caplog.records if r.name == "runtime.remote"]
        caplog.clear()
        for init in (v2.initializer, v3.initializer):
            sess.run(init)
        assert sess.run([s, p1, p2]) == [3.0, 6.0, 9.0]
        # nothing new to place: nothing logged
        assert not [r for r in caplog.records if r.name == "runtime.remote"]
    assert place["v1"] == PS0 and place["v2"] == PS1 and place["v3"] == PS0
    assert place[s.op.name] == W0
    assert place[p1.op.name] == W1 and place[p2.op.name] == W1
    assert f"v1: {PS0}" in logged
    assert f"{p2.op.name}: {W1}" in logged


SEED004_MAIN = """
import core as tf
SPEC = {spec!r}
with tf.device("/job:ps/task:0"):
    a = tf.constant(3.0, dtype=tf.float32)
    b = tf.constant(4.0)
with tf.device("/job:ps/task:1"):
    shared = tf.Variable(0.0, name="seed004_shared")
"""

SEED004_WORKER0 = """
from runtime.session import Session
with Session("grpc://" + SPEC["worker"][0]) as sess:
    init = tf.global_variables_initializer()
    add_node = tf.multiply(a, b)
    sess.run(init)
    print(sess.run(add_node))
    sess.run(tf.assign(shared, 42.0))
"""

SEED004_WORKER1 = """
from runtime.session import Session
with Session("grpc://" + SPEC["worker"][1]) as sess:
    a = tf.constant(10.0, dtype=tf.float32)
    add_node = tf.multiply(a, b)
    a = add_node
    print(sess.run(add_node))
    print(sess.run(shared))  # set by the other process, never initialised here
"""


def _client(script: str, spec) -> str:
    code = textwrap.dedent(SEED004_MAIN.format(spec=spec)) + textwrap.dedent(script)
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_seed004_two_client_processes_share_the_cluster_and_its_variables(cluster):
    assert _client(SEED004_WORKER0, cluster.spec).split() == ["12.0"]
    assert _client(SEED004_WORKER1, cluster.spec).split() == ["40.0", "42.0"]


# ---------------------------------------------------------------------------
# Traces, transfers

def test_real_trace_holds_the_invariants(cluster):
    g = tf.Graph()
    with g.as_default():
        with tf.device("/job:ps/task:0"):
            w = tf.Variable(np.ones((64, 64), np.float32), name="w")
        x = tf.constant(np.ones((8, 64), np.float32), name="x")
        with tf.device("/job:worker/task:0"):
            h = tf.relu(tf.matmul(x, w))
        with tf.device("/job:worker/task:2"):
            y = tf.reduce_sum(h * h)
            with tf.control_dependencies([y]):
                z = tf.identity(h, name="z")
    with Session(cluster.target("worker", 1), graph=g) as sess:
        sess.run(w.initializer)
        (yv, zv), tr = sess.run([y, z], trace=True)
        assert yv == 8 * 64 * 64.0**2
        np.testing.assert_array_equal(zv, np.full((8, 64), 64.0, np.float32))
        tr.validate(g, sess.cluster, tolerance=1e-4)
        assert {r.device for r in tr.ops} == {PS0, W0, W1, W2}
        # One transfer per (tensor, destination device): h goes to worker 2 once.
        assert [(x.tensor, x.dst) for x in tr.transfers].count((h.name, W2)) == 1
        assert tr.fetch_end.keys() == {y.op.name, z.op.name}


@pytest.mark.skipif(not shm.shm_available(), reason="no /dev/shm")
def test_large_tensor_between_processes_through_shared_memory(cluster):
    x = np.random.default_rng(1).standard_normal((6, 1 << 18)).astype(np.float32)  # 6 MiB
    g = tf.Graph()
    with g.as_default():
        with tf.device("/job:ps/task:1"):
            big = tf.constant(x, name="big")
        with tf.device("/job:worker/task:2"):
            back = tf.identity(big) * 2.0
    before = set(shm.list_segments())
    with Session(cluster.target("worker", 2), graph=g) as sess:
        for _ in range(2):
            np.testing.assert_array_equal(sess.run(back), x * 2.0)
    assert set(shm.list_segments()) <= before


# ---------------------------------------------------------------------------
# Bad input: a clear error each, and the servers keep working

def test_bad_feeds_and_fetches_are_clear_errors(cluster):
    target = cluster.target("worker", 0)
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, (None, 2), name="x")
        with tf.device("/job:worker/task:1"):
            y = x * 2.0
    with Session(target, graph=g) as sess:
        with pytest.raises(errors.InvalidArgument, match="shape"):
            sess.run(y, {x: np.ones((2, 3), np.float32)})
        with pytest.raises(errors.InvalidArgument, match="dtype"):
            sess.run(y, {x: np.ones((1, 2), np.bool_)})
        with pytest.raises(errors.NotFound, match="nope:0"):
            sess.run("nope:0")
        with pytest.raises(errors.InvalidArgument, match="must feed"):
            sess.run(y)  # an unfed placeholder
        np.testing.assert_array_equal(sess.run(y, {x: [[1, 2]]}), [[2, 4]])
    # The master checks too, for clients that skip the Session's checks.
    raw = RemoteSession(target, g, SessionConfig())
    try:
        with pytest.raises(errors.InvalidArgument, match="dtype"):
            raw.run([y.name], [], {x.name: np.ones((1, 2), np.int32)})
        with pytest.raises(errors.InvalidArgument, match="shape"):
            raw.run([y.name], [], {x.name: np.ones((1, 3), np.float32)})
        with pytest.raises(errors.NotFound, match="zz:0"):
            raw.run(["zz:0"], [], {})
        values, _ = raw.run([y.name], [], {x.name: np.ones((1, 2), np.float32)})
        np.testing.assert_array_equal(values[y.name], [[2, 2]])
    finally:
        raw.close()
    _good_run(target)


def test_session_where_nothing_listens_is_unavailable(cluster):
    (port,) = free_ports(1)
    start = time.monotonic()
    with pytest.raises(errors.Unavailable, match=str(port)):
        Session(f"grpc://127.0.0.1:{port}", graph=tf.Graph())
    assert time.monotonic() - start < 10
    _good_run(cluster.target("ps", 1))


def test_gpu_pin_without_gpu_needs_soft_placement(cluster):
    target = cluster.target("worker", 2)
    g = tf.Graph()
    with g.as_default(), tf.device("/job:worker/task:0/gpu:0"):
        v = tf.Variable(1.0, name="on_gpu")
        w = v * 2.0
    with Session(target, graph=g) as sess:
        with pytest.raises(PlacementError, match="GPU:0"):
            sess.run(v.initializer)
    _good_run(target)
    with Session(target, graph=g, config=SessionConfig(allow_soft_placement=True)) as sess:
        sess.run(v.initializer)
        assert sess.run(w) == 2.0
        assert sess.placement["on_gpu"] == W0


def test_uninitialised_variable_is_failed_precondition_naming_it(cluster):
    g = tf.Graph()
    with g.as_default(), tf.device("/job:ps/task:1"):
        v = tf.Variable(1.0, name="never_initialised")
        w = v + 1.0
    with Session(cluster.target("worker", 0), graph=g) as sess:
        with pytest.raises(errors.FailedPrecondition, match="never_initialised"):
            sess.run(w)
    _good_run(cluster.target("worker", 0))


def test_concurrent_runs_of_one_session_each_get_their_own_answer(cluster):
    # Steps in flight at once share the open connections (one call each, several
    # connections from the pool) and the workers' rendezvous (keyed by step).
    g = tf.Graph()
    with g.as_default():
        with tf.device("/job:worker/task:0"):
            x = tf.placeholder(tf.float32, (2,), name="x")
        with tf.device("/job:ps/task:0"):
            w = tf.Variable(np.float32(3.0), name="w_concurrent")
            y = x * w
        with tf.device("/job:worker/task:1"):
            z = y + 1.0
    with Session(cluster.target("worker", 0), graph=g) as sess:
        sess.run(w.initializer)
        failures: list = []

        def run(k: int) -> None:
            try:
                for i in range(40):
                    v = np.array([k, i], np.float32)
                    np.testing.assert_array_equal(sess.run(z, {x: v}), v * 3.0 + 1.0)
            except Exception as e:  # noqa: BLE001
                failures.append(e)

        threads = [threading.Thread(target=run, args=(k,)) for k in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not failures, failures[0]
        assert not any(t.is_alive() for t in threads)


@pytest.mark.parametrize("local_sockets", [True, False], ids=["local-sockets", "grpc-only"])
def test_worker_killed_between_steps_is_unavailable_and_rejoins_the_session(local_sockets):
    # Steps and small tensors go by local connections (same host) or, with
    # local_sockets=False, by gRPC as between hosts (client -> master RunSteps, master
    # -> worker RunGraphs streams, PushStream).
    # Either way a worker killed between steps is an Unavailable naming it on the next
    # step, not a hang, and the same session goes on once it is back (registered
    # again, its variables gone).
    with LocalCluster({"ps": 1, "worker": 2}, local_sockets=local_sockets) as c:
        g = tf.Graph()
        with g.as_default():
            with tf.device("/job:ps/task:0"):
                a = tf.Variable(3.0, name="a")
            with tf.device("/job:worker/task:0"):
                b = a + 2
            with tf.device("/job:worker/task:1"):
                k = tf.Variable(1.0, name="k")
                out = a + b * k
        with Session(c.target("worker", 0), graph=g,
                     config=SessionConfig(operation_timeout=20.0)) as sess:
            sess.run([a.initializer, k.initializer])
            assert all(sess.run(out) == 8.0 for _ in range(20))
            c.kill("worker", 1)
            start = time.monotonic()
            with pytest.raises(errors.Unavailable, match="task:1"):
                sess.run(out)
            assert time.monotonic() - start < 10
            c.restart("worker", 1)
            with pytest.raises(errors.FailedPrecondition, match="k"):
                sess.run(out)
            sess.run(k.initializer)
            assert sess.run(out) == 8.0


# ---------------------------------------------------------------------------
# Faults (last: kills and restarts a worker)

def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (Linux /proc)."""
    import os
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

def test_killed_worker_fails_the_step_naming_it_and_a_restarted_one_rejoins(cluster):
    # Deterministic: worker 2's part waits for a tensor that worker 0 produces only
    # after a long chain of matmuls (tens of seconds, far longer than anything below),
    # so the step cannot end before the kill, whenever the kill lands; and once the
    # step failed, worker 0 stops after its current matmul.
    target = cluster.target("ps", 0)
    n = 2048
    g = tf.Graph()
    with g.as_default():
        with tf.device("/job:worker/task:0"):
            h = tf.broadcast_to(tf.constant(np.zeros((1, n), np.float32)), [n, n])
            for _ in range(200):
                h = tf.matmul(h, h)
            far = tf.reduce_sum(h)
        with tf.device("/job:worker/task:2"):
            kept = tf.Variable(5.0, name="kept_on_worker2")
            slow = far + kept
            out = slow * 1.0
    config = SessionConfig(operation_timeout=60.0)
    busy = cluster.processes[("worker", 0)].pid
    with Session(target, graph=g, config=config) as sess:
        sess.run(kept.initializer)
        outcome: dict = {}
        cpu_before = _cpu_seconds(busy)

        def run():
            try:
                sess.run(out)
                outcome["value"] = True
            except Exception as e:  # noqa: BLE001
                outcome["error"] = e
            outcome["ended"] = time.monotonic()

        t = threading.Thread(target=run, daemon=True)
        t.start()
        # The step is underway once worker 0 computes (its CPU time grows).
        deadline = time.monotonic() + 30
        while _cpu_seconds(busy) - cpu_before < 0.2 and not outcome:
            assert time.monotonic() < deadline, "worker 0 never started the step"
            time.sleep(0.01)
        assert not outcome, outcome
        cluster.kill("worker", 2)
        killed = time.monotonic()
        t.join(config.operation_timeout + 10)
        assert not t.is_alive(), "the run hung on a dead worker"
        err = outcome.get("error")
        assert isinstance(err, errors.Unavailable), outcome
        assert "/job:worker/replica:0/task:2" in str(err)
        # Noticed at once (the connection broke), not at the step's deadline.
        assert outcome["ended"] - killed < 10.0, outcome["ended"] - killed
    # The other servers keep serving.
    _good_run(target)
    # A restarted worker rejoins: the graph is registered again, its variables are gone.
    cluster.restart("worker", 2)
    with Session(target, graph=g, config=config) as sess:
        with pytest.raises(errors.FailedPrecondition, match="kept_on_worker2"):
            sess.run(kept * 2.0)
        sess.run(kept.initializer)
        assert sess.run(kept + 1.0) == 6.0
    _good_run(cluster.target("worker", 2))


def test_unknown_batch_gradients_run_across_server_processes():
    """Gradients through run-time shapes (ops stating their ``_output_shapes``) travel
    to the servers like any other graph."""
    with LocalCluster({"worker": 2}) as cluster:
        g = tf.Graph()
        with g.as_default():
            x = tf.placeholder(tf.float32, [None, 3], name="x")
            with tf.device("/job:worker/task:1"):
                w = tf.Variable(np.ones((3, 2), np.float32), name="w")
                loss = tf.reduce_mean(tf.reduce_sum(tf.matmul(x, w) ** 2, axis=1))
            (dx,) = tf.gradients(loss, [x])
        with Session(cluster.target("worker", 0), graph=g) as sess:
            sess.run(w.initializer)
            xv = np.arange(12, dtype=np.float32).reshape(4, 3)
            got = sess.run(dx, {x: xv})
    y = xv @ np.ones((3, 2), np.float32)
    np.testing.assert_allclose(got, (2 * y @ np.ones((2, 3), np.float32)) / 4, rtol=1e-5)
