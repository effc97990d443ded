"""Device code of the nn family's GPU kernels (numba CUDA); imported only by
:mod:`.cuda_nn`, lazily, as :mod:`.cuda_kernels` is by :mod:`.cuda` (``cuda`` stays a
module global for numba's simulator).

Geometry ``geo`` is the tuple ``(Ho, Wo, KH, KW, sh, sw, dh, dw, pad_top, pad_left)``.
Every kernel is a grid-stride loop over its items, so any launch size covers them.
"""

from __future__ import annotations

import math

from numba import cuda


@cuda.jit
def fill_zero(out):
    start = cuda.grid(1)
    for i in range(start, out.size, cuda.gridsize(1)):
        out[i] = 0


# --- convolution -----------------------------------------------------------------------------

@cuda.jit
def im2col(x, geo, cols):
    """cols[(n, ho, wo), (kh * KW + kw) * C + c] = x[n, h, w, c] (0 outside): one thread
    per element of cols (flat, rows of K = KH * KW * C)."""
    h_in, w_in, c_in = x.shape[1], x.shape[2], x.shape[3]
    ho_n, wo_n, kw_n = geo[0], geo[1], geo[3]
    k = geo[2] * kw_n * c_in
    start = cuda.grid(1)
    for t in range(start, cols.size, cuda.gridsize(1)):
        row = t // k
        col = t - row * k
        tap = col // c_in
        c = col - tap * c_in
        kh = tap // kw_n
        kw = tap - kh * kw_n
        n = row // (ho_n * wo_n)
        rest = row - n * ho_n * wo_n
        ho = rest // wo_n
        wo = rest - ho * wo_n
        h = ho * geo[4] - geo[8] + kh * geo[6]
        w = wo * geo[5] - geo[9] + kw * geo[7]
        if 0 <= h < h_in and 0 <= w < w_in:
            cols[t] = x[n, h, w, c]
        else:
            cols[t] = 0


@cuda.jit
def col2im(dcols, geo, dx):
    """dx[n, h, w, c] = the sum of the dcols entries im2col would have copied it to:
    one thread per input element, gathering (no atomics)."""
    h_in, w_in, c_in = dx.shape[1], dx.shape[2], dx.shape[3]
    ho_n, wo_n, kh_n, kw_n, sh, sw, dh, dw, pt, pl = (geo[0], geo[1], geo[2], geo[3], geo[4],
                                                      geo[5], geo[6], geo[7], geo[8], geo[9])
    k = kh_n * kw_n * c_in
    start = cuda.grid(1)
    for t in range(start, dx.size, cuda.gridsize(1)):
        c = t % c_in
        rest = t // c_in
        w = rest % w_in
        rest //= w_in
        h = rest % h_in
        n = rest // h_in
        acc = 0.0
        for kh in range(kh_n):
            top = h + pt - kh * dh
            if top < 0 or top % sh:
                continue
            ho = top // sh
            if ho >= ho_n:
                continue
            for kw in range(kw_n):
                left = w + pl - kw * dw
                if left < 0 or left % sw:
                    continue
                wo = left // sw
                if wo >= wo_n:
                    continue
                row = (n * ho_n + ho) * wo_n + wo
                acc += dcols[row * k + (kh * kw_n + kw) * c_in + c]
        dx[n, h, w, c] = acc


# --- pooling ---------------------------------------------------------------------------------

@cuda.jit
def pool(x, geo, average, out):
    """One thread per output element: the max (or mean) of its window, clipped."""
    h_in, w_in, c_in = x.shape[1], x.shape[2], x.shape[3]
    ho_n, wo_n = geo[0], geo[1]
    start = cuda.grid(1)
    for t in range(start, out.size, cuda.gridsize(1)):
        c = t % c_in
        rest = t // c_in
        wo = rest % wo_n
        rest //= wo_n
        ho = rest % ho_n
        n = rest // ho_n
        h0 = max(ho * geo[4] - geo[8], 0)
        h1 = min(ho * geo[4] - geo[8] + geo[2], h_in)
        w0 = max(wo * geo[5] - geo[9], 0)
        w1 = min(wo * geo[5] - geo[9] + geo[3], w_in)
        acc = x[n, h0, w0, c]
        for h in range(h0, h1):
            for w in range(w0, w1):
                if h == h0 and w == w0:
                    continue
                if average:
                    acc += x[n, h, w, c]
                else:
                    acc = max(acc, x[n, h, w, c])
        if average:
            acc = acc / ((h1 - h0) * (w1 - w0))
        out[n, ho, wo, c] = acc


@cuda.jit
def pool_grad(x, g, geo, average, dx):
    """One thread per output element: its gradient scattered (atomically) to the window's
    first maximum in (h, w) order, or spread evenly over the window; dx zeroed first."""
    h_in, w_in = dx.shape[1], dx.shape[2]
    ho_n, wo_n, c_in = g.shape[1], g.shape[2], g.shape[3]
    start = cuda.grid(1)
    for t in range(start, g.size, cuda.gridsize(1)):
        c = t % c_in
        rest = t // c_in
        wo = rest % wo_n
        rest //= wo_n
        ho = rest % ho_n
        n = rest // ho_n
        h0 = max(ho * geo[4] - geo[8], 0)
        h1 = min(ho * geo[4] - geo[8] + geo[2], h_in)
        w0 = max(wo * geo[5] - geo[9], 0)
        w1 = min(wo * geo[5] - geo[9] + geo[3], w_in)
        gv = g[n, ho, wo, c]
        if average:
            share = gv / ((h1 - h0) * (w1 - w0))
            for h in range(h0, h1):
                for w in range(w0, w1):
                    cuda.atomic.add(dx, (n, h, w, c), share)
        else:
            best = x[n, h0, w0, c]
            bh = h0
            bw = w0
            for h in range(h0, h1):
                for w in range(w0, w1):
                    v = x[n, h, w, c]
                    if v > best:
                        best = v
                        bh = h
                        bw = w
            cuda.atomic.add(dx, (n, bh, bw, c), gv)


# --- batch normalisation --------------------------------------------------------------------

@cuda.jit
def bn_stats(x2, scale, offset, mean_in, var_in, eps, training, factor, coef_a, coef_b,
             out_mean, out_var, save_mean, save_var):
    """One thread per channel: the batch's (or the given) mean and variance, the outputs
    1-4 of FusedBatchNormV3, and y = x * coef_a + coef_b's coefficients."""
    rows = x2.shape[0]
    start = cuda.grid(1)
    for c in range(start, x2.shape[1], cuda.gridsize(1)):
        if training:
            shift = 0.0
            if rows:
                shift = x2[0, c]
            s1 = 0.0
            s2 = 0.0
            for r in range(rows):
                d = x2[r, c] - shift
                s1 += d
                s2 += d * d
            m1 = s1 / rows if rows else math.nan
            mean = shift + m1
            var = max(s2 / rows - m1 * m1, 0.0) if rows else math.nan
            corrected = var * rows / (rows - 1) if rows > 1 else var
            if factor == 1.0:
                out_mean[c] = mean
                out_var[c] = corrected
            else:
                out_mean[c] = (1 - factor) * mean_in[c] + factor * mean
                out_var[c] = (1 - factor) * var_in[c] + factor * corrected
        else:
            mean = mean_in[c]
            var = var_in[c]
            out_mean[c] = mean
            out_var[c] = var
        save_mean[c] = mean
        save_var[c] = var
        a = scale[c] / math.sqrt(var + eps)
        coef_a[c] = a
        coef_b[c] = offset[c] - mean * a


@cuda.jit
def bn_grad_stats(dy2, x2, scale, mean, var, eps, training, ka, kb, k0, d_scale, d_offset):
    """One thread per channel: dscale, doffset and dx = dy * ka + x * kb + k0's
    coefficients."""
    rows = dy2.shape[0]
    start = cuda.grid(1)
    for c in range(start, dy2.shape[1], cuda.gridsize(1)):
        m = mean[c]
        s1 = 0.0
        s2 = 0.0
        for r in range(rows):
            g = dy2[r, c]
            s1 += g
            s2 += g * (x2[r, c] - m)
        inv = 1 / math.sqrt(var[c] + eps)
        a = scale[c] * inv
        d_scale[c] = s2 * inv
        d_offset[c] = s1
        ka[c] = a
        if training and rows:
            b = -scale[c] * inv * inv * inv * s2 / rows
            kb[c] = b
            k0[c] = -a * s1 / rows - m * b
        else:
            kb[c] = 0
            k0[c] = 0


@cuda.jit
def channel_affine(a, b, ka, kb, k0, out):
    """out[r, c] = a[r, c] * ka[c] + b[r, c] * kb[c] + k0[c] (flat 2-D, channels last)."""
    cols = out.shape[1]
    start = cuda.grid(1)
    for t in range(start, out.size, cuda.gridsize(1)):
        r = t // cols
        c = t - r * cols
        out[r, c] = a[r, c] * ka[c] + b[r, c] * kb[c] + k0[c]


# --- gather and segment sums -----------------------------------------------------------------

@cuda.jit
def gather(params, idx, out):
    """out[o, m, i] = params[o, idx[m], i]; an index out of range gives 0 (TensorFlow's
    GPU kernel)."""
    m_n, inner = out.shape[1], out.shape[2]
    size = params.shape[1]
    start = cuda.grid(1)
    for t in range(start, out.size, cuda.gridsize(1)):
        i = t % inner
        rest = t // inner
        m = rest % m_n
        o = rest // m_n
        j = idx[m]
        if 0 <= j < size:
            out[o, m, i] = params[o, j, i]
        else:
            out[o, m, i] = 0


@cuda.jit
def segment_sum(data, ids, out):
    """out[ids[m], i] += data[m, i], atomically; ids outside [0, segments) are dropped
    (out zeroed first)."""
    inner = data.shape[1]
    segments = out.shape[0]
    start = cuda.grid(1)
    for t in range(start, data.size, cuda.gridsize(1)):
        m = t // inner
        i = t - m * inner
        s = ids[m]
        if 0 <= s < segments:
            cuda.atomic.add(out, (s, i), data[m, i])


# --- losses ----------------------------------------------------------------------------------

@cuda.jit
def xent(x, labels, sparse, loss, back):
    """One thread per row: softmax cross-entropy and softmax - labels; ``sparse``:
    labels[r, 0] is the class (out of range: NaN, as TensorFlow's GPU kernel)."""
    cols = x.shape[1]
    start = cuda.grid(1)
    for r in range(start, x.shape[0], cuda.gridsize(1)):
        m = x[r, 0]
        for j in range(1, cols):
            m = max(m, x[r, j])
        s = 0.0
        for j in range(cols):
            e = math.exp(x[r, j] - m)
            back[r, j] = e
            s += e
        lse = math.log(s)
        if sparse:
            k = int(labels[r, 0])
            if k < 0 or k >= cols:
                loss[r] = math.nan
                for j in range(cols):
                    back[r, j] = math.nan
                continue
            for j in range(cols):
                back[r, j] = back[r, j] / s
            back[r, k] -= 1
            loss[r] = lse - (x[r, k] - m)
        else:
            total = 0.0
            for j in range(cols):
                back[r, j] = back[r, j] / s - labels[r, j]
                total += labels[r, j] * (lse - (x[r, j] - m))
            loss[r] = total


@cuda.jit
def log_softmax(x, out):
    cols = x.shape[1]
    start = cuda.grid(1)
    for r in range(start, x.shape[0], cuda.gridsize(1)):
        m = x[r, 0]
        for j in range(1, cols):
            m = max(m, x[r, j])
        s = 0.0
        for j in range(cols):
            s += math.exp(x[r, j] - m)
        shift = m + math.log(s)
        for j in range(cols):
            out[r, j] = x[r, j] - shift
