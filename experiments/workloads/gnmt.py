"""GNMT (Wu et al., "Google's Neural Machine Translation System", 2016), one training
step: the classic model-parallel benchmark of the placement papers.

The model follows the GNMT configuration of TensorFlow's NMT tutorial
(``tensorflow/nmt``, ``gnmt_v2`` attention): an encoder of ``layers`` LSTM layers whose
bottom layer is bidirectional, a decoder of ``layers`` LSTM layers, residual connections
from the third layer up, additive (Bahdanau) attention queried by the bottom decoder
layer's output with its context fed to every decoder layer above, and a projection to
the vocabulary with softmax cross-entropy.  LSTM cells are built of MatMul, Sigmoid and
Tanh ops (TensorFlow's ``BasicLSTMCell``, forget bias 1), unrolled over the sentence
lengths.  Defaults: 8 layers of 1024 units and a 32,000-word vocabulary, as the paper's
(its wordpiece vocabulary); sentences of 50 tokens and a batch of 32 are this lab's
choices.  Left out: dropout, beam search, the length-bucketed input pipeline.
"""

from __future__ import annotations

import numpy as np

import core as tf
from experiments.workloads.common import ModelBuilder, check_options, gpu_devices, scope_device_fn
from experiments.workloads.mlp import Workload

__all__ = ["gnmt"]

INIT_WEIGHT = 0.1  # the NMT tutorial's uniform initializer range


class _Seq2Seq:
    def __init__(self, m: ModelBuilder, batch: int, hidden: int):
        self.m, self.batch, self.hidden = m, batch, hidden

    def lstm(self, inputs: list, reverse: bool = False) -> list:
        """One LSTM layer over the time steps ``inputs`` ([batch, in] each); in the current
        name scope (its variables ``kernel`` and ``bias``, step ``t`` in ``t<t>``)."""
        n_in, h = inputs[0].shape[-1], self.hidden
        kernel = self.m.uniform("kernel", (n_in + h, 4 * h), INIT_WEIGHT)
        bias = self.m.filled("bias", (4 * h,), 0.0)
        state = tf.zeros((self.batch, h), name="zero_state")
        forget_bias = tf.constant(1.0, dtype=state.dtype, name="forget_bias")
        c = hidden = state
        outputs = [None] * len(inputs)
        for t in (reversed(range(len(inputs))) if reverse else range(len(inputs))):
            with tf.name_scope(f"t{t}"):
                gates = tf.nn.bias_add(tf.matmul(tf.concat([inputs[t], hidden], axis=1), kernel), bias)
                i, j, f, o = tf.split(gates, 4, axis=1)
                c = c * tf.sigmoid(f + forget_bias) + tf.sigmoid(i) * tf.tanh(j)
                hidden = tf.sigmoid(o) * tf.tanh(c)
            outputs[t] = hidden
        return outputs

    def embed(self, table, ids: np.ndarray, name: str) -> list:
        """The embeddings of ``ids`` ([batch, length]) as one [batch, hidden] tensor per step."""
        length = ids.shape[1]
        with tf.name_scope(name):
            e = tf.nn.embedding_lookup(table, tf.constant(ids, name="ids"))
            steps = tf.split(tf.transpose(e, (1, 0, 2)), length, axis=0)
            return [tf.reshape(s, (self.batch, self.hidden)) for s in steps]


def gnmt(batch: int = 32, layers: int = 8, hidden: int = 1024, vocab: int = 32000,
         src_len: int = 50, tgt_len: int = 50, optimizer: str = "adam",
         learning_rate: float = 0.001, seed: int = 0) -> Workload:
    """One training step of GNMT (forward, backward, update) on a synthetic batch of
    sentence pairs.  ``layers`` (2 to 8) is the depth of the encoder and of the decoder.

    The expert placement is GNMT's own (Wu et al. section 3; the NMT tutorial's
    ``num_gpus``): encoder and decoder layer ``i`` on GPU ``i`` (mod the GPUs), the
    embeddings and the attention with the bottom layers, the softmax with the top.

    >>> w = gnmt(batch=2, layers=2, hidden=8, vocab=20, src_len=3, tgt_len=3)
    >>> w.name, w.loss.shape
    ('gnmt', ())
    """
    check_options(batch=batch, layers=layers, hidden=hidden, vocab=vocab, src_len=src_len,
                  tgt_len=tgt_len)
    if not 2 <= layers <= 8:
        raise ValueError(f"layers must be 2 to 8 (GNMT's depths), not {layers}")
    rng = np.random.default_rng(seed)
    src = rng.integers(0, vocab, (batch, src_len)).astype(np.int32)
    tgt = rng.integers(0, vocab, (batch, tgt_len + 1)).astype(np.int32)
    g = tf.Graph()
    with g.as_default():
        m = ModelBuilder(seed)
        net = _Seq2Seq(m, batch, hidden)
        with tf.name_scope("embeddings"):
            enc_table = m.uniform("encoder", (vocab, hidden), INIT_WEIGHT)
            dec_table = m.uniform("decoder", (vocab, hidden), INIT_WEIGHT)
            below = net.embed(enc_table, src, "encoder_inputs")
            dec_in = net.embed(dec_table, tgt[:, :-1], "decoder_inputs")
        with tf.name_scope("encoder"):
            with tf.name_scope("layer0"):
                with tf.name_scope("fw"):
                    fw = net.lstm(below)
                with tf.name_scope("bw"):
                    bw = net.lstm(below, reverse=True)
                below = [tf.concat([a, b], axis=1) for a, b in zip(fw, bw)]
            for i in range(1, layers):
                with tf.name_scope(f"layer{i}"):
                    out = net.lstm(below)
                    below = [o + x for o, x in zip(out, below)] if i >= 2 else out
        with tf.name_scope("decoder"):
            with tf.name_scope("layer0"):
                bottom = net.lstm(dec_in)
            with tf.name_scope("attention"):
                contexts = _attention(m, below, bottom, batch, hidden)
            above = bottom
            for i in range(1, layers):
                with tf.name_scope(f"layer{i}"):
                    out = net.lstm([tf.concat([x, ctx], axis=1) for x, ctx in zip(above, contexts)])
                    above = [o + x for o, x in zip(out, above)] if i >= 2 else out
        with tf.name_scope("output"):
            top = tf.concat(above, axis=0)  # time-major: step t's batch at rows t*batch...
            kernel = m.uniform("kernel", (hidden, vocab), INIT_WEIGHT)
            logits = tf.matmul(top, kernel)
        with tf.name_scope("loss"):
            labels = tf.constant(tgt[:, 1:].T.reshape(-1), name="labels")
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=labels, logits=logits))
    return m.training_step("gnmt", loss, optimizer, learning_rate,
                           expert=lambda cluster: _expert(cluster, layers))


def _attention(m: ModelBuilder, memory_steps: list, queries: list, batch: int, hidden: int) -> list:
    """Additive attention (Bahdanau et al., 2015): ``score = v . tanh(W_k m + W_q q)``
    over the encoder outputs ``memory_steps``, for each decoder step's query; the
    contexts ([batch, hidden] each)."""
    src_len = len(memory_steps)
    memory = tf.concat([tf.reshape(s, (batch, 1, hidden)) for s in memory_steps], axis=1)
    w_keys = m.uniform("memory_layer", (hidden, hidden), INIT_WEIGHT)
    w_query = m.uniform("query_layer", (hidden, hidden), INIT_WEIGHT)
    v = m.uniform("attention_v", (hidden, 1), INIT_WEIGHT)
    keys = tf.reshape(tf.matmul(tf.reshape(memory, (batch * src_len, hidden)), w_keys),
                      (batch, src_len, hidden))
    contexts = []
    for t, q in enumerate(queries):
        with tf.name_scope(f"t{t}"):
            energy = tf.tanh(keys + tf.reshape(tf.matmul(q, w_query), (batch, 1, hidden)))
            scores = tf.reshape(tf.matmul(tf.reshape(energy, (batch * src_len, hidden)), v),
                                (batch, src_len))
            alpha = tf.reshape(tf.nn.softmax(scores), (batch, 1, src_len))
            contexts.append(tf.reshape(tf.matmul(alpha, memory), (batch, hidden)))
    return contexts


def _expert(cluster, layers: int):
    """Encoder and decoder layer ``i`` on GPU ``i``; the embeddings and the attention with
    layer 0, the output layer and the loss with the top layer."""
    devices = gpu_devices(cluster)

    def slot(name: str) -> int | None:
        for part in ("encoder/layer", "decoder/layer"):
            if name.startswith(part):
                digits = name[len(part):].split("/", 1)[0]
                return int(digits) if digits.isdigit() else None
        if name.startswith(("embeddings/", "decoder/attention/")):
            return 0
        if name.startswith(("output/", "loss/")):
            return layers - 1
        return None

    return scope_device_fn(slot, devices)
