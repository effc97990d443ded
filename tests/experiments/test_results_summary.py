"""The results pages come from the runs' records: the latest good run of each script."""

from __future__ import annotations

import pandas as pd

from experiments import results_summary
from experiments.report import Run, load_record


def _compare_run(out, step_ms: float, fail: bool = False):
    frame = pd.DataFrame({"workload": ["mlp", "mlp"], "placer": ["simple", "cost_model"],
                          "sim_step_ms": [2.0, step_ms], "best": ["", "*"]})
    try:
        with Run("compare_placers", {"repeats": 1}, out=out, argv=["--backend", "sim"]) as run:
            run.save_table(frame, "compare_placers")
            (run.path("gantt_mlp_cost_model.png")).write_bytes(b"png")
            if fail:
                raise RuntimeError("interrupted")
    except RuntimeError:
        pass
    return run.folder


def test_the_pages_come_from_the_latest_good_runs(tmp_path):
    runs, docs = tmp_path / "results", tmp_path / "docs"
    _compare_run(runs, 1.5)
    newest = _compare_run(runs, 1.25)
    failed = _compare_run(runs, 0.5, fail=True)  # a run that failed is never summarised
    assert load_record(failed)["status"] == "error"
    assert results_summary.latest_runs(runs) == {"compare_placers": newest}
    readme = tmp_path / "README.md"
    readme.write_text(f"# lab\n\n{results_summary.BEGIN}\nold\n{results_summary.END}\n\ntail\n")
    assert results_summary.main(["--runs", str(runs), "--docs", str(docs),
                                 "--readme", str(readme)]) == 0
    text = readme.read_text()
    assert "old" not in text and text.endswith("\ntail\n")
    assert "simple 2, cost_model 1.25* ms predicted (* the best)" in text
    page = (docs / "results.md").read_text()
    assert "## compare_placers" in page and "--backend sim" in page and "| 1.25 |" in page
    assert (docs / "gantt_mlp.png").read_bytes() == b"png"
    # Generated: a second pass over the same runs writes the same pages.
    results_summary.main(["--runs", str(runs), "--docs", str(docs), "--readme", str(readme)])
    assert readme.read_text() == text and (docs / "results.md").read_text() == page


def test_the_placement_benchmark_headline_says_which_placements_fit(tmp_path):
    frame = pd.DataFrame({"model": ["m"] * 3, "cluster": ["4gpu:tight"] * 3,
                          "placer": ["simple", "m_etf", "m_topo"],
                          "sim_step_ms": [1.0, 2.0, float("nan")], "oom": [True, False, None]})
    with Run("bench_placement", {}, out=tmp_path, argv=[]) as run:
        run.save_table(frame, "bench_placement")
    (row,) = results_summary.headlines(results_summary.latest_runs(tmp_path))
    assert row["figure"] == ("simple 1 (OOM), m_etf 2, m_topo no placement; "
                             "fastest that fits: m_etf")


def test_the_in_process_accuracy_headline_gives_the_error_beside_the_spreads(tmp_path):
    summary = pd.DataFrame([{"rows": 3, "median_abs_error": 0.06, "max_abs_error": 0.3,
                             "worst": "gnmt", "median_repeat_spread": 0.01,
                             "median_calibration_spread": 0.02}])
    with Run("sim_vs_inprocess", {}, out=tmp_path, argv=[]) as run:
        run.save_table(summary, "sim_vs_inprocess_summary")
    (row,) = results_summary.headlines(results_summary.latest_runs(tmp_path))
    assert row["figure"] == ("median |error| 6%, max 30% (gnmt) over 3 graphs; "
                             "median spreads: repeat 1%, calibration 2%")


def _sim_vs_real_run(out, backend: str, error: float):
    frame = pd.DataFrame({"cost_model": ["static"], "rows": [4], "median_abs_error": [error],
                          "ranked_pairs": [6], "ranked_same": [6]})
    with Run("sim_vs_real", {"backend": backend}, out=out, argv=["--backend", backend]) as run:
        run.save_table(frame, "sim_vs_real_summary")
    return run.folder


def test_sim_vs_real_keeps_the_latest_run_of_each_backend(tmp_path):
    """The runtime's and TensorFlow's predictions are two findings: a TensorFlow run
    does not hide the runtime's latest."""
    runtime_run = _sim_vs_real_run(tmp_path, "runtime", 0.08)
    tf_run = _sim_vs_real_run(tmp_path, "tensorflow", 0.12)
    latest = results_summary.latest_runs(tmp_path)
    assert latest == {"sim_vs_real": runtime_run, "sim_vs_real:tensorflow": tf_run}
    whats = [row["what"] for row in results_summary.headlines(latest)]
    assert any("on runtime" in w for w in whats) and any("on tensorflow" in w for w in whats)


def test_sim_vs_inprocess_keeps_the_latest_run_with_a_gpu_and_without(tmp_path):
    """On a machine with a GPU the report checks the CUDA executor: a finding of its
    own, which a later run on a CPU machine does not hide (nor the other way)."""
    import json
    summary = pd.DataFrame([{"rows": 3, "median_abs_error": 0.1, "max_abs_error": 0.3,
                             "worst": "gnmt", "median_repeat_spread": 0.01,
                             "median_calibration_spread": 0.02}])
    folders = []
    for gpus in (["NVIDIA H200, 143771 MiB"], []):
        with Run("sim_vs_inprocess", {}, out=tmp_path, argv=[]) as run:
            run.save_table(summary, "sim_vs_inprocess_summary")
        record = json.loads((run.folder / "run.json").read_text())
        record["machine"]["gpus"] = gpus
        (run.folder / "run.json").write_text(json.dumps(record))
        folders.append(run.folder)
    latest = results_summary.latest_runs(tmp_path)
    assert latest == {"sim_vs_inprocess:gpu": folders[0], "sim_vs_inprocess": folders[1]}
    gpu_row = next(row for row in results_summary.headlines(latest)
                   if row["what"].endswith("every op on the GPU"))
    assert "NVIDIA H200" in gpu_row["run"]


def test_a_runs_label_names_what_the_hypervisor_took_when_it_took_much():
    from experiments.results_summary import _run_label
    record = {"started": "2026-11-28T08:12:00+00:00", "other_cores": 0.04,
              "machine": {"cpu_model": "AMD EPYC", "usable_cores": 2, "gpus": []}}
    assert _run_label({**record, "steal_cores": 0.18}).endswith(
        "other programs 0.0 cores, hypervisor 0.2 cores")
    assert "hypervisor" not in _run_label({**record, "steal_cores": 0.02})
    assert "hypervisor" not in _run_label(record)  # (older records: no steal)


def test_a_script_without_a_run_here_keeps_what_the_pages_said_of_it(tmp_path):
    """results/ is not in git: summarising a fresh checkout's runs must not drop the
    sections and headline rows of the scripts it did not run."""
    runs, docs = tmp_path / "results", tmp_path / "docs"
    folder = _compare_run(runs, 1.25)
    docs.mkdir()
    old_section = ("## bench_sim\n\n- run: 2026-11-28 05:23 UTC, AMD EPYC, 2 cores, 30 s\n"
                   "- command: `python -m experiments.bench_sim`\n\n### bench_sim.csv\n\n| a |\n| --- |\n| 1 |")
    (docs / "results.md").write_text("# Results\n\nintro\n\n## compare_placers\n\n- run: old, 5 s\n\n"
                                     + old_section + "\n")
    readme = tmp_path / "README.md"
    readme.write_text(f"# lab\n\n{results_summary.BEGIN}\n| what | figure | run |\n| --- | --- | --- |\n"
                      "| compare_placers, mlp: step per placer | simple 9 ms | old |\n"
                      "| bench_sim, ops simulated per second | 4 devices 276,684 \\| x "
                      "| 2026-11-28 05:23 UTC, AMD EPYC, 2 cores |\n"
                      f"{results_summary.END}\n")
    results_summary.main(["--runs", str(runs), "--docs", str(docs), "--readme", str(readme)])
    page = (docs / "results.md").read_text()
    assert old_section in page and "- run: old" not in page
    assert page.index("## bench_sim") < page.index("## compare_placers")
    text = readme.read_text()
    assert "simple 9 ms" not in text and "cost_model 1.25*" in text  # compare_placers: new
    assert "| bench_sim, ops simulated per second | 4 devices 276,684 \\| x |" in text
    assert text.index("compare_placers, mlp") < text.index("bench_sim, ops")
    assert load_record(folder)["status"] == "ok"
