"""How warm each kernel of a step runs: the distinct kernel types its device ran since
the last kernel of its type (its reuse distance).

A small kernel's fixed cost is mostly the call into it, its code and data in the caches
or not.  In the executor, a kernel right after one of its own type ran a median 1.5
times faster than where the kernel calibration graph runs it, dozens of other types
after the last one (MatMul 1.8x, Mul 1.15x, Log 6x: ``docs/probes/
warm_duplicates_probe.py``), and an 8 x 8 MatMul took 2.2 us with nothing between two
of them, 2.6 us with eight other kernel families between and 2.8 us with eleven (a
chain of Tanh ops between changed nothing: other code evicts it, not the count of ops;
``docs/probes/kernel_warmth_probe.py``).  A recurrent model's step runs a dozen types
again and again, so the calibration graph's fixed costs overstated its kernels.
:class:`core.cluster.Device`'s ``warm_kernel_costs`` and ``warm_span`` price the
distance; this module counts it, the same way for the simulator
(:mod:`sim.warm_kernels`) as the probes did.

The count is taken over the step's ops on one device in the plan's order (a
topological order; the executor's one thread runs a graph's ready ops much so), not
the order of a particular run, cyclically: a step follows a step of the same graph, so
the first kernel of a type in a step counts the types run since the same type's last
kernel of the previous step.
"""

from __future__ import annotations

__all__ = ["reuse_distances", "warmth"]


def reuse_distances(types, span: int) -> list[int]:
    """For each entry of ``types`` (op types, in the order their kernels run), the
    number of distinct other types run since the previous one of its type, counted
    cyclically over the sequence and capped at ``span``.

    >>> reuse_distances(["MatMul", "Add", "Tanh", "MatMul", "Add", "MatMul"], 8)
    [0, 1, 2, 2, 2, 1]
    >>> reuse_distances(["a", "b", "c", "d", "a"], 2)
    [0, 2, 2, 2, 2]
    """
    types = list(types)
    recent: dict = {}  # type -> None, the least recently run first (dicts keep order)
    for t in types:  # as the end of the previous step leaves it
        recent.pop(t, None)
        recent[t] = None
    out = []
    for t in types:
        d = 0
        for other in reversed(recent):
            if other == t or d >= span:
                break
            d += 1
        out.append(d)
        del recent[t]
        recent[t] = None
    return out


def warmth(distance: int, span: int) -> float:
    """How much of the way from its cold to its warm fixed cost a kernel at reuse
    ``distance`` gets: ``1 - min(distance, span) / span`` (1 right after its own type,
    0 from ``span`` other types on).

    >>> warmth(0, 8), warmth(2, 8), warmth(20, 8)
    (1.0, 0.75, 0.0)
    """
    return 1.0 - min(distance, span) / span
