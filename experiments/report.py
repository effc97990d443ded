"""Shared plumbing of the experiment scripts: where results go and how tables print."""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

__all__ = ["RESULTS_DIR", "save_table", "print_table", "results_parser", "short_device",
           "per_device_MiB"]

RESULTS_DIR = Path("results")


def short_device(name: str) -> str:
    """``/job:worker/replica:0/task:1/device:CPU:0`` -> ``worker:1/CPU:0``."""
    parts = dict(p.split(":", 1) for p in name.strip("/").split("/"))
    return f"{parts['job']}:{parts['task']}/{parts['device']}"


def per_device_MiB(peaks: dict) -> str:
    """``{device: bytes}`` as ``"worker:0/CPU:0=1.5, ps:0/CPU:0=0.25"`` (MiB, by device)."""
    return ", ".join(f"{short_device(d)}={b / 2**20:.3g}" for d, b in sorted(peaks.items()))


def save_table(frame: pd.DataFrame, name: str, out_dir: Path | str | None = None) -> Path:
    """Write ``frame`` as CSV to ``<out_dir>/<name>.csv`` (default ``results/``)."""
    out_dir = Path(out_dir or RESULTS_DIR)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.csv"
    frame.to_csv(path, index=False)
    return path


def print_table(frame: pd.DataFrame, title: str) -> None:
    with pd.option_context("display.max_columns", None, "display.width", 200,
                           "display.max_colwidth", 60, "display.float_format", "{:.4g}".format):
        print(f"\n== {title} ==")
        print(frame.to_string(index=False))


def results_parser(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", default=str(RESULTS_DIR),
                        help="folder for the CSV (and PNG) results (default: results/)")
    return parser
