"""Load benchmark of the distributed runtime: client threads stepping at once.

``--threads`` client threads (8) run steps for ``--seconds`` (30) on one session whose
master is a worker of a :class:`runtime.LocalCluster` (``{"ps": 1, "worker": 1}``):
every step increments a counter variable that lives on the ps task (``AssignAdd``) by a
one made on the worker, so each step crosses tasks. At the end the counter must equal the number of steps that
succeeded, exactly (no step lost or applied twice under load); the script exits 1
otherwise. It reports the steps per second and the percentiles of the steps' latency,
as a table and a CSV (``results/bench_load.csv``), with the cores other programs kept
busy meanwhile (``other_cores``: timings on a shared machine are only as good as the
quiet around them).

``--in-process`` runs the same load on an in-process session (no servers).

    python -m experiments.bench_load --threads 8 --seconds 30
"""

from __future__ import annotations

import sys
import threading
import time

import numpy as np
import pandas as pd

__all__ = ["main", "run_load"]


def _graph():
    import core as tf
    g = tf.Graph()
    with g.as_default():
        with tf.device("/job:ps/task:0"):
            counter = tf.Variable(np.int64(0), name="counter")
        with tf.device("/job:worker/task:0"):
            one = tf.identity(tf.constant(np.int64(1)), name="one")
        step = tf.assign_add(counter, one)  # on the ps task, with its variable
    return g, counter, step


def run_load(target: str | None, threads: int, seconds: float) -> dict:
    """Run the load on ``target`` (None: in-process); return the row of the table."""
    from runtime import SessionConfig
    from runtime.session import Session

    from experiments.machine_load import OtherLoad

    g, counter, step = _graph()
    config = SessionConfig(allow_soft_placement=target is None)  # in-process: one task
    latencies: list[list[float]] = [[] for _ in range(threads)]
    failures: list[BaseException] = []
    with Session(target, graph=g, config=config) as sess:
        sess.run(counter.initializer)
        sess.run(step)  # warm: placement, registration, kernels
        sess.run(counter.initializer)
        start = threading.Barrier(threads + 1)
        stop_at = [0.0]

        def client(mine: list[float]) -> None:
            start.wait()
            while time.perf_counter() < stop_at[0]:
                t0 = time.perf_counter()
                try:
                    sess.run(step)
                except Exception as err:  # noqa: BLE001 - counted, and the counter says
                    failures.append(err)
                    continue
                mine.append(time.perf_counter() - t0)

        workers = [threading.Thread(target=client, args=(latencies[i],), daemon=True)
                   for i in range(threads)]
        for w in workers:
            w.start()
        with OtherLoad() as load:
            stop_at[0] = time.perf_counter() + seconds
            began = time.perf_counter()
            start.wait()
            for w in workers:
                w.join()
            elapsed = time.perf_counter() - began
        final = int(sess.run(counter))
    lat = np.array([x for mine in latencies for x in mine]) * 1e3
    steps = int(lat.size)
    pct = np.percentile(lat, [50, 90, 99]) if steps else [np.nan] * 3
    return {"backend": "in-process" if target is None else "cluster", "threads": threads,
            "seconds": round(elapsed, 2), "steps": steps, "steps_per_s": steps / elapsed,
            "p50_ms": pct[0], "p90_ms": pct[1], "p99_ms": pct[2],
            "max_ms": float(lat.max()) if steps else np.nan, "errors": len(failures),
            "counter": final, "counter_exact": final == steps,
            "other_cores": load.other_cores}


def main(argv: list[str] | None = None) -> pd.DataFrame:
    """Parse ``argv``, run, print and save the table; exit status 1 when the counter is
    not exact (see the module docstring)."""
    from experiments.report import print_table, results_parser, save_table

    parser = results_parser(__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=8, help="client threads (default 8)")
    parser.add_argument("--seconds", type=float, default=30.0,
                        help="seconds of load (default 30)")
    parser.add_argument("--in-process", action="store_true",
                        help="an in-process session instead of a cluster of servers")
    args = parser.parse_args(argv)
    if args.threads < 1 or not args.seconds > 0:
        parser.error("--threads must be >= 1 and --seconds > 0")
    if args.in_process:
        row = run_load(None, args.threads, args.seconds)
    else:
        from runtime.launcher import LocalCluster
        with LocalCluster({"ps": 1, "worker": 1}) as cluster:
            row = run_load(cluster.target("worker", 0), args.threads, args.seconds)
    frame = pd.DataFrame([row])
    print_table(frame, f"load: {args.threads} client threads for {args.seconds:g} s")
    print(f"saved {save_table(frame, 'bench_load', args.out)}")
    return frame


if __name__ == "__main__":
    table = main()
    sys.exit(0 if bool(table["counter_exact"].iloc[0]) else 1)
