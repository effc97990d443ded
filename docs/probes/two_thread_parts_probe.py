"""Run from the project root: `python docs/probes/two_thread_parts_probe.py [workload]`.

Issue 20 probe: gnmt's in-process step is predicted 20-30% too fast on the default two
inter-op threads, the worst row of ``experiments.sim_vs_inprocess``.  How much of that
is the one-thread model, and how much what the second thread costs; and is it the
backward pass (old inputs, the optimizer's updates) or already the forward pass?

Under one calibration (:func:`runtime.calibrate`), the workload's graph runs untraced
with three sets of fetches, taking turns (the fastest of 40 steps each): the loss (the
forward pass), every gradient (no updates), and the whole training step; on one
inter-op thread, then on two; each predicted by :func:`sim.simulate` on the calibrated
cluster with the same number of inter-op threads.

What it showed (2026-11-28, this 2-core VM under the timing lock; gnmt with batch 4;
ms measured (us per op) and the prediction's error):

                            20:55, this script          20:54, a calibration of 20:29
    one thread   forward    3.91 (7.92)   -3.3%         4.27 (8.65)   -12.2%
    (494, 1167,  gradients  9.16 (7.85)   -3.5%         10.24 (8.78)  -16.2%
    1234 ops)    step       10.68 (8.65)  -3.4%         11.85 (9.60)  -15.3%
    two threads  forward    4.40 (8.90)   -13.2%        4.94 (10.00)  -23.7%
                 gradients  12.02 (10.30) -24.8%        13.02 (11.16) -34.2%
                 step       12.38 (10.03) -22.9%        13.51 (10.95) -30.4%

- With a calibration of the same minute, the one-thread model is within 3.5% on every
  part; with one taken half an hour earlier, 12-16% short (the machine changes speed
  within the hour, and gnmt's steps with it, more than the calibration's figures).
- The second thread makes the real step 14-16% slower than one thread, from the
  forward pass on (the encoder's forward and backward chains run on the two threads,
  each op's kernel a few microseconds, so the interpreter's lock changes hands, or
  fails to, around every op), where the model makes it 3-7% faster.  That is most of
  gnmt's error in ``sim_vs_inprocess``: about 1.4 us per op.
- The same for two other large graphs (21:1x, this script): transformer:batch=2, one
  thread 4.62 ms measured, -1.2% predicted; two threads 5.02 ms (9% slower than one),
  -9.2%.  inception_v3:batch=2, whose kernels are longer, gains from the second thread
  (9.24 -> 8.35 ms; predicted 8.19 -> 7.93 ms): its error is the one-thread model's
  gradients (-13.5%), not the second thread.
- Not at the hand-overs (a scratch script on the
  three fastest of 20 traced two-thread gnmt steps, 21:1x): where one thread's op
  follows the other's with nothing running between, it starts 5 us after, as on one
  thread; where a thread's kernel record spans the other thread's ops (it waited for
  the lock), it ends 11-53 us (median 14) after the other's last op, 27 times a step,
  0.5 ms in all, about what ``lock_wakeup`` gives.  The loss is elsewhere.
- It is in the threads' sleeps.  Context switches of the process per untraced step
  (``/proc/<pid>/task/*/status``, 30 steps each, 21:5x): gnmt 5 voluntary switches on
  one thread, 371-375 on two, and 12.1 ms of CPU per step against 17.2-18.2 ms (wall
  11.2-11.5 ms fastest against 13.1-13.6); transformer:batch=2 9 against 89 (4.50 ->
  5.47 ms fastest); resnet50:batch=2 12 against 90 (fastest 5.67 -> 5.71 ms, mean
  6.09 -> 8.93); inception_v3:batch=2 11 against 25 (8.30 -> 8.70); rnn 0 and 0, no
  loss.  A thread waiting for the lock is woken at each release, finds the lock taken
  again and sleeps: each such wake burns about 15 us of CPU on the other core and
  costs the releasing thread a wake-up call, about 5 us of gnmt's step per switch.
  In a micro-benchmark where a second thread wants the lock after every 1 us kernel,
  the first thread's [Python, 1 us kernel] ops went from 2.0-2.8 to 3.8-5.2 us each.
  A model would count, per task, the releases of the lock while another thread
  sleeps waiting for it, charge the releaser the wake-up and the host the woken
  thread's CPU; its figures by a micro-benchmark, not by gnmt.  But the simulator's
  waits are not the runtime's: its lock waits and re-waits per step (the calibration
  of 21:32) are gnmt 294, transformer:batch=2 201, resnet50:batch=2 223,
  inception_v3:batch=2 147, rnn 0, against the sleeps above (371, 89, 90, 25, 0).
  A cost per dispatch made while another thread waits (re-predicting four runs of
  21:08-21:32) took gnmt from -23.7% to -10.6% at 2 us and +5.4% at 5 us, but
  resnet50:batch=2 from -2.1% to +19.8% and +51.3%: the graphs with longer kernels
  wait in the model where the runtime's threads get the lock at once.  The rule
  for who waits has to match those counts first.
- The lock's cost with both threads busy on microsecond kernels is in
  ``inter_op_gain_probe.py`` (0.4-0.5 us per op in the fastest runs, about 1 us in the
  median); a per-dispatch cost while another thread waits was tried there and not
  kept (it fitted gnmt's loss only at 1 us, and then took 10% off resnet50's gain).
"""

import sys
import time

import runtime
import sim
from core.graph import ops_needed
from core.placement import Placement
from experiments.sim_vs_real import build_workload


def parts_of(w) -> dict:
    """The fetches of the forward pass, the gradients and the whole step."""
    g = w.graph
    grads = [op for op in g.get_operations() if op.name.startswith("gradients/") and not any(
        c.name.startswith("gradients/") for t in op.outputs for c in t.consumers())]
    return {"forward": [w.loss.op], "gradients": grads, "step": list(w.fetch_ops)}


def measure(w, parts: dict, threads: int, steps: int = 40) -> dict:
    """The fastest untraced step of each part on ``threads`` inter-op threads."""
    config = runtime.SessionConfig(inter_op_parallelism_threads=threads,
                                   use_per_session_threads=True)
    times = {k: [] for k in parts}
    with runtime.Session(graph=w.graph, config=config) as s:
        if w.init is not None:
            s.run(w.init)
        for _ in range(5):
            for fetches in parts.values():
                s.run(fetches, feed_dict=w.feeds or None)
        for _ in range(steps):
            for k, fetches in parts.items():
                t0 = time.perf_counter()
                s.run(fetches, feed_dict=w.feeds or None)
                times[k].append(time.perf_counter() - t0)
    return {k: min(v) for k, v in times.items()}


def main(name: str = "gnmt:batch=4") -> None:
    cluster = runtime.calibrate()
    cpu = cluster.devices[0]
    w = build_workload(name)
    placement = Placement({op.name: cpu.name for op in w.graph.get_operations()})
    parts = parts_of(w)
    for threads in (1, 2):
        measured = measure(w, parts, threads)
        on = cluster.replace_device(cpu.name, inter_op_threads=threads)
        for k, fetches in parts.items():
            n = len(ops_needed(fetches))
            pred = sim.simulate(w.graph, placement, on, fetches=fetches).step_time
            m = measured[k]
            print(f"{threads} thread(s), {k}: {n} ops, measured {m * 1e3:.2f} ms "
                  f"({m / n * 1e6:.2f} us/op), predicted {pred * 1e3:.2f} ms "
                  f"({(pred - m) / m * 100:+.1f}%)", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
