"""The workload registry: every benchmark graph found by name.

``get(name, **options)`` builds a :class:`Workload`; the options are the builder's
keyword arguments (``batch``, ``layers``, ...), and an option out of range raises
ValueError naming it.  The literature's models (``resnet50``, ``inception_v3``,
``gnmt``, ``transformer``) are whole training steps at their published sizes by
default; the synthetic workloads (``mlp``, ``rnn``, ``inception_like``,
``transformer_like``, ``data_parallel``, ``random_dag``, ``mixed_random``) are small graphs of the basic
op set that run on this machine's executor.  Builders are imported when first asked for.

>>> names()  # doctest: +NORMALIZE_WHITESPACE
['data_parallel', 'gnmt', 'inception_like', 'inception_v3', 'mixed_random', 'mlp',
 'mlp_forward', 'random_dag', 'resnet50', 'rnn', 'transformer', 'transformer_like']
>>> get("mlp", batch=4, layers=2, width=8, inputs=8, outputs=2).name
'mlp_train'
"""

from __future__ import annotations

import gc
import importlib

from core.graph import Operation
from experiments.workloads.mlp import Workload

__all__ = ["names", "get", "parse_spec", "UnknownWorkload", "BUILDERS"]

#: name -> "module:function" of its builder (imported on first use).
BUILDERS: dict[str, str] = {
    "mlp": "experiments.workloads.mlp:mlp_training_step",
    "mlp_forward": "experiments.workloads.mlp:mlp_forward",
    "rnn": "experiments.workloads.models:rnn_training_step",
    "inception_like": "experiments.workloads.models:inception_training_step",
    "transformer_like": "experiments.workloads.models:transformer_training_step",
    "data_parallel": "experiments.workloads.models:data_parallel_step",
    "random_dag": "experiments.workloads.registry:random_dag_workload",
    "mixed_random": "experiments.workloads.mixed:mixed_random",
    "resnet50": "experiments.workloads.resnet:resnet50",
    "inception_v3": "experiments.workloads.inception_v3:inception_v3",
    "gnmt": "experiments.workloads.gnmt:gnmt",
    "transformer": "experiments.workloads.transformer:transformer",
}


class UnknownWorkload(KeyError):
    """A workload name the registry does not have (``name``, ``known``)."""

    def __init__(self, name):
        self.name, self.known = name, names()
        super().__init__(f"unknown workload {name!r}; known: {self.known}")

    def __str__(self) -> str:
        return self.args[0]


def names() -> list[str]:
    """The registered workload names, sorted."""
    return sorted(BUILDERS)


def builder(name: str):
    """The function that builds workload ``name``."""
    if name not in BUILDERS:
        raise UnknownWorkload(name)
    module, function = BUILDERS[name].split(":")
    return getattr(importlib.import_module(module), function)


def get(name: str, **options) -> Workload:
    """Build workload ``name`` with ``options`` (the builder's keyword arguments)."""
    build = builder(name)
    # A full-size model is tens of thousands of ops, each a handful of objects that live
    # as long as the graph: the cyclic collector would walk them again and again while
    # they are made, and none is garbage before the build returns (as sim.simulate).
    collecting = gc.isenabled()
    gc.disable()
    try:
        return build(**options)
    finally:
        if collecting:
            gc.enable()


def parse_spec(spec: str) -> tuple[str, dict]:
    """``(name, options)`` of a workload written ``name[:option=value]...`` on a command
    line; each value is a Python literal where it parses as one (``3``, ``0.5``,
    ``(1, 1, 1, 1)``, ``True``), else the text itself.

    >>> parse_spec("mixed_random:seed=3:matmul=128")
    ('mixed_random', {'seed': 3, 'matmul': 128})
    >>> parse_spec("resnet50:blocks=(1,1,1,1):optimizer=sgd")
    ('resnet50', {'blocks': (1, 1, 1, 1), 'optimizer': 'sgd'})
    """
    import ast
    name, *parts = spec.split(":")
    options = {}
    for part in parts:
        key, sep, text = part.partition("=")
        if not sep or not key:
            raise ValueError(f"workload option {part!r} of {spec!r} is not option=value")
        try:
            options[key] = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            options[key] = text
    return name, options


def random_dag_workload(num_ops: int = 1000, width: int = 32, seed: int = 0, size: int = 64,
                        reach: int = 3) -> Workload:
    """:func:`experiments.workloads.random_dag.random_layered_dag` as a Workload whose
    fetches are its ops without consumers.

    >>> w = random_dag_workload(50, width=5)
    >>> w.name, len(w.graph.get_operations())
    ('random_dag', 50)
    """
    from experiments.workloads.random_dag import random_layered_dag
    g = random_layered_dag(num_ops, width=width, seed=seed, size=size, reach=reach)
    sinks: list[Operation] = [op for op in g.get_operations()
                              if not any(t.consumers() for t in op.outputs)]
    return Workload("random_dag", g, sinks)
