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

import importlib.metadata
import logging
from typing import Callable, Protocol, runtime_checkable

from core.graph import Graph
from core.placement import Placement, log_placement
from placers.constraints import Constraints, resolve

__all__ = ["Placer", "BasePlacer", "register", "get", "names", "UnknownPlacer",
           "ENTRY_POINT_GROUP", "PlacerPluginError"]

#: The entry-point group other distributions register placers in: ``name = module:Class``
#: (a class or factory taking the placer's options), e.g. in a ``pyproject.toml``::
#:
#:     [project.entry-points."placement_lab.placers"]
#:     my_placer = "my_package.placer:MyPlacer"
ENTRY_POINT_GROUP = "placement_lab.placers"

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


class PlacerPluginError(ImportError):
    """A placer entry point that cannot be loaded; names the entry point and why."""

    def __init__(self, name: str, value: str, reason: str):
        self.name, self.value, self.reason = name, value, reason
        super().__init__(f"the placer entry point {name!r} = {value!r} (group "
                         f"{ENTRY_POINT_GROUP!r}) cannot be loaded: {reason}")


_REGISTRY: dict[str, type] = {}


def register(name: str):
    """Class decorator: make a placer available as ``placers.get(name)``."""
    def decorate(cls):
        cls.name = name
        _REGISTRY[name] = cls
        return cls
    return decorate


def _plugins() -> dict:
    """The entry points of :data:`ENTRY_POINT_GROUP` whose names the built-in registry
    lacks (a plugin cannot shadow a built-in placer), by name; read on every call so a
    distribution installed meanwhile is seen."""
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
            if ep.name not in _REGISTRY}


def get(name_or_placer, **options) -> Placer:
    """A placer by registry name (``options`` go to its constructor), or a placer object
    passed through unchanged.  Names come from this package's registry and from the
    entry points of :data:`ENTRY_POINT_GROUP`.

    >>> get("simple")
    SimplePlacer()
    """
    if isinstance(name_or_placer, str):
        cls = _REGISTRY.get(name_or_placer)
        if cls is None:
            entry = _plugins().get(name_or_placer)
            if entry is None:
                raise UnknownPlacer(name_or_placer)
            try:
                cls = entry.load()
            except Exception as e:  # any import failure of a third party's module
                raise PlacerPluginError(entry.name, entry.value, f"{type(e).__name__}: {e}") from e
            if not callable(cls):
                raise PlacerPluginError(entry.name, entry.value, f"{cls!r} is not callable")
        placer = cls(**options)
        if not isinstance(placer, Placer):
            raise PlacerPluginError(name_or_placer, repr(cls), "what it made has no place()")
        return placer
    if isinstance(name_or_placer, Placer):
        if options:
            raise TypeError("options can only be given with a placer name")
        return name_or_placer
    raise TypeError(f"expected a placer name or an object with place(), got {name_or_placer!r}")


def names() -> list[str]:
    """The placer names, sorted: the registry's and the entry points' of
    :data:`ENTRY_POINT_GROUP`."""
    return sorted(set(_REGISTRY) | set(_plugins()))
