"""Run from the project root on a machine with a CUDA GPU:
`python docs/probes/gpu_probe.py OUT_DIR [--small] [--workloads-only]`.

Issue 20 §3 probe: what does the CUDA executor's step cost, and what does the simulator
predict for it from ``runtime.calibrate()``?  It writes raw data, one JSON object a line,
to ``OUT_DIR/gpu_probe.jsonl`` (and the calibration to ``OUT_DIR/calibration.json``), so
that models of the GPU path can be tried afterwards without a GPU:

1. ``calibration``: ``runtime.calibrate()`` as a user calls it (its seconds).
2. ``chain``: chains of ``K`` Add ops on the GPU, each on the last one's output, at
   several sizes: the fastest untraced step and the fastest traced one (the trace
   synchronises after every kernel).  Tiny arrays give the host's cost per op (the
   executor's dispatch and numba's launch); large ones show whether the host runs ahead
   of the GPU (an untraced step near the kernels' sum, not the sum of launch and kernel).
3. ``kernels``: the kernel calibration graph, every op on the GPU, at several sizes:
   each op's fastest traced time (launch, kernel and synchronisation), with its type,
   flops and bytes, and the untraced step.
4. ``workload``: each workload as the session places it (GPU ops on the GPU), its
   fastest untraced step in two sessions taking turns, its fastest traced step's op and
   transfer records, its placement, and the simulator's prediction now.

``--small`` shrinks everything for a dry run on numba's CUDA simulator
(``NUMBA_ENABLE_CUDASIM=1``), which checks the code paths and measures nothing;
``--workloads-only`` skips parts 2 and 3.

What it showed (2026-11-28, one lent NVIDIA H200 with 16 Xeon cores, Python 3.12,
numba 0.68.0, numba-cuda 0.30.4, numpy 2.4.6: the image's numpy 2.5.2 broke numba-cuda's
first kernel compile, ``np.row_stack`` being gone, so numpy 2.4.6 was carried):

1. The step is bound by the host.  A chain of tiny Adds cost 157-163 us per op
   untraced (200 ops), growing to 208 us at 1 MiB arrays, 255 us at 4 MiB and 353 us at
   64 MiB, where the kernel itself moves 200 MB in about 60 us; traced (synchronised
   after each kernel) the kernels took 143 us (tiny) to 297 us (64 MiB) each.
2. On the calibration graph at 8 x 8 every op type took 110-590 us traced; its
   untraced step was 35 ms for 215 ops, 22 us per op more than the kernels' sum.
3. Before the GPU had figures of its own, the simulator predicted the workloads 93-96%
   fast (the GPU's default 10 us per op).  ``RandomUniform``, ``RandomStandardNormal``
   and ``TruncatedNormal`` failed on the real GPU (a 64-bit seed overflowed numba's
   compiled initialiser, which the simulator runs uncompiled): fixed since.
4. The traced ops of the workloads took, beyond their type's fixed cost, 0-30 us with
   outputs under 16 KiB and 80-100 us from 64 KiB to 4 MiB: the outputs' allocation.
   :func:`runtime.calibrate_gpu.measure_gpu_alloc_costs` measured it alone: 0 up to
   64 KiB, 6-27 us at 256 KiB, 29-47 at 1 MiB, 73-116 at 4 MiB, 84-137 at 16 MiB and
   104-186 at 64 MiB beyond a 1 KiB buffer (three calibrations).
5. With the GPU calibrated (:mod:`runtime.calibrate_gpu`), ``python -m
   experiments.sim_vs_inprocess --repeats 10 --turns 2`` on that machine (12 rows,
   every op on the GPU): median error 31.8% (worst 43%) under the first calibration
   and 9.4% (worst 24%) under the second, made a minute later; median repeat spread
   3.4%.  The two calibrations' GPU fixed costs differed by 1.5x (Add 310 against
   205 us) and the CPU's by 1.3x (Add 7.2 against 5.4 us): the host's speed, not the
   card, moved; the calibration spread (31%) is the error's whole difference.
   Without the allocation term (re-predicted from the same calibrations) the medians
   were 31.8% and 9.6% (worst 42% and 27%): it moves only the rows with large arrays
   (mixed_random:seed=1: -20.9% -> -3.3%; seed=4: -27.4% -> -21.0%; seed=3: -7.2% ->
   +3.7%; seed=2, whose repeats spread 48%: -7.9% -> +10.1%, under the second
   calibration).
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

import core as tf  # noqa: E402

WORKLOADS = ["mlp", "rnn", "transformer", "inception", "transformer:batch=2",
             "resnet50:batch=2", "gnmt:batch=4", "inception_v3:batch=2",
             "mixed_random:seed=1", "mixed_random:seed=2",
             "mixed_random:seed=3:elements=262144", "mixed_random:seed=4:elements=65536",
             # larger ones, where the GPU's kernels rather than the host's launches
             # might bound the step
             "mixed_random:seed=5:elements=16777216:matmul=2048",
             "resnet50:batch=16:image_size=64:base_width=32",
             "mlp_forward:batch=1024:layers=4:width=2048"]
SMALL_WORKLOADS = ["mixed_random:seed=1:ops=8:elements=64:matmul=8"]


class Out:
    """Appends records to the probe's JSON-lines file, flushed at once (a run cut off
    by its time limit keeps what it wrote)."""

    def __init__(self, folder: Path):
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self.file = open(folder / "gpu_probe.jsonl", "a")

    def write(self, kind: str, **record) -> None:
        self.file.write(json.dumps({"kind": kind, "time": time.time(), **record},
                                   default=_plain) + "\n")
        self.file.flush()
        print(f"[{time.strftime('%H:%M:%S')}] {kind} "
              f"{ {k: v for k, v in record.items() if not isinstance(v, (list, dict))} }",
              flush=True)


def _plain(value):
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    if isinstance(value, tuple):
        return list(value)
    return str(value)


def gpu_name(cluster) -> str:
    return next(d.name for d in cluster.devices if not d.is_cpu)


def fastest_steps(session, fetches, steps: int, trace: bool):
    best, best_trace = math.inf, None
    for _ in range(steps):
        t0 = time.perf_counter()
        result = session.run(fetches, trace=trace) if trace else session.run(fetches)
        t = time.perf_counter() - t0
        if t < best:
            best, best_trace = t, (result[1] if trace else None)
    return best, best_trace


def warmed_session(graph, init, fetches):
    """An in-process session of ``graph``, ``init`` run and three untimed steps of
    ``fetches`` taken (they compile the kernels); the caller closes it."""
    import runtime
    session = runtime.Session(graph=graph)
    try:
        session.run(init)
        for _ in range(3):
            session.run(fetches)
    except BaseException:
        session.close()
        raise
    return session


def op_records(trace):
    t0 = min((r.start for r in trace.ops), default=0.0)
    ops = [[r.op, r.type, r.device, r.thread, r.start - t0, r.end - t0] for r in trace.ops]
    xfers = [[r.tensor, r.src, r.dst, r.bytes, r.start - t0, r.end - t0]
             for r in trace.transfers]
    return ops, xfers


def probe_chains(out: Out, device: str, small: bool) -> None:
    sizes = [1, 4096] if small else [1, 4096, 1 << 18, 1 << 20, 1 << 22, 1 << 24]
    counts = [4] if small else [50, 200]
    for elements in sizes:
        for k in counts:
            g = tf.Graph()
            with g.as_default(), tf.device(device):
                x = tf.Variable(np.ones(elements, np.float32), name="x")
                y = x
                for i in range(k):
                    y = tf.add(y, x, name=f"add{i}")
                fetch = tf.reduce_sum(y, name="out")
                init = tf.variables_initializer([x])
            with warmed_session(g, init, fetch) as s:
                steps = 3 if small else 15
                untraced, _ = fastest_steps(s, fetch, steps, trace=False)
                traced, trace = fastest_steps(s, fetch, steps, trace=True)
                kernels = [r.end - r.start for r in trace.ops if r.op.startswith("add")]
            out.write("chain", elements=elements, ops=k, untraced=untraced, traced=traced,
                      kernel_median=float(np.median(kernels)), kernel_sum=float(sum(kernels)))


def probe_kernels(out: Out, cal, device: str, small: bool) -> None:
    from dataclasses import replace

    from core.costs import StaticCostModel
    from runtime.calibrate_kernels import _fastest_kernels, kernel_calibration_graph
    gpu = cal.device(device)
    bare = replace(gpu, op_overhead=0.0, kernel_costs=(), alloc_costs=())
    roofline = StaticCostModel()
    for n in ([8] if small else [8, 128, 256, 512, 1024]):
        graph, init, fetches = kernel_calibration_graph(n, device=device)
        with warmed_session(graph, init, fetches) as s:
            steps = 2 if small else 12
            untraced, _ = fastest_steps(s, fetches, steps, trace=False)
            traces = [s.run(fetches, trace=True)[1] for _ in range(steps)]
        best = _fastest_kernels(traces)
        devices = {r.op: r.device for trace in traces for r in trace.ops}
        ops = []
        for name, t in best.items():
            op = graph.get_operation_by_name(name)
            ops.append([name, op.type, devices[name], t, roofline.op_time(op, bare),
                        *roofline.memory_traffic(op, bare)])
        out.write("kernels", n=n, untraced=untraced, ops=ops)


def probe_workloads(out: Out, cal, names, small: bool) -> None:
    import runtime
    import sim
    from experiments.backends import in_process_steps
    from experiments.sim_vs_real import build_workload
    for name in names:
        t_start = time.time()
        try:
            w = build_workload(name)
            repeats = 2 if small else 10
            (placement, measured), (_, remeasured) = in_process_steps(
                [w, w], repeats, turns=2, warmup=2)
            with runtime.Session(graph=w.graph) as s:
                if w.init is not None:
                    s.run(w.init)
                feeds = w.feeds or None
                for _ in range(2):
                    s.run(w.fetch_ops, feed_dict=feeds)
                best, best_trace = math.inf, None
                for _ in range(2 if small else 5):
                    t0 = time.perf_counter()
                    trace = s.run(w.fetch_ops, feed_dict=feeds, trace=True)[1]
                    if time.perf_counter() - t0 < best:
                        best, best_trace = time.perf_counter() - t0, trace
            ops, xfers = op_records(best_trace)
            predicted = sim.simulate(w.graph, placement, cal, fetches=w.fetches).step_time
            out.write("workload", name=name, n_ops=len(w.graph.get_operations()),
                      measured=measured, remeasured=remeasured, traced=best,
                      predicted=predicted, rel_error=(predicted - measured) / measured,
                      seconds=time.time() - t_start,
                      placement=dict(placement.items()), ops=ops, transfers=xfers)
        except Exception as e:  # noqa: BLE001  (a probe: record it and go on)
            out.write("error", stage="workload", name=name, error=f"{type(e).__name__}: {e}")


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    folder = Path(argv[0])
    small = "--small" in argv
    out = Out(folder)
    import numba

    import runtime
    from runtime.kernels import cuda_available
    out.write("env", python=sys.version, numba=numba.__version__, numpy=np.__version__,
              cuda=cuda_available(), cores=len(os.sched_getaffinity(0)),
              cudasim=os.environ.get("NUMBA_ENABLE_CUDASIM"))
    t0 = time.time()
    cal = runtime.calibrate(quick=small)
    cal.save(folder / "calibration.json")
    device = gpu_name(cal)
    out.write("calibration", seconds=time.time() - t0, gpu=device,
              gpu_figures={k: getattr(cal.device(device), k)
                           for k in ("peak_flops", "mem_bandwidth", "op_overhead",
                                     "alloc_costs")})
    stages = () if "--workloads-only" in argv else (
        ("chain", lambda: probe_chains(out, device, small)),
        ("kernels", lambda: probe_kernels(out, cal, device, small)))
    for stage, fn in stages:
        t0 = time.time()
        try:
            fn()
        except Exception as e:  # noqa: BLE001
            out.write("error", stage=stage, error=f"{type(e).__name__}: {e}")
        out.write("stage", stage=stage, seconds=time.time() - t0)
    probe_workloads(out, cal, SMALL_WORKLOADS if small else WORKLOADS, small)
    out.write("done")


if __name__ == "__main__":
    main()
