"""The reports' pictures: grouped bars, marked bars, predicted against measured."""

from __future__ import annotations

import pandas as pd
import pytest

pytest.importorskip("matplotlib")

from experiments import plots  # noqa: E402


def test_bars_hatch_the_marked_rows_and_say_so_in_the_legend():
    frame = pd.DataFrame({"model": ["a", "a", "b"], "placer": ["x", "y", "x"],
                          "step_ms": [1.0, 2.0, 3.0], "oom": [True, False, None]})
    fig = plots.bars(frame, group="model", bar="placer", value="step_ms", ylabel="ms",
                     marked="oom", marked_label="out of memory")
    ax = fig.axes[0]
    heights = [p.get_height() for p in ax.patches]
    assert heights[:2] == [1.0, 3.0] and heights[2] == 2.0  # x: a, b; y: a (b missing)
    assert [p.get_hatch() for p in ax.patches][:3] == ["///", None, None]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["x", "y", "out of memory"]


def test_predicted_against_measured_one_series_per_label():
    frame = pd.DataFrame({"predicted_ms": [1.0, 2.0], "measured_ms": [1.5, 2.5],
                          "cost_model": ["static", "measured"]})
    fig = plots.predicted_vs_measured(frame, predicted="predicted_ms", measured="measured_ms",
                                      label="cost_model")
    ax = fig.axes[0]
    assert ax.get_xlabel() == "measured step (ms)" and ax.get_xscale() == "log"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "static", "measured", "predicted = measured"]
