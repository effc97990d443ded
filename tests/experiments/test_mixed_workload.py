"""The mixed_random workload: compute-bound, memory-bound and tiny ops in one random
graph, the same for a seed, runnable on the in-process executor."""

from __future__ import annotations

import pytest

import runtime
from core.graph import ops_needed
from experiments import workloads
from experiments.workloads.mixed import mixed_random

SMALL = dict(ops=40, matmul=32, elements=4096, tiny=4)


def _structure(w):
    return [(op.name, op.type, [t.name for t in op.inputs]) for op in w.graph.get_operations()]


def test_it_is_registered_and_the_same_for_a_seed():
    assert "mixed_random" in workloads.names()
    a = workloads.get("mixed_random", seed=3, **SMALL)
    assert _structure(a) == _structure(mixed_random(seed=3, **SMALL))
    assert _structure(a) != _structure(mixed_random(seed=4, **SMALL))


def test_it_mixes_matmuls_large_elementwise_and_tiny_ops():
    w = mixed_random(seed=0, ops=60, matmul=32, elements=8192, tiny=4)
    step = ops_needed(w.fetch_ops)
    sizes = {}
    for op in step:
        if op.outputs and op.type not in ("Variable", "Identity", "Const"):
            n = 1
            for d in op.outputs[0].shape:
                n *= d
            sizes.setdefault(op.type, set()).add(n)
    assert 32 * 32 in sizes["MatMul"]
    assert any(8192 in s for t, s in sizes.items() if t != "MatMul")  # memory-bound
    assert any(n <= 4 for s in sizes.values() for n in s)  # tiny
    # Every op drawn is in the step: the fetch groups the ops nothing consumes.
    assert all(op in step for op in w.graph.get_operations() if op.name.startswith("op"))


def test_it_runs_in_process():
    import numpy as np
    w = mixed_random(seed=1, **SMALL)
    with runtime.Session(graph=w.graph) as session:
        session.run(w.init)
        session.run(w.fetches)
        sinks = [t for t in (op.outputs[0] for op in w.graph.get_operations()
                             if op.name.startswith("op") and op.outputs)]
        values = session.run(sinks[-3:])
    assert all(np.isfinite(v).all() for v in values)


@pytest.mark.parametrize("option", ["ops", "matmul", "elements", "tiny", "reach"])
def test_an_option_below_one_names_itself(option):
    with pytest.raises(ValueError, match=option):
        mixed_random(**{option: 0})
