"""Run from the project root: `python docs/probes/pool_handoff_probe.py [workload] [steps]`.

Issue 20 probe: when the in-process executor queues a ready op on its device's
inter-op pool (two threads), which thread takes it, and how long after?  The default
workload is ``gnmt:batch=4``, whose two-thread steps run slower than its one-thread
steps while the simulator predicts them faster (``inter_op_gain_probe.py``).

The probe gives the inter-op pools a queue that logs when an op is put on it and when a
thread's ``get`` returns it, and since when that thread waited there
(:class:`LoggedQueue`), and wraps the executor's ``_run_one`` (which thread runs each
op), then runs ``steps`` untraced steps on the session's default pool. Per step: ops
queued; taken by the thread that queued them (back from its own chain) or by another;
median time from queued to taken. Over all steps: for the ops whose taker was already
waiting in ``get`` when they were queued, the time it took to wake and take them (the
interpreter's lock hand-over), by what the queuing thread ran meanwhile.

What it showed (2026-11-28 13:15 UTC, this 2-core VM under the timing lock, 20 steps of
13.5-31.3 ms, median 14.7 ms, the logging's own cost included):

- Of a step's 1234 ops, 34 go through the queue; the thread that makes an op ready
  runs the others itself (its cheap successors and one other, ``Executor._dispatch``).
  8 of the 34 are queued by the step's caller.  28-34 are taken by another thread,
  0-6 by the thread that queued them, back from its chain.
- A queued op waits a median 0.02-1.1 ms per step to be taken.  Most find both pool
  threads busy, each in a chain of its own (or holding an op while it waits for a
  slot, the caller holding the other), and are taken when one comes back.
- The others found a thread waiting in ``get`` (245 over the 20 steps).  It took them
  after a median 82 us (quartiles 22 and 332 us, at most 3.9 ms):
  - 116 while the queuing thread went straight into a long kernel (a gradient
    MatMul): median 21.3 us.  The lock is free there; the waiter has only to wake;
  - 129 while the queuing thread ran a chain of ops (3 to 148 between the put and the
    take): median 287 us.  A waiter gets the lock only in a kernel long enough for it
    to wake, or after the interpreter's 5 ms switch interval.

An earlier version of this probe replaced the pool threads' loop with a logging copy
(12:17-12:36): its steps took 17.5-26.5 ms and the wake with the lock free 37.5 us;
the shape was the same (34 queued, chains 661 us).  The figures above are from this
lighter logging.

The simulator has both parts, in a simpler form: a queued op that finds a free slot
starts at once when the dispatcher (the lock) is free, else ``lock_wakeup`` after it
is freed if no one takes it meanwhile (16.5 us in that morning's calibration).  The
21 us wake with the lock free is about one ``lock_wakeup``, which the model counts as
none; a rule that woke an idle pool thread ``lock_wakeup`` late was tried that morning
(in scratch) and made mlp's gain worse (1.268 -> 1.340 against 0.98 measured), so
nothing was changed from this probe alone.
"""

import os
import sys

if __name__ == "__main__":  # as the experiments run the executor
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import collections
import queue
import statistics
import threading
import types
from time import perf_counter

import pandas as pd

from runtime import executor, local_devices

LOG: list = []  # (time, event, op index, thread id, extra)


class LoggedQueue(queue.SimpleQueue):
    """The pools' queue, logging each item put (``"put"``) and each item a thread's
    ``get`` returns (``"got"``, with since when that thread waited there)."""

    def put(self, item, block=True, timeout=None):
        LOG.append((perf_counter(), "put", item[1], threading.get_ident(), None))
        super().put(item, block, timeout)

    def get(self, block=True, timeout=None):
        waiting_since = perf_counter()
        item = super().get(block, timeout)
        LOG.append((perf_counter(), "got", item[1], threading.get_ident(), waiting_since))
        return item


def instrument() -> None:
    """Give the pools made from now on a :class:`LoggedQueue`, and wrap the executor's
    ``_run_one``, to log into LOG."""
    ident = threading.get_ident
    local_devices.queue = types.SimpleNamespace(SimpleQueue=LoggedQueue)

    run_one = executor._Step._run_one

    def logged_run_one(self, slot, i):
        LOG.append((perf_counter(), "run", i, ident(), self.xp.nodes[i].name))
        try:
            return run_one(self, slot, i)
        finally:
            LOG.append((perf_counter(), "end", i, ident(), None))

    executor._Step._run_one = logged_run_one


def analyse(log: list, caller: int, wakes: list) -> dict:
    """One step's row; appends ``(wake us, ops the queuing thread ran meanwhile,
    its longest of them in us)`` to ``wakes`` for each op taken by a waiting thread."""
    puts = {e[2]: e for e in log if e[1] == "put"}
    runs, started = collections.defaultdict(list), {}
    for e in log:
        if e[1] == "run":
            started[(e[3], e[2])] = e[0]
        elif e[1] == "end":
            runs[e[3]].append((started.pop((e[3], e[2])), e[0]))
    kinds, delays = collections.Counter(), []
    for e in log:
        if e[1] != "got" or e[2] not in puts:
            continue
        put_at, putter = puts[e[2]][0], puts[e[2]][3]
        kinds["self" if e[3] == putter else "other"] += 1
        delays.append(e[0] - put_at)
        if e[3] != putter and e[4] < put_at:
            between = [b - a for a, b in runs[putter] if b > put_at and a < e[0]]
            wakes.append(((e[0] - put_at) * 1e6, len(between), max(between, default=0.0) * 1e6))
    return {"queued": len(puts), "by_caller": sum(p[3] == caller for p in puts.values()),
            "taken_by_self": kinds["self"], "taken_by_other": kinds["other"],
            "median_wait_us": round(statistics.median(delays) * 1e6, 1) if delays else None}


def main(name: str = "gnmt:batch=4", steps: int = 20) -> None:
    import runtime
    from experiments.sim_vs_real import build_workload
    w = build_workload(name)
    instrument()
    session = runtime.Session(graph=w.graph)
    if w.init is not None:
        session.run(w.init)
    for _ in range(3):
        session.run(w.fetch_ops, feed_dict=w.feeds or None)
    rows, wakes = [], []
    for _ in range(steps):
        LOG.clear()
        t0 = perf_counter()
        session.run(w.fetch_ops, feed_dict=w.feeds or None)
        row = {"step_ms": round((perf_counter() - t0) * 1e3, 3)}
        row.update(analyse(list(LOG), threading.get_ident(), wakes))
        rows.append(row)
    session.close()
    pd.set_option("display.width", 200)
    threads = session.config.inter_op_parallelism_threads or "the default"
    print(name, "on", threads, "inter-op threads")
    print(pd.DataFrame(rows).sort_values("step_ms").to_string(index=False))
    if wakes:
        frame = pd.DataFrame(wakes, columns=["wake_us", "ops_meanwhile", "longest_us"])
        print("ops taken by a thread that waited for them:")
        print(frame.describe().round(1).to_string())
        one_kernel = frame[frame.ops_meanwhile <= 2].wake_us
        chains = frame[frame.ops_meanwhile > 2].wake_us
        print(f"  queuing thread in one long kernel: {len(one_kernel)}, median "
              f"{one_kernel.median():.1f} us; running a chain of ops: {len(chains)}, median "
              f"{chains.median():.1f} us")


if __name__ == "__main__":
    main(*(sys.argv[1:2] or []), *(int(a) for a in sys.argv[2:3]))
