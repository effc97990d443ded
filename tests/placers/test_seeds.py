"""The seed texts' placement examples, as tests."""

import logging
import os

import numpy as np
import pytest

import core as tf
import placers
from core.cluster import Cluster, ClusterSpec

LOCAL = "/job:localhost/replica:0/task:0"

SEED_002_SPEC = ClusterSpec({
    "ps": ["127.0.0.1:2221", "127.0.0.1:2222"],
    "worker": ["127.0.0.1:2223", "127.0.0.1:2224", "127.0.0.1:2225"],
})


def test_seed_000_log_device_placement():
    """Seed 000: a and b pinned to /cpu:0, mul on the default device /gpu:0; a second
    run places nothing and logs nothing."""
    g = tf.Graph()
    with g.as_default():
        with tf.device("/cpu:0"):
            a = tf.Variable(3.0, name="a")
            b = tf.constant(4.0, name="b")
        c = a * b
    cluster = Cluster.single_host(gpus=1)
    lines = []
    placer = placers.SimplePlacer(log_device_placement=True, log=lines.append)
    first = placer.place(g, cluster)
    # The seed's six lines (its order is the log's; ours is creation order).
    assert sorted(lines) == sorted([
        f"a: {LOCAL}/device:CPU:0",
        f"a/read: {LOCAL}/device:CPU:0",
        f"mul: {LOCAL}/device:GPU:0",
        f"a/Assign: {LOCAL}/device:CPU:0",
        f"b: {LOCAL}/device:CPU:0",
        f"a/initial_value: {LOCAL}/device:CPU:0",
    ])
    assert lines == first.log_lines()
    lines.clear()
    second = placer.place(g, cluster, previous=first)
    assert lines == [] and second == first
    assert c.op.name == "mul"


def _seed_000_graph():
    g = tf.Graph()
    with g.as_default():
        with tf.device("/cpu:0"):
            tf.constant(4.0, name="b")
        tf.constant(1.0, name="d")
    return g


def test_log_device_placement_goes_through_logging(caplog):
    """Without ``log=``, each line is an INFO record of the ``placers.base`` logger."""
    caplog.set_level(logging.INFO, logger="placers")
    placers.SimplePlacer(log_device_placement=True).place(_seed_000_graph(),
                                                          Cluster.single_host(gpus=1))
    records = [r for r in caplog.records if r.name == "placers.base"]
    assert [r.getMessage() for r in records] == [f"b: {LOCAL}/device:CPU:0",
                                                 f"d: {LOCAL}/device:GPU:0"]
    assert {r.levelno for r in records} == {logging.INFO}
    caplog.clear()
    placers.SimplePlacer().place(_seed_000_graph(), Cluster.single_host(gpus=1))
    assert not caplog.records  # not asked for: nothing logged


PLACE_AND_LOG = """
import logging, sys
import core as tf
import placers
from core.cluster import Cluster
if sys.argv[1] == "configured":
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
g = tf.Graph()
with g.as_default():
    with tf.device("/cpu:0"):
        tf.constant(4.0, name="b")
    tf.constant(1.0, name="d")
placers.SimplePlacer(log_device_placement=True).place(g, Cluster.single_host(gpus=1))
"""


@pytest.mark.parametrize("logging_setup", ["unconfigured", "configured"])
def test_placement_log_reaches_the_terminal_unless_logging_says_otherwise(logging_setup):
    """A program that configures no logging sees the lines on stderr, as TensorFlow's
    users do; one that configures it (here: WARNING and up) decides."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", PLACE_AND_LOG, logging_setup], cwd=root,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(root)})
    assert done.returncode == 0, done.stderr
    if logging_setup == "unconfigured":
        assert done.stderr.splitlines() == [f"b: {LOCAL}/device:CPU:0",
                                            f"d: {LOCAL}/device:GPU:0"]
    else:
        assert done.stderr == ""


def test_seed_000_dynamic_placement_function():
    def variables_on_cpu(op):
        return "/cpu:0" if op.type == "Variable" else "/gpu:0"

    g = tf.Graph()
    with g.as_default(), tf.device(variables_on_cpu):
        a = tf.Variable(3.0)
        b = tf.constant(4.0)
        c = a * b
    p = placers.SimplePlacer().place(g, Cluster.single_host(gpus=1))
    assert p[a.op.name] == f"{LOCAL}/device:CPU:0"
    assert p[a.initializer.name] == f"{LOCAL}/device:CPU:0"  # colocated with its variable
    assert p[b.op.name] == p[c.op.name] == f"{LOCAL}/device:GPU:0"


def test_seed_000_int32_variable_has_no_gpu_kernel():
    g = tf.Graph()
    with g.as_default(), tf.device("/gpu:0"):
        i = tf.Variable(3)
    cluster = Cluster.single_host(gpus=1)
    with pytest.raises(placers.PlacementError) as info:
        placers.SimplePlacer().place(g, cluster)
    assert str(info.value).startswith(
        "Cannot assign a device to node 'Variable': Could not satisfy explicit device "
        "specification '/device:GPU:0'")
    assert info.value.op == "Variable" and info.value.device == "/device:GPU:0"
    # Soft placement falls back to the CPU of the same task.
    p = placers.SimplePlacer(allow_soft_placement=True).place(g, cluster)
    assert p[i.op.name] == f"{LOCAL}/device:CPU:0"
    # A float variable is fine on the GPU.
    g2 = tf.Graph()
    with g2.as_default(), tf.device("/gpu:0"):
        f = tf.Variable(3.0)
    assert placers.SimplePlacer().place(g2, cluster)[f.op.name] == f"{LOCAL}/device:GPU:0"


def test_seed_000_cluster_pins_and_defaults():
    """Seed 000, "Clusters": a on ps task 0's CPU, b on worker task 0's GPU:1, c on the
    master's default device."""
    spec = ClusterSpec({"ps": ["machine-a:2221"], "worker": ["machine-a:2222", "machine-b:2222"]})
    cluster = Cluster.from_spec(spec, gpus_per_task={"ps": 0, "worker": 2},
                                hosts={("ps", 0): "A", ("worker", 0): "A", ("worker", 1): "B"})
    g = tf.Graph()
    with g.as_default():
        with tf.device("/job:ps/task:0/cpu:0"):
            a = tf.constant(1.0)
        with tf.device("/job:worker/task:0/gpu:1"):
            b = a + 2
        c = a + b
        with tf.device("/job:ps/task:0"):
            d = tf.constant(2.0)
        with tf.device("/job:ps"):
            e = tf.constant(3.0)
    p = placers.SimplePlacer().place(g, cluster)
    assert p[a.op.name] == "/job:ps/replica:0/task:0/device:CPU:0"
    assert p[b.op.name] == "/job:worker/replica:0/task:0/device:GPU:1"
    master = "/job:%s/replica:0/task:%d" % cluster.master
    assert p[c.op.name] == master + "/device:GPU:0"
    assert p[d.op.name] == p[e.op.name] == "/job:ps/replica:0/task:0/device:CPU:0"


def _seed_002_example_2():
    g = tf.Graph()
    with g.as_default():
        with tf.device(placers.replica_device_setter(ps_tasks=2, ps_device="/job:ps",
                                                     worker_device="/job:worker")):
            v1 = tf.Variable(1.0, name="v1")  # pinned to /job:ps/task:0 (defaults to /cpu:0)
            v2 = tf.Variable(2.0, name="v2")  # pinned to /job:ps/task:1 (defaults to /cpu:0)
            v3 = tf.Variable(3.0, name="v3")  # pinned to /job:ps/task:0 (defaults to /cpu:0)
            s = v1 + v2  # pinned to /job:worker (defaults to task:0/cpu:0)
            with tf.device("/task:1"):
                p1 = 2 * s  # pinned to /job:worker/task:1 (defaults to /cpu:0)
                with tf.device("/cpu:0"):
                    p2 = 3 * s  # pinned to /job:worker/task:1/cpu:0
    return g, dict(v1=v1, v2=v2, v3=v3, s=s, p1=p1, p2=p2)


def test_seed_002_example_1_pins():
    g = tf.Graph()
    with g.as_default():
        with tf.device("/job:ps"):
            a = tf.Variable(1.0, name="a")
        with tf.device("/job:worker"):
            b = a + 2
        with tf.device("/job:worker/task:1"):
            c = a + b
    p = placers.SimplePlacer().place(g, Cluster.from_spec(SEED_002_SPEC))
    assert p["a"] == p["a/read"] == p["a/Assign"] == "/job:ps/replica:0/task:0/device:CPU:0"
    assert p[b.op.name] == "/job:worker/replica:0/task:0/device:CPU:0"
    assert p[c.op.name] == "/job:worker/replica:0/task:1/device:CPU:0"


def test_seed_002_example_2_every_pinned_to_comment():
    g, t = _seed_002_example_2()
    assert t["v1"].device == "/job:ps/task:0"
    assert t["v2"].device == "/job:ps/task:1"
    assert t["v3"].device == "/job:ps/task:0"
    assert t["s"].device == "/job:worker"
    assert t["p1"].device == "/job:worker/task:1"
    assert t["p2"].device == "/job:worker/task:1/device:CPU:0"
    p = placers.SimplePlacer().place(g, Cluster.from_spec(SEED_002_SPEC))
    assert p["v1"] == p["v3"] == "/job:ps/replica:0/task:0/device:CPU:0"
    assert p["v2"] == "/job:ps/replica:0/task:1/device:CPU:0"
    assert p[t["s"].op.name] == "/job:worker/replica:0/task:0/device:CPU:0"
    assert p[t["p1"].op.name] == p[t["p2"].op.name] == "/job:worker/replica:0/task:1/device:CPU:0"


def test_seed_000_replica_device_setter_with_gpus():
    """Seed 000's last example: inner /gpu:1 and /task:1 scopes win over the setter."""
    spec = ClusterSpec({"ps": ["a:1", "a:2"], "worker": ["b:1", "b:2"]})
    g = tf.Graph()
    with g.as_default(), tf.device(placers.replica_device_setter(cluster=spec)):
        v = [tf.Variable(float(i)) for i in range(5)]
        s = v[0] + v[1]
        with tf.device("/gpu:1"):
            p1 = 2 * s
            with tf.device("/task:1"):
                p2 = 3 * s
    assert [x.device for x in v] == ["/job:ps/task:%d" % (i % 2) for i in range(5)]
    assert s.device == "/job:worker"
    assert p1.device == "/job:worker/device:GPU:1"
    assert p2.device == "/job:worker/task:1/device:GPU:1"
    cluster = Cluster.from_spec(spec, gpus_per_task={"ps": 0, "worker": 2})
    p = placers.SimplePlacer().place(g, cluster)
    assert p[s.op.name] == "/job:worker/replica:0/task:0/device:GPU:0"
    assert p[p1.op.name] == "/job:worker/replica:0/task:0/device:GPU:1"
    assert p[p2.op.name] == "/job:worker/replica:0/task:1/device:GPU:1"
    assert p[v[4].op.name] == "/job:ps/replica:0/task:0/device:CPU:0"


def test_unpinned_int32_variable_goes_to_cpu_silently():
    g = tf.Graph()
    with g.as_default():
        i = tf.Variable(np.arange(3, dtype=np.int32))
        f = tf.constant(1.0)
    p = placers.SimplePlacer().place(g, Cluster.single_host(gpus=1))
    assert p[i.op.name].endswith("CPU:0") and p[f.op.name].endswith("GPU:0")
