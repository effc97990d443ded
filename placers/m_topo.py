"""m-TOPO: memory-constrained topological placement (Baechi).

    Jeon, Ahn, Kim, Bae, Gupta, "Baechi: Fast Device Placement of Machine Learning
    Graphs", ACM SoCC 2020, section 4.1 ("m-TOPO").

Contract (numbered as TensorFlow's ``placer.h``; :mod:`placers.base` holds the rest):

1. The devices are the accelerators (GPUs) of the cluster when it has any, else all of
   its devices, in the cluster's order; a group none of them may run goes to the first
   of its feasible devices it fits on.
2. Ops are visited in topological order and filled onto one device after another: each
   device takes ops until its share of the model is reached, the share being the
   model's total memory (every op's outputs and variables, counted without reuse)
   divided by the number of devices, so each device gets a contiguous slice of the
   topological order of about equal memory (Baechi's balancing rule).
3. A device the op (or its colocation group) does not fit on, as the simulator counts
   memory (:class:`placers.memory.MemoryLedger`, ``headroom`` kept free), is passed
   over for the next one that fits; an op that fits on none raises
   :class:`core.placement.PlacementError` naming its group, its bytes and the largest
   free memory.
4. The first op of a colocation group decides the group's device.
5. Deterministic; linear in the size of the graph.

>>> import core as tf
>>> from core.cluster import Cluster
>>> g = tf.Graph()
>>> with g.as_default():
...     x = tf.constant([1.0] * 1024, name="x")
...     for i in range(4):
...         x = tf.relu(x, name=f"r{i}")
>>> p = MTopoPlacer().place(g, Cluster.single_host(gpus=2))
>>> [p[f"r{i}"][-5:] for i in range(4)]
['GPU:0', 'GPU:0', 'GPU:1', 'GPU:1']
"""

from __future__ import annotations

from core.costs import StaticCostModel
from placers.base import register
from placers.cost_model import _Model
from placers.m_etf import HEADROOM
from placers.memory import MemoryLedger, SimulatorChecked, step_mask

__all__ = ["MTopoPlacer"]


@register("m_topo")
class MTopoPlacer(SimulatorChecked):
    """Baechi's m-TOPO: contiguous slices of the topological order of about equal
    memory, one per device, within each device's memory (see the module's contract).

    Parameters
    ----------
    headroom, fetches, check_memory : as :class:`placers.m_etf.METFPlacer`'s.
    """

    def __init__(self, headroom: float = HEADROOM, fetches=None, check_memory: bool = True,
                 **options):
        super().__init__(**options)
        self.fetches = fetches
        self.check_memory = check_memory
        self.headroom = headroom

    def choose(self, constraints):
        # Only sizes are read from the model: no cost model is consulted.
        model = _Model(constraints.order, constraints.cluster, StaticCostModel())
        group_of = [constraints.op_group[op.name] for op in model.ops]
        step = step_mask(model, self.fetches)
        accelerators = [k for k, d in enumerate(model.devices) if d.device_type == "GPU"]
        targets = accelerators or list(range(len(model.devices)))
        feasible = {g.index: [model.dev_index[d.name] for d in g.feasible]
                    for g in constraints.groups}
        ledger = self._ledger = MemoryLedger(
            model, self.capacities(model.devices), group_of, self.headroom, step,
            {g: [k for k in ks if k in targets] or ks for g, ks in feasible.items()},
            self.kept_whole(), self.schedule())
        share = sum(ledger.out_bytes) / len(targets)
        filled = [0] * len(model.devices)
        group_device = {g.index: model.dev_index[g.fixed]
                        for g in constraints.groups if g.fixed is not None}
        current = 0  # position in targets of the device being filled
        for i in range(len(model.ops)):
            g = group_of[i]
            k = group_device.get(g)
            if k is None:
                k = self._next_device(i, feasible[g], targets, current, filled, share, ledger)
                if k is None:
                    raise ledger.fail(i, feasible[g], constraints.groups[g].ops)
                group_device[g] = k
                if k in targets:
                    current = targets.index(k)
                filled[k] += ledger.group_bytes.get(g, 0)  # the whole group, at once
            elif not ledger.fits(i, k, relaxed=True):  # (it cannot wait for room)
                raise ledger.fail(i, [k], constraints.groups[g].ops)
            ledger.commit(i, k)
        return {g.index: model.devices[group_device[g.index]] for g in constraints.to_place()}

    @staticmethod
    def _next_device(i, feasible, targets, current, filled, share, ledger):
        """The device being filled if it may take op ``i`` (share and memory), else the
        next target that may, else any feasible device the op fits on."""
        allowed = set(feasible)
        for step, k in enumerate(targets[current:]):
            last = current + step == len(targets) - 1
            if k in allowed and ledger.fits(i, k) and (filled[k] < share or last):
                return k
        for k in targets[:current] + [k for k in feasible if k not in targets]:
            if k in allowed and ledger.fits(i, k):
                return k
        for relaxed in (False, True):  # none keeps the room for what is to come: let it go
            k = next((k for k in feasible if ledger.fits(i, k, relaxed=relaxed)), None)
            if k is not None:
                return k
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(headroom={self.headroom})"
