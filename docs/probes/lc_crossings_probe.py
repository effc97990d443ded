"""Run from the project root: `python docs/probes/lc_crossings_probe.py [sizes...]`.

Issue 20 §3 probe: what part of a tensor crossing between this lab's server processes
(a :class:`runtime.LocalCluster` on one host: the sender's executor thread encodes a
frame and writes it on the receiver's local Unix socket, or copies a large tensor into
a shared-memory segment and writes its reference; the receiver's reader thread wakes,
decodes, puts it in the rendezvous and runs the consumer) is work of the two server
processes, and what part is a wait that overlaps other work?

On the cluster of ``sim_vs_real`` (1 ps and 2 workers) a step makes ``k`` independent
tensors of ``nbytes`` on the ps and reads each on worker 0 (``k`` crossings at once);
the same graph with the readers on the ps (no crossing) is timed in the same rounds
(:func:`runtime.calibrate._interleaved_step_times`, the fastest of 30 steps).  Per size
and ``k``: what the crossings add to the step, measured, and what the simulator predicts
for the same two graphs on the cluster calibrated there (:func:`runtime.calibrate.
calibrate_distributed` on the same servers), as calibrated (``Link.cpu_costs``: see
below) and without ``cpu_costs`` (each crossing its ends' work for its whole time, half
each, as before).
Then each server process's CPU time (user and system, from ``/proc``) per crossing:
``STEPS`` steps of the crossing graph less as many of the local one, over the crossings.

If the crossings took turns on the ps's interpreter for their whole latency, what ``k``
of them add would grow by one latency per crossing; if only their CPU work takes turns,
by about that work per crossing.  Last, the same CPU time per crossing for a tensor
passed back and forth between worker 0 and the ps (one crossing at a time).

What it showed (2026-11-27, this 2-core machine, quiet; the machine's speed changed
between runs by up to 2x):
- One crossing alone added 110 to 180 us (tiny) and 180 to 260 us (64 KiB) to a step:
  about the calibrated crossing time.  32 at once added 25 to 54 us each (tiny) and 32
  to 67 us (64 KiB), where the simulator, charging each crossing's whole time to its
  ends' dispatchers (half each), predicted 55 to 67 us and 150 to 217 us.
- CPU per crossing, 32 at once from the ps: the ps (sender) 19 to 30 us, worker 0
  (receiver) 45 to 110 us; one at a time along a chain, 130 to 137 us (tiny) and 190
  to 270 us (64 KiB) for the two processes together, about the crossing's whole time:
  what a crossing costs depends on whether its receiver's reader thread must wake for
  it.  (At 1 MiB, through shared memory, the processes' CPU per crossing exceeded the
  crossing's time: 650 to 900 us against 400.)
- Kept: ``Link.cpu_costs``, the sender's and the receiver's CPU per crossing among
  many at once (:func:`runtime.calibrate.measure_crossing_cpu`); the interpreter model
  charges the sender its part and the receiver the rest of the crossing's time when it
  comes alone, its own part when it is taken in straight after another
  (:meth:`core.runtime_model.RuntimeModel.crossing_work`).  With it the fans above
  were predicted at 0.64 ms (16 tiny, measured 0.64) and 1.42 ms (16 of 64 KiB,
  measured 1.28), against 0.93 and 2.70 ms charging each crossing's whole time.
  A first model, each end half the CPU part and the rest a wait that held nothing,
  fixed data_parallel (36-43% too slow, then 0-6%) but predicted the round-robin
  placements of mlp, rnn and transformer 8-15 points faster than before, below their
  measurement: their crossings come one at a time.  A receiver busy with its own ops
  gets less from a burst: 16 tiny crossings added 49 us each to an idle worker 0's
  step and 74 us each to one dispatching a chain of 300 tiny ops (32: 50 and 60 us);
  hence a burst only from a crossing that finds its receiver's dispatcher free, and
  only straight after another take-in.
- sim_vs_real (``--no-loop --repeats 31 --calibrate-once``), the 16 static rows of each
  run predicted on its own measurement and calibration with and without ``cpu_costs``
  (median error with / without, median repeat spread): 23:02 22.6 / 22.6%, 11.2%;
  23:33 15.6 / 18.7%, 10.2%; 23:46 12.9 / 11.3%, 5.7%; 23:48 34.9 / 47.2%, 7.0% (a
  calibration 45% off on the one-task rows).  data_parallel's rows came out 12 to 34
  points nearer their measurement in each; transformer's and rnn's round-robin rows
  3 to 12 points below the whole-time model's (nearer in one run, 23:48): their
  receivers, busy with their own ops, still get more of a burst's discount in the
  model than in the runtime.
"""
import os
import sys

sys.path.insert(0, os.getcwd())

import numpy as np  # noqa: E402
import psutil  # noqa: E402

import core as ctf  # noqa: E402
import runtime  # noqa: E402
from experiments.backends import (pinned_step, runtime_cluster_spec, server_env,  # noqa: E402
                                  this_host_cluster)
from runtime.calibrate import (_interleaved_step_times, calibrate_distributed,  # noqa: E402
                               runtime_session)

PS, W0 = "/job:ps/replica:0/task:0/device:CPU:0", "/job:worker/replica:0/task:0/device:CPU:0"
KS = (1, 4, 16, 32)
STEPS = 200


def fan(k: int, nbytes: int, reader: str):
    """``k`` tensors of ``nbytes`` made on the ps, each read by an Identity on ``reader``
    (and one tiny op on worker 0, so both graphs involve both tasks); the fetches are
    the readers' ops (the step returns no tensor: nothing else crosses)."""
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
        return g, outs
    return make


def chain(hops: int, nbytes: int, crossing: bool):
    """A tensor of ``nbytes`` passed ``hops`` times between worker 0 and the ps
    (``crossing``; else ``hops`` Identity ops on worker 0): one crossing at a time."""
    def make():
        g = ctf.Graph()
        with g.as_default():
            with ctf.device(W0):
                x = ctf.constant(np.ones(max(1, nbytes // 4), np.float32), name="x")
            for i in range(hops):
                with ctf.device((PS if i % 2 == 0 else W0) if crossing else W0):
                    x = ctf.identity(x, name=f"hop{i}")
            with ctf.device(W0):
                x = ctf.identity(x, name="last")
            with ctf.device(PS):
                d = ctf.identity(ctf.constant(np.float32(1.0), name="t"), name="d")
        return g, [x.op, d.op]
    return make



def cpu_times(local) -> dict:
    """Per task, ``(user, system)`` CPU seconds its process has used so far."""
    out = {}
    for key, proc in local.processes.items():
        t = psutil.Process(proc.pid).cpu_times()
        out[key] = (t.user, t.system)
    return out


def cpu_per_crossing(local, cross, local_graph, k: int, steps: int = STEPS) -> dict:
    """Per task, ``(user, system)`` CPU seconds per crossing: ``steps`` steps of the
    ``cross`` graph less as many of ``local_graph``, over ``steps * k`` crossings."""
    used = []
    for make in (cross, local_graph):
        g, outs = make()
        with runtime_session(local.target("worker", 0), g, outs) as run:
            for _ in range(3):
                run()
            before = cpu_times(local)
            for _ in range(steps):
                run()
            after = cpu_times(local)
        used.append({key: (after[key][0] - before[key][0], after[key][1] - before[key][1])
                     for key in after})
    return {key: ((used[0][key][0] - used[1][key][0]) / (steps * k),
                  (used[0][key][1] - used[1][key][1]) / (steps * k)) for key in used[0]}


def main():
    sizes = [int(s) for s in sys.argv[1:]] or [4, 64 << 10, 1 << 20]
    base = this_host_cluster()
    with runtime.LocalCluster(runtime_cluster_spec(base), env=server_env()) as local:
        cluster, _ = calibrate_distributed(base, local)
        link = cluster.links["memcpy:localhost"]
        whole = cluster.replace_link(link.name, cpu_costs=())
        print(f"calibrated crossing: latency {link.latency * 1e6:.0f} us, bandwidth "
              f"{link.bandwidth / 1e9:.2f} GB/s; size_costs "
              f"{[(n, round(t * 1e6)) for n, t in link.size_costs]}, cpu_costs "
              f"{[(n, round(a * 1e6), round(b * 1e6)) for n, a, b in link.cpu_costs]} "
              "(bytes, us)")
        for nbytes in sizes:
            builds = {}
            for k in KS:
                builds[(k, "cross")] = fan(k, nbytes, W0)
                builds[(k, "local")] = fan(k, nbytes, PS)
            times = _interleaved_step_times(local, builds, ("worker", 0), 30)
            print(f"\n{nbytes} bytes: k, measured extra (ms), per crossing (us), "
                  f"simulated extra (ms): as calibrated, without cpu_costs")
            for k in KS:
                extra = min(times[(k, "cross")]) - min(times[(k, "local")])
                sims = [pinned_step(builds[(k, "cross")], c) - pinned_step(builds[(k, "local")], c)
                        for c in (cluster, whole)]
                print(f"  {k:3d} {extra * 1e3:8.3f} {extra / k * 1e6:8.1f} "
                      f"{sims[0] * 1e3:8.3f} {sims[1] * 1e3:8.3f}")
            k = KS[-1]
            per = cpu_per_crossing(local, builds[(k, "cross")], builds[(k, "local")], k)
            print(f"  CPU per crossing, {k} at once (us, user + system): " + ", ".join(
                f"{job}:{task} {u * 1e6:.0f} + {s * 1e6:.0f}" for (job, task), (u, s)
                in sorted(per.items())))
            per = cpu_per_crossing(local, chain(k, nbytes, True), chain(k, nbytes, False), k)
            print("  CPU per crossing, one at a time along a chain (us, user + system): "
                  + ", ".join(f"{job}:{task} {u * 1e6:.0f} + {s * 1e6:.0f}"
                              for (job, task), (u, s) in sorted(per.items())))


if __name__ == "__main__":
    main()
