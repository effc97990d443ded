"""The results pages, generated from the runs' records (never edited by hand).

Reads the latest successful run of each script under ``--runs`` (the folders
:class:`experiments.report.Run` wrote: ``run.json`` and the CSV tables) and writes:

* ``<docs>/results.md``: per script, where and how its latest run ran (date, commit,
  machine, command line, how busy other programs kept the machine) and its tables;
* the headline table of the README, between its ``<!-- results:begin -->`` and
  ``<!-- results:end -->`` lines (:func:`headlines`: one line per finding);
* the README's pictures, copied from the same runs into ``<docs>/``
  (:data:`PICTURES`).

A script with no run under ``--runs`` (``results/`` is not kept in git, so a fresh
checkout has only its own runs) keeps what the pages said of it: its section of the
existing ``results.md``, verbatim, and the README rows of that section's run
(:func:`kept_sections`, :func:`kept_rows`).  Nothing measured before is lost by
summarising today's runs.

    python -m experiments.results_summary --runs results --docs docs --readme README.md

>>> rows = [{"what": "main job", "figure": "1.5 ms"}]
>>> print(markdown_table(rows))
| what | figure |
| --- | --- |
| main job | 1.5 ms |
"""

from __future__ import annotations

import datetime as dt
import math
import re
import shutil
from pathlib import Path
from typing import Callable, Iterable

import pandas as pd

from experiments import cli
from experiments.report import RECORD_NAME, load_record, runs

__all__ = ["latest_runs", "run_key", "headlines", "markdown_table", "results_page", "update_readme",
           "copy_pictures", "kept_sections", "kept_rows", "PICTURES", "main"]

BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"
#: Rows of a table shown in results.md before it is cut (the CSV has them all).
MAX_ROWS = 40


#: Scripts whose runs on different backends are different findings (sim_vs_real on this
#: lab's runtime and on TensorFlow's): the latest run of each backend is kept.
BY_BACKEND = {"sim_vs_real"}

#: Scripts whose runs on a machine with a GPU measure another executor (the sessions put
#: the ops on the GPU: sim_vs_inprocess checks the CUDA path there): the latest run with
#: a GPU and the latest without are each kept.
BY_GPU = {"sim_vs_inprocess"}


def run_key(record: dict) -> str:
    """What a run is the latest of: its script, and for the scripts of
    :data:`BY_BACKEND` the backend it ran on other than the default runtime
    (``"sim_vs_real:tensorflow"``), for those of :data:`BY_GPU` whether its machine had
    a GPU (``"sim_vs_inprocess:gpu"``)."""
    backend = (record.get("arguments") or {}).get("backend", "runtime")
    if record["script"] in BY_BACKEND and backend != "runtime":
        return f"{record['script']}:{backend}"
    if record["script"] in BY_GPU and _gpus(record):
        return f"{record['script']}:gpu"
    return record["script"]


def _gpus(record: dict) -> list:
    return (record.get("machine") or {}).get("gpus") or []


def latest_runs(out: Path | str) -> dict[str, Path]:
    """The folder of each script's latest run under ``out`` that ended well (per backend
    for the scripts of :data:`BY_BACKEND`; :func:`run_key`)."""
    latest: dict[str, Path] = {}
    for folder in runs(out):  # oldest first
        record = load_record(folder)
        if record.get("status") == "ok":
            latest[run_key(record)] = folder
    return latest


def _cell(value) -> str:
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.4g}"
    return str(value).replace("|", "\\|")


def markdown_table(rows: Iterable[dict] | pd.DataFrame) -> str:
    """A GitHub markdown table of dict rows (or a frame); floats to 4 digits."""
    frame = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows))
    lines = ["| " + " | ".join(map(str, frame.columns)) + " |",
             "| " + " | ".join("---" for _ in frame.columns) + " |"]
    for row in frame.itertuples(index=False):
        lines.append("| " + " | ".join(_cell(v) for v in row) + " |")
    return "\n".join(lines)


def _when(record: dict) -> str:
    started = dt.datetime.fromisoformat(record["started"])
    return started.strftime("%Y-%m-%d %H:%M UTC")


def _machine(record: dict) -> str:
    m = record.get("machine", {})
    gpus = "".join(f", {gpu}" for gpu in _gpus(record))
    return f"{m.get('cpu_model', '?')}, {m.get('usable_cores', '?')} cores{gpus}"


def _run_label(record: dict) -> str:
    """When and where a run ran, and how much of the machine others took meanwhile: other
    programs, and the hypervisor (``steal``) where it took a tenth of a core or more (on
    a virtual machine whose host is busy the guest's own speed drops, which no count of
    its own programs shows)."""
    other, steal = record.get("other_cores"), record.get("steal_cores")
    busy = "" if other is None else f", other programs {other:.1f} cores"
    if steal is not None and steal >= 0.1:
        busy += f", hypervisor {steal:.1f} cores"
    return f"{_when(record)}, {_machine(record)}{busy}"


def _compare_placers(folder: Path, record: dict) -> list[dict]:
    frame = pd.read_csv(folder / "compare_placers.csv")
    key = next(c for c in ("real_step_ms", "sim_step_ms", "est_step_ms") if c in frame)
    kind = {"real_step_ms": "measured", "sim_step_ms": "predicted",
            "est_step_ms": "estimated"}[key]
    rows = []
    for workload, part in frame.groupby("workload", sort=False):
        best = part[key].min()
        figures = ", ".join(f"{r.placer} {getattr(r, key):.3g}" + ("*" if getattr(r, key) == best
                                                                    else "")
                            for r in part.itertuples())
        rows.append({"what": f"compare_placers, {workload}: step per placer",
                     "figure": f"{figures} ms {kind} (* the best)", "run": _run_label(record)})
    return rows


def _sim_vs_real(folder: Path, record: dict) -> list[dict]:
    summary = pd.read_csv(folder / "sim_vs_real_summary.csv")
    backend = (record.get("arguments") or {}).get("backend", "runtime")
    return [{"what": f"sim_vs_real on {backend}, {row.cost_model} costs",
             "figure": f"median |error| {row.median_abs_error:.0%} over {row.rows} "
                       f"placements, ranked {row.ranked_same}/{row.ranked_pairs} pairs alike",
             "run": _run_label(record)} for row in summary.itertuples()]


def _sim_vs_inprocess(folder: Path, record: dict) -> list[dict]:
    row = pd.read_csv(folder / "sim_vs_inprocess_summary.csv").iloc[0]
    where = ", every op on the GPU" if _gpus(record) else ""
    return [{"what": f"sim_vs_inprocess, calibrate() then simulate(){where}",
             "figure": f"median |error| {row.median_abs_error:.0%}, max {row.max_abs_error:.0%} "
                       f"({row.worst}) over {row.rows} graphs; median spreads: repeat "
                       f"{row.median_repeat_spread:.0%}, calibration "
                       f"{row.median_calibration_spread:.0%}",
             "run": _run_label(record)}]


def _bench_placers(folder: Path, record: dict) -> list[dict]:
    frame = pd.read_csv(folder / "bench_placers.csv")
    largest = frame[frame.ops == frame.ops.max()]
    figure = ", ".join(f"{r.placer} {r.ops_per_s:,.0f}" for r in largest.itertuples())
    return [{"what": f"bench_placers, ops placed per second at {largest.ops.iloc[0]:,} ops",
             "figure": figure, "run": _run_label(record)}]


def _bench_sim(folder: Path, record: dict) -> list[dict]:
    frame = pd.read_csv(folder / "bench_sim.csv")
    largest = frame[frame.ops == frame.ops.max()]
    figure = ", ".join(f"{r.devices} devices {r.ops_per_s:,.0f}" for r in largest.itertuples())
    return [{"what": f"bench_sim, ops simulated per second at {largest.ops.iloc[0]:,} ops",
             "figure": figure, "run": _run_label(record)}]


def _bench_placement(folder: Path, record: dict) -> list[dict]:
    frame = pd.read_csv(folder / "bench_placement.csv")
    rows = []
    for (model, cluster), part in frame.groupby(["model", "cluster"], sort=False):
        fits = part[(part.oom == False) & part.sim_step_ms.notna()]  # noqa: E712
        figures = ", ".join(
            f"{r.placer} " + ("no placement" if r.sim_step_ms != r.sim_step_ms else
                              f"{r.sim_step_ms:.3g}" + (" (OOM)" if r.oom == True else ""))  # noqa: E712
            for r in part.itertuples())
        best = (f"; fastest that fits: {fits.loc[fits.sim_step_ms.idxmin()].placer}"
                if len(fits) else "; none fits")
        rows.append({"what": f"bench_placement, {model} on {cluster}: simulated step (ms)",
                     "figure": figures + best, "run": _run_label(record)})
    return rows


#: The headline rows each script's latest run gives the README.
HEADLINES: dict[str, Callable[[Path, dict], list[dict]]] = {
    "compare_placers": _compare_placers,
    "sim_vs_real": _sim_vs_real,
    "sim_vs_inprocess": _sim_vs_inprocess,
    "bench_placement": _bench_placement,
    "bench_placers": _bench_placers,
    "bench_sim": _bench_sim,
}

#: The README's pictures: (script, a glob of its run's files, the name in docs/).
PICTURES = [
    ("compare_placers", "gantt_mlp_*.png", "gantt_mlp.png"),
    ("bench_placement", "bench_placement.png", "bench_placement.png"),
]


def headlines(latest: dict[str, Path]) -> list[dict]:
    """One row per finding of the latest runs (scripts in :data:`HEADLINES` order)."""
    rows = []
    for script, summarise in HEADLINES.items():
        for key in sorted(k for k in latest if k.split(":")[0] == script):
            rows += summarise(latest[key], load_record(latest[key]))
    return rows


def kept_sections(page: str, latest: dict[str, Path]) -> dict[str, str]:
    r"""The sections (``## key`` to the next) of an earlier ``results.md`` whose run key
    has no run in ``latest``, by key.

    >>> page = "# Results\n\nintro\n\n## a\n\n- run: x\n\n## b\n\n- run: y\n"
    >>> kept_sections(page, {"a": Path("runs/a")})
    {'b': '## b\n\n- run: y'}
    """
    sections = re.split(r"^(?=## )", page, flags=re.M)[1:]
    kept = {}
    for section in sections:
        key = section.split("\n", 1)[0][3:].strip()
        if key not in latest:
            kept[key] = section.rstrip()
    return kept


def _section_run(section: str) -> str | None:
    """The run label of a results.md section (its ``- run:`` line, less the seconds)."""
    found = re.search(r"^- run: (.*), \d+ s$", section, flags=re.M)
    return found.group(1) if found else None


def kept_rows(readme_text: str, sections: dict[str, str]) -> list[dict]:
    r"""The rows of the README's headline table that came from the runs of ``sections``
    (matched by the run label they share), as dicts.

    >>> text = ("x\n<!-- results:begin -->\n| what | figure | run |\n| --- | --- | --- |\n"
    ...         "| b, error | median \\|error\\| 5% | R1 |\n| a | 1 | R2 |\n<!-- results:end -->\n")
    >>> kept_rows(text, {"b": "## b\n\n- run: R1, 12 s"})
    [{'what': 'b, error', 'figure': 'median |error| 5%', 'run': 'R1'}]
    """
    runs = {_section_run(s) for s in sections.values()} - {None}
    found = re.search(re.escape(BEGIN) + r"\n(.*?)\n" + re.escape(END), readme_text, flags=re.S)
    if not runs or not found:
        return []
    lines = found.group(1).splitlines()
    if len(lines) < 2 or not lines[0].startswith("|"):
        return []
    header = [c.strip() for c in lines[0].strip("| ").split(" | ")]
    rows = []
    for line in lines[2:]:
        cells = re.split(r"(?<!\\) \| ", line.strip()[2:-2])
        row = dict(zip(header, (c.replace("\\|", "|") for c in cells)))  # (as written)
        if row.get("run") in runs:
            rows.append(row)
    return rows


def results_page(latest: dict[str, Path], kept: dict[str, str] | None = None) -> str:
    """``results.md``: each script's latest run, its provenance and its tables; and the
    ``kept`` sections (:func:`kept_sections`) of scripts without one, as they were."""
    kept = kept or {}
    parts = ["# Results", "",
             "Generated by `python -m experiments.results_summary` from the latest run of "
             "each script (its `run.json` and CSV tables); do not edit by hand.", ""]
    for script in sorted({*latest, *kept}):
        if script not in latest:
            parts += [kept[script], ""]
            continue
        folder = latest[script]
        record = load_record(folder)
        commit = record.get("commit") or {}
        sha = commit.get("sha", "")[:10] + (" (changed files)" if commit.get("dirty") else "")
        parts += [f"## {script}", "",
                  f"- run: {_run_label(record)}, {record['seconds']:.0f} s",
                  f"- command: `python -m experiments.{script} {' '.join(record['argv'])}`",
                  f"- version: {record['package']['version']}"
                  + (f", commit {sha}" if sha else ""),
                  f"- Python {record['python']['version']}, numpy {record['numpy']}, BLAS "
                  + (", ".join(f"{b['internal_api']} {b['version']} ({b['num_threads']} threads)"
                               for b in record.get("blas", []) if b.get("user_api") == "blas")
                     or "unknown"), ""]
        for name in record["files"]:
            if not name.endswith(".csv"):
                continue
            frame = pd.read_csv(folder / name)
            shown = frame.head(MAX_ROWS)
            parts += [f"### {name}", "", markdown_table(shown), ""]
            if len(frame) > len(shown):
                parts += [f"({len(frame) - len(shown)} more rows in the CSV)", ""]
    return "\n".join(parts).rstrip() + "\n"


def update_readme(readme: Path, rows: list[dict]) -> bool:
    """Put the headline table between the README's markers; False if it has none."""
    text = readme.read_text()
    pattern = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), flags=re.S)
    if not pattern.search(text):
        return False
    table = markdown_table(rows) if rows else "(no runs yet)"
    readme.write_text(pattern.sub(lambda _: f"{BEGIN}\n{table}\n{END}", text))
    return True


def copy_pictures(latest: dict[str, Path], docs: Path) -> list[Path]:
    """Copy the README's pictures (:data:`PICTURES`) from the latest runs into ``docs``."""
    copied = []
    for script, pattern, name in PICTURES:
        if script not in latest:
            continue
        found = sorted(latest[script].glob(pattern))
        if found:
            copied.append(Path(shutil.copyfile(found[0], docs / name)))
    return copied


def main(argv=None) -> int:
    parser = cli.LabArgumentParser(prog="python -m experiments.results_summary",
                                   description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", default="results", metavar="DIR",
                        help="the --out folder of the runs to summarise")
    parser.add_argument("--docs", default="docs", metavar="DIR",
                        help="where results.md and the pictures go")
    parser.add_argument("--readme", default="README.md",
                        help="the README whose headline table is replaced")
    args = cli.parse(parser, argv)
    latest = latest_runs(args.runs)
    if not latest:
        parser.error(f"no finished runs under {args.runs} (no */*/{RECORD_NAME})")
    docs = Path(args.docs)
    docs.mkdir(parents=True, exist_ok=True)
    page, readme = docs / "results.md", Path(args.readme)
    kept = kept_sections(page.read_text(), latest) if page.exists() else {}
    rows = headlines(latest)
    if readme.exists():
        rows = _in_script_order(rows + kept_rows(readme.read_text(), kept))
    page.write_text(results_page(latest, kept))
    print(f"wrote {page} from {len(latest)} runs"
          + (f", keeping the sections of {', '.join(sorted(kept))}" if kept else ""))
    for path in copy_pictures(latest, docs):
        print(f"wrote {path}")
    if readme.exists() and update_readme(readme, rows):
        print(f"updated the headline table of {args.readme}")
    return 0


def _in_script_order(rows: list[dict]) -> list[dict]:
    """``rows`` by their script's place in :data:`HEADLINES` (a row's ``what`` starts
    with its script's name), each script's rows in their order."""
    order = {script: i for i, script in enumerate(HEADLINES)}

    def place(row):
        script = re.split(r"[ ,]", row["what"], maxsplit=1)[0]
        return order.get(script, len(order))

    return sorted(rows, key=place)


if __name__ == "__main__":
    raise SystemExit(main())
