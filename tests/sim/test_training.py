"""Data-parallel training steps: workers read variables from ps tasks, compute, and
send updates back (AssignSub on ps), synchronously or asynchronously."""

from __future__ import annotations

import numpy as np

import core as tf
from core.cluster import Cluster
from core.placement import Placement
from sim import simulate

SHAPE = (64, 64)


def data_parallel_step(workers: int, ps: int, n_vars: int, sync: bool):
    """A graph of one training step and its placement (by the op's pinned task).

    Variables round-robin over ps tasks; each worker multiplies its batch by every
    variable and sends a gradient-like update; sync: one group op after all updates,
    async: one group op per worker."""
    g = tf.Graph()
    with g.as_default():
        variables = []
        for i in range(n_vars):
            with tf.device(f"/job:ps/task:{i % ps}"):
                variables.append(tf.Variable(np.ones(SHAPE, np.float32), name=f"w{i}"))
        train_ops = []
        all_updates = []
        for w in range(workers):
            updates = []
            with tf.device(f"/job:worker/task:{w}"):
                h = tf.constant(np.ones(SHAPE, np.float32), name=f"batch{w}")
                grads = []
                for v in variables:
                    h = tf.relu(tf.matmul(h, v.value()))
                    grads.append(h * 0.01)
            for i, (v, grad) in enumerate(zip(variables, grads)):
                with tf.device(f"/job:ps/task:{i % ps}"):
                    updates.append(tf.assign_sub(v, grad, name=f"update_w{i}_by{w}"))
            all_updates += updates
            if not sync:
                with tf.device(f"/job:worker/task:{w}"):
                    train_ops.append(tf.group(*updates, name=f"train{w}"))
        if sync:
            with tf.device("/job:worker/task:0"):
                train_ops.append(tf.group(*all_updates, name="train"))
    spec = {"ps": [f"ps{i}:1" for i in range(ps)], "worker": [f"w{i}:1" for i in range(workers)]}
    cluster = Cluster.from_spec(spec, gpus_per_task={"worker": 1})
    placement = Placement({op.name: _device_of(op, cluster) for op in g.get_operations()})
    return g, cluster, placement, train_ops


def _device_of(op, cluster):
    spec = op.device_spec
    if spec.device_type is not None:
        return cluster.device(op.device).name
    return cluster.default_device(spec.job, spec.task).name


def test_a_synchronous_step_ends_after_every_update():
    g, cluster, placement, (train,) = data_parallel_step(workers=3, ps=2, n_vars=3, sync=True)
    init = [v.initializer for v in tf.global_variables(g)]
    trace = simulate(g, placement, cluster, fetches=[train])
    trace.validate(g, cluster)
    ends = {r.op: r.end for r in trace.ops}
    starts = {r.op: r.start for r in trace.ops}
    updates = [name for name in ends if name.startswith("update_")]
    assert len(updates) == 9
    assert max(ends[u] for u in updates) <= starts["train"]
    assert trace.step_time == ends["train"]
    assert not any(op.name in ends for op in init)  # initializers are not fetched
    # Every worker read each variable from ps once, and sent each update back once.
    assert {x.src.split("/")[1] for x in trace.transfers} == {"job:ps", "job:worker"}


def test_an_asynchronous_step_reports_each_workers_completion():
    g, cluster, placement, trains = data_parallel_step(workers=2, ps=1, n_vars=2, sync=False)
    slow_gpu = "/job:worker/replica:0/task:1/device:GPU:0"
    slower = cluster.replace_device(slow_gpu, peak_flops=1e9)
    trace = simulate(g, placement, slower, fetches=trains)
    trace.validate(g, slower)
    done = trace.summary()["fetch_end"]
    assert set(done) == {"train0", "train1"}
    assert done["train0"] < done["train1"] == trace.step_time
    ends = {r.op: r.end for r in trace.ops}
    for w, name in enumerate(["train0", "train1"]):
        assert all(ends[u] <= done[name] for u in ends if u.endswith(f"_by{w}"))
