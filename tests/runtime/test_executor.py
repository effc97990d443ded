"""The local executor on hand-built graphs: values, order, transfers, errors, deadlines."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import core as tf
from core.cluster import Cluster
from core.graph import ops_needed
from core.placement import Placement
from runtime.config import SessionConfig
from runtime.errors import DeadlineExceeded, FailedPrecondition, InvalidArgument, OpError
from runtime.executor import Executor, StepIO, StepResult
from runtime.local_devices import InterOpPool, LocalDevices
from runtime.variables import VariableStore

CPU0 = "/job:localhost/replica:0/task:0/device:CPU:0"


@pytest.fixture
def cluster():
    return Cluster.single_host(cpu_cores=2)


@pytest.fixture
def executor(cluster):
    devices = LocalDevices.for_task(cluster, "localhost", 0, SessionConfig())
    ex = Executor(devices, VariableStore())
    yield ex
    ex.close()
    devices.close()


def on_cpu(graph, device=CPU0):
    return Placement({op.name: device for op in graph.get_operations()})


def run(ex, graph, fetches=(), **kw):
    return ex.run_step(graph.get_operations(), on_cpu(graph), fetches=fetches, **kw)


def test_chain_values_and_a_valid_trace(executor, cluster):
    g = tf.Graph()
    with g.as_default():
        x = tf.constant(np.arange(4.0, dtype=np.float32), name="x")
        y = tf.negative(tf.identity(x, name="id"), name="neg")
        z = tf.relu(y + 10.0, name="relu")
    result = run(executor, g, [z.name, y.name], trace=True)
    assert isinstance(result, StepResult)
    np.testing.assert_array_equal(result.values[z.name], 10.0 - np.arange(4.0))
    np.testing.assert_array_equal(result.values[y.name], -np.arange(4.0))
    trace = result.to_trace()
    trace.validate(g, cluster)
    assert {r.op for r in trace.ops} == {op.name for op in g.get_operations()}
    assert trace.ops[0].start >= 0 and result.end >= result.start
    assert trace.memory and trace.step_time > 0


def test_diamond_runs_each_op_once(executor, cluster):
    g = tf.Graph()
    with g.as_default():
        a = tf.constant(2.0, name="a")
        b = tf.multiply(a, 3.0, name="b")
        c = tf.add(a, 1.0, name="c")
        d = tf.add(b, c, name="d")
    result = run(executor, g, [d.name], trace=True)
    assert result.values[d.name] == 9.0
    names = [r.op for r in result.ops]
    assert len(names) == len(set(names)) == len(g.get_operations())
    result.to_trace().validate(g, cluster)


def test_only_the_fetches_needs_run_and_the_plan_is_reused(executor):
    g = tf.Graph()
    with g.as_default():
        a = tf.constant(1.0, name="a")
        b = tf.identity(a, name="b")
    # The caller passes only the ops the step needs.
    ops = [g.get_operation_by_name("a")]
    r = executor.run_step(ops, on_cpu(g), fetches=["a:0"], trace=True)
    assert [rec.op for rec in r.ops] == ["a"]
    assert executor.plan_for(ops, on_cpu(g), ["a:0"]) is not executor.plan_for(
        ops, on_cpu(g), ["a:0"])  # a new Placement object is a new key
    p = on_cpu(g)
    assert executor.plan_for(ops, p, ["a:0"]) is executor.plan_for(ops, p, ["a:0"])
    del b


def test_a_tuple_of_ops_keys_its_plan_by_identity_and_a_list_by_its_names(executor):
    g = tf.Graph()
    with g.as_default():
        tf.identity(tf.constant(1.0, name="a"), name="b")
    p = on_cpu(g)
    as_tuple = tuple(g.get_operations())
    first = executor.plan_for(as_tuple, p, ["b:0"])
    assert executor.plan_for(as_tuple, p, ["b:0"]) is first
    assert executor.plan_for(tuple(as_tuple), p, ["b:0"]) is first  # equal names, same plan
    # A list may change between steps: its names are read every time, never memoised.
    ops = [g.get_operation_by_name("a")]
    only_a = executor.plan_for(ops, p, ["a:0"])
    ops.append(g.get_operation_by_name("b"))
    assert executor.plan_for(ops, p, ["a:0"]) is not only_a
    assert executor.run_step(ops, p, fetches=["b:0"]).values["b:0"] == 1.0


def test_control_dependencies_order_ops_without_data(executor, cluster):
    g = tf.Graph()
    with g.as_default():
        first = tf.constant(np.ones((300, 300), np.float32), name="first")
        slow = tf.matmul(first, first, name="slow")
        with tf.control_dependencies([slow]):
            after = tf.constant(1.0, name="after")
    result = run(executor, g, [after.name], trace=True)
    recs = {r.op: r for r in result.ops}
    assert recs["after"].start >= recs["slow"].end
    result.to_trace().validate(g, cluster)


def test_targets_run_ops_and_give_no_value(executor):
    g = tf.Graph()
    with g.as_default():
        v = tf.Variable(np.float32(5.0), name="v")
    ops = [g.get_operation_by_name(n) for n in ("v/initial_value", "v", "v/Assign")]
    r = executor.run_step(ops, on_cpu(g), targets=["v/Assign"])
    assert r.values == {}
    assert executor.variables.get("v") == 5.0


def test_feeds_replace_tensors_and_their_producers_do_not_run(executor, cluster):
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, (None, 2), name="x")
        y = tf.multiply(x, 2.0, name="y")
        z = tf.add(y, 1.0, name="z")
    feed = {"x:0": np.array([[1.0, 2.0]], np.float32)}
    r = run(executor, g, [z.name], feeds=feed, trace=True)
    np.testing.assert_array_equal(r.values[z.name], [[3.0, 5.0]])
    r.to_trace().validate(g, cluster)
    # Feeding the middle tensor: x need not be fed, y's producer does not run.
    r = run(executor, g, [z.name], feeds={"y:0": np.array([[10.0, 20.0]], np.float32)}, trace=True)
    np.testing.assert_array_equal(r.values[z.name], [[11.0, 21.0]])
    ran = {rec.op: rec for rec in r.ops}
    assert "x" not in ran and ran["y"].end == ran["y"].start  # y: the feed, zero length
    # A fetched fed tensor comes back as fed.
    r = run(executor, g, ["y:0"], feeds={"y:0": np.array([[7.0, 8.0]], np.float32)})
    np.testing.assert_array_equal(r.values["y:0"], [[7.0, 8.0]])


def test_unfed_placeholder_is_an_error(executor):
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, (2,), name="x")
        tf.identity(x, name="y")
    with pytest.raises(InvalidArgument, match="must feed a value for placeholder tensor 'x:0'"):
        run(executor, g, ["y:0"])


def test_variables_persist_and_uninitialised_use_names_the_variable(executor):
    g = tf.Graph()
    with g.as_default():
        v = tf.Variable(np.float32(1.0), name="counter")
        inc = tf.assign_add(v, 2.0, name="inc")
    ops = ops_needed([inc.op, v.value().op])
    with pytest.raises(FailedPrecondition, match="uninitialized value counter") as info:
        executor.run_step(ops_needed([v.value().op]), on_cpu(g), fetches=[v.value().name])
    assert info.value.name == "counter"
    with pytest.raises(FailedPrecondition, match="counter"):
        executor.run_step(ops, on_cpu(g), fetches=[inc.name])
    init = [g.get_operation_by_name(n) for n in ("counter/initial_value", "counter",
                                                 "counter/Assign")]
    executor.run_step(init, on_cpu(g), targets=["counter/Assign"])
    p = on_cpu(g)
    for expected in (3.0, 5.0, 7.0):
        assert executor.run_step(ops, p, fetches=[inc.name]).values[inc.name] == expected
    read = ops_needed([v.value().op])
    fetched = executor.run_step(read, p, fetches=[v.value().name, "counter:0"]).values
    assert fetched["counter:0"] == 7.0
    fetched["counter:0"][...] = 100  # a copy: the variable is not changed
    fetched[v.value().name][...] = 100  # the read forwards the buffer, but fetches copy
    assert executor.variables.get("counter") == 7.0


def test_kernel_error_names_op_and_device(executor):
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, (None, 3), name="x")
        tf.reshape(x, (2, 3), name="bad_reshape")
    with pytest.raises(OpError) as info:
        run(executor, g, ["bad_reshape:0"], feeds={"x:0": np.ones((3, 3), np.float32)})
    assert info.value.op == "bad_reshape" and info.value.device == CPU0
    assert "bad_reshape" in str(info.value) and CPU0 in str(info.value)
    assert info.value.__cause__ is not None


def _two_tasks():
    cluster = Cluster.from_spec({"worker": ["127.0.0.1:1", "127.0.0.1:2"]},
                                hosts={("worker", 0): "h", ("worker", 1): "h"})
    w0 = "/job:worker/replica:0/task:0/device:CPU:0"
    w1 = "/job:worker/replica:0/task:1/device:CPU:0"
    g = tf.Graph()
    with g.as_default():
        with tf.device(w1):
            remote = tf.constant(np.float32(5.0), name="remote")
        with tf.device(w0):
            local = tf.multiply(remote, 2.0, name="local")
            twice = tf.add(remote, local, name="twice")
        with tf.device(w1):
            back = tf.identity(local, name="back")
            back2 = tf.negative(local, name="back2")
    placement = Placement({op.name: op.device for op in g.get_operations()})
    return cluster, g, placement, w0, w1


def test_a_part_is_planned_as_ops_of_no_graph_each_with_its_kind():
    """The plan of one task's part: its sources (a fed op, another task's op), its ops
    and a sink per destination of sends are ops of no graph, each with its kind and its
    op of the user's graph beside it; the user's graph is not changed."""
    from core.graph import Operation
    from runtime.exec_plan import FED, KERNEL, REMOTE, SINK

    cluster, g, placement, w0, w1 = _two_tasks()
    before = [(op.name, [t.name for t in op.inputs]) for op in g.get_operations()]
    ex = Executor(LocalDevices.for_task(cluster, "worker", 0, SessionConfig()), VariableStore())
    mine = [op for op in g.get_operations() if placement[op.name] == w0]
    xp = ex.plan_for(mine, placement, fetches=["twice:0"], fed=["local/y:0"])
    kinds = dict(zip(xp.plan.op_names, xp.kinds))
    assert kinds == {"local/y": FED, "remote": REMOTE, "local": KERNEL, "twice": KERNEL,
                     f"^send:{w1}": SINK}
    for op, graph_op in zip(xp.plan.ops, xp.graph_ops):
        assert type(op) is Operation and op.graph is None
        want = None if kinds[op.name] == SINK else g.get_operation_by_name(op.name)
        assert graph_op is want
    sink = xp.plan.ops[xp.plan.op_index[f"^send:{w1}"]]
    assert [t.name for t in sink.inputs] == ["local:0"]  # back and back2 read it on w1
    sources = [op for op in xp.plan.ops if kinds[op.name] in (FED, REMOTE)]
    assert all(not op.inputs for op in sources)
    assert [(op.name, [t.name for t in op.inputs]) for op in g.get_operations()] == before


def test_feeding_one_output_of_an_op_another_output_of_which_is_read_is_refused(executor):
    """A fed op does not run, so its outputs that are not fed have no value: said
    before the step runs, naming the op and the tensor."""
    g = tf.Graph()
    with g.as_default():
        a, b = tf.split(tf.constant(np.arange(4, dtype=np.float32)), 2)
        y = tf.add(a, b, name="y")
    with pytest.raises(InvalidArgument, match="reads 'split:1', which is not fed"):
        run(executor, g, ["y:0"], feeds={"split:0": np.ones(2, np.float32)})
    fed = {"split:0": np.ones(2, np.float32), "split:1": np.zeros(2, np.float32)}
    np.testing.assert_array_equal(run(executor, g, ["y:0"], feeds=fed).values["y:0"], [1, 1])


def test_recv_and_send_cross_task_tensors_once_per_destination():
    cluster, g, placement, w0, w1 = _two_tasks()
    devices = LocalDevices.for_task(cluster, "worker", 0, SessionConfig())
    ex = Executor(devices, VariableStore())
    calls, sent = [], []

    def recv(name, src, dst):
        calls.append((name, src, dst))
        return np.float32(5.0)

    def send(name, value, dst):
        sent.append((name, float(value), dst))

    mine = [op for op in g.get_operations() if placement[op.name] == w0]
    try:
        r = ex.run_step(mine, placement, fetches=["twice:0"],
                        io=StepIO.from_functions(recv=recv, send=send), trace=True)
    finally:
        ex.close()
        devices.close()
    assert r.values["twice:0"] == 15.0
    assert calls == [("remote:0", w1, w0)]  # once, though two ops read it
    assert sent == [("local:0", 10.0, w1)]  # once, though two ops on w1 read it
    assert [x.tensor for x in r.transfers] == ["remote:0"]
    assert r.transfers[0].links == ("memcpy:h",)
    assert [s[:2] for s in r.sent] == [("local:0", w1)]


def test_send_final_tells_the_sends_made_once_every_op_has_run():
    cluster, _, _, w0, w1 = _two_tasks()
    g = tf.Graph()
    with g.as_default():
        with tf.device(w0):
            x = tf.constant(np.float32(3.0), name="x")
            early = tf.multiply(x, 2.0, name="early")
            last = tf.add(early, 1.0, name="last")
        with tf.device(w1):
            tf.identity(early, name="use_early")
            tf.identity(last, name="use_last")
    placement = Placement({op.name: op.device for op in g.get_operations()})
    devices = LocalDevices.for_task(cluster, "worker", 0, SessionConfig())
    ex = Executor(devices, VariableStore())
    sent = []

    def send(name, value, dst, final):
        sent.append((name, float(value), dst, final))

    mine = [op for op in g.get_operations() if placement[op.name] == w0]
    try:
        r = ex.run_step(mine, placement, fetches=["last:0"],
                        io=StepIO.from_functions(send=send, final_sends=True))
    finally:
        ex.close()
        devices.close()
    assert r.values["last:0"] == 7.0
    # `early` leaves while `last` has still to run; `last` leaves after everything ran.
    assert sent == [("early:0", 6.0, w1, False), ("last:0", 7.0, w1, True)]


def test_a_failing_recv_aborts_the_step_naming_the_op():
    cluster, g, placement, w0, w1 = _two_tasks()
    devices = LocalDevices.for_task(cluster, "worker", 0, SessionConfig())
    ex = Executor(devices, VariableStore())

    def recv(name, src, dst):
        raise ConnectionError("peer went away")

    mine = [op for op in g.get_operations() if placement[op.name] == w0]
    try:
        with pytest.raises(OpError, match="peer went away") as info:
            ex.run_step(mine, placement, fetches=["twice:0"],
                        io=StepIO.from_functions(recv=recv, send=lambda *a: None), timeout=10)
    finally:
        ex.close()
        devices.close()
    assert info.value.op == "local" and "remote:0" in str(info.value)


def test_deadline_names_the_waiting_ops():
    cluster, g, placement, w0, w1 = _two_tasks()
    devices = LocalDevices.for_task(cluster, "worker", 0, SessionConfig())
    ex = Executor(devices, VariableStore())
    release = threading.Event()

    def recv(name, src, dst):
        release.wait(10)
        return np.float32(5.0)

    mine = [op for op in g.get_operations() if placement[op.name] == w0]
    t0 = time.perf_counter()
    try:
        with pytest.raises(DeadlineExceeded) as info:
            ex.run_step(mine, placement, fetches=["twice:0"],
                        io=StepIO.from_functions(recv=recv, send=lambda *a: None), timeout=0.2)
    finally:
        release.set()
        ex.close()
        devices.close()
    assert time.perf_counter() - t0 < 5
    assert {"local", "twice"} <= set(info.value.waiting)
    assert "local" in str(info.value)


def test_parallel_ops_use_distinct_thread_slots_and_respect_cores(cluster):
    config = SessionConfig(inter_op_parallelism_threads=2, use_per_session_threads=True)
    devices = LocalDevices.for_task(cluster, "localhost", 0, config)
    ex = Executor(devices, VariableStore())
    g = tf.Graph()
    with g.as_default():
        x = tf.constant(np.ones((200, 200), np.float32), name="x")
        branches = [tf.tanh(tf.matmul(x, x), name=f"t{i}") for i in range(6)]
        total = branches[0]
        for b in branches[1:]:
            total = total + b
    try:
        r = ex.run_step(g.get_operations(), on_cpu(g), fetches=[total.name], trace=True)
    finally:
        ex.close()
        devices.close()
    trace = r.to_trace()
    trace.validate(g, devices.effective_cluster())
    assert {rec.thread for rec in trace.ops} <= {0, 1}
    matmuls = [rec for rec in trace.ops if rec.type == "MatMul"]
    assert all(1 <= rec.cores <= 2 for rec in matmuls)
    np.testing.assert_allclose(r.values[total.name], 6 * np.tanh(np.full((200, 200), 200.0)))


def test_an_op_on_a_device_of_another_task_is_refused(executor):
    g = tf.Graph()
    with g.as_default():
        tf.constant(1.0, name="a")
    p = Placement({"a": "/job:other/replica:0/task:0/device:CPU:0"})
    with pytest.raises(InvalidArgument, match="not a device of this task"):
        executor.run_step(g.get_operations(), p, fetches=["a:0"])


def test_gpu_ops_need_cuda():
    from runtime.kernels import cuda_available
    if cuda_available():
        pytest.skip("this process can run CUDA kernels")
    cluster = Cluster.single_host(gpus=1)
    devices = LocalDevices.for_task(cluster, "localhost", 0, SessionConfig())
    ex = Executor(devices, VariableStore())
    g = tf.Graph()
    with g.as_default():
        tf.constant(1.0, name="a")
    gpu = "/job:localhost/replica:0/task:0/device:GPU:0"
    with pytest.raises(InvalidArgument, match="cannot run CUDA kernels"):
        ex.run_step(g.get_operations(), Placement({"a": gpu}), fetches=["a:0"])
    devices.close()


def test_pools_are_shared_unless_per_session(cluster):
    shared = [LocalDevices.for_task(cluster, "localhost", 0, SessionConfig()) for _ in range(2)]
    assert shared[0][CPU0].pool is shared[1][CPU0].pool
    private = LocalDevices.for_task(cluster, "localhost", 0,
                                    SessionConfig(use_per_session_threads=True))
    assert private[CPU0].pool is not shared[0][CPU0].pool
    other_size = LocalDevices.for_task(cluster, "localhost", 0,
                                       SessionConfig(inter_op_parallelism_threads=3))
    assert other_size[CPU0].pool.threads == 3
    private.close()
    assert private[CPU0].pool.closed and not shared[0][CPU0].pool.closed


def test_inter_op_pool_runs_items_with_slots():
    pool = InterOpPool("test", 2)
    seen, done = [], threading.Semaphore(0)

    def item(slot, arg):
        seen.append((slot, arg))
        done.release()

    for k in range(4):
        pool.submit(item, k)
    for _ in range(4):
        assert done.acquire(timeout=5)
    pool.close()
    assert sorted(a for _, a in seen) == [0, 1, 2, 3] and {s for s, _ in seen} <= {0, 1}


def test_a_variable_of_another_shape_left_by_another_graph_is_refused(executor):
    """Variables outlive graphs in a worker's store; as TensorFlow, reusing a name with
    another shape is an error naming it, not a silent broadcast."""
    first, second = tf.Graph(), tf.Graph()
    with first.as_default():
        v = tf.Variable(np.zeros(4, np.float32), name="v")
    with second.as_default():
        w = tf.Variable(np.zeros(3, np.float32), name="v")
    init = ops_needed([v.initializer])
    executor.run_step(init, on_cpu(first), targets=[v.initializer.name])
    reinit = ops_needed([w.initializer])
    with pytest.raises(InvalidArgument) as info:
        executor.run_step(reinit, on_cpu(second), targets=[w.initializer.name])
    assert "Trying to share variable v" in str(info.value) and "(3,)" in str(info.value)


def test_small_ops_run_inline_without_sharing_a_thread_slot(cluster):
    # Cheap ops run on the caller's (or a recv's) thread in a free pool slot: two ops
    # never hold one slot at once, and never more than the pool's threads run at once.
    config = SessionConfig(inter_op_parallelism_threads=2, use_per_session_threads=True)
    devices = LocalDevices.for_task(cluster, "localhost", 0, config)
    ex = Executor(devices, VariableStore())
    g = tf.Graph()
    with g.as_default():
        x = tf.constant(np.ones(16, np.float32), name="x")
        heads = [tf.negative(x, name=f"n{i}") for i in range(12)]
        total = heads[0]
        for h in heads[1:]:
            total = total + tf.tanh(h)
    try:
        for _ in range(20):
            r = ex.run_step(g.get_operations(), on_cpu(g), fetches=[total.name], trace=True)
            trace = r.to_trace()
            trace.validate(g, devices.effective_cluster())
            assert {rec.thread for rec in trace.ops} <= {0, 1}
    finally:
        ex.close()
        devices.close()
    np.testing.assert_allclose(r.values[total.name], -1 + 11 * np.tanh(-1.0), rtol=1e-6)


def test_recv_async_delivers_from_another_thread_and_errors_name_the_op():
    cluster, g, placement, w0, w1 = _two_tasks()
    devices = LocalDevices.for_task(cluster, "worker", 0, SessionConfig())
    ex = Executor(devices, VariableStore())
    mine = [op for op in g.get_operations() if placement[op.name] == w0]

    def later(name, src, dst, callback):
        threading.Timer(0.05, callback, (np.float32(5.0), None)).start()
        return None

    def failing(name, src, dst, callback):
        threading.Timer(0.05, callback, (None, ConnectionError("peer went away"))).start()
        return None

    try:
        r = ex.run_step(mine, placement, fetches=["twice:0"],
                        io=StepIO.from_functions(recv_async=later, send=lambda *a: None),
                        timeout=10, trace=True)
        assert r.values["twice:0"] == 15.0
        assert [x.tensor for x in r.transfers] == ["remote:0"]
        r = ex.run_step(mine, placement, fetches=["twice:0"],
                        io=StepIO.from_functions(recv_async=lambda *a: np.float32(5.0),
                                                 send=lambda *a: None), timeout=10)
        assert r.values["twice:0"] == 15.0
        with pytest.raises(OpError, match="peer went away") as info:
            ex.run_step(mine, placement, fetches=["twice:0"],
                        io=StepIO.from_functions(recv_async=failing, send=lambda *a: None),
                        timeout=10)
        assert info.value.op == "local"
    finally:
        ex.close()
        devices.close()


def test_a_control_edge_from_another_task_waits_by_recv_async_not_in_a_thread():
    """A control edge from another task is awaited as a tensor is: the thread that
    delivers its message goes on with the step (no recv-pool thread blocks per edge);
    a failed wait names the op that waited."""
    cluster, _, _, w0, w1 = _two_tasks()
    g = tf.Graph()
    with g.as_default():
        with tf.device(w1):
            gate = tf.no_op(name="gate")
        with tf.device(w0):
            x = tf.constant(np.float32(2.0), name="x")
            with tf.control_dependencies([gate]):
                after = tf.negative(x, name="after")
    placement = Placement({op.name: op.device for op in g.get_operations()})
    mine = [op for op in g.get_operations() if placement[op.name] == w0]
    devices = LocalDevices.for_task(cluster, "worker", 0, SessionConfig())
    ex = Executor(devices, VariableStore())
    asked, delivered_on = [], []

    def later(name, src, dst, callback):
        asked.append((name, src))

        def deliver():
            delivered_on.append(threading.current_thread().name)
            callback(np.zeros(0, np.float32), None)
        threading.Timer(0.05, deliver).start()
        return None

    def no_blocking_recv(*args):
        raise AssertionError("a control edge waited in a recv-pool thread")

    def failing(name, src, dst, callback):
        threading.Timer(0.05, callback, (None, ConnectionError("peer went away"))).start()
        return None

    try:
        r = ex.run_step(mine, placement, fetches=["after:0"],
                        io=StepIO.from_functions(recv=no_blocking_recv, recv_async=later,
                                                 send=lambda *a: None), timeout=10)
        assert r.values["after:0"] == -2.0
        assert asked == [("^gate", w1)] and len(delivered_on) == 1
        r = ex.run_step(mine, placement, fetches=["after:0"],
                        io=StepIO.from_functions(
                            recv=no_blocking_recv, recv_async=lambda *a: np.zeros(0, np.float32),
                            send=lambda *a: None), timeout=10)  # already here: no callback needed
        assert r.values["after:0"] == -2.0
        with pytest.raises(OpError, match="peer went away") as info:
            ex.run_step(mine, placement, fetches=["after:0"],
                        io=StepIO.from_functions(recv=no_blocking_recv, recv_async=failing,
                                                 send=lambda *a: None), timeout=10)
        assert info.value.op == "after"
    finally:
        ex.close()
        devices.close()


def test_on_abort_stops_a_running_step_between_ops(executor):
    g = tf.Graph()
    with g.as_default():
        h = tf.constant(np.eye(512, dtype=np.float32), name="m")
        for _ in range(3000):  # seconds of matmuls
            h = tf.matmul(h, h)
    err = OpError("elsewhere", "", "another part failed")
    started = []

    def on_abort(abort):
        started.append(time.perf_counter())
        threading.Timer(0.1, abort, (err,)).start()

    with pytest.raises(OpError, match="another part failed"):
        run(executor, g, [h.name], io=StepIO.from_functions(watch=on_abort), timeout=60)
    assert time.perf_counter() - started[0] < 2.0


def test_host_cores_make_a_taker_wait_until_cores_are_given_back():
    from runtime.local_devices import HostCores

    cores = HostCores("h", 2)
    assert cores.take(2) == 2 and cores.free == 0
    got = []
    waiter = threading.Thread(target=lambda: got.append(cores.take(2)))
    waiter.start()
    time.sleep(0.05)
    assert not got  # no core free: it waits
    cores.give(1)
    waiter.join(timeout=5)
    assert got == [1] and cores.free == 0  # as many as are free, at least one
    cores.give(2)
    assert cores.free == 2



def test_a_one_core_cluster_does_not_leave_later_sessions_one_core():
    # The calibration measures its dispatch on a one-core cluster; the registry of host
    # cores once kept that count for every later session of the process, whose two
    # inter-op threads then ran their kernels one at a time.
    from runtime.config import SessionConfig
    from runtime.local_devices import LocalDevices

    config = SessionConfig(use_per_session_threads=True)
    one = LocalDevices.for_task(Cluster.single_host(cpu_cores=1), "localhost", 0, config)
    two = LocalDevices.for_task(Cluster.single_host(cpu_cores=2), "localhost", 0, config)
    try:
        cpu = "/job:localhost/replica:0/task:0/cpu:0"
        assert one[cpu].cores.cores == 1
        assert two[cpu].cores.cores == 2 and two[cpu].cores.free == 2
    finally:
        one.close()
        two.close()

def _matmul_relu_graph(extra_reader: bool = False):
    """``relu(x @ w)`` on 128x96 float32 (not cheap), optionally with a second reader
    of the product."""
    rng = np.random.default_rng(3)
    x_val = rng.standard_normal((128, 64)).astype(np.float32)
    w_val = rng.standard_normal((64, 96)).astype(np.float32)
    g = tf.Graph()
    with g.as_default():
        p = tf.matmul(tf.constant(x_val, name="x"), tf.constant(w_val, name="w"), name="mm")
        r = tf.relu(p, name="relu")
        other = tf.negative(p, name="neg") if extra_reader else None
    return g, p, r, other, x_val @ w_val


def _fused(ex) -> list[str]:
    """Names of the Relu ops folded into their MatMul in the executor's cached plans."""
    return [n.name for xp in ex._plans.values() for n in xp.nodes if n.fused]


def test_a_relu_is_folded_into_the_matmul_that_only_it_reads(executor, cluster):
    g, p, r, _, product = _matmul_relu_graph()
    result = run(executor, g, [r.name], trace=True)
    assert _fused(executor) == ["relu"]
    np.testing.assert_allclose(result.values[r.name], np.maximum(product, 0), rtol=1e-5,
                               atol=1e-4)
    trace = result.to_trace()
    trace.validate(g, cluster)
    assert {x.op for x in trace.ops} >= {"mm", "relu"}  # both keep their records
    records = {x.op: x for x in trace.ops}
    # The Relu ends with its MatMul, taking no time (and no core).
    assert records["relu"].start == records["relu"].end == records["mm"].end
    assert records["relu"].cores == 0
    # The graph's own attrs are untouched (another plan, or a copy, must not fuse).
    assert "_fused_relu" not in g.get_operation_by_name("mm").attrs


@pytest.mark.parametrize("why", ["fetched", "second reader"])
def test_a_matmul_whose_product_is_used_elsewhere_keeps_its_relu(executor, why):
    g, p, r, other, product = _matmul_relu_graph(extra_reader=why == "second reader")
    fetches = [r.name, p.name] if why == "fetched" else [r.name, other.name]
    values = run(executor, g, fetches).values
    assert _fused(executor) == []
    np.testing.assert_allclose(values[r.name], np.maximum(product, 0), rtol=1e-5, atol=1e-4)
    if why == "fetched":  # the product itself, negatives and all
        np.testing.assert_allclose(values[p.name], product, rtol=1e-5, atol=1e-4)
        assert (values[p.name] < 0).any()
    else:
        np.testing.assert_allclose(values[other.name], -product, rtol=1e-5, atol=1e-4)


def test_a_failed_step_keeps_no_buffer_offered_for_a_fetch(executor):
    """The offered buffer is the caller's (the master's shared memory): once a step that
    wrote into it failed, nothing of the executor's may keep it alive (a pool thread
    idling with the step's last op, the step's values)."""
    import gc
    import weakref

    g, p, r, _, _ = _matmul_relu_graph()
    with g.as_default():
        fed = tf.placeholder(tf.float32, (None, 3), name="fed")
        with tf.control_dependencies([r]):  # fails once the product is in the buffer
            tf.reshape(fed, (2, 3), name="bad_reshape")
    offered = np.full((128, 96), 7.0, np.float32)
    alive = weakref.ref(offered)
    fetch_into = {r.name: offered}
    del offered
    with pytest.raises(OpError, match="bad_reshape"):
        run(executor, g, [r.name, "bad_reshape:0"], fetch_into=fetch_into,
            feeds={"fed:0": np.ones((3, 3), np.float32)})
    assert (fetch_into[r.name] != 7.0).any()  # the MatMul had written it
    del fetch_into
    gc.collect()
    assert alive() is None


@pytest.mark.parametrize("fetch", ["relu", "mm", "x"])
def test_a_fetched_tensor_is_written_into_the_buffer_offered_for_it(executor, fetch):
    """``fetch_into``: the kernel that makes a fetched tensor writes it into the buffer
    offered (for a folded Relu, its MatMul); a constant's value is no kernel's product,
    so its buffer is left alone."""
    g, p, r, _, product = _matmul_relu_graph()
    name = {"relu": r.name, "mm": p.name, "x": "x:0"}[fetch]
    shape = (128, 64) if fetch == "x" else (128, 96)
    offered = np.full(shape, 7.0, np.float32)
    for _ in range(2):  # the plan is cached: the second step offers through it again
        value = run(executor, g, [name], fetch_into={name: offered}).values[name]
        if fetch == "x":
            assert value is not offered and (offered == 7).all()
            continue
        assert value is offered
        expected = np.maximum(product, 0) if fetch == "relu" else product
        np.testing.assert_allclose(value, expected, rtol=1e-5, atol=1e-4)
        offered[...] = 7.0
    # Without an offer the value is a new array, as always.
    assert run(executor, g, [name]).values[name] is not offered


def test_a_kernel_takes_the_intra_op_pool_only_when_it_may_split(executor, cluster):
    """A multithreaded op too small to split runs on one core and leaves the other to
    the other inter-op thread; a product large enough to split takes the pool
    (OpDef.splits, as the simulator decides)."""
    assert cluster.devices[0].intra_op_threads == 2
    rng = np.random.default_rng(5)
    g = tf.Graph()
    with g.as_default():
        small = tf.constant(rng.standard_normal((128, 128)).astype(np.float32), name="small")
        big = tf.constant(rng.standard_normal((256, 256)).astype(np.float32), name="big")
        mul = tf.multiply(small, small, name="mul")  # 16k elements: serial
        with tf.control_dependencies([mul]):  # (after it: nothing holds a core then)
            tf.matmul(big, big, name="mm")  # 256^3 multiply-adds: splits its rows
    result = run(executor, g, ["mul:0", "mm:0"], trace=True)
    records = {x.op: x for x in result.to_trace().ops}
    assert records["mul"].cores == 1
    assert records["mm"].cores == 2


def test_a_product_takes_one_core_where_the_process_fixed_its_blas_at_one_thread(cluster):
    """``OPENBLAS_NUM_THREADS=1`` (the experiments' ``--blas-threads 1``): a float
    product is one gemm call on one core whatever its size, so the executor gives it one
    core and leaves the other to the other inter-op thread."""
    from unittest import mock

    from runtime.kernels import cpu
    g = tf.Graph()
    with g.as_default():
        big = tf.constant(np.ones((256, 256), np.float32), name="big")
        tf.matmul(big, big, name="mm")
    for split, cores in ((True, 2), (False, 1)):
        devices = LocalDevices.for_task(cluster, "localhost", 0, SessionConfig())
        ex = Executor(devices, VariableStore())
        try:
            with mock.patch.object(cpu, "products_split", return_value=split):
                records = {x.op: x for x in run(ex, g, ["mm:0"], trace=True).to_trace().ops}
        finally:
            ex.close()
            devices.close()
        assert records["mm"].cores == cores
