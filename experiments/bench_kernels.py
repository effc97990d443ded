"""Benchmark: the CPU kernels against numpy doing the same arithmetic, per op.

Each row times one op's kernel (``runtime.kernels.get_kernel(op, "CPU")``, called as
the executor calls it, output allocation included) and the numpy expression computing
the same values, side by side: for each case the two are timed in alternating rounds
(the best round of each), so a change in the machine's load hits both alike.  Square
float32 ``n x n`` operands; one intra-op thread (``--threads`` for more: the kernels'
parallel paths start at ``runtime.kernels.cpu.PARALLEL_MIN_ELEMENTS`` elements).
``ratio`` is ours over numpy's time (below 1: faster).  Small sizes show the call's
fixed cost, large ones the loop's speed.  BLAS threads: ``OPENBLAS_NUM_THREADS`` as
set when this starts (the experiments' servers use 1).

    python -m experiments.bench_kernels --sizes 64 1024
"""

from __future__ import annotations

import os
import time

if __name__ == "__main__":  # before numpy loads BLAS, as the servers run it
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np
import pandas as pd

from experiments import cli
from experiments.report import Run, finish, print_table

__all__ = ["cases", "bench", "main"]


def cases(n: int, rng: np.random.Generator) -> list[tuple[str, str, tuple, dict, object]]:
    """``(op, variant, inputs, attrs, numpy function of no argument)`` for ``n x n``."""
    x = rng.standard_normal((n, n)).astype(np.float32)
    y = rng.standard_normal((n, n)).astype(np.float32)
    s = np.float32(0.5)
    bias = rng.standard_normal(n).astype(np.float32)
    # softmax as numpy users write it (max-subtracted)
    def softmax():
        e = np.exp(x - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)
    return [
        ("Add", "x + y", (x, y), {}, lambda: x + y),
        ("Add", "x + bias row", (x, bias), {}, lambda: x + bias),
        ("Mul", "x * scalar", (x, s), {}, lambda: x * s),
        ("Sub", "scalar - x", (s, x), {}, lambda: s - x),
        ("Relu", "", (x,), {}, lambda: np.maximum(x, 0)),
        ("Neg", "", (x,), {}, lambda: -x),
        ("Tanh", "", (x,), {}, lambda: np.tanh(x)),
        ("Sigmoid", "", (x,), {}, lambda: 1 / (1 + np.exp(-x))),
        ("ReluGrad", "", (y, x), {}, lambda: y * (x > 0)),
        ("TanhGrad", "", (x, y), {}, lambda: y * (1 - x * x)),
        ("Sum", "axis 0", (x,), {"axis": (0,)}, lambda: x.sum(axis=0)),
        ("Sum", "axis 1", (x,), {"axis": (1,)}, lambda: x.sum(axis=1)),
        ("Sum", "all", (x,), {"axis": None}, lambda: x.sum()),
        ("Softmax", "", (x,), {}, softmax),
        ("Transpose", "", (x,), {"perm": [1, 0]}, lambda: np.ascontiguousarray(x.T)),
        ("Identity", "", (x,), {}, lambda: x.copy()),
        ("MatMul", "", (x, y), {}, lambda: x @ y),
        ("MatMul", "transpose_b", (x, y), {"transpose_b": True}, lambda: x @ y.T),
    ]


def _best_of_rounds(fns, calls: int, rounds: int) -> list[float]:
    """Seconds per call of each function: the best of ``rounds`` rounds of ``calls``
    calls, the functions taking turns within each round."""
    best = [float("inf")] * len(fns)
    for r in range(rounds):
        order = range(len(fns)) if r % 2 == 0 else reversed(range(len(fns)))
        for i in order:
            fn = fns[i]
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            best[i] = min(best[i], (time.perf_counter() - t0) / calls)
    return best


def bench(sizes: list[int], threads: int = 1, rounds: int = 7, seed: int = 0) -> pd.DataFrame:
    """One row per (size, op case): our kernel's and numpy's seconds per call."""
    from runtime.kernels import KernelContext, get_kernel
    from runtime.kernels.cpu import warmup

    warmup(("float32",))
    ctx = KernelContext("CPU", intra_op_threads=threads)
    rng = np.random.default_rng(seed)
    rows = []
    for n in sizes:
        calls = max(1, int(2e6 // (n * n)))  # about 2M elements a round
        for op, variant, inputs, attrs, reference in cases(n, rng):
            kernel = get_kernel(op, "CPU")
            ours = lambda: kernel(ctx, inputs, attrs)  # noqa: E731
            (got,), want = ours(), reference()  # compiled, and checked once
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * n)
            t_ours, t_numpy = _best_of_rounds([ours, reference], calls, rounds)
            rows.append({"n": n, "op": op, "variant": variant, "ours_us": t_ours * 1e6,
                         "numpy_us": t_numpy * 1e6, "ratio": t_ours / t_numpy})
    return pd.DataFrame(rows)


def main(argv=None) -> pd.DataFrame:
    parser = cli.make_parser("python -m experiments.bench_kernels", __doc__.split("\n\n")[0],
                             "repeats", "seed", "plot", defaults={"repeats": 7},
                             helps={"repeats": "alternating rounds per case (ours, numpy)",
                                    "seed": "seed of the random operands"})
    parser.add_argument("--sizes", type=cli.positive_int, nargs="+", default=[64, 1024],
                        help="n of the n x n float32 operands")
    parser.add_argument("--threads", type=cli.positive_int, default=1,
                        help="intra-op threads of the kernels")
    args = cli.parse(parser, argv)
    with Run("bench_kernels", args, out=args.out, argv=argv) as run:
        frame = bench(args.sizes, args.threads, args.repeats, args.seed)
        print_table(frame, "CPU kernels vs numpy (microseconds per call; ratio = ours / numpy)")
        print(f"saved {run.save_table(frame, 'bench_kernels')}")
        if args.plot:
            from experiments.plots import bars
            cases = frame.assign(case=frame.op + " " + frame.variant.astype(str),
                                 size=frame["n"].map(lambda n: f"{n} x {n}"))
            figure = bars(cases, group="case", bar="size", value="ratio",
                          ylabel="ours / numpy (time per call)", title="CPU kernels vs numpy")
            print(f"saved {run.save_figure(figure, 'bench_kernels')}")
    return finish(run, frame)


if __name__ == "__main__":
    main()
