"""Run from the project root: `python docs/probes/tf_crossing_cpu_probe.py [steps]`.

Issue 20 §3 probe: how much of the host's CPU does one crossing between TensorFlow's
server processes cost, when crossings come in a burst (as
:func:`experiments.tf_calibrate.measure_crossing_cpu` times them: 32 tiny tensors at
once, round the ring of tasks) and when they come one after another (as along the
round-robin placements' chains of ops, where nearly every op reads its input from
another task)?  On the cluster of ``sim_vs_real`` (1 ps and 2 workers, TensorFlow's
servers on this host), per kind of step: the servers' CPU seconds per crossing (the
step less the same ops on one task, :meth:`TFLocalCluster.cpu_seconds`) and the time
each crossing adds to the step (fastest steps, the graphs taking turns):

- ``burst``: ``N`` scalars, the ``i``-th made on task ``i % 3`` and read on the next
  one round the ring; against each read on its maker;
- ``chain<k>``: ``k`` chains at once of ``N / k`` Identity ops each, the ``i``-th op
  of chain ``j`` on task ``(i + 1 + j) % 3`` (each hop a crossing, one at a time along
  a chain); against the same chains on the master alone.

What it showed (2026-11-28, this 2-core machine, under the timing lock, 100 steps in
blocks of 10; CPU per crossing / time each adds to the step):

    01:38  burst 115 us / 43 us   chain1 273 / 176   chain2 238 / 129   chain4 208 / 97
    (01:04-01:06, with 32 crossings and one chain: burst 122 to 188 us / 57 to 80 us,
    chain 260 to 412 us / 178 to 226 us, in four runs)

A crossing costs TensorFlow's servers about twice the CPU when crossings come one
after another than in a burst (each wakes the threads of both ends), and one chain of
crossings alone keeps about one and a half of the host's two cores busy; with four
chains at once the crossings keep both busy (208 us of CPU in 97 us per crossing).
So in a step whose ops read their inputs from other tasks along several chains (the
round-robin placements), what crossings take turns on is about twice the CPU that the
calibration measures in a burst (:func:`experiments.tf_calibrate.measure_crossing_cpu`,
which makes each crossing hold the host's ``memcpy`` link for that CPU over the
cores), and the processes' CPU seconds scatter (the same figure moved between 100 and
228 us between calibrations minutes apart).

Tried and not kept (helper tf-6's crossing_holds.patch, 2026-11-28): the link
holding each crossing for the CPU of four chains over the cores, or for the time each
crossing added to a step of four chains (fastest steps, hoped steadier than CPU
seconds).
Both predictions against the same measured steps of each of four runs (a quick
calibration, then the four workloads' simple, round-robin and round-robin-variables
placements timed 31 times; median error of the 16 rows as ``sim_vs_real`` counts
them): with the burst's CPU 15.6, 19.6, 16.8, 13.5%; with the chains' CPU 13.6, 14.5,
17.1, 22.4%; with the chains' time (last two runs) 17.5, 20.1%.  The round-robin rows
moved from 3 to 35% under to 0 to 76% over: the chains' figures scattered as much
(CPU 206 to 312 us, time 107 to 158 us), and the calibrated latency (141 to 192 us)
moves those rows as much as the hold does.
"""
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.getcwd())

import numpy as np  # noqa: E402

import core as ctf  # noqa: E402
from core.graph import Graph  # noqa: E402
from experiments.backends import server_env, this_host_cluster  # noqa: E402
from experiments.tf_backend import TFLocalCluster  # noqa: E402
from experiments.tf_calibrate import crossings_graph, tensorflow_session  # noqa: E402

N = 48


def build(kind: str, crossing: bool, tasks: list[str]):
    """``kind``: ``"burst"``, or ``"chain<k>"`` (``k`` chains at once, each of
    ``N // k`` hops, so that every kind makes ``N`` crossings)."""
    if kind == "burst":  # as the calibration's measure_crossing_cpu times them
        return crossings_graph(tasks, N, crossing)
    graph = Graph()
    chains = int(kind[5:]) if kind.startswith("chain") else 1
    hops = N // chains
    with graph.as_default():
        lasts = []
        for j in range(chains):
            with ctf.device(tasks[0]):
                x = ctf.constant(np.float32(j), name=f"x{j}")
            for i in range(hops):
                with ctf.device(tasks[(i + 1 + j) % len(tasks)] if crossing else tasks[0]):
                    x = ctf.identity(x, name=f"hop{j}_{i}")
            with ctf.device(tasks[0]):
                lasts.append(ctf.identity(x, name=f"last{j}").op)
        # every task runs a part in both graphs
        others = []
        for k, t in enumerate(tasks[1:]):
            with ctf.device(t):
                others.append(ctf.identity(ctf.constant(np.float32(k), name=f"t{k}"),
                                           name=f"d{k}").op)
        return graph, [*lasts, *others]


def main(steps: int = 100, block: int = 10):
    cluster = this_host_cluster()
    with TFLocalCluster(cluster, env=server_env(1, "passive")) as servers:
        master = ("worker", 0)
        order = [master] + [t for t in servers.tasks if t != master]
        tasks = [f"/job:{j}/replica:0/task:{i}/device:CPU:0" for j, i in order]
        for kind in ("burst", "chain1", "chain2", "chain4"):
            cpu = {True: 0.0, False: 0.0}
            fastest = {True: np.inf, False: np.inf}
            sessions = {}
            import contextlib
            with contextlib.ExitStack() as stack:
                for crossing in (True, False):
                    graph, fetches = build(kind, crossing, tasks)
                    sessions[crossing] = stack.enter_context(
                        tensorflow_session(servers.target(*master), graph, fetches))
                    for _ in range(3):
                        sessions[crossing]()
                for _ in range(max(1, steps // block)):
                    for crossing, run in sessions.items():
                        before = servers.cpu_seconds()
                        for _ in range(block):
                            t0 = time.perf_counter()
                            run()
                            fastest[crossing] = min(fastest[crossing], time.perf_counter() - t0)
                        cpu[crossing] += servers.cpu_seconds() - before
            per_cpu = (cpu[True] - cpu[False]) / (steps * N)
            per_time = (fastest[True] - fastest[False]) / N
            print(f"{kind:6s} CPU per crossing {per_cpu * 1e6:6.1f} us   adds to the step "
                  f"{per_time * 1e6:6.1f} us each   (steps {fastest[True] * 1e3:.3f} / "
                  f"{fastest[False] * 1e3:.3f} ms)", flush=True)


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
