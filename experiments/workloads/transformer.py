"""The Transformer (Vaswani et al., "Attention Is All You Need", NeurIPS 2017), one
training step of the encoder-decoder translation model, base or big.

As the paper (its Table 3 sizes): ``base`` is 6 layers, d_model 512, d_ff 2048, 8 heads
(65M parameters); ``big`` 6 layers, d_model 1024, d_ff 4096, 16 heads (213M).  One
embedding matrix is shared by the source, the target and the pre-softmax projection
(section 3.4; a 37,000-token shared BPE vocabulary, the paper's EN-DE setting), scaled
by sqrt(d_model) and added to sinusoidal positions; each layer is multi-head attention
and a ReLU feed-forward network, each sub-layer wrapped as ``LayerNorm(x +
sublayer(x))``; the attention projections have no biases (as tensor2tensor's).  The
decoder's self-attention is masked to earlier positions.  Sentences of 50 tokens and a
batch of 32 are this lab's choices.  Left out: dropout, label smoothing and the
learning-rate warm-up (the step's graph is the same without them, but for a few
elementwise ops).
"""

from __future__ import annotations

import math

import numpy as np

import core as tf
from experiments.workloads.common import ModelBuilder, check_options, gpu_devices, scope_device_fn
from experiments.workloads.mlp import Workload

__all__ = ["transformer", "SIZES"]

#: The paper's model sizes: layers, d_model, d_ff, heads.
SIZES = {"base": (6, 512, 2048, 8), "big": (6, 1024, 4096, 16)}


class _Transformer:
    def __init__(self, m: ModelBuilder, batch: int, seq_len: int, d_model: int, d_ff: int, heads: int):
        self.m, self.batch, self.seq = m, batch, seq_len
        self.d, self.d_ff, self.heads = d_model, d_ff, heads

    def dense(self, x, name: str, n_in: int, n_out: int, bias: bool = False):
        w = self.m.glorot(name, (n_in, n_out), fan_in=n_in, fan_out=n_out)
        y = tf.matmul(x, w)
        return tf.nn.bias_add(y, self.m.filled(name + "_bias", (n_out,), 0.0)) if bias else y

    def split_heads(self, x):
        """[batch*seq, d] -> [batch, heads, seq, d / heads]."""
        x = tf.reshape(x, (self.batch, self.seq, self.heads, self.d // self.heads))
        return tf.transpose(x, (0, 2, 1, 3))

    def attention(self, queries, memory, mask=None):
        """Multi-head scaled dot-product attention (section 3.2) of ``queries`` over
        ``memory`` (both [batch*seq, d_model])."""
        d, dk = self.d, self.d // self.heads
        q = self.split_heads(self.dense(queries, "q", d, d))
        k = self.split_heads(self.dense(memory, "k", d, d))
        v = self.split_heads(self.dense(memory, "v", d, d))
        scores = tf.matmul(q, k, transpose_b=True) * (1.0 / math.sqrt(dk))
        if mask is not None:
            scores = scores + mask
        context = tf.matmul(tf.nn.softmax(scores), v)  # [batch, heads, seq, dk]
        context = tf.reshape(tf.transpose(context, (0, 2, 1, 3)), (self.batch * self.seq, d))
        return self.dense(context, "output_transform", d, d)

    def feed_forward(self, x):
        h = tf.nn.relu(self.dense(x, "filter", self.d, self.d_ff, bias=True))
        return self.dense(h, "output", self.d_ff, self.d, bias=True)

    def sublayer(self, name: str, x, fn):
        """``LayerNorm(x + fn(x))`` in scope ``name`` (post-norm, as the paper)."""
        with tf.name_scope(name):
            y = x + fn(x)
            gamma = self.m.filled("layer_norm_scale", (self.d,), 1.0)
            beta = self.m.filled("layer_norm_bias", (self.d,), 0.0)
            return tf.layer_normalization(y, gamma, beta)

    def embed(self, table, ids: np.ndarray, name: str):
        with tf.name_scope(name):
            e = tf.nn.embedding_lookup(table, tf.constant(ids, name="ids"))
            e = e * math.sqrt(self.d) + tf.constant(_positions(self.seq, self.d), name="positions")
            return tf.reshape(e, (self.batch * self.seq, self.d))


def _positions(length: int, d: int) -> np.ndarray:
    """The sinusoidal position encodings of section 3.5, [length, d]."""
    pos = np.arange(length)[:, None]
    i = np.arange(d // 2)[None, :]
    angle = pos / np.power(10000.0, 2 * i / d)
    out = np.zeros((length, d), np.float32)
    out[:, 0::2], out[:, 1::2] = np.sin(angle), np.cos(angle)
    return out


def transformer(batch: int = 32, seq_len: int = 50, size: str = "base", layers: int | None = None,
                d_model: int | None = None, d_ff: int | None = None, heads: int | None = None,
                vocab: int = 37000, optimizer: str = "adam", learning_rate: float = 0.0005,
                seed: int = 0) -> Workload:
    """One training step of the Transformer (forward, backward, update) on a synthetic
    batch of sentence pairs; ``size`` is ``"base"`` or ``"big"``, and ``layers``,
    ``d_model``, ``d_ff``, ``heads`` override its figures.

    The expert placement spreads the layers over the GPUs in order (the encoder's, then
    the decoder's, in contiguous runs of about equal length, as pipeline splits of the
    Transformer do), the embedding with the first and the loss with the last.

    >>> w = transformer(batch=2, seq_len=4, layers=1, d_model=8, d_ff=16, heads=2, vocab=11)
    >>> w.name, w.loss.shape
    ('transformer', ())
    """
    if size not in SIZES:
        raise ValueError(f"size must be one of {sorted(SIZES)}, not {size!r}")
    defaults = dict(zip(("layers", "d_model", "d_ff", "heads"), SIZES[size]))
    given = dict(layers=layers, d_model=d_model, d_ff=d_ff, heads=heads)
    dims = {k: defaults[k] if v is None else v for k, v in given.items()}
    check_options(batch=batch, seq_len=seq_len, vocab=vocab, **dims)
    if dims["d_model"] % dims["heads"]:
        raise ValueError(f"d_model ({dims['d_model']}) must be a multiple of heads ({dims['heads']})")
    n_layers, d = dims["layers"], dims["d_model"]
    rng = np.random.default_rng(seed)
    src = rng.integers(0, vocab, (batch, seq_len)).astype(np.int32)
    tgt = rng.integers(0, vocab, (batch, seq_len + 1)).astype(np.int32)
    causal = np.triu(np.full((seq_len, seq_len), -1e9, np.float32), k=1)
    g = tf.Graph()
    with g.as_default():
        m = ModelBuilder(seed)
        net = _Transformer(m, batch, seq_len, d, dims["d_ff"], dims["heads"])
        with tf.name_scope("embedding"):
            table = m.normal("shared_weights", (vocab, d), stddev=d ** -0.5)
            x = net.embed(table, src, "encoder_inputs")
            y = net.embed(table, tgt[:, :-1], "decoder_inputs")
        with tf.name_scope("encoder"):
            for i in range(n_layers):
                with tf.name_scope(f"layer{i}"):
                    x = net.sublayer("self_attention", x, lambda h: net.attention(h, h))
                    x = net.sublayer("ffn", x, net.feed_forward)
        with tf.name_scope("decoder"):
            mask = tf.constant(causal, name="causal_mask")
            for i in range(n_layers):
                with tf.name_scope(f"layer{i}"):
                    y = net.sublayer("self_attention", y, lambda h: net.attention(h, h, mask))
                    y = net.sublayer("encdec_attention", y, lambda h: net.attention(h, x))
                    y = net.sublayer("ffn", y, net.feed_forward)
        with tf.name_scope("loss"):
            logits = tf.matmul(y, table, transpose_b=True)  # the shared pre-softmax projection
            labels = tf.constant(tgt[:, 1:].reshape(-1), name="labels")
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=labels, logits=logits))
    return m.training_step("transformer", loss, optimizer, learning_rate,
                           expert=lambda cluster: _expert(cluster, n_layers))


def _expert(cluster, layers: int):
    """Layer ``k`` of the ``2 * layers`` (encoder's, then decoder's) on GPU
    ``k * n // (2 * layers)``; the embedding on the first GPU, the loss on the last."""
    devices = gpu_devices(cluster)
    n, total = len(devices), 2 * layers

    def slot(name: str) -> int | None:
        for offset, part in ((0, "encoder/layer"), (layers, "decoder/layer")):
            if name.startswith(part):
                digits = name[len(part):].split("/", 1)[0]
                return (offset + int(digits)) * n // total if digits.isdigit() else None
        if name.startswith("embedding/"):
            return 0
        if name.startswith("loss/"):
            return n - 1
        return None

    return scope_device_fn(slot, devices)
