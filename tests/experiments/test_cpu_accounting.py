"""cpu_accounting: the simulator's booked host CPU per task beside the processes' own."""

from __future__ import annotations

import pandas as pd
import pytest

from experiments import cpu_accounting
from experiments.backends import this_host_cluster


def test_rows_per_task_and_the_client(tmp_path):
    frame, figures = cpu_accounting.run(["mlp"], ["simple", "round_robin_vars"], steps=3,
                                        cluster=this_host_cluster(), progress=False)
    assert figures == {}  # a given cluster: no calibration
    assert list(frame.columns) == cpu_accounting.COLUMNS
    tasks = {"/job:ps/replica:0/task:0", "/job:worker/replica:0/task:0",
             "/job:worker/replica:0/task:1", "client"}
    for placer in ("simple", "round_robin_vars"):
        rows = frame[frame.placer == placer].set_index("task")
        assert set(rows.index) == tasks
        assert rows.loc["client", "booked_ms"] == 0  # the model books it on the master
        assert (rows.used_ms >= 0).all() and (rows.fastest_step_ms > 0).all()
    simple = frame[frame.placer == "simple"].set_index("task")
    # mlp's simple placement runs on worker 0 alone: only it is booked.
    assert simple.loc["/job:worker/replica:0/task:0", "booked_ms"] > 0
    assert simple.drop(index="/job:worker/replica:0/task:0").booked_ms.sum() == 0
    spread = frame[frame.placer == "round_robin_vars"].set_index("task")
    assert (spread.drop(index="client").booked_ms > 0).all()  # variables on every task
    summary = cpu_accounting.totals(frame)
    assert len(summary) == 2
    assert summary.booked_ms.to_numpy() == pytest.approx(
        frame.groupby("placer", sort=False).booked_ms.sum().to_numpy())


def test_the_script_checks_its_steps(capsys):
    with pytest.raises(SystemExit):
        cpu_accounting.main(["--steps", "0"])
    assert "--steps" in capsys.readouterr().err
