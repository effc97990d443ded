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

from experiments.report import print_table, results_parser, save_table

__all__ = ["cases", "math_cases", "bench", "main"]


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


def math_cases(n: int, rng: np.random.Generator) -> list[tuple[str, str, tuple, dict, object]]:
    """The math family's ops (:mod:`core.ops_math`), as :func:`cases`: ``n x n`` float32
    operands (positive ones where the op needs them), a batch of 16 ``n/4 x n/4``
    matrices for BatchMatMulV2."""
    x = rng.standard_normal((n, n)).astype(np.float32)
    y = rng.standard_normal((n, n)).astype(np.float32)
    p = (np.abs(x) + 0.1).astype(np.float32)
    q = (np.abs(y) + 0.1).astype(np.float32)
    e = (y * 0.5).astype(np.float32)  # small exponents
    s = np.float32(3.0)
    m = max(1, n // 4)
    bx = rng.standard_normal((16, m, m)).astype(np.float32)
    by = rng.standard_normal((16, m, m)).astype(np.float32)
    seed = {"shape": (n, n), "dtype": "float32", "seed": 1, "seed2": 2}
    gen = np.random.default_rng([1, 2])
    return [
        ("Exp", "", (x,), {}, lambda: np.exp(x)),
        ("Log", "", (p,), {}, lambda: np.log(p)),
        ("Sqrt", "", (p,), {}, lambda: np.sqrt(p)),
        ("Rsqrt", "", (p,), {}, lambda: 1 / np.sqrt(p)),
        ("Square", "", (x,), {}, lambda: np.square(x)),
        ("Abs", "", (x,), {}, lambda: np.abs(x)),
        ("RealDiv", "x / y", (x, q), {}, lambda: x / q),
        ("RealDiv", "x / scalar", (x, s), {}, lambda: x / s),
        ("Pow", "x ** y", (p, e), {}, lambda: p ** e),
        ("Maximum", "", (x, y), {}, lambda: np.maximum(x, y)),
        ("Minimum", "x, scalar", (x, s), {}, lambda: np.minimum(x, s)),
        ("SquaredDifference", "", (x, y), {}, lambda: np.square(x - y)),
        ("AddN", "3 inputs", (x, y, x), {}, lambda: x + y + x),
        ("Cast", "to float64", (x,), {"DstT": "float64"}, lambda: x.astype(np.float64)),
        ("Pad", "1 each side", (x,), {"paddings": ((1, 1), (1, 1))}, lambda: np.pad(x, 1)),
        ("Split", "4 along axis 1", (x,), {"axis": 1, "num_split": 4},
         lambda: [np.ascontiguousarray(a) for a in np.split(x, 4, axis=1)]),
        ("Tile", "[2, 1]", (x,), {"multiples": (2, 1)}, lambda: np.tile(x, (2, 1))),
        ("StridedSlice", "x[::2, 1:]", (x,),
         {"begin": (0, 1), "end": (0, 0), "strides": (2, 1), "begin_mask": 1, "end_mask": 3},
         lambda: np.ascontiguousarray(x[::2, 1:])),
        ("BatchMatMulV2", f"16 x ({m}x{m} @ {m}x{m})", (bx, by), {}, lambda: bx @ by),
        ("RandomStandardNormal", "", (), seed,
         lambda: gen.standard_normal((n, n), dtype=np.float32)),
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
    from runtime.kernels import KernelContext, get_kernel, warmup

    warmup(("float32",))
    ctx = KernelContext("CPU", intra_op_threads=threads)
    rng = np.random.default_rng(seed)
    rows = []
    for n in sizes:
        calls = max(1, int(2e6 // (n * n)))  # about 2M elements a round
        for op, variant, inputs, attrs, reference in cases(n, rng) + math_cases(n, rng):
            kernel = get_kernel(op, "CPU")
            ours = lambda: kernel(ctx, inputs, attrs)  # noqa: E731
            got, want = ours(), reference()  # compiled, and checked once
            if op not in ("RandomStandardNormal",):  # (another generator than numpy's)
                want = want if isinstance(want, list) else [want]
                for a, b in zip(got, want, strict=True):
                    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4 * n)
            t_ours, t_numpy = _best_of_rounds([ours, reference], calls, rounds)
            rows.append({"n": n, "op": op, "variant": variant, "ours_us": t_ours * 1e6,
                         "numpy_us": t_numpy * 1e6, "ratio": t_ours / t_numpy})
    return pd.DataFrame(rows)


def main(argv=None) -> pd.DataFrame:
    parser = results_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 1024],
                        help="n of the n x n float32 operands")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads of the kernels")
    parser.add_argument("--rounds", type=int, default=7, help="alternating rounds per case")
    args = parser.parse_args(argv)
    frame = bench(args.sizes, args.threads, args.rounds)
    print_table(frame, "CPU kernels vs numpy (microseconds per call; ratio = ours / numpy)")
    print(f"saved {save_table(frame, 'bench_kernels', args.out)}")
    return frame


if __name__ == "__main__":
    main()
