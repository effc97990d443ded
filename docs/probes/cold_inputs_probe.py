"""Run from the project root: `python docs/probes/cold_inputs_probe.py [elements ...]`.

Issue 20 §2 probe: does a kernel run slower when other work went through the caches
between its input's production and its start?  The cost model reads a kernel's memory
rate off the device's bandwidth curve at the bytes the kernel itself moves
(:meth:`core.cluster.Device.bandwidth_at`), a curve measured with the same buffers
used over and over, so hot in the caches; in a model's step another kernel (a gemm
packing its weights, a large elementwise op) may have run in between.

A chain ``x_i = tanh(x_{i-1})`` of 24 Tanh ops on ``elements`` floats, each Tanh
held after a MatMul of an independent chain (a control dependency): a big one
(``[64, 256] @ [256, 256]``: 64 + 256 + 64 KiB and the gemm's packed copy) or a tiny
one (8 x 8).  One inter-op thread, 25 rounds, the graphs taking turns; per size, the
Tanh's and the MatMul's fastest traced kernel (median over the chain), and per pair
the difference of the fastest untraced steps and of the fastest traced steps.

What it showed (2026-11-28 08:34-08:36 UTC, this 2-core VM under the timing lock, two
runs; the hypervisor took 3-18% of a core in the runs around it):

    elements      Tanh after tiny / big MatMul     step per pair beyond the MatMuls' kernels
    4096 (16 KiB)      3.1 / 3.0-3.1 us            +6 to +14 us untraced
    16384              8.2 / 7.5 us                +18 us untraced
    65536 (256 KiB)   23.2-23.8 / 24.6-25.4 us     +14 to +16 us untraced
    262144 (1 MiB)    89.5 / 94.1 us               +22 us untraced
    1048576 (4 MiB)   320-354 / 363-385 us         +32 to +36 us untraced

- The Tanh itself barely notices up to 256 KiB (within 1-2 us); at 1 MiB it is 5%
  slower, at 4 MiB 9-13% (it streams from memory either way: 8 MiB at 22-26 GB/s).
- At small sizes most of the "beyond the kernels" figure is how the fastest kernel of
  each op, taken over the rounds, falls below the kernels of any one step: in the
  fastest traced step the big MatMuls took 102 us each against 97 us as per-op
  minima (the calibration subtracts kernels taken the same way, see
  :func:`runtime.calibrate_kernels.warm_small_steps`: there the ops are tiny and the
  difference 0.3-0.5 us per op, measured the same morning).
- At 4 MiB the MatMul after a Tanh ran 115 us in the fastest traced step against 100
  us as its minimum: the Tanh's 8 MiB evicted the gemm's 256 KiB of weights.

Not modelled: the effect is under 10% of the kernels at the sizes where the caches
matter (up to 1 MiB), and the rows the in-process target misses are graphs of small
ops, where it is smaller still.  A model would read the bandwidth curve at the bytes
moved since the input was last touched, not at the kernel's own bytes.
"""

import os
import statistics
import sys
import time

sys.path.insert(0, os.getcwd())
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import core as tf  # noqa: E402
import runtime  # noqa: E402

CHAIN = 24


def build(n: int, big: bool, rng):
    """``(graph, fetches)``: the Tanh chain on ``n`` floats, each Tanh after a MatMul
    (big or tiny) of an independent chain."""
    g = tf.Graph()
    with g.as_default():
        x = tf.constant(rng.standard_normal(n).astype(np.float32) * 0.1, name="x")
        a_shape, w_shape = ((64, 256), (256, 256)) if big else ((8, 8), (8, 8))
        a = tf.constant(rng.standard_normal(a_shape).astype(np.float32) * 0.01)
        w = tf.constant(rng.standard_normal(w_shape).astype(np.float32) * 0.01)
        y = a
        for i in range(CHAIN):
            y = tf.matmul(y, w, name=f"mm{i}")
            with tf.control_dependencies([y.op]):
                x = tf.tanh(x, name=f"t{i}")
    return g, [x.op, y.op]


def main(sizes, rounds: int = 25):
    config = runtime.SessionConfig(inter_op_parallelism_threads=1, use_per_session_threads=True)
    rng = np.random.default_rng(0)
    runs = {}
    for n in sizes:
        for big in (False, True):
            graph, fetches = build(n, big, rng)
            session = runtime.Session(graph=graph, config=config)
            for _ in range(3):
                session.run(fetches)
            runs[(n, big)] = (session, fetches, {}, [], [])
    for _ in range(rounds):
        for session, fetches, best, untraced, traced in runs.values():
            trace = session.run(fetches, trace=True)[1]
            traced.append((trace.step_time, sum(r.end - r.start for r in trace.ops
                                                if r.op.startswith("mm"))))
            for rec in trace.ops:
                best[rec.op] = min(best.get(rec.op, 1.0), rec.end - rec.start)
            t0 = time.perf_counter()
            session.run(fetches)
            untraced.append(time.perf_counter() - t0)
    for n in sizes:
        row = {}
        for big in (False, True):
            session, _, best, untraced, traced = runs[(n, big)]
            row[big] = (statistics.median(v for k, v in best.items() if k.startswith("t")),
                        statistics.median(v for k, v in best.items() if k.startswith("mm")),
                        min(untraced), min(traced))
            session.close()
        (tanh0, mm0, step0, tr0), (tanh1, mm1, step1, tr1) = row[False], row[True]
        per_pair = (step1 - step0) / CHAIN
        print(f"{n:8d} elements: Tanh after a tiny / big MatMul {tanh0 * 1e6:7.2f} / "
              f"{tanh1 * 1e6:7.2f} us; untraced step per pair {per_pair * 1e6:7.2f} us, "
              f"beyond the MatMuls' fastest kernels {(per_pair - (mm1 - mm0)) * 1e6:+6.2f} us; "
              f"fastest traced step per pair {(tr1[0] - tr0[0]) / CHAIN * 1e6:7.2f} us, its "
              f"MatMuls {(tr1[1] - tr0[1]) / CHAIN * 1e6:7.2f} us", flush=True)


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [4096, 16384, 65536, 262144, 1048576])
