"""The two backends behind one question: how long does a step of this placement take?

:func:`predict` asks the simulator; :func:`measure` really runs the placement on a
:class:`runtime.LocalCluster` of server processes on this machine.  Both take a placement
computed beforehand: :func:`pinned_graph` copies the graph with every op pinned to its
placed device, so the master's simple placer keeps the placement exactly.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping

import runtime
import sim
from core.runtime_model import INTERPRETER
from core.cluster import Cluster, ClusterSpec, usable_cpu_cores
from core.costs import CostModel
from core.graph import Graph
from core.placement import Placement
from core.serialize import graph_to_nodes, nodes_to_graph
from core.trace import Trace
from experiments.machine_load import OtherLoad
from experiments.workloads.mlp import Workload
from runtime.calibrate import calibrate, calibrate_distributed

_log = logging.getLogger(__name__)

__all__ = ["Measurement", "relative_spread", "pinned_graph", "predict", "measure", "measure_placements",
           "in_process_step", "in_process_steps", "timed_rounds",
           "prepared_session",
           "runtime_cluster_spec", "server_env", "this_host_cluster", "calibrate_this_host",
           "describe_calibration", "RUNTIME_SIM", "DISTRIBUTED_BLOCKS"]

#: The simulator's settings for predicting the runtime's executor: its runtime model
#: (:data:`core.runtime_model.INTERPRETER`: ops dispatched in Python, one at a time per
#: server process, cheap ops run inline, the host's cores shared by the interpreters, the
#: kernels, the copies between processes and the step's fixed work).  A calibrated
#: cluster records that model itself; this names it for the clusters that are not.
RUNTIME_SIM = sim.SimConfig(runtime=INTERPRETER)

#: Blocks of a distributed step's timed figures in a full calibration, each figure the
#: median of its blocks' (:func:`runtime.calibrate.calibrate_distributed`'s ``blocks``:
#: one block of steps can catch this machine slow throughout).
DISTRIBUTED_BLOCKS = 3


def this_host_cluster(threads: int = 0) -> Cluster:
    """1 ps and 2 workers on this machine, as :class:`runtime.LocalCluster` runs them: one
    host with the cores this process may use, shared by the tasks.  ``threads``: every
    CPU device's inter-op and intra-op thread count (0: the host's cores)."""
    spec = ClusterSpec({"ps": ["127.0.0.1:0"], "worker": ["127.0.0.1:0", "127.0.0.1:0"]})
    hosts = {("ps", 0): "localhost", ("worker", 0): "localhost", ("worker", 1): "localhost"}
    threads = threads or None
    return Cluster.from_spec(spec, hosts=hosts, cpu_cores=usable_cpu_cores(),
                             cpu_inter_op_threads=threads, cpu_intra_op_threads=threads)


def calibrate_this_host(cluster: Cluster, *, env: dict | None = None,
                        config: runtime.SessionConfig | None = None,
                        quick: bool = False) -> tuple[Cluster, dict]:
    """``(cluster, figures)``: ``cluster`` (tasks on this host, e.g.
    :func:`this_host_cluster`) measured on this machine: the devices' rates, each op
    type's kernel cost and the executor's dispatch cost per op (:func:`runtime.calibrate`,
    in this process), then the fixed costs of a distributed step (step and part
    overheads, the latency and bandwidth of a tensor crossing processes:
    :func:`runtime.calibrate.calibrate_distributed`, on server processes started with
    ``env`` and ``config``; in :data:`DISTRIBUTED_BLOCKS` blocks, each figure the
    median of its blocks', unless ``quick``).  ``figures`` holds those measurements;
    ``op_overhead`` is the dispatch cost the devices got (``chain_op_overhead``: the
    one along a chain of tiny ops); ``other_cores`` the cores other programs kept busy
    meanwhile (:class:`experiments.machine_load.OtherLoad`: a calibration on a busy
    machine measures a slower one).  About 40 s on this machine (9 s ``quick``)."""
    with OtherLoad() as load:
        _log.info("calibrating the devices in this process (%s)", "quick" if quick else "full")
        cluster = calibrate(cluster, quick=quick)  # with the kernel costs and dispatch per op
        with runtime.LocalCluster(runtime_cluster_spec(cluster), env=env,
                                  config=config) as local:
            _log.info("calibrating a step across %d server processes", len(local.processes))
            cluster, figures = calibrate_distributed(cluster, local, quick=quick,
                                                     blocks=1 if quick else DISTRIBUTED_BLOCKS)
    figures["other_cores"] = load.other_cores
    _log.info("calibrated in %.1f s; other programs kept %.1f cores busy", load.seconds,
              load.other_cores)
    # The dispatch cost per op: measured between the kernels of a graph with a workload's
    # fan-in and fan-out (calibrate's kernel costs), not along calibrate_distributed's
    # chain of Identity ops.
    figures["chain_op_overhead"] = figures["op_overhead"]
    figures["op_overhead"] = cluster.devices[0].op_overhead
    return cluster, figures


def describe_calibration(figures: dict) -> str:
    """One line with the fixed costs :func:`calibrate_this_host` measured."""
    line = ("step overhead {:.3g} ms, per extra task {:.3g} ms, crossing latency {:.3g} ms, "
            "bandwidth {:.3g} GB/s, dispatch {:.3g} us/op".format(
                figures["step_overhead"] * 1e3, figures["part_overhead"] * 1e3,
                (figures["transfer_latency"] or 0) * 1e3,
                (figures["transfer_bandwidth"] or 0) / 1e9, figures["op_overhead"] * 1e6))
    other = figures.get("other_cores", math.nan)
    return line if math.isnan(other) else f"{line}; other programs kept {other:.2g} cores busy"


@dataclass
class Measurement:
    """A measured placement: ``step_time`` (seconds, as the client sees it) is the
    fastest timed step, every timed step is in ``steps``, and ``traces`` holds the traced
    steps (``trace`` is the first).

    Why the fastest: the simulator predicts a step on a machine that runs nothing else;
    on a shared machine other processes only ever add time, so the undisturbed step is
    the least of the repeats (as :mod:`timeit` reports); :attr:`median` shows the spread.
    """

    step_time: float
    steps: list
    traces: list
    #: The cores other programs kept busy while the steps were timed
    #: (:class:`experiments.machine_load.OtherLoad`; NaN where unknown).
    other_cores: float = math.nan
    #: The steps timed right after another placement's step (:func:`timed_rounds`'s
    #: settling steps), beside ``steps``, each timed after a step of its own.
    after_other: list = field(default_factory=list)

    @property
    def trace(self) -> Trace:
        return self.traces[0]

    @property
    def median(self) -> float:
        return statistics.median(self.steps)

    @property
    def halves_spread(self) -> float:
        """How far apart the fastest steps of the first and the second half of the
        timed rounds are, relative to the fastest of all: what a second measurement of
        the same placement could differ by (the machine's load drifts), a floor under
        any comparison with it.  NaN with fewer than two steps."""
        half = len(self.steps) // 2
        if not half:
            return math.nan
        return relative_spread(min(self.steps[:half]), min(self.steps[half:]))


def relative_spread(a: float, b: float) -> float:
    """How far apart two timings of one thing are, relative to the faster.

    >>> relative_spread(2.0, 2.5)
    0.25
    """
    return abs(a - b) / min(a, b)


def pinned_step(make, cluster, **options) -> float:
    """The simulated step (seconds) of the graph that ``make()`` builds, as
    ``(graph, fetches)``, with every op on the device the graph pins it to: the probes'
    hand-placed graphs.  ``options`` go to :func:`sim.simulate`."""
    graph, fetches = make()
    placement = Placement({op.name: op.device for op in graph.get_operations()})
    return sim.simulate(graph, placement, cluster, fetches=fetches, **options).step_time


def pinned_graph(graph: Graph, placement: Placement) -> Graph:
    """A copy of ``graph`` with each op's requested device set to its placed device."""
    nodes = graph_to_nodes(graph.get_operations())
    for node in nodes:
        node["device"] = placement[node["name"]]
    return nodes_to_graph(nodes)


def server_env(blas_threads: int = 1, omp_wait_policy: str = "passive") -> dict:
    """The environment of the server processes an experiment starts on this shared
    2-core machine: ``OPENBLAS_NUM_THREADS`` (0: the library's default, a spinning thread
    per core) and ``OMP_WAIT_POLICY`` for numba's OpenMP threads ("": the library's
    default).  Both keep spinning threads off the cores another process needs: with
    OpenMP's default a 65536-element Mul on the parallel path took 0.04 to 11 ms (median
    of 200 calls, three runs) beside other load, against 0.04 ms with ``passive``
    (measured; the serial kernel takes 0.024 ms)."""
    env = {}
    if blas_threads:
        env["OPENBLAS_NUM_THREADS"] = str(blas_threads)
    if omp_wait_policy:
        env["OMP_WAIT_POLICY"] = omp_wait_policy
    return env


def runtime_cluster_spec(cluster) -> dict:
    """The task counts of ``cluster`` (``{"ps": 1, "worker": 2}``), for a LocalCluster."""
    counts: dict[str, int] = {}
    for task in cluster.tasks:
        counts[task.job] = max(counts.get(task.job, 0), task.index + 1)
    return counts


def predict(workload: Workload, placement: Placement, cluster, cost_model: CostModel | None = None,
            config: sim.SimConfig | None = None) -> Trace:
    """The simulator's trace of one step of ``workload`` under ``placement``."""
    return sim.simulate(workload.graph, placement, cluster, fetches=workload.fetch_ops,
                        cost_model=cost_model, config=config)


def measure(workload: Workload, placement: Placement, local_cluster, **options) -> Measurement:
    """Run ``workload`` under ``placement`` on ``local_cluster`` (a started
    :class:`runtime.LocalCluster`) and time it; the options of :func:`measure_placements`."""
    return measure_placements(workload, {"placement": placement}, local_cluster,
                              **options)["placement"]


def in_process_step(workload: Workload, repeats: int, *, warmup: int = 3,
                    inter_op_threads: int = 0, intra_op_threads: int = 0
                    ) -> tuple[Placement, float]:
    """``(placement, seconds)``: the fastest of ``repeats`` steps of ``workload``'s fetch
    ops in a new in-process :class:`runtime.Session` whose inter-op and intra-op pools
    have that many threads (0: the session's default), after its initializer and
    ``warmup`` untimed steps; and the placement the session ran (other load only ever
    adds time, so the fastest step is the undisturbed one)."""
    return in_process_steps([workload], repeats, turns=1, warmup=warmup,
                            inter_op_threads=inter_op_threads,
                            intra_op_threads=intra_op_threads)[0]


def in_process_steps(workloads, repeats: int, *, turns: int = 5, warmup: int = 3,
                     inter_op_threads: int = 0, intra_op_threads: int = 0
                     ) -> list[tuple[Placement, float]]:
    """:func:`in_process_step` of each of ``workloads`` (a workload may come twice: a
    session each), their sessions open together and taking turns: each
    session takes ``turns`` turns, in order, and runs a few steps in a row in each
    (``repeats`` timed steps in all per session, and ``warmup`` untimed ones first in
    each turn).

    In turns because this machine's speed changes for seconds at a time: steps timed
    in one burst catch one state, and a workload measured in a slow spell differs
    from one measured a minute earlier by more than any model's error; in turns,
    each fastest step comes from the same spells as the others'.  (The calibration
    times its kernels in turns for the same reason: see :mod:`runtime.calibrate`.)

    >>> from experiments.sim_vs_real import build_workload
    >>> w = build_workload("mixed_random:seed=1:elements=256")
    >>> [(len(p), s > 0) for p, s in in_process_steps([w, w], 4, turns=2)]
    [(84, True), (84, True)]
    """
    if turns < 1 or repeats < turns:
        raise ValueError(f"in_process_steps: need 1 <= turns <= repeats, not turns={turns}, "
                         f"repeats={repeats}")
    config = runtime.SessionConfig(inter_op_parallelism_threads=inter_op_threads,
                                   intra_op_parallelism_threads=intra_op_threads,
                                   use_per_session_threads=True)
    with contextlib.ExitStack() as stack:
        sessions = []
        for workload in workloads:
            session = stack.enter_context(runtime.Session(graph=workload.graph, config=config))
            if workload.init is not None:
                session.run(workload.init)
            sessions.append(session)
        best = [math.inf] * len(sessions)
        for turn in range(turns):
            steps = repeats // turns + (turn < repeats % turns)
            for k, (workload, session) in enumerate(zip(workloads, sessions)):
                feeds = workload.feeds or None
                for _ in range(warmup):
                    session.run(workload.fetch_ops, feed_dict=feeds)
                for _ in range(steps):
                    t0 = time.perf_counter()
                    session.run(workload.fetch_ops, feed_dict=feeds)
                    best[k] = min(best[k], time.perf_counter() - t0)
        return [(session.placement, b) for session, b in zip(sessions, best)]


@contextlib.contextmanager
def prepared_session(workload: Workload, placement: Placement, local_cluster, *,
                     warmup: int = 2, master=("worker", 0),
                     config: runtime.SessionConfig | None = None):
    """``(session, fetches)`` in a ``with``: a session opened at ``master`` on
    ``local_cluster`` with ``workload`` pinned to ``placement``, its variables
    initialised and ``warmup`` untimed steps run (they also compile or load the kernels);
    ``fetches`` are the workload's fetch ops in that session's graph."""
    graph = pinned_graph(workload.graph, placement)
    fetches = [graph.get_operation_by_name(op.name) for op in workload.fetch_ops]
    with runtime.Session(local_cluster.target(*master), graph=graph, config=config) as session:
        if workload.init is not None:
            session.run(graph.get_operation_by_name(workload.init.name))
        for _ in range(warmup):
            session.run(fetches, feed_dict=workload.feeds or None)
        yield session, fetches


def measure_placements(workload: Workload, placements: Mapping[str, Placement], local_cluster,
                       *, repeats: int = 5, warmup: int = 2, traced: int = 1,
                       master=("worker", 0), config: runtime.SessionConfig | None = None,
                       settle: bool = True) -> dict[str, Measurement]:
    """Time several placements of ``workload`` side by side on ``local_cluster``.

    One session per placement opens at ``master``; each initialises the variables and
    runs ``warmup`` untimed steps (they also compile or load the kernels).  Then
    ``repeats`` rounds each time a step of every placement, the order rotating from
    round to round, so that a change in the machine's load hits every placement alike,
    each timed step right after a step of its own placement (``settle``; see
    :func:`timed_rounds`); then ``traced`` traced steps each.  Returns a
    :class:`Measurement` per name, each with the cores other programs kept busy during
    the timed rounds.
    """
    names = list(placements)
    _log.info("timing %d placement(s) of %s side by side: %d rounds", len(names),
              getattr(workload, "name", "a workload"), repeats)
    with contextlib.ExitStack() as stack:
        runs = {name: stack.enter_context(prepared_session(
                    workload, placements[name], local_cluster, warmup=warmup, master=master,
                    config=config))
                for name in names}
        feeds = workload.feeds or None
        steps = {name: functools.partial(runs[name][0].run, runs[name][1], feed_dict=feeds)
                 for name in names}
        with OtherLoad() as load:
            timed, after_other = timed_rounds(steps, repeats, settle)
        out = {}
        for name in names:
            session, fetches = runs[name]
            traces = [session.run(fetches, feed_dict=feeds, trace=True)[1]
                      for _ in range(max(1, traced))]
            out[name] = Measurement(min(timed[name]), timed[name], traces, load.other_cores,
                                    after_other[name])
    return out


def timed_rounds(steps: Mapping[str, Callable[[], object]], repeats: int, settle: bool = True
                 ) -> tuple[dict[str, list], dict[str, list]]:
    """``(timed, after_other)``: per name, the seconds of ``repeats`` steps of
    ``steps[name]()`` (one step of a placement), timed side by side in rounds, the
    order rotating from round to round, so that a change in the machine's load hits
    every placement alike.

    With ``settle`` (default) each placement runs two steps in its turn and the second
    is the timed one: a step of a training loop follows a step of its own graph, and
    that is the step the simulator predicts, while a step right after another
    placement's runs slower (its servers' threads and caches were doing other work:
    on TensorFlow's runtime a one-task step took 20-75% longer after a step over three
    tasks, ``docs/probes/tf_step_order_probe.py``).  The first step of each turn is
    timed too, into ``after_other``.  Without ``settle``, one step per turn, timed
    (``after_other`` is then empty)."""
    names = list(steps)
    timed: dict[str, list] = {name: [] for name in names}
    after_other: dict[str, list] = {name: [] for name in names}
    for r in range(repeats):
        for name in names[r % len(names):] + names[:r % len(names)]:
            run = steps[name]
            if settle:
                t0 = time.perf_counter()
                run()
                after_other[name].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            run()
            timed[name].append(time.perf_counter() - t0)
    return timed, after_other
