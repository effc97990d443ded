"""Tests of runtime.server (Server lifecycle, the CLI) with servers in this process.

Several servers in one process are a cluster too (seed 002 starts all five in one
script); these tests use that to check the protocol quickly. Separate processes are
tested in test_distributed.py.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import core as tf
from core.cluster import ClusterSpec
from runtime import errors, wire
from runtime.launcher import free_ports, wait_until_serving
from runtime.server import Server, hardware_view
from runtime.session import Session

REPO = Path(__file__).resolve().parents[2]


def _spec(**jobs):
    ports = iter(free_ports(sum(jobs.values())))
    return {job: [f"127.0.0.1:{next(ports)}" for _ in range(n)] for job, n in jobs.items()}


@pytest.fixture(scope="module")
def servers():
    """ps:1 + worker:2 in this process; large tensors over the socket only."""
    spec = _spec(ps=1, worker=2)
    started = []
    try:
        for job, addrs in spec.items():
            for i in range(len(addrs)):
                started.append(Server(spec, job, i, shm_min_bytes=None))
        yield {(s.job_name, s.task_index): s for s in started}
    finally:
        for s in started:
            s.stop()


def test_server_target_join_and_stop():
    spec = _spec(localhost=1)
    server = Server(ClusterSpec(spec), "localhost", 0)
    assert server.target == f"grpc://{spec['localhost'][0]}"
    joined = threading.Event()
    t = threading.Thread(target=lambda: (server.join(), joined.set()), daemon=True)
    t.start()
    assert not joined.wait(0.05)
    server.stop()
    server.stop()  # idempotent
    assert joined.wait(5)
    with pytest.raises(errors.Unavailable, match=spec["localhost"][0]):
        Session(server.target, graph=tf.Graph())


def test_a_port_in_use_is_a_bind_error():
    spec = _spec(localhost=1)
    with Server(spec, "localhost", 0):
        with pytest.raises(wire.BindError):
            Server(spec, "localhost", 0)


def test_hardware_view_puts_loopback_tasks_on_one_host_and_masters_on_the_server():
    c = hardware_view({"ps": ["127.0.0.1:1"], "worker": ["localhost:2", "10.0.0.5:3"]},
                      "worker", 1)
    assert c.master == ("worker", 1)
    assert [t.host for t in c.tasks] == ["localhost", "localhost", "10.0.0.5"]


def _tiny_graph():
    g = tf.Graph()
    with g.as_default():
        with tf.device("/job:ps/task:0"):
            a = tf.Variable(1.0, name="a")
        with tf.device("/job:worker/task:0"):
            b = a + 2
        with tf.device("/job:worker/task:1"):
            c = a + b
    return g, a, c


def test_steps_across_in_process_servers(servers):
    g, a, c = _tiny_graph()
    with g.as_default():
        d = c * 10  # unpinned: the master's (worker/task:1's) default device
    with Session(servers[("worker", 1)].target, graph=g) as sess:
        sess.run(a.initializer)
        assert sess.run(c) == 4.0
        assert sess.run([c, d]) == [4.0, 40.0]
        p = sess.placement
        assert p["a"] == "/job:ps/replica:0/task:0/device:CPU:0"
        assert p["add"] == "/job:worker/replica:0/task:0/device:CPU:0"
        assert p["add_1"] == "/job:worker/replica:0/task:1/device:CPU:0"
        assert p["mul"] == "/job:worker/replica:0/task:1/device:CPU:0"


@pytest.fixture(scope="module")
def grpc_servers():
    """ps:1 + worker:2 in this process, by gRPC only (as between hosts)."""
    spec = _spec(ps=1, worker=2)
    started = []
    try:
        for job, addrs in spec.items():
            for i in range(len(addrs)):
                started.append(Server(spec, job, i, shm_min_bytes=None, local_sockets=False))
        yield {(s.job_name, s.task_index): s for s in started}
    finally:
        for s in started:
            s.stop()


W0 = "/job:worker/replica:0/task:0/device:CPU:0"
W1 = "/job:worker/replica:0/task:1/device:CPU:0"


def _carried_and_pushed(servers, monkeypatch):
    """Run the tiny step twice (once traced) with the session on worker 0; return the
    (tensor, dst) of what ps's answers carried to the master and of what ps pushed."""
    master, ps = servers[("worker", 0)], servers[("ps", 0)]
    carried, pushed = [], []
    deliver, push = master.master._deliver_pushed, ps.worker._push
    monkeypatch.setattr(master.master, "_deliver_pushed", lambda reply: (
        carried.extend(wire.split_frame(f)[0].key for f in reply.pushed), deliver(reply)))
    monkeypatch.setattr(ps.worker, "_push", lambda dst, key, *a, **k: (
        pushed.append(key), push(dst, key, *a, **k)))
    g, a, c = _tiny_graph()
    with Session(master.target, graph=g) as sess:
        sess.run(a.initializer)
        carried.clear(), pushed.clear()
        assert sess.run(c) == 4.0
        values, trace = sess.run(c, trace=True)
    assert values == 4.0
    trace.validate(g, sess.cluster, tolerance=1e-4)
    assert {(x.tensor, x.dst) for x in trace.transfers} >= {("a/read:0", W0), ("a/read:0", W1)}
    return ([tuple(k.split(";")[1:3]) for k in carried],
            [tuple(k.split(";")[1:3]) for k in pushed])


def test_a_finished_parts_tensor_for_the_master_travels_in_its_answer(grpc_servers,
                                                                      monkeypatch):
    carried, pushed = _carried_and_pushed(grpc_servers, monkeypatch)
    # ps's part ends with its sends: the master's copy of `a` rides in the answer, the
    # other worker's is pushed; each step's exactly once.
    assert carried == [("a/read:0", W0)] * 2
    assert pushed == [("a/read:0", W1)] * 2


def test_on_local_sockets_the_masters_tensor_is_pushed_at_once(servers, monkeypatch):
    carried, pushed = _carried_and_pushed(servers, monkeypatch)
    assert carried == []  # a local push leaves at once: the answer would wait
    assert sorted(pushed) == sorted([("a/read:0", W0), ("a/read:0", W1)] * 2)


def test_a_small_tensor_for_the_master_and_a_large_one_elsewhere_both_arrive(servers):
    # The answer would wait for the large push: the small tensor may not wait with it.
    x = np.arange(3 << 18, dtype=np.float32)  # 3 MiB: a chunked PushTensor call
    g = tf.Graph()
    with g.as_default():
        with tf.device("/job:ps/task:0"):
            v = tf.Variable(x, name="v")
            small = tf.reduce_sum(v, name="small")
        with tf.device("/job:worker/task:1"):
            big_sum = tf.reduce_sum(tf.identity(v), name="big_sum")
        with tf.device("/job:worker/task:0"):
            both = tf.add(small, big_sum, name="both")
    with Session(servers[("worker", 0)].target, graph=g) as sess:
        sess.run(v.initializer)
        for _ in range(3):
            np.testing.assert_allclose(sess.run(both), 2 * x.sum(), rtol=1e-5)


def test_large_tensor_streams_in_chunks_over_the_socket(servers):
    x = np.random.default_rng(0).standard_normal((3, 1 << 20)).astype(np.float32)  # 12 MiB
    g = tf.Graph()
    with g.as_default():
        with tf.device("/job:ps/task:0"):
            big = tf.constant(x, name="big")
        with tf.device("/job:worker/task:1"):
            s = tf.reduce_sum(big, axis=1)
            back = tf.identity(big)
    with Session(servers[("worker", 0)].target, graph=g) as sess:
        got_sum, got_back = sess.run([s, back])
    np.testing.assert_allclose(got_sum, x.sum(axis=1), rtol=1e-4)
    np.testing.assert_array_equal(got_back, x)


def test_feeds_and_graph_extension_between_runs(servers):
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, (None, 2), name="x")
        with tf.device("/job:worker/task:1"):
            y = x * 2.0
    with Session(servers[("ps", 0)].target, graph=g) as sess:
        np.testing.assert_array_equal(sess.run(y, {x: [[1, 2]]}), [[2, 4]])
        placed = dict(sess.placement)
        with g.as_default(), tf.device("/job:worker/task:0"):
            z = y + 1.0  # a new op: placed on the next run, the others keep their device
        np.testing.assert_array_equal(sess.run(z, {x: [[1, 2]]}), [[3, 5]])
        assert {k: sess.placement[k] for k in placed} == placed
        assert sess.placement[z.op.name].startswith("/job:worker/replica:0/task:0")
        # Fetching a fed tensor returns the feed.
        np.testing.assert_array_equal(sess.run(x, {x: [[5, 6]]}), [[5, 6]])


def test_cli_starts_a_server_and_stops_on_sigterm(tmp_path):
    spec = _spec(ps=1)
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps({"cluster": spec}))
    proc = subprocess.Popen([sys.executable, "-m", "runtime.server", "--cluster", str(path),
                             "--job", "ps", "--task", "0"], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        line = proc.stdout.readline()
        assert line.strip() == f"Started server with target: grpc://{spec['ps'][0]}"
        wait_until_serving(spec["ps"][0], 30)
        g = tf.Graph()
        with g.as_default():
            c = tf.constant(3.0) * 3.0
        with Session(f"grpc://{spec['ps'][0]}", graph=g) as sess:
            assert sess.run(c) == 9.0
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()


# ---------------------------------------------------------------------------
# The worker's rendezvous: callbacks instead of waiting threads, aborts

def test_rendezvous_take_async_before_and_after_the_put_and_on_abort():
    import time as _time

    from runtime.worker import Rendezvous, StepAborted
    r = Rendezvous()
    r.put("a;x:0;b;1", np.ones(2))
    assert r.take_async("a;x:0;b;1", 1, None).tolist() == [1.0, 1.0]  # here already
    got = []
    assert r.take_async("a;y:0;b;1", 1, lambda v, e: got.append((v, e))) is None
    r.put("a;y:0;b;1", np.zeros(1))  # the callback runs in the delivering thread
    assert got[0][0].tolist() == [0.0] and got[0][1] is None
    assert r.take_async("a;z:0;b;1", 1, lambda v, e: got.append((v, e))) is None
    stopped = []
    r.watch(1, stopped.append)
    r.abort(1, StepAborted("boom"))
    assert got[1][0] is None and isinstance(got[1][1], StepAborted)
    assert len(stopped) == 1 and isinstance(stopped[0], StepAborted)
    with pytest.raises(StepAborted):  # later takes of the aborted step fail at once
        r.take_async("a;w:0;b;1", 1, lambda v, e: None)
    late = []
    r.watch(1, late.append)  # watching an aborted step aborts at once
    assert len(late) == 1
    r.finish_step(2)
    with pytest.raises(StepAborted):
        r.take("a;x:0;b;2", 2, _time.monotonic() + 1)
    assert r.pending() == 0
