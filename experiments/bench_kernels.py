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

The nn ops (:func:`nn_cases`) run at ResNet-50's layer sizes, batch ``--nn-batch``,
against numpy's im2col (a window view copied once) and one matmul, and the like.

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

__all__ = ["cases", "math_cases", "nn_cases", "bench", "main"]


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


def _numpy_im2col(x: np.ndarray, k: int, stride: int, pad: tuple) -> np.ndarray:
    """numpy's im2col: a window view of the padded input copied into (rows, C*k*k)."""
    if pad != (0, 0):
        x = np.pad(x, ((0, 0), pad, pad, (0, 0)))
    view = np.lib.stride_tricks.sliding_window_view(x, (k, k), axis=(1, 2))[:, ::stride, ::stride]
    return view.reshape(-1, x.shape[3] * k * k)


def _same_pad(size: int, k: int, stride: int) -> tuple[int, int]:
    total = max((-(-size // stride) - 1) * stride + k - size, 0)
    return total // 2, total - total // 2


def nn_cases(batch: int, rng: np.random.Generator) -> list[tuple[str, str, tuple, dict, object]]:
    """``cases`` for the nn ops at ResNet-50's sizes (NHWC float32, batch ``batch``),
    an embedding lookup of a 32k x 512 table and a 1000-class loss; the numpy side is
    what a numpy user writes: im2col as a window view copied once and one matmul, the
    window reductions on a window view, the batch norm and losses as formulas."""
    f32 = np.float32
    out = []

    def conv(name, h, cin, cout, k, stride):
        x = rng.standard_normal((batch, h, h, cin)).astype(f32)
        w = (rng.standard_normal((k, k, cin, cout)) * 0.1).astype(f32)
        pad = _same_pad(h, k, stride)
        ho = -(-h // stride)
        w_cols = np.ascontiguousarray(w.transpose(2, 0, 1, 3).reshape(cin * k * k, cout))
        w_rows = np.ascontiguousarray(w.reshape(k * k * cin, cout).T)
        dy = rng.standard_normal((batch, ho, ho, cout)).astype(f32)
        attrs = {"strides": (1, stride, stride, 1), "padding": "SAME"}

        def forward():
            return (_numpy_im2col(x, k, stride, pad) @ w_cols).reshape(batch, ho, ho, cout)

        def backprop_input():
            dcols = (dy.reshape(-1, cout) @ w_rows).reshape(batch, ho, ho, k, k, cin)
            dxp = np.zeros((batch, h + sum(pad), h + sum(pad), cin), f32)
            for i in range(k):
                for j in range(k):
                    dxp[:, i:i + (ho - 1) * stride + 1:stride,
                        j:j + (ho - 1) * stride + 1:stride] += dcols[:, :, :, i, j]
            return dxp[:, pad[0]:pad[0] + h, pad[0]:pad[0] + h]

        def backprop_filter():
            cols = _numpy_im2col(x, k, stride, pad)
            return (cols.T @ dy.reshape(-1, cout)).reshape(cin, k, k, cout).transpose(1, 2, 0, 3)

        variant = f"{name} {h}x{h}x{cin} {k}x{k}/{stride} -> {cout}"
        out.extend([
            ("Conv2D", variant, (x, w), attrs, forward),
            ("Conv2DBackpropInput", variant, (w, dy), dict(attrs, input_sizes=x.shape),
             backprop_input),
            ("Conv2DBackpropFilter", variant, (x, dy), dict(attrs, filter_sizes=w.shape),
             backprop_filter),
        ])

    conv("conv1", 224, 3, 64, 7, 2)
    conv("res2 3x3", 56, 64, 64, 3, 1)
    conv("res3 1x1", 28, 512, 128, 1, 1)
    conv("res4 3x3/2", 28, 256, 256, 3, 2)

    # The stem's 3x3/2 max pool and the head's global 7x7 average pool.
    x = rng.standard_normal((batch, 112, 112, 64)).astype(f32)
    pool = {"ksize": (1, 3, 3, 1), "strides": (1, 2, 2, 1), "padding": "SAME"}
    pad = _same_pad(112, 3, 2)
    xp = np.pad(x, ((0, 0), pad, pad, (0, 0)), constant_values=-np.inf)

    def windows():
        return np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(1, 2))[:, ::2, ::2]

    mp = windows().max(axis=(-2, -1))
    g = rng.standard_normal(mp.shape).astype(f32)

    def max_pool_grad():
        """Each window's argmax, then one bincount of the gradients into place."""
        n, ho, wo, c = mp.shape
        arg = windows().reshape(n, ho, wo, c, 9).argmax(axis=-1)
        hp, wp = xp.shape[1:3]
        h_idx = np.arange(ho)[:, None, None] * 2 + arg // 3
        w_idx = np.arange(wo)[None, :, None] * 2 + arg % 3
        flat = ((np.arange(n)[:, None, None, None] * hp + h_idx) * wp + w_idx) * c + np.arange(c)
        dxp = np.bincount(flat.ravel(), g.ravel(), xp.size).astype(f32).reshape(xp.shape)
        return dxp[:, pad[0]:pad[0] + 112, pad[0]:pad[0] + 112]

    head = rng.standard_normal((batch, 7, 7, 2048)).astype(f32)
    g_head = rng.standard_normal((batch, 1, 1, 2048)).astype(f32)
    global_pool = {"ksize": (1, 7, 7, 1), "strides": (1, 1, 1, 1), "padding": "VALID"}
    out.extend([
        ("MaxPool", "3x3/2 112x112x64", (x,), pool, lambda: windows().max(axis=(-2, -1))),
        ("MaxPoolGrad", "3x3/2 112x112x64", (x, mp, g), pool, max_pool_grad),
        ("AvgPool", "global 7x7x2048", (head,), global_pool,
         lambda: head.mean(axis=(1, 2), keepdims=True)),
        ("AvgPoolGrad", "global 7x7x2048", (g_head,),
         dict(global_pool, orig_input_shape=head.shape),
         lambda: np.broadcast_to(g_head / f32(49), head.shape).copy()),
    ])

    # Bias and batch norm on res2's activations.
    a = rng.standard_normal((batch, 56, 56, 256)).astype(f32)
    c = a.shape[3]
    bias, scale, offset = (rng.standard_normal(c).astype(f32) for _ in range(3))
    eps = 1e-3
    bn = {"epsilon": eps, "is_training": True}
    mean, var = a.mean(axis=(0, 1, 2)), a.var(axis=(0, 1, 2))
    dy = rng.standard_normal(a.shape).astype(f32)
    empty = np.zeros(0, f32)

    def batch_norm():
        m, v = a.mean(axis=(0, 1, 2)), a.var(axis=(0, 1, 2))
        k = scale / np.sqrt(v + eps)
        return a * k + (offset - m * k), m, v

    def batch_norm_grad():
        inv = 1 / np.sqrt(var + eps)
        xhat = (a - mean) * inv
        d_offset = dy.sum(axis=(0, 1, 2))
        d_scale = (dy * xhat).sum(axis=(0, 1, 2))
        rows = a.size // c
        return scale * inv * (dy - d_offset / rows - xhat * (d_scale / rows)), d_scale, d_offset

    out.extend([
        ("BiasAdd", "56x56x256", (a, bias), {}, lambda: a + bias),
        ("BiasAddGrad", "56x56x256", (a,), {}, lambda: a.sum(axis=(0, 1, 2))),
        ("FusedBatchNormV3", "train 56x56x256", (a, scale, offset, empty, empty), bn, batch_norm),
        ("FusedBatchNormGradV3", "train 56x56x256", (dy, a, scale, mean, var, empty), bn,
         batch_norm_grad),
    ])

    # An embedding lookup (32k x 512 table, batch x 50 ids), its gradient, the losses.
    table = rng.standard_normal((32000, 512)).astype(f32)
    ids = rng.integers(0, 32000, (batch, 50)).astype(np.int32)
    rows = rng.standard_normal((batch, 50, 512)).astype(f32)

    def segment_sum():
        summed = np.zeros((32000, 512), f32)
        np.add.at(summed, ids.ravel(), rows.reshape(-1, 512))
        return summed

    logits = rng.standard_normal((batch * 32, 1000)).astype(f32)
    labels = rng.integers(0, 1000, batch * 32)
    onehot = np.eye(1000, dtype=f32)[labels]

    def log_softmax():
        shifted = logits - logits.max(axis=1, keepdims=True)
        return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))

    def xent():
        ls = log_softmax()
        return -(onehot * ls).sum(axis=1), np.exp(ls) - onehot

    def sparse_xent():
        ls = log_softmax()
        back = np.exp(ls)
        back[np.arange(len(labels)), labels] -= 1
        return -ls[np.arange(len(labels)), labels], back

    out.extend([
        ("GatherV2", "32000x512 table, ids batch x 50", (table, ids), {"axis": 0},
         lambda: np.take(table, ids, axis=0)),
        ("UnsortedSegmentSum", "its gradient (np.add.at)", (rows, ids), {"num_segments": 32000},
         segment_sum),
        ("SoftmaxCrossEntropyWithLogits", "1000 classes", (logits, onehot), {}, xent),
        ("SparseSoftmaxCrossEntropyWithLogits", "1000 classes", (logits, labels), {},
         sparse_xent),
        ("LogSoftmax", "1000 classes", (logits,), {}, log_softmax),
    ])
    return out


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


def bench(sizes: list[int], threads: int = 1, rounds: int = 7, seed: int = 0,
          nn_batch: int = 0) -> pd.DataFrame:
    """One row per (size, op case): our kernel's and numpy's seconds per call; with
    ``nn_batch``, also one per :func:`nn_cases` case at that batch (``n`` is the batch)."""
    from runtime.kernels import KernelContext, cpu, cpu_math, get_kernel

    cpu.warmup(("float32",))  # (the nn kernels only when their cases run, below)
    cpu_math.warmup(("float32",))
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
    if nn_batch:
        from runtime.kernels.cpu_nn import warmup as nn_warmup
        nn_warmup(("float32",))
    for op, variant, inputs, attrs, reference in (nn_cases(nn_batch, rng) if nn_batch else []):
        kernel = get_kernel(op, "CPU")
        ours = lambda: kernel(ctx, inputs, attrs)  # noqa: E731
        got, want = ours()[0], reference()  # compiled, and checked once (first output)
        want = np.asarray(want[0] if isinstance(want, tuple) else want)
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3 * max(1, np.abs(want).max()))
        t_ours, t_numpy = _best_of_rounds([ours, reference], 1, rounds)
        rows.append({"n": nn_batch, "op": op, "variant": variant, "ours_us": t_ours * 1e6,
                     "numpy_us": t_numpy * 1e6, "ratio": t_ours / t_numpy})
    return pd.DataFrame(rows)


def main(argv=None) -> pd.DataFrame:
    parser = results_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 1024],
                        help="n of the n x n float32 operands")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads of the kernels")
    parser.add_argument("--rounds", type=int, default=7, help="alternating rounds per case")
    parser.add_argument("--nn-batch", type=int, default=8,
                        help="batch of the nn ops' ResNet-50-sized cases (0: skip them)")
    args = parser.parse_args(argv)
    frame = bench(args.sizes, args.threads, args.rounds, nn_batch=args.nn_batch)
    print_table(frame, "CPU kernels vs numpy (microseconds per call; ratio = ours / numpy)")
    print(f"saved {save_table(frame, 'bench_kernels', args.out)}")
    return frame


if __name__ == "__main__":
    main()
