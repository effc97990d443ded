"""Links: how transfers share the network cards, PCIe lanes and memcpy paths.

The model (one rule for all link kinds):

- A transfer occupies **every link of its route at once**, for
  ``cost_model.transfer_time(bytes, route)`` (every link's latency plus the bytes at
  the slowest link's bandwidth: the tensor is pipelined through the route), less the
  route's links' ``wait`` (:attr:`core.cluster.Link.wait`, 0 by default): that part of
  the latency comes first, holding no link, so transfers overlap in it (a runtime
  with many crossings in flight at once).  A serial-dispatch runtime makes the whole
  latency its dispatchers' work instead (see :mod:`sim.engine`).
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

How the engine runs the static order: each transfer counts down what it still waits
for (being sent, and each link of its route *offering* itself); a link offers itself
to the next transfer of its order when it becomes free, so the count reaches zero
exactly when the transfer is sent, heads every queue of its route, and all those links
are free.

Transfer 0 crosses links 0 and 1, transfer 1 link 1 only; served 1 first: link 0 starts
with 0, link 1 with 1, then 0 (2 stands for "no next"):

>>> [a.tolist() for a in link_successors([1, 0], routes=[(0, 1), (1,)], route_of=np.array([0, 1]))]
[[0, 1], [0, 2, 3], [2, 2, 0]]
"""

from __future__ import annotations

import numpy as np

__all__ = ["static_transfer_order", "link_successors"]


def static_transfer_order(plan, durations: list[float]) -> np.ndarray:
    """Transfer indices (an array) sorted by (as-soon-as-possible ready time of their tensor over op
    ``durations`` alone, transfer index).

    The key never puts a transfer before one it depends on: a dependent tensor's ready
    time is no earlier, and its producer comes later in topological order, as does its
    transfer index.
    """
    n, m = plan.n_ops, plan.n_transfers
    if not m:
        return []
    # Each op's predecessors as one flat list: the ops it waits for on its device, then
    # the producers of the transfers it waits for.  The two flat forms are merged by
    # placing each item (op i's part starts at op_ptr[i] + x_ptr[i]: a sort of the
    # items by op cost ~10% of this function).
    op_ptr, op_preds = plan.array("csr_op_pred_ops")
    x_ptr, x_preds = plan.array("csr_op_pred_transfers")
    producer = plan.array("tensor_op")[plan.array("transfer_tensor")]
    op_count, x_count = np.diff(op_ptr), np.diff(x_ptr)
    count = op_count + x_count
    ptr = op_ptr + x_ptr
    preds = np.empty(int(ptr[-1]), np.int64)
    preds[np.arange(len(op_preds)) + np.repeat(x_ptr[:-1], op_count)] = op_preds
    preds[np.arange(len(x_preds)) + np.repeat(op_ptr[1:], x_count)] = producer[x_preds]
    # finish[1 + i] = the latest finish among i's predecessors + i's duration, in
    # topological order (appended: a list store by index and the loop's counter cost
    # a sixth more).  Most ops have at most two predecessors: those read two entries
    # (entry 0, a 0.0, stands for a missing one); the others are marked -1.
    preds = preds + 1
    first = np.where(count > 0, preds[np.minimum(ptr[:-1], len(preds) - 1)], 0)
    second = np.where(count > 1, preds[np.minimum(ptr[:-1] + 1, len(preds) - 1)], 0)
    second[count > 2] = -1
    finish = [0.0]
    get = finish.__getitem__
    for a, b, duration in zip(first.tolist(), second.tolist(), durations):
        if b < 0:
            i = len(finish) - 1
            finish.append(max(map(get, preds[ptr[i]:ptr[i + 1]].tolist())) + duration)
        else:
            fa, fb = finish[a], finish[b]
            finish.append((fa if fa > fb else fb) + duration)
    keys = np.fromiter(finish, np.float64, len(finish))[1 + producer]  # (asarray: 1.6x)
    return np.argsort(keys, kind="stable")  # stable: ties by transfer index


def link_successors(order, routes: list[tuple[int, ...]], route_of: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The queues of the static order, as what the engine's countdowns need: the first
    transfer of each link's queue (each link crossed by some transfer, in link order),
    and for each transfer ``k``, the transfer after it in the queue of each link of its
    route (in route order; ``len(route_of)``, a transfer that never starts, after the
    last), as ``flat[ptr[k]:ptr[k + 1]]``: returns the arrays ``(first, ptr, flat)``
    (flat: a list per transfer would be 100k small objects to allocate).

    ``order``: transfer indices in service order; ``routes``: the distinct routes, as
    link indices; ``route_of``: the route of each transfer.  Numpy lists the (transfer,
    link) pairs in ``order`` and groups them by link with a stable sort.
    """
    m = len(route_of)
    order = np.asarray(order, dtype=np.int64)
    route_len = np.fromiter(map(len, routes), np.int64, len(routes))
    flat_routes = np.fromiter((l for r in routes for l in r), np.int64, int(route_len.sum()))
    route_start = np.cumsum(route_len) - route_len
    length = route_len[route_of[order]]
    owner = np.repeat(order, length)  # the transfer of each (transfer, link) pair
    slot = np.arange(len(owner)) - np.repeat(np.cumsum(length) - length, length)
    link = flat_routes[route_start[route_of[owner]] + slot]
    # (numpy's stable sort is a radix sort for 16-bit keys, ~5 times faster here)
    by_link = np.argsort(link.astype(np.int16) if len(routes) and flat_routes.max() < 2**15
                         else link, kind="stable")
    link, owner, slot = link[by_link], owner[by_link], slot[by_link]
    same_link = link[1:] == link[:-1]
    after = np.full(len(owner), m, np.int64)
    after[:-1] = np.where(same_link, owner[1:], m)  # (np.where: a boolean mask's 5x)
    first = owner[np.concatenate([[True], ~same_link])] if len(owner) else owner
    # Per transfer, in route order (its pairs are consecutive, transfer by transfer).
    pairs = route_len[route_of]
    start = np.cumsum(pairs) - pairs
    flat = np.empty(len(owner), np.int64)
    flat[start[owner] + slot] = after
    return first, np.append(start, len(owner)), flat
