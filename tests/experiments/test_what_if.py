"""experiments.what_if: edits of a calibrated cluster's figures."""

import pytest

from core.cluster import Cluster
from experiments.backends import this_host_cluster
from experiments.what_if import Change, apply_changes, figures_of, parse_change


def test_a_change_is_read_as_set_or_scale():
    assert parse_change("cpu.op_overhead=2e-6") == Change("cpu", "op_overhead", 2e-6)
    assert parse_change(" task.lock_wakeup *= 0.5 ") == Change("task", "lock_wakeup", 0.5,
                                                               scale=True)
    assert str(parse_change("link.latency*=2")) == "link.latency*=2"


@pytest.mark.parametrize("text, message", [
    ("op_overhead=1", "KIND.FIELD=VALUE"),
    ("cpu.op_overhead+=1", "KIND.FIELD=VALUE"),
    ("disk.op_overhead=1", "unknown kind 'disk'"),
    ("cpu.name=1", "no numeric figure 'name'"),
    ("cpu.index=1", "no numeric figure 'index'"),
    ("cpu.kernel_costs=1", "no numeric figure 'kernel_costs'"),
    ("cpu.op_overhead=fast", "'fast' is not a number"),
    ("cpu.op_overhead=-1e-6", "not negative"),
    ("cpu.op_overhead*=nan", "not negative"),
    ("cpu.op_overhead=inf", "finite"),
])
def test_a_bad_change_says_what_is_wrong(text, message):
    with pytest.raises(ValueError, match=message):
        parse_change(text)


def test_the_figures_of_each_kind_are_its_numeric_fields():
    assert "op_overhead" in figures_of("gpu") and "peak_flops" in figures_of("cpu")
    assert figures_of("task") == ["step_overhead", "part_overhead", "lock_wakeup"]
    assert "cpu_cores" in figures_of("host") and "latency" in figures_of("link")


def test_changes_reach_every_record_of_their_kind_and_no_other():
    cluster = this_host_cluster(2)
    cpus = [d for d in cluster.devices if d.is_cpu]
    assert len(cpus) == 3 and len(cluster.tasks) == 3
    edited = apply_changes(cluster, [parse_change("cpu.op_overhead*=0.5"),
                                     parse_change("task.step_overhead=1e-3"),
                                     parse_change("cpu.inter_op_threads*=1.6"),
                                     parse_change("link.latency*=2")])
    for old, new in zip(cluster.devices, edited.devices):
        assert new.op_overhead == pytest.approx(old.op_overhead * 0.5)
        # an integer figure stays one: 2 threads * 1.6 is 3
        assert new.inter_op_threads == round(old.inter_op_threads * 1.6)
        assert isinstance(new.inter_op_threads, int)
        assert new.peak_flops == old.peak_flops
    assert {t.step_overhead for t in edited.tasks} == {1e-3}
    for name, link in cluster.links.items():
        assert edited.links[name].latency == pytest.approx(2 * link.latency)
    # the original is untouched, and a kind the cluster lacks changes nothing
    assert [d.op_overhead for d in cluster.devices] == [d.op_overhead for d in cpus]
    assert apply_changes(cluster, [parse_change("gpu.op_overhead=1")]).to_dict() == \
        cluster.to_dict()


def test_an_edit_the_cluster_rejects_raises():
    cluster = Cluster.single_host()
    with pytest.raises(Exception, match="inter_op_threads"):
        apply_changes(cluster, [parse_change("cpu.inter_op_threads=0")])
