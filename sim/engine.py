"""The discrete-event model of one step of a placed graph, on SimPy.

Shape: no SimPy process per op.  The "what runs next" logic is the pure state machine
:class:`core.dataflow.StepState`; devices, hosts and links are small resources
(:mod:`sim.pools`, :mod:`sim.links`) granted synchronously inside event callbacks; the
only scheduled events are the ends of ops and of transfers (one ``simpy.Timeout``
each, with a callback).  That keeps the cost per op to about one SimPy event.

Rules of the model (the semantics page, "Parallel execution", "GPU memory", "Clusters
of servers"):

- Only the ops the fetches need run.  An op is ready when every data and control input
  has finished and every input from another device has arrived.
- A ready op waits for a thread of its device's inter-op pool (``(ready time,
  topological index)`` order).  A CPU op then also needs its host's cores (shared by all
  tasks on the host; see :mod:`sim.pools`); GPU kernels hold no host core.  Its time is
  ``cost_model.op_time(op, device)``, longer when a multithreaded CPU kernel got fewer
  cores than its intra-op pool (Amdahl's law).
- A data edge between devices is one transfer per (tensor, destination device), sent
  when the producer ends, over the links of ``cluster.route`` (see :mod:`sim.links`).
- Memory: :mod:`sim.memory`.
- Ties: events at one instant are handled in the order they were scheduled (SimPy's
  rule); inside one event, freed resources are handed out before newly ready ops queue,
  and newly ready ops queue in topological order.  Same input, same trace.
"""

from __future__ import annotations

import gc
import math
from dataclasses import replace
from heapq import heappop, heappush

import simpy
from simpy.events import Timeout

from core.costs import CostModel, StaticCostModel
from core.costs import tensor_bytes as _tensor_bytes
from core.dataflow import StepPlan, StepState
from core.graph import Operation, Tensor
from core.trace import MemoryRecord, OOMEvent, OpRecord, Trace, TransferRecord
from sim.config import SimConfig
from sim.errors import InvalidCost, OutOfMemory, SimulationStalled, UnknownPlacedDevice
from sim.links import LinkQueue, static_transfer_order
from sim.memory import device_capacity
from sim.pools import HostCores, InterOpPool, rescale_speedup, slowdown_table

__all__ = ["simulate"]


def simulate(graph, placement, cluster, *, fetches=None, cost_model: CostModel | None = None,
             config: SimConfig | None = None) -> Trace:
    """Predict one step of ``graph`` placed by ``placement`` on ``cluster``.

    ``fetches``: what the step computes (an op, tensor, variable or name, or a list of
    them); None runs every op.  ``cost_model``: op and transfer times (default
    :class:`core.costs.StaticCostModel`).  ``config``: a :class:`sim.SimConfig`.

    Returns a :class:`core.trace.Trace`.  Raises, before any simulated time passes:
    :class:`core.dataflow.UnplacedOp`, :class:`sim.UnknownPlacedDevice`,
    :class:`core.costs.MissingCost`, :class:`sim.InvalidCost`,
    :class:`core.graph.GraphCycleError`; while running, :class:`sim.OutOfMemory`
    (unless ``config.record_oom``).

    >>> import core as tf
    >>> from core.cluster import Cluster
    >>> from core.placement import Placement
    >>> g = tf.Graph()
    >>> with g.as_default():
    ...     a = tf.constant([[1.0] * 64] * 64, name="a")
    ...     b = tf.matmul(a, a, name="b")
    >>> cluster = Cluster.single_host(gpus=1)
    >>> cpu, gpu = (d.name for d in cluster.devices)
    >>> trace = simulate(g, Placement({"a": cpu, "b": gpu}), cluster)
    >>> [(r.op, r.device[-5:]) for r in trace.ops], [x.links for x in trace.transfers]
    ([('a', 'CPU:0'), ('b', 'GPU:0')], [('pcie:/job:localhost/replica:0/task:0/device:GPU:0',)])
    >>> trace.step_time > 0
    True
    """
    # The cyclic garbage collector would walk the whole graph again and again while
    # the run allocates its records (a third of the time at 100k ops); nothing the run
    # makes needs it before it returns.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _Simulation(graph, placement, cluster, fetches, cost_model or StaticCostModel(),
                           config or SimConfig()).run()
    finally:
        if collecting:
            gc.enable()


def _resolve_fetches(graph, fetches):
    if fetches is None:
        return None
    items = fetches if isinstance(fetches, (list, tuple, set, frozenset)) else [fetches]
    out = []
    for f in items:
        element = graph.as_graph_element(f)
        out.append(element)
    return out


class _Simulation:
    def __init__(self, graph, placement, cluster, fetches, cost_model, config):
        self.graph, self.cluster, self.cost_model, self.config = graph, cluster, cost_model, config
        fetch_list = _resolve_fetches(graph, fetches)
        bytes_of = _memo_tensor_bytes(cost_model)
        self.plan = plan = StepPlan.build(graph.get_operations(), placement, fetch_list,
                                          tensor_bytes=bytes_of)
        self.fetch_ops = ([f.op if isinstance(f, Tensor) else f for f in fetch_list]
                          if fetch_list is not None else [])
        self._setup_devices()
        self._setup_durations()
        self._setup_transfers()

    # -- setup (all checks happen here, before time 0) ---------------------------------------
    def _setup_devices(self):
        plan, cluster, config = self.plan, self.cluster, self.config
        devices = []
        for d, name in enumerate(plan.devices):
            try:
                dev = cluster.device(name)
            except KeyError:
                op = plan.op_names[plan.op_device.index(d)]
                raise UnknownPlacedDevice(op, name, [x.name for x in cluster.devices]) from None
            changes = {}
            if config.inter_op_threads is not None:
                changes["inter_op_threads"] = config.inter_op_threads
            if config.intra_op_threads is not None and config.intra_op_threads != dev.intra_op_threads:
                # Keep the kernel's parallel fraction; rescale the whole-pool speed-up.
                p_speedup = rescale_speedup(dev.intra_op_speedup, dev.intra_op_threads,
                                              config.intra_op_threads)
                changes.update(intra_op_threads=config.intra_op_threads,
                               intra_op_speedup=p_speedup)
            devices.append(replace(dev, **changes) if changes else dev)
        self.devices = devices
        self.device_names = [dev.name for dev in devices]
        self.pools = [InterOpPool(dev.inter_op_threads) for dev in devices]
        hosts: dict[str, HostCores] = {}
        self.host_of = []  # device -> HostCores for CPU devices, None for the others
        for dev in devices:
            if dev.is_cpu:
                if dev.host not in hosts:
                    hosts[dev.host] = HostCores(cluster.host(dev.host).cpu_cores)
                self.host_of.append(hosts[dev.host])
            else:
                self.host_of.append(None)
        self.hosts = hosts
        self.intra = [dev.intra_op_threads for dev in devices]
        self.slowdown = [slowdown_table(dev.intra_op_speedup, dev.intra_op_threads)
                         for dev in devices]
        self.capacity = [device_capacity(dev, config) for dev in devices]

    def _setup_durations(self):
        plan, devices = self.plan, self.devices
        op_time = _memo_op_time(self.cost_model)
        durations = [0.0] * plan.n_ops
        multi = [False] * plan.n_ops
        for i, op in enumerate(plan.ops):
            d = plan.op_device[i]
            dev = devices[d]
            t = op_time(op, dev)
            if not (isinstance(t, (int, float)) and 0 <= t < math.inf):
                raise InvalidCost(op.name, dev.name, t)
            durations[i] = float(t)
            multi[i] = dev.is_cpu and op.op_def.multithreaded and dev.intra_op_threads > 1
        self.durations, self.multi = durations, multi
        self.op_alloc = [sum(plan.buffer_bytes[b] for b in outs) for outs in plan.op_outputs]

    def _setup_transfers(self):
        plan, cluster = self.plan, self.cluster
        routes: dict[tuple[int, int], tuple] = {}
        link_index: dict[str, int] = {}
        self.link_names: list[str] = []
        self.transfer_links: list[tuple[int, ...]] = []
        self.transfer_durations: list[float] = []
        memo: dict[tuple, float] = {}
        transfer_time = self.cost_model.transfer_time
        for k in range(plan.n_transfers):
            pair = (plan.transfer_src[k], plan.transfer_dst[k])
            route = routes.get(pair)
            if route is None:
                links = cluster.route(self.device_names[pair[0]], self.device_names[pair[1]])
                ids = []
                for link in links:
                    if link.name not in link_index:
                        link_index[link.name] = len(self.link_names)
                        self.link_names.append(link.name)
                    ids.append(link_index[link.name])
                route = routes[pair] = (links, tuple(ids))
            nbytes = plan.tensor_bytes[plan.transfer_tensor[k]]
            key = (pair, nbytes)
            t = memo.get(key)
            if t is None:
                t = memo[key] = float(transfer_time(nbytes, route[0]))
                if not 0 <= t < math.inf:
                    raise InvalidCost(plan.tensor_name(plan.transfer_tensor[k]),
                                      self.device_names[pair[1]], t)
            self.transfer_links.append(route[1])
            self.transfer_durations.append(t)
        self.links = [LinkQueue() for _ in self.link_names]
        self.static = self.config.link_order == "static"
        if self.static:
            for k in static_transfer_order(plan, self.durations):
                for l in self.transfer_links[k]:
                    self.links[l].order.append(k)

    # -- running ----------------------------------------------------------------------------
    def run(self) -> Trace:
        plan = self.plan
        self.env = env = simpy.Environment()
        self.state = StepState(plan)
        n, m = plan.n_ops, plan.n_transfers
        self.op_start = [None] * n
        self.op_end = [None] * n
        self.op_thread = [0] * n
        self.op_cores = [0] * n
        self.x_start = [None] * m
        self.x_end = [None] * m
        self.x_ready = bytearray(m)
        self.in_use = [0] * len(self.devices)
        self.mem_records: list[tuple[int, float, int]] = []
        self.oom_events: list[OOMEvent] = []
        try:
            # Resident state (variables) exists before the step starts.
            for b in plan.resident:
                if plan.buffer_bytes[b]:
                    self._alloc(plan.buffer_device[b], plan.buffer_bytes[b],
                                plan.tensor_op[b], None)
            for i in self.state.initial_ready():
                self._ready(i)
            env.run()
        except OutOfMemory as e:
            e.trace = self._trace()
            raise
        if not self.state.done:
            raise SimulationStalled([plan.op_names[i] for i in range(n) if self.op_end[i] is None])
        return self._trace()

    def _ready(self, i):
        pool = self.pools[self.plan.op_device[i]]
        if pool.free and not pool.waiting:
            self._take_thread(i, heappop(pool.free))
        else:
            heappush(pool.waiting, (self.env._now, i))

    def _take_thread(self, i, slot):
        host = self.host_of[self.plan.op_device[i]]
        if host is None:
            self._run(i, slot, 0)
        elif host.free and not host.waiting:
            self._run(i, slot, self._take_cores(i, host))
        else:
            heappush(host.waiting, (self.env._now, i, slot))

    def _take_cores(self, i, host):
        if self.multi[i]:
            k = self.intra[self.plan.op_device[i]]
            if k > host.free:
                k = host.free
        else:
            k = 1
        host.free -= k
        return k

    def _run(self, i, slot, cores):
        env = self.env
        d = self.plan.op_device[i]
        duration = self.durations[i]
        if self.multi[i]:
            duration *= self.slowdown[d][cores]
        self.op_start[i] = env._now
        self.op_thread[i] = slot
        self.op_cores[i] = cores
        n = self.op_alloc[i]
        if n:
            self._alloc(d, n, i, None)
        Timeout(env, duration, i).callbacks.append(self._op_done)

    def _op_done(self, event):
        i = event._value
        plan = self.plan
        self.op_end[i] = self.env._now
        ready, sends, freed = self.state.op_finished(i)
        if freed:
            self._free(freed)
        d = plan.op_device[i]
        cores = self.op_cores[i]
        if cores:
            host = self.host_of[d]
            host.free += cores
            waiting = host.waiting
            while host.free and waiting:
                _, j, slot = heappop(waiting)
                self._run(j, slot, self._take_cores(j, host))
        pool = self.pools[d]
        heappush(pool.free, self.op_thread[i])
        for j in ready:
            self._ready(j)
        free, waiting = pool.free, pool.waiting
        while free and waiting:
            self._take_thread(heappop(waiting)[1], heappop(free))
        for k in sends:
            self._send(k)

    # -- transfers ------------------------------------------------------------------------------
    def _send(self, k):
        links = self.transfer_links[k]
        if not links:
            self._start_transfer(k)
            return
        if self.static:
            self.x_ready[k] = 1
        else:
            key = (self.env._now, k)
            for l in links:
                heappush(self.links[l].heap, key)
        self._try_transfer(k)

    def _try_transfer(self, k):
        links = self.links
        if self.static:
            for l in self.transfer_links[k]:
                q = links[l]
                if q.busy or q.order[q.next] != k:
                    return
        else:
            for l in self.transfer_links[k]:
                q = links[l]
                if q.busy or q.heap[0][1] != k:
                    return
        self._start_transfer(k)

    def _start_transfer(self, k):
        links, plan = self.links, self.plan
        for l in self.transfer_links[k]:
            q = links[l]
            q.busy = True
            if self.static:
                q.next += 1
            else:
                heappop(q.heap)
        b = plan.n_tensors + k
        n = plan.buffer_bytes[b]
        if n:
            t = plan.transfer_tensor[k]
            self._alloc(plan.transfer_dst[k], n, plan.tensor_op[t], t)
        self.x_start[k] = self.env._now
        Timeout(self.env, self.transfer_durations[k], k).callbacks.append(self._transfer_done)

    def _transfer_done(self, event):
        k = event._value
        self.x_end[k] = self.env._now
        ready, _, freed = self.state.transfer_done(k)
        if freed:
            self._free(freed)
        for j in ready:
            self._ready(j)
        links = self.links
        route = self.transfer_links[k]
        for l in route:
            links[l].busy = False
        for l in route:
            q = links[l]
            if self.static:
                if q.next < len(q.order):
                    head = q.order[q.next]
                    if self.x_ready[head]:
                        self._try_transfer(head)
            elif q.heap:
                self._try_transfer(q.heap[0][1])

    # -- memory ------------------------------------------------------------------------------------
    def _alloc(self, d, n, op, tensor):
        use = self.in_use[d] + n
        now = self.env._now
        if use > self.capacity[d]:
            plan = self.plan
            event = OOMEvent(now, self.device_names[d], plan.op_names[op],
                             None if tensor is None else plan.tensor_name(tensor), n,
                             self.in_use[d], self.capacity[d])
            self.oom_events.append(event)
            if not self.config.record_oom:
                raise OutOfMemory(event.op, event.device, n, event.capacity, event.in_use, now,
                                  event.tensor)
        self.in_use[d] = use
        self.mem_records.append((d, now, use))

    def _free(self, freed):
        plan, in_use, now = self.plan, self.in_use, self.env._now
        buffer_bytes, buffer_device, records = plan.buffer_bytes, plan.buffer_device, self.mem_records
        for b in freed:
            n = buffer_bytes[b]
            if n:
                d = buffer_device[b]
                in_use[d] -= n
                records.append((d, now, in_use[d]))

    # -- the trace ----------------------------------------------------------------------------------
    def _trace(self) -> Trace:
        plan, names = self.plan, self.device_names
        make = tuple.__new__  # a record straight from its fields (no per-record Python call)
        op_names, ops, op_device = plan.op_names, plan.ops, plan.op_device
        op_start, op_end, op_thread, op_cores = self.op_start, self.op_end, self.op_thread, self.op_cores
        op_records = [make(OpRecord, (op_names[i], ops[i].type, names[op_device[i]], op_thread[i],
                                      op_start[i], op_end[i], op_cores[i]))
                      for i in range(plan.n_ops) if op_end[i] is not None]
        link_names = self.link_names
        route_names = {}
        for route in set(self.transfer_links):
            route_names[route] = tuple(link_names[l] for l in route)
        tensor_bytes, transfer_tensor = plan.tensor_bytes, plan.transfer_tensor
        transfer_src, transfer_dst, transfer_links = plan.transfer_src, plan.transfer_dst, self.transfer_links
        x_start, x_end, tensor_name = self.x_start, self.x_end, plan.tensor_name
        transfers = [make(TransferRecord, (tensor_name(transfer_tensor[k]), names[transfer_src[k]],
                                           names[transfer_dst[k]], route_names[transfer_links[k]],
                                           tensor_bytes[transfer_tensor[k]], x_start[k], x_end[k]))
                     for k in range(plan.n_transfers) if x_end[k] is not None]
        memory = [make(MemoryRecord, (names[d], t, b)) for d, t, b in self.mem_records]
        fetch_end = {}
        for op in self.fetch_ops:
            i = plan.op_index[op.name]
            if self.op_end[i] is not None:
                fetch_end[op.name] = self.op_end[i]
        return Trace(ops=op_records, transfers=transfers, memory=memory,
                     oom_events=list(self.oom_events),
                     capacity={n: c for n, c in zip(names, self.capacity)},
                     fetch_end=fetch_end,
                     meta={"backend": "sim", "cost_model": type(self.cost_model).__name__,
                           "link_order": self.config.link_order})


def _memo_op_time(cost_model: CostModel):
    """``cost_model.op_time``, memoised per op signature for the static model.

    :class:`StaticCostModel` depends only on the op's type, tensors, attributes and the
    device, so ops alike share one computation (a graph of 100k ops has a handful of
    signatures).  Other models are called for every op: a measured model keys by name.
    """
    op_time = cost_model.op_time
    if type(cost_model) is not StaticCostModel:
        return op_time
    memo: dict = {}

    def memo_op_time(op: Operation, device) -> float:
        attrs = op.attrs
        try:
            key = (op.type, device.name,
                   tuple([(t.dtype, t.shape) for t in op.inputs]),
                   tuple([(t.dtype, t.shape) for t in op.outputs]),
                   tuple(sorted(attrs.items())) if attrs else ())
            t = memo.get(key)
        except TypeError:  # an unhashable attribute (a Const's value): no memo
            return op_time(op, device)
        if t is None:
            t = memo[key] = op_time(op, device)
        return t

    return memo_op_time


def _memo_tensor_bytes(cost_model: CostModel):
    """``cost_model.tensor_bytes``, memoised per (dtype, shape) when not overridden."""
    if type(cost_model).tensor_bytes is not CostModel.tensor_bytes:
        return cost_model.tensor_bytes
    memo: dict = {}

    def tensor_bytes(t: Tensor) -> int:
        key = (t.dtype, t.shape)
        n = memo.get(key)
        if n is None:
            n = memo[key] = _tensor_bytes(t)
        return n

    return tensor_bytes
