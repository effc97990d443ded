"""The experiment scripts run end to end on tiny inputs and write their CSV."""

import math

import pandas as pd
import pytest

from experiments import bench_placement, bench_placers, compare_placers, ps_sharding
from experiments.report import latest_run, load_record


def test_compare_placers_marks_a_best_row(tmp_path, capsys):
    """The main job: both backends, on server processes started here, on this machine
    as calibrated."""
    frame = compare_placers.main(["--workloads", "mlp", "--repeats", "2", "--calibrate",
                                  "quick", "--out", str(tmp_path)])
    assert set(frame["placer"]) == {"simple", "round_robin", "round_robin_vars", "cost_model"}
    assert (frame["best"] == "*").any()
    assert (frame["sim_step_ms"] > 0).all() and (frame["real_step_ms"] > 0).all()
    best = frame[frame.best == "*"].iloc[0]
    assert best.real_step_ms == frame.real_step_ms.min()
    # How busy other programs kept the machine meanwhile: one figure for the workload.
    assert frame.other_cores.nunique(dropna=False) == 1
    assert not frame.other_cores.iloc[0] < 0
    # The run's own folder: its tables and its record.
    folder = latest_run(tmp_path, "compare_placers")
    assert frame.attrs["run_folder"] == folder
    saved = pd.read_csv(folder / "compare_placers.csv")
    assert len(saved) == len(frame)
    # Per device, one row each: ops and the peak memory, predicted and measured.
    devices = pd.read_csv(folder / "compare_placers_devices.csv")
    ops = devices.groupby("placer").ops.sum()
    assert ops.to_dict() == frame.set_index("placer").ops.to_dict()
    simple = devices[devices.placer == "simple"]  # all on the master's CPU
    assert list(simple.device) == ["worker:0/CPU:0"]
    assert (simple.real_peak_MiB > 0).all() and (simple.sim_peak_MiB > 0).all()
    # Placers that chose one placement share its measurement, and name whose it is.
    by_device = devices.set_index(["placer", "device"]).ops
    for _, row in frame[frame.same_as != ""].iterrows():
        owner = frame[frame.placer == row.same_as].iloc[0]
        assert owner.same_as == ""
        assert by_device[owner.placer].to_dict() == by_device[row.placer].to_dict()
        assert owner.real_step_ms == row.real_step_ms
    record = load_record(folder)
    assert record["arguments"]["repeats"] == 2 and record["status"] == "ok"
    assert record["summary"]["best"]["mlp"]["placer"] in set(frame.placer)
    assert "cluster.json" in record["files"] and (folder / "cluster.json").exists()
    out = capsys.readouterr().out
    assert "calibrated this machine: step overhead" in out
    assert "placers on ps_workers (3 devices, calibrated)" in out


def test_compare_placers_calibrates_only_this_machine(tmp_path, capsys):
    """A hypothetical cluster is simulated as described: nothing here to measure."""
    frame = compare_placers.main(["--workloads", "mlp", "--backend", "sim", "--cluster",
                                  "two_gpus", "--out", str(tmp_path), "--plot"])
    assert (frame["sim_step_ms"] > 0).all() and "real_step_ms" not in frame
    out = capsys.readouterr().out
    assert "calibrated this machine" not in out and "default hardware figures" in out
    # --plot: the bars of every placement and the Gantt chart of the best one.
    folder = frame.attrs["run_folder"]
    best = frame[frame.best == "*"].iloc[0].placer
    assert (folder / "compare_placers_steps.png").stat().st_size > 0
    assert (folder / f"gantt_mlp_{best}.png").stat().st_size > 0
    # A second run never overwrites the first: it gets a folder of its own.
    again = compare_placers.main(["--workloads", "mlp", "--backend", "none", "--cluster",
                                  "two_gpus", "--out", str(tmp_path)])
    assert again.attrs["run_folder"] != folder and (folder / "compare_placers.csv").exists()


def test_compare_placers_takes_any_registered_placer(tmp_path, capsys):
    frame = compare_placers.main(["--workloads", "mlp", "--backend", "sim", "--cluster",
                                  "two_gpus", "--placers", "m_etf", "m_topo", "cost_model",
                                  "--out", str(tmp_path)])
    assert list(frame["placer"]) == ["m_etf", "m_topo", "cost_model"]
    assert (frame["sim_step_ms"] > 0).all()
    with pytest.raises(SystemExit):
        compare_placers.main(["--placers", "magic", "--backend", "sim"])
    err = capsys.readouterr().err
    assert "unknown placer 'magic'" in err and "m_sct" in err and "round_robin_vars" in err


def test_bench_placement_table_csv_and_plot(tmp_path):
    frame = bench_placement.main(["--models", "mlp", "--clusters", "4gpu:tight", "--placers",
                                  "simple", "cost_model", "m_topo", "search", "--search-evals",
                                  "8", "--plot", "--out", str(tmp_path)])
    assert list(frame["placer"]) == ["simple", "cost_model", "m_topo", "search"]
    by = frame.set_index("placer")
    assert by.loc["simple", "oom"]  # no GPU holds the model alone
    assert not by.loc["m_topo", "oom"] and by.loc["m_topo", "devices"] >= 2
    assert by.loc["search", "sim_step_ms"] <= by.loc["cost_model", "sim_step_ms"]
    assert by.loc["search", "speedup_vs_cost_model"] >= 1
    folder = frame.attrs["run_folder"]
    assert (folder / "bench_placement.csv").exists() and (folder / "bench_placement.png").exists()
    devices = pd.read_csv(folder / "bench_placement_devices.csv")
    assert set(devices.placer) == set(frame.placer) and (devices.peak_MiB >= 0).all()


def test_rank_agreement_of_simulated_and_measured_steps():
    frame = pd.DataFrame({"workload": ["w"] * 3, "placer": ["a", "b", "c"],
                          "sim_step_ms": [1.0, 2.0, 3.0], "real_step_ms": [1.5, 2.5, 2.0]})
    row = bench_placement.rank_agreement(frame).iloc[0]
    assert row.same_best and abs(row.kendall_tau - 1 / 3) < 1e-9


def test_bench_placers_reports_growth(tmp_path):
    frame = bench_placers.main(["--sizes", "200", "400", "--placers", "simple", "cost_model",
                                "--out", str(tmp_path), "--plot"])
    assert set(frame["ops"]) == {200, 400}
    assert frame["growth"].notna().sum() == 2
    folder = latest_run(tmp_path, "bench_placers")
    assert (folder / "bench_placers.csv").exists() and (folder / "bench_placers.png").exists()


def test_ps_sharding_spreads_network_load(tmp_path):
    frame = ps_sharding.main(["--ps", "1", "4", "--workers", "2", "--width", "256",
                              "--layers", "4", "--strategies", "greedy", "--out", str(tmp_path)])
    one, four = (frame[frame.ps_tasks == n].iloc[0] for n in (1, 4))
    assert four.busiest_link_busy_ms < one.busiest_link_busy_ms
    assert four.sim_step_ms < one.sim_step_ms


def test_ps_sharding_on_both_backends(tmp_path):
    frame = ps_sharding.main(["--backend", "both", "--ps", "1", "2", "--workers", "1",
                              "--width", "64", "--layers", "2", "--strategies", "greedy",
                              "--repeats", "1", "--calibrate", "quick", "--out", str(tmp_path)])
    assert list(frame.ps_tasks) == [1, 2]
    assert (frame.real_step_ms > 0).all() and (frame.sim_step_ms > 0).all()
    assert frame.rel_error.notna().all()
    assert len(pd.read_csv(frame.attrs["run_folder"] / "ps_sharding.csv")) == 2


def test_threads_sweep_more_threads_help_a_branchy_graph(tmp_path):
    from experiments import threads
    frame = threads.main(["--workloads", "inception", "--inter", "1", "2", "--intra", "1",
                          "--backend", "sim", "--cores", "2", "--out", str(tmp_path)])
    one, two = frame.sim_step_ms.tolist()
    assert two < one


def test_threads_sweep_on_both_backends(tmp_path):
    from experiments import threads
    frame = threads.main(["--workloads", "mlp", "--inter", "1", "2", "--intra", "1",
                          "--repeats", "1", "--out", str(tmp_path)])
    assert (frame.real_step_ms > 0).all() and (frame.sim_step_ms > 0).all()
    assert {"real_speedup", "sim_speedup", "rel_error"} <= set(frame.columns)
    assert len(pd.read_csv(frame.attrs["run_folder"] / "threads.csv")) == 2


def test_bench_kernels_times_ours_and_numpy_side_by_side(tmp_path):
    from experiments import bench_kernels
    frame = bench_kernels.main(["--sizes", "8", "--repeats", "1", "--nn-batch", "0",
                                "--out", str(tmp_path)])
    assert (latest_run(tmp_path, "bench_kernels") / "bench_kernels.csv").exists()
    assert set(frame.op) >= {"Add", "Mul", "Tanh", "Sum", "MatMul"}
    assert (frame.ours_us > 0).all() and (frame.numpy_us > 0).all()
    assert frame.ratio.tolist() == pytest.approx((frame.ours_us / frame.numpy_us).tolist())


def test_bench_kernels_has_a_resnet_sized_case_for_every_nn_op():
    """The nn cases (timed by ``--nn-batch``, too slow to time here) cover the nn op
    family, each with inputs the op's shape inference accepts."""
    import numpy as np
    from core.dtypes import as_dtype
    from core.opdef import TensorSpec
    from core.ops_nn import NN_OPS
    from experiments import bench_kernels
    cases = bench_kernels.nn_cases(1, np.random.default_rng(0))
    assert {op for op, *_ in cases} == set(NN_OPS)
    for op, _, inputs, attrs, reference in cases:
        NN_OPS[op].infer([TensorSpec(as_dtype(x.dtype), x.shape) for x in inputs], attrs)
        assert callable(reference)


def test_bench_sim_reports_speed_growth_and_the_machines_load(tmp_path):
    from experiments import bench_sim
    frame = bench_sim.main(["--sizes", "300", "600", "--devices", "4", "--repeats", "2",
                            "--out", str(tmp_path)])
    assert (latest_run(tmp_path, "bench_sim") / "bench_sim.csv").exists()
    assert list(frame.ops) == [300, 600] and (frame.ops_per_s > 0).all()
    assert (frame.transfers > 0).all() and (frame.peak_MiB > 0).all()
    assert frame.time_growth.notna().sum() == 1 and frame.mem_growth.notna().sum() == 1
    assert not (frame.other_cores < 0).any()
    # The baselines, side by side: the naive model and SimPy's own rate now.
    assert (frame.naive_ops_per_s > 0).all()
    assert frame.vs_naive.tolist() == pytest.approx((frame.ops_per_s / frame.naive_ops_per_s).tolist())
    rate = frame.simpy_timeouts_per_s.iloc[0]
    assert rate > 0 and frame.target_scaled.iloc[0] == pytest.approx(200e3 * rate / 1.5e6)


def test_the_baselines_run_and_can_be_skipped(tmp_path):
    from experiments import bench_sim
    graph, cluster, placement = bench_sim.placed_dag(200, 2)
    assert bench_sim.naive_ops_per_s(graph, placement, cluster) > 0
    assert bench_sim.simpy_timeouts_per_s(1000) > 0
    frame = bench_sim.main(["--sizes", "200", "--devices", "2", "--no-memory",
                            "--no-baselines", "--out", str(tmp_path)])
    assert frame.naive_ops_per_s.isna().all() and frame.simpy_timeouts_per_s.isna().all()


def test_bench_runtime_rows_and_the_machines_load():
    from experiments import bench_runtime
    table = bench_runtime.run(repeats=1, warmup=0, batch=8, with_tensorflow=False)
    assert set(table.benchmark) == {"tiny step", "transfer", "mlp"}
    assert (table.value > 0).all() and table.vs_tf.notna().all()
    assert set(table[table.benchmark == "mlp"].transport) == {"-", "numpy"}
    assert not (table.other_cores < 0).any()
    # Which BLAS computed each MLP: ours through the runtime's library, numpy's its own.
    mlp = table.benchmark == "mlp"
    assert (table[mlp & (table.transport == "-")].blas != "").all()
    assert (table[~mlp].blas == "").all()
    assert "runtime" in {lib["used_by"] for lib in table.attrs["blas"]}


def test_the_mlp_runs_side_by_side_with_tensorflows_and_numpys():
    pytest.importorskip("tensorflow")
    from experiments import bench_runtime
    v1 = bench_runtime._import_tensorflow()
    rows, theirs = bench_runtime.mlp_side_by_side(v1, batch=8, repeats=2, warmup=1)
    assert [r["transport"] for r in rows] == ["-", "numpy"] and theirs["transport"] == "tensorflow"
    assert all(r["value"] > 0 and r["best"] <= r["value"] for r in [*rows, theirs])
    assert rows[0]["other_cores"] == theirs["other_cores"]  # one measurement, one load


def test_interleaved_rounds_rotate_the_order():
    from experiments.bench_runtime import interleaved_many
    calls = []
    timed = interleaved_many([lambda: calls.append(0), lambda: calls.append(1)], 4, 0)
    assert calls == [0, 1, 1, 0, 0, 1, 1, 0] and len(timed) == 2


def test_bench_placement_shows_baechis_measured_steps_where_the_setting_matches():
    from experiments import baechi_published
    small = {"image_size": 75, "num_classes": 10, "depth_multiplier": 0.05, "blocks": 4}
    frame = bench_placement.bench(["inception_v3"], ["4gpu", "4gpu:tight"], ("simple", "m_etf"),
                                  model_options=dict(small, batch=64))
    beside = bench_placement.published_beside(frame)
    assert set(beside.cluster) == {"4gpu"}  # (the tight one constrains memory: theirs did not)
    by = beside.set_index("placer")
    assert list(by.index) == ["simple", "m_topo", "m_etf", "m_sct"]
    assert by.loc["m_etf", "published_step_ms_round1"] == 466.0003538484927
    assert by.loc["m_sct", "published_speedup_round2"] == 460.1177727734601 / 466.54611163669165
    assert by.loc["simple", "speedup_vs_one_device"] == 1 and math.isnan(by.loc["m_topo",
                                                                              "sim_step_ms"])
    assert "BaechiPyTorch" in baechi_published.SOURCES[by.loc["m_etf", "published_source"]]
    other = bench_placement.bench(["inception_v3"], ["4gpu"], ("simple",),
                                  model_options=dict(small, batch=32))
    assert bench_placement.published_beside(other).empty  # another batch: nothing matches
