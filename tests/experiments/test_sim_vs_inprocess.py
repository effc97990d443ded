"""The in-process accuracy benchmark: its rows, its spreads, its random graphs."""

from __future__ import annotations

import pytest

from experiments import sim_vs_inprocess as bench


def test_a_quick_run_reports_error_beside_both_spreads():
    frame, calibrations = bench.run(["mixed_random:seed=1:elements=4096"], repeats=2,
                                    quick=True, progress=False)
    assert list(frame.columns) == bench.COLUMNS and len(calibrations) == 2
    row = frame.iloc[0]
    assert row.predicted_ms > 0 and row.measured_ms > 0 and row.remeasured_ms > 0
    assert row.rel_error == pytest.approx((row.predicted_ms - row.measured_ms) / row.measured_ms)
    assert row.repeat_spread >= 0 and row.calibration_spread >= 0
    summary = bench.summarise(frame)
    assert summary.worst[0] == "mixed_random:seed=1:elements=4096"


def test_without_takes_out_one_mechanism():
    from core.cluster import Cluster
    cluster = Cluster.single_host(cpu_cores=2)
    cpu = cluster.devices[0].name
    cluster = (cluster.replace_device(cpu, bandwidth_curve=[(1 << 20, 5e10)])
               .replace_host("host0", shared_bandwidth=[(1 << 20, 9e10)]))
    assert bench.without(cluster, None) is cluster
    shared = bench.without(cluster, "shared")
    assert shared.hosts[0].shared_bandwidth == () and shared.devices[0].bandwidth_curve
    assert bench.without(cluster, "curve").devices[0].bandwidth_curve == ()
    woken = cluster.replace_task("localhost", 0, lock_wakeup=1e-5)
    unlocked = bench.without(woken, "lock")
    assert unlocked.tasks[0].lock_wakeup == 0.0 and unlocked.hosts == woken.hosts


def test_the_sessions_and_the_prediction_take_the_inter_op_threads_given():
    from core.cluster import Cluster
    cluster = Cluster.single_host(cpu_cores=2)
    assert bench.with_inter_op_threads(cluster, 0) is cluster
    assert [d.inter_op_threads for d in bench.with_inter_op_threads(cluster, 1).devices
            if d.is_cpu] == [1]
    frame, calibrations = bench.run(["mixed_random:seed=1:elements=4096"], repeats=2,
                                    quick=True, inter_op_threads=1, progress=False)
    assert frame.iloc[0].measured_ms > 0 and frame.iloc[0].predicted_ms > 0

def test_a_negative_thread_count_is_refused_before_any_run_is_recorded(tmp_path):
    with pytest.raises(SystemExit):
        bench.main(["--inter-op-threads", "-1", "--workloads", "mlp", "--out", str(tmp_path)])
    assert not list(tmp_path.iterdir())


def test_the_sessions_take_turns(monkeypatch):
    import runtime
    from experiments.backends import in_process_steps
    from experiments.sim_vs_real import build_workload
    order = []
    run = runtime.Session.run

    def recording(self, fetches, *args, **kwargs):
        order.append(self)
        return run(self, fetches, *args, **kwargs)
    monkeypatch.setattr(runtime.Session, "run", recording)
    a = build_workload("mixed_random:seed=1:elements=256")
    b = build_workload("mixed_random:seed=2:elements=256")
    results = in_process_steps([a, b], 7, turns=3, warmup=1)
    assert len(results) == 2 and all(seconds > 0 for _, seconds in results)
    first, second = order[0], order[1]  # (the two initialisers)
    runs = [s is first for s in order[2:]]
    # turns of 3, 2 and 2 timed steps, each after 1 warm-up, A's then B's
    assert runs == [True] * 4 + [False] * 4 + [True] * 3 + [False] * 3 + [True] * 3 + [False] * 3
    assert second is not first


def test_more_turns_than_steps_is_refused(tmp_path):
    from experiments.backends import in_process_steps
    with pytest.raises(ValueError, match="turns"):
        in_process_steps([], 2, turns=3)
    with pytest.raises(SystemExit):
        bench.main(["--turns", "40", "--workloads", "mlp", "--out", str(tmp_path)])
    assert not list(tmp_path.iterdir())
