"""Random layered DAGs: the scaling workload for placers and the simulator.

Ops come in layers; each op of a layer takes one or two inputs from the previous few
layers, so the graph has long paths, fan-in and fan-out, as model graphs do.  Tensors
are small matrices so that placing and simulating, not building, dominates.
"""

from __future__ import annotations

import numpy as np

from core.builders import add, constant, matmul, relu
from core.graph import Graph

__all__ = ["random_layered_dag"]


def random_layered_dag(num_ops: int, width: int = 32, seed: int = 0, size: int = 64,
                       reach: int = 3) -> Graph:
    """A graph of about ``num_ops`` ops in layers of ``width``.

    Layer 0 holds constants of shape ``(size, size)``; every later op is a ``MatMul``
    (two inputs), an ``Add`` (two inputs) or a ``Relu`` (one input), drawing its inputs
    from the previous ``reach`` layers.  The same arguments always give the same graph.

    >>> g = random_layered_dag(100, width=10)
    >>> len(g.get_operations())
    100
    """
    if num_ops < 1 or width < 1:
        raise ValueError("num_ops and width must be positive")
    rng = np.random.default_rng(seed)
    g = Graph()
    value = np.ones((size, size), np.float32) / size
    kinds = rng.integers(0, 3, size=num_ops)
    with g.as_default():
        layers = [[constant(value, name="input") for _ in range(min(width, num_ops))]]
        made = len(layers[0])
        while made < num_ops:
            pool = [t for layer in layers[-reach:] for t in layer]
            layer = []
            for _ in range(min(width, num_ops - made)):
                kind = kinds[made]
                x = pool[rng.integers(len(pool))]
                y = pool[rng.integers(len(pool))]
                if kind == 0:
                    layer.append(matmul(x, y))
                elif kind == 1:
                    layer.append(add(x, y, name="Add"))
                else:
                    layer.append(relu(x))
                made += 1
            layers.append(layer)
    return g
