"""calibration_spread runs end to end (quick) and reports how far calibrations differ."""

from __future__ import annotations

import pandas as pd
import pytest

from experiments import calibration_spread


def test_quick_run_reports_each_calibration_and_the_spread(tmp_path, capsys):
    figures, predictions = calibration_spread.main(
        ["--quick", "--calibrations", "2", "--workloads", "mlp", "--placers", "simple",
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
    assert len(pd.read_csv(tmp_path / "calibration_spread.csv")) == 3
    assert len(pd.read_csv(tmp_path / "calibration_spread_predictions.csv")) == 2
    assert "median spread of the predictions" in capsys.readouterr().out


def test_one_calibration_is_refused():
    with pytest.raises(SystemExit):
        calibration_spread.main(["--calibrations", "1"])
