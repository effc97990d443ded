"""Run from the project root: `python docs/probes/gil_wake_probe.py [k_us ...]`.

Issue 20 §3 probe: how long does an executor thread woken from its queue take to get
the interpreter's lock from a thread that runs ops: short nogil kernels of ``k`` us
between about 2 us of Python each?  The simulator's model (``Task.lock_wakeup``,
measured by two threads handing a lock back and forth:
:func:`runtime.calibrate.measure_lock_wakeup`) lets the waiting thread in at the first
release after which the lock stays free for ``lock_wakeup``: with only short kernels it
waits until a long one (or the interpreter's 5 ms switch interval).

Thread A puts a token in a queue, then loops [numba ``nogil`` spin of ``k`` us, ~2 us
of Python] until thread B, blocked on the queue, has run a line of Python; the delay
from the put to that line, median and 90th percentile of 200, by ``k``; with A
running the whole time before each put, or idle 2 ms before it.

What it showed (2026-11-28 08:37 UTC, this 2-core VM under the timing lock; that
morning ``measure_lock_wakeup`` gave 15-42 us):

    k (us)             1     3     5     10    20    40    80    160
    busy before: med   41    30    31    38    26    29    33    35 us  (p90 30-94)
    idle 2 ms:   med   49    48    51    67    47    56    55    56 us  (p90 75-145)

The woken thread gets in after 30-55 us whatever the kernels' length, 1 us windows
included: not the model's rule (no window long enough, no entry), and about twice the
handed-lock figure.  Tried offline (a rule that lets the waiter in at the first release
``lock_wakeup`` after it asked, with the calibrated figure and with twice it) on 565
saved in-process rows: median |error| 17.6% now, 18.6% and 17.2% with the rule: no
gain worth the change; not kept.

Again on the quiet machine (2026-11-28 11:16, a scratch script: the busy case with k =
3 us, the median of 9 batches of 50 hand-offs, beside ``measure_lock_wakeup`` four
times in a row): the woken thread ran after 17.1-22.5 us, the lock ping-pong gave
18.9-21.6 us (ratio 0.88-1.10); this script, whose queue wakes its thread through a
Condition, gave 26 us busy and 52 us after 2 ms idle at k = 3 us (12:00).  The
executor's pool waits on a SimpleQueue, the scratch script's kind.  So the calibrated
figure stands: doubling it (``python -m experiments.repredict RUNS
--what-if "task.lock_wakeup*=2"``) predicted the saved runs a little better (in-process
11.8% -> 11.5% over 264 rows, 76 of 147 moved rows closer; our LocalCluster 13.5% ->
12.7% over 224, 88 of 154 closer), but no measurement says the lock wakes that late.
"""

import queue
import sys
import threading
import time

import numpy as np
from numba import njit


@njit(nogil=True, cache=True)
def spin(n):
    x = 0.0
    for i in range(n):
        x += i * 1e-9
    return x


def python_work(n: int = 40) -> int:
    s = 0
    for i in range(n):
        s += i
    return s


def trial(k_us: float, per_us: float, reps: int = 200, idle: float = 0.0):
    """Median and 90th percentile (us) from the put to the woken thread's first line."""
    n = max(1, int(k_us * per_us))
    tokens, got, done, waits = queue.Queue(), [0.0], threading.Event(), []

    def woken():
        while tokens.get() is not None:
            got[0] = time.perf_counter()
            done.set()
    thread = threading.Thread(target=woken, daemon=True)
    thread.start()
    for _ in range(reps):
        if idle:
            time.sleep(idle)
        done.clear()
        put = time.perf_counter()
        tokens.put(1)
        loops = 0
        while not done.is_set() and loops < 20000:
            spin(n)
            python_work()
            loops += 1
        waits.append((got[0] - put) * 1e6)
    tokens.put(None)
    thread.join()
    return float(np.median(waits)), float(np.percentile(waits, 90))


def spins_per_us() -> float:
    """Iterations of :func:`spin` per microsecond here (compiled first)."""
    spin(10)
    t0 = time.perf_counter()
    spin(10_000_000)
    return 10_000_000 / ((time.perf_counter() - t0) * 1e6)


def main(ks):
    per_us = spins_per_us()
    for idle in (0.0, 0.002):
        for k in ks:
            med, p90 = trial(k, per_us, idle=idle)
            print(f"idle {idle * 1e3:.0f} ms before each put, k={k:6.1f} us: the woken thread "
                  f"ran after {med:6.1f} us (p90 {p90:6.1f})", flush=True)


if __name__ == "__main__":
    main([float(a) for a in sys.argv[1:]] or [1, 3, 5, 10, 20, 40, 80, 160])
