"""Benchmark: move one large float32 tensor between two processes.

Starts a TensorStore server (runtime.wire) in a spawned child process and moves a
tensor (64 MiB by default) from this process to it and back with each transport:

* ``unary``: the whole tensor in one gRPC message (size limits raised);
* ``stream``: chunks of 256 KiB, 1 MiB, 4 MiB (client-streaming ``Put``,
  server-streaming ``Get``);
* ``shm``: a shared-memory segment plus a small ``ShmRef`` message; ``get`` also in
  view mode (no copy out of the segment).

Each timing is the caller's wall time of the whole call, encoding and decoding
included; the table reports the best of ``--repeats`` and the median.

A second table times one small call (a ``RunStep`` the master answers at once) to a
server process in the three ways the runtime can make it: a plain unary gRPC call, a
message on an open bidirectional stream (``runtime.wire.StreamCaller``: how steps go
between hosts) and a message on a local Unix-socket connection
(``runtime.wire.LocalCaller``: between processes of one host), with the CPU time both
processes spend per call. Run::

    python -m experiments.bench_wire            # 64 MiB, best of 5
    python -m experiments.bench_wire --mib 16 --repeats 3

It prints a pandas table and writes ``bench_wire.csv`` (and ``bench_wire_calls.csv``)
into the run's folder under ``--out`` (:class:`experiments.report.Run`).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import numpy as np
import pandas as pd

from experiments import cli
from experiments.report import Run, finish
from runtime import shm, wire



def time_calls(call: Callable[[], object], repeats: int) -> list[float]:
    """Wall time in seconds of ``repeats`` calls, after one untimed warm-up call."""
    call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return times


def run(mib: int = 64, repeats: int = 5, *, check: bool = True) -> tuple[pd.DataFrame, float]:
    """Measure every transport; return the table and the median Ping round trip (s)."""
    rng = np.random.default_rng(0)
    array = rng.standard_normal(mib * (1 << 20) // 4).astype(np.float32)
    nbytes = array.nbytes
    rows = []
    with wire.TensorStoreProcess() as proc, \
            wire.TensorStoreClient(proc.address, deadline=60.0) as client:
        ping = statistics.median(time_calls(client.ping, 200))

        def record(method: str, direction: str, chunk: int | None,
                   call: Callable[[], object]) -> None:
            times = time_calls(call, repeats)
            best, median = min(times), statistics.median(times)
            rows.append({"method": method, "direction": direction,
                         "chunk_KiB": chunk // 1024 if chunk else None,
                         "MiB": nbytes / (1 << 20), "seconds": best,
                         "GB/s": nbytes / best / 1e9, "GB/s median": nbytes / median / 1e9})
            print(f"  {method:<12} {direction:<4} {rows[-1]['GB/s']:6.2f} GB/s", flush=True)

        def verify() -> None:
            if check:
                assert np.array_equal(client.get("x"), array), "tensor corrupted in transit"

        record("unary", "put", None, lambda: client.put_unary("x", array))
        verify()
        for chunk in (256 << 10, 1 << 20, 4 << 20):
            record("stream", "put", chunk, lambda: client.put("x", array, chunk_bytes=chunk))
            verify()
        client.put("x", array)
        for chunk in (256 << 10, 1 << 20, 4 << 20):
            record("stream", "get", chunk, lambda: client.get("x", chunk_bytes=chunk))
        if shm.shm_available():
            record("shm", "put", None, lambda: client.put_shm("x", array))
            verify()
            record("shm", "get", None, lambda: client.get("x", via_shm=True))
            record("shm view", "get", None,
                   lambda: client.get("x", via_shm=True, shm_copy=False))
        # Reference point: one copy of the tensor into fresh memory in this process.
        record("memcpy", "-", None, lambda: array.copy())
    return pd.DataFrame(rows), ping


def call_round_trips(calls: int = 2000) -> pd.DataFrame:
    """Median wall time and CPU per call (both processes) of a small call to a server
    process, per transport (see the module docstring)."""
    import psutil

    from runtime.launcher import LocalCluster
    from runtime.protos import master_pb2, master_pb2_grpc

    def cpu(pid: int) -> float:
        times = psutil.Process(pid).cpu_times()
        return times.user + times.system

    request = master_pb2.RunStepRequest(session_handle="no such session")
    rows = []
    with LocalCluster({"worker": 1}) as cluster:
        address = cluster.address("worker", 0)
        pid = cluster.processes[("worker", 0)].pid
        channel = wire.create_channel(address)
        stub = master_pb2_grpc.MasterStub(channel)
        stream = wire.StreamCaller(stub.RunSteps, address=address, method="Master.RunSteps")
        local = wire.LocalCaller(address, "Master.RunStep", master_pb2.RunStepResponse.FromString,
                                 wire.StreamCaller(stub.RunSteps, address=address,
                                                   method="Master.RunSteps"))
        ways = {"unary gRPC call": lambda: stub.RunStep(request, timeout=5),
                "gRPC stream message": lambda: stream.call(request, 5),
                "local connection": lambda: local.call(request, 5)}
        try:
            for name, call in ways.items():
                assert call().error.type == "NotFound"
                times = time_calls(call, 200)
                server0, client0 = cpu(pid), time.process_time()
                times = time_calls(call, calls)
                rows.append({"transport": name, "us median": statistics.median(times) * 1e6,
                             "us best": min(times) * 1e6,
                             "client CPU us": (time.process_time() - client0) / calls * 1e6,
                             "server CPU us": (cpu(pid) - server0) / calls * 1e6})
            if local.fallback._open:
                raise RuntimeError("the local calls went by gRPC (no local listener?)")
        finally:
            stream.close()
            local.close()
            channel.close()
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    parser = cli.make_parser("python -m experiments.bench_wire", __doc__.splitlines()[0],
                             "repeats", defaults={"repeats": 5},
                             helps={"repeats": "timed calls per method"})
    parser.add_argument("--mib", type=cli.positive_int, default=64, help="tensor size in MiB")
    parser.add_argument("--skip-calls", action="store_true",
                        help="do not time the small calls (unary, stream, local)")
    args = cli.parse(parser, argv)
    with Run("bench_wire", args, out=args.out, argv=argv) as report:
        print(f"moving a {args.mib} MiB float32 tensor between two processes "
              f"(best of {args.repeats})", flush=True)
        table, ping = run(args.mib, args.repeats)
        with pd.option_context("display.float_format", "{:.3f}".format,
                               "display.width", 120):
            print(table.to_string(index=False))
        print(f"Ping round trip (median of 200): {ping * 1e6:.0f} us")
        print(f"wrote {report.save_table(table, 'bench_wire')}")
        report.summary = {"ping_us": ping * 1e6}
        if not args.skip_calls:
            calls = call_round_trips()
            with pd.option_context("display.float_format", "{:.0f}".format,
                                   "display.width", 120):
                print("\none small call to a server process (a RunStep answered at once):")
                print(calls.to_string(index=False))
            print(f"wrote {report.save_table(calls, 'bench_wire_calls')}")
    finish(report, table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
