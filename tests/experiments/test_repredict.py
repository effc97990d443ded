"""experiments.repredict: saved sim_vs_real runs predicted again, paired with their
measurements."""

import json

import pandas as pd
import pytest

from core.costs import StaticCostModel
from experiments import repredict
from experiments.backends import RUNTIME_SIM, predict, this_host_cluster
from experiments.compare_placers import placers_to_compare
from experiments.sim_vs_real import build_workload
from experiments.what_if import parse_change

PLACERS = ["simple", "round_robin_vars"]


def _saved_run(folder, shift=None):
    """A sim_vs_real run folder as the script saves one: mlp under two placers on a
    1-ps, 2-worker cluster, each measured 10% over its prediction; ``shift`` moves one
    saved prediction, as an older simulator's would differ from today's."""
    folder.mkdir(parents=True)
    cluster = this_host_cluster(2)
    cluster.save(folder / "sim_vs_real_cluster.json")
    w = build_workload("mlp")
    rows = []
    for name, placer in placers_to_compare(PLACERS, w).items():
        ms = predict(w, placer.place(w.graph, cluster), cluster, StaticCostModel(),
                     RUNTIME_SIM).step_time * 1e3
        rows.append({"workload": "mlp", "placer": name, "cost_model": "static",
                     "predicted_ms": ms * (shift or {}).get(name, 1.0),
                     "measured_ms": ms * 1.1, "calibration": 0})
        # (a measured-cost row: its traces are not saved, so it is left out)
        rows.append({**rows[-1], "cost_model": "measured(simple)"})
    pd.DataFrame(rows).to_csv(folder / "sim_vs_real.csv", index=False)
    (folder / "run.json").write_text(json.dumps({"script": "sim_vs_real",
                                                 "arguments": {"backend": "runtime"}}))
    return folder


def test_todays_simulator_reproduces_an_unchanged_run(tmp_path):
    table = repredict.repredict_run(_saved_run(tmp_path / "a"))
    assert list(table.columns) == repredict.COLUMNS
    assert list(table.placer) == PLACERS and (table.backend == "runtime").all()
    assert not table.moved.any() and not table.closer.any()
    assert table.rel_error.to_numpy() == pytest.approx([1 / 1.1 - 1] * 2)
    assert table.rel_error.to_numpy() == pytest.approx(table.saved_rel_error.to_numpy())


def test_a_moved_prediction_is_paired_with_its_measurement(tmp_path):
    # The saved simple row was predicted 30% slower than today's simulator predicts it:
    # today's is closer to the measurement (10% over today's prediction).
    table = repredict.repredict_run(_saved_run(tmp_path / "a", {"simple": 1.3}))
    simple = table.set_index("placer").loc["simple"]
    assert simple.moved and simple.closer
    assert simple.saved_rel_error == pytest.approx(1.3 / 1.1 - 1)
    summary = repredict.summarise(table)
    assert summary.loc[0, "moved"] == 1 and summary.loc[0, "closer"] == 1
    assert summary.loc[0, "median_abs_error"] < summary.loc[0, "saved_median_abs_error"]


def test_main_finds_the_runs_below_a_folder_and_skips_one_that_does_not_load(tmp_path,
                                                                           capsys):
    _saved_run(tmp_path / "runs" / "a")
    _saved_run(tmp_path / "runs" / "b", {"round_robin_vars": 0.5})
    broken = _saved_run(tmp_path / "runs" / "c")
    (broken / "sim_vs_real_cluster.json").write_text('{"tasks": "not a cluster"}')
    table = repredict.main([str(tmp_path / "runs"), "--out", str(tmp_path / "out")])
    assert set(table.run) == {"a", "b"} and len(table) == 4
    out = capsys.readouterr().out
    assert "skipped" in out and str(broken) in out
    summary = pd.read_csv(table.attrs["run_folder"] / "repredict_summary.csv")
    assert list(summary.run) == ["a", "b", "all"]
    assert summary.set_index("run").loc["all", "moved"] == 1


def test_a_folder_without_runs_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no sim_vs_real or sim_vs_inprocess run"):
        repredict.run_folders([tmp_path])


def _saved_inprocess_run(folder, gpus=()):
    """A sim_vs_inprocess run folder: two workloads, every op on the CPU, each measured
    20% under its prediction."""
    import sim
    from core.cluster import Cluster
    from core.placement import Placement
    folder.mkdir(parents=True)
    cluster = Cluster.single_host(cpu_cores=2)
    cluster.save(folder / "calibration_0.json")
    rows = []
    for name in ("mlp", "mixed_random:seed=2"):
        w = build_workload(name)
        cpu = cluster.devices[0].name
        placement = Placement({op.name: cpu for op in w.graph.get_operations()})
        ms = sim.simulate(w.graph, placement, cluster, fetches=w.fetches).step_time * 1e3
        rows.append({"workload": name, "predicted_ms": ms, "measured_ms": ms / 0.8})
    pd.DataFrame(rows).to_csv(folder / "sim_vs_inprocess.csv", index=False)
    (folder / "run.json").write_text(json.dumps({
        "script": "sim_vs_inprocess", "arguments": {"inter_op_threads": 0, "without": None},
        "machine": {"gpus": list(gpus)}}))
    return folder


def test_an_in_process_run_is_predicted_again_with_every_op_on_the_cpu(tmp_path):
    table = repredict.repredict_run(_saved_inprocess_run(tmp_path / "a"))
    assert list(table.workload) == ["mlp", "mixed_random:seed=2"]
    assert (table.backend == "in-process").all() and not table.moved.any()
    assert table.rel_error.to_numpy() == pytest.approx([-0.2, -0.2])
    # A run on a machine with a GPU: its session's placement is not saved.
    with pytest.raises(ValueError, match="GPU"):
        repredict.repredict_run(_saved_inprocess_run(tmp_path / "b", gpus=["H200"]))
    assert repredict.run_folders([tmp_path]) == [tmp_path / "a", tmp_path / "b"]


def test_what_if_predicts_on_the_edited_cluster_and_places_on_the_saved_one(tmp_path):
    folder = _saved_run(tmp_path / "a")
    base = repredict.repredict_run(folder)
    cheap = repredict.repredict_run(folder, [parse_change("cpu.op_overhead=0")])
    assert (cheap.predicted_ms < base.predicted_ms).all() and cheap.moved.all()
    # (the saved predictions and the measurements are the run's, whatever the change)
    assert cheap.saved_predicted_ms.tolist() == base.saved_predicted_ms.tolist()
    same = repredict.repredict_run(folder, [parse_change("cpu.op_overhead*=1")])
    assert same.predicted_ms.tolist() == base.predicted_ms.tolist()


def test_main_takes_what_if_changes_and_rejects_a_bad_one(tmp_path, capsys):
    folder = _saved_run(tmp_path / "runs" / "a")
    table = repredict.main([str(folder), "--what-if", "task.step_overhead=1e-3",
                            "--out", str(tmp_path / "out")])
    assert table.moved.all()
    assert "with task.step_overhead=0.001" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        repredict.main([str(folder), "--what-if", "cpu.speed=2", "--out", str(tmp_path / "o")])
    assert "no numeric figure 'speed'" in capsys.readouterr().err
