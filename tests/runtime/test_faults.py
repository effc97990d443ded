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
