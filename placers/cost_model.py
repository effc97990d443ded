"""The cost-model placer: greedy earliest-finish placement (TensorFlow whitepaper, 2015,
section 3.2.1).

    Abadi et al., "TensorFlow: Large-Scale Machine Learning on Heterogeneous Distributed
    Systems", 2015, section 3.2.1 "Device Placement".

The placer simulates the run.  From the sources, in the order ops become ready (the time
their last input finished; ties by topological order), it tries every feasible device of
the op's colocation group (kernel, pins, colocation and memory already resolved or checked)
and puts the op where it would *finish* soonest, counting the transfers its inputs would
need (one per tensor and destination device, charged the route's latency and slowest
bandwidth, and holding every link of its route: a link carries one transfer at a time, as
in the simulator, so many small crossings over one slow link queue up), the device's
inter-op threads and, for CPU ops, the host's cores (tasks on one host share them; a
multithreaded kernel holds up to ``intra_op_threads`` cores).  The first op of a
colocation group decides the group's device.

Memory: a device holds its variables for good and every other op's outputs from the op
until its last consumer is placed; a device whose capacity the op's outputs would exceed is
skipped, and an op that fits nowhere raises :class:`core.placement.PlacementError` naming it.

Beyond the whitepaper (ours): greedy list scheduling is myopic (an op goes where it
finishes first, even when that strands its successors behind a transfer), so the placer
also runs the same pass seeded by the graph's name scopes, the parts a person splits a
model by: the heavy layers or towers spread over the devices, each op of one preferring
its part's device (:func:`_scope_seeds`; graphs up to ``scope_candidates`` ops).  And
greedy can lose to putting everything on one device, so it also estimates, with the same
model (:func:`estimate_step_time`), every placement that puts all free groups on one
device.  It returns the best: by its own cost model never worse than one device.
Each estimate also pays the fixed costs of a distributed step (the master's step overhead
and a part overhead per other task involved, :class:`core.cluster.Task`), and among equal
estimates the placement with fewer tasks besides the master's wins.

>>> from experiments.workloads import random_layered_dag
>>> from core.cluster import Cluster
>>> g = random_layered_dag(200, width=8)
>>> p = CostModelPlacer().place(g, Cluster.single_host(gpus=2))
>>> len(p)
200
"""

from __future__ import annotations

import heapq
from typing import Iterable, Sequence

from core.costs import CostModel, StaticCostModel, tensor_bytes
from core.graph import Graph, Operation, Tensor, ops_needed, topological_order
from core.placement import Placement, PlacementError
from core.runtime_model import RuntimeModel, get_runtime_model
from placers.base import BasePlacer, register

__all__ = ["CostModelPlacer", "estimate_step_time"]


class _Model:
    """Integer-indexed view of the ops, devices and costs, shared by the greedy pass and
    the estimates (so both use one model)."""

    def __init__(self, ops: Sequence[Operation], cluster, cost_model: CostModel,
                 runtime: "RuntimeModel | str | None" = None):
        self.ops = list(ops)
        self.cluster = cluster
        self.cost_model = cost_model
        # A duck-typed model (op_time and transfer_time only) sizes tensors the default way.
        self.hints = getattr(cost_model, "shape_hints", None)
        self.tensor_bytes = getattr(cost_model, "tensor_bytes",
                                    lambda t: tensor_bytes(t, self.hints))
        # The runtime estimated for: the one given, else the cluster's (sim.simulate's rule).
        self.runtime = get_runtime_model(runtime if runtime is not None else cluster.runtime_model)
        self.serial_dispatch = self.runtime.serial_dispatch
        self.devices = list(cluster.devices)
        tasks: dict[tuple, int] = {}
        self.device_task = [tasks.setdefault((d.job, d.task), len(tasks)) for d in self.devices]
        self._serial_part: dict = {}
        self.dev_index = {d.name: k for k, d in enumerate(self.devices)}
        index = {op.name: i for i, op in enumerate(self.ops)}
        self.index = index
        n = len(self.ops)
        self.data_inputs: list[list[tuple[int, Tensor]]] = [[] for _ in range(n)]
        self.preds: list[list[int]] = [[] for _ in range(n)]
        self.consumers: list[list[int]] = [[] for _ in range(n)]
        self.out_bytes = [0] * n
        self.persistent = [False] * n
        self.multithreaded = [op.op_def.multithreaded for op in self.ops]
        # Host cores: CPU devices draw on their host's cores; other devices use none.
        cores = {h.name: h.cpu_cores for h in cluster.hosts}
        hosts = sorted({d.host for d in self.devices if d.device_type == "CPU"})
        self.host_cores = [cores[h] for h in hosts]
        self.device_host = [hosts.index(d.host) if d.device_type == "CPU" else -1
                            for d in self.devices]
        for i, op in enumerate(self.ops):
            pred_set = set()
            for t in op.inputs:
                j = index.get(t.op.name)
                if j is not None:
                    self.data_inputs[i].append((j, t))
                    pred_set.add(j)
            for c in op.control_inputs:
                j = index.get(c.name)
                if j is not None:
                    pred_set.add(j)
            self.preds[i] = sorted(pred_set)
            for j in self.preds[i]:
                self.consumers[j].append(i)
            op_def = op.op_def
            self.persistent[i] = op_def.persistent
            if not op_def.ref_inputs:  # assign ops write into the variable: no new memory
                self.out_bytes[i] = sum(self.tensor_bytes(t) for t in op.outputs)
        self._op_time: dict = {}
        # Ops whose kernels copy their input under this runtime (as the simulator times them).
        self.copying = self.runtime.copying_ops(self.ops)
        self._signature: list = [None] * n
        self._transfer: dict = {}
        self._crossing: dict = {}
        self._splits: dict = {}
        self._routes: dict = {}
        self._route_links: dict = {}
        self.link_index: dict[str, int] = {}

    def op_time(self, i: int, k: int) -> float:
        sig = self._signature[i]
        if sig is None:
            # With shape hints, an op's sizes depend on its tensors, not on its static
            # signature alone.
            sig = self._signature[i] = (_signature(self.ops[i]) if self.hints is None
                                        else ("op", i))
        op = self.ops[i]
        copies = op.name in self.copying
        key = (sig, k, copies)
        t = self._op_time.get(key)
        if t is None:
            # (a duck-typed model without copy_time times a copy as the op)
            time_of = getattr(self.cost_model, "copy_time", None) if copies else None
            t = self._op_time[key] = (time_of or self.cost_model.op_time)(op, self.devices[k])
        return t

    def serial_part(self, i: int, k: int) -> float:
        """What op ``i`` holds its task's dispatcher for on device ``k`` (the simulator's
        serial dispatch): the device's ``op_overhead`` and its kernel type's fixed cost."""
        key = (self.ops[i].type, k)
        t = self._serial_part.get(key)
        if t is None:
            dev = self.devices[k]
            t = dev.op_overhead + (dev.kernel_cost(key[0])[0] if dev.kernel_costs else 0.0)
            self._serial_part[key] = t
        return t

    def route(self, src: int, dst: int) -> tuple:
        route = self._routes.get((src, dst))
        if route is None:
            route = self._routes[(src, dst)] = self.cluster.route(self.devices[src].name,
                                                                  self.devices[dst].name)
        return route

    def route_links(self, src: int, dst: int) -> tuple[int, ...]:
        """Indices of the links of the route from device ``src`` to ``dst``."""
        links = self._route_links.get((src, dst))
        if links is None:
            index = self.link_index
            links = self._route_links[(src, dst)] = tuple(
                index.setdefault(link.name, len(index)) for link in self.route(src, dst))
        return links

    def transfer_time(self, nbytes: int, src: int, dst: int) -> float:
        key = (nbytes, src, dst)
        t = self._transfer.get(key)
        if t is None:
            t = self._transfer[key] = self.cost_model.transfer_time(nbytes, self.route(src, dst))
        return t

    def splits(self, i: int, k: int) -> bool:
        """Whether op ``i``'s kernel takes device ``k``'s intra-op pool, as the executor
        and the simulator decide (:meth:`core.opdef.OpDef.splits`: a multithreaded
        kernel on tensors of at least the device's ``parallel_min_elements``)."""
        if not self.multithreaded[i] or self.devices[k].intra_op_threads < 2:
            return False
        key = (i, self.devices[k].parallel_min_elements, self.devices[k].products_split)
        split = self._splits.get(key)
        if split is None:
            op = self.ops[i]
            specs = getattr(self.cost_model, "specs", None)
            if specs is None:  # a cost model of its own: the op type's rule
                split = True
            else:
                split = op.op_def.splits(specs(op.inputs), specs(op.outputs), op.attrs,
                                         key[1], key[2])
            self._splits[key] = split
        return split

    def crossing(self, nbytes: int, src: int, dst: int) -> tuple[float, float, float, float]:
        """``(sent, carried, taken, taken_in_burst)``: a tensor of ``nbytes`` from
        device ``src`` to ``dst`` as the simulator books it: its sender's dispatcher's
        work, the links' time, its receiver's dispatcher's work when it comes alone and
        when it comes in a burst (:meth:`core.runtime_model.RuntimeModel.
        crossing_work`; without serial dispatch the links carry it all)."""
        key = (nbytes, src, dst)
        parts = self._crossing.get(key)
        if parts is None:
            seconds = self.transfer_time(nbytes, src, dst)
            if self.serial_dispatch:
                sent, taken, burst = self.runtime.crossing_work(self.route(src, dst), nbytes,
                                                                seconds)
                parts = (sent, max(0.0, seconds - sent - taken), taken, burst)
            else:
                parts = (0.0, seconds, 0.0, 0.0)
            self._crossing[key] = parts
        return parts

    def schedule(self, choose) -> tuple[list[int], float]:
        """List-schedule the ops in ready order; ``choose(i, start_fn) -> device index``.

        Returns the device of each op and the makespan.
        """
        n = len(self.ops)
        slots = [[0.0] * max(1, d.inter_op_threads) for d in self.devices]
        core_free = [[0.0] * c for c in self.host_cores]
        intra = [max(1, d.intra_op_threads) for d in self.devices]
        finish = [0.0] * n
        device = [-1] * n
        pending = [len(p) for p in self.preds]
        ready_at = [0.0] * n
        arrivals: dict[tuple[int, int], float] = {}
        link_free: dict[int, float] = {}  # link index -> when its last transfer ends
        serial = self.serial_dispatch
        device_task = self.device_task
        dispatch_free = [0.0] * (max(device_task) + 1 if device_task else 0)  # per task
        # Per task, when its dispatcher ends the take-in it is busy with last (-1: its
        # last work was something else): a crossing that arrives before then comes in
        # the same burst, and its reader goes on to it at once (crossing_work).
        taking_in = [-1.0] * len(dispatch_free)
        heap = [(0.0, i) for i in range(n) if pending[i] == 0]
        heapq.heapify(heap)
        makespan = 0.0

        def finish_on(i: int, k: int, commit: bool = False) -> float:
            start = ready_at[i]
            # A trial (commit=False) books its transfers' links in a scratch copy, so
            # that two inputs over one link queue up there too.
            links_now = link_free if commit else None
            # Serial dispatch: the tasks' dispatchers, also in a scratch copy for a trial.
            dispatch = dispatch_free if commit or not serial else list(dispatch_free)
            taking = taking_in if commit or not serial else list(taking_in)
            for j, t in self.data_inputs[i]:
                src = device[j]
                if src == k:
                    continue
                arrival = arrivals.get((id(t), k))
                if arrival is None:
                    if links_now is None:
                        links_now = dict(link_free)
                    route = self.route_links(src, k)
                    begin = finish[j]
                    sent, duration, taken, in_burst = self.crossing(tensor_bytes_cached(t),
                                                                    src, k)
                    if serial:  # the sender's dispatcher sends it, the links carry it
                        sender = device_task[src]
                        begin = dispatch[sender] = max(dispatch[sender], begin) + sent
                        taking[sender] = -1.0
                    for link in route:
                        free = links_now.get(link, 0.0)
                        if free > begin:
                            begin = free
                    arrival = begin + duration
                    for link in route:
                        links_now[link] = arrival
                    if serial:  # then the receiver's takes it in: its consumers wait
                        receiver = device_task[k]
                        if arrival <= taking[receiver]:
                            taken = in_burst
                        arrival = dispatch[receiver] = max(dispatch[receiver], arrival) + taken
                        taking[receiver] = arrival
                    if commit:
                        arrivals[(id(t), k)] = arrival
                if arrival > start:
                    start = arrival
            free = min(slots[k])
            if free > start:
                start = free
            h = self.device_host[k]
            if h >= 0:
                cores = core_free[h]
                need = min(intra[k], len(cores)) if self.splits(i, k) else 1
                ordered = sorted(cores)
                if ordered[need - 1] > start:
                    start = ordered[need - 1]
            duration = self.op_time(i, k)
            begin = start
            if serial:  # the op's first part waits for its task's dispatcher
                task = device_task[k]
                if dispatch[task] > begin:
                    begin = dispatch[task]
                if commit:
                    dispatch[task] = begin + min(self.serial_part(i, k), duration)
                    taking[task] = -1.0
            end = begin + duration
            if commit:
                s = slots[k]
                s[s.index(free)] = end
                if h >= 0:
                    for t in ordered[:need]:
                        cores[cores.index(t)] = end
            return end

        sizes: dict[int, int] = {}

        def tensor_bytes_cached(t: Tensor) -> int:
            b = sizes.get(id(t))
            if b is None:
                b = sizes[id(t)] = self.tensor_bytes(t)
            return b

        while heap:
            _, i = heapq.heappop(heap)
            k = choose(i, finish_on)
            device[i] = k
            end = finish_on(i, k, commit=True)
            finish[i] = end
            if end > makespan:
                makespan = end
            for c in self.consumers[i]:
                if end > ready_at[c]:
                    ready_at[c] = end
                pending[c] -= 1
                if pending[c] == 0:
                    heapq.heappush(heap, (ready_at[c], c))
        return device, makespan


def _signature(op: Operation):
    """What an op's cost depends on: type, input and output types, attributes."""
    attrs = tuple(sorted((k, v if isinstance(v, (int, float, str, bool, tuple, type(None))) else repr(v))
                         for k, v in op.attrs.items() if k != "value"))
    return (op.type, tuple((t.dtype.name, t.shape) for t in op.inputs),
            tuple((t.dtype.name, t.shape) for t in op.outputs), attrs)


def estimate_step_time(graph: Graph, placement: Placement, cluster, cost_model: CostModel | None = None,
                       fetches: Iterable | None = None,
                       runtime: "RuntimeModel | str | None" = None) -> float:
    """The step time the cost-model placer's model predicts for ``placement``.

    A quick list-scheduling estimate (links carry one transfer at a time, in the order
    the schedule books them; no memory), not the simulator:
    use :func:`sim.simulate` for a faithful prediction.  ``runtime``: as the placer's
    option.
    """
    cost_model = cost_model or StaticCostModel()
    if fetches is None:
        ops = graph.get_operations()
    else:
        ops = ops_needed([f.op if isinstance(f, Tensor) else f for f in fetches])
    model = _Model(topological_order(ops), cluster, cost_model, runtime)
    return _estimate(model, [model.dev_index[placement[op.name]] for op in model.ops])


def _estimate(model: _Model, devices: list[int]) -> float:
    return model.schedule(lambda i, finish_on: devices[i])[1] + _fixed_costs(model, devices)


def _fixed_costs(model: _Model, devices: list[int]) -> float:
    """What a distributed step pays before its ops run, as the simulator counts it: the
    master task's ``step_overhead`` plus the ``part_overhead`` of every other task with
    an op (the master's calls to them; zero on clusters without these figures)."""
    cluster = model.cluster
    master = cluster.master
    if master is None:
        return 0.0
    total = cluster.task(*master).step_overhead
    for job, task in {(model.devices[k].job, model.devices[k].task) for k in set(devices)}:
        if (job, task) != tuple(master):
            total += cluster.task(job, task).part_overhead
    return total


@register("cost_model")
class CostModelPlacer(BasePlacer):
    """Greedy earliest-finish placement on a cost model (see the module docstring).

    Parameters
    ----------
    cost_model : a :class:`core.costs.CostModel`; default :class:`StaticCostModel`
        (roofline estimates from the op table and the cluster's device rates).
    check_memory : skip devices whose memory the op's outputs would exceed.
    single_device_guard : also consider all-on-one-device placements and keep the best.
    scope_candidates : also run the earliest-finish pass seeded by the graph's name scopes
        (layers, towers spread over the devices) on graphs of at most this many ops, and
        keep the best (0: never).
    runtime : the runtime placed for, a :class:`core.runtime_model.RuntimeModel` or its
        name (None: the cluster's ``runtime_model``, as :func:`sim.simulate` takes it).
        The estimate follows its ``serial_dispatch``: each task dispatches one op at a
        time, as the runtime's Python executor does: an op's ``op_overhead`` and kernel
        fixed cost wait for and hold its task's dispatcher, and each end of a transfer
        holds its task's dispatcher for its part of the crossing, as the simulator
        books it (:meth:`core.runtime_model.RuntimeModel.crossing_work`: half the
        route's latency each, or, where the runtime copies between the tasks of a host
        with its cores, the whole crossing; less for the receiver of a crossing that
        arrives while it still takes in another).  So a split pays only when the work
        it spreads outweighs the CPU its crossings cost both tasks.
    split_margin : with ``single_device_guard``, a placement over more tasks must be
        estimated faster than the best one-device placement by more than this fraction,
        else the one-device placement wins (default 0: the estimate alone decides).  A
        hedge against the cost model's error: a split estimated 1% faster is as likely
        to be slower, and a split that loses pays its crossings on every step.  The
        experiments use 0.1, the difference at which the simulator's ranking of two
        placements is held to be right.

    After :meth:`place`, ``estimated_step_time`` holds the model's step time of the result.
    """

    def __init__(self, cost_model: CostModel | None = None, check_memory: bool = True,
                 single_device_guard: bool = True, scope_candidates: int = 20_000,
                 runtime: "RuntimeModel | str | None" = None, split_margin: float = 0.0,
                 **options):
        super().__init__(**options)
        if not split_margin >= 0:
            raise ValueError(f"split_margin must be a non-negative fraction, not {split_margin!r}")
        self.split_margin = split_margin
        self.runtime = None if runtime is None else get_runtime_model(runtime)
        self.cost_model = cost_model or StaticCostModel()
        self.check_memory = check_memory
        self.single_device_guard = single_device_guard
        self.scope_candidates = scope_candidates
        self.estimated_step_time: float | None = None

    def choose(self, constraints):
        model = _Model(constraints.order, constraints.cluster, self.cost_model, self.runtime)
        group_of = [constraints.op_group[op.name] for op in model.ops]
        fixed_groups = {g.index: model.dev_index[g.fixed]
                        for g in constraints.groups if g.fixed is not None}
        feasible = {g.index: [model.dev_index[d.name] for d in g.feasible] for g in constraints.groups}
        capacity = [d.memory_bytes for d in model.devices]
        # Consumers by data edge, counted once each: when the last is placed, memory is freed.
        consumers = [len({c for c in model.consumers[i] if any(j == i for j, _ in model.data_inputs[c])})
                     for i in range(len(model.ops))]

        def greedy(preferred=None) -> tuple[list[int], float]:
            """One earliest-finish pass; ``preferred[i]``, when set, is op ``i``'s device
            unless its group already has one or it is not feasible or does not fit."""
            group_device = dict(fixed_groups)
            used = [0] * len(model.devices)
            remaining = list(consumers)
            placed_device = [-1] * len(model.ops)

            def choose(i: int, finish_on) -> int:
                g = group_of[i]
                k = group_device.get(g)
                need = model.out_bytes[i]
                if k is not None:
                    candidates = [k]
                else:
                    candidates = feasible[g]
                    want = preferred[i] if preferred is not None else -1
                    if want in candidates and not (self.check_memory and used[want] + need > capacity[want]):
                        candidates = [want]
                best, best_end = -1, 0.0
                for k in candidates:
                    if self.check_memory and used[k] + need > capacity[k]:
                        continue
                    end = finish_on(i, k)
                    if best < 0 or end < best_end:
                        best, best_end = k, end
                if best < 0:
                    op = model.ops[i]
                    names = ", ".join(model.devices[k].name for k in candidates)
                    raise PlacementError(op.name, None, f"its outputs ({need} bytes) fit in the memory "
                                         f"of no feasible device ({names})")
                group_device[g] = best
                placed_device[i] = best
                # Memory: this op's outputs stay until its last consumer is placed.
                used[best] += need
                if not remaining[i] and not model.persistent[i]:
                    used[best] -= need
                for j in {j for j, _ in model.data_inputs[i]}:
                    remaining[j] -= 1
                    if remaining[j] == 0 and not model.persistent[j]:
                        used[placed_device[j]] -= model.out_bytes[j]
                return best

            return model.schedule(choose)

        def key(devices, makespan):
            return (makespan + _fixed_costs(model, devices), _remote_tasks(model, devices))

        best_devices, makespan = greedy()
        best_key = key(best_devices, makespan)
        if self.scope_candidates and len(model.ops) <= self.scope_candidates:
            for preferred in _scope_seeds(model, feasible, group_of):
                devices, makespan = greedy(preferred)
                if key(devices, makespan) < best_key:
                    best_devices, best_key = devices, key(devices, makespan)
        if self.single_device_guard:
            fixed = set(fixed_groups)
            feasible_sets = {g: set(ks) for g, ks in feasible.items()}
            base = best_devices
            for k in range(len(model.devices)):
                alt = [k if k in feasible_sets[group_of[i]] and group_of[i] not in fixed
                       else base[i] for i in range(len(model.ops))]
                if not _groups_consistent(alt, group_of) or not _fits(model, alt, capacity):
                    continue
                alt_key = (_estimate(model, alt), _remote_tasks(model, alt))
                # Fewer tasks: taken unless the split is estimated faster by the margin.
                fewer = alt_key[1] < best_key[1]
                if alt_key < best_key or (
                        fewer and alt_key[0] <= best_key[0] * (1 + self.split_margin)):
                    best_devices, best_key = alt, alt_key
        self.estimated_step_time = best_key[0]
        chosen = {}
        for i, op in enumerate(model.ops):
            chosen.setdefault(group_of[i], model.devices[best_devices[i]])
        return chosen


def _scope_of(name: str, depth: int) -> str:
    """An op's model part: its first ``depth`` name scopes, the gradient scope taken off
    (``gradients/layer1/MatMul_grad/MatMul`` belongs with ``layer1/MatMul``)."""
    parts = name.split("/")
    if parts[0].startswith("gradients") and len(parts) > 1:
        parts = parts[1:]
    return "/".join(parts[:depth]) if len(parts) > depth else ""


def _scope_seeds(model: _Model, feasible: dict, group_of: list[int]) -> list[list[int]]:
    """Seeds for the earliest-finish pass from the graph's name scopes, the parts a
    person splits a model by (layers, towers): for scope depths 1 and 2, the scopes
    holding at least 5% of the work spread over the devices that can run them all,
    heaviest first onto the least loaded (each op of such a scope then prefers its
    scope's device; every other op chooses freely).  Empty when fewer than two scopes
    qualify or fewer than two devices could take them."""
    work = [model.op_time(i, 0) if 0 in feasible[group_of[i]] else 0.0
            for i in range(len(model.ops))]
    total = sum(work) or 1.0
    seeds = []
    for depth in (1, 2):
        scope = [_scope_of(op.name, depth) for op in model.ops]
        weight: dict[str, float] = {}
        devices_of: dict[str, set] = {}
        for i, s in enumerate(scope):
            if s:
                weight[s] = weight.get(s, 0.0) + work[i]
                ks = set(feasible[group_of[i]])
                devices_of[s] = devices_of[s] & ks if s in devices_of else ks
        big = sorted((s for s in weight if weight[s] >= 0.05 * total and devices_of[s]),
                     key=lambda s: (-weight[s], s))
        usable = sorted(set().union(*(devices_of[s] for s in big))) if big else []
        if len(big) < 2 or len(usable) < 2:
            continue
        load = {k: 0.0 for k in usable}
        home = {}
        for s in big:
            k = min(sorted(devices_of[s]), key=lambda k: load[k])
            home[s] = k
            load[k] += weight[s]
        seed = [home.get(s, -1) for s in scope]
        if seed not in seeds:
            seeds.append(seed)
    return seeds


def _remote_tasks(model: _Model, devices: list[int]) -> int:
    """How many tasks other than the master's have an op: among placements of equal
    estimates, fewer is better (each is one more call per step, even when the cluster's
    figures do not say what it costs)."""
    master = model.cluster.master
    tasks = {(model.devices[k].job, model.devices[k].task) for k in set(devices)}
    return len(tasks - {tuple(master)}) if master is not None else len(tasks)


def _groups_consistent(devices: list[int], group_of: list[int]) -> bool:
    seen: dict[int, int] = {}
    for k, g in zip(devices, group_of):
        if seen.setdefault(g, k) != k:
            return False
    return True


def _fits(model: _Model, devices: list[int], capacity: list[int]) -> bool:
    """A coarse memory check for an alternative: variables plus the largest output."""
    resident = [0] * len(capacity)
    largest = [0] * len(capacity)
    for i, k in enumerate(devices):
        if model.persistent[i]:
            resident[k] += model.out_bytes[i]
        elif model.out_bytes[i] > largest[k]:
            largest[k] = model.out_bytes[i]
    return all(resident[k] + largest[k] <= capacity[k] for k in range(len(capacity)))
