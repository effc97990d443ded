"""The documentation runs: module doctests, the README's Python examples, and its command
lines parse with the scripts' own parsers."""

import doctest
import importlib
import pkgutil
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC_PACKAGES = ["core", "placers", "sim", "runtime", "experiments"]


def _modules():
    """Every module of every package, subpackages' included."""
    for package in DOC_PACKAGES:
        pkg = importlib.import_module(package)
        yield package
        for info in pkgutil.walk_packages(pkg.__path__, prefix=f"{package}."):
            yield info.name


@pytest.mark.parametrize("module_name", sorted(_modules()))
def test_doctests(module_name):
    module = importlib.import_module(module_name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0


def _readme_blocks():
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


@pytest.mark.parametrize("index", range(len(_readme_blocks())))
def test_readme_examples_run(index):
    exec(compile(_readme_blocks()[index], f"README.md block {index}", "exec"), {})


def _readme_commands():
    """Each experiment command line of the README (its shell blocks and inline code), as
    an argv list (``python -m experiments.<name> ...`` or ``placement-lab ...``)."""
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```(?:bash|sh|console)\n(.*?)```", text, flags=re.S)
    blocks += re.findall(r"(?<!`)`((?:python -m experiments\.|placement-lab )[^`]*)`", text)
    for block in blocks:
        for line in block.splitlines():
            for part in line.split("&&"):
                words = shlex.split(part, comments=True)
                if "-m" in words and words[words.index("-m") + 1].startswith("experiments."):
                    yield words[words.index("-m") + 1:]
                elif words and words[0] == "placement-lab":
                    yield words


class _Parsed(Exception):
    pass


@pytest.mark.parametrize("argv", list(_readme_commands()), ids=" ".join)
def test_readme_command_lines_parse(argv, monkeypatch):
    """The options and values each command line of the README gives exist (parsed by
    the script's own parser, nothing run)."""
    from experiments import cli

    def parse_only(parser, args):
        parser.parse_args(args)
        raise _Parsed

    monkeypatch.setattr(cli, "parse", parse_only)
    if argv[0] == "placement-lab":
        call = lambda: cli.main(argv[1:])  # noqa: E731
    else:
        script = importlib.import_module(argv[0])
        call = lambda: script.main(argv[1:])  # noqa: E731
    try:
        result = call()
    except _Parsed:
        return
    # Only ``placement-lab --help`` answers without a script's parser.
    assert argv == ["placement-lab", "--help"] and result == 0


def test_the_readme_and_ci_run_the_same_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    assert "pip install --quiet -e '.[dev]'" in ci and "-m pytest" in ci
    assert "pip install -e '.[dev]' && .venv/bin/python -m pytest" in readme


def test_the_readme_pictures_exist():
    text = (ROOT / "README.md").read_text()
    pictures = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert all((ROOT / p).is_file() for p in pictures), pictures
