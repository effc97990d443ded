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
    n = plan.n_ops
    finish = [0.0] * n
    tensor_op, transfer_tensor = plan.tensor_op, plan.transfer_tensor
    for i in range(n):
        start = 0.0
        for j in plan.op_pred_ops[i]:
            if finish[j] > start:
                start = finish[j]
        for k in plan.op_pred_transfers[i]:
            f = finish[tensor_op[transfer_tensor[k]]]
            if f > start:
                start = f
        finish[i] = start + durations[i]
    keys = [finish[tensor_op[t]] for t in transfer_tensor]
    return sorted(range(plan.n_transfers), key=lambda k: (keys[k], k))
