"""The simulator's traces are pinned: seeded random cases give exactly the traces
recorded in ``golden_traces.json`` (made by the engine as it was before it was sped
up), to the last bit of every float and the order of the memory records.

``case(seed)`` builds one ``(graph, placement, cluster, fetches, cost_model, config)``
from ``random.Random(seed)``: a random DAG (constants, variables and their updates,
element-wise ops, matmuls, control edges, no-ops) or a layered one like the benchmark's;
a one-host or a multi-task cluster (shared hosts, GPUs, few cores or threads, small GPU
memory, calibrated step, part, op and kernel overheads); random placement, fetches and
``SimConfig`` (both link orders, serial dispatch, memory fraction, OOM recording, pool
sizes); the static cost model or one with a few equal op times (ties).

``outcome(seed)`` runs it: the trace's record lists, step time, fetch ends and capacity,
or the error raised (with the partial trace of an out-of-memory error); ``digest``
hashes an outcome.  A deliberate change of the model regenerates the file, from the
project root, in the same commit:

    PYTHONPATH=. python tests/sim/test_same_traces.py --write

(``--dump FILE`` pickles the full outcomes instead, to compare two versions by hand.)
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

import core as tf
from core.runtime_model import IDEAL, INTERPRETER, RuntimeModel
from core.cluster import Cluster
from core.costs import CostModel, StaticCostModel
from core.placement import Placement
from sim import SimConfig, simulate
from sim.errors import OutOfMemory

GOLDEN = Path(__file__).with_name("golden_traces.json")
SEEDS = range(400)
# Every runtime model on the same cases (the first seeds): pinned apart, so that a change
# of one model's handlers shows up even where the seeds' own configs rarely pick it.
GOLDEN_RUNTIMES = Path(__file__).with_name("golden_traces_runtimes.json")
RUNTIME_SEEDS = range(150)
RUNTIMES = {"ideal": IDEAL, "interpreter": INTERPRETER,
            "serial-inline": RuntimeModel("serial-inline", serial_dispatch=True,
                                          dispatch_cores=True, inline_elements=16)}


class TiedCost(CostModel):
    """Op times from a short list, by a stable hash of the op's name: many equal times,
    so many events at one instant (tie-breaking is part of the trace)."""

    def __init__(self, times):
        self.times = times

    def op_time(self, op, device) -> float:
        h = int(hashlib.md5(op.name.encode()).hexdigest()[:8], 16)
        return self.times[h % len(self.times)]


def _random_graph(rng: random.Random):
    g = tf.Graph()
    n = rng.randint(2, 40)
    tensors, variables, ops = [], [], []
    with g.as_default():
        for i in range(rng.randint(1, 4)):
            size = rng.choice([4, 16, 64, 256])
            if rng.random() < 0.4:
                v = tf.Variable(np.ones((size, size), np.float32), name=f"v{i}")
                variables.append(v)
                tensors.append(v.value())
            else:
                tensors.append(tf.constant(np.ones((size, size), np.float32), name=f"c{i}"))
        for i in range(n):
            x = rng.choice(tensors)
            same = [t for t in tensors if t.shape == x.shape]
            y = rng.choice(same)
            deps = [rng.choice(ops)] if ops and rng.random() < 0.2 else []
            with g.control_dependencies(deps):
                kind = rng.choice(["add", "mul", "matmul", "relu", "identity", "assign", "noop"])
                if kind == "assign":
                    fits = [v for v in variables if v.get_shape() == x.shape]
                    kind = "add" if not fits else kind
                if kind == "add":
                    t = tf.add(x, y, name=f"op{i}")
                elif kind == "mul":
                    t = tf.multiply(x, y, name=f"op{i}")
                elif kind == "matmul":
                    t = tf.matmul(x, y, name=f"op{i}")
                elif kind == "relu":
                    t = tf.relu(x, name=f"op{i}")
                elif kind == "identity":
                    t = tf.identity(x, name=f"op{i}")
                elif kind == "assign":
                    t = rng.choice(fits).assign_add(x, name=f"op{i}")
                else:
                    ops.append(tf.no_op(name=f"op{i}"))
                    continue
            tensors.append(t)
            ops.append(t.op)
    return g, tensors, ops


def _layered_graph(rng: random.Random):
    """Layers of ops each reading one or two tensors of the previous layers."""
    g = tf.Graph()
    width, layers = rng.randint(2, 8), rng.randint(3, 25)
    value = np.ones((32, 32), np.float32)
    with g.as_default():
        made = [[tf.constant(value, name=f"in{i}") for i in range(width)]]
        for layer in range(1, layers):
            pool = [t for ts in made[-3:] for t in ts]
            row = []
            for i in range(width):
                kind = rng.randrange(3)
                x = rng.choice(pool)
                if kind == 0:
                    row.append(tf.matmul(x, rng.choice(pool), name=f"l{layer}_{i}"))
                elif kind == 1:
                    row.append(tf.add(x, rng.choice(pool), name=f"l{layer}_{i}"))
                else:
                    row.append(tf.relu(x, name=f"l{layer}_{i}"))
            made.append(row)
    tensors = [t for ts in made for t in ts]
    return g, tensors, [t.op for t in tensors], width


def _cluster(rng: random.Random) -> Cluster:
    figures = {}
    if rng.random() < 0.3:
        figures["gpu_memory_bytes"] = rng.choice([20_000, 100_000, 400_000])
    if rng.random() < 0.3:
        figures["host_memory_bytes"] = rng.choice([50_000, 300_000])
    if rng.random() < 0.3:
        figures["cpu_inter_op_threads"] = rng.randint(1, 3)
    if rng.random() < 0.3:
        figures["cpu_intra_op_threads"] = rng.randint(1, 4)
    cores = rng.randint(1, 4)
    if rng.random() < 0.4:
        cluster = Cluster.single_host(gpus=rng.randint(0, 2), cpu_cores=cores,
                                      nvlink=rng.random() < 0.5, **figures)
    else:
        workers = rng.randint(1, 3)
        spec = {"worker": [f"w{i}:2222" for i in range(workers)]}
        if rng.random() < 0.5:
            spec["ps"] = [f"p{i}:2222" for i in range(rng.randint(1, 2))]
        hosts = {("worker", 0): "big", ("worker", 1): "big"} if workers > 1 and rng.random() < 0.4 else {}
        cluster = Cluster.from_spec(spec, gpus_per_task={"worker": rng.randint(0, 2)}, hosts=hosts,
                                    cpu_cores=cores, nvlink=rng.random() < 0.5, **figures)
    if rng.random() < 0.3:  # calibrated fixed costs
        tasks = [replace(t, step_overhead=rng.choice([0.0, 1e-4, 3e-4]),
                         part_overhead=rng.choice([0.0, 5e-5, 2e-4])) for t in cluster.tasks]
        devices = [replace(d, op_overhead=rng.choice([0.0, 5e-6, 2e-5])).replace_kernel_costs(
                       {"MatMul": (rng.choice([0.0, 1e-5]), 1.5), "Add": (2e-6, 1.0)})
                   for d in cluster.devices]
        cluster = Cluster(cluster.hosts, tasks, devices, cluster.links.values(),
                          master=cluster.master, nvlink=cluster.nvlink)
    return cluster


def _config(rng: random.Random) -> SimConfig:
    return SimConfig(
        per_process_gpu_memory_fraction=rng.choice([None, None, 0.5]),
        record_oom=rng.random() < 0.5,
        inter_op_threads=rng.choice([None, None, 1, 2]),
        intra_op_threads=rng.choice([None, None, 1, 3]),
        link_order=rng.choice(["static", "ready"]),
        runtime=RuntimeModel(serial_dispatch=rng.random() < 0.3))


def case(seed: int):
    """``(graph, placement, cluster, fetches, cost_model, config)`` of one seed."""
    rng = random.Random(seed)
    cluster = _cluster(rng)
    names = [d.name for d in cluster.devices]
    if rng.random() < 0.6:
        g, tensors, ops = _random_graph(rng)
        placement = Placement({op.name: rng.choice(names) for op in g.get_operations()})
    else:
        g, tensors, ops, width = _layered_graph(rng)
        placement = Placement({op.name: names[(i // width) % len(names)]
                               for i, op in enumerate(g.get_operations())})
    fetches = None
    if rng.random() < 0.5:
        fetches = rng.sample(tensors, min(len(tensors), rng.randint(1, 3)))
        if ops and rng.random() < 0.5:
            fetches.append(rng.choice(ops))
    cost = StaticCostModel() if rng.random() < 0.6 else TiedCost(
        rng.choice([[1e-5], [1e-5, 2e-5], [0.0, 1e-5, 3e-5, 5e-5]]))
    return g, placement, cluster, fetches, cost, _config(rng)


def _records(trace) -> dict:
    return {"ops": [tuple(r) for r in trace.ops],
            "transfers": [tuple(r) for r in trace.transfers],
            "memory": [tuple(r) for r in trace.memory],
            "oom_events": [tuple(r) for r in trace.oom_events],
            "step_time": trace.step_time, "fetch_end": sorted(trace.fetch_end.items()),
            "capacity": sorted(trace.capacity.items())}


def outcome(seed: int, runtime: str | None = None) -> dict:
    """What simulating case ``seed`` gives (under the runtime model named ``runtime``
    instead of the case's own): its trace's records, or the error."""
    g, placement, cluster, fetches, cost, config = case(seed)
    if runtime is not None:
        config = replace(config, runtime=RUNTIMES[runtime])
    try:
        trace = simulate(g, placement, cluster, fetches=fetches, cost_model=cost, config=config)
    except OutOfMemory as e:
        return {"error": repr(e), **_records(e.trace)}
    return _records(trace)


def digest(result: dict) -> str:
    """A hash of an outcome (floats by ``repr``: exact)."""
    return hashlib.sha256(repr(result).encode()).hexdigest()[:16]


def test_traces_are_the_pinned_ones():
    golden = json.loads(GOLDEN.read_text())
    changed = [s for s in SEEDS if digest(outcome(s)) != golden[str(s)]]
    assert not changed, f"these cases' traces changed: {changed}"


def _runtime_digests() -> dict:
    return {f"{name}:{s}": digest(outcome(s, name)) for name in RUNTIMES for s in RUNTIME_SEEDS}


def test_traces_of_every_runtime_model_are_the_pinned_ones():
    golden = json.loads(GOLDEN_RUNTIMES.read_text())
    changed = [key for key, value in _runtime_digests().items() if golden[key] != value]
    assert not changed, f"these cases' traces changed: {changed}"


if __name__ == "__main__":
    if "--write" in sys.argv:
        GOLDEN.write_text(json.dumps({str(s): digest(outcome(s)) for s in SEEDS}, indent=0) + "\n")
        GOLDEN_RUNTIMES.write_text(json.dumps(_runtime_digests(), indent=0) + "\n")
        print(f"wrote {GOLDEN} and {GOLDEN_RUNTIMES}")
    else:  # a pickle of the full outcomes, to compare two versions of the engine by hand
        import pickle
        out = sys.argv[sys.argv.index("--dump") + 1]
        with open(out, "wb") as f:
            pickle.dump({s: outcome(s) for s in SEEDS}, f)
        print(f"wrote {out}")
