"""experiments.bench_load: client threads stepping at once; the counter is exact."""

import pandas as pd

from experiments import bench_load


def test_bench_load_counts_every_step_exactly(tmp_path):
    frame = bench_load.main(["--in-process", "--threads", "3", "--seconds", "0.5",
                             "--out", str(tmp_path)])
    row = frame.iloc[0]
    assert row.steps > 0 and row.errors == 0
    assert row.counter == row.steps and bool(row.counter_exact)
    assert 0 < row.p50_ms <= row.p90_ms <= row.p99_ms <= row.max_ms
    assert row.steps_per_s > 0
    saved = pd.read_csv(tmp_path / "bench_load.csv")
    assert list(saved.columns) == list(frame.columns)
