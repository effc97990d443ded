"""Links: how transfers share the network cards, PCIe lanes and memcpy paths.

The model (one rule for all link kinds):

- A transfer occupies **every link of its route at once**, for
  ``cost_model.transfer_time(bytes, route)`` (every link's latency plus the bytes at
  the slowest link's bandwidth: the tensor is pipelined through the route).
- A link carries **one transfer at a time** at full bandwidth (capacity 1); the others
  wait.  So two equal transfers over one network card take twice as long as one: the
  second ends at twice the first's time.  (Fair sharing would end both at 2x; the
  total is the same, FIFO gives the first consumer its tensor sooner.)
- A transfer starts when it is at the head of the queue of every link of its route and
  all of them are free.  The queues follow one global order, so no two transfers wait
  for each other (the ordered-locking argument: the globally first waiting transfer is
  at the head of all its queues) and routes of several links cannot deadlock.

The order (``SimConfig.link_order``):

- ``"static"`` (default): transfers are served in a fixed order, by the time their
  tensor would be ready if ops never waited for threads or transfers (the as-soon-as-
  possible schedule over op times alone), ties by transfer index (producer's
  topological order).  A link may stay idle while an earlier-ordered tensor is late.
  **Rule:** the fixed order makes every start and end time a max-plus expression of
  the durations (a timed event graph: F. Baccelli, G. Cohen, G. J. Olsder, J.-P.
  Quadrat, *Synchronization and Linearity*, Wiley 1992, ch. 2), hence non-decreasing in
  every transfer time: a faster link never makes a step slower.  This holds as long as
  the devices do not reorder work either, i.e. no inter-op pool and no host's cores
  are oversubscribed (otherwise greedy list scheduling has Graham's anomalies
  whatever the links do: R. L. Graham, "Bounds on multiprocessing timing anomalies",
  SIAM J. Appl. Math. 1969).  The order does not depend on bandwidths, so changing one
  cannot reorder anything.
- ``"ready"``: first come, first served, by (time the tensor became ready, transfer
  index).  Work-conserving, but not monotone: a faster link can deliver a tensor
  earlier to another link, where it overtakes a critical transfer (an example is in
  ``tests/sim/test_links.py``).

>>> queue = LinkQueue()
>>> queue.busy, queue.order, queue.next
(False, [], 0)
"""

from __future__ import annotations

import numpy as np

__all__ = ["LinkQueue", "static_transfer_order"]


class LinkQueue:
    """One link's state: ``busy``; for the static order, ``order`` (transfer indices in
    service order) and ``next`` (position of the next to serve); for the ready order,
    ``heap`` of ``(ready time, transfer index)``."""

    __slots__ = ("busy", "order", "next", "heap")

    def __init__(self):
        self.busy = False
        self.order: list[int] = []
        self.next = 0
        self.heap: list = []


def static_transfer_order(plan, durations: list[float]) -> list[int]:
    """Transfer indices sorted by (as-soon-as-possible ready time of their tensor over op
    ``durations`` alone, transfer index).

    The key never puts a transfer before one it depends on: a dependent tensor's ready
    time is no earlier, and its producer comes later in topological order, as does its
    transfer index.
    """
    n, m = plan.n_ops, plan.n_transfers
    if not m:
        return []
    # Each op's predecessors as one flat list: the ops it waits for on its device and
    # the producers of the transfers it waits for (numpy merges the two flat forms).
    op_ptr, op_preds = (np.asarray(a, dtype=np.int64) for a in plan.csr_op_pred_ops)
    x_ptr, x_preds = (np.asarray(a, dtype=np.int64) for a in plan.csr_op_pred_transfers)
    tensor_op = np.asarray(plan.tensor_op, dtype=np.int64)
    producer = tensor_op[np.asarray(plan.transfer_tensor, dtype=np.int64)]
    owner = np.concatenate([np.repeat(np.arange(n), np.diff(op_ptr)),
                            np.repeat(np.arange(n), np.diff(x_ptr))])
    preds = np.concatenate([op_preds, producer[x_preds]])
    by_owner = np.argsort(owner, kind="stable")
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(owner, minlength=n), out=ptr[1:])
    ptr, preds = ptr.tolist(), preds[by_owner].tolist()
    finish = [0.0] * n
    get = finish.__getitem__
    for i in range(n):
        a, b = ptr[i], ptr[i + 1]
        finish[i] = (max(map(get, preds[a:b])) if a != b else 0.0) + durations[i]
    keys = np.asarray(finish)[producer]
    return np.argsort(keys, kind="stable").tolist()  # stable: ties by transfer index
