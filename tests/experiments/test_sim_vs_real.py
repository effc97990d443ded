"""sim_vs_real runs end to end (quick) and writes its CSV; the summary figures."""

from __future__ import annotations

import pandas as pd
import pytest

from experiments import sim_vs_real


def test_quick_run_writes_the_table(tmp_path, capsys):
    frame = sim_vs_real.main(["--calibrate", "quick", "--repeats", "3", "--no-loop",
                              "--workloads", "mlp", "--placers", "simple", "round_robin_vars",
                              "--out", str(tmp_path)])
    folder = frame.attrs["run_folder"]
    saved = pd.read_csv(folder / "sim_vs_real.csv")
    assert list(saved.columns) == sim_vs_real.COLUMNS
    assert len(saved) == len(frame) == 4  # 2 placements x 2 cost models
    assert (saved.predicted_ms > 0).all() and (saved.measured_ms > 0).all()
    assert (saved.after_other_ms > 0).all()  # each turn's first step, timed too
    assert set(saved.cost_model) == {"static", "measured(simple)"}
    assert saved.replay.sum() == 1
    out = capsys.readouterr().out
    assert "calibration:" in out and "summary" in out
    # How far the measurements can be trusted, per row and in the summary.
    assert saved.halves_spread.notna().all() and (saved.halves_spread >= 0).all()
    assert (saved.remeasured_ms > 0).all()
    spread = (saved.remeasured_ms - saved.measured_ms).abs() / saved[
        ["measured_ms", "remeasured_ms"]].min(axis=1)
    assert saved.repeat_spread.to_numpy() == pytest.approx(spread.to_numpy())
    # How far a second calibration, right after the first, moves each prediction.
    assert saved.calibration_spread.notna().all() and (saved.calibration_spread >= 0).all()
    assert (folder / "sim_vs_real_cluster_again.json").exists()
    assert "calibration again:" in out
    summary = sim_vs_real.summarise(saved)
    assert {"median_halves_spread", "median_repeat_spread", "median_calibration_spread",
            "max_other_cores"} <= set(summary.columns)
    # The calibrated cluster is saved: the simple row predicts again from it alone.
    from core.cluster import Cluster
    from core.costs import StaticCostModel
    from experiments.backends import RUNTIME_SIM, predict
    from experiments.compare_placers import WORKLOADS
    import placers
    cluster = Cluster.load(folder / "sim_vs_real_cluster.json")
    w = WORKLOADS["mlp"]()
    again = predict(w, placers.SimplePlacer().place(w.graph, cluster), cluster,
                    StaticCostModel(), RUNTIME_SIM).step_time * 1e3
    row = saved[(saved.placer == "simple") & (saved.cost_model == "static")].iloc[0]
    assert again == pytest.approx(row.predicted_ms, rel=1e-9)


def test_ranking_agreement_counts_pairs_apart_by_more_than_10_percent():
    rows = pd.DataFrame({"workload": ["w"] * 3, "measured_ms": [1.0, 1.05, 2.0],
                         "predicted_ms": [1.0, 0.9, 0.5]})
    # pairs apart by >10%: (1.0, 2.0) and (1.05, 2.0); the prediction inverts both.
    assert sim_vs_real.ranking_agreement(rows) == (2, 0)
    rows["predicted_ms"] = [1.0, 1.1, 3.0]
    assert sim_vs_real.ranking_agreement(rows) == (2, 2)


def test_a_proposal_is_kept_only_if_simulated_faster_by_the_split_margin():
    assert sim_vs_real.keeps_proposal(0.89, 1.0)
    assert not sim_vs_real.keeps_proposal(0.91, 1.0)
    assert not sim_vs_real.keeps_proposal(1.2, 1.0)
    assert sim_vs_real.keeps_proposal(0.95, 1.0, margin=0.0)


def test_the_replacement_loop_keeps_a_proposal_only_if_simulated_faster():
    frame, loop, calibrations = sim_vs_real.run(
        ["mlp"], repeats=1, quick=True, placer_names=("simple", "cost_model"), progress=False,
        calibration_spread=False)
    assert frame.calibration_spread.isna().all()
    assert len(calibrations) == 1 and (frame.calibration == 0).all()
    assert list(loop.columns) == sim_vs_real.LOOP_COLUMNS and len(loop) == 1
    row = loop.iloc[0]
    assert row.static_ms > 0 and row.measured_cost_ms > 0
    if row.proposal_kept:  # taken: the simulator put it 10% below the static placement
        assert row.measured_cost_predicted_ms < 0.9 * row.static_under_measured_ms
    else:  # refused: the static placement is timed again
        assert row.same_placement


def test_each_workload_is_calibrated_right_before_it_is_measured(tmp_path, capsys):
    frame = sim_vs_real.main(["--calibrate", "quick", "--no-loop", "--workloads", "mlp",
                              "mixed_random:ops=12:matmul=32:elements=4096", "--placers",
                              "simple", "--repeats", "1", "--no-calibration-spread",
                              "--out", str(tmp_path)])
    folder = frame.attrs["run_folder"]
    saved = pd.read_csv(folder / "sim_vs_real.csv")
    assert dict(zip(saved.workload, saved.calibration)) == {
        "mlp": 0, "mixed_random:ops=12:matmul=32:elements=4096": 1}
    assert (folder / "sim_vs_real_cluster_0.json").exists()
    assert (folder / "sim_vs_real_cluster_1.json").exists()
    out = capsys.readouterr().out
    assert "calibration 0:" in out and "calibration 1:" in out


def test_placement_quality_needs_both_measurements_to_agree():
    rows = pd.DataFrame({
        "workload": ["w"] * 4 + ["v"] * 2, "cost_model": ["static"] * 6,
        "placer": ["simple", "round_robin", "round_robin_vars", "cost_model",
                   "simple", "cost_model"],
        "same_as": ["", "", "", "", "", "simple"],
        "measured_ms": [10.0, 5.0, 7.0, 8.0, 3.0, 3.0],
        "remeasured_ms": [11.0, 6.0, 7.0, 9.0, 3.1, 3.1]})
    quality = sim_vs_real.placement_quality(rows).set_index("workload")
    assert quality.loc["w", "beats_simple"] == "yes"  # faster in both
    assert quality.loc["w", "beats_round_robin"] == "no"  # slower in both
    assert quality.loc["w", "simple_again_ms"] == 11.0
    assert quality.loc["v", "beats_simple"] == "tie"  # the same placement
    assert pd.isna(quality.loc["v", "beats_round_robin"])  # not measured
    rows.loc[3, "remeasured_ms"] = 12.0
    assert sim_vs_real.placement_quality(rows).set_index("workload").loc[
        "w", "beats_simple"] == "unclear"
    assert sim_vs_real.placement_quality(rows[rows.placer != "cost_model"]).empty


def test_placement_quality_ties_a_baseline_that_is_the_same_placement_as_an_earlier_one():
    # simple, round_robin and cost_model all chose one placement: both baselines tie.
    rows = pd.DataFrame({
        "workload": ["w"] * 3, "cost_model": ["static"] * 3,
        "placer": ["simple", "round_robin", "cost_model"],
        "same_as": ["", "simple", "simple"],
        "measured_ms": [4.0] * 3, "remeasured_ms": [4.2] * 3})
    row = sim_vs_real.placement_quality(rows).iloc[0]
    assert (row.beats_simple, row.beats_round_robin) == ("tie", "tie")


def test_workloads_are_the_experiments_and_the_registrys_with_options(capsys):
    from experiments import workloads
    from experiments.compare_placers import WORKLOADS
    for name in workloads.names():  # every registered name, at a small size
        assert sim_vs_real.workload_spec(name) == name
    assert set(sim_vs_real.SMALL_OPTIONS) <= set(workloads.names())
    # A name of the experiments' table without options is that table's size...
    assert len(sim_vs_real.build_workload("mlp").graph.get_operations()) == len(
        WORKLOADS["mlp"]().graph.get_operations())
    # ... with options, the registry's builder over the small defaults.
    small = sim_vs_real.build_workload("resnet50")
    assert len(small.graph.get_operations()) < len(
        sim_vs_real.build_workload("resnet50:blocks=(1,1,2,1)").graph.get_operations())
    a = sim_vs_real.build_workload("mixed_random:seed=5:ops=20")
    b = sim_vs_real.build_workload("mixed_random:ops=20:seed=5")
    assert [op.name for op in a.graph.get_operations()] == [
        op.name for op in b.graph.get_operations()]
    with pytest.raises(SystemExit) as stop:
        sim_vs_real.main(["--workloads", "no_such_workload"])
    assert stop.value.code == 2 and "unknown workload 'no_such_workload'" in capsys.readouterr().err


def test_the_tensorflow_backend_predicts_with_tensorflows_calibration(monkeypatch):
    """The wiring, without TensorFlow: the calibration run is TensorFlow's (faked here:
    our preset figures, recording the ideal runtime model), each row is predicted with
    the runtime model that calibration recorded, not with RUNTIME_SIM, and a second
    calibration gives calibration_spread.  The "measurements" are the simulator's own."""
    import contextlib

    import sim
    import experiments.tf_calibrate as tf_calibrate
    from core.runtime_model import IDEAL
    from experiments.backends import Measurement, predict
    from experiments.compare_placers import placers_to_compare

    calls = []

    def fake_calibration(cluster, quick=False, env=None):
        calls.append(quick)
        scale = 1.0 if len(calls) % 2 else 1.25  # the second calibration sees a slower CPU
        for d in cluster.devices:
            cluster = cluster.replace_device(d.name, peak_flops=d.peak_flops / scale)
        return cluster.with_runtime_model(IDEAL), {
            "step_overhead": 0.0, "part_overhead": 0.0, "transfer_latency": None,
            "transfer_bandwidth": None, "op_overhead": 0.0}

    @contextlib.contextmanager
    def fake_servers(backend, cluster, env, config):
        assert backend == "tensorflow"

        def measure(w, placements, servers, *, repeats, traced=1, config=None):
            out = {}
            for name, p in placements.items():
                trace = predict(w, p, cluster, None, sim.SimConfig(runtime="interpreter"))
                out[name] = Measurement(trace.step_time, [trace.step_time] * 2, [trace])
            return out
        yield None, measure

    monkeypatch.setattr(tf_calibrate, "calibrate_tensorflow", fake_calibration)
    monkeypatch.setattr(sim_vs_real, "_measuring_cluster", fake_servers)
    frame, _, calibrations = sim_vs_real.run(
        ["mlp"], repeats=2, quick=True, placer_names=("simple", "round_robin"), loop=False,
        progress=False, backend="tensorflow")
    assert calls == [True, True] and "again" in calibrations[0][1]
    cluster = calibrations[0][0]
    w = sim_vs_real.build_workload("mlp")
    chosen = placers_to_compare(["simple", "round_robin"], w)
    for row in frame[frame.cost_model == "static"].itertuples():
        p = chosen[row.placer].place(w.graph, cluster)
        assert row.predicted_ms == pytest.approx(
            sim.simulate(w.graph, p, cluster, fetches=w.fetch_ops).step_time * 1e3, rel=1e-9)
        assert row.calibration_spread > 0  # the slower CPU of the second calibration


def test_a_full_calibration_of_this_host_takes_the_distributed_figures_in_blocks(monkeypatch):
    import experiments.backends as backends

    asked = []

    class Servers:
        def __init__(self, *args, **kwargs):
            self.processes = {}

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    def distributed(cluster, local, *, quick, blocks):
        asked.append((quick, blocks))
        return cluster, {"op_overhead": 1e-6}

    monkeypatch.setattr(backends, "calibrate", lambda cluster, quick: cluster)
    monkeypatch.setattr(backends.runtime, "LocalCluster", Servers)
    monkeypatch.setattr(backends, "calibrate_distributed", distributed)
    for quick in (False, True):
        backends.calibrate_this_host(backends.this_host_cluster(), quick=quick)
    assert asked == [(False, backends.DISTRIBUTED_BLOCKS), (True, 1)]
    assert backends.DISTRIBUTED_BLOCKS > 1


def test_each_timed_step_follows_a_step_of_its_own_placement():
    from experiments.backends import timed_rounds
    calls = []
    steps = {name: (lambda name=name: calls.append(name)) for name in "abc"}
    timed, after_other = timed_rounds(steps, 3)
    # Two steps per turn, the order rotating from round to round.
    assert "".join(calls) == "aabbcc" "bbccaa" "ccaabb"
    assert all(len(timed[n]) == len(after_other[n]) == 3 for n in "abc")
    calls.clear()
    timed, after_other = timed_rounds(steps, 2, settle=False)
    assert "".join(calls) == "abc" "bca"
    assert all(len(timed[n]) == 2 and not after_other[n] for n in "abc")
