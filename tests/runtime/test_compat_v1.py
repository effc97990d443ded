"""runtime.compat.v1: TensorFlow's 1.x names over the lab, and the seed texts' programs
run as written with only ``import tensorflow as tf`` changed.

Each program below is the seed's code, verbatim but for: the import line (``from
runtime.compat import v1 as tf``), the addresses (free ports instead of the book's fixed
ones; its example hosts become 127.0.0.1), and what the book leaves out or gets wrong, each marked in
the program with a ``# (test)`` comment.  They run in subprocesses, as the book runs them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from runtime.compat import v1 as tf
from runtime.launcher import free_ports

REPO = Path(__file__).resolve().parents[2]
LOCAL = "/job:localhost/replica:0/task:0"

# Seed 002 (the whole code note).  `reset_graph` is the book's helper from its earlier
# chapters (not TensorFlow's).
SEED_002 = '''
from runtime.compat import v1 as tf
def reset_graph():  # (test) the book's helper
    tf.reset_default_graph()
# 定义集群（有相关的作业组成）
cluster_spec = tf.train.ClusterSpec({
    "ps": [
        "127.0.0.1:2221",	# /job:ps/task:0
        "127.0.0.1:2222",  # /job:ps/task:1
    ],
    "worker": [
        "127.0.0.1:2223",  # /job:worker/task:0
        "127.0.0.1:2224",  # /job:worker/task:1
        "127.0.0.1:2225",  # /job:worker/task:2
    ]})
# 启动集群中的Server（作业）
task_ps0 = tf.train.Server(cluster_spec, job_name="ps", task_index=0)
task_ps1 = tf.train.Server(cluster_spec, job_name="ps", task_index=1)
task_worker0 = tf.train.Server(cluster_spec, job_name="worker", task_index=0)
task_worker1 = tf.train.Server(cluster_spec, job_name="worker", task_index=1)
task_worker2 = tf.train.Server(cluster_spec, job_name="worker", task_index=2)
reset_graph()
with tf.device("/job:ps"):
    a = tf.Variable(1.0, name="a")
with tf.device("/job:worker"):
    b = a + 2
with tf.device("/job:worker/task:1"):
    c = a + b
with tf.Session("grpc://127.0.0.1:2221") as sess:
    sess.run(a.initializer)
    print(c.eval())

reset_graph()
with tf.device(tf.train.replica_device_setter(ps_tasks=2, ps_device="/job:ps", worker_device="/job:worker")):
    v1  = tf.Variable(1.0, name="v1")  	# pinned to /job:ps/task:0	(defaults to /cpu:0)
    v2 = tf.Variable(2.0, name="v2") 	# pinned to /job:ps/task:1	(defaults to /cpu:0)
    v3 = tf.Variable(3.0, name="v3") 	# pinned to /job:ps/task:0	(defaults to /cpu:0)
    s = v1 + v2            	# pinned to /job:worker (defaults to task:0/cpu:0)
    with tf.device("/task:1"):
        p1 = 2 * s         	# pinned to /job:worker/task:1 (defaults to /cpu:0)
        with tf.device("/cpu:0"):
            p2 = 3 * s 	# pinned to /job:worker/task:1/cpu:0
config = tf.ConfigProto()
config.log_device_placement = True
with tf.Session("grpc://127.0.0.1:2221", config=config) as sess:
    v1.initializer.run()
'''

# Seed 004: main.py (its three code blocks; the stray line "tf.device :" between them is
# not Python and is left out), worker0.py and worker1.py.
SEED_004_MAIN = '''
from runtime.compat import v1 as tf

cluster = tf.train.ClusterSpec({"ps": ["localhost:2222"],\\
                                "worker": ["localhost:2223",\\
                                           "localhost:2224"]})
ps = tf.train.Server(cluster, job_name="ps", task_index=0)

worker0 = tf.train.Server(cluster,\\
                          job_name="worker", task_index=0)
worker1 = tf.train.Server(cluster,\\
                          job_name="worker", task_index=1)

with tf.device("/job:ps/task:0"):
    a = tf.constant(3.0, dtype=tf.float32)
    b = tf.constant(4.0)
'''

SEED_004_WORKER0 = '''
from runtime.compat import v1 as tf
from main import *

with tf.Session(worker0.target) as sess:
    init = tf.global_variables_initializer()
    add_node = tf.multiply(a,b)
    sess.run(init)
    print(sess.run(add_node))
'''

SEED_004_WORKER1 = '''
from runtime.compat import v1 as tf
from main import *

with tf.Session(worker1.target) as sess:
    init = tf.global_variables_initializer()
    a = tf.constant(10.0, dtype=tf.float32)
    add_node = tf.multiply(a,b)
    sess.run(init)
    a = add_node
    print(sess.run(add_node))
'''

# Seed 000's single-machine snippets, in the book's order, as one program.
SEED_000_LOCAL = '''
from runtime.compat import v1 as tf
config = tf.ConfigProto()
config.gpu_options.per_process_gpu_memory_fraction = 0.4
session = tf.Session(config=config)

with tf.device("/cpu:0"):
    a = tf.Variable(3.0)
    b = tf.constant(4.0)

c = a * b
config = tf.ConfigProto()
config.log_device_placement = True
sess = tf.Session(config=config)
a.initializer.run(session=sess)  # (test) the book's transcript says x.initializer
print(sess.run(c))

with tf.device("/gpu:0"):
    i = tf.Variable(3)

config = tf.ConfigProto()
config.allow_soft_placement = True
sess = tf.Session(config=config)
sess.run(i.initializer)  # the placer runs and falls back to /cpu:0
print(sess.run(i))  # (test) what it holds

a = tf.constant(1.0)
b = a + 2.0

with tf.control_dependencies([a, b]):
    x = tf.constant(3.0)
    y = tf.constant(4.0)

z = x + y
print(sess.run(z))  # (test) the book only builds it
'''

# Seed 000's cluster: machine B's server (a process of its own, which joins) and a
# client opening a session on it.
SEED_000_CLUSTER_SPEC = '''
from runtime.compat import v1 as tf
cluster_spec = tf.train.ClusterSpec({
    "ps": [
        "machine-a.example.com:2221",  # /job:ps/task:0
        ],
    "worker": [
        "machine-a.example.com:2222",  # /job:worker/task:0
        "machine-b.example.com:2222",  # /job:worker/task:1
        ]})
'''

SEED_000_MACHINE_B = '''
server = tf.train.Server(cluster_spec, job_name="worker", task_index=1)  # (test) B's task
server.join()  # blocks until the server stops (i.e., never)
'''

SEED_000_CLIENT = '''
a = tf.constant(1.0)
b = a + 2
c = a * 3

with tf.Session("grpc://machine-b.example.com:2222") as sess:
    print(c.eval())  # 9.0
'''


def _with_free_ports(*programs: str) -> list[str]:
    """The programs with each address (host:port) they name moved to a free port, the
    same address to the same port in all of them; the book's example hosts become
    127.0.0.1 (this machine), localhost stays."""
    pattern = re.compile(r"(127\.0\.0\.1|localhost|machine-[ab]\.example\.com):(\d+)")
    addresses = sorted({m.group(0) for p in programs for m in pattern.finditer(p)})
    hosts = {a: a.split(":")[0] if a.startswith(("127.", "localhost")) else "127.0.0.1"
             for a in addresses}
    mapping = {a: f"{hosts[a]}:{p}" for a, p in zip(addresses, free_ports(len(addresses)))}
    return [pattern.sub(lambda m: mapping[m.group(0)], p) for p in programs]


def _run(path: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, path.name], cwd=path.parent, env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr
    return done


def _write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


def test_seed_002_prints_4_and_logs_the_replica_device_setter_placement(tmp_path):
    (program,) = _with_free_ports(SEED_002)
    done = _run(_write(tmp_path, "seed002.py", program))
    assert done.stdout.split() == ["4.0"]
    lines = done.stderr.splitlines()
    ps0, ps1 = "/job:ps/replica:0/task:0/device:CPU:0", "/job:ps/replica:0/task:1/device:CPU:0"
    w0 = "/job:worker/replica:0/task:0/device:CPU:0"
    w1 = "/job:worker/replica:0/task:1/device:CPU:0"
    for line in (f"v1: {ps0}", f"v2: {ps1}", f"v3: {ps0}", f"v1/Assign: {ps0}", f"add: {w0}",
                 f"mul: {w1}", f"mul_1: {w1}"):
        assert lines.count(line) == 1, line  # once: the master is in this process


def test_seed_004_worker_programs_print_12_then_40(tmp_path):
    main, w0, w1 = _with_free_ports(SEED_004_MAIN, SEED_004_WORKER0, SEED_004_WORKER1)
    _write(tmp_path, "main.py", main)
    assert _run(_write(tmp_path, "worker0.py", w0)).stdout.split() == ["12.0"]
    assert _run(_write(tmp_path, "worker1.py", w1)).stdout.split() == ["40.0"]


def test_seed_000_single_machine_snippets(tmp_path):
    done = _run(_write(tmp_path, "seed000.py", SEED_000_LOCAL))
    assert done.stdout.split() == ["12.0", "3", "7.0"]
    lines = done.stderr.splitlines()
    # The seed's six lines, under TF's names for an unnamed variable; no GPU here, so mul
    # goes to the default device, CPU:0.
    for name in ("Variable", "Variable/read", "Variable/Assign", "Variable/initial_value",
                 "Const", "mul"):
        assert f"{name}: {LOCAL}/device:CPU:0" in lines


def test_seed_000_session_on_another_machines_server(tmp_path):
    from runtime.launcher import wait_until_serving
    spec, machine_b, client = _with_free_ports(SEED_000_CLUSTER_SPEC, SEED_000_MACHINE_B,
                                               SEED_000_CLIENT)
    _write(tmp_path, "machine_b.py", spec + machine_b)
    server = subprocess.Popen([sys.executable, "machine_b.py"], cwd=tmp_path,
                              env=dict(os.environ, PYTHONPATH=str(REPO)),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        address = re.search(r'"(127\.0\.0\.1:\d+)",  # /job:worker/task:1', spec).group(1)
        wait_until_serving(address, 60, alive=lambda: server.poll() is None)
        done = _run(_write(tmp_path, "client.py", spec + client))
        # The book's comment says 9.0; TensorFlow 1.x prints 3.0 (c = a * 3).
        assert done.stdout.split() == ["3.0"]
    finally:
        server.kill()
        server.wait()


# ---------------------------------------------------------------------------
# The names, in-process


def test_config_proto_maps_onto_session_config_and_unknown_fields_are_named():
    config = tf.ConfigProto(inter_op_parallelism_threads=2, use_per_session_threads=True)
    config.gpu_options.per_process_gpu_memory_fraction = 0.4
    config.gpu_options.allow_growth = True
    config.intra_op_parallelism_threads = 1
    ours = config.to_session_config()
    assert (ours.inter_op_parallelism_threads, ours.intra_op_parallelism_threads) == (2, 1)
    assert ours.per_process_gpu_memory_fraction == 0.4 and ours.allow_growth
    assert ours.use_per_session_threads
    with pytest.raises(AttributeError, match="ConfigProto.device_count is not supported"):
        config.device_count = {"GPU": 0}
    assert tf.GPUOptions(allow_growth=True).allow_growth


def test_names_tensorflow_has_and_we_lack_say_so():
    with pytest.raises(AttributeError, match="tensorflow.compat.v1.while_loop is not supported"):
        tf.while_loop
    with pytest.raises(AttributeError, match="train.MonitoredTrainingSession is not supported"):
        tf.train.MonitoredTrainingSession
    with pytest.raises(AttributeError, match="has no 'no_such_name'"):
        tf.no_such_name
    # Only TensorFlow's names: core's builders that v1 has at the top level are here.
    assert not hasattr(tf, "relu")
    assert tf.nn.relu is not None and tf.train.ClusterSpec is not None


def test_run_metadata_step_stats_come_from_the_trace():
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, (2, 2), name="x")
        y = tf.matmul(x, x, name="y")
    meta = tf.RunMetadata()
    options = tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE)
    with tf.Session(graph=g) as sess:
        value = sess.run(y, {x: np.eye(2, dtype=np.float32)}, options=options,
                         run_metadata=meta)
        plain = sess.run(y, {x: np.eye(2, dtype=np.float32)}, run_metadata=tf.RunMetadata())
    np.testing.assert_array_equal(value, np.eye(2))
    np.testing.assert_array_equal(plain, np.eye(2))
    (dev,) = meta.step_stats.dev_stats
    assert dev.device == f"{LOCAL}/device:CPU:0"
    stats = {n.node_name: n for n in dev.node_stats}
    assert set(stats) == {r.op for r in meta.trace.ops} and "y" in stats
    record = next(r for r in meta.trace.ops if r.op == "y")
    assert stats["y"].op_end_rel_nanos == round((record.end - record.start) * 1e9)


def test_variable_takes_tensorflows_argument_order_and_refuses_what_it_ignores():
    g = tf.Graph()
    with g.as_default():
        v = tf.Variable(2.0, False, name="v")
        assert v.op.name == "v" and v not in tf.trainable_variables()
        assert isinstance(v, tf.Variable)
        with pytest.raises(TypeError, match=r"\['caching_device'\]"):
            tf.Variable(1.0, caching_device="/cpu:0")


def test_module_doctests():
    import doctest

    from runtime.compat import v1
    result = doctest.testmod(v1, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0 and result.attempted >= 3


TRAINING_PROGRAM = '''
g = tf.Graph()
with g.as_default():
    x = tf.placeholder(tf.float32, (None, 4), name="x")
    y = tf.placeholder(tf.int32, (None,), name="y")
    w = tf.Variable(W0, name="w")
    b = tf.Variable(tf.zeros([3]), name="b")
    hidden = tf.concat([tf.matmul(x, w), tf.nn.relu(tf.matmul(x, w))], axis=1)
    logits = tf.nn.bias_add(tf.matmul(hidden, tf.constant(W1)), b)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y,
                                                                         logits=logits))
    train = tf.train.AdamOptimizer(0.1).minimize(loss)
    init = tf.global_variables_initializer()
with tf.Session(graph=g) as sess:
    sess.run(init)
    losses = [sess.run([train, loss], {x: X, y: Y})[1] for _ in range(5)]
'''


def test_a_training_program_gives_tensorflows_losses():
    """One TF 1.x program text, run with tensorflow.compat.v1 and with ours."""
    real = pytest.importorskip("tensorflow", reason="TensorFlow is not installed "
                               "(pip install -e '.[dev]' installs tensorflow-cpu)")
    rng = np.random.default_rng(3)
    data = {"W0": rng.standard_normal((4, 3)).astype(np.float32),
            "W1": rng.standard_normal((6, 3)).astype(np.float32),
            "X": rng.standard_normal((8, 4)).astype(np.float32),
            "Y": rng.integers(0, 3, 8).astype(np.int32)}
    results = {}
    for name, module in (("ours", tf), ("tensorflow", real.compat.v1)):
        scope = dict(data, tf=module)
        exec(TRAINING_PROGRAM, scope)
        results[name] = scope["losses"]
    np.testing.assert_allclose(results["ours"], results["tensorflow"], rtol=1e-4)
    assert results["ours"][-1] < results["ours"][0]


def test_server_takes_a_config_proto_and_interactive_session_is_the_default():
    server = tf.train.Server.create_local_server(
        config=tf.ConfigProto(inter_op_parallelism_threads=1))
    try:
        assert server.config.inter_op_parallelism_threads == 1
        g = tf.Graph()
        with g.as_default():
            c = tf.constant(2.0) * 3.0
        sess = tf.InteractiveSession(server.target, graph=g)
        try:
            assert c.eval() == 6.0
        finally:
            sess.close()
    finally:
        server.stop()
