"""RuntimeModel.serial_dispatch: each task's Python dispatcher serves one op (and one end
of a transfer) at a time, as the runtime's executor does under its interpreter's GIL."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import core as tf
from core.runtime_model import RuntimeModel
from core.cluster import Cluster, ClusterSpec
from core.placement import Placement
from sim import SimConfig, simulate
from strategies import FixedCost

SPEC = ClusterSpec({"worker": ["127.0.0.1:0", "127.0.0.1:0"]})
HOSTS = {("worker", 0): "h", ("worker", 1): "h"}
W0, W1 = "/job:worker/replica:0/task:0/device:CPU:0", "/job:worker/replica:0/task:1/device:CPU:0"
SERIAL = SimConfig(runtime=RuntimeModel(serial_dispatch=True))


def cluster(overhead=1e-3, latency=0.0, kernel_costs=()):
    c = Cluster.from_spec(SPEC, hosts=HOSTS, cpu_cores=4, cpu_inter_op_threads=2)
    for d in c.devices:
        c = c.replace_device(d.name, op_overhead=overhead, kernel_costs=kernel_costs)
    return c.replace_link("memcpy:h", latency=latency, bandwidth=1e12)


def independent(devices):
    g = tf.Graph()
    with g.as_default():
        for i, dev in enumerate(devices):
            with tf.device(dev):
                tf.constant(np.float32(i), name=f"c{i}")
    return g, Placement({f"c{i}": dev for i, dev in enumerate(devices)})


def crossing(value):
    """``a`` (the constant ``value``) on W0, consumed by ``b`` on W1: one crossing."""
    g = tf.Graph()
    with g.as_default():
        with tf.device(W0):
            a = tf.constant(value, name="a")
        with tf.device(W1):
            tf.identity(a, name="b")
    return g, Placement({"a": W0, "b": W1})


def ends(trace):
    return sorted(round(r.end, 9) for r in trace.ops)


def test_ops_of_one_task_take_turns_at_the_dispatcher():
    g, p = independent([W0, W0])
    costs = FixedCost(default=5e-3)  # each op: 1 ms of dispatch within its 5 ms
    assert ends(simulate(g, p, cluster(), cost_model=costs)) == [5e-3, 5e-3]
    assert ends(simulate(g, p, cluster(), cost_model=costs, config=SERIAL)) == [5e-3, 6e-3]


def test_ops_of_two_tasks_do_not():
    g, p = independent([W0, W1])
    trace = simulate(g, p, cluster(), cost_model=FixedCost(default=5e-3), config=SERIAL)
    assert ends(trace) == [5e-3, 5e-3]


def test_the_kernel_types_fixed_cost_is_served_by_the_dispatcher_too():
    g, p = independent([W0, W0])
    c = cluster(kernel_costs={"Const": (2e-3, 1.0)})
    trace = simulate(g, p, c, cost_model=FixedCost(default=5e-3), config=SERIAL)
    assert ends(trace) == [5e-3, 8e-3]  # the second waits for 1 + 2 ms


def test_both_ends_of_a_transfer_hold_their_dispatchers():
    # a (W0) -> b (W1) crosses: 2 ms of latency, the whole crossing, 1 ms of it each
    # end's work: W0's dispatcher sends it from 1 to 2 ms (the link's own time is
    # nil here), W1's takes it in from its arrival if free, and b is ready once it
    # did.  Here W1's dispatcher is busy to 2.5 ms with ``late``'s kernel call (its Neg
    # kernel's fixed cost, 2.5 ms): it takes the tensor in from 2.5 to 3.5 ms, and b
    # (1 ms) ends at 4.5 ms, not at 4 as with W1 idle or without serial dispatch.
    g = tf.Graph()
    with g.as_default():
        with tf.device(W0):
            a = tf.constant(np.float32(1.0), name="a")
        with tf.device(W1):
            tf.negative(tf.constant(np.float32(2.0), name="x"), name="late")
            tf.identity(a, name="b")
    p = Placement({op.name: op.device for op in g.get_operations()})
    costs = FixedCost({"a": 1e-3, "x": 0.0, "late": 2.5e-3, "b": 1e-3})
    c = cluster(overhead=0.0, latency=2e-3, kernel_costs={"Neg": (2.5e-3, 1.0)})
    plain = {r.op: r for r in simulate(g, p, c, cost_model=costs).ops}
    serial = {r.op: r for r in simulate(g, p, c, cost_model=costs, config=SERIAL).ops}
    assert plain["b"].end == pytest.approx(4e-3)
    assert serial["b"].end == pytest.approx(4.5e-3)  # behind the receive
    # Nothing else on W1: the crossing takes its latency, as calibrated.
    quiet = costs.times | {"late": 0.0}
    alone = {r.op: r for r in simulate(g, p, c, cost_model=FixedCost(quiet), config=SERIAL).ops}
    assert alone["b"].end == pytest.approx(4e-3)


@pytest.mark.parametrize("config", [None, SERIAL], ids=["plain", "serial"])
def test_a_crossing_takes_the_links_measured_time_for_its_size(config):
    # A [1024] float32 tensor (4 KiB) crosses a link measured at 1 ms for 4 bytes and
    # 3 ms for 8 KiB: 2 ms at 4 KiB (straight between), not latency + bytes/bandwidth.
    g, p = crossing(np.ones(1024, np.float32))
    c = cluster(overhead=0.0, latency=1e-3).replace_link(
        "memcpy:h", size_costs=((4, 1e-3), (8192, 3e-3)))
    trace = simulate(g, p, c, cost_model=FixedCost(default=0.0), config=config)
    assert trace.step_time == pytest.approx(1e-3 + (3e-3 - 1e-3) * (4096 - 4) / (8192 - 4))
    if config is not None:  # the ends' dispatchers take the latency, the link the rest
        (x,) = trace.transfers
        assert x.end - x.start == pytest.approx(trace.step_time - 1e-3)


@pytest.mark.parametrize("cores, step", [(2, 3e-3), (4, 2e-3)])
def test_dispatchers_of_more_tasks_than_cores_take_turns(cores, step):
    # Three tasks on one host each send a tensor to the next (2 ms of latency: 1 ms on
    # each end's dispatcher; ops free).  Without dispatch_cores the three sends run at
    # once, then the three receives: 2 ms.  With two cores for three interpreters, one
    # send waits for a core, and so does a receive behind it: 3 ms; four cores: 2 ms.
    spec = ClusterSpec({"worker": ["127.0.0.1:0"] * 3})
    c = Cluster.from_spec(spec, hosts={("worker", i): "h" for i in range(3)},
                          cpu_cores=cores, cpu_inter_op_threads=1)
    for d in c.devices:
        c = c.replace_device(d.name, op_overhead=0.0)
    c = c.replace_link("memcpy:h", latency=2e-3, bandwidth=1e12)
    devs = [f"/job:worker/replica:0/task:{i}/device:CPU:0" for i in range(3)]
    g = tf.Graph()
    with g.as_default():
        for i in range(3):
            with tf.device(devs[i]):
                a = tf.constant(np.float32(i), name=f"a{i}")
            with tf.device(devs[(i + 1) % 3]):
                tf.identity(a, name=f"b{i}")
    p = Placement({op.name: op.device for op in g.get_operations()})
    costs = FixedCost(default=0.0)
    assert simulate(g, p, c, cost_model=costs, config=SERIAL).step_time == pytest.approx(2e-3)
    booked = SimConfig(runtime=RuntimeModel(serial_dispatch=True, dispatch_cores=True))
    assert simulate(g, p, c, cost_model=costs, config=booked).step_time == pytest.approx(step)


# -- RuntimeModel.inline_elements: the thread that ended an op goes on with what it readied --

INLINE = SimConfig(runtime=RuntimeModel(serial_dispatch=True, inline_elements=16))


def two_core_task():
    c = Cluster.from_spec(SPEC, hosts=HOSTS, cpu_cores=2, cpu_inter_op_threads=2,
                          cpu_intra_op_threads=2)
    for d in c.devices:
        c = c.replace_device(d.name, op_overhead=0.0, intra_op_speedup=2.0)
    return c


def test_cheap_ops_ready_at_the_start_run_one_after_another_on_one_thread():
    g, p = independent([W0, W0])  # two scalar constants: cheap
    costs = FixedCost(default=1e-3)
    c = cluster(overhead=0.0)
    assert ends(simulate(g, p, c, cost_model=costs, config=SERIAL)) == [1e-3, 1e-3]
    trace = simulate(g, p, c, cost_model=costs, config=INLINE)
    assert ends(trace) == [1e-3, 2e-3]
    assert {r.thread for r in trace.ops} == {0}


def test_the_thread_that_ends_an_op_takes_its_cores_for_the_next_before_waiting_ops():
    # x readies a and c (large multithreaded Adds, not cheap): the thread that ran x goes
    # on with a, holding both cores; c waits for cores.  When a ends, b (readied by a)
    # takes them again on that thread before c, which waited longer.
    g = tf.Graph()
    with g.as_default(), tf.device(W0):
        x = tf.constant(np.ones(64, np.float32), name="x")
        a = tf.add(x, x, name="a")
        tf.add(a, a, name="b")
        tf.add(x, x, name="c")
    p = Placement({op.name: W0 for op in g.get_operations()})
    costs = FixedCost(default=1e-3)
    end = {r.op: round(r.end, 9) for r in
           simulate(g, p, two_core_task(), cost_model=costs, config=SERIAL).ops}
    assert end == {"x": 1e-3, "a": 2e-3, "c": 3e-3, "b": 4e-3}  # first come, first served
    trace = simulate(g, p, two_core_task(), cost_model=costs, config=INLINE)
    trace.validate(g, two_core_task())
    end = {r.op: round(r.end, 9) for r in trace.ops}
    assert end == {"x": 1e-3, "a": 2e-3, "b": 3e-3, "c": 4e-3}
    thread = {r.op: r.thread for r in trace.ops}
    assert thread["x"] == thread["a"] == thread["b"] != thread["c"]


def test_ops_of_another_task_still_take_the_cores_left_free():
    # W0: k readies x (multithreaded: both cores) on its thread, and k crosses to W1 in
    # 0.5 ms, where y then waits for a core.  When x ends, a (single-threaded) goes on
    # on W0's thread with one core, and y, of another process, takes the other at once.
    g = tf.Graph()
    with g.as_default():
        with tf.device(W0):
            k = tf.constant(np.float32(1.0), name="k")
            tf.identity(tf.add(k, k, name="x"), name="a")
        with tf.device(W1):
            tf.identity(k, name="y")
    p = Placement({op.name: op.device for op in g.get_operations()})
    c = two_core_task().replace_link("memcpy:h", latency=0.5e-3, bandwidth=1e12)
    trace = simulate(g, p, c, cost_model=FixedCost({"k": 0.0}, default=1e-3), config=INLINE)
    trace.validate(g, c)
    start = {r.op: round(r.start, 9) for r in trace.ops}
    assert start == {"k": 0.0, "x": 0.0, "a": 1e-3, "y": 1e-3}



def test_the_callers_thread_runs_the_first_cheap_ops_and_queues_the_big_ones_they_ready():
    # v and s are cheap and ready at the start; v's read (it hands the variable's buffer
    # on: cheap whatever its size) readies b1, a big op, whose successor b2 is big too.
    # The step's caller runs only cheap ops (the executor's _run_ready): b1 goes to the
    # pool's other thread, and s and t follow on at once, not after the chain of b's.
    g = tf.Graph()
    with g.as_default(), tf.device(W0):
        v = tf.Variable(np.zeros(64, np.float32), name="v")
        b1 = tf.add(v, v, name="b1")
        tf.add(b1, b1, name="b2")
        tf.identity(tf.constant(np.float32(1.0), name="s"), name="t")
    step = [op for op in g.get_operations() if op.type != "Assign"]
    p = Placement({op.name: W0 for op in step})
    costs = FixedCost({"b1": 1e-3, "b2": 1e-3}, default=1e-4)
    trace = simulate(g, p, cluster(overhead=0.0), cost_model=costs, config=INLINE,
                     fetches=["b2", "t"])
    start = {r.op: round(r.start, 9) for r in trace.ops}
    thread = {r.op: r.thread for r in trace.ops}
    assert start["t"] < start["b1"] + 1e-3  # t does not wait for the chain of b's
    assert thread["v"] == thread["v/read"] == thread["s"] == thread["t"] != thread["b1"]


def _chain_beside_a_big_op(length: int, wakeup: float):
    """The trace of r -> a chain of ``length`` cheap Identity ops (c0, c1, ...), and
    r -> f (big: 64 elements) -> big, all on W0's two threads: every op's 0.1 ms is
    dispatcher work (op_overhead), f's kernel then runs 0.9 ms; each task's lock is
    handed on ``wakeup`` late."""
    g = tf.Graph()
    with g.as_default(), tf.device(W0):
        r = tf.constant(np.float32(1.0), name="r")
        x = r
        for i in range(length):
            x = tf.identity(x, name=f"c{i}")
        tf.add(tf.fill([64], r, name="f"), 1.0, name="big")
    p = Placement({op.name: W0 for op in g.get_operations()})
    c = cluster(overhead=1e-4)
    for task in c.tasks:
        c = c.replace_task(task.job, task.index, lock_wakeup=wakeup)
    trace = simulate(g, p, c, cost_model=FixedCost({"f": 1e-3}, default=1e-4), config=INLINE)
    trace.validate(g, c)
    return trace


@pytest.mark.parametrize("wakeup", [0.0, 5e-5])
def test_a_thread_back_for_the_lock_waits_until_the_holder_leaves_it_long_enough(wakeup):
    # r readies c0 (cheap: on the caller's thread, with the chain c1..c4 and big/y) and
    # f (big: the other thread).  f asks for the dispatcher while c0 holds it.  First
    # come, first served (no lock_wakeup), f gets it next, at 0.2 ms.  With a wake-up
    # of 50 us the chain's thread takes the lock back each time before f's thread is
    # awake, so f gets it 50 us after the chain's thread has nothing left (0.7 ms).
    end = {r.op: round(r.end, 9) for r in _chain_beside_a_big_op(5, wakeup).ops}
    if wakeup:
        assert [end[f"c{i}"] for i in range(5)] == [2e-4, 3e-4, 4e-4, 5e-4, 6e-4]
        assert end["f"] == round(7e-4 + wakeup + 1e-3, 9)
    else:
        assert end["f"] == 1.2e-3 and end["c1"] == 4e-4  # c1 waited for f's dispatch


def test_a_thread_waits_for_the_lock_at_most_a_switch_interval():
    # Two threads of chains of dispatcher work only: with a wake-up longer than any
    # gap, the second gets the lock when it waited the interpreter's switch interval.
    from sim.handlers import SWITCH_INTERVAL
    trace = _chain_beside_a_big_op(80, 1e-4)
    start = {r.op: r.start for r in trace.ops}
    end = {r.op: r.end for r in trace.ops}
    # f asked at 0.1 ms; it took the lock after the switch interval, within one op.
    assert SWITCH_INTERVAL + 1e-4 <= end["f"] - 9e-4 <= SWITCH_INTERVAL + 3e-4
    assert end["f"] < end["c79"]
    assert start["f"] == pytest.approx(1e-4)


def test_inline_elements_is_checked():
    with pytest.raises(ValueError, match="inline_elements"):
        RuntimeModel(serial_dispatch=True, inline_elements=-1)


def test_a_dispatcher_waits_for_a_core_its_hosts_kernels_hold():
    # Host h has one core; W2's kernel k holds it from 0 to 5 ms.  a crosses from W0 (on
    # host g) to W1 (on h): 2 ms of latency, 1 ms on each end's dispatcher.  W1's
    # dispatcher would take a in from 1 to 2 ms, but its interpreter needs a core and k
    # holds the only one: with dispatch_cores it takes a in from 5 to 6 ms, and b (1 ms)
    # ends at 7.  Without, it takes a in at once, b waits for k's core only: 6 ms.
    spec = ClusterSpec({"worker": ["127.0.0.1:0"] * 3})
    c = Cluster.from_spec(spec, hosts={("worker", 0): "g", ("worker", 1): "h", ("worker", 2): "h"},
                          cpu_cores=1, cpu_inter_op_threads=1)
    for d in c.devices:
        c = c.replace_device(d.name, op_overhead=0.0)
    c = c.replace_link("network:g", latency=2e-3, bandwidth=1e12)
    c = c.replace_link("network:h", latency=0.0, bandwidth=1e12)
    w2 = "/job:worker/replica:0/task:2/device:CPU:0"
    g = tf.Graph()
    with g.as_default():
        with tf.device(W0):
            a = tf.constant(np.float32(1.0), name="a")
        with tf.device(w2):
            tf.negative(tf.constant(np.float32(2.0), name="x"), name="k")
        with tf.device(W1):
            tf.identity(a, name="b")
    p = Placement({op.name: op.device for op in g.get_operations()})
    costs = FixedCost({"a": 0.0, "x": 0.0, "k": 5e-3, "b": 1e-3})
    booked = SimConfig(runtime=RuntimeModel(serial_dispatch=True, dispatch_cores=True))
    assert simulate(g, p, c, cost_model=costs, config=SERIAL).step_time == pytest.approx(6e-3)
    assert simulate(g, p, c, cost_model=costs, config=booked).step_time == pytest.approx(7e-3)


# -- RuntimeModel.copies_on_cores and step_costs_on_cores: the host's cores do that work too --

def four_tasks_on_one_host(cores):
    spec = ClusterSpec({"worker": ["127.0.0.1:0"] * 4})
    c = Cluster.from_spec(spec, hosts={("worker", i): "h" for i in range(4)},
                          cpu_cores=cores, cpu_inter_op_threads=1)
    for d in c.devices:
        c = c.replace_device(d.name, op_overhead=0.0)
    return c


@pytest.mark.parametrize("cores, step", [(2, 3e-3), (1, 6e-3)])
def test_with_copies_on_cores_crossings_of_one_host_contend_for_its_cores_not_its_link(cores, step):
    # W0 -> W1 and W2 -> W3, each a 4 KiB tensor: 1 ms of latency and 2 ms of bytes on
    # the memcpy link.  Without copies_on_cores the sends (0.5 ms each) run at once,
    # then the link carries one tensor's bytes after the other (to 2.5 and 4.5 ms) and
    # the receives end at 3 and 5 ms (one core or two).  With it, each crossing is 3 ms of its two ends'
    # work, 1.5 ms each, on the host's cores: with two cores both crossings run side by
    # side (3 ms), with one core all four halves take turns (6 ms).
    c = four_tasks_on_one_host(cores).replace_link("memcpy:h", latency=1e-3,
                                                   bandwidth=4096 / 2e-3)
    devs = [f"/job:worker/replica:0/task:{i}/device:CPU:0" for i in range(4)]
    g = tf.Graph()
    with g.as_default():
        for i in (0, 2):
            with tf.device(devs[i]):
                a = tf.constant(np.ones(1024, np.float32), name=f"a{i}")
            with tf.device(devs[i + 1]):
                tf.identity(a, name=f"b{i}")
    p = Placement({op.name: op.device for op in g.get_operations()})
    costs = FixedCost(default=0.0)
    booked = SimConfig(runtime=RuntimeModel(serial_dispatch=True, dispatch_cores=True))
    assert simulate(g, p, c, cost_model=costs, config=booked).step_time == pytest.approx(5e-3)
    copying = SimConfig(runtime=replace(booked.runtime, copies_on_cores=True))
    trace = simulate(g, p, c, cost_model=costs, config=copying)
    assert trace.step_time == pytest.approx(step)
    assert all(x.end == x.start for x in trace.transfers)  # no time on the link itself


def test_copies_on_cores_leaves_a_crossing_alone_as_long_as_before():
    g, p = crossing(np.ones(1024, np.float32))  # 1 ms of latency, 2 ms of bytes
    c = cluster(overhead=0.0, latency=1e-3).replace_link("memcpy:h", bandwidth=4096 / 2e-3)
    steps = [simulate(g, p, c, cost_model=FixedCost(default=0.0),
                      config=SimConfig(runtime=replace(SERIAL.runtime, copies_on_cores=on))).step_time for on in (False, True)]
    assert steps == pytest.approx([3e-3, 3e-3])


@pytest.mark.parametrize("cores, step", [(1, 5e-3), (2, 3e-3)])
def test_with_step_costs_on_cores_the_calls_of_a_step_need_cores(cores, step):
    # Master W0 (step overhead 1 ms) calls W1 and W2 (1 ms each): the parts start at
    # 2 (W1) and 3 ms (W2, W0); a free op on each task.  That is the step without
    # step_costs_on_cores.  With it the master's dispatcher works from 0 to 3 ms and
    # W1's and W2's take their calls over [1, 2] and [2, 3] ms: on two cores beside the
    # master's (3 ms); on one core after it, one after the other (5 ms).
    c = four_tasks_on_one_host(cores)
    c = Cluster(c.hosts, [replace(t, step_overhead=1e-3, part_overhead=1e-3) for t in c.tasks],
                c.devices, c.links.values(), master=("worker", 0), nvlink=c.nvlink)
    g, p = independent([f"/job:worker/replica:0/task:{i}/device:CPU:0" for i in range(3)])
    costs = FixedCost(default=0.0)
    booked = SimConfig(runtime=RuntimeModel(serial_dispatch=True, dispatch_cores=True))
    assert simulate(g, p, c, cost_model=costs, config=booked).step_time == pytest.approx(3e-3)
    trace = simulate(g, p, c, cost_model=costs, config=SimConfig(runtime=replace(booked.runtime, step_costs_on_cores=True)))
    assert trace.step_time == pytest.approx(step)


def test_the_trace_says_how_much_host_cpu_each_task_was_booked():
    # W0: a (5 ms: 1 ms of dispatch, then 4 ms of kernel on one core), sent to W1 over
    # 2 ms of latency (1 ms of each end's work); W1: b (5 ms).  Each task: 5 + 1 ms.
    g, p = crossing(np.float32(1.0))
    trace = simulate(g, p, cluster(latency=2e-3), cost_model=FixedCost(default=5e-3),
                     config=SERIAL)
    booked = trace.meta["cpu_booked"]
    assert booked == pytest.approx({"/job:worker/replica:0/task:0": 6e-3,
                                    "/job:worker/replica:0/task:1": 6e-3})
    assert "cpu_booked" not in simulate(g, p, cluster(latency=2e-3),
                                        cost_model=FixedCost(default=5e-3)).meta


def test_a_multithreaded_kernel_too_small_to_split_leaves_the_other_core_free():
    # x readies a and c, multithreaded Adds on 64 elements.  Where the device's kernels
    # split only from parallel_min_elements (a calibrated CPU), each takes one core
    # (OpDef.splits, as the executor decides), and the two run at once on its two
    # inter-op threads; where every size may split (0), each holds both cores in turn.
    g = tf.Graph()
    with g.as_default(), tf.device(W0):
        x = tf.constant(np.ones(64, np.float32), name="x")
        tf.add(x, x, name="a")
        tf.add(x, x, name="c")
    p = Placement({op.name: W0 for op in g.get_operations()})
    costs = FixedCost(default=1e-3)

    def run(min_elements):
        c = two_core_task()
        c = c.replace_device(W0, parallel_min_elements=min_elements)
        trace = simulate(g, p, c, cost_model=costs)
        trace.validate(g, c)
        return {r.op: (round(r.end, 9), r.cores) for r in trace.ops}

    assert run(1 << 21) == {"x": (1e-3, 1), "a": (2e-3, 1), "c": (2e-3, 1)}
    assert run(0) == {"x": (1e-3, 1), "a": (2e-3, 2), "c": (3e-3, 2)}


def test_a_product_takes_one_core_on_a_device_whose_products_do_not_split():
    # Two 256^3 products ready at once: where products split (the default) each holds
    # both cores in turn; on a device calibrated in a process that fixed its BLAS at one
    # thread (products_split False) each takes one core and they run at once.
    g = tf.Graph()
    with g.as_default(), tf.device(W0):
        x = tf.constant(np.ones((256, 256), np.float32), name="x")
        tf.matmul(x, x, name="a")
        tf.matmul(x, x, name="c")
    p = Placement({op.name: W0 for op in g.get_operations()})

    def run(split):
        c = two_core_task().replace_device(W0, parallel_min_elements=1 << 21,
                                           products_split=split)
        trace = simulate(g, p, c, cost_model=FixedCost(default=1e-3))
        trace.validate(g, c)
        return {r.op: (round(r.end, 9), r.cores) for r in trace.ops}

    assert run(True) == {"x": (1e-3, 1), "a": (2e-3, 2), "c": (3e-3, 2)}
    assert run(False) == {"x": (1e-3, 1), "a": (2e-3, 1), "c": (2e-3, 1)}


def test_cores_the_next_op_leaves_free_go_to_its_own_task_s_waiting_ops():
    # x readies a and c, Adds large enough to split (both cores each).  a runs first;
    # c waits for cores on the other thread.  When a ends, its thread goes on with b
    # (a slice of a: one core) and the core b leaves free goes to c at once, though
    # of the same task: c's dispatch waits for the interpreter lock anyway, which the
    # thread running b gives up for b's kernel.
    n = 1 << 21
    g = tf.Graph()
    with g.as_default(), tf.device(W0):
        x = tf.constant(np.ones(n, np.float32), name="x")
        a = tf.add(x, x, name="a")
        tf.slice(a, [0], [n // 2], name="b")
        tf.add(x, x, name="c")
    p = Placement({op.name: W0 for op in g.get_operations()})
    costs = FixedCost({"b": 5e-3}, default=1e-3)
    c = two_core_task().replace_device(W0, parallel_min_elements=n)
    trace = simulate(g, p, c, cost_model=costs, config=INLINE)
    trace.validate(g, c)
    run = {r.op: (round(r.start, 9), round(r.end, 9), r.cores) for r in trace.ops}
    assert run["a"] == (1e-3, 2e-3, 2)
    assert run["b"][0] == 2e-3 and run["b"][2] == 1
    assert run["c"][0] == 2e-3 and run["c"][2] == 1  # not after b, at 7 ms


# -- Link.cpu_costs: crossings of one host in a burst hold their ends for their CPU part --------

COPYING = SimConfig(runtime=RuntimeModel(serial_dispatch=True, copies_on_cores=True))


def fan(k, control=False):
    """``k`` scalars made on W0, each read on W1 (or, ``control``, each op on W1 waiting
    for one on W0 by a control edge): ``k`` crossings at once."""
    g = tf.Graph()
    with g.as_default():
        for i in range(k):
            with tf.device(W0):
                a = tf.constant(np.float32(i), name=f"a{i}")
            with tf.device(W1):
                if control:
                    with tf.control_dependencies([a]):
                        tf.constant(np.float32(i), name=f"b{i}")
                else:
                    tf.identity(a, name=f"b{i}")
    return g, Placement({op.name: op.device for op in g.get_operations()})


def measured_cpu(cpu=0.4e-3):
    """1 ms per crossing; ``cpu`` of CPU per crossing in a burst, half each end
    (Link.cpu_costs)."""
    return cluster(overhead=0.0, latency=1e-3).replace_link("memcpy:h",
                                                            cpu_costs=[(0, cpu / 2, cpu / 2)])


@pytest.mark.parametrize("control", [False, True])
def test_crossings_in_a_burst_hold_their_ends_for_their_cpu_part(control):
    # Four crossings from W0 to W1, 1 ms each.  Without cpu_costs each is its ends' work
    # for its whole time, 0.5 ms on each dispatcher: W0 sends at 0.5, 1, 1.5, 2 ms and
    # W1 takes the last in at 2.5 ms.  With 0.4 ms of CPU in a burst, W0 sends each in
    # 0.2 ms (at 0.2, 0.4, 0.6, 0.8 ms); W1 takes the first in for the rest of its
    # time, 0.8 ms (its reader wakes), to 1.0 ms, and the others, which come while it
    # still takes one in, 0.2 ms each: to 1.2, 1.4, 1.6 ms.  (b2's own dispatch waits
    # for the last take-in, booked before it: it starts at 1.6 ms.)
    g, p = fan(4, control)
    costs = FixedCost(default=0.0)
    whole = simulate(g, p, measured_cpu().replace_link("memcpy:h", cpu_costs=()),
                     cost_model=costs, config=COPYING)
    trace = simulate(g, p, measured_cpu(), cost_model=costs, config=COPYING)
    trace.validate(g, measured_cpu())
    assert whole.step_time == pytest.approx(2.5e-3)
    assert trace.step_time == pytest.approx(1.6e-3)
    starts = sorted(round(r.start, 9) for r in trace.ops if r.op.startswith("b"))
    assert starts == pytest.approx([1.0e-3, 1.2e-3, 1.6e-3, 1.6e-3])
    if not control:  # each on the link once sent, for no time (the cores copy)
        assert sorted(round(x.start, 9) for x in trace.transfers) == pytest.approx(
            [0.2e-3, 0.4e-3, 0.6e-3, 0.8e-3])
        assert all(x.end == x.start for x in trace.transfers)


def test_crossings_that_come_alone_cost_their_ends_their_whole_time():
    # W0 -> W1 -> W0, one crossing after the other: each 1 ms whatever its CPU part,
    # the sender's 0.2 ms and the receiver's 0.8 ms (0.5 and 0.5 without cpu_costs):
    # each task's dispatchers work 1 ms either way.
    g = tf.Graph()
    with g.as_default():
        with tf.device(W0):
            a = tf.constant(np.float32(1.0), name="a")
        with tf.device(W1):
            b = tf.identity(a, name="b")
        with tf.device(W0):
            tf.identity(b, name="c")
    p = Placement({op.name: op.device for op in g.get_operations()})
    for c in (measured_cpu(), measured_cpu().replace_link("memcpy:h", cpu_costs=())):
        trace = simulate(g, p, c, cost_model=FixedCost(default=0.0), config=COPYING)
        assert trace.step_time == pytest.approx(2e-3)
        assert sorted(trace.meta["cpu_booked"].values()) == pytest.approx([1e-3, 1e-3])


def test_a_crossing_alone_takes_its_time_whatever_its_cpu_part():
    g, p = fan(1)
    steps = [simulate(g, p, measured_cpu(cpu), cost_model=FixedCost(default=0.0),
                      config=COPYING).step_time for cpu in (0.0, 0.4e-3, 1e-3, 5e-3)]
    assert steps == pytest.approx([1e-3] * 4)


def test_cpu_costs_matter_only_to_a_runtime_whose_ends_copy():
    # The ideal runtime and a serial one without copies_on_cores price a crossing as
    # before: cpu_costs describe the work of the ends that copy.
    g, p = fan(4)
    for config in (SimConfig(), SERIAL):
        traces = [simulate(g, p, c, cost_model=FixedCost(default=0.0), config=config)
                  for c in (measured_cpu(), measured_cpu().replace_link("memcpy:h", cpu_costs=()))]
        assert traces[0].ops == traces[1].ops and traces[0].transfers == traces[1].transfers


def test_a_crossing_after_other_work_of_its_receiver_comes_alone():
    # Two crossings from W0 to W1 (sent at 0.2 and 0.4 ms); W1 takes the first in over
    # [0.2, 1.0] ms.  An op d on W1, ready at 0.3 ms, books W1's dispatcher next, over
    # [1.0, 1.1] ms (its kernel's fixed cost is all dispatch): the second crossing, though
    # it arrived while the first was taken in, then comes after other work (the reader
    # does not go straight on to it) and costs W1 the rest of its time, 0.8 ms, to
    # 1.9 ms, when its reader b1 starts (in a burst it would at 1.3 ms).
    g = tf.Graph()
    with g.as_default():
        for i in range(2):
            with tf.device(W0):
                a = tf.constant(np.float32(i), name=f"a{i}")
            with tf.device(W1):
                tf.identity(a, name=f"b{i}")
        with tf.device(W1):
            tf.square(tf.constant(np.float32(2.0), name="c"), name="d")
    p = Placement({op.name: op.device for op in g.get_operations()})
    c = measured_cpu().replace_device(W1, kernel_costs={"Square": (1e-4, 1.0)})
    costs = FixedCost({"c": 0.3e-3, "d": 1e-4}, default=0.0)
    trace = simulate(g, p, c, cost_model=costs, config=COPYING)
    start = {r.op: round(r.start, 9) for r in trace.ops}
    end = {r.op: round(r.end, 9) for r in trace.ops}
    assert end["d"] == pytest.approx(1.1e-3) and start["b1"] == pytest.approx(1.9e-3)


def test_crossings_that_find_their_receiver_busy_start_no_burst():
    # An op d on W1 holds its dispatcher over [0, 0.5] ms (its kernel's fixed cost is
    # all dispatch).  Two crossings from W0 arrive at 0.2 and 0.4 ms: the first waits
    # for d and takes the rest of its time, 0.8 ms, to 1.3 ms; the second, though it
    # comes straight after, belongs to no burst (the receiver was busy when the first
    # came: its reader wins the lock from the executor for each tensor) and takes
    # 0.8 ms too, to 2.1 ms, when its reader b1 starts (in a burst: 1.5 ms).
    g = tf.Graph()
    with g.as_default():
        with tf.device(W1):
            tf.square(tf.constant(np.float32(2.0), name="c"), name="d")
        for i in range(2):
            with tf.device(W0):
                a = tf.constant(np.float32(i), name=f"a{i}")
            with tf.device(W1):
                tf.identity(a, name=f"b{i}")
    p = Placement({op.name: op.device for op in g.get_operations()})
    c = measured_cpu().replace_device(W1, kernel_costs={"Square": (5e-4, 1.0)})
    costs = FixedCost({"d": 5e-4}, default=0.0)
    trace = simulate(g, p, c, cost_model=costs, config=COPYING)
    start = {r.op: round(r.start, 9) for r in trace.ops}
    assert start["b0"] == pytest.approx(1.3e-3) and start["b1"] == pytest.approx(2.1e-3)


def test_a_variable_and_its_forwarded_read_hold_no_core():
    # The executor serves a variable and a read that hands its buffer on itself, with no
    # kernel: they take no core.  "p", a product that splits (both cores, 4 ms), runs
    # from the start; the variable's read still runs at once, and "c", the cheap op
    # after it on the same thread, waits for a core until p ends.
    g = tf.Graph()
    with g.as_default(), tf.device(W0):
        x = tf.constant(np.ones((256, 256), np.float32), name="x")
        p_ = tf.matmul(x, x, name="p")
        v = tf.Variable(np.ones(4, np.float32), name="v")
        c_ = tf.identity(v.read_value() if hasattr(v, "read_value") else v, name="c")
    fetches = [p_.name, c_.name]
    p = Placement({op.name: W0 for op in g.get_operations()})
    costs = FixedCost({"p": 4e-3}, default=1e-3)
    c = two_core_task().replace_device(W0, parallel_min_elements=1 << 21)
    trace = simulate(g, p, c, cost_model=costs, config=INLINE, fetches=fetches)
    trace.validate(g, c)
    run = {r.op: (round(r.start, 9), round(r.end, 9), r.cores) for r in trace.ops}
    assert run["p"][2] == 2
    assert run["v"][2] == 0 and run["v/read"][2] == 0
    assert run["v/read"][1] < run["p"][1]
    assert run["c"][0] == run["p"][1] and run["c"][2] == 1
