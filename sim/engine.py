"""The discrete-event model of one step of a placed graph, on SimPy.

Shape: no SimPy process per op.  The "what runs next" logic is that of the state
machine :class:`core.dataflow.StepState` (its counters are driven inline here, on the
plan's flat arrays: a method call and a ``Progress`` per event cost a fifth of the
run); devices, hosts and links are small resources (:mod:`sim.pools`,
:mod:`sim.links`) granted synchronously inside event callbacks (a link in the static
order by a countdown per transfer, no scan of its route); the only scheduled events are
the ends of ops and of transfers (one heap entry each, ``(time, id, handler, value)``:
SimPy's own key less its priority, stepped by :class:`_Environment`).  That keeps the
cost per op to about one SimPy event.  Everything before time 0 (plan, durations,
routes, link orders) is numpy over the plan's arrays; the graph's part of them is read
from columns the graph keeps as its ops are created (:class:`core.graph.OpColumns`, so
even a first call on a fresh graph walks no op objects) and kept with the graph until
it changes (``Graph.cached_view``), so the same graph under other placements reuses it;
and the trace's records are made on first access (:meth:`Trace.lazy`).  The run notes
only the order of ends and allocations (an int each); the memory records are worked out
from it afterwards (:func:`sim.memory.memory_records`), and bytes in use are counted
during the run only when some device could run out (else no allocation can exceed its
capacity).

Rules of the model (the semantics page, "Parallel execution", "GPU memory", "Clusters
of servers"):

- Only the ops the fetches need run.  An op is ready when every data and control input
  has finished and every input from another device has arrived.
- A ready op waits for a thread of its device's inter-op pool (``(ready time,
  topological index)`` order).  A CPU op then also needs its host's cores (shared by all
  tasks on the host; see :mod:`sim.pools`); GPU kernels hold no host core.  Its time is
  ``cost_model.op_time(op, device)``, longer when a multithreaded CPU kernel got fewer
  cores than its intra-op pool (Amdahl's law), and when the CPU kernels running at once
  on its host ask more of its memory than it serves (``Host.shared_bandwidth``; the
  part of the time that moves memory, ``cost_model.memory_traffic``, stretches:
  :class:`sim.pools.HostMemory`).
- A data edge between devices is one transfer per (tensor, destination device), sent
  when the producer ends (with serial dispatch, once its task's dispatcher sent it),
  over the links of ``cluster.route`` (see :mod:`sim.links`).
- With ``RuntimeModel.crossing_cores`` a transfer over links that measured
  ``Link.busy_cores`` (two tasks of one host) also holds that many of its host's cores
  (fewer if fewer are free) while on its links, queued with the kernels for them:
  the runtime's threads copy the tensor at both ends, and kernels and crossings take
  turns on the cores (:mod:`sim.crossing_cores`); a control edge's message
  over such a route holds them for the latency less the links' ``wait``, after that
  wait.
- Memory: :mod:`sim.memory`.
- Fixed costs of a distributed step (:func:`step_start_times`): no op of a task starts
  before that task's part of the step started (the client's call to the master, then
  the master's calls to the other tasks, from the tasks' ``step_overhead`` and
  ``part_overhead``; zero unless calibrated); with ``RuntimeModel.parts_together``
  every part starts once the master has made all its calls.
- A control edge between tasks is a message, as in the runtime (its ``^op``
  announcement): one per (op, destination device), arriving after the route's latency
  (:meth:`_Simulation._setup_control_crossings`); with serial dispatch the latency is
  work of each end's dispatcher, half each, as for a transfer (``RuntimeModel.
  serial_dispatch``).
- With ``RuntimeModel.serial_dispatch`` each task's dispatcher serves one op's first part
  (and each end of a crossing) at a time (with ``RuntimeModel.dispatch_cores``, on a core of
  its host booked in :class:`sim.pools.DispatchCalendar`, where the host's running
  kernels hold theirs); with ``RuntimeModel.inline_elements`` too, the
  thread that finished an op goes on with the ops it made ready on its device (cheap
  ones and one other, the last made ready first, :meth:`_Simulation.inline_ops`),
  taking the freed cores first; the ops waiting for cores take what it leaves (their
  dispatch waits for the interpreter lock, which it gives up for its kernel).  The
  ops ready at a part's start: the others queue for the pool, one thread (the step's
  caller) runs the cheap ones, queueing the big ops they make ready.  With
  ``RuntimeModel.copies_on_cores`` a crossing within a host is its ends' dispatcher
  work (the cores copy the bytes): for its whole time, or with the link's measured
  ``cpu_costs`` for its CPU part (:meth:`core.runtime_model.RuntimeModel.
  crossing_work`); with ``RuntimeModel.step_costs_on_cores`` the step's fixed costs
  are dispatcher work too (:meth:`_Simulation.step_cost_work`): on a busy host parts
  start later.
- Ties: events at one instant are handled in the order they were scheduled (SimPy's
  rule); inside one event, freed resources are handed out before newly ready ops queue,
  and newly ready ops queue in topological order.  Same input, same trace.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from heapq import heappop

import numpy as np
import simpy
from simpy.core import EmptySchedule

from core.costs import CostModel, StaticCostModel
from core.costs import tensor_bytes as _tensor_bytes
from core.dataflow import StepPlan
from core.step_ops import unique_below
from core.graph import Tensor
from core.runtime_model import forwarded_reads
from core.trace import OOMEvent, Trace
from sim.config import SimConfig
from sim.crossing_cores import control_cores, transfer_cores
from sim.durations import (checked_time, memory_traffic, op_durations, same_signature,
                           splitting, transfer_durations)
from sim.errors import OutOfMemory, SimulationStalled, UnknownPlacedDevice
from sim.handlers import RunState, make_handlers
from sim.links import link_successors, static_transfer_order
from sim.memory import TrackedLog, device_capacity
from sim.pools import (DispatchCalendar, HostCores, HostMemory, InterOpPool, rescale_speedup,
                       slowdown_table)
from sim.trace_columns import TraceColumns, without_gc
from sim.warm_kernels import warm_savings

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
    # (the collector paused for the setup too: it allocates the run's columns)
    return without_gc(lambda: _Simulation(graph, placement, cluster, fetches,
                                          cost_model or StaticCostModel(),
                                          config or SimConfig()).run())()


def step_start_times(cluster, devices, together: bool = False) -> list[float]:
    """When each device's task starts its part of the step (seconds after the client
    asked), from the tasks' fixed costs (:class:`core.cluster.Task`): the master pays its
    ``step_overhead`` first, then starts the parts of the other involved tasks one after
    another (each remote task ``k`` in ``(job, index)`` order pays its ``part_overhead``,
    and starts when its call is made), then runs its own part.  ``together``
    (``RuntimeModel.parts_together``): every part starts when the last call is made.
    All zero on clusters without these figures.

    >>> from core.cluster import Cluster
    >>> step_start_times(Cluster.single_host(), Cluster.single_host().devices)
    [0.0]
    """
    involved = sorted({(dev.job, dev.task) for dev in devices})
    master = cluster.task(*cluster.master)
    t = master.step_overhead
    start: dict[tuple, float] = {}
    for key in involved:
        if key == cluster.master:
            continue
        t += cluster.task(*key).part_overhead
        start[key] = t
    start[cluster.master] = t  # the master's own part runs after it called the others
    if together:
        return [float(t)] * len(devices)
    return [float(start[(dev.job, dev.task)]) for dev in devices]


def _resolve_fetches(graph, fetches):
    if fetches is None:
        return None
    items = fetches if isinstance(fetches, (list, tuple, set, frozenset)) else [fetches]
    out = []
    for f in items:
        element = graph.as_graph_element(f)
        out.append(element)
    return out


class _Environment(simpy.Environment):
    """The run's SimPy environment, whose events are the run's own: an op's or a
    transfer's end (and the rarer kinds: a task's part starting, a control message, a
    dispatcher's work), each pushed straight on the heap as ``(time, id, handler,
    value)``: SimPy's own key ``(time, priority, id)`` less the priority, which would
    be NORMAL for every event here, with the environment's id counter, so that ties
    keep SimPy's order (the ids differ, so the handlers are never compared; a
    constant in every entry was one more item to build, unpack and compare per
    event).  ``step``, SimPy's extension point (as ``simpy.rt.RealtimeEnvironment``
    overrides it), pops the next one, sets the clock and calls ``handler(value)``;
    ``run`` does the same in its own loop (SimPy's calls ``step`` once per event: a
    Python call per end, 3% of simulate()'s instructions).  As SimPy events cannot be
    scheduled here, neither can ``until``.

    (SimPy's own step runs an event object's list of callbacks and checks that it did
    not fail, which an end never does; a ``Timeout`` per end also costs an
    ``Event.__init__``, a delay check and ``env.schedule``.  Even light event objects
    with a shared callback list, made, iterated and freed per end, were a tenth of
    simulate()'s instructions.)
    """

    def step(self) -> None:
        try:
            self._now, _, handler, value = heappop(self._queue)
        except IndexError:
            raise EmptySchedule from None
        handler(value)

    def run(self, until=None) -> None:
        """Handle the events until none is left (``step``, written out)."""
        if until is not None:
            raise ValueError("the simulator's environment runs until no event is left")
        queue = self._queue
        # (`while True`, not `while queue`: CPython 3.11 specializes a function's
        # bytecode once it was called or looped back by an unconditional jump a few
        # times; run is called once, and a `while queue` loop jumps back
        # conditionally, so its body would run unspecialized: 8% more instructions.)
        while True:
            if not queue:
                return
            self._now, _, handler, value = heappop(queue)
            handler(value)


class _Simulation:
    def __init__(self, graph, placement, cluster, fetches, cost_model, config):
        self.graph, self.cluster, self.cost_model, self.config = graph, cluster, cost_model, config
        # The runtime predicted: the config's, else the one the cluster was calibrated for.
        self.runtime = config.runtime if config.runtime is not None else cluster.runtime_model
        fetch_list = _resolve_fetches(graph, fetches)
        self.plan = StepPlan.build(graph.get_operations(), placement, fetch_list,
                                   tensor_bytes=_tensor_bytes_of(cost_model))
        self.fetch_ops = ([f.op if isinstance(f, Tensor) else f for f in fetch_list]
                          if fetch_list is not None else [])
        self._setup_devices()
        self._setup_durations()
        self._setup_transfers()
        self._setup_control_crossings()

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
        self.slowdown = [slowdown_table(dev.intra_op_speedup, dev.intra_op_threads)
                         for dev in devices]
        self.capacity = [device_capacity(dev, config) for dev in devices]
        self.start_at = step_start_times(cluster, devices, self.runtime.parts_together)
        tasks = {}
        self.task_of = [tasks.setdefault((dev.job, dev.task), len(tasks)) for dev in devices]
        self.task_keys = list(tasks)

    def _setup_durations(self):
        plan, cost_model = self.plan, self.cost_model
        # The ops' signatures, worked out once for the figures computed per signature
        # (with shape hints, or another cost model, each op is its own).
        self.same = same = (same_signature(plan) if type(cost_model) is StaticCostModel
                            and cost_model.shape_hints is None else None)
        self.durations = op_durations(plan, self.devices, cost_model, same)
        # The cores each op asks for: none for a GPU op, one for a CPU op, the
        # intra-op pool for a CPU kernel that splits its work (OpDef.splits).
        on_cpu = np.array([dev.is_cpu for dev in self.devices], dtype=bool)
        pool = np.array([dev.intra_op_threads for dev in self.devices], dtype=np.int64)
        device = plan.array("op_device")
        self.want_cores = np.where(splitting(plan, self.devices, cost_model, same), pool[device],
                                   on_cpu[device]).tolist()
        if self.runtime.serial_dispatch:
            # A serial dispatcher serves a variable and its forwarded read itself: no
            # kernel, no core (its work is the dispatcher's).
            forwarded = self.forwarded
            for i, op in enumerate(plan.ops):
                if op.type == "Variable" or op.name in forwarded:
                    self.want_cores[i] = 0
        # The CPU kernels of a host whose memory bandwidth they share (Host.shared_bandwidth):
        # what each moves, to slow those that run at once (sim.pools.HostMemory).
        memories: dict[str, HostMemory] = {}
        self.memory_of = [memories.setdefault(dev.host, HostMemory(curve))
                          if dev.is_cpu and (curve := self.cluster.host(dev.host).shared_bandwidth)
                          else None for dev in self.devices]
        self.traffic = (memory_traffic(plan, self.devices, cost_model, self.memory_of, same)
                        if memories else None)
        if self.traffic is None:  # no kernel moves memory there: nothing to share
            self.memory_of = None
        self._with_copies()
        # Device.warm_kernel_costs: a kernel right after others of its type costs less
        # (the step's forwarded reads are looked for only then: a pass over every op)
        self.warm_saving = (warm_savings(plan, self.devices, self.forwarded)
                            if any(d.warm_kernel_costs for d in self.devices) else None)
        self.one_core = self._one_core_durations()
        if self.warm_saving is not None:
            # (never below nothing: a kernel on its parallel path has its own fixed cost)
            self.durations = [max(0.0, t - saved)
                              for t, saved in zip(self.durations, self.warm_saving)]
            for i, t in self.one_core.items():
                self.one_core[i] = max(0.0, t - self.warm_saving[i])
        # Bytes each op allocates when it starts: its outputs' buffers, summed per op
        # with a cumulative sum over the flat per-op lists.
        ptr, outs = plan.array("csr_op_outputs")
        sizes = plan.array("buffer_bytes")[outs]
        total = np.concatenate([[0], np.cumsum(sizes)])
        self.op_alloc_array = total[ptr[1:]] - total[ptr[:-1]]
        # Whether some device could run out of memory: only then does the run keep
        # each device's bytes in use (to check each allocation against the capacity);
        # else everything the step ever allocates fits at once, and the memory records
        # are worked out after the run from the order of events (sim.memory).
        nbytes = plan.array("buffer_bytes")
        most = np.zeros(len(self.devices), np.int64)
        np.add.at(most, plan.array("op_device"), self.op_alloc_array)
        np.add.at(most, plan.array("transfer_dst"), nbytes[plan.n_tensors:])
        resident = np.asarray(plan.resident, dtype=np.int64)
        np.add.at(most, plan.array("buffer_device")[resident], nbytes[resident])
        self.track_memory = bool((most > np.array(self.capacity, dtype=np.int64)).any())

    def step_cost_work(self) -> list[tuple[float, float]]:
        """RuntimeModel.step_costs_on_cores: per task, ``(earliest, work)``, the work its
        dispatcher does for the step's fixed costs (:func:`step_start_times`): the
        master's from time 0 until its part starts (the client's call, its own
        overhead, its calls to the others), each other task's during its
        ``part_overhead`` before its part starts (taking the call)."""
        start = {}
        for d, t in enumerate(self.task_of):
            start[t] = self.start_at[d]
        out = []
        for t, key in enumerate(self.task_keys):
            if key == tuple(self.cluster.master):
                out.append((0.0, start[t]))
            else:
                work = self.cluster.task(*key).part_overhead
                out.append((start[t] - work, work))
        return out

    def dispatch_calendars(self) -> list:
        """Per task, its host's :class:`sim.pools.DispatchCalendar` (one per host, sized
        by the host's CPU cores; RuntimeModel.dispatch_cores)."""
        calendars: dict[str, DispatchCalendar] = {}
        out = [None] * (max(self.task_of) + 1 if self.task_of else 0)
        for dev, t in zip(self.devices, self.task_of):
            if out[t] is None:
                out[t] = calendars.get(dev.host)
                if out[t] is None:
                    cores = self.cluster.host(dev.host).cpu_cores
                    out[t] = calendars[dev.host] = DispatchCalendar(cores)
        return out

    def serial_parts(self) -> list[float]:
        """Per op, the part its task's dispatcher serves alone (``SimConfig.
        serial_dispatch``): the device's ``op_overhead`` and the fixed cost of the op's
        kernel type (``Device.kernel_cost``), less what it saves running warm
        (:mod:`sim.warm_kernels`)."""
        types = self.plan.op_types
        fixed = [{} if dev.kernel_costs else None for dev in self.devices]
        parts = []
        for i, d in enumerate(self.plan.op_device):
            part = self.devices[d].op_overhead
            table = fixed[d]
            if table is not None:
                cost = table.get(types[i])
                if cost is None:
                    cost = table[types[i]] = self.devices[d].kernel_cost(types[i])[0]
                part += cost
            parts.append(min(part, 1e300))
        if self.warm_saving is not None:
            parts = [part - saved for part, saved in zip(parts, self.warm_saving)]
        return parts

    def _one_core_durations(self) -> dict[int, float]:
        """Per op that asks for more than one core, its time when it gets only one:
        the cost model's time for it on its device with one intra-op thread (its kernel
        does not split: no ``"<type>|parallel"`` fixed cost, no speed-up).  Its time on
        the pool times the speed-up would count the split's wake-up as work
        (docs/architecture.md, the split rule)."""
        plan, cost_model, want = self.plan, self.cost_model, self.want_cores
        alone = {d: replace(dev, intra_op_threads=1) for d, dev in enumerate(self.devices)
                 if dev.is_cpu and dev.intra_op_threads > 1}
        same = self.same
        times: dict[int, float] = {}
        first: dict[int, float] = {}
        for i in np.flatnonzero(np.asarray(want) > 1).tolist():
            key = int(same[i]) if same is not None else -1 - i
            if key not in first:
                d = plan.op_device[i]
                first[key] = checked_time(plan.ops[i], alone[d], cost_model.op_time)
            times[i] = first[key]
        return times

    @functools.cached_property
    def forwarded(self) -> set[str]:
        """The step's variable reads that hand the variable's buffer on
        (:func:`core.runtime_model.forwarded_reads`): the ops the executor runs without
        a kernel, which the cheap-op rule and the copying rule both leave out."""
        return forwarded_reads(self.plan.ops)

    def _with_copies(self):
        """RuntimeModel.copies_forwarding_ops: the ops whose kernels copy their input
        where TensorFlow's hand its buffer on (RuntimeModel.copying_ops) take the copy's
        time (CostModel.copy_time) and, where their host's kernels share its memory,
        move its bytes."""
        if not self.runtime.copies_forwarding_ops:  # (first: self.forwarded walks every op)
            return
        copying = self.runtime.copying_ops(self.plan.ops, self.forwarded)
        if not copying:
            return
        plan, cost_model, durations = self.plan, self.cost_model, self.durations
        for i, op in enumerate(plan.ops):
            if op.name not in copying:
                continue
            d = plan.op_device[i]
            durations[i] = checked_time(op, self.devices[d], cost_model.copy_time)
            if self.memory_of is not None and self.memory_of[d] is not None:
                nbytes, seconds = cost_model.copy_traffic(op, self.devices[d])
                self.traffic[0][i], self.traffic[1][i] = nbytes, seconds

    def inline_ops(self) -> list[bool]:
        """Per op, whether the runtime's executor counts it cheap
        (:meth:`core.runtime_model.RuntimeModel.is_cheap`, the executor's own rule, and
        :func:`core.runtime_model.forwarded_reads`: a variable's read that hands its
        buffer on does no kernel work, whatever its size)."""
        cpu = [dev.is_cpu for dev in self.devices]
        is_cheap = self.runtime.is_cheap
        forwarded = self.forwarded
        return [op.name in forwarded
                or is_cheap(op.type, [t.shape for t in (*op.inputs, *op.outputs)], cpu[d])
                for op, d in zip(self.plan.ops, self.plan.op_device)]

    def _setup_transfers(self):
        plan, cluster = self.plan, self.cluster
        m, n_dev = plan.n_transfers, len(plan.devices)
        # Routes per distinct (source, destination) pair, in transfer order (numpy finds
        # the pairs; cluster.route is called once per pair).
        pair_key = plan.array("transfer_src") * n_dev + plan.array("transfer_dst")
        keys, first, pair_of = unique_below(pair_key, n_dev * n_dev)
        routes: dict[tuple[int, int], tuple] = {}       # (src, dst) -> links
        route_ids: list[tuple[int, ...]] = [()] * len(keys)  # pair -> link indices
        link_index: dict[str, int] = {}
        self.link_names: list[str] = []
        for p in np.argsort(first, kind="stable").tolist():  # links numbered as met
            pair = divmod(int(keys[p]), n_dev)
            links = routes[pair] = cluster.route(self.device_names[pair[0]],
                                                 self.device_names[pair[1]])
            for link in links:
                if link.name not in link_index:
                    link_index[link.name] = len(self.link_names)
                    self.link_names.append(link.name)
            route_ids[p] = tuple(link_index[link.name] for link in links)
        # Each transfer's route is route_ids[pair_of[k]] (a list of them is made only
        # where needed: the "ready" link order, the trace's records).
        self.route_ids, self.pair_of = route_ids, pair_of = route_ids, pair_of.reshape(-1)
        self.transfer_durations = transfer_durations(plan, routes, self.cost_model)
        if self.runtime.serial_dispatch:
            # Sending and taking a tensor is Python work on both tasks, under their GIL:
            # the sender's dispatcher does transfer_cpu of it, the receiver's
            # take_work, or take_burst after another (RuntimeModel.crossing_work); the
            # links carry the rest, so crossings pipeline on them.
            self.transfer_cpu, self.take_work, self.take_burst = self._crossing_work(
                routes, keys, pair_of)
            self.transfer_durations = [max(0.0, t - (sent + taken)) for t, sent, taken in
                                       zip(self.transfer_durations, self.transfer_cpu,
                                           self.take_work)]
            self.transfer_wait = None
        else:
            self.transfer_wait = self._latency_waits(routes, keys, pair_of)
        self.crossing_cores = transfer_cores(self, routes, keys, pair_of)
        self.static = self.config.link_order == "static"
        n_links = len(self.link_names)
        # The static order (see sim.links): what each transfer waits for before it
        # starts (being sent, and each link of its route offering itself), and the
        # transfer each link offers itself to after it.  Links start free, offering
        # themselves to the first transfer of their queue.  Most routes have one or two
        # links: their successors are two plain lists (m: none, a transfer whose count
        # never reaches zero), read without a slice per transfer; a longer route is
        # marked -1 in the first and read from the flat form (None when there is none).
        self.need = [1] * m
        self.next_first = self.next_second = self.next_ptr = self.next_on_links = None
        if self.static and m:
            first, ptr, flat = link_successors(static_transfer_order(plan, self.durations),
                                               route_ids, pair_of)
            length = np.diff(ptr)
            padded = np.append(flat, [m, m])  # (reads past the end of a short route's part)
            at = ptr[:-1]
            self.next_first = np.where(length > 2, -1,
                                       np.where(length > 0, padded[at], m)).tolist()
            self.next_second = np.where(length == 2, padded[at + 1], m).tolist()
            if (length > 2).any():
                self.next_ptr, self.next_on_links = ptr.tolist(), flat.tolist()
            self.need = need = (length + 1).tolist()
            for k in first.tolist():
                need[k] -= 1

    def _setup_control_crossings(self):
        """Control edges between tasks: taken out of the successor lists
        (``self.succ``) into ``self.control_crossings``, op -> ``[(latency, sent, taken,
        taken_in_burst, destination task, successors)]``, one entry per destination
        device (None when there are none: the plan's own lists are used; with serial
        dispatch, the ends' work for a message of no bytes,
        :meth:`core.runtime_model.RuntimeModel.crossing_work`);
        ``self.succ_count``: how many successors each op keeps (an array)."""
        plan = self.plan
        self.succ = None
        self.control_crossings = None
        ptr, succ = plan.array("csr_op_succ")
        self.succ_count = np.diff(ptr)
        if len(set(self.task_of)) < 2:
            return
        src = np.repeat(np.arange(plan.n_ops), np.diff(ptr))
        op_task = np.asarray(self.task_of, np.int64)[plan.array("op_device")]
        cross = op_task[src] != op_task[succ]
        if not cross.any():
            return
        keep = ~cross
        self.succ_count = counts = np.bincount(src[keep], minlength=plan.n_ops)
        self.succ = (np.concatenate([[0], np.cumsum(counts)]).tolist(), succ[keep].tolist())
        op_device, names = plan.op_device, self.device_names
        costs: dict[tuple[int, int], tuple] = {}  # (latency, sent, taken, burst) per pair
        by_message: dict[tuple[int, int], list] = {}
        for i, j in zip(src[cross].tolist(), succ[cross].tolist()):
            by_message.setdefault((i, op_device[j]), []).append(j)
        crossings: dict[int, list] = {}
        for (i, d), js in by_message.items():
            pair = (op_device[i], d)
            if pair not in costs:
                links = self.cluster.route(names[pair[0]], names[d])
                latency = float(sum(link.latency for link in links))
                costs[pair] = (latency, *(self.runtime.crossing_work(links, 0, latency)
                                          if self.runtime.serial_dispatch else (0.0,) * 3))
            crossings.setdefault(i, []).append((*costs[pair], self.task_of[d], js))
        self.control_crossings = crossings

    # -- running ----------------------------------------------------------------------------
    def run(self) -> Trace:
        """Run the step on a fresh SimPy environment; return its trace.

        The event handlers (:mod:`sim.handlers`) share the state :meth:`_run_state`
        sets up.  Memory is an int appended per end and per allocation (a record tuple
        per change and the reference counts were a fifth of the run); bytes in use are
        kept only when a device could run out (:class:`sim.memory.TrackedLog`).
        """
        r = self._run_state()
        make_handlers(self, r)
        plan, n, m, log = self.plan, r.n, r.m, self.log
        try:
            # Resident state (variables) exists before the step starts.
            all_bytes = plan.array("buffer_bytes")
            for b in plan.resident:
                if all_bytes[b]:
                    r.log.append(~(r.n_made + b))  # (the run's log: tracked, if it is)
            # A step that ran to its end notes each op's and transfer's end and each
            # allocation once (an op's or a received copy's with bytes): so the log's
            # length tells whether it stalled (a scan of op_end for None, comparing
            # each float with None, took 20 ms at 100k ops).
            complete_log = (len(log) + n + m + int(np.count_nonzero(self.op_alloc_array))
                            + int(np.count_nonzero(all_bytes[r.n_tensors:])))
            initial = np.flatnonzero(plan.array("initial_pending") == 0).tolist()
            if r.cheap is None:
                for i in initial:
                    r.ready(i)
            else:
                by_device: dict[int, list] = {}
                for i in initial:
                    by_device.setdefault(r.op_device[i], []).append(i)
                for ops in by_device.values():
                    r.begin_on_device(ops)
            r.env.run()
        except OutOfMemory as e:
            e.trace = self._trace(stopped=True)
            raise
        if len(log) != complete_log:
            raise SimulationStalled([plan.op_names[i] for i in range(n) if r.op_end[i] is None])
        return self._trace()

    def _run_state(self) -> RunState:
        """The state one run's handlers share (:class:`sim.handlers.RunState`): the
        records it fills, the counters, the plan's lists, the resources."""
        plan, runtime = self.plan, self.runtime
        r = RunState()
        self.env = r.env = _Environment()
        # (ids by next(ids): calling the bound __next__, a method-wrapper, cost a third more)
        r.queue, r.ids = r.env._queue, r.env._eid
        r.n, r.m, r.n_tensors = n, m, n_tensors = plan.n_ops, plan.n_transfers, plan.n_tensors
        r.n_made = n + m  # log code of allocation ~(n_made + b): resident buffer b

        # What the run records (the trace's columns).
        self.op_start = r.op_start = [None] * n
        self.op_end = r.op_end = [None] * n
        self.op_thread = r.op_thread = [0] * n
        self.op_cores = r.op_cores = [0] * n
        self.x_start = r.x_start = [None] * m  # (a transfer's end is worked out: TraceColumns)
        # Ends and allocations in the order they happen, for the memory records
        # (sim.memory.memory_records): an int append each, where a record was a tuple.
        # (Called as log.append: the interpreter specializes that call, not one of the
        # bound method kept in a variable, ~1% of the run.)  When some device could run
        # out, the handlers note through a sim.memory.TrackedLog, which also keeps the
        # bytes in use and checks each allocation; else no allocation can exceed its
        # device's capacity.
        self.oom_events = []
        self.in_use = [0] * len(self.devices)
        self.log = r.log = []
        if self.track_memory:
            r.log = TrackedLog(self.log, plan, self.op_alloc_array, self.in_use, self.capacity,
                               self._out_of_memory)

        # StepState's counters (see core.dataflow), driven inline.  (Plan columns are
        # read only where needed, as a plan makes each list on first use.)
        r.pending = plan.array("initial_pending").tolist()
        r.succ_ptr, r.succ = self.succ or plan.csr_op_succ  # less control crossings
        # (most ops' successors are on other devices: a flag per op tells which have
        # some, where comparing two of succ_ptr was a few lines more per op end)
        r.has_succ = (self.succ_count > 0).tolist()
        r.sole_consumer, r.consumer_ptr, r.consumers = _sole(*plan.array("csr_transfer_consumers"))
        r.op_device = plan.op_device
        serial = r.serial = runtime.serial_dispatch
        r.transfer_dst = plan.transfer_dst if serial else None
        r.transfer_src = plan.transfer_src if serial else None
        all_bytes = plan.array("buffer_bytes")
        # The log codes of allocations, made once (0: no bytes): per op, of its
        # outputs; per transfer, of its received copy.
        r.op_note = np.where(self.op_alloc_array > 0, ~np.arange(n), 0).tolist()
        r.recv_note = np.where(all_bytes[n_tensors:] > 0, ~(n + np.arange(m)), 0).tolist()

        # Resources.
        r.durations, r.want_cores = self.durations, self.want_cores
        r.memory_of = self.memory_of
        r.moved, r.moving = self.traffic or (None, None)
        r.slowdown, r.one_core, r.host_of = self.slowdown, self.one_core, self.host_of
        r.pool_free = [pool.free for pool in self.pools]
        r.pool_waiting = [pool.waiting for pool in self.pools]
        r.transfer_time = self.transfer_durations
        r.static = static = self.static
        r.next_first, r.next_second = self.next_first, self.next_second
        r.next_ptr, r.next_on_links = self.next_ptr, self.next_on_links
        # the static link order's countdowns (the last entry: "no next transfer")
        r.need = list(self.need) + [1 << 60] if static else None
        r.start_at = self.start_at
        r.late = any(self.start_at)  # some task's part of the step starts after time 0
        self._dispatch_state(r)
        # Each op's sends (see _sole): one per op, straight; all of them, the flat form.
        r.transfer_wait = self.transfer_wait
        r.counted_down = static and not serial and self.transfer_wait is None
        if r.counted_down:
            r.sole_send, r.send_ptr, r.sends = _sole(*plan.array("csr_op_sends"), none=m)
        else:
            r.sole_send, (r.send_ptr, r.sends) = None, plan.csr_op_sends
        # RuntimeModel.crossing_cores: transfers that hold host cores queue with the
        # kernels for them, as index n + k in the hosts' waiting heaps and want_cores;
        # so do the control messages that hold them (send_held in sim.handlers).
        r.crossing_cores = cores = self.crossing_cores
        r.control_crossings, r.control_cores = control_cores(self)
        if cores is not None or r.control_cores is not None:
            r.crossing_cores = cores or [0] * m
            r.crossing_host = [self.host_of[d] for d in plan.transfer_dst]
            r.want_cores = list(r.want_cores) + r.crossing_cores
        return r

    def _crossing_work(self, routes, keys, pair_of) -> tuple[list, list, list | None]:
        """Serial dispatch: per transfer, the work of the sender's dispatcher, of the
        receiver's when it comes alone and when it comes in a burst (None when every
        transfer's is as alone), by :meth:`core.runtime_model.RuntimeModel.
        crossing_work`, once per distinct (route, bytes, time)."""
        n_dev, plan = len(self.device_names), self.plan
        nbytes = plan.array("tensor_bytes")[plan.array("transfer_tensor")].tolist()
        crossing_work = self.runtime.crossing_work
        known: dict = {}
        sent, taken, burst = [], [], []
        for p, size, seconds in zip(pair_of.tolist(), nbytes, self.transfer_durations):
            case = (p, size, seconds)
            parts = known.get(case)
            if parts is None:
                links = routes[divmod(int(keys[p]), n_dev)]
                parts = known[case] = crossing_work(links, size, seconds)
            sent.append(parts[0])
            taken.append(parts[1])
            burst.append(parts[2])
        return sent, taken, (None if burst == taken else burst)

    def _latency_waits(self, routes, keys, pair_of) -> list | None:
        """Without serial dispatch: each transfer's wait before it takes its links, the
        sum of its route's links' ``wait`` (:class:`core.cluster.Link`: the part of
        their latency that holds no link), taken off its time on them; None when no
        route has one (then transfers take their links as soon as they are sent).

        Why: a runtime with many threads has many crossings in flight at once, each
        holding the host's CPU for its own work only (on TensorFlow's servers, 32 tiny
        tensors crossing at once added to a step a fifth of what 32 crossings one after
        another would, about the servers' CPU time per crossing over the host's cores:
        ``docs/probes/tf_crossings_probe.py``)."""
        n_dev = len(self.device_names)
        waits = np.array([sum(link.wait for link in routes[divmod(int(keys[p]), n_dev)])
                          for p in range(len(keys))])
        if not len(pair_of) or not waits.any():
            return None
        wait = waits[pair_of]
        self.transfer_durations = np.maximum(
            0.0, np.asarray(self.transfer_durations) - wait).tolist()
        return wait.tolist()

    def _dispatch_state(self, r: RunState) -> None:
        """The serial dispatchers' part of the run's state: when each task's is free,
        the host CPU each task's work takes, the cores' calendars, the step's fixed
        work, and the cheap ops each thread runs itself next."""
        runtime, serial = self.runtime, r.serial
        r.task_of = task_of = self.task_of
        r.serial_part = self.serial_parts() if serial else None
        r.dispatch_free = dispatch_free = [0.0] * (max(task_of) + 1 if task_of else 0)
        # The host CPU each task's work takes (serial dispatch): its dispatcher's work
        # and its CPU kernels' core-seconds (Trace.meta["cpu_booked"]).
        self.cpu_booked = r.booked = booked = [0.0] * len(dispatch_free)
        r.calendar_of = calendar_of = (self.dispatch_calendars()
                                       if serial and runtime.dispatch_cores else None)
        if serial and runtime.step_costs_on_cores:
            for t, (earliest, work) in enumerate(self.step_cost_work()):
                begin = calendar_of[t].book(earliest, 0.0, work) if calendar_of and work \
                    else earliest
                dispatch_free[t] = begin + work
                booked[t] += work
        r.transfer_cpu = self.transfer_cpu if serial else None
        r.take_work = self.take_work if serial else None
        r.take_burst = self.take_burst if serial else None
        # Task.lock_wakeup: how late a thread waiting for its interpreter's lock gets it
        # once it is given up (None where no task's is known: at once, first come first
        # served).
        wakeups = [self.cluster.task(*key).lock_wakeup for key in self.task_keys]
        r.lock_wakeup = wakeups if serial and any(wakeups) else None
        # RuntimeModel.inline_elements: the ops each thread (device, slot) runs itself next.
        r.cheap = self.inline_ops() if serial and runtime.inline_elements is not None else None
        r.stacks = ([[[] for _ in range(pool.threads)] for pool in self.pools]
                    if r.cheap else None)
        # The (device, slot)s of a step's caller thread running the device's first cheap
        # ops: it queues the big ops they make ready (begin_on_device).
        r.cheap_only = set()

    def _out_of_memory(self, d, nbytes, op, tensor):
        plan, now = self.plan, self.env._now
        event = OOMEvent(now, self.device_names[d], plan.op_names[op],
                         None if tensor is None else plan.tensor_name(tensor), nbytes,
                         self.in_use[d], self.capacity[d])
        self.oom_events.append(event)
        if not self.config.record_oom:
            raise OutOfMemory(event.op, event.device, nbytes, event.capacity, event.in_use, now,
                              event.tensor)

    def _transfer_ends_so_far(self) -> list:
        """Each transfer's end (None: not ended) in a run that stopped early: those
        whose end the log notes."""
        n, m = self.plan.n_ops, self.plan.n_transfers
        x_end = [None] * m
        for code in self.log:
            if n <= code < n + m:
                k = code - n
                x_end[k] = self.x_start[k] + self.transfer_durations[k]
        return x_end

    # -- the trace ----------------------------------------------------------------------------------
    def _trace(self, stopped: bool = False) -> Trace:
        """The trace, its records made on first access (:meth:`Trace.lazy`) from the
        columns the run filled.  ``stopped``: the run stopped before its end (out of
        memory), with transfers still under way."""
        plan, names = self.plan, self.device_names
        fetch_end = {}
        for op in self.fetch_ops:
            i = plan.op_index[op.name]
            if self.op_end[i] is not None:
                fetch_end[op.name] = self.op_end[i]
        x_end = self._transfer_ends_so_far() if stopped else None
        records = TraceColumns(plan, names, self.link_names, self.route_ids, self.pair_of,
                               self.op_start, self.op_end, self.op_thread, self.op_cores,
                               self.x_start, self.transfer_durations, x_end, self.log,
                               self.op_alloc_array)
        return Trace.lazy({"ops": without_gc(records.ops),
                           "transfers": without_gc(records.transfers),
                           "memory": without_gc(records.memory)},
                          step_time=records.step_time,
                          oom_events=list(self.oom_events),
                          capacity={n: c for n, c in zip(names, self.capacity)},
                          fetch_end=fetch_end,
                          meta=self._meta())

    def _meta(self) -> dict:
        """The trace's ``meta``; with serial dispatch, ``"cpu_booked"``: per task
        (``/job:j/replica:0/task:i``), the seconds of host CPU the model gave its work in
        this step, its dispatcher's (ops' first parts, crossing ends, the step's fixed
        costs with RuntimeModel.step_costs_on_cores) and its CPU kernels' (seconds times
        cores): what the task's process would spend, to check against the CPU time a
        real run's processes used (``experiments.cpu_accounting``)."""
        meta = {"backend": "sim", "cost_model": type(self.cost_model).__name__,
                "link_order": self.config.link_order, "runtime_model": self.runtime.name}
        if self.runtime.serial_dispatch:
            meta["cpu_booked"] = {self.cluster.task(*key).name: seconds
                                  for key, seconds in zip(self.task_keys, self.cpu_booked)}
        return meta


def _sole(ptr: np.ndarray, flat: np.ndarray, none: int | None = None) -> tuple[list, list, list]:
    """A flat (CSR) form of lists, ``flat[ptr[r]:ptr[r + 1]]`` for row ``r`` (the
    consumers of each transfer, the sends of each op), as the run reads it: per row, its
    item when it has one only (most rows: no slice to make), ``none`` for an empty row
    when given, else ``~p``, where ``more[more_ptr[p]:more_ptr[p + 1]]`` lists its items;
    returns ``(per row, more_ptr, more)``.  (Lists of only the rows with several items:
    the plan's flat form as lists was ~300k ints to make at 100k ops.)

    >>> _sole(np.array([0, 1, 1, 3]), np.array([7, 8, 9]), none=-9)
    ([7, -9, -1], [0, 2], [8, 9])
    """
    count = np.diff(ptr)
    several = np.flatnonzero(count > 1 if none is not None else count != 1)
    code = flat[np.minimum(ptr[:-1], len(flat) - 1)] if len(flat) else np.zeros(len(count), np.int64)
    if none is not None:
        code[count == 0] = none
    code[several] = ~np.arange(len(several))
    lengths = count[several]
    more_ptr = np.zeros(len(several) + 1, np.int64)
    np.cumsum(lengths, out=more_ptr[1:])
    # (the positions of their consumers in the plan's flat form, range by range)
    at = np.repeat(ptr[several] - more_ptr[:-1], lengths) + np.arange(int(more_ptr[-1]))
    return code.tolist(), more_ptr.tolist(), flat[at].tolist()


def _tensor_bytes_of(cost_model: CostModel):
    """The tensor sizer for :meth:`StepPlan.build`: the default function itself when
    the model does not override it (the plan then sizes each distinct (dtype, shape)
    once)."""
    if type(cost_model).tensor_bytes is CostModel.tensor_bytes and cost_model.shape_hints is None:
        return _tensor_bytes
    return cost_model.tensor_bytes
