"""Faults found when the runtime was tried as an attacker would (issue 21).

Each test reproduces one defect: a restarted worker that must rejoin an open session,
local sockets that must not allocate what a peer announces, idle streams that must not
starve the handler pool, unclaimed pushes that must be bounded, shared memory of dead
servers, IPv6 loopback, memory after a large message, and clear errors.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

import core as tf
from runtime import errors
from runtime.config import SessionConfig
from runtime.launcher import LocalCluster
from runtime.session import Session


@pytest.fixture(scope="module")
def cluster():
    """One cluster for the tests that need server processes (they restart its tasks)."""
    with LocalCluster({"ps": 1, "worker": 2}, start_timeout=90) as c:
        yield c


def test_restarted_producer_rejoins_an_open_session(cluster):
    # Worker 1 produces a tensor that worker 0 (the master) and ps 0 consume. Killed and
    # restarted between steps, the next step of the same session registers its part
    # again and succeeds, long before the step's deadline.
    c = cluster
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [4], name="x")
        with tf.device("/job:worker/task:1"):
            made = x * 2.0
        with tf.device("/job:ps/task:0"):
            on_ps = made + 1.0
        with tf.device("/job:worker/task:0"):
            out = on_ps + made
    feed = {x: np.arange(4, dtype=np.float32)}
    want = np.arange(4, dtype=np.float32) * 4 + 1
    with Session(c.target("worker", 0), graph=g,
                 config=SessionConfig(operation_timeout=30.0)) as sess:
        np.testing.assert_array_equal(sess.run(out, feed), want)
        c.kill("worker", 1)
        c.restart("worker", 1)
        for _ in range(3):
            start = time.monotonic()
            try:
                np.testing.assert_array_equal(sess.run(out, feed), want)
            except errors.LabRuntimeError as err:  # allowed: at once, naming the task
                assert "task:1" in str(err), err
            assert time.monotonic() - start < 15.0  # the deadline is 30 s
        np.testing.assert_array_equal(sess.run(out, feed), want)


# ---------------------------------------------------------------------------
# 2. Local sockets

def _rss_bytes() -> int:
    import os
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _local_listener(**limits):
    from runtime import wire
    from runtime.launcher import free_ports
    got = []
    address = f"127.0.0.1:{free_ports(1)[0]}"
    return wire.LocalPushListener(address, lambda frame: got.append(bytes(frame)),
                                  **limits), address, got


def _connect(address):
    import socket

    from runtime import wire
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(5.0)
    sock.connect(wire.local_push_name(address))
    return sock


def _closed_by_peer(sock) -> bool:
    try:
        return sock.recv(1) == b""
    except (ConnectionResetError, TimeoutError):
        return False


def test_local_socket_holds_what_arrived_not_what_was_announced():
    listener, address, got = _local_listener(max_frame_bytes=1 << 30)
    socks = []
    try:
        before = _rss_bytes()
        for _ in range(4):  # each announces 256 MiB and sends 16 bytes
            s = _connect(address)
            s.sendall((256 << 20).to_bytes(8, "little") + b"x" * 16)
            socks.append(s)
        time.sleep(0.5)
        assert _rss_bytes() - before < 64 << 20
        # An ordinary frame still arrives whole.
        s = _connect(address)
        s.sendall((3 << 20).to_bytes(8, "little") + b"y" * (3 << 20))
        deadline = time.monotonic() + 5
        while not got and time.monotonic() < deadline:
            time.sleep(0.01)
        assert got == [b"y" * (3 << 20)]
        socks.append(s)
    finally:
        for s in socks:
            s.close()
        listener.close()


def test_local_socket_refuses_frames_over_its_cap_and_connections_over_its_cap():
    listener, address, got = _local_listener(max_frame_bytes=1 << 20, max_connections=3)
    socks = []
    try:
        s = _connect(address)
        s.sendall(((1 << 20) + 1).to_bytes(8, "little"))
        assert _closed_by_peer(s)
        s.close()
        socks = [_connect(address) for _ in range(3)]
        time.sleep(0.2)
        extra = _connect(address)
        assert _closed_by_peer(extra)
        extra.close()
        assert listener.refused >= 1
        socks[0].sendall((5).to_bytes(8, "little") + b"hello")
        deadline = time.monotonic() + 5
        while not got and time.monotonic() < deadline:
            time.sleep(0.01)
        assert got == [b"hello"]
    finally:
        for s in socks:
            s.close()
        listener.close()


def test_local_socket_takes_only_its_own_user(monkeypatch):
    import os
    listener, address, got = _local_listener()
    try:
        real = os.getuid()
        monkeypatch.setattr(os, "getuid", lambda: real + 1)  # as if the peer were another user
        s = _connect(address)
        assert _closed_by_peer(s)
        s.close()
        assert listener.refused == 1
    finally:
        listener.close()


# ---------------------------------------------------------------------------
# 3. Idle gRPC streams

def _idle_streams(target: str, n: int):
    """``n`` RunSteps streams on their own channel that never send a message."""
    import queue

    from runtime import wire
    from runtime.protos import master_pb2_grpc
    channel = wire.create_channel(target[len("grpc://"):])
    stub = master_pb2_grpc.MasterStub(channel)
    never: queue.SimpleQueue = queue.SimpleQueue()
    calls = [stub.RunSteps(iter(never.get, None), timeout=60) for _ in range(n)]
    return channel, calls


def _ping(target: str, timeout: float = 3.0) -> None:
    from runtime import wire
    from runtime.protos import master_pb2_grpc, tensor_pb2
    channel = wire.create_channel(target[len("grpc://"):])
    try:
        master_pb2_grpc.MasterStub(channel).Ping(tensor_pb2.PingRequest(), timeout=timeout)
    finally:
        channel.close()


def test_idle_streams_leave_threads_for_unary_calls():
    from runtime.server import Server
    server = Server.create_local_server()
    server.stop()
    server = Server(server.cluster_spec, "localhost", 0, max_workers=16)
    channel = None
    try:
        channel, calls = _idle_streams(server.target, 24)  # more than the pool
        time.sleep(0.5)
        _ping(server.target)  # answered: the streams did not take every thread
        refused = 0
        for call in calls:
            if not call.is_active() or call.done():
                refused += 1
        assert server.guard.open_streams <= 16 - 4
        assert refused >= 24 - (16 - 4)
        # A session is still opened and run.
        g = tf.Graph()
        with g.as_default():
            y = tf.constant(2.0) * 3.0
        with Session(server.target, graph=g) as sess:
            assert sess.run(y) == 6.0
    finally:
        if channel is not None:
            channel.close()
        server.stop()


def test_a_stream_idle_too_long_is_ended():
    import grpc

    from runtime.server import Server
    server = Server.create_local_server()
    server.stop()
    server = Server(server.cluster_spec, "localhost", 0, stream_idle_seconds=0.5)
    channel = None
    try:
        channel, (call,) = _idle_streams(server.target, 1)
        with pytest.raises(grpc.RpcError) as info:
            next(call)
        assert info.value.code() == grpc.StatusCode.CANCELLED
        assert server.guard.idle_ended == 1
        deadline = time.monotonic() + 5
        while server.guard.open_streams and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.guard.open_streams == 0
    finally:
        if channel is not None:
            channel.close()
        server.stop()


# ---------------------------------------------------------------------------
# 4. Unclaimed pushes

def _key(step: int, tensor: str = "x:0") -> str:
    return f"/job:w/replica:0/task:0/device:CPU:0;{tensor};/job:w/replica:0/task:1/device:CPU:0;{step}"


def test_rendezvous_bounds_unclaimed_pushes_by_bytes():
    from runtime.worker import Rendezvous
    r = Rendezvous(max_unclaimed_bytes=3000)
    for step in (1, 2, 3):  # three pushes for steps that never run here
        r.put(_key(step), np.ones(1000, np.uint8))
    assert r.held_bytes() == (3000, 3000)
    r.put(_key(4), np.ones(1500, np.uint8))  # the oldest two go
    assert r.held_bytes() == (2500, 2500)
    with pytest.raises(errors.ResourceExhausted, match="step 1 was dropped"):
        r.take(_key(1), 1, time.monotonic() + 5)  # at once, not at the deadline
    # A step that runs here keeps its tensors; they do not count against the bound.
    r.watch(5, lambda err: None)
    r.put(_key(5), np.ones(5000, np.uint8))
    assert r.held_bytes() == (7500, 2500)
    assert r.take(_key(5), 5, time.monotonic() + 1).nbytes == 5000
    r.finish_step(5)
    assert r.held_bytes() == (2500, 2500)
    # A push alone over the bound is not held either.
    r.put(_key(6), np.ones(4000, np.uint8))
    assert r.held_bytes()[0] <= 3000


def test_rendezvous_drops_unclaimed_pushes_by_age_and_on_abort():
    from runtime.worker import Rendezvous, StepAborted
    r = Rendezvous(max_unclaimed_age=0.2)
    r.put(_key(1), np.ones(100, np.uint8))
    r.put(_key(2), np.ones(100, np.uint8))
    r.abort(2, StepAborted("step 2 failed elsewhere"))
    assert r.held_bytes() == (100, 100)
    r.put(_key(2, "y:0"), np.ones(100, np.uint8))  # late push of an aborted step: dropped
    assert r.held_bytes() == (100, 100)
    time.sleep(0.3)
    assert r.sweep() == 1
    assert r.held_bytes() == (0, 0) and r.pending() == 0
    with pytest.raises(errors.ResourceExhausted, match="waited more than"):
        r.take(_key(1), 1, time.monotonic() + 5)


def test_worker_sweeps_unclaimed_pushes_on_its_own():
    from runtime.server import hardware_view
    from runtime.worker import WorkerService
    cluster = hardware_view({"localhost": ["127.0.0.1:1"]}, "localhost", 0)
    worker = WorkerService(cluster, "localhost", 0, max_unclaimed_age=0.1)
    try:
        worker.rendezvous.put(_key(9), np.ones(10, np.uint8))
        deadline = time.monotonic() + 5
        while worker.rendezvous.held_bytes()[0] and time.monotonic() < deadline:
            time.sleep(0.02)
        assert worker.rendezvous.held_bytes() == (0, 0)
    finally:
        worker.close()


def test_an_announced_huge_tensor_is_refused_with_a_clear_status():
    import grpc

    from runtime import wire
    from runtime.protos import tensor_pb2, worker_pb2_grpc
    from runtime.server import Server
    server = Server.create_local_server()
    channel = wire.create_channel(server.target[len("grpc://"):])
    try:
        meta = tensor_pb2.TensorMeta(dtype="float32", shape=[1 << 40], nbytes=4 << 40)
        first = tensor_pb2.TensorChunk(key=_key(3), meta=meta, offset=0, data=b"\0" * 16)
        with pytest.raises(grpc.RpcError) as info:
            worker_pb2_grpc.WorkerStub(channel).PushTensor(iter([first]), timeout=10)
        assert info.value.code() in (grpc.StatusCode.RESOURCE_EXHAUSTED,
                                     grpc.StatusCode.INVALID_ARGUMENT), info.value
        assert "bytes announced" in info.value.details()
    finally:
        channel.close()
        server.stop()


# ---------------------------------------------------------------------------
# 5. Shared memory of servers that are gone

def _dead_pid() -> int:
    import subprocess
    import sys
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _orphan(pid: int) -> str:
    import secrets

    from runtime.segment_pool import POOL_PREFIX
    from runtime.shm import create_segment, release_mapping
    name = f"{POOL_PREFIX}{pid}_{secrets.token_hex(4)}"
    release_mapping(create_segment(name, 4096))
    return name


shm_only = pytest.mark.skipif(not __import__("runtime.shm").shm.shm_available(),
                              reason="no /dev/shm")


@shm_only
def test_a_starting_server_reaps_the_segments_of_dead_servers():
    from runtime.server import Server
    from runtime.shm import list_segments
    name = _orphan(_dead_pid())
    mine = _orphan(__import__("os").getpid())  # a live owner's stays
    try:
        server = Server.create_local_server()
        server.stop()
        assert name not in list_segments(name[:-8])
        assert mine in list_segments(mine[:-8])
    finally:
        from runtime.shm import unlink_segment
        unlink_segment(name)
        unlink_segment(mine)


@shm_only
def test_restart_reaps_the_segments_of_a_task_that_died_by_itself(cluster):
    import os
    import signal

    from runtime.shm import list_segments
    proc = cluster.processes[("worker", 1)]
    name = _orphan(proc.pid)  # as if the server had made it
    os.kill(proc.pid, signal.SIGKILL)  # not through the cluster: it died by itself
    proc.wait(10)
    assert name in list_segments(name[:-8])
    cluster.restart("worker", 1)
    assert name not in list_segments(name[:-8])


# ---------------------------------------------------------------------------
# 6. What the spec says is what is bound

def _ipv6_loopback() -> bool:
    import socket
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback here")
def test_an_ipv6_loopback_address_binds_ipv6_loopback():
    import socket

    from runtime.server import Server
    with socket.socket(socket.AF_INET6) as s:
        s.bind(("::1", 0))
        port = s.getsockname()[1]
    server = Server({"localhost": [f"[::1]:{port}"]}, "localhost", 0)
    try:
        assert server.target == f"grpc://[::1]:{port}"
        with socket.create_connection(("::1", port), timeout=2):
            pass
        with pytest.raises(OSError):  # not on IPv4
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
        g = tf.Graph()
        with g.as_default():
            y = tf.constant(2.0) + 1.0
        with Session(server.target, graph=g) as sess:
            assert sess.run(y) == 3.0
    finally:
        server.stop()


def test_target_reports_the_address_bound():
    from runtime.launcher import free_ports
    from runtime.server import Server
    (port,) = free_ports(1)
    server = Server({"w": [f"10.255.255.1:{port}"]}, "w", 0)  # not this host: loopback
    try:
        assert server.target == f"grpc://127.0.0.1:{port}"
        _ping(server.target)
    finally:
        server.stop()
    (port,) = free_ports(1)
    server = Server({"w": [f"localhost:{port}"]}, "w", 0)
    try:
        assert server.target == f"grpc://localhost:{port}"
    finally:
        server.stop()


# ---------------------------------------------------------------------------
# 7. Memory after one large message

def _rss_of(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_one_large_message_is_refused_before_the_server_holds_it(cluster):
    import grpc

    from runtime import wire
    from runtime.protos import master_pb2_grpc, tensor_pb2
    c = cluster
    pid = c.processes[("worker", 0)].pid
    channel = wire.create_channel(c.address("worker", 0))
    try:
        stub = master_pb2_grpc.MasterStub(channel)
        stub.Ping(tensor_pb2.PingRequest(payload=b"x" * 1000), timeout=10)
        before = _rss_of(pid)
        payload = b"\0" * (wire.MAX_RECEIVE_BYTES + (32 << 20))
        with pytest.raises(grpc.RpcError) as info:
            stub.Ping(tensor_pb2.PingRequest(payload=payload), timeout=30)
        del payload
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        time.sleep(0.2)
        assert _rss_of(pid) - before < 48 << 20
        stub.Ping(tensor_pb2.PingRequest(payload=b"x"), timeout=10)  # still serving
    finally:
        channel.close()


# ---------------------------------------------------------------------------
# 8. Clear errors

@pytest.mark.parametrize("text", ['{"ps": ["nohost"]}', "{oops", "[1, 2]", None],
                         ids=["bad-address", "not-json", "not-a-spec", "missing"])
def test_server_command_line_with_a_bad_cluster_file_is_one_line_and_exit_2(tmp_path, text):
    import subprocess
    import sys
    from pathlib import Path
    path = tmp_path / "bad.json"
    if text is not None:
        path.write_text(text)
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-m", "runtime.server", "--cluster", str(path),
                           "--job", "ps"], capture_output=True, text=True, timeout=60,
                          cwd=root, env={**__import__("os").environ, "PYTHONPATH": str(root)})
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ERROR "), proc.stderr


def test_shapes_wrong_at_build_fail_at_build():
    from core.ops import ShapeError
    g = tf.Graph()
    with g.as_default():
        x = tf.constant(np.ones(1, np.float32))
        with pytest.raises(ShapeError, match="more than"):
            tf.broadcast_to(x, [2**40, 2**40])
        with pytest.raises(ShapeError, match="dimension -3"):
            tf.broadcast_to(x, [-3, 2])
        with pytest.raises(ShapeError, match="dimension -3"):
            tf.placeholder(tf.float32, [-3, 2])
        assert tf.placeholder(tf.float32, [None, 2]).shape == (None, 2)


def test_a_ragged_feed_is_a_clear_error():
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, None], name="x")
        y = x * 2.0
    with Session(graph=g) as sess:
        with pytest.raises(errors.InvalidArgument, match="ragged.*'x:0'"):
            sess.run(y, {x: [[1.0, 2.0], [3.0]]})


def _node(name, op_type, attrs=None, inputs=()):
    from runtime.graph_codec import node_to_proto
    return node_to_proto({"name": name, "type": op_type, "inputs": list(inputs),
                          "control_inputs": [], "device": "", "colocation": [],
                          "attrs": attrs or {}})


@pytest.mark.parametrize("case", ["const-without-dtype", "name-with-semicolon"])
def test_a_graph_from_the_wire_is_checked_as_the_builders_check(case):
    from runtime import wire
    from runtime.protos import graph_pb2, master_pb2, master_pb2_grpc
    from runtime.server import Server
    from runtime.graph_codec import error_from_proto
    if case == "const-without-dtype":
        nodes = [_node("c", "Const", {"value": np.ones(2, np.float32)})]
        want = "dtype"
    else:
        nodes = [_node("a;b", "Const", {"value": np.ones(2, np.float32),
                                         "dtype": "float32"})]
        want = "a;b"
    server = Server.create_local_server()
    channel = wire.create_channel(server.target[len("grpc://"):])
    try:
        reply = master_pb2_grpc.MasterStub(channel).CreateSession(
            master_pb2.CreateSessionRequest(graph=graph_pb2.GraphDef(node=nodes)), timeout=10)
        err = error_from_proto(reply.error)
        assert isinstance(err, errors.InvalidArgument), err
        assert want in str(err)
    finally:
        channel.close()
        server.stop()


def test_local_cluster_takes_a_relative_hardware_path(tmp_path, monkeypatch):
    # The servers start in the repository's folder: the path they get is absolute.
    from runtime.server import hardware_view
    hardware_view({"worker": ["127.0.0.1:1"]}, "worker", 0).save(tmp_path / "hw.json")
    monkeypatch.chdir(tmp_path)
    cluster = LocalCluster({"worker": 1}, hardware="hw.json", start=False)
    try:
        assert cluster._hardware == tmp_path / "hw.json"
        monkeypatch.chdir("/")
        assert cluster._hardware.is_file()
    finally:
        cluster.stop()
