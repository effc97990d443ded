"""The placer contract and the registry of placers by name.

Contract (every placer, numbered as TensorFlow's ``placer.h`` numbers its rules):

1. ``place(graph, cluster, *, previous=None) -> Placement`` places every op of ``graph``;
   ops in ``previous`` keep their device and come first in the result, in their order;
   new ops follow in creation order.
2. Constraints are resolved once by :func:`placers.constraints.resolve`; a placer only
   chooses, for each colocation group not fixed by ``previous``, one of
   ``group.feasible``.
3. The graph is never changed.  The same input gives the same placement, whatever the
   order of the cluster's device list.
4. With ``log_device_placement`` each newly placed op is logged as ``name: device``, an
   INFO record of the ``placers.base`` logger (on stderr when the program configured no
   logging: :func:`core.placement.log_placement`), or passed to ``log`` when one is
   given; a run that places nothing logs nothing.
"""

from __future__ import annotations

import logging
from typing import Callable, Protocol, runtime_checkable

from core.graph import Graph
from core.placement import Placement, log_placement
from placers.constraints import Constraints, resolve

__all__ = ["Placer", "BasePlacer", "register", "get", "names", "UnknownPlacer"]

_log = logging.getLogger(__name__)


@runtime_checkable
class Placer(Protocol):
    """Anything with ``place(graph, cluster, *, previous=None) -> Placement``."""

    def place(self, graph: Graph, cluster, *, previous: Placement | None = None) -> Placement:
        ...


class BasePlacer:
    """Shared plumbing: resolve constraints, let :meth:`choose` pick, assemble and log.

    Subclasses implement ``choose(constraints) -> {group index: device}`` for the groups
    of ``constraints.to_place()``.
    """

    name = "base"

    def __init__(self, allow_soft_placement: bool = False, log_device_placement: bool = False,
                 log: Callable[[str], None] | None = None):
        self.allow_soft_placement = allow_soft_placement
        self.log_device_placement = log_device_placement
        self._log = log or (lambda line: log_placement([line], _log))

    def resolve(self, graph: Graph, cluster, previous: Placement | None) -> Constraints:
        return resolve(graph, cluster, previous, allow_soft_placement=self.allow_soft_placement)

    def choose(self, constraints: Constraints) -> dict:
        raise NotImplementedError

    def place(self, graph: Graph, cluster, *, previous: Placement | None = None) -> Placement:
        """Place every op of ``graph`` on ``cluster`` (see the module's contract)."""
        previous = previous or Placement()
        constraints = self.resolve(graph, cluster, previous)
        chosen = self.choose(constraints)
        new = []
        kept = previous.to_dict()
        for op in graph.get_operations():
            if op.name in kept:
                continue
            group = constraints.group_of(op.name)
            new.append((op.name, chosen[group.index].name if group.fixed is None else group.fixed))
        placement = Placement(list(previous.items()) + new)
        if self.log_device_placement:
            for line in placement.log_lines(name for name, _ in new):
                self._log(line)
        return placement

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class UnknownPlacer(KeyError):
    """A placer name the registry does not know; the message lists the known ones."""

    def __init__(self, name: str):
        self.name = name
        super().__init__(f"unknown placer {name!r}; known placers: {', '.join(names())}")

    def __str__(self) -> str:
        return self.args[0]


_REGISTRY: dict[str, type] = {}


def register(name: str):
    """Class decorator: make a placer available as ``placers.get(name)``."""
    def decorate(cls):
        cls.name = name
        _REGISTRY[name] = cls
        return cls
    return decorate


def get(name_or_placer, **options) -> Placer:
    """A placer by registry name (``options`` go to its constructor), or a placer object
    passed through unchanged.

    >>> get("simple")
    SimplePlacer()
    """
    if isinstance(name_or_placer, str):
        try:
            cls = _REGISTRY[name_or_placer]
        except KeyError:
            raise UnknownPlacer(name_or_placer) from None
        return cls(**options)
    if isinstance(name_or_placer, Placer):
        if options:
            raise TypeError("options can only be given with a placer name")
        return name_or_placer
    raise TypeError(f"expected a placer name or an object with place(), got {name_or_placer!r}")


def names() -> list[str]:
    """The registered placer names, sorted."""
    return sorted(_REGISTRY)
