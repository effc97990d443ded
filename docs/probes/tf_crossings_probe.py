"""Run from the project root: `python docs/probes/tf_crossings_probe.py [sizes...]`.

Issue 20 §3 probe: do crossings between TensorFlow's server processes take turns on one
link, as the simulator's ``memcpy`` link makes them, or overlap?  On the cluster of
``sim_vs_real`` (1 ps and 2 workers, TensorFlow's servers on this host) a step makes
``k`` independent tensors of ``nbytes`` on the ps and reads each on worker 0 (``k``
crossings at once); the same graph with the readers on the ps (no crossing) is timed
in the same rounds (:func:`runtime.calibrate._interleaved_step_times`, the fastest of
30 steps).  Per size and ``k``: what the crossings add to the step, measured, and what
the simulator predicts for the same two graphs on the cluster calibrated there
(:func:`runtime.calibrate.calibrate_distributed` on the same servers).

If the crossings took turns, what they add would grow by one crossing's time per
crossing; if they overlap, by less (what each crossing keeps busy beyond its wait).
``--ring``: the ``i``-th tensor made on the ``i % 3``-th task and read on the next one
round the ring (ps, worker 0, worker 1), against the same graph with each read on its
maker (every task runs a part in both).

What it showed (2026-11-27, this 2-core machine, quiet): crossings overlap.  32 tiny
tensors crossing at once from the ps added 0.9 to 1.0 ms to a step (29 to 31 us each,
one alone 0.23 to 0.25 ms), 32 of 64 KiB 1.8 to 2.6 ms, while the simulator, which
held the one ``memcpy`` link for each crossing's whole latency, predicted 5.1 and 6.3
to 7.0 ms; tensors of 1 MiB took turns (0.4 to 0.6 ms each, about the link's
bandwidth).  Round the ring, 49 to 54 us each for 32 at once.  The servers' CPU time
per crossing (printed last for each size): 63 us (tiny, from the ps), 112 us (tiny,
round the ring), 156 us (64 KiB): what 32 at once add is about that over the host's
two cores, so what crossings take turns on is the CPU.  A model that made the whole
latency a wait beside the link (each transfer on the link for its bytes only) predicted
the round-robin placements of sim_vs_real's workloads 23 to 79% under their measured
steps: in a workload's step the three server processes' kernels keep the cores busy
and a crossing's CPU work waits for them (from a tensor's producer's end to its reader's
start on another task, when it was the reader's last input: median 0.4 to 0.6 ms in
mlp and rnn, 1.2 ms in the transformer, against 0.15 ms calibrated).  Kept:
``Link.wait`` = the latency less the servers' CPU time per crossing
(:func:`experiments.tf_calibrate.measure_crossing_cpu`), each crossing holding the link
for its CPU time; predicting two measurements with three calibrations each, with and
without the wait, the median error of the eight round-robin rows went from 20-31% to
17-26% (lower in five of the six, 20 to 24% in one) and the largest from 45-109% to
40-72%.

Later (2026-11-27, helper tf-4): that link held every crossing for its whole CPU time,
one crossing at a time, while the CPU work of a tiny crossing goes to whichever of the
host's cores is free (32 at once: about their CPU time over two cores, above) and only
large tensors take turns.  The round-robin placements were then predicted at twice
their measured steps (rnn: 67-71 ms against 30-32 ms, two runs); the servers used about
190 us of CPU per crossing in those steps, about what the calibration measured.  Kept:
the link holds each crossing for its CPU time over the host's cores, plus its bytes
(:func:`experiments.tf_calibrate._with_crossing_waits`): rnn's 34.6 ms against 33.0 to
38.5 ms measured.  Tried and not kept: a link carrying as many crossings at once as
the host has cores, each for its whole CPU time and bytes: the large tensors of
mixed_random's round-robin placement then crossed two at a time (predicted 31 ms
against 51-56 ms; 35-41 ms with the CPU share).
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.getcwd())

import numpy as np  # noqa: E402
import psutil  # noqa: E402

import core as ctf  # noqa: E402
from experiments.backends import pinned_step, server_env, this_host_cluster  # noqa: E402
from experiments.tf_backend import TFLocalCluster  # noqa: E402
from experiments.tf_calibrate import TF_RUNTIME_MODEL, tensorflow_session  # noqa: E402
from runtime.calibrate import _interleaved_step_times, calibrate_distributed  # noqa: E402

PS, W0 = "/job:ps/replica:0/task:0/device:CPU:0", "/job:worker/replica:0/task:0/device:CPU:0"
KS = (1, 2, 4, 8, 16, 32)


W1 = "/job:worker/replica:0/task:1/device:CPU:0"
RING = {PS: W0, W0: W1, W1: PS}


def ring(k: int, nbytes: int, crossing: bool):
    """``k`` tensors of ``nbytes``, the ``i``-th made on the ``i % 3``-th task and read on
    the next task round the ring (``crossing``) or on its own (every task runs a part
    in both graphs)."""
    def make():
        g = ctf.Graph()
        outs = []
        tasks = list(RING)
        with g.as_default():
            for i in range(k):
                src = tasks[i % 3]
                with ctf.device(src):
                    x = ctf.identity(ctf.constant(np.ones(max(1, nbytes // 4), np.float32),
                                                  name=f"c{i}"), name=f"x{i}")
                with ctf.device(RING[src] if crossing else src):
                    outs.append(ctf.identity(x, name=f"y{i}").op)
            for j, task in enumerate(tasks):
                with ctf.device(task):
                    outs.append(ctf.identity(ctf.constant(np.float32(1.0), name=f"t{j}"),
                                             name=f"d{j}").op)
        return g, outs
    return make


def fan(k: int, nbytes: int, reader: str):
    """``k`` tensors of ``nbytes`` made on the ps, each read by an Identity on ``reader``
    (and one tiny op on worker 0, so both graphs involve both tasks); the fetches are
    the ops (the step returns no tensor: nothing else crosses)."""
    def make():
        g = ctf.Graph()
        outs = []
        with g.as_default():
            for i in range(k):
                with ctf.device(PS):
                    x = ctf.identity(ctf.constant(np.ones(max(1, nbytes // 4), np.float32),
                                                  name=f"c{i}"), name=f"x{i}")
                with ctf.device(reader):
                    outs.append(ctf.identity(x, name=f"y{i}").op)
            with ctf.device(W0):
                outs.append(ctf.identity(ctf.constant(np.float32(1.0), name="t"), name="d").op)
        return g, outs  # ops: the step returns no tensor (nothing else crosses)
    return make



def server_cpu(servers) -> float:
    """CPU seconds the server processes have used so far."""
    return sum(sum(psutil.Process(proc.pid).cpu_times()[:2]) for proc in servers._procs)


def cpu_per_crossing(servers, cross, local, k: int, steps: int = 50) -> float:
    """Server CPU seconds per crossing: ``steps`` steps of the ``cross`` graph less as
    many of the ``local`` one, over ``steps * k`` crossings."""
    used = []
    for make in (cross, local):
        g, outs = make()
        with tensorflow_session(servers.target("worker", 0), g, outs) as run:
            for _ in range(3):
                run()
            before = server_cpu(servers)
            for _ in range(steps):
                run()
            used.append(server_cpu(servers) - before)
    return (used[0] - used[1]) / (steps * k)


RING_MODE = "--ring" in sys.argv
sizes = [int(s) for s in sys.argv[1:] if s != "--ring"] or [4, 64 << 10, 1 << 20]
base = this_host_cluster()
with TFLocalCluster(base, env=server_env(1, "passive")) as servers:
    cluster, figures = calibrate_distributed(base, servers, quick=False,
                                             runtime_model=TF_RUNTIME_MODEL,
                                             open_session=tensorflow_session)
    link = cluster.links["memcpy:localhost"]
    print(f"calibrated crossing: latency {link.latency * 1e6:.0f} us, "
          f"bandwidth {link.bandwidth / 1e9:.2f} GB/s; size_costs "
          f"{[(n, round(t * 1e6)) for n, t in link.size_costs]} (bytes, us)")
    for nbytes in sizes:
        builds = {}
        for k in KS:
            if RING_MODE:
                builds[(k, "cross")] = ring(k, nbytes, True)
                builds[(k, "local")] = ring(k, nbytes, False)
            else:
                builds[(k, "cross")] = fan(k, nbytes, W0)
                builds[(k, "local")] = fan(k, nbytes, PS)
        times = _interleaved_step_times(servers, builds, ("worker", 0), 30,
                                        open_session=tensorflow_session)
        print(f"\n{nbytes} bytes: k, measured extra (ms), per crossing (us), "
              f"simulated extra (ms)")
        for k in KS:
            extra = min(times[(k, "cross")]) - min(times[(k, "local")])
            sim_extra = (pinned_step(builds[(k, "cross")], cluster)
                         - pinned_step(builds[(k, "local")], cluster))
            print(f"  {k:3d} {extra * 1e3:8.3f} {extra / k * 1e6:8.1f} {sim_extra * 1e3:8.3f}")
        k = KS[-1]
        print(f"  server CPU per crossing, {k} at once: "
              f"{cpu_per_crossing(servers, builds[(k, 'cross')], builds[(k, 'local')], k) * 1e6:.0f} us")
