"""calibration_spread runs end to end (quick) and reports how far calibrations differ."""

from __future__ import annotations

import pandas as pd
import pytest

from experiments import calibration_spread


def test_quick_run_reports_each_calibration_and_the_spread(tmp_path, capsys):
    figures, predictions, by_figure = calibration_spread.main(
        ["--calibrate", "quick", "--calibrations", "2", "--workloads", "mlp", "--placers", "simple",
         "round_robin", "--out", str(tmp_path)])
    assert figures.calibration.tolist() == ["0", "1", "spread"]
    measured = figures.iloc[:2]
    assert (measured.dispatch_us > 0).all() and (measured.matmul_GFLOPs > 0).all()
    spread = figures.iloc[2]
    lo, hi = sorted(measured.dispatch_us)
    assert spread.dispatch_us == pytest.approx(hi / lo - 1)
    assert list(predictions.placer) == ["simple", "round_robin"]
    assert (predictions[["cal0_ms", "cal1_ms"]] > 0).all().all()
    lo, hi = predictions[["cal0_ms", "cal1_ms"]].min(axis=1), predictions[["cal0_ms", "cal1_ms"]].max(axis=1)
    assert predictions.spread.to_numpy() == pytest.approx((hi / lo - 1).to_numpy())
    folder = figures.attrs["run_folder"]
    assert len(pd.read_csv(folder / "calibration_spread.csv")) == 3
    assert len(pd.read_csv(folder / "calibration_spread_predictions.csv")) == 2
    assert "median spread of the predictions" in capsys.readouterr().out
    assert list(by_figure.placer) == ["simple", "round_robin"]
    assert by_figure["all"].to_numpy() == pytest.approx(predictions.spread.to_numpy())
    assert len(pd.read_csv(folder / "calibration_spread_by_figure.csv")) == 2


def test_one_calibration_is_refused():
    with pytest.raises(SystemExit):
        calibration_spread.main(["--calibrations", "1"])


def _two_calibrations(group):
    """A cluster of this host and a copy whose figures of ``group`` alone differ."""
    from dataclasses import replace

    from core.cluster import Cluster
    from experiments.backends import this_host_cluster
    base = this_host_cluster()
    devices, tasks, links = base.devices, base.tasks, base.links
    if group == "step":
        tasks = [replace(t, step_overhead=1e-3, part_overhead=5e-4) for t in tasks]
    elif group == "crossings":
        links = {n: replace(l, latency=l.latency * 3 + 1e-4) if l.kind == "memcpy" else l
                 for n, l in links.items()}
    elif group == "kernels":
        devices = [replace(d, op_overhead=d.op_overhead * 4 + 1e-5) if d.is_cpu else d
                   for d in devices]
    elif group == "rates":
        devices = [replace(d, peak_flops=d.peak_flops / 8, mem_bandwidth=d.mem_bandwidth / 8)
                   if d.is_cpu else d for d in devices]
    return base, Cluster(base.hosts, tasks, devices, links, base.master, base.nvlink)


@pytest.mark.parametrize("group", ["step", "crossings", "kernels", "rates"])
def test_the_spread_is_traced_to_the_group_of_figures_that_moved(group):
    clusters = list(_two_calibrations(group))
    by_figure = calibration_spread.spread_by_figure(["mlp"], ["round_robin"], clusters)
    row = by_figure.iloc[0]
    assert row["all"] > 0.01
    assert row[group] == pytest.approx(row["all"])
    for other in calibration_spread.FIGURE_GROUPS:
        if other != group:
            assert row[other] == 0.0


def test_with_figures_of_takes_one_group_only():
    base, moved = _two_calibrations("step")
    assert calibration_spread.with_figures_of(base, moved, "step").tasks == moved.tasks
    assert calibration_spread.with_figures_of(base, moved, "crossings").tasks == base.tasks
    with pytest.raises(ValueError, match="unknown figure group"):
        calibration_spread.with_figures_of(base, moved, "everything")
