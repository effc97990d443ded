"""The documentation runs: module doctests and the README's Python examples."""

import doctest
import importlib
import pkgutil
import re
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
