"""Run from the project root: `python docs/probes/lock_wake_probe.py`.

Issue 20 probe: does a thread that waited longer for the interpreter's lock (or for
its pool's queue) wake later once released?  The simulator's ``Task.lock_wakeup`` is
measured by two threads handing two locks back and forth
(:func:`runtime.calibrate.measure_lock_wakeup`), whose cores never go idle; in a step a
thread may wait milliseconds, and on a virtual machine a core with nothing to run
stops polling after a while, so waking its thread costs more.

Two cases, the median and 90th percentile of 40 each, by how long the thread slept:

- queue: the thread blocks in ``SimpleQueue.get`` (as the executor's pool threads
  do); this thread runs Python for the wait, then puts and blocks on an answer;
- lock: the thread runs a short ``nogil`` kernel and then needs the interpreter's lock,
  which this thread holds, running Python for the wait; then this thread blocks.

What it showed (2026-11-28 21:0x UTC, this 2-core VM under the timing lock, us, two
rounds):

    slept (us)       10     50    100    200    500   1000   3000
    queue wake     24/20  20/24  20/23  20/34  43/42  28/44  42/59
    lock wake      23/28  24/34  24/35  42/48  52/45  32/49  79/69

A thread woken after a tenth of a millisecond runs 20-25 us late, as the ping-pong
says (19.4 us in the same minute); after half a millisecond or more, 30-80 us.

Tried and not kept (a scratch change): ``Task.lock_wake_curve``, five such points
(25 us to 3 ms of waiting, measured by the calibration: 19-21 us up to 0.3 ms, 24-27
at 1 ms, 34-36 at 3 ms that evening), read by the simulator for each waiting thread
by how long it had waited.  Paired on one run each, the same measurements predicted
with and without the curve: in-process (``python -m experiments.sim_vs_inprocess``,
21:00) median |error| 5.9% -> 5.3% with it, 5 of 10 moved rows closer;
LocalCluster (``python -m experiments.sim_vs_real --no-loop --repeats 31
--calibrate-once``, 21:01) 3.2% -> 5.1%, 4 of 14 moved rows closer (the
round-robin-variables transformer +28% -> +33%).  Later wakes make the server
processes' steps slower in the model than they ran.
"""

import queue
import statistics
import threading
import time

import numpy as np

from gil_wake_probe import spin  # a nogil kernel of about n ns (this folder is on the path)


def python_for(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def queue_wake(wait: float, reps: int = 40) -> tuple[float, float]:
    """How late a thread blocked in ``SimpleQueue.get`` runs after the put."""
    work, answer, late = queue.SimpleQueue(), queue.SimpleQueue(), []

    def taker():
        while (put := work.get()) is not None:
            late.append(time.perf_counter() - put)
            answer.put(None)
    thread = threading.Thread(target=taker)
    thread.start()
    for _ in range(reps):
        python_for(wait)
        work.put(time.perf_counter())
        answer.get()
    work.put(None)
    thread.join()
    return statistics.median(late), float(np.percentile(late, 90))


def lock_wake(wait: float, reps: int = 40) -> tuple[float, float]:
    """How late a thread back from a ``nogil`` kernel runs after the lock is given up."""
    go, done, late, given = threading.Event(), queue.SimpleQueue(), [], [0.0]

    def waiter():
        for _ in range(reps):
            go.wait()
            go.clear()
            spin(200)  # without the lock: this thread takes it meanwhile
            late.append(time.perf_counter() - given[0])
            done.put(None)
    thread = threading.Thread(target=waiter)
    thread.start()
    for _ in range(reps):
        go.set()
        python_for(wait)  # holds the lock: the waiter waits for it
        given[0] = time.perf_counter()
        done.get()  # blocks: the lock goes to the waiter
    thread.join()
    return statistics.median(late), float(np.percentile(late, 90))


def main() -> None:
    spin(10)
    for _ in range(2):
        for wait in (10e-6, 50e-6, 100e-6, 200e-6, 500e-6, 1e-3, 3e-3):
            (qm, q9), (lm, l9) = queue_wake(wait), lock_wake(wait)
            print(f"slept {wait * 1e6:6.0f} us: queue wake {qm * 1e6:5.1f} (p90 {q9 * 1e6:5.1f}) us, "
                  f"lock wake {lm * 1e6:5.1f} (p90 {l9 * 1e6:5.1f}) us", flush=True)


if __name__ == "__main__":
    main()
