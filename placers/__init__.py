"""placers: choose a device for every op.

Constraints (pins, colocation, kernels, soft placement, earlier placements) are resolved
once by :mod:`placers.constraints`; each placer then only chooses among the feasible
devices.  Placers are found by name::

    >>> import placers
    >>> placers.names()  # doctest: +NORMALIZE_WHITESPACE
    ['cost_model', 'function', 'm_etf', 'm_sct', 'm_topo', 'optimal', 'round_robin',
     'search', 'simple']
    >>> placers.get("round_robin", variables_only=True)
    RoundRobinPlacer(variables_only=True)
"""

from core.placement import Placement, PlacementError
from placers.base import (ENTRY_POINT_GROUP, BasePlacer, Placer, PlacerPluginError, UnknownPlacer,
                          get, names, register)
from placers.constraints import Constraints, Group, resolve
from placers.cost_model import CostModelPlacer, estimate_step_time
from placers.function import FunctionPlacer
from placers.m_etf import METFPlacer
from placers.m_sct import MSCTPlacer
from placers.m_topo import MTopoPlacer
from placers.objective import simulated_step
from placers.optimal import OptimalLimitError, OptimalPlacer
from placers.search import SearchError, SearchPlacer
from placers.round_robin import (GreedyLoadBalancingStrategy, RoundRobinPlacer,
                                 RoundRobinStrategy, byte_size_load_fn, replica_device_setter)
from placers.simple import SimplePlacer

__all__ = [
    "Placement", "PlacementError", "ENTRY_POINT_GROUP", "PlacerPluginError", "BasePlacer",
    "Placer", "UnknownPlacer", "get", "names", "register", "Constraints", "Group", "resolve",
    "CostModelPlacer", "estimate_step_time",
    "FunctionPlacer", "GreedyLoadBalancingStrategy", "RoundRobinPlacer", "RoundRobinStrategy",
    "byte_size_load_fn", "replica_device_setter", "SimplePlacer", "METFPlacer", "MSCTPlacer",
    "MTopoPlacer", "simulated_step", "SearchPlacer", "SearchError",
    "OptimalPlacer", "OptimalLimitError",
]
