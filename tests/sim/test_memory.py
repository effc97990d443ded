"""Device memory: allocation at start, release after the last reader, OOM."""

from __future__ import annotations

import numpy as np
import pytest

import core as tf
from core.cluster import Cluster
from core.placement import Placement
from sim import OutOfMemory, SimConfig, simulate

from hypothesis import given, settings

from strategies import FixedCost, place_all, placed_graphs

KB = 1024  # a (16, 16) float32 tensor


def chain_graph():
    g = tf.Graph()
    with g.as_default():
        x = tf.constant(np.ones((16, 16), np.float32), name="a")
        x = tf.negative(x, name="b")
        tf.negative(x, name="c")
    return g


def test_a_forwarded_output_allocates_nothing_and_keeps_its_input_alive():
    g = tf.Graph()
    with g.as_default():
        a = tf.constant(np.ones((16, 16), np.float32), name="a")
        b = tf.reshape(tf.identity(a, name="i"), [256], name="b")  # both forward a's buffer
        tf.negative(b, name="c")
    cluster = Cluster.single_host(gpus=1)
    gpu = cluster.devices[1].name
    trace = simulate(g, place_all(g, gpu), cluster, cost_model=FixedCost())
    # a at 0; i and b (1, 2) take nothing; c allocates at 3; a is let go of with b, at 4.
    assert trace.memory_timeline(gpu) == [(0.0, KB), (3.0, 2 * KB), (4.0, KB), (4.0, 0)]
    trace.validate(g, cluster)
    # Across devices the forwarding op reads a received copy, which it forwards.
    cpu = cluster.devices[0].name
    split = simulate(g, Placement({"a": cpu, "i": gpu, "b": gpu, "c": gpu}), cluster,
                     cost_model=FixedCost())
    assert max(use for _, use in split.memory_timeline(gpu)) == 2 * KB


def test_a_variables_read_does_not_count_its_weights_twice():
    g = tf.Graph()
    with g.as_default():
        w = tf.Variable(np.ones((16, 16), np.float32), name="w")
        tf.matmul(w, w, name="y")  # through w's read, an Identity
    cluster = Cluster.single_host()
    cpu = cluster.devices[0].name
    trace = simulate(g, place_all(g, cpu), cluster, fetches="y", cost_model=FixedCost())
    assert trace.peak_memory == {cpu: 2 * KB}  # w and y, not a third copy for the read


def test_outputs_live_from_start_to_their_last_reader():
    g = chain_graph()
    cluster = Cluster.single_host(gpus=1)
    gpu = cluster.devices[1].name
    trace = simulate(g, place_all(g, gpu), cluster, cost_model=FixedCost())
    # a: alloc at 0; b: alloc at 1 (2 KB), a freed at 2; c: alloc at 2, b freed, c freed at 3.
    assert trace.memory_timeline(gpu) == [(0.0, KB), (1.0, 2 * KB), (2.0, KB), (2.0, 2 * KB),
                                          (3.0, KB), (3.0, 0)]
    assert trace.peak_memory == {gpu: 2 * KB}


def test_a_fetched_tensor_is_held_to_the_end():
    g = chain_graph()
    cluster = Cluster.single_host()
    cpu = cluster.devices[0].name
    trace = simulate(g, place_all(g, cpu), cluster, fetches="c:0", cost_model=FixedCost())
    assert trace.memory_timeline(cpu)[-1] == (3.0, KB)


def test_variables_are_resident_from_the_start():
    g = tf.Graph()
    with g.as_default():
        v = tf.Variable(np.ones((16, 16), np.float32), name="v")
        tf.assign_sub(v, np.ones((16, 16), np.float32), name="upd")
    cluster = Cluster.single_host()
    cpu = cluster.devices[0].name
    trace = simulate(g, place_all(g, cpu), cluster, fetches="upd", cost_model=FixedCost())
    assert trace.memory_timeline(cpu)[0] == (0.0, KB)  # before any op ran
    assert max(b for _, b in trace.memory_timeline(cpu)) == 2 * KB  # v + the update value


def test_out_of_memory_names_op_device_and_sizes():
    g = chain_graph()
    cluster = Cluster.single_host(gpus=1, gpu_memory_bytes=int(1.5 * KB))
    gpu = cluster.devices[1].name
    with pytest.raises(OutOfMemory, match="'b'") as e:
        simulate(g, place_all(g, gpu), cluster, cost_model=FixedCost())
    err = e.value
    assert (err.op, err.device, err.requested, err.capacity, err.in_use, err.time) == \
        ("b", gpu, KB, int(1.5 * KB), KB, 1.0)
    assert [ev.op for ev in err.trace.oom_events] == ["b"]


def test_record_oom_goes_on_and_the_trace_still_validates():
    g = chain_graph()
    cluster = Cluster.single_host(gpus=1, gpu_memory_bytes=int(1.5 * KB))
    gpu = cluster.devices[1].name
    trace = simulate(g, place_all(g, gpu), cluster, cost_model=FixedCost(),
                     config=SimConfig(record_oom=True))
    assert [(ev.op, ev.time) for ev in trace.oom_events] == [("b", 1.0), ("c", 2.0)]
    assert trace.step_time == 3.0
    trace.validate(g, cluster)


def test_per_process_gpu_memory_fraction_caps_the_gpu():
    g = chain_graph()
    cluster = Cluster.single_host(gpus=1, gpu_memory_bytes=5 * KB)
    gpu = cluster.devices[1].name
    simulate(g, place_all(g, gpu), cluster, cost_model=FixedCost())
    with pytest.raises(OutOfMemory) as e:
        simulate(g, place_all(g, gpu), cluster, cost_model=FixedCost(),
                 config=SimConfig(per_process_gpu_memory_fraction=0.3))
    assert e.value.capacity == int(5 * KB * 0.3)


def test_a_received_tensor_occupies_the_destination():
    g = chain_graph()
    cluster = Cluster.single_host(gpus=1)
    cpu, gpu = (d.name for d in cluster.devices)
    trace = simulate(g, Placement({"a": cpu, "b": gpu, "c": gpu}), cluster, cost_model=FixedCost())
    (x,) = trace.transfers
    assert trace.memory_timeline(gpu)[0] == (x.start, KB)
    assert trace.memory_timeline(cpu) == [(0.0, KB), (x.end, 0)]  # freed when sent


@settings(max_examples=60)
@given(placed_graphs())
def test_memory_records_agree_with_the_bytes_the_run_counts(placed):
    """On roomy devices the records are worked out after the run from the order of
    events; on tiny ones (OOM recorded, the step goes on) the run also counts bytes in
    use to check each allocation.  The records are the same, each over-capacity
    allocation's count matches its record, and every device ends empty (no variables,
    nothing fetched)."""
    g, cluster, placement = placed
    roomy = simulate(g, placement, cluster)
    tiny = cluster
    for device in cluster.devices:
        tiny = tiny.replace_device(device.name, memory_bytes=1)
    tight = simulate(g, placement, tiny, config=SimConfig(record_oom=True))
    assert tight.memory == roomy.memory
    records = set(roomy.memory)
    assert tight.oom_events
    for e in tight.oom_events:
        assert (e.device, e.time, e.in_use + e.requested) in records
    last = {r.device: r.bytes for r in roomy.memory}
    assert all(r.bytes >= 0 for r in roomy.memory) and set(last.values()) == {0}
