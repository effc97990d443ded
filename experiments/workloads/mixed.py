"""Random graphs that mix the three kinds of op a step is made of: compute-bound
(MatMul on square matrices), memory-bound (elementwise ops on arrays of about a million
elements) and tiny (ops on a few elements, where the runtime's per-op cost is all).

A model fitted on one kind can be right on a workload of that kind and wrong on a mix;
these graphs, drawn from a seed, test the simulator on mixes no workload was fitted to
(issue 20: "random graphs that mix compute-bound, memory-bound and tiny ops").
"""

from __future__ import annotations

import numpy as np

import core as tf
from experiments.workloads.mlp import Workload

__all__ = ["mixed_random", "KINDS"]

#: The kinds of op drawn, with their weights (the rest: bridges between the kinds).
KINDS = {"matmul": 0.25, "elementwise": 0.35, "tiny": 0.25, "bridge": 0.15}

_ELEMENTWISE = ("add", "subtract", "relu", "tanh", "sigmoid")  # no product: values stay normal


def _elementwise(kind: str, pick, name: str):
    """Op ``kind`` on one or two tensors ``pick()`` draws."""
    if kind in ("add", "subtract"):
        return getattr(tf, kind)(pick(), pick(), name=name)
    return getattr(tf, kind)(pick(), name=name)


def mixed_random(ops: int = 40, seed: int = 0, matmul: int = 256, elements: int = 1 << 20,
                 tiny: int = 16, reach: int = 4) -> Workload:
    """A random DAG of about ``ops`` ops of three kinds, the same for the same arguments.

    Its inputs are variables (made in the graph, so the GraphDef stays small): two
    random ``matmul x matmul`` matrices, two arrays of ``elements`` float32 (shape ``(elements
    // 1024, 1024)``) and two vectors of ``tiny`` elements.  Each further op is drawn
    with the weights of :data:`KINDS`: a ``MatMul`` of two matrices; an elementwise op
    (Add, Sub, Relu, Tanh, Sigmoid) on the large arrays; the same on the tiny vectors; or
    a bridge from one kind to another (the Mean of a matrix or a large array as a tiny
    value, or a large array plus a tiny value's Mean, broadcast).  Inputs come from the
    last ``reach`` tensors of their kind, so the graph has parallel branches and long
    paths.  The step's fetch groups the ops nothing consumes (nothing is copied back).

    >>> w = mixed_random(ops=30, seed=1, matmul=16, elements=2048, tiny=4)
    >>> w.name, len({op.type for op in w.graph.get_operations()}) > 5
    ('mixed_random', True)
    >>> sorted(op.name for op in w.graph.get_operations()) == sorted(
    ...     op.name for op in mixed_random(ops=30, seed=1, matmul=16, elements=2048,
    ...                                    tiny=4).graph.get_operations())
    True
    """
    for name, value in (("ops", ops), ("matmul", matmul), ("elements", elements),
                        ("tiny", tiny), ("reach", reach)):
        if value < 1:
            raise ValueError(f"mixed_random: {name} must be at least 1, not {value}")
    rng = np.random.default_rng(seed)
    cols = min(1024, elements)
    rows = max(1, elements // cols)
    g = tf.Graph()
    with g.as_default():
        pools = {
            # Entries of variance 1/matmul: a product of two keeps its entries' size, so
            # chains of MatMuls neither overflow nor sink into denormals (slow on a CPU).
            "matmul": [tf.Variable(tf.random_normal([matmul, matmul], stddev=matmul ** -0.5,
                                                    seed=seed * 2 + i), name=f"m{i}").value()
                       for i in range(2)],
            "elementwise": [tf.Variable(tf.fill([rows, cols], v), name=f"e{i}").value()
                            for i, v in enumerate((0.25, -0.5))],
            "tiny": [tf.Variable(tf.fill([tiny], v), name=f"t{i}").value()
                     for i, v in enumerate((0.1, 0.2))],
        }
        consumed: set[str] = set()
        kinds, weights = list(KINDS), np.array(list(KINDS.values()))
        for i in range(ops):
            kind = kinds[rng.choice(len(kinds), p=weights / weights.sum())]

            def pick(pool):
                recent = pools[pool][-reach:]
                t = recent[rng.integers(len(recent))]
                consumed.add(t.name)
                return t

            if kind == "matmul":
                out, pool = tf.matmul(pick("matmul"), pick("matmul"), name=f"op{i}_matmul"), kind
            elif kind in ("elementwise", "tiny"):
                op = _ELEMENTWISE[rng.integers(len(_ELEMENTWISE))]
                out, pool = _elementwise(op, lambda: pick(kind), f"op{i}_{op}"), kind
            elif rng.integers(2):  # a large tensor summed up into the tiny ops
                source = ("matmul", "elementwise")[rng.integers(2)]
                mean = tf.reduce_mean(pick(source), name=f"op{i}_mean")
                out, pool = tf.add(pick("tiny"), mean, name=f"op{i}_bridge"), "tiny"
            else:  # a tiny value broadcast over a large array
                mean = tf.reduce_mean(pick("tiny"), name=f"op{i}_mean")
                out, pool = tf.add(pick("elementwise"), mean, name=f"op{i}_bridge"), "elementwise"
            pools[pool].append(out)
        sinks = [t for pool in pools.values() for t in pool[2:] if t.name not in consumed]
        step = tf.group(*sinks, name="step")
        init = tf.global_variables_initializer()
    flops = sum(2.0 * matmul ** 3 for op in g.get_operations() if op.type == "MatMul")
    return Workload("mixed_random", g, [step], init, flops=flops)
