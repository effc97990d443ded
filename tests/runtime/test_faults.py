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


def test_restarted_producer_rejoins_an_open_session():
    # Worker 1 produces a tensor that worker 0 (the master) and ps 0 consume. Killed and
    # restarted between steps, the next step of the same session registers its part
    # again and succeeds, long before the step's deadline.
    with LocalCluster({"ps": 1, "worker": 2}, start_timeout=60) as c:
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
                     config=SessionConfig(operation_timeout=20.0)) as sess:
            np.testing.assert_array_equal(sess.run(out, feed), want)
            c.kill("worker", 1)
            c.restart("worker", 1)
            for _ in range(3):
                start = time.monotonic()
                try:
                    np.testing.assert_array_equal(sess.run(out, feed), want)
                except errors.LabRuntimeError as err:  # allowed: at once, naming the task
                    assert "task:1" in str(err), err
                assert time.monotonic() - start < 8.0
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
