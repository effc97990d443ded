"""Run from the project root: `python docs/probes/lc_idle_receiver_probe.py [k ...]`.

Issue 20 §3 probe: does a tensor crossing between this lab's server processes cost
more when its receiver has been idle longer?  The calibration measures a crossing's
latency along a chain of tiny ops passed back and forth between the ps and worker 0
(:func:`runtime.calibrate.measure_process_transfer`): there each process waits about
one round trip (two crossings) for the next tensor.  In a workload's round-robin
placement a task can wait much longer, and on this virtual machine (Firecracker,
``haltpoll`` cpuidle with ``guest_halt_poll_ns=0``: an idle virtual CPU halts at once
and the host must wake it) waking a process that slept longer could cost more.

A chain of ``N`` (48) crossings between worker 0 and the ps, each followed by ``k``
tiny Identity ops on the task it reached (so the other task waits ``k`` ops longer
for each tensor), against the same ops all on worker 0 (no crossing), in the same
rounds (the fastest of 40 steps each); per ``k``: the step measured and predicted
(on a cluster calibrated right before, :func:`experiments.backends.calibrate_this_host`)
and what each crossing adds, measured and predicted.  Last, a ring of three tasks
(worker 0, ps, worker 1: each waits two crossings) and the chain between the two
workers.

What it showed (2026-11-28 01:02 and 01:04 UTC, this 2-core machine, under the timing
lock; per crossing, us):

    chain, k =      0     8    16    24    32    48    64   128
    01:04         105   116   125     .   117     .   135   140     (predicted 113)
    01:02         109   117     .   116     .   151     .     .     (predicted 107)
    ring of three (k = 0): 130 (predicted 107); chain between the workers: 107

A crossing whose receiver waited longer costs more, up to about a third more after
a few hundred microseconds idle, and the ring of three tasks was predicted 12% short.
But in the simulator's prediction of rnn's round-robin placement (295 crossings,
measured 20 to 30% above the prediction) 59% of the crossings find their receiver's
dispatcher busy and only 17% idle for more than 220 us: a wake-up cost of 30 us after
a long idle (a trial in the take-in, not kept) moved that row by one point and the
others by less (four runs' rows re-predicted).  What those rows miss is elsewhere
(a busy receiver: in the same session a chain of crossings beside a chain of 1,200
tiny ops on its receiver took 12.5 ms against 8.0 and 5.8 ms alone, predicted 10.8).
Not kept.
"""
import os
import sys

sys.path.insert(0, os.getcwd())

import numpy as np  # noqa: E402

import core as ctf  # noqa: E402
import runtime  # noqa: E402
from experiments.backends import (RUNTIME_SIM, calibrate_this_host, pinned_step,  # noqa: E402
                                  runtime_cluster_spec, server_env, this_host_cluster)
from runtime.calibrate import _cpu, _interleaved_step_times  # noqa: E402

PS, W0, W1 = ("ps", 0), ("worker", 0), ("worker", 1)
N = 48


def graph(route, k: int, crossing: bool = True):
    """A tensor passed ``N`` times along ``route`` (else kept on its first task), each
    hop followed by ``k`` Identity ops where it landed; a tiny op on every task."""
    def make():
        g = ctf.Graph()
        outs = []
        with g.as_default():
            with ctf.device(_cpu(*route[0])):
                x = ctf.constant(np.float32(1.0), name="x")
            for i in range(N):
                here = route[(i + 1) % len(route)] if crossing else route[0]
                with ctf.device(_cpu(*here)):
                    x = ctf.identity(x, name=f"hop{i}")
                    for j in range(k):
                        x = ctf.identity(x, name=f"hop{i}_{j}")
            outs.append(x.op)
            for job, task in (PS, W0, W1):
                with ctf.device(_cpu(job, task)):
                    outs.append(ctf.identity(ctf.constant(np.float32(1.0), name=f"t{job}{task}"),
                                             name=f"d{job}{task}").op)
        return g, outs
    return make


def main():
    ks = [int(a) for a in sys.argv[1:]] or [0, 8, 16, 32, 64, 128]
    variants = {}
    for k in ks:
        variants[("chain", k)] = graph([W0, PS], k)
        variants[("local", k)] = graph([W0, PS], k, crossing=False)
    variants[("ring of three", 0)] = graph([W0, PS, W1], 0)
    variants[("workers' chain", 0)] = graph([W0, W1], 0)
    base = this_host_cluster()
    cluster, figures = calibrate_this_host(base, env=server_env())
    print(f"calibrated latency {figures['transfer_latency'] * 1e6:.1f} us")
    with runtime.LocalCluster(runtime_cluster_spec(base), env=server_env()) as local:
        times = _interleaved_step_times(local, variants, W0, 40)
    predicted = {key: pinned_step(make, cluster, config=RUNTIME_SIM)
                 for key, make in variants.items()}
    for key in variants:
        if key[0] == "local":
            continue
        local_key = ("local", key[1])
        measured = min(times[key])
        each = (measured - min(times[local_key])) / N
        each_predicted = (predicted[key] - predicted[local_key]) / N
        print(f"{key[0]:15s} k={key[1]:3d}: step {measured * 1e3:7.3f} ms (predicted "
              f"{predicted[key] * 1e3:7.3f}); per crossing {each * 1e6:6.1f} us (predicted "
              f"{each_predicted * 1e6:6.1f})")


if __name__ == "__main__":
    main()
