"""Run from the project root: `python docs/probes/tf_warm_kernels_probe.py`.

Issue 20 §3 probe: why do the kernel calibration graph's small-tensor kernel times
overstate the same kernels in a model's step on TensorFlow?  In one in-process
TensorFlow session (rewrites off, step stats traced, each op's fastest kernel over 20
steps) it times, per op type (MatMul, Tanh, Add, Mul):

- ``once``: the kernel calibration graph on 8 x 8 tensors (each type a few times per
  step, as the calibration fitted the fixed costs);
- ``copies``: the same graph with 8 independent copies of the step (each type many
  times per step, among the other types): the median over the copies' ops, and the
  first copy's alone;
- ``chain``: 16 ops of one type in a row on 8 x 8 tensors: the first of the chain and
  the median of the others.

If the first op of a type in a step is the slow one (its code and data not yet in the
caches) and the others are several times faster, the fixed cost a model's step pays
per op is the median over many ops of a type, not the time of the one op a graph
without repeats has.

What it showed (2026-11-27, this 2-core machine, niced beside other work, in us):
MatMul 3.36 once, 1.43 over the copies, 22.6 first in a chain and 0.87 after; Tanh
0.90, 0.55, 2.41, 0.11; Add and Mul 0.3 both ways in the graph, 2.6 and 13 first in a
chain, 0.11 after.  With the copies' figures (``measure_tf_kernel_costs(copies=8)``)
the recurrent workload's kernels summed to 1.0 times TensorFlow's (2.2 times with one
copy) and the transformer's to 1.1 times (2.2), on one measurement and two
calibrations of each kind taking turns.
"""
import os
import statistics
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.getcwd())

import numpy as np  # noqa: E402

import core as ctf  # noqa: E402
from core.graph import Graph  # noqa: E402
from experiments.tf_calibrate import traced_tensorflow_steps  # noqa: E402
from runtime.calibrate_kernels import _fastest_kernels, kernel_calibration_graph  # noqa: E402

DEVICE = "/job:localhost/replica:0/task:0/device:CPU:0"
TYPES = ("MatMul", "Tanh", "Add", "Mul")


def chains(n: int, length: int):
    """Per type of TYPES, a chain of ``length`` ops of it on ``n x n`` tensors."""
    g = Graph()
    with g.as_default():
        x = ctf.constant(np.full((n, n), 0.1, np.float32), name="x")
        w = ctf.Variable(np.full((n, n), 0.01, np.float32), name="w")
        ends = []
        for kind, f in (("MatMul", lambda t: ctf.matmul(t, w.value())), ("Tanh", ctf.tanh),
                        ("Add", lambda t: ctf.add(t, x)), ("Mul", lambda t: ctf.multiply(t, x))):
            t = x
            for i in range(length):
                with ctf.name_scope(f"{kind}{i:02d}"):
                    t = f(t)
            ends.append(t.op)
        init = ctf.global_variables_initializer()
    return g, init, ends


def by_type(graph, kernels):
    out = {}
    for name, t in sorted(kernels.items()):
        op = graph.get_operation_by_name(name)
        out.setdefault(op.type, []).append((name, t))
    return out


builds = {"once": kernel_calibration_graph(8), "copies": kernel_calibration_graph(8, copies=8),
          "chain": chains(8, 16)}
runs = traced_tensorflow_steps("", builds, DEVICE, 20)
kernels = {key: by_type(g, _fastest_kernels(traces)) for key, (g, traces) in runs.items()}
print(f"{'type':8s} {'once':>8s} {'copies':>8s} {'copy 0':>8s} {'chain 1st':>10s} {'chain rest':>10s}  (us)")
for kind in TYPES:
    once = statistics.median(t for _, t in kernels["once"][kind])
    copies = statistics.median(t for _, t in kernels["copies"][kind])
    first_copy = statistics.median(t for n, t in kernels["copies"][kind] if not n.startswith("copy"))
    chain = kernels["chain"][kind]
    print(f"{kind:8s} {once * 1e6:8.2f} {copies * 1e6:8.2f} {first_copy * 1e6:8.2f} "
          f"{chain[0][1] * 1e6:10.2f} {statistics.median(t for _, t in chain[1:]) * 1e6:10.2f}")
