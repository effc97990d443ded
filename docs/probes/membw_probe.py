"""Run from the project root: `python docs/probes/membw_probe.py` (not a benchmark on the
shared parser yet; see issue 20 in the closing note of 2026-11-27).

Issue 20 §2 probe: does an elementwise kernel's time depend on its working set, and do
two running at once on this host share memory bandwidth?  Our Add kernel, float32, one
intra-op thread; alone vs two at once (two inter-op threads), best of rounds."""
import os, time, threading
import numpy as np
from runtime.kernels import KernelContext, get_kernel, cpu
cpu.warmup(("float32",), parallel=False)
add = get_kernel("Add", "CPU")
ctx = KernelContext("CPU", intra_op_threads=1)

def best(fn, reps=7):
    b = 1e9
    for _ in range(reps):
        t = time.perf_counter(); fn(); b = min(b, time.perf_counter() - t)
    return b

rows = []
for n in [1 << 12, 1 << 15, 1 << 18, 1 << 20, 1 << 22]:
    xs = [(np.random.rand(n).astype(np.float32), np.random.rand(n).astype(np.float32)) for _ in range(2)]
    calls = max(1, (1 << 24) // n)
    def one(k=0):
        for _ in range(calls):
            add(ctx, xs[k], {})
    alone = best(one) / calls
    def two():
        t = threading.Thread(target=one, args=(1,)); t.start(); one(0); t.join()
    both = best(two) / calls
    gbps = 12 * n / alone / 1e9
    rows.append((n, 4 * n * 3 / 2**20, alone * 1e6, gbps, both * 1e6, both / alone))
print(f"{'elements':>9} {'MiB moved':>9} {'alone_us':>9} {'GB/s':>6} {'two_at_once_us':>14} {'ratio':>6}")
for r in rows:
    print(f"{r[0]:>9} {r[1]:>9.2f} {r[2]:>9.1f} {r[3]:>6.1f} {r[4]:>14.1f} {r[5]:>6.2f}")
