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


def control_cores(sim) -> tuple[dict | None, dict | None]:
    """``(control_crossings, held)``: the simulation ``sim``'s ``control_crossings``
    (op -> ``[(latency, sent, taken, burst, destination task, successors)]``) less the
    messages whose route holds cores, and those, per op, as ``[(spec, message)]``:
    ``spec`` = ``(wait, hold, cores, host)`` (after the route's links' ``wait`` the
    message holds ``cores`` of the destination's host, :class:`sim.pools.HostCores`
    ``host``, for ``hold``, the rest of the latency), ``message`` what its arrival
    hands on, ``(taken, burst, destination task, successors)``.  ``held`` is None
    (and the crossings as they were) when no message holds cores."""
    crossings = sim.control_crossings
    if not sim.runtime.crossing_cores or crossings is None:
        return crossings, None
    op_device, names = sim.plan.op_device, sim.device_names
    per_pair: dict = {}
    rest, held = {}, {}
    for i, entries in crossings.items():
        rest[i] = []  # (kept, maybe empty: the op's end still calls send_control)
        for latency, sent, taken, burst, task, js in entries:
            pair = (op_device[i], op_device[js[0]])
            if pair not in per_pair:
                host = sim.host_of[pair[1]]
                links = sim.cluster.route(names[pair[0]], names[pair[1]])
                cores = 0 if host is None else sim.runtime.crossing_cores_of(links, host.cores)
                wait = sum(link.wait for link in links)
                per_pair[pair] = (wait, latency - wait, cores, host) if cores else None
            spec = per_pair[pair]
            if spec is None:
                rest[i].append((latency, sent, taken, burst, task, js))
            else:
                held.setdefault(i, []).append((spec, (taken, burst, task, js)))
    if not held:
        return crossings, None
    return rest, held
