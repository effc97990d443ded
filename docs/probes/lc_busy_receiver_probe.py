"""Run from the project root: `python docs/probes/lc_busy_receiver_probe.py [busy ops]`.

Issue 20 §3 probe: when does a tensor that reaches a busy server process get taken in?

Worker 0 (the receiver) runs a chain of ``B`` (default 600) tiny ops from the step's
start; its dispatch rate is the same in every variant.  The ps runs a chain of ``P``
tiny ops, then sends a scalar to worker 0, whose Identity sends it back; the ps then
runs a chain of ``R`` (= ``B``) tiny ops.  So the round trip's take-in on worker 0
decides when the ps's second chain starts: taken in at once, the step ends about
``P + 2 crossings + R`` after its start; taken in only when worker 0's chain ends,
about ``B + crossing + R``.  ``P`` places the arrival early in worker 0's busy
stretch (``P = 0``) or after it (``P = 2 B``: the idle receiver, the control).
The busy chain is of three kinds, about the same length:
- ``hold``: Identity ops on scalars (numpy copies: the thread never gives up the
  interpreter's lock between them);
- ``release``: Add ops on scalars (each calls a numba ``nogil`` kernel: the lock is
  let go for a moment per op);
- ``kernels``: a few large Mul ops (the lock is free for most of the stretch);
and ``none`` (no busy chain).  Each variant is timed in the same rounds
(:func:`runtime.calibrate._interleaved_step_times`, fastest of ``REPEATS`` steps) and
predicted on a cluster calibrated just before (:func:`experiments.backends.
calibrate_this_host`, quick), with the busy chains alone.  Printed per variant:
measured and predicted; then per kind what the round trip adds on a busy receiver
(:func:`extra`), measured and predicted.

What it showed (2026-11-28, this 2-core machine, under the timing lock; what the
round trip adds to the longer of the step's two parts alone (the busy chain; the
round trip and the ps's chains: ``extra``), ms, measured / predicted by the kept
model; the busy chain alone took: hold 2.7-3.0 ms at B = 600, 6.5-6.8 at 1500;
release 4.1-4.3 and 9.5-9.7; kernels 1.3-1.7):

    B       run     hold           release        kernels
    600     03:34   2.52 / 0.00    0.40 / 0.16    0.09 / 0.06
    600     03:45   2.42 / 0.00    0.62 / 0.19    0.50 / 0.11
    600     04:14   2.48 / 0.01    0.38 / 0.14    0.12 / 0.07
    1500    03:35   5.69 / 0.01    1.10 / 0.22    0.25 / 0.05
    1500    03:47   5.37 / 0.01    0.66 / 0.16    0.30 / 0.01

- A receiver whose thread runs a chain of ops that never let go of the interpreter's
  lock (``hold``) takes a crossing in only when the chain ends, or after CPython's
  switch interval (5 ms: at B = 1500 the round trip adds 5.4-5.7 ms where the chain
  ran 6.5-6.8).  The model lets it in at once (its take-in is booked right after the
  op then running).
- Ops that let the lock go for a moment (``release``, a numba ``nogil`` call per op)
  let the reader in early: the round trip adds 0.4-1.1 ms, a tenth of the chain
  (the reader, woken at each release, wins the lock only when it finds it free);
  the model adds 0.14-0.22.
- Ops whose kernels run long (``kernels``) let it in at once, measured and predicted.
  The absolute predictions of the tiny-op chains were 20-45% high (the calibrated
  dispatch per op is the one between kernels; 03:45's and 04:14's calibrations were
  made in slow spells, 1.5-2x), which is why only what the round trip adds is
  compared.

Tried, on top of ``RuntimeModel.INTERPRETER`` (a ``readers_wait_for_lock`` part),
and NOT kept: a take-in that finds its receiver's dispatcher held by ops (not by
another take-in, which the reader goes on from) waits for it (1) as an op's thread
waits for the lock, in the same queue (it gets it when the holder leaves it free
``lock_wakeup`` long, or after the switch interval; a crossing that waited starts no
burst); (2) until the holder has left it free ``lock_wakeup`` in all since it asked
(each release wakes the reader; it wins in proportion to the time the lock is free);
(3) as (2), but only while the holder is an op whose kernel runs in the interpreter
(Const, Variable, Identity, Reshape and other data movement: the only one that
keeps ``release`` as the kept model has it).  (1) and (2) predicted
``hold`` (3.7 and 5.0 ms at B = 600, 5.0 at 1500) and ``release`` late (3.7 ms at
B = 600; 0.6 and 1.0 at 1500).  Paired on the same measurements (each of 15 saved
``sim_vs_real --no-loop --repeats 31 --calibrate-once`` runs of 01:12-02:19 UTC,
its 16 static rows re-predicted on its own first calibration; the per-run median
|error| old -> new):

    (1)  13.1->14.5 22.1->22.1 23.3->20.2 23.4->20.8 6.9->6.4 5.8->5.5 17.7->17.7
         14.4->14.4 12.8->12.5 14.3->16.3 24.7->24.5 21.5->21.3 8.7->8.8 8.7->9.3
         10.3->10.2  (median of the runs 14.3 -> 14.5)
    (2)  better in 2 runs, worse in 7, same in 6 (median of the runs 14.3 -> 14.5)
    (3)  within a point in every run but two (5.8 -> 7.4, 8.7 -> 9.5)

By row, (1) moved rnn's round-robin rows toward their measurement (mean error -13.1%
-> -11.0%) but transformer's and mlp's round-robin rows away (-12.0% -> -13.7%,
-11.8% -> -12.5%): a crossing that waits lets the receiver's own ops go first, which
can shorten the predicted step.  What the round-robin rows miss is elsewhere: in
traced steps of rnn's and transformer's round-robin placements (3 each, 03:38 UTC,
on a cluster calibrated there), the slowest quarter of their crossings took 0.9-1.3
ms (rnn) and 1.9-3.2 ms (transformer) from the producer's end to the receiver's
callback, while the receiver ran its own ops for only 3-26% of that time; within
each, 3-9 other crossings reached the same receiver and 5-9 left its sender.  From
a producer's end to its consumer's start, the quartiles were 227-326 / 641-762 /
5411-6060 us measured against 197 / 490 / 5028 predicted (rnn), 283-481 / 877-1681 /
7117-8877 against 276 / 839 / 6945 (transformer).  A receiver busy with its own ops
is not what holds them; crossings in flight together cost more than the model's.
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
REPEATS = 25
BIG = 1 << 20  # elements of a 'kernels' chain op


def busy_chain(kind: str, ops: int):
    """The ops of worker 0's busy chain of ``kind`` (inside a graph's context) and
    its last op, or None for ``none``."""
    if kind == "none":
        return None
    if kind == "kernels":
        x = ctf.constant(np.ones(BIG, np.float32), name="big")
        for i in range(ops):
            x = ctf.multiply(x, np.float32(1.0), name=f"b{i}")
        return x.op
    x = ctf.constant(np.float32(1.0), name="y")
    one = ctf.constant(np.float32(0.0), name="zero")
    for i in range(ops):
        x = ctf.identity(x, name=f"b{i}") if kind == "hold" else ctf.add(x, one, name=f"b{i}")
    return x.op


def graph(kind: str, busy: int, pre: int, post: int, crossing: bool = True):
    """The probe's graph: worker 0's busy chain; the ps's ``pre`` chain, the round
    trip (kept on the ps when not ``crossing``), the ps's ``post`` chain."""
    def make():
        g = ctf.Graph()
        outs = []
        with g.as_default():
            with ctf.device(_cpu(*W0)):
                last = busy_chain(kind, busy)
                if last is not None:
                    outs.append(last)
            with ctf.device(_cpu(*PS)):
                x = ctf.constant(np.float32(1.0), name="x")
                for i in range(pre):
                    x = ctf.identity(x, name=f"pre{i}")
            with ctf.device(_cpu(*(W0 if crossing else PS))):
                x = ctf.identity(x, name="there")
            with ctf.device(_cpu(*PS)):
                x = ctf.identity(x, name="back")
                for i in range(post):
                    x = ctf.identity(x, name=f"post{i}")
            outs.append(x.op)
            with ctf.device(_cpu(*W1)):
                outs.append(ctf.identity(ctf.constant(np.float32(1.0), name="t"), name="d").op)
        return g, outs
    return make


def main():
    busy = int(sys.argv[1]) if len(sys.argv) > 1 else 600
    big_ops = 6
    variants = {}
    for kind in ("none", "hold", "release", "kernels"):
        n = big_ops if kind == "kernels" else busy
        for pre in (0, 2 * busy):
            variants[(kind, pre)] = graph(kind, n, pre, busy)
    for kind in ("hold", "release"):
        variants[("busy alone", kind)] = graph(kind, busy, 0, 0, crossing=False)
    variants[("busy alone", "kernels")] = graph("kernels", big_ops, 0, 0, crossing=False)
    base = this_host_cluster()
    cluster, figures = calibrate_this_host(base, env=server_env(), quick=True)
    print(f"calibrated: latency {figures['transfer_latency'] * 1e6:.1f} us, dispatch "
          f"{figures['op_overhead'] * 1e6:.2f} us/op (chain "
          f"{figures['chain_op_overhead'] * 1e6:.2f})")
    with runtime.LocalCluster(runtime_cluster_spec(base), env=server_env()) as local:
        times = _interleaved_step_times(local, variants, W0, REPEATS)
    predicted = {key: pinned_step(make, cluster, config=RUNTIME_SIM)
                 for key, make in variants.items()}
    print("ms: measured, predicted")
    for key in variants:
        measured = min(times[key])
        print(f"{str(key):24s} {measured * 1e3:7.3f}  {predicted[key] * 1e3:7.3f} "
              f"({predicted[key] / measured - 1:+4.0%})")
    print("what the round trip adds on a busy receiver, ms: measured, predicted")
    for kind in ("hold", "release", "kernels"):
        print(f"  {kind:8s} {extra(kind, {k: min(v) for k, v in times.items()}) * 1e3:6.3f}  "
              f"{extra(kind, predicted) * 1e3:6.3f}")


def extra(kind: str, steps: dict) -> float:
    """What a crossing into a busy receiver adds, in ``steps`` (seconds by variant):
    the step with the busy chain and the early round trip less the longer of its two
    parts alone (the busy chain; the round trip and the ps's chains)."""
    return steps[kind, 0] - max(steps["busy alone", kind], steps["none", 0])


if __name__ == "__main__":
    main()
