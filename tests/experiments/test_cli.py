"""Every experiment script's command line: the shared options spelled one way, defaults
in --help, one-line errors with exit status 2, and the placement-lab command."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from experiments import cli

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted({*cli.COMMANDS.values(), *cli.BENCHMARKS.values()})
#: Spellings the shared options replaced: none may come back.
RETIRED = {"--repeat", "--rounds", "--quick", "--no-calibrate", "--seeds", "--output", "-o"}


class _Parsed(Exception):
    def __init__(self, parser):
        self.parser = parser


def parser_of(module_name: str, monkeypatch) -> argparse.ArgumentParser:
    """The parser a script builds, caught before it parses anything."""
    def catch(parser, argv):
        raise _Parsed(parser)

    monkeypatch.setattr(cli, "parse", catch)
    script = importlib.import_module(f"experiments.{module_name}")
    with pytest.raises(_Parsed) as caught:
        script.main([])
    return caught.value.parser


@pytest.mark.parametrize("module_name", SCRIPTS)
def test_shared_options_have_one_name_everywhere(module_name, monkeypatch):
    parser = parser_of(module_name, monkeypatch)
    flags = {flag: action for action in parser._actions for flag in action.option_strings}
    assert {"--out", "-v", "--verbose", "--log-level"} <= set(flags)
    assert flags["--out"].default == "results"
    assert not RETIRED & set(flags), f"{module_name} uses {RETIRED & set(flags)}"
    for action in parser._actions:
        if action.dest in cli.SHARED:
            shared_flags, settings = cli.SHARED[action.dest]
            assert tuple(action.option_strings) == shared_flags
            if "type" in settings and action.dest != "placers":
                assert action.type is settings["type"]
            if action.dest == "calibrate":
                assert set(action.choices) <= {"full", "quick", "none"}


@pytest.mark.parametrize("module_name", SCRIPTS)
def test_help_shows_every_default(module_name, monkeypatch):
    parser = parser_of(module_name, monkeypatch)
    text = " ".join(parser.format_help().split())
    for action in parser._actions:
        if action.default in (None, False, argparse.SUPPRESS) or action.dest == "verbose":
            continue
        help_text = " ".join((action.help % vars(action) if "%" in (action.help or "")
                              else action.help or "").split())
        assert f"{help_text} (default: " in text, (module_name, action.dest)


def test_a_bad_value_exits_2_with_one_line():
    done = subprocess.run([sys.executable, "-m", "experiments.bench_placers", "--repeats", "0"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "--repeats" in done.stderr and "at least 1" in done.stderr


@pytest.mark.parametrize("argv", [["--workloads", "nope"], ["--cluster", "missing.json"],
                                  ["--backend", "gpu"], ["--nonsense"]])
def test_compare_placers_refuses_bad_arguments_in_one_line(argv, capsys):
    from experiments import compare_placers
    with pytest.raises(SystemExit) as stop:
        compare_placers.main(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("python -m experiments.compare_placers: error:")


def test_the_placement_lab_command(capsys):
    assert cli.main(["--help"]) == 0
    listing = capsys.readouterr().out
    assert all(name in listing for name in cli.COMMANDS)
    with pytest.raises(SystemExit) as stop:
        cli.main(["compare", "--help"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.startswith("usage: placement-lab compare ")
    with pytest.raises(SystemExit):
        cli.main(["benchmark", "placers", "--help"])
    assert capsys.readouterr().out.startswith("usage: placement-lab benchmark placers ")
    assert cli.main(["benchmark", "nope"]) == 2
    assert cli.main(["nope"]) == 2
    assert capsys.readouterr().err.count("\n") == 2


def test_the_command_runs_a_script(tmp_path):
    assert cli.main(["benchmark", "placers", "--sizes", "50", "--placers", "simple",
                     "--out", str(tmp_path)]) == 0
    assert list(tmp_path.glob("bench_placers/*/bench_placers.csv"))


def test_log_levels():
    parser = cli.make_parser("demo", "Demo.")
    assert cli.log_level(parser.parse_args([])) == "WARNING"
    assert cli.log_level(parser.parse_args(["-vv"])) == "DEBUG"
    assert cli.log_level(parser.parse_args(["--log-level", "error"])) == "ERROR"
    with pytest.raises(SystemExit):
        parser.parse_args(["-v", "--log-level", "INFO"])


def test_the_command_line_layer_leaves_numpy_unloaded():
    """Scripts set their BLAS threads before numpy loads: importing the package and the
    command-line layer must not load it."""
    code = "import sys, experiments, experiments.cli; print('numpy' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.stdout.strip() == "False", done.stderr
