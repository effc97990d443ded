"""Run from the project root, WITHOUT ``OPENBLAS_NUM_THREADS`` set (as a user's process):
`python docs/probes/one_core_products_probe.py [n]`.

Issue 20 probe: what does a product that splits over the intra-op threads take when it
gets one core?  The executor gives a multithreaded kernel the cores that are free, at
least one (``HostCores.take``); a float MatMul of ``n^3`` (256 by default: 2^24
multiply-adds, the smallest that splits) then runs as one gemm.  The simulator used
to take its time on the pool times the device's intra-op speed-up (measured on a warm
1024^3 product), which counts what the split itself costs (waking the other thread,
joining it) as work done on one core.

Through the executor's MatMul kernel (``runtime.kernels.cpu.matmul``), the fastest and
the median of 40 calls: on one thread and on two, warm (the same operands again, a
0.5 ms pause between calls) and cold (8 MiB written between calls); and two one-thread
products at once on two Python threads (the longer of the two).

What it showed (2026-11-28 20:0x UTC, this 2-core AMD EPYC VM under the timing lock,
us, fastest/median, three rounds):

    one thread   warm 339/342, 339/342, 339/343   cold 357/368, 352/360, 354/379
    two threads  warm 190/202, 198/206, 195/207   cold 192/197, 199/214, 201/205
    two at once, one thread each: 357/553, 375/413, 361/701

So the split runs 1.7-1.8x faster, not the 1.9 of a large product: about 17 us of its
time is the split's own (195 - 339 / 1.9), and in a step, its threads asleep between
products, more (in traced steps of ``mixed_random:seed=3:elements=262144`` the 256^3
products took 222-287 us on two cores and 335-474 us on one, beside another on the
other core).  The model priced them 237 us on two and 449 us on one (237 x 1.9).

Since then the calibration fits each type's factor on the ops that do not split and
its ``"<type>|parallel"`` entry (the same factor at the speed-up, and the split's
cost as fixed cost) on those that do, by the rule that gives them their cores
(``core.costs.on_parallel_path``), and the simulator gives a kernel that got one core
its time on one thread (``sim.engine._Simulation._one_core_durations``): 245 us on
two and 410 us on one in the next calibration.  Paired on one in-process run
(``python -m experiments.sim_vs_inprocess`` at 20:08, predicted again from two
calibrations of each version taken back to back after it), the median error went
5.9% -> 5.4%, mixed_random:seed=4:elements=65536 -14.8% -> -2.0%, gnmt unchanged
(-31% -> -30%).
"""

import statistics
import sys
import threading
import time

import numpy as np

from runtime.kernels.context import KernelContext
from runtime.kernels.cpu import matmul, products_split


def timed(ctx, a, b, junk, cold: bool, reps: int = 40) -> tuple[float, float]:
    """Fastest and median seconds of ``reps`` products ``a @ b`` on ``ctx``."""
    took = []
    for _ in range(reps):
        if cold:
            np.add(junk, 1.0, out=junk)
        t0 = time.perf_counter()
        matmul(ctx, [a, b], {})
        took.append(time.perf_counter() - t0)
        if not cold:
            time.sleep(0.0005)
    return min(took), statistics.median(took)


def two_at_once(ctx, pairs, reps: int = 40) -> tuple[float, float]:
    """Fastest and median of the longer of two products run at once on two threads."""
    took = []
    for _ in range(reps):
        ends = [0.0, 0.0]

        def run(k):
            t0 = time.perf_counter()
            matmul(ctx, list(pairs[k]), {})
            ends[k] = time.perf_counter() - t0
        other = threading.Thread(target=run, args=(1,))
        other.start()
        run(0)
        other.join()
        took.append(max(ends))
    return min(took), statistics.median(took)


def main(n: int = 256) -> None:
    print(f"products split over the intra-op threads here: {products_split()}")
    rng = np.random.default_rng(0)
    a, b = (rng.random((n, n), dtype=np.float32) for _ in range(2))
    pairs = [(a, b), (a.copy(), b.copy())]
    junk = np.zeros(2 << 20, np.float32)  # 8 MiB
    one, two = KernelContext("CPU", 1), KernelContext("CPU", 2)
    for _ in range(20):  # compiled and warm
        matmul(one, [a, b], {})
        matmul(two, [a, b], {})
    for _ in range(3):
        row = {f"{label} {'cold' if cold else 'warm'}": timed(ctx, a, b, junk, cold)
               for label, ctx in (("one thread", one), ("two threads", two))
               for cold in (False, True)}
        row["two at once, one thread each"] = two_at_once(one, pairs)
        print("; ".join(f"{k} {lo * 1e6:.0f}/{mid * 1e6:.0f} us" for k, (lo, mid) in row.items()))


if __name__ == "__main__":
    main(*(int(x) for x in sys.argv[1:]))
