"""Run from the project root: `python docs/probes/lc_concurrent_crossings_probe.py [hops]`.

Issue 20 §3 probe: does a crossing between this lab's server processes cost more while
other crossings are in flight between other tasks?  Traced steps of the workloads'
round-robin placements show their slowest crossings taking up to ten times the
calibrated latency while their receivers run few ops, with several other crossings
arriving and leaving around each (docs/probes/lc_busy_receiver_probe.py).

Chains of ``hops`` (default 48) tiny crossings, each hop an Identity on the task it
reaches, run alone and several at once in one step (each chain starts from its own
constant; a tiny op on every task in every variant):
- ``w0-ps``: worker 0 and the ps back and forth (how the calibration measures a
  crossing's latency);
- ``w0-ps x2``: two such chains at once (both cross between the same two processes);
- ``w0-ps + w1-ps``: one between worker 0 and the ps, one between worker 1 and the ps
  (the ps takes part in both);
- ``three pairs``: w0-ps, w1-ps and w0-w1 at once (every process sends and receives
  in two chains);
- ``ring``: worker 0, ps, worker 1 in turn; ``rings x2``: two rings at once, one
  each way round.
Each variant is timed in the same rounds (:func:`runtime.calibrate.
_interleaved_step_times`, fastest of 25 steps) against the same graph with every hop
on its first task (no crossing), and predicted on a cluster calibrated just before
(:func:`experiments.backends.calibrate_this_host`, quick).  Printed per variant:
what its crossings add to the step over the local graph, per hop, measured and
predicted; then the servers' CPU time per crossing (user and system, ``/proc``:
``CPU_STEPS`` steps with crossings less as many without, over the crossings).

What it showed (2026-11-28, this 2-core machine, under the timing lock; per hop, us,
measured / predicted; the two runs of 03:58 by a copy of this script that saved the
times and the cluster, without the CPU figures):

    run     w0-ps    w0-ps x2  w0-ps + w1-ps  three pairs  ring     rings x2
    03:49   111/112   75/183   143/150        228/184      124/112  206/132
    03:51   108/119   69/194   140/160        204/195      136/119  192/140
    03:53   118/127  229/223   253/179        347/224      140/127  242/154
    03:54    99/118   90/166   179/144        233/166      128/118  206/131
    03:58   128/118  237/193   260/159        408/193      155/118  262/139
    03:58   113/114   74/195   153/159        227/196      136/114  197/135

    04:00   102/117   74/158   140/140        206/158      131/117  201/127
    04:01   121/176  119/288   179/237        282/288      152/176  244/207
    04:03   113/130  216/184   169/161        368/185      142/130  237/143

    servers' CPU per crossing (03:53, 03:54, 04:00, 04:01, 04:03), us:
    w0-ps 118-174, w0-ps x2 113-128, w0-ps + w1-ps 125-161, three pairs 127-184,
    ring 149-184, rings x2 134-170
    their threads' waits for a core per crossing (04:00, 04:01, 04:03), us:
    w0-ps 77/42/99, w0-ps x2 84/35/93, w0-ps + w1-ps 180/82/210, three pairs
    300/188/320, ring 141/47/145, rings x2 292/102/251
    (04:01's calibration was slow, 176 us a crossing, so its predictions are high)

- Chains between different pairs of tasks at once are predicted short: two rings
  by 15-47% (their hops took 1.4-1.7 times one ring's), three pairs by up to 53%,
  one ring by 8-24% where the calibration was not slow (lc_idle_receiver_probe
  found it too).  The servers' CPU per crossing stays within about the same range
  however many chains run: a crossing among others costs no more work, it waits
  more.  The servers' threads' waits for a core (runnable, not running) per
  crossing grow with the chains at once, two to four times one chain's for three
  pairs and two rings.  The model packs the crossings' work on the two cores; the
  runtime's threads (readers, executor threads, three server processes and the
  client on two cores) queue for them.
- Two chains between the same two tasks are bimodal: 69-90 us per hop (the two
  keep both processes awake and cross faster than one alone) or 216-237 (one after
  the other; once 119); the model predicts 158-223 (288 on the slow calibration).
- These are the round-robin placements' conditions (every task sends to and
  receives from both others; lc_busy_receiver_probe's traces).  Two burst rules
  were tried on top of the model, paired on the 15 saved sim_vs_real runs of
  lc_busy_receiver_probe (per-run median |error| over the 16 static rows; median
  of the runs 14.3% before):
  (1) a burst of take-ins goes on only with crossings from the same sender (a
      reader thread per connection): rnn's round-robin rows -13.1% -> -6.1% (mean
      error), transformer's -12.0% -> -4.5%, mlp's -11.8% -> -10.1%, but every
      data_parallel row +5.7% -> +26.5% (its ps takes the two workers' gradients
      interleaved); median of the runs 16.3%.
  (2) a burst per sender (each reader's own), started by a crossing that finds the
      receiver free or taking another in: round-robin rows 1-2 points nearer,
      data_parallel 3 points further, the two rings of this probe 155 and 147 us
      against 139 and 135 (measured 262, 197); median of the runs 14.2%.
  Neither kept.  What is missing is scheduling (woken threads queued for a core
  behind the other processes' threads), not work: a model of it would need to know
  what holds the cores when the model has them free (the waits per crossing are
  there, if smaller, with one chain alone).
"""
import os
import sys

sys.path.insert(0, os.getcwd())

import numpy as np  # noqa: E402
import psutil  # noqa: E402

import core as ctf  # noqa: E402
import runtime  # noqa: E402
import sim  # noqa: E402
from core.placement import Placement  # noqa: E402
from experiments.backends import (RUNTIME_SIM, calibrate_this_host,  # noqa: E402
                                  runtime_cluster_spec, server_env, this_host_cluster)
from runtime.calibrate import _cpu, _interleaved_step_times, runtime_session  # noqa: E402

PS, W0, W1 = ("ps", 0), ("worker", 0), ("worker", 1)
REPEATS = 25
CPU_STEPS = 60
VARIANTS = {
    "w0-ps": [[W0, PS]],
    "w0-ps x2": [[W0, PS], [W0, PS]],
    "w0-ps + w1-ps": [[W0, PS], [W1, PS]],
    "three pairs": [[W0, PS], [W1, PS], [W0, W1]],
    "ring": [[W0, PS, W1]],
    "rings x2": [[W0, PS, W1], [W0, W1, PS]],
}


def graph(routes, hops: int, crossing: bool = True):
    """One chain of ``hops`` Identity ops per route, each hop on the route's next task
    (on the route's first task when not ``crossing``); a tiny op on every task."""
    def make():
        g = ctf.Graph()
        outs = []
        with g.as_default():
            for c, route in enumerate(routes):
                with ctf.device(_cpu(*route[0])):
                    x = ctf.constant(np.float32(c), name=f"x{c}")
                for i in range(hops):
                    here = route[(i + 1) % len(route)] if crossing else route[0]
                    with ctf.device(_cpu(*here)):
                        x = ctf.identity(x, name=f"c{c}_hop{i}")
                outs.append(x.op)
            for job, task in (PS, W0, W1):
                with ctf.device(_cpu(job, task)):
                    outs.append(ctf.identity(ctf.constant(np.float32(1.0), name=f"t{job}{task}"),
                                             name=f"d{job}{task}").op)
        return g, outs
    return make


def cpu_seconds(local) -> tuple[float, float]:
    """``(cpu, waiting)``: the CPU seconds (user and system) the cluster's server
    processes used so far, and the seconds their threads waited, runnable, for a core
    (``/proc/<pid>/task/<tid>/schedstat``'s second field; threads alive now)."""
    cpu = waiting = 0.0
    for proc in local.processes.values():
        cpu += sum(psutil.Process(proc.pid).cpu_times()[:2])
        for tid in os.listdir(f"/proc/{proc.pid}/task"):
            try:
                with open(f"/proc/{proc.pid}/task/{tid}/schedstat") as f:
                    waiting += int(f.read().split()[1]) * 1e-9
            except (OSError, IndexError, ValueError):  # (gone, or no schedstat here)
                pass
    return cpu, waiting


def cpu_per_crossing(local, cross, local_graph, crossings: int) -> tuple[float, float]:
    """The servers' CPU seconds and waits for a core per crossing (:func:`cpu_seconds`):
    ``CPU_STEPS`` steps of ``cross`` less as many of ``local_graph``, over the
    crossings (``crossings`` per step)."""
    used = []
    for make in (cross, local_graph):
        g, outs = make()
        with runtime_session(local.target(*W0), g, outs) as run:
            for _ in range(3):
                run()
            before = cpu_seconds(local)
            for _ in range(CPU_STEPS):
                run()
            after = cpu_seconds(local)
            used.append((after[0] - before[0], after[1] - before[1]))
    return tuple((used[0][i] - used[1][i]) / (CPU_STEPS * crossings) for i in (0, 1))


def main():
    hops = int(sys.argv[1]) if len(sys.argv) > 1 else 48
    builds = {}
    for name, routes in VARIANTS.items():
        builds[name, True] = graph(routes, hops)
        builds[name, False] = graph(routes, hops, crossing=False)
    base = this_host_cluster()
    cluster, figures = calibrate_this_host(base, env=server_env(), quick=True)
    print(f"calibrated latency {figures['transfer_latency'] * 1e6:.1f} us")
    with runtime.LocalCluster(runtime_cluster_spec(base), env=server_env()) as local:
        times = _interleaved_step_times(local, builds, W0, REPEATS)
        cpu = {name: cpu_per_crossing(local, builds[name, True], builds[name, False],
                                      hops * len(routes))
               for name, routes in VARIANTS.items()}
    predicted = {}
    for key, make in builds.items():
        g, outs = make()
        placement = Placement({op.name: op.device for op in g.get_operations()})
        predicted[key] = sim.simulate(g, placement, cluster, fetches=outs,
                                      config=RUNTIME_SIM).step_time
    print("per crossing of a chain, us: measured, predicted; the step with crossings, ms; "
          "the servers' CPU and waits for a core per crossing, us")
    for name in VARIANTS:
        measured = (min(times[name, True]) - min(times[name, False])) / hops
        model = (predicted[name, True] - predicted[name, False]) / hops
        print(f"  {name:16s} {measured * 1e6:6.1f}  {model * 1e6:6.1f} "
              f"({model / measured - 1:+4.0%})"
              f"   step {min(times[name, True]) * 1e3:6.2f} ms, predicted "
              f"{predicted[name, True] * 1e3:6.2f}; CPU {cpu[name][0] * 1e6:5.0f} us, waits "
              f"{cpu[name][1] * 1e6:5.0f} us")


if __name__ == "__main__":
    main()
