"""Shared plumbing of the experiment scripts: each run's own folder and record, tables.

A script opens a :class:`Run` for its arguments; the run makes a new folder
``<out>/<script>/<UTC start time>/`` (never one an earlier run wrote), saves its tables
(CSV), plots (PNG) and other files there, and at the end writes ``run.json``: the
arguments, the package version and commit, Python, numpy and the BLAS, the machine
(:mod:`experiments.provenance`), the start and end times and how busy other programs
kept the machine meanwhile (:class:`experiments.machine_load.OtherLoad`).

>>> import tempfile, pandas as pd
>>> with tempfile.TemporaryDirectory() as tmp:
...     with Run("demo", {"repeats": 3}, out=tmp) as run:
...         path = run.save_table(pd.DataFrame({"step_ms": [1.5]}), "demo")
...     record = load_record(run.folder)
...     (path.name, record["script"], record["arguments"], record["status"])
('demo.csv', 'demo', {'repeats': 3}, 'ok')
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import sys
from pathlib import Path
from typing import Any, Mapping

import pandas as pd

__all__ = ["RESULTS_DIR", "RECORD_NAME", "Run", "finish", "load_record", "runs", "latest_run",
           "save_table", "print_table", "short_device", "per_device_frame", "per_device_MiB",
           "results_parser"]

_log = logging.getLogger(__name__)

#: The default ``--out``: a folder under the current directory (never the package's).
RESULTS_DIR = Path("results")
#: The name of each run's record in its folder.
RECORD_NAME = "run.json"


def short_device(name: str) -> str:
    """``/job:worker/replica:0/task:1/device:CPU:0`` -> ``worker:1/CPU:0``.

    >>> short_device("/job:worker/replica:0/task:1/device:CPU:0")
    'worker:1/CPU:0'
    """
    parts = dict(p.split(":", 1) for p in name.strip("/").split("/"))
    return f"{parts['job']}:{parts['task']}/{parts['device']}"


def per_device_frame(keys: Mapping[str, Any], columns: Mapping[str, Mapping[str, float]]
                     ) -> pd.DataFrame:
    """A tidy frame: one row per device, the ``keys`` repeated on each, one column per
    entry of ``columns`` (``{column: {device: value}}``; missing values are NaN).

    >>> per_device_frame({"placer": "simple"}, {"ops": {"/job:w/task:0/device:CPU:0": 3}})
       placer     device  ops
    0  simple  w:0/CPU:0    3
    """
    devices = sorted({d for values in columns.values() for d in values})
    rows = [{**keys, "device": short_device(d), **{c: v.get(d, float("nan"))
                                                   for c, v in columns.items()}}
            for d in devices]
    return pd.DataFrame(rows, columns=[*keys, "device", *columns])


def per_device_MiB(peaks: Mapping[str, int]) -> str:
    """``{device: bytes}`` as ``"worker:0/CPU:0=1.5, ps:0/CPU:0=0.25"`` (MiB, by device):
    for a printed line; tables take :func:`per_device_frame` instead.

    >>> per_device_MiB({"/job:ps/replica:0/task:0/device:CPU:0": 2**20})
    'ps:0/CPU:0=1'
    """
    return ", ".join(f"{short_device(d)}={b / 2**20:.3g}" for d, b in sorted(peaks.items()))


def results_parser(description: str) -> argparse.ArgumentParser:
    """The parser of a script not yet on :func:`experiments.cli.make_parser`: the common
    options (``--out DIR``, ``-v``/``--log-level``) and defaults in ``--help``."""
    from experiments import cli
    return cli.make_parser(None, description)


def _utc_now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _jsonable(value):
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return repr(value)


class Run:
    """One run of an experiment script: its own folder under ``out`` and its record.

    ``with Run(script, arguments, out=...) as run:`` makes the folder
    (``run.folder``), measures the machine's other load through the block and writes
    ``run.json`` when it ends (``"status": "error"`` and the error's text when the block
    raised).  ``arguments`` is a dict or an :class:`argparse.Namespace`.
    """

    def __init__(self, script: str, arguments: Mapping | argparse.Namespace,
                 out: Path | str = RESULTS_DIR, argv: list[str] | None = None):
        self.script = script
        self.arguments = dict(vars(arguments) if isinstance(arguments, argparse.Namespace)
                              else arguments)
        self.argv = list(sys.argv[1:] if argv is None else argv)
        self.out = Path(out)
        self.folder: Path | None = None
        self.files: list[str] = []
        self.summary: dict = {}

    def __enter__(self) -> "Run":
        from experiments.machine_load import OtherLoad

        self.started = _utc_now()
        stamp = self.started.strftime("%Y%m%dT%H%M%SZ")
        parent = self.out / self.script
        parent.mkdir(parents=True, exist_ok=True)
        for n in range(1, 1000):  # a second run within the same second: a new folder too
            folder = parent / (stamp if n == 1 else f"{stamp}-{n}")
            try:
                folder.mkdir()
            except FileExistsError:
                continue
            self.folder = folder
            break
        else:
            raise FileExistsError(f"no free run folder under {parent} for {stamp}")
        self._load = OtherLoad().__enter__()
        _log.info("run folder %s", self.folder)
        return self

    def path(self, name: str) -> Path:
        """The path of a file ``name`` in this run's folder (listed in the record)."""
        if self.folder is None:
            raise RuntimeError("the run has not started: use it in a with block")
        self.files.append(name)
        return self.folder / name

    def save_table(self, frame: pd.DataFrame, name: str) -> Path:
        """Write ``frame`` as CSV to ``<folder>/<name>.csv``."""
        path = self.path(f"{name}.csv")
        frame.to_csv(path, index=False)
        return path

    def save_figure(self, figure, name: str) -> Path:
        """Save a matplotlib figure as ``<folder>/<name>.png``."""
        path = self.path(f"{name}.png")
        figure.savefig(path, dpi=120, bbox_inches="tight")
        return path

    def __exit__(self, exc_type, exc, tb) -> None:
        from experiments import provenance

        self._load.__exit__(exc_type, exc, tb)
        ended = _utc_now()
        record = {
            "script": self.script,
            "argv": self.argv,
            "arguments": _jsonable(self.arguments),
            "status": "ok" if exc is None else "error",
            "error": None if exc is None else f"{type(exc).__name__}: {exc}",
            "started": self.started.isoformat(),
            "ended": ended.isoformat(),
            "seconds": (ended - self.started).total_seconds(),
            "other_cores": _nan_to_none(self._load.other_cores),
            "steal_cores": _nan_to_none(self._load.steal_cores),
            "files": self.files,
            "summary": _jsonable(self.summary),
            **provenance.software(),
            "machine": provenance.machine(),
        }
        (self.folder / RECORD_NAME).write_text(json.dumps(record, indent=2) + "\n")


def finish(run: Run, frame: pd.DataFrame) -> pd.DataFrame:
    """A script's last step: say where the run's record is and name the run's folder in
    ``frame.attrs["run_folder"]`` (for a caller of the script's ``main``)."""
    print(f"run record: {run.folder / RECORD_NAME}")
    frame.attrs["run_folder"] = run.folder
    return frame


def _nan_to_none(x: float):
    return None if x != x else x


def load_record(folder: Path | str) -> dict:
    """The record (``run.json``) of the run whose folder is ``folder``."""
    return json.loads((Path(folder) / RECORD_NAME).read_text())


def runs(out: Path | str = RESULTS_DIR, script: str | None = None) -> list[Path]:
    """The run folders under ``out`` (of ``script``, or of every script), oldest first
    by their start time."""
    pattern = f"{script or '*'}/*/{RECORD_NAME}"
    found = [p.parent for p in Path(out).glob(pattern)]
    return sorted(found, key=lambda f: (load_record(f)["started"], f.name))


def latest_run(out: Path | str, script: str) -> Path:
    """The folder of ``script``'s latest run under ``out``; FileNotFoundError if none."""
    found = runs(out, script)
    if not found:
        raise FileNotFoundError(f"no run of {script} under {out}")
    return found[-1]


def save_table(frame: pd.DataFrame, name: str, out_dir: Path | str | None = None) -> Path:
    """Write ``frame`` as CSV to ``<out_dir>/<name>.csv`` (default ``results/``): for a
    table outside a :class:`Run`."""
    out_dir = Path(out_dir or RESULTS_DIR)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.csv"
    frame.to_csv(path, index=False)
    return path


def print_table(frame: pd.DataFrame, title: str) -> None:
    """Print ``frame`` under a title, every column, floats to 4 significant digits."""
    with pd.option_context("display.max_columns", None, "display.width", 200,
                           "display.max_colwidth", 60, "display.float_format", "{:.4g}".format):
        print(f"\n== {title} ==")
        print(frame.to_string(index=False))
