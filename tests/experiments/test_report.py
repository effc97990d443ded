"""A run's folder and record: its own folder every time, and what the record holds."""

from __future__ import annotations

import datetime as dt
import platform

import numpy as np
import pandas as pd
import pytest

from experiments.report import RECORD_NAME, Run, latest_run, load_record, runs


def test_each_run_has_its_own_folder_and_a_full_record(tmp_path):
    folders = []
    for i in range(2):  # within one second: two folders all the same
        with Run("demo", {"repeats": i}, out=tmp_path, argv=["--repeats", str(i)]) as run:
            run.save_table(pd.DataFrame({"step_ms": [1.0 + i]}), "demo")
        folders.append(run.folder)
    assert folders[0] != folders[1] and runs(tmp_path, "demo") == folders
    assert latest_run(tmp_path, "demo") == folders[1]
    assert pd.read_csv(folders[0] / "demo.csv").step_ms.tolist() == [1.0]
    record = load_record(folders[1])
    assert record["argv"] == ["--repeats", "1"] and record["arguments"] == {"repeats": 1}
    assert record["files"] == ["demo.csv"] and record["status"] == "ok"
    started, ended = (dt.datetime.fromisoformat(record[k]) for k in ("started", "ended"))
    assert started <= ended and started.tzinfo is not None
    assert record["python"]["version"] == platform.python_version()
    assert record["numpy"] == np.__version__
    assert record["package"]["name"] == "placement-lab" and record["package"]["version"]
    machine = record["machine"]
    assert machine["logical_cores"] >= machine["usable_cores"] >= 1
    assert machine["memory_bytes"] > 0 and isinstance(machine["gpus"], list)
    assert isinstance(record["blas"], list)
    # The BLAS the runtime's MatMul calls (scipy's, through numba) is named, with its file.
    ours = [lib for lib in record["blas"] if lib["used_by"] == "runtime"]
    assert len(ours) == 1 and ours[0]["internal_api"] and ours[0]["filepath"]
    assert record["other_cores"] is None or record["other_cores"] >= 0


def test_a_failed_run_says_so_in_its_record(tmp_path):
    with pytest.raises(ValueError):
        with Run("demo", {}, out=tmp_path, argv=[]) as run:
            raise ValueError("bad input")
    record = load_record(run.folder)
    assert record["status"] == "error" and record["error"] == "ValueError: bad input"
    assert (run.folder / RECORD_NAME).exists()
