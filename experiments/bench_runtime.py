"""Benchmark: the distributed runtime on a cluster of 1 ps + 2 worker processes.

Starts the servers with :class:`runtime.launcher.LocalCluster` (all on 127.0.0.1, one
host) and measures, with a client session opened on ``/job:worker/task:0``:

1. ``tiny step``: seed 000's graph (``a`` a variable on ps, ``b = a + 2`` on worker 0,
   ``c = a + b`` on worker 1), fetch ``c``: ms per step; with the servers' defaults
   between processes of one host (``local``: steps as messages on local Unix-socket
   connections, small tensors pushed on them) and by gRPC only, as between hosts
   (``grpc``: ``local_sockets=False``, steps as messages on open gRPC streams, small
   tensors pushed on an open gRPC stream; ``a`` for worker 0 rides in ps's answer to
   the master, worker 0). Eight messages cross per step, six of them one after the
   other: client -> worker 0 -> ps -> worker 0 (``a``) -> worker 1 (``b``) -> worker 0
   (``c``) -> client.
2. ``transfer``: a 64 MiB float32 variable on ps read by worker 1 (which slices one
   element of it, so the step is the transfer), through shared memory (``shm``, the
   servers' default between tasks of one host) and over the socket (``socket``: a
   chunked gRPC stream, on the gRPC-only cluster): GB/s of the whole step, and of the
   transfer record in the trace.
3. ``mlp``: ``experiments.workloads.mlp_forward`` (8 layers of 1024x1024 matmul + relu,
   batch 1024, 17.2 GFLOP) on worker 0, fetching the output: ms and GFLOP/s; and the
   same arithmetic in numpy in this process (``transport`` ``numpy``).  With
   TensorFlow here, ours, TensorFlow's (on its own servers, started beside ours) and
   numpy's are timed side by side (:func:`mlp_side_by_side`): a step of each per
   round, the order rotating, with 0.2 s of untimed sleep before each (numpy's BLAS
   threads spin on for about 0.1 s after a call), so that all three see the same load:
   this shared machine's speed drifts within a minute, and measured one after the
   other two runtimes drifted apart by up to 1.7x.  Without TensorFlow, ours and
   numpy's are timed that way, and the MLP's reference is TensorFlow's 83 ms scaled
   by numpy's rate now over its rate then (195 GFLOP/s).

Each figure is the median of ``--repeats`` timed steps after warm-up steps. When
``tensorflow`` is importable (``pip install -e '.[tensorflow]'``: ``tensorflow-cpu``), the
same graphs run on TensorFlow's own distributed runtime (``tf.compat.v1``,
``tf.distribute.Server`` processes, same cluster shape) and the table shows the ratios
(``vs_tf`` > 1: ours better; the MLP's from the same rounds, the tiny step's and the
transfer's from a minute apart).  Otherwise the reference figures measured with
TensorFlow 2.21 (1.5 ms, 1.2 GB/s, 83 ms) are used. Run::

    python -m experiments.bench_runtime                 # everything
    python -m experiments.bench_runtime --repeats 20 --skip-mlp

It prints a pandas table and writes ``results/bench_runtime.csv``.  Beside the MLP's
figures, the ``blas`` column names the BLAS library that computed them (internal API,
version, the kernel family it picked for this CPU, file: :func:`blas_column`): for ours
the copy the runtime's MatMul kernel calls (scipy's, through numba's ``np.dot``), for
``numpy`` numpy's own; the report prints every BLAS library with its threads and file
(:func:`experiments.provenance.blas`, which the run's ``run.json`` records too).
"""

from __future__ import annotations

import contextlib
import statistics
import subprocess
import sys
import textwrap
import time

import numpy as np
import pandas as pd

import core as tf
from experiments import cli, provenance
from experiments.machine_load import OtherLoad
from experiments.report import Run, finish
from runtime.launcher import LocalCluster, free_ports, wait_until_serving
from runtime.session import Session


#: TensorFlow 2.21's distributed runtime on this setup (issue 4): tiny step (ms),
#: 64 MiB ps -> worker (GB/s), MLP forward (ms).
TF_REFERENCE = {"tiny step": 1.5, "transfer": 1.2, "mlp": 83.0}
#: numpy's own matmul rate on this machine when TensorFlow's MLP was measured (GFLOP/s):
#: TensorFlow's 207 GFLOP/s were 1.06x it.  The machine's speed drifts from day to day
#: (a shared VM), so the MLP is also compared with numpy measured in the same run.
NUMPY_REFERENCE_GFLOPS = 195.0

MIB64 = 64 * (1 << 20)
#: Seconds of untimed sleep before each timed MLP step, ours or numpy's (see
#: interleaved_ms): longer than numpy's BLAS threads spin after a call.
MLP_PAUSE = 0.2


def _median_ms(run, repeats: int, warmup: int) -> tuple[float, float]:
    for _ in range(warmup):
        run()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3, min(times) * 1e3


def interleaved_ms(first, second, repeats: int, warmup: int, pause: float = 0.0,
                   sleep=time.sleep) -> tuple[tuple[float, float], tuple[float, float]]:
    """``((median ms, best ms) of first, (median ms, best ms) of second)``, the two timed
    in alternation (:func:`interleaved_many` of the two): ``first`` first in even rounds
    and ``second`` first in odd ones.

    >>> calls = []
    >>> _ = interleaved_ms(lambda: calls.append("a"), lambda: calls.append("b"), 2, 1,
    ...                    pause=0.2, sleep=lambda s: calls.append(f"z{s}"))
    >>> "".join(calls)
    'abz0.2az0.2bz0.2bz0.2a'
    """
    return tuple(interleaved_many([first, second], repeats, warmup, pause, sleep))


def interleaved_many(runs, repeats: int, warmup: int, pause: float = 0.0,
                     sleep=time.sleep) -> list[tuple[float, float]]:
    """``(median ms, best ms)`` of each function of ``runs``, timed in rounds: each of
    ``repeats`` rounds runs every one, the order rotating by one each round, after
    ``warmup`` untimed rounds; ``pause`` seconds of sleep (untimed) before each timed
    call, so that none is timed beside what another left running: numpy's OpenBLAS
    keeps a thread spinning on a core for about 0.1 s after each call (measured from
    its threads' CPU time), which slowed a step timed right after it on this 2-core
    machine.

    >>> calls = []
    >>> _ = interleaved_many([lambda: calls.append("a"), lambda: calls.append("b"),
    ...                       lambda: calls.append("c")], 3, 0)
    >>> "".join(calls)
    'abcbcacab'
    """
    for _ in range(warmup):
        for run in runs:
            run()
    times: list[list[float]] = [[] for _ in runs]
    for r in range(repeats):
        for i in range(len(runs)):
            k = (r + i) % len(runs)
            if pause:
                sleep(pause)
            t0 = time.perf_counter()
            runs[k]()
            times[k].append(time.perf_counter() - t0)
    return [(statistics.median(t) * 1e3, min(t) * 1e3) for t in times]


# ---------------------------------------------------------------------------
# Graphs (built with `core`; the TensorFlow side builds the same with tf.compat.v1)

def tiny_graph():
    g = tf.Graph()
    with g.as_default():
        with tf.device("/job:ps/task:0"):
            a = tf.Variable(1.0, name="a")
        with tf.device("/job:worker/task:0"):
            b = a + 2
        with tf.device("/job:worker/task:1"):
            c = a + b
    return g, a.initializer, c


def transfer_graph():
    g = tf.Graph()
    with g.as_default():
        with tf.device("/job:ps/task:0"):
            x = tf.Variable(np.ones(MIB64 // 4, np.float32), name="x")
        with tf.device("/job:worker/task:1"):
            y = tf.slice(x, [0], [1])
    return g, x.initializer, y


def mlp_graph(batch: int):
    from experiments.workloads.mlp import mlp_forward
    w = mlp_forward(batch=batch)
    return w.graph, w.init, w.fetches[0], w.flops


# ---------------------------------------------------------------------------
# Ours

def measure_ours(repeats: int, warmup: int, batch: int, skip_mlp: bool) -> list[dict]:
    rows = []
    spec = {"ps": 1, "worker": 2}
    with LocalCluster(spec) as cluster:
        target = cluster.target("worker", 0)
        rows += _noting_load(lambda: [_tiny(target, "local", repeats, warmup)])
        rows += _noting_load(lambda: _transfer(cluster, "shm", repeats, warmup))
        if not skip_mlp:
            rows += _noting_load(lambda: _mlp(target, batch, repeats, warmup))
    # gRPC only, as between hosts: no local calls, no shared memory.
    with LocalCluster(spec, shm=False, local_sockets=False) as cluster:
        rows += _noting_load(lambda: [_tiny(cluster.target("worker", 0), "grpc", repeats,
                                            warmup)])
        rows += _noting_load(lambda: _transfer(cluster, "socket", repeats, warmup))
    return rows


def _noting_load(measure) -> list[dict]:
    """``measure()``'s rows, each with the cores other programs kept busy meanwhile."""
    with OtherLoad() as load:
        rows = measure()
    return [{**row, "other_cores": load.other_cores} for row in rows]


def _mlp(target: str, batch: int, repeats: int, warmup: int) -> list[dict]:
    g, init, h, flops = mlp_graph(batch)
    with Session(target, graph=g) as sess:
        sess.run(init)
        ours, numpy_ = interleaved_ms(lambda: sess.run(h), numpy_mlp_forward(batch),
                                      repeats, warmup, pause=MLP_PAUSE)
    return _mlp_rows(("-", "numpy"), (ours, numpy_), flops)


def _mlp_rows(transports, timed, flops: float) -> list[dict]:
    """The MLP's rows, one per transport, from its ``(median ms, best ms)``."""
    return [{"benchmark": "mlp", "transport": transport, "unit": "ms", "value": med,
             "best": best, "ms": med, "gflops": flops / (med / 1e3) / 1e9}
            for transport, (med, best) in zip(transports, timed)]


def _tiny(target: str, transport: str, repeats: int, warmup: int) -> dict:
    g, init, c = tiny_graph()
    with Session(target, graph=g) as sess:
        sess.run(init)
        med, best = _median_ms(lambda: sess.run(c), repeats * 20, warmup * 20)
    return {"benchmark": "tiny step", "transport": transport, "unit": "ms", "value": med,
            "best": best, "ms": med}


def _transfer(cluster, transport: str, repeats: int, warmup: int) -> list[dict]:
    g, init, y = transfer_graph()
    with Session(cluster.target("worker", 0), graph=g) as sess:
        sess.run(init)
        med, best = _median_ms(lambda: sess.run(y), repeats, warmup)
        _, trace = sess.run(y, trace=True)
    link = [x for x in trace.transfers if x.bytes == MIB64]
    link_gbs = MIB64 / (link[0].end - link[0].start) / 1e9 if link else float("nan")
    return [{"benchmark": "transfer", "transport": transport, "unit": "GB/s",
             "value": MIB64 / (med / 1e3) / 1e9, "best": MIB64 / (best / 1e3) / 1e9, "ms": med,
             "transfer_gbs": link_gbs}]


# ---------------------------------------------------------------------------
# TensorFlow's distributed runtime (optional)

_TF_SERVER = """
import sys, tensorflow as tf
spec = {spec!r}
server = tf.distribute.Server(tf.train.ClusterSpec(spec), job_name=sys.argv[1],
                              task_index=int(sys.argv[2]), start=True)
print("ready", flush=True)
server.join()
"""


def _import_tensorflow():
    """``tf.compat.v1`` in graph mode, or None (with a message) without TensorFlow."""
    try:
        import tensorflow as real_tf
    except ImportError:
        print("tensorflow is not importable here: TensorFlow's side is skipped; the ratios "
              f"use the reference figures measured with TensorFlow 2.21 {TF_REFERENCE}")
        return None
    v1 = real_tf.compat.v1
    v1.disable_eager_execution()
    return v1


@contextlib.contextmanager
def _tf_servers():
    """TensorFlow servers of 1 ps and 2 workers on free loopback ports (killed on exit):
    yields the target of worker 0."""
    ports = free_ports(3)
    spec = {"ps": [f"127.0.0.1:{ports[0]}"],
            "worker": [f"127.0.0.1:{ports[1]}", f"127.0.0.1:{ports[2]}"]}
    code = textwrap.dedent(_TF_SERVER.format(spec=spec))
    procs = [subprocess.Popen([sys.executable, "-c", code, job, str(i)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for job, i in (("ps", 0), ("worker", 0), ("worker", 1))]
    try:
        for addr in spec["ps"] + spec["worker"]:
            _wait_port(addr, 60)
        yield "grpc://" + spec["worker"][0]
    finally:
        for p in procs:
            p.kill()
            p.wait()


def measure_tensorflow(v1, repeats: int, warmup: int) -> list[dict]:
    """The tiny step and the transfer on TensorFlow's runtime (``v1``:
    :func:`_import_tensorflow`); the MLP is :func:`mlp_side_by_side`'s."""
    rows = []
    with _tf_servers() as target:
        # 1. tiny step
        g = v1.Graph()
        with g.as_default():
            with v1.device("/job:ps/task:0"):
                a = v1.Variable(1.0, name="a")
            with v1.device("/job:worker/task:0"):
                b = a + 2
            with v1.device("/job:worker/task:1"):
                c = a + b
            with v1.Session(target) as sess:
                sess.run(a.initializer)
                med, best = _median_ms(lambda: sess.run(c), repeats * 20, warmup * 20)
        rows.append({"benchmark": "tiny step", "transport": "socket", "unit": "ms",
                     "value": med, "best": best, "ms": med})
        # 2. transfer
        g = v1.Graph()
        with g.as_default():
            with v1.device("/job:ps/task:0"):
                x = v1.Variable(np.ones(MIB64 // 4, np.float32), name="x")
            with v1.device("/job:worker/task:1"):
                y = v1.slice(x, [0], [1])
            with v1.Session(target) as sess:
                sess.run(x.initializer)
                med, best = _median_ms(lambda: sess.run(y), repeats, warmup)
        rows.append({"benchmark": "transfer", "transport": "socket", "unit": "GB/s",
                     "value": MIB64 / (med / 1e3) / 1e9, "best": MIB64 / (best / 1e3) / 1e9,
                     "ms": med})
    return rows


def _tf_mlp(v1, batch: int):
    """``(graph, init, output)``: the MLP forward in ``tf.compat.v1``, on worker 0."""
    rng = np.random.default_rng(0)
    g = v1.Graph()
    with g.as_default(), v1.device("/job:worker/task:0"):
        h = v1.constant(rng.standard_normal((batch, 1024)).astype(np.float32))
        for _ in range(8):
            w = v1.Variable((rng.standard_normal((1024, 1024)) / 32).astype(np.float32))
            h = v1.nn.relu(v1.matmul(h, w))
        init = v1.global_variables_initializer()
    return g, init, h


def mlp_side_by_side(v1, batch: int, repeats: int, warmup: int) -> tuple[list[dict], dict]:
    """``(rows, tensorflow's row)``: the MLP on our servers and on TensorFlow's (both
    started, one beside the other) and numpy's loop in this process, timed in the
    same rounds (:func:`interleaved_many`), so that the ratios see one machine."""
    g, init, h, flops = mlp_graph(batch)
    tg, tinit, th = _tf_mlp(v1, batch)
    with OtherLoad() as load, LocalCluster({"ps": 1, "worker": 2}) as cluster, \
            _tf_servers() as tf_target, Session(cluster.target("worker", 0), graph=g) as ours, \
            v1.Session(tf_target, graph=tg) as theirs:
        ours.run(init)
        theirs.run(tinit)
        timed = interleaved_many([lambda: ours.run(h), lambda: theirs.run(th),
                                  numpy_mlp_forward(batch)], repeats, warmup, pause=MLP_PAUSE)
    rows = [{**row, "other_cores": load.other_cores}
            for row in _mlp_rows(("-", "tensorflow", "numpy"), timed, flops)]
    return [rows[0], rows[2]], rows[1]


def _wait_port(address: str, timeout: float) -> None:
    import socket
    host, port = address.rsplit(":", 1)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection((host, int(port)), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"nothing listens at {address} after {timeout} s")


# ---------------------------------------------------------------------------

def numpy_mlp_forward(batch: int):
    """A function running the MLP's arithmetic in numpy in this process: 8 float32
    ``(batch, 1024) @ (1024, 1024)`` products, each followed by a relu."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, 1024)).astype(np.float32)
    ws = [rng.standard_normal((1024, 1024)).astype(np.float32) * 0.03 for _ in range(8)]

    def forward():
        h = x
        for w in ws:
            h = np.maximum(h @ w, 0)
        return h
    return forward


def run(repeats: int = 10, warmup: int = 3, batch: int = 1024, skip_mlp: bool = False,
        with_tensorflow: bool = True) -> pd.DataFrame:
    v1 = _import_tensorflow() if with_tensorflow else None
    side_by_side = v1 is not None and not skip_mlp
    ours = measure_ours(repeats, warmup, batch, skip_mlp or side_by_side)
    theirs = measure_tensorflow(v1, repeats, warmup) if v1 is not None else None
    if side_by_side:
        mlp_rows, tf_mlp = mlp_side_by_side(v1, batch, repeats, warmup)
        ours += mlp_rows
        theirs.append(tf_mlp)
    table = pd.DataFrame(ours)
    if theirs:
        ref = {(r["benchmark"], r["transport"]): r["value"] for r in theirs}
        table["tf"] = [ref.get((b, "tensorflow") if b == "mlp" else (b, t), ref.get((b, "socket")))
                       for b, t in zip(table["benchmark"], table["transport"])]
        table["tf_source"] = "measured"
    else:
        table["tf"] = [TF_REFERENCE[b] for b in table["benchmark"]]
        table["tf_source"] = "reference (TF 2.21)"
    # ratio > 1 means better than TensorFlow (faster step, or more GB/s).
    table["vs_tf"] = [(tf_v / v) if unit == "ms" else (v / tf_v)
                      for v, tf_v, unit in zip(table["value"], table["tf"], table["unit"])]
    numpy_row = table[(table.benchmark == "mlp") & (table.transport == "numpy")]
    if not numpy_row.empty and not theirs:
        # The reference scaled by today's machine: TensorFlow's MLP at 1.06x numpy's rate.
        rate = numpy_row.iloc[0]["gflops"] / NUMPY_REFERENCE_GFLOPS
        mlp = table.benchmark == "mlp"
        table.loc[mlp, "tf"] = TF_REFERENCE["mlp"] / rate
        table.loc[mlp, "tf_source"] = "reference scaled by numpy now"
        table.loc[mlp, "vs_tf"] = table.loc[mlp, "tf"] / table.loc[mlp, "value"]
    libraries = provenance.blas()
    table["blas"] = blas_column(table, libraries)
    table.attrs["blas"] = libraries
    return table


def blas_column(table: pd.DataFrame, libraries: list[dict]) -> list[str]:
    """Per row of ``table``, the BLAS library that computed it (:func:`short_blas`):
    for our MLP (transport ``-``) the one the runtime's MatMul kernel calls, for the
    ``numpy`` MLP numpy's (``used_by`` in ``libraries``, as
    :func:`experiments.provenance.blas` gives them); "" for rows that run no gemm and
    where the library is not known.  The servers run the same Python in this process's
    environment, so they load the same library files this process lists.

    >>> libs = [{"internal_api": "openblas", "version": "0.3.30", "architecture": "Haswell",
    ...          "filepath": "/x/libopenblas.so", "used_by": "runtime"}]
    >>> t = pd.DataFrame({"benchmark": ["tiny step", "mlp", "mlp"],
    ...                   "transport": ["local", "-", "numpy"]})
    >>> blas_column(t, libs)
    ['', 'openblas 0.3.30 Haswell (libopenblas.so)', '']
    """
    by_user = {lib.get("used_by"): short_blas(lib) for lib in libraries if lib.get("used_by")}
    user = {"-": "runtime", "numpy": "numpy"}
    return [by_user.get(user.get(t), "") if b == "mlp" else ""
            for b, t in zip(table.benchmark, table.transport)]


def short_blas(lib: dict) -> str:
    """``internal_api version architecture (file name)`` of one library of
    :func:`experiments.provenance.blas`."""
    name = lib.get("filepath") or ""
    return (f"{lib.get('internal_api')} {lib.get('version')} {lib.get('architecture')} "
            f"({name.rsplit('/', 1)[-1]})")


def print_blas(libraries: list[dict]) -> None:
    """The BLAS libraries loaded, each with who uses it, its threads and its file."""
    print("BLAS (threadpoolctl, threads as in this process; in the servers the MatMul "
          "kernel runs the runtime's library one thread per gemm, over row blocks, unless "
          "OPENBLAS_NUM_THREADS is set):")
    for lib in libraries:
        if lib.get("user_api") == "blas":
            print(f"  {lib.get('used_by') or '-':8} {short_blas(lib)}, "
                  f"{lib.get('num_threads')} threads, {lib.get('filepath')}")


def main(argv: list[str] | None = None) -> int:
    parser = cli.make_parser("python -m experiments.bench_runtime", __doc__.splitlines()[0],
                             "repeats", defaults={"repeats": 10},
                             helps={"repeats": "timed steps per benchmark (the median kept)"})
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    parser.add_argument("--batch", type=cli.positive_int, default=1024, help="MLP batch rows")
    parser.add_argument("--skip-mlp", action="store_true", help="leave out the MLP")
    parser.add_argument("--no-tensorflow", action="store_true",
                        help="do not run TensorFlow's side even if it is importable")
    args = cli.parse(parser, argv)
    with Run("bench_runtime", args, out=args.out, argv=argv) as report:
        table = run(args.repeats, args.warmup, args.batch, args.skip_mlp,
                    not args.no_tensorflow)
        with pd.option_context("display.width", 160, "display.max_columns", 20,
                               "display.float_format", "{:.3f}".format):
            print(table.to_string(index=False))
        print_blas(table.attrs["blas"])
        print(f"saved {report.save_table(table, 'bench_runtime')}")
    finish(report, table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
