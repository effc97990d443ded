"""What each crossing of a step holds of its host's cores, under a runtime model with
``crossing_cores`` (:class:`core.runtime_model.RuntimeModel`): worked out once before
the run, for the handlers (:func:`sim.handlers._crossing_core_handlers`).

A runtime whose threads copy, encode and decode a tensor at both ends of a crossing
between two of a host's processes (TensorFlow's servers) keeps that many of the host's
cores busy while it crosses (``Link.busy_cores``): the simulator makes such a transfer
hold them while on its links, and a control edge's message over such a route (an empty
tensor, to the runtime) hold them for the route's latency less its links' ``wait``,
both queued with the host's kernels for them.
"""

from __future__ import annotations

__all__ = ["transfer_cores", "control_cores"]


def transfer_cores(sim, routes: dict, keys, pair_of) -> list | None:
    """Per transfer of the simulation ``sim`` (its ``runtime``, ``host_of`` and
    ``device_names``; ``routes`` by (source, destination) device pair, ``keys`` the
    distinct pairs' keys, ``pair_of`` each transfer's pair), the cores of its
    destination's host it holds while on its links (:meth:`core.runtime_model.
    RuntimeModel.crossing_cores_of`; 0 for a device without host cores); None when the
    model holds none or no transfer holds any."""
    if not sim.runtime.crossing_cores or not len(pair_of):
        return None
    n_dev = len(sim.device_names)
    per_pair = []
    for key in keys.tolist():
        pair = divmod(int(key), n_dev)
        host = sim.host_of[pair[1]]
        per_pair.append(0 if host is None else
                        sim.runtime.crossing_cores_of(routes[pair], host.cores))
    if not any(per_pair):
        return None
    return [per_pair[p] for p in pair_of.tolist()]


def control_cores(sim) -> dict | None:
    """Per op of the simulation ``sim`` with control edges to other tasks, a list beside
    its ``control_crossings`` entries: ``(wait, hold, cores, host)`` for a message
    whose route holds cores (after the route's links' ``wait`` it holds ``cores`` of
    the destination's host, :class:`sim.pools.HostCores` ``host``, for ``hold``, the
    rest of the latency), else None; None when no message holds any."""
    if not sim.runtime.crossing_cores or sim.control_crossings is None:
        return None
    op_device, names = sim.plan.op_device, sim.device_names
    per_pair: dict = {}
    out = {}
    for i, entries in sim.control_crossings.items():
        row = []
        for *_, js in entries:
            pair = (op_device[i], op_device[js[0]])
            if pair not in per_pair:
                host = sim.host_of[pair[1]]
                links = sim.cluster.route(names[pair[0]], names[pair[1]])
                cores = 0 if host is None else sim.runtime.crossing_cores_of(links, host.cores)
                wait = sum(link.wait for link in links)
                latency = sum(link.latency for link in links)
                per_pair[pair] = (wait, latency - wait, cores, host) if cores else None
            row.append(per_pair[pair])
        if any(x is not None for x in row):
            out[i] = row
    return out or None
