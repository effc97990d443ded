"""Model-shaped workloads: recurrent, branching (Inception-like), transformer-like, and
data-parallel training.  Each builds a whole training step (forward, backward through
:func:`core.gradients`, SGD update) and returns a :class:`Workload`; all tensors are real
and small enough to run on this machine's executor.
"""

from __future__ import annotations

import numpy as np

import core as tf
import placers
from core.cluster import ClusterSpec
from experiments.workloads.mlp import Workload

__all__ = ["rnn_training_step", "inception_training_step", "transformer_training_step",
           "data_parallel_step"]


def _weight(rng, shape, name, dtype=np.float32) -> tf.Variable:
    scale = 1.0 / np.sqrt(shape[0])
    return tf.Variable((rng.standard_normal(shape) * scale).astype(dtype), name=name)


def _sgd(loss, params, learning_rate: float, name: str = "train_step"):
    grads = tf.gradients(loss, params)
    with tf.name_scope("update"):
        updates = [p.assign_sub(learning_rate * g) for p, g in zip(params, grads) if g is not None]
    return tf.group(*updates, name=name)


def rnn_training_step(batch: int = 16, steps: int = 8, layers: int = 2, hidden: int = 64,
                      inputs: int = 32, learning_rate: float = 0.01, seed: int = 0) -> Workload:
    """A stacked tanh RNN unrolled over ``steps`` time steps (an RNNLM/NMT-like chain of
    many small ops, the classic model-parallel placement benchmark).

    ``h[l][t] = tanh(h[l-1][t] @ W[l] + h[l][t-1] @ U[l] + b[l])``; the loss is the mean
    square of the last layer's outputs against targets.
    """
    rng = np.random.default_rng(seed)
    g = tf.Graph()
    flops = 0.0
    with g.as_default():
        xs = [tf.constant(rng.standard_normal((batch, inputs)).astype(np.float32), name=f"x{t}")
              for t in range(steps)]
        targets = tf.constant(rng.standard_normal((batch, hidden)).astype(np.float32), name="targets")
        params = []
        below = xs
        for layer in range(layers):
            n_in = inputs if layer == 0 else hidden
            with tf.name_scope(f"layer{layer}"):
                w = _weight(rng, (n_in, hidden), "W")
                u = _weight(rng, (hidden, hidden), "U")
                b = tf.Variable(np.zeros(hidden, np.float32), name="b")
                params += [w, u, b]
                h = tf.constant(np.zeros((batch, hidden), np.float32), name="h0")
                outputs = []
                for t in range(steps):
                    with tf.name_scope(f"t{t}"):
                        h = tf.tanh(tf.matmul(below[t], w) + tf.matmul(h, u) + b)
                    outputs.append(h)
                    flops += 3 * 2.0 * batch * (n_in + hidden) * hidden
            below = outputs
        with tf.name_scope("loss"):
            loss = tf.add(tf.reduce_mean(tf.square(below[-1] - targets)), 0.0)
            for h in below[:-1]:
                loss = loss + 0.1 * tf.reduce_mean(tf.square(h))
        step = _sgd(loss, params, learning_rate)
        init = tf.global_variables_initializer()
    return Workload("rnn", g, [step], init, flops=flops, loss=loss, expert=_rnn_expert)


def _rnn_expert(cluster):
    """Layer ``i`` (its forward ops, and its gradients, named after them) on GPU ``i``
    (mod the GPUs): the RNNLM hand placement of Mirhoseini et al. (ICML 2017)."""
    from experiments.workloads.common import gpu_devices, scope_device_fn

    def slot(name: str) -> int | None:
        head = name.split("/", 1)[0]
        return int(head[5:]) if head.startswith("layer") and head[5:].isdigit() else None

    return scope_device_fn(slot, gpu_devices(cluster))


def inception_training_step(batch: int = 32, width: int = 128, blocks: int = 3,
                            learning_rate: float = 0.01, seed: int = 0) -> Workload:
    """Inception-like blocks: parallel towers joined by concatenation.

    Convolutions are not in the op set, so each is a *stand-in*: a matmul over the
    feature dimension (a 1x1 convolution is exactly that; larger kernels are modelled by a
    wider matmul of the same flops order).  Each block has four towers over its input
    ``(batch, width)``: 1x1 (``width/4``), 1x1 -> "3x3" (``width/4``), 1x1 -> "5x5" ->
    "5x5" (``width/4``), and an identity-pool stand-in -> 1x1 (``width/4``); the towers
    are concatenated back to ``width`` features.
    """
    rng = np.random.default_rng(seed)
    quarter = width // 4
    if quarter * 4 != width:
        raise ValueError(f"width must be a multiple of 4, got {width}")
    g = tf.Graph()
    flops = 0.0
    with g.as_default():
        h = tf.constant(rng.standard_normal((batch, width)).astype(np.float32), name="images")
        targets = tf.constant(rng.standard_normal((batch, width)).astype(np.float32), name="targets")
        params = []

        def conv(x, n_in, n_out, name, scale=1):
            nonlocal flops
            w = _weight(rng, (n_in, n_out * scale), name)
            params.append(w)
            flops += 3 * 2.0 * batch * n_in * n_out * scale
            return tf.relu(tf.matmul(x, w))

        for k in range(blocks):
            with tf.name_scope(f"block{k}"):
                with tf.name_scope("tower1x1"):
                    t1 = conv(h, width, quarter, "w1x1")
                with tf.name_scope("tower3x3"):
                    t2 = conv(conv(h, width, quarter, "reduce"), quarter, quarter, "w3x3")
                with tf.name_scope("tower5x5"):
                    t3 = conv(h, width, quarter, "reduce")
                    t3 = conv(t3, quarter, quarter * 2, "w5x5a")
                    t3 = conv(t3, quarter * 2, quarter, "w5x5b")
                with tf.name_scope("tower_pool"):
                    t4 = conv(tf.identity(h, name="pool_standin"), width, quarter, "proj")
                h = tf.concat([t1, t2, t3, t4], axis=1)
        with tf.name_scope("loss"):
            loss = tf.reduce_mean(tf.square(h - targets))
        step = _sgd(loss, params, learning_rate)
        init = tf.global_variables_initializer()
    return Workload("inception", g, [step], init, flops=flops)


def transformer_training_step(seq: int = 32, d_model: int = 64, heads: int = 4, blocks: int = 2,
                              ffn: int = 4, learning_rate: float = 0.01, seed: int = 0) -> Workload:
    """Transformer-like blocks on one sequence: multi-head self-attention written with
    matmuls (one set of projections per head, so heads are independent branches), a
    residual connection, and a wide ReLU feed-forward layer (``ffn * d_model``).
    Layer normalisation is left out (not in the op set)."""
    rng = np.random.default_rng(seed)
    d_head = d_model // heads
    if d_head * heads != d_model:
        raise ValueError(f"d_model ({d_model}) must be a multiple of heads ({heads})")
    g = tf.Graph()
    flops = 0.0
    with g.as_default():
        x = tf.constant(rng.standard_normal((seq, d_model)).astype(np.float32), name="tokens")
        targets = tf.constant(rng.standard_normal((seq, d_model)).astype(np.float32), name="targets")
        params = []
        scale = 1.0 / np.sqrt(d_head)
        for k in range(blocks):
            with tf.name_scope(f"block{k}"):
                head_outputs = []
                for hd in range(heads):
                    with tf.name_scope(f"head{hd}"):
                        wq, wk, wv = (_weight(rng, (d_model, d_head), n) for n in ("Wq", "Wk", "Wv"))
                        params += [wq, wk, wv]
                        q = tf.matmul(x, wq)
                        kk = tf.matmul(x, wk)
                        v = tf.matmul(x, wv)
                        scores = tf.softmax(tf.matmul(q, kk, transpose_b=True) * scale)
                        head_outputs.append(tf.matmul(scores, v))
                        flops += 3 * 2.0 * (3 * seq * d_model * d_head + 2 * seq * seq * d_head)
                wo = _weight(rng, (d_model, d_model), "Wo")
                w1 = _weight(rng, (d_model, ffn * d_model), "W1")
                w2 = _weight(rng, (ffn * d_model, d_model), "W2")
                params += [wo, w1, w2]
                attended = tf.matmul(tf.concat(head_outputs, axis=1), wo) + x
                x = tf.matmul(tf.relu(tf.matmul(attended, w1)), w2) + attended
                flops += 3 * 2.0 * (seq * d_model * d_model + 2 * seq * d_model * ffn * d_model)
        with tf.name_scope("loss"):
            loss = tf.reduce_mean(tf.square(x - targets))
        step = _sgd(loss, params, learning_rate)
        init = tf.global_variables_initializer()
    return Workload("transformer", g, [step], init, flops=flops)


def data_parallel_step(workers: int = 2, ps_tasks: int = 1, batch: int = 32, layers: int = 3,
                       width: int = 128, synchronous: bool = True, learning_rate: float = 0.01,
                       seed: int = 0, ps_strategy: str = "round_robin") -> Workload:
    """Data-parallel MLP training: ``workers`` replicas each compute gradients on their
    own batch; the variables are sharded over ``ps_tasks`` ps tasks by
    :func:`placers.replica_device_setter`.

    ``synchronous``: the replicas' gradients are averaged and applied once per variable on
    its ps task (the step ends when every update is applied).  Otherwise each replica
    applies its own update as soon as it has it (asynchronous SGD; the step is the group
    of all replicas' updates, and the simulator reports when each worker finished).

    Ops are pinned to ``/job:worker/task:i`` per replica and variables to the ps job, so
    this graph needs a cluster with ``ps`` and ``worker`` jobs (``Workload.cluster_spec``).
    ``ps_strategy`` is ``replica_device_setter``'s (``"round_robin"`` or ``"greedy"`` by
    bytes: round-robin over an even number of ps tasks puts every weight matrix on one
    task and every bias on another).
    """
    rng = np.random.default_rng(seed)
    spec = ClusterSpec({"ps": [f"127.0.0.1:{20000 + i}" for i in range(ps_tasks)],
                        "worker": [f"127.0.0.1:{21000 + i}" for i in range(workers)]})
    sizes = [width] * (layers + 1)
    g = tf.Graph()
    flops = 0.0
    with g.as_default():
        with tf.device(placers.replica_device_setter(cluster=spec, ps_strategy=ps_strategy)):
            params = []
            for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
                params.append(_weight(rng, (n_in, n_out), f"w{i}"))
                params.append(tf.Variable(np.zeros(n_out, np.float32), name=f"b{i}"))
        replica_grads = []
        for r in range(workers):
            with tf.device(f"/job:worker/task:{r}"), tf.name_scope(f"replica{r}"):
                x = tf.constant(rng.standard_normal((batch, width)).astype(np.float32), name="x")
                y = tf.constant(rng.standard_normal((batch, width)).astype(np.float32), name="y")
                h = x
                for i in range(layers):
                    h = tf.matmul(h, params[2 * i]) + params[2 * i + 1]
                    if i < layers - 1:
                        h = tf.relu(h)
                    flops += 3 * 2.0 * batch * width * width
                loss = tf.reduce_mean(tf.square(h - y))
                replica_grads.append(tf.gradients(loss, params))
        updates = []
        if synchronous:
            with tf.name_scope("sync_update"):
                for p, grads in zip(params, zip(*replica_grads)):
                    with tf.colocate_with(p):
                        total = grads[0]
                        for gr in grads[1:]:
                            total = total + gr
                        updates.append(p.assign_sub((learning_rate / workers) * total))
        else:
            for r, grads in enumerate(replica_grads):
                with tf.device(f"/job:worker/task:{r}"), tf.name_scope(f"async_update{r}"):
                    for p, gr in zip(params, grads):
                        scaled = learning_rate * gr  # on the worker
                        with tf.colocate_with(p):  # the update itself runs where p lives
                            updates.append(p.assign_sub(scaled))
        step = tf.group(*updates, name="train_step")
        init = tf.global_variables_initializer()
    w = Workload("data_parallel_sync" if synchronous else "data_parallel_async", g, [step], init,
                 flops=flops)
    w.cluster_spec = spec
    return w
