"""Trace: summary figures, JSON, pandas, Chrome trace, Gantt chart, invariants."""

from __future__ import annotations

import json

import pytest

import core as tf
from core.cluster import Cluster
from core.trace import InvalidTrace, MemoryRecord, OOMEvent, OpRecord, Trace, TransferRecord

CLUSTER = Cluster.from_spec({"worker": ["a:1", "b:1"]}, cpu_cores=2)
W0 = "/job:worker/replica:0/task:0/device:CPU:0"
W1 = "/job:worker/replica:0/task:1/device:CPU:0"


def graph():
    g = tf.Graph()
    with g.as_default():
        a = tf.constant(1.0, name="a")
        tf.identity(a, name="b")
    return g


def good_trace():
    return Trace(
        ops=[OpRecord("a", "Const", W0, 0, 0.0, 1.0), OpRecord("b", "Identity", W1, 0, 2.5, 3.0)],
        transfers=[TransferRecord("a:0", W0, W1, ("network:host0", "network:host1"), 4, 1.0, 2.0)],
        memory=[MemoryRecord(W0, 0.0, 4), MemoryRecord(W1, 1.0, 4), MemoryRecord(W0, 2.0, 0)],
        capacity={W0: 100, W1: 100}, fetch_end={"b": 3.0})


def test_summary_figures():
    t = good_trace()
    assert t.step_time == 3.0
    assert t.busy_time == {W0: 1.0, W1: 0.5}
    assert t.bytes_per_link == {"network:host0": 4, "network:host1": 4}
    assert t.peak_memory == {W0: 4, W1: 4}
    assert t.task_end == {"/job:worker/replica:0/task:0": 1.0, "/job:worker/replica:0/task:1": 3.0}
    assert t.summary()["fetch_end"] == {"b": 3.0}


def test_json_round_trip(tmp_path):
    t = good_trace()
    t.oom_events.append(OOMEvent(1.0, W1, "a", "a:0", 4, 0, 2))
    assert Trace.from_dict(json.loads(json.dumps(t.to_dict()))) == t
    t.save(tmp_path / "t.json")
    assert Trace.load(tmp_path / "t.json") == t
    with pytest.raises(ValueError, match="format"):
        Trace.from_dict({"ops": []})


def test_frames():
    f = good_trace().to_frame()
    assert f.ops.op.tolist() == ["a", "b"]
    assert list(f.transfers.columns) == list(TransferRecord._fields)
    assert len(f.memory) == 3 and len(f.oom_events) == 0


def test_chrome_trace_has_a_track_per_thread_and_link(tmp_path):
    doc = good_trace().to_chrome_trace(tmp_path / "c.json")
    assert json.loads((tmp_path / "c.json").read_text()) == doc
    ops = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] == "op"]
    assert [(e["name"], e["ts"], e["dur"]) for e in ops] == [("a", 0.0, 1e6), ("b", 2.5e6, 0.5e6)]
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert {"network:host0", "network:host1", "inter-op thread 0"} <= names


def test_plot(tmp_path):
    pytest.importorskip("matplotlib")
    ax = good_trace().plot(tmp_path / "g.png")
    assert (tmp_path / "g.png").stat().st_size > 0
    assert ax.get_xlabel() == "time (us)"
    # The op bars in microseconds: a from 0 to 1 s, b from 2.5 to 3 s.
    bars = sorted((p.get_x(), p.get_width()) for p in ax.patches if p.get_facecolor() != (
        0.5019607843137255, 0.5019607843137255, 0.5019607843137255, 1.0))
    assert bars[:2] == [pytest.approx((0.0, 1e6)), pytest.approx((2.5e6, 0.5e6))]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "transfer" in legend and len(legend) == len(set(legend)) >= 2


def test_plot_leaves_the_callers_matplotlib_state_alone():
    """No pyplot: the backend the caller chose and its current figures stay as they were."""
    import matplotlib
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    before = matplotlib.get_backend()
    figures = plt.get_fignums()
    good_trace().plot()
    assert matplotlib.get_backend() == before
    assert plt.get_fignums() == figures


def test_a_good_trace_validates():
    good_trace().validate(graph(), CLUSTER)


@pytest.mark.parametrize("change, message", [
    (lambda t: t.ops.__setitem__(1, t.ops[1]._replace(start=1.5)), "before 'a:0' arrived"),
    (lambda t: t.transfers.clear(), "with no transfer"),
    (lambda t: t.transfers.append(t.transfers[0]), "twice"),
    (lambda t: t.ops.__setitem__(1, t.ops[1]._replace(device=W0, start=0.5)),
     "before its input"),
    (lambda t: t.memory.append(MemoryRecord(W1, 2.0, 200)), "no out-of-memory event"),
    (lambda t: t.ops.__setitem__(1, t.ops[1]._replace(thread=5)), "inter-op threads"),
])
def test_broken_invariants_are_reported(change, message):
    t = good_trace()
    change(t)
    with pytest.raises(InvalidTrace, match=message):
        t.validate(graph(), CLUSTER)


def test_thread_and_core_oversubscription():
    g = tf.Graph()
    with g.as_default():
        for i in range(3):
            tf.constant(1.0, name=f"c{i}")
    t = Trace(ops=[OpRecord(f"c{i}", "Const", W0, i % 2, 0.0, 1.0) for i in range(3)])
    with pytest.raises(InvalidTrace) as e:
        t.validate(g, CLUSTER)
    text = str(e.value)
    assert "ran 3 ops at once" in text and "holding 3 cores" in text and "thread 0 ran 2" in text


def test_a_real_runs_processes_share_a_hosts_cores_by_time_slices():
    """Three tasks of one 2-core host each run a one-core op at once: the simulator may
    not, but server processes may (the OS time-slices them); one process may not."""
    spec = {"ps": ["h:1"], "worker": ["h:2", "h:3"]}
    hosts = {("ps", 0): "h", ("worker", 0): "h", ("worker", 1): "h"}
    cluster = Cluster.from_spec(spec, hosts=hosts, cpu_cores=2)
    g = tf.Graph()
    with g.as_default():
        for i in range(3):
            tf.constant(1.0, name=f"c{i}")
    cpus = [d.name for d in cluster.devices]
    ops = [OpRecord(f"c{i}", "Const", cpus[i], 0, 0.0, 1.0) for i in range(3)]
    with pytest.raises(InvalidTrace, match="host h had CPU ops holding 3 cores"):
        Trace(ops=list(ops)).validate(g, cluster)
    Trace(ops=list(ops), meta={"backend": "runtime"}).validate(g, cluster)
    cluster = Cluster.from_spec(spec, hosts=hosts, cpu_cores=2, cpu_inter_op_threads=3)
    one_task = [r._replace(device=cpus[0], thread=i) for i, r in enumerate(ops)]
    with pytest.raises(InvalidTrace, match="task /job:ps/task:0 on host h had CPU ops holding 3"):
        Trace(ops=one_task, meta={"backend": "runtime"}).validate(g, cluster)


def test_an_oom_event_excuses_going_over():
    t = good_trace()
    t.memory.append(MemoryRecord(W1, 2.0, 200))
    t.oom_events.append(OOMEvent(2.0, W1, "b", None, 196, 4, 100))
    t.validate(graph(), CLUSTER)


def test_a_lazy_trace_makes_its_records_once_and_behaves_as_a_plain_one():
    import copy
    import pickle

    plain = good_trace()
    calls = []

    def maker(key):
        def make():
            calls.append(key)
            return list(getattr(plain, key))
        return make

    lazy = Trace.lazy({key: maker(key) for key in ("ops", "transfers", "memory")},
                      oom_events=list(plain.oom_events), capacity=dict(plain.capacity),
                      fetch_end=dict(plain.fetch_end), meta=dict(plain.meta))
    assert calls == []
    assert lazy.step_time == plain.step_time and calls == ["ops", "transfers"]
    assert lazy == plain and sorted(calls) == ["memory", "ops", "transfers"]
    assert pickle.loads(pickle.dumps(lazy)) == plain
    assert copy.deepcopy(lazy) == plain and Trace.from_dict(lazy.to_dict()) == plain
    assert len(calls) == 3  # each list made once
    with pytest.raises(AttributeError):
        lazy.no_such_field
