"""``use_locking``: concurrent steps that update one variable with locking never lose an
update (TensorFlow's ``use_locking=True``); the lock is the executor's, per variable."""

from __future__ import annotations

import threading

import numpy as np

import core as tf
from runtime.config import SessionConfig
from runtime.session import Session


def test_concurrent_locked_increments_are_all_counted():
    g = tf.Graph()
    with g.as_default():
        counter = tf.Variable(np.int64(0), name="counter")
        step = tf.assign_add(counter, np.int64(1), use_locking=True)
    assert step.op.attrs["use_locking"] is True
    threads, per_thread = 6, 300
    with Session(graph=g, config=SessionConfig(inter_op_parallelism_threads=4)) as sess:
        sess.run(counter.initializer)
        sess.run(step)
        sess.run(counter.initializer)
        locked = [n.name for xp in sess._executor._plans.values() for n in xp.nodes
                  if n.var_lock is not None]
        assert locked == [step.op.name]

        def work():
            for _ in range(per_thread):
                sess.run(step)

        workers = [threading.Thread(target=work) for _ in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert int(sess.run(counter)) == threads * per_thread


def test_without_use_locking_no_attr_is_set():
    g = tf.Graph()
    with g.as_default():
        v = tf.Variable(1.0, name="v")
        op = v.assign_add(2.0)
    assert "use_locking" not in op.op.attrs
