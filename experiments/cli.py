"""The experiment scripts' command lines: one name for one thing, defaults in ``--help``.

Every script builds its parser with :func:`make_parser`: the options all scripts share
(``--out DIR``, ``-v``/``--log-level``) come from one parent parser, and the options
several share are declared once in :data:`SHARED` and taken by name, so ``--repeats``,
``--calibrate {full,quick,none}``, ``--seed``, ``--plot``, ``--workloads`` and
``--placers`` are spelled and checked the same way everywhere.  A script gives only its
own defaults, choices and help.  A bad option or value exits with status 2 and one line
on stderr, never a traceback (:class:`LabArgumentParser`).

The scripts run as ``python -m experiments.<name>`` or, installed, as
``placement-lab <command>`` (:func:`main`; ``placement-lab --help`` lists the commands).

>>> parser = make_parser("python -m example", "An example.", "repeats", "calibrate",
...                      defaults={"repeats": 3})
>>> args = parser.parse_args(["--calibrate", "quick", "-v"])
>>> args.repeats, args.calibrate, args.out, log_level(args)
(3, 'quick', 'results', 'INFO')
"""

from __future__ import annotations

import argparse
import contextvars
import importlib
import logging
import sys
from typing import Any, Sequence

__all__ = ["LabArgumentParser", "SHARED", "COMMANDS", "BENCHMARKS", "TOOLS", "make_parser",
           "parse", "log_level", "setup_logging", "positive_int", "main"]

_log = logging.getLogger(__name__)

#: The program name a script's parser shows; :func:`main` sets it to
#: ``placement-lab <command>`` while it runs a script.
_PROG: contextvars.ContextVar[str | None] = contextvars.ContextVar("prog", default=None)

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


class _Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults shown after each option's help (not for flags, counters and options
    without one); the description printed as written."""

    def _get_help_string(self, action):
        if (action.default is None or action.default is False
                or isinstance(action, argparse._CountAction)):
            return action.help
        return super()._get_help_string(action)


class LabArgumentParser(argparse.ArgumentParser):
    """An :class:`argparse.ArgumentParser` whose errors are one line and exit status 2.

    >>> parser = LabArgumentParser(prog="demo")
    >>> _ = parser.add_argument("--repeats", type=positive_int, default=1)
    >>> try:
    ...     parser.parse_args(["--repeats", "0"])
    ... except SystemExit as stop:
    ...     print("exit", stop.code)
    exit 2
    """

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def positive_int(text: str) -> int:
    """An argparse type: an integer of at least 1.

    >>> positive_int("3")
    3
    """
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _common() -> argparse.ArgumentParser:
    """The parent parser of every script: where results go and what is logged."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("--out", default="results", metavar="DIR",
                        help="folder under which each run writes its own folder: the CSV "
                             "tables, the plots and run.json, the run's record")
    group = parent.add_mutually_exclusive_group()
    group.add_argument("-v", "--verbose", action="count", default=0,
                       help="log progress (-v: INFO, -vv: DEBUG) on stderr")
    group.add_argument("--log-level", type=str.upper, choices=LOG_LEVELS, default=None,
                       help="the least severe log records shown on stderr (default WARNING)")
    return parent


#: The options several scripts share, by name: flags and argparse settings.  A script
#: takes them with :func:`make_parser` and gives its own default, choices or help.
SHARED: dict[str, tuple[tuple[str, ...], dict[str, Any]]] = {
    "repeats": (("--repeats",), dict(type=positive_int, metavar="N",
                                     help="timed repeats of each case")),
    "calibrate": (("--calibrate",), dict(choices=["full", "quick", "none"], default="full",
                                         help="measure this machine first (full, or quick: "
                                              "fewer and shorter micro-benchmarks) so that "
                                              "the placers and the simulator see it, or not "
                                              "(none: the preset figures)")),
    "seed": (("--seed",), dict(type=int, default=0, metavar="N",
                               help="seed of the random graphs")),
    "plot": (("--plot",), dict(action="store_true",
                               help="also save the report's pictures (PNG; needs matplotlib: "
                                    "pip install 'placement-lab[plot]')")),
    "workloads": (("--workloads",), dict(nargs="+", metavar="NAME",
                                         help="workloads to run")),
    "placers": (("--placers",), dict(nargs="+", metavar="NAME", help="placers to compare")),
}


def make_parser(prog: str | None, description: str, *shared: str, defaults: dict | None = None,
                choices: dict | None = None, helps: dict | None = None,
                types: dict | None = None) -> LabArgumentParser:
    """A script's parser: the common options, then the :data:`SHARED` ones named in
    ``shared`` with the script's ``defaults``, ``choices``, ``helps`` and ``types`` (a
    function checking and converting each value, e.g. a placer name) by name.

    ``prog`` is how the script is run (``python -m experiments.<name>``); under
    ``placement-lab <command>`` that name shows instead.

    >>> p = make_parser("python -m demo", "Demo.", "workloads",
    ...                 defaults={"workloads": ["mlp"]}, choices={"workloads": ["mlp", "rnn"]})
    >>> p.parse_args([]).workloads
    ['mlp']
    """
    defaults, choices, helps, types = defaults or {}, choices or {}, helps or {}, types or {}
    unknown = (set(shared) | set(defaults) | set(choices) | set(helps) | set(types)) - set(SHARED)
    if unknown:
        raise ValueError(f"not shared options: {sorted(unknown)}; known: {sorted(SHARED)}")
    parser = LabArgumentParser(prog=_PROG.get() or prog, description=description,
                               parents=[_common()])
    for name in shared:
        flags, settings = SHARED[name]
        settings = dict(settings)
        if name in defaults:
            settings["default"] = defaults[name]
        if name in choices:
            settings["choices"] = list(choices[name])
        if name in helps:
            settings["help"] = helps[name]
        if name in types:
            settings["type"] = types[name]
        if settings.get("choices") and settings.get("nargs") == "+":
            # A list of names: NAME in the usage, the names in the help.
            settings["help"] += f"; any of: {', '.join(map(str, settings['choices']))}"
        elif settings.get("choices"):
            settings.pop("metavar", None)  # argparse lists the choices instead
        parser.add_argument(*flags, **settings)
    return parser


def parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse a script's arguments and set up its logging (:func:`setup_logging`)."""
    args = parser.parse_args(argv)
    setup_logging(args)
    return args


def log_level(args: argparse.Namespace) -> str:
    """The level name ``-v``/``--log-level`` asked for (WARNING without either)."""
    if getattr(args, "log_level", None):
        return args.log_level
    return {0: "WARNING", 1: "INFO"}.get(getattr(args, "verbose", 0), "DEBUG")


def setup_logging(args: argparse.Namespace) -> None:
    """Show log records of ``args``' level on stderr.  A program that configured logging
    before calling a script's ``main`` keeps its handlers and, unless ``-v`` or
    ``--log-level`` was given, its level."""
    root = logging.getLogger()
    explicit = bool(getattr(args, "verbose", 0) or getattr(args, "log_level", None))
    if not root.handlers:
        logging.basicConfig(format="%(levelname)s %(name)s: %(message)s")
    elif not explicit:
        return
    root.setLevel(log_level(args))


#: ``placement-lab <command>``: the module of each experiment script.
COMMANDS = {
    "compare": "compare_placers",
    "sim-vs-real": "sim_vs_real",
    "sim-vs-inprocess": "sim_vs_inprocess",
    "ps-sharding": "ps_sharding",
    "threads": "threads",
    "cpu-accounting": "cpu_accounting",
    "calibration-spread": "calibration_spread",
}

#: ``placement-lab benchmark <name>``: the module of each benchmark.
BENCHMARKS = {
    "kernels": "bench_kernels",
    "load": "bench_load",
    "models": "bench_models",
    "placement": "bench_placement",
    "placers": "bench_placers",
    "runtime": "bench_runtime",
    "sim": "bench_sim",
    "wire": "bench_wire",
}


#: ``placement-lab <command>``: tools over the runs' records (not experiments).
TOOLS = {"summary": "results_summary", "repredict": "repredict"}


#: Scripts that time kernels in their own process, and set its BLAS threads and OpenMP
#: wait policy before numpy loads (as the servers run); ``python -m`` does it in the
#: script, :func:`main` before importing it.
_BLAS_BEFORE_NUMPY = {"sim_vs_real", "sim_vs_inprocess", "cpu_accounting", "calibration_spread",
                      "bench_kernels"}


def _option(argv: Sequence[str], flag: str, default: str) -> str:
    return argv[argv.index(flag) + 1] if flag in argv[:-1] else default


def _blas_env(argv: Sequence[str]) -> None:
    import os

    blas = _option(argv, "--blas-threads", "1")
    if blas != "0":
        os.environ.setdefault("OPENBLAS_NUM_THREADS", blas)
    omp = _option(argv, "--omp-wait-policy", "passive")
    if omp:
        os.environ.setdefault("OMP_WAIT_POLICY", omp)


def _usage() -> str:
    lines = ["usage: placement-lab <command> [options]   (placement-lab <command> --help)",
             "", "commands:"]
    for name, module in COMMANDS.items():
        lines.append(f"  {name:<20} python -m experiments.{module}")
    lines.append(f"  {'benchmark <name>':<20} one of: {', '.join(BENCHMARKS)} "
                 "(python -m experiments.bench_<name>)")
    for name, module in TOOLS.items():
        lines.append(f"  {name:<20} python -m experiments.{module}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """``placement-lab <command> [options]``: run one experiment script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    prog = f"placement-lab {command}"
    if command == "benchmark":
        if not rest or rest[0] not in BENCHMARKS:
            got = f" {rest[0]!r}" if rest else ""
            print(f"placement-lab benchmark: error: unknown benchmark{got}; choose from "
                  f"{', '.join(BENCHMARKS)}", file=sys.stderr)
            return 2
        module, prog, rest = BENCHMARKS[rest[0]], f"{prog} {rest[0]}", rest[1:]
    elif command in COMMANDS or command in TOOLS:
        module = COMMANDS.get(command) or TOOLS[command]
    else:
        print(f"placement-lab: error: unknown command {command!r}; choose from "
              f"{', '.join([*COMMANDS, 'benchmark', *TOOLS])}", file=sys.stderr)
        return 2
    if module in _BLAS_BEFORE_NUMPY and "numpy" not in sys.modules:
        _blas_env(rest)
    script = importlib.import_module(f"experiments.{module}")
    token = _PROG.set(prog)
    try:
        result = script.main(rest)
    finally:
        _PROG.reset(token)
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
