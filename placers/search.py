"""search: simulator-guided placement search (simulated annealing over group moves).

    Jia, Zaharia, Aiken, "Beyond Data and Model Parallelism for Deep Neural Networks"
    (FlexFlow), SysML 2019, section 5: a Markov chain Monte Carlo search over
    strategies, each proposal changing one operator's configuration at random, scored
    by the execution simulator and accepted by the Metropolis criterion.

Contract (numbered as TensorFlow's ``placer.h``; :mod:`placers.base` holds the rest):

1. The state is the device of each colocation group to place (constraints resolved
   once); a proposal moves one group, drawn at random, to another of its feasible
   devices, or (ours, half of the proposals) every group of the drawn group's name
   scope, one or two levels deep with the gradient scope taken off (a layer with its
   backward pass), to one device all of them may use: a split's boundary moves by a
   layer at once.  Pins, colocation, kernels and earlier placements hold in every
   state.
2. The search starts from the best, by ``objective``, of the placements of
   ``start_placers`` (m_topo, m_etf, m_sct, cost_model, simple by default; one that
   raises is skipped) and of ``expert`` when given: so its result is never worse than
   any of them by the objective.
3. Each round proposes ``batch`` neighbours of the current state, evaluates them in
   parallel, and moves to the best of them by the Metropolis rule at temperature
   ``T = temperature * best_so_far * (1 - used / budget)`` (FlexFlow's ``exp(-beta
   delta)``, cooled linearly); the best state ever seen is returned.
4. The budget is ``evaluations`` objective calls (starts included) and, when given,
   ``seconds`` of wall time, whichever ends first.
5. Deterministic for a ``seed``: proposals are drawn in this process and results taken
   in proposal order, so the answer does not depend on the workers (when the budget
   is in evaluations; a time budget ends where the time runs out).
6. ``objective(graph, placement, cluster) -> seconds`` (default
   :func:`placers.objective.simulated_step`, infinite for a placement that runs out
   of memory).  Evaluations run in ``workers`` local processes (forked: the graph is
   not shipped, a task is a state; the start placers run there too) or, given ``scheduler`` (a ``tcp://host:port`` address), on that Dask
   cluster (the optional extra ``dask``): a scheduler that does not answer within
   ``connect_timeout`` seconds raises :class:`SearchError` naming it, with nothing
   left running.  ``stats`` reports evaluations, seconds and evaluations per second.

>>> import core as tf
>>> from core.cluster import Cluster
>>> g = tf.Graph()
>>> with g.as_default():
...     a = tf.constant([[1.0] * 128] * 128, name="a")
...     b = tf.matmul(a, a, name="b")
...     c = tf.matmul(a, a, name="c")
>>> placer = SearchPlacer(evaluations=12, workers=1, seed=0)
>>> p = placer.place(g, Cluster.single_host(gpus=2))
>>> placer.stats["evaluations"] <= 12, placer.stats["best"] <= placer.stats["start"]
(True, True)
"""

from __future__ import annotations

import math
import multiprocessing
import os
import time
import uuid

import numpy as np

from core.placement import Placement, PlacementError
from placers.base import BasePlacer, get, register
from placers.objective import Objective, step_objective

__all__ = ["SearchPlacer", "SearchError", "DEFAULT_STARTS"]

DEFAULT_STARTS = ("m_topo", "m_etf", "m_sct", "cost_model", "simple")


def _scopes(groups) -> list[dict[int, list[int]]]:
    """For name-scope depths 1 and 2: group index -> the groups of its scope (groups
    outside any scope map to nothing)."""
    from placers.cost_model import _scope_of
    out = []
    for depth in (1, 2):
        members: dict[str, list[int]] = {}
        for i, g in enumerate(groups):
            scope = _scope_of(g.ops[0].name, depth)
            if scope:
                members.setdefault(scope, []).append(i)
        out.append({i: ms for ms in members.values() if len(ms) > 1 for i in ms})
    return out


class SearchError(RuntimeError):
    """The search could not run: a Dask scheduler that does not answer, no start."""


class _Problem:
    """What an evaluation needs: the graph, cluster and objective, and how a state (a
    device index per free group) becomes a placement."""

    def __init__(self, graph, cluster, objective, previous, constraints, devices):
        self.graph, self.cluster, self.objective = graph, cluster, objective
        self.devices = devices  # names, by index
        self.kept = list(previous.items())
        kept = previous.to_dict()
        fixed = {op.name: g.fixed for g in constraints.groups if g.fixed is not None
                 for op in g.ops if op.name not in kept}
        slot = {op.name: i for i, g in enumerate(constraints.to_place()) for op in g.ops}
        # The ops in placement order (the earlier placement's, then the new ones in graph
        # order), each with its position in a table of devices: a state's devices (one
        # per group slot), then the devices fixed already, so that a placement is two
        # passes of C loops (map, zip) with no device name parsed again.
        new = [op.name for op in graph.get_operations() if op.name in slot or op.name in fixed]
        fixed_devices = [d for _, d in self.kept] + [fixed[n] for n in new if n not in slot]
        n_slots = len(constraints.to_place())
        self.names = [n for n, _ in self.kept] + new
        position, at = [], n_slots
        for _ in self.kept:
            position.append(at)
            at += 1
        for name in new:
            if name in slot:
                position.append(slot[name])
            else:
                position.append(at)
                at += 1
        self.position = position
        self.fixed_devices = fixed_devices  # (a placement's and the cluster's names)

    def placement(self, state) -> Placement:
        table = list(map(self.devices.__getitem__, state))
        table += self.fixed_devices
        return Placement.of_canonical(self.names, list(map(table.__getitem__, self.position)))

    def evaluate(self, state) -> float:
        return float(self.objective(self.graph, self.placement(state), self.cluster))


# -- local processes: the problem is a global the forked workers inherit ---------------------
_FORKED: dict = {}


def _evaluate_forked(key_and_state):
    key, state = key_and_state
    return _FORKED[key][0].evaluate(state)


def _start_forked(key_and_index):
    key, index = key_and_index
    return _FORKED[key][1](index)


class _LocalPool:
    """``workers`` forked processes (1: this one) that inherit the problem and
    ``start(index) -> (state, score)``, the start placers' runs: only an index or a
    state and its score travel per task."""

    def __init__(self, problem: _Problem, workers: int, start=None):
        self.problem, self.start = problem, start
        self.key = uuid.uuid4().hex
        self.pool = None
        if workers > 1 and "fork" in multiprocessing.get_all_start_methods():
            _FORKED[self.key] = (problem, start)
            self.pool = multiprocessing.get_context("fork").Pool(workers)

    def starts(self, n: int) -> list:
        if self.pool is None:
            return [self.start(i) for i in range(n)]
        return self.pool.map(_start_forked, [(self.key, i) for i in range(n)], chunksize=1)

    def map(self, states: list) -> list[float]:
        if self.pool is None:
            return [self.problem.evaluate(s) for s in states]
        return self.pool.map(_evaluate_forked, [(self.key, s) for s in states])

    def close(self):
        if self.pool is not None:
            self.pool.terminate()
            self.pool.join()
            _FORKED.pop(self.key, None)


# -- Dask: the graph travels as plain nodes, rebuilt once per worker process -----------------
_REBUILT: dict = {}


def _evaluate_on_dask(payload: dict, states: list) -> list[float]:
    from core.serialize import nodes_to_graph
    problem = _REBUILT.get(payload["key"])
    if problem is None:
        graph = nodes_to_graph(payload["nodes"])
        problem = payload["problem"]
        problem.graph = graph
        objective = problem.objective
        if payload["fetches"] is not None:  # the default objective's step, by name
            objective.fetches = [graph.as_graph_element(n) for n in payload["fetches"]]
        _REBUILT.clear()  # one search at a time per worker: keep one graph
        _REBUILT[payload["key"]] = problem
    return [problem.evaluate(s) for s in states]


class _DaskPool:
    def __init__(self, problem: _Problem, address: str, timeout: float, fetch_names):
        try:
            from distributed import Client
        except ImportError as e:
            raise SearchError("a Dask scheduler address was given but dask.distributed is not "
                              "installed (pip install 'placement-lab[dask]')") from e
        from core.serialize import graph_to_nodes
        try:
            self.client = Client(address, timeout=timeout, set_as_default=False)
        except (OSError, TimeoutError) as e:
            raise SearchError(f"no Dask scheduler answers at {address!r} within {timeout:g} s "
                              f"({type(e).__name__}: {e})") from None
        graph, objective = problem.graph, problem.objective
        problem.graph = None  # (shipped as nodes)
        if fetch_names is not None:
            problem.objective = type(objective)(None)
        try:
            self.payload = self.client.scatter(
                {"key": uuid.uuid4().hex, "nodes": graph_to_nodes(graph.get_operations()),
                 "problem": problem, "fetches": fetch_names}, broadcast=True)
        finally:
            problem.graph, problem.objective = graph, objective
        self.chunks = max(1, sum(self.client.nthreads().values()))

    def map(self, states: list) -> list[float]:
        parts = [states[i::self.chunks] for i in range(self.chunks)]
        futures = [self.client.submit(_evaluate_on_dask, self.payload, part, pure=False)
                   for part in parts if part]
        results = self.client.gather(futures)
        out = [0.0] * len(states)
        for i, part in enumerate(results):
            out[i::self.chunks] = part
        return out

    def close(self):
        self.client.close()


@register("search")
class SearchPlacer(BasePlacer):
    """Simulated annealing over group-to-device moves, scored by the simulator (see the
    module's contract).

    Parameters
    ----------
    objective : ``objective(graph, placement, cluster) -> seconds`` (default: the
        simulator's step time of ``fetches``).
    fetches : the step the default objective simulates (default: every op).
    evaluations, seconds : the budget (objective calls; wall seconds, optional).
    seed : the proposals' random seed.
    start_placers : registry names (or placers) whose placements seed the search.
    expert : a :class:`core.placement.Placement` to start from too (e.g. a workload's).
    batch : proposals evaluated per round (default 8, whatever the workers).
    workers : local processes (default: the usable CPUs; 1: in this process).
    scheduler : a Dask scheduler address; evaluations then run there.
    temperature : the initial temperature, as a fraction of the best step.

    After :meth:`place`, ``stats`` holds ``evaluations`` (the starts' included),
    ``seconds`` (in all), ``start_seconds`` (of them, placing and evaluating the
    starts), ``evals_per_second`` (the candidates the search proposed over the seconds
    after the starts; NaN when the budget ended with the starts), ``start`` (the best
    start's objective), ``start_placer`` and ``best``.
    """

    def __init__(self, objective: Objective | None = None, fetches=None, evaluations: int = 400,
                 seconds: float | None = None, seed: int = 0, start_placers=DEFAULT_STARTS,
                 expert: Placement | None = None, batch: int | None = None,
                 workers: int | None = None, scheduler: str | None = None,
                 temperature: float = 0.02, connect_timeout: float = 3.0, **options):
        super().__init__(**options)
        if evaluations < 1:
            raise ValueError(f"evaluations must be at least 1, not {evaluations!r}")
        self.objective = objective
        self.fetches = fetches
        self.evaluations, self.seconds, self.seed = evaluations, seconds, seed
        self.start_placers = tuple(start_placers)
        self.expert = expert
        self.workers = workers or len(os.sched_getaffinity(0))
        self.batch = batch or 8  # not tied to the workers: the answer must not be
        self.scheduler = scheduler
        self.temperature = temperature
        self.connect_timeout = connect_timeout
        self.stats: dict = {}

    def _start_sources(self) -> list[tuple[str, object]]:
        """``(name, placer or placement)`` of each start (contract 2)."""
        sources = [(p if isinstance(p, str) else type(p).__name__, p) for p in self.start_placers]
        if self.expert is not None:
            sources.append(("expert", self.expert))
        return sources

    def _start(self, problem, constraints, dev_index, source):
        """``(state, objective)`` of a start's placement, or ``(None, None)`` when its
        placer raises or the placement breaks the constraints."""
        if isinstance(source, Placement):
            placement = source
        else:
            options = {"fetches": self.fetches} if self.fetches is not None and \
                isinstance(source, str) and source.startswith("m_") else {}
            if isinstance(source, str):  # the same constraints as this search's
                options["allow_soft_placement"] = self.allow_soft_placement
            try:
                placement = get(source, **options).place(constraints.graph, constraints.cluster,
                                                         previous=constraints.previous)
            except PlacementError:
                return None, None
        state = []
        for g in constraints.to_place():
            ks = {dev_index.get(placement.get(op.name)) for op in g.ops}
            k = ks.pop() if len(ks) == 1 else None
            if k is None or k not in {dev_index[d.name] for d in g.feasible}:
                return None, None
            state.append(k)
        return state, problem.evaluate(state)

    def choose(self, constraints):
        t0 = time.perf_counter()
        devices = [d.name for d in constraints.cluster.devices]
        dev_index = {name: k for k, name in enumerate(devices)}
        groups = constraints.to_place()
        feasible = [[dev_index[d.name] for d in g.feasible] for g in groups]
        movable = [i for i, ks in enumerate(feasible) if len(ks) > 1]
        objective = step_objective(self.objective, self.fetches)
        problem = _Problem(constraints.graph, constraints.cluster, objective, constraints.previous,
                           constraints, devices)
        sources = self._start_sources()
        def start(i):  # (forked workers inherit it: nothing is pickled)
            return self._start(problem, constraints, dev_index, sources[i][1])

        # The starts run (placed and evaluated) in the local workers, forked first.
        pool = _LocalPool(problem, self.workers if self.scheduler is None and movable else 1, start)
        try:
            starts = [(name, state, score) for (name, _), (state, score)
                      in zip(sources, pool.starts(len(sources))) if state is not None]
            if not starts:
                raise SearchError(f"no start placer ({', '.join(map(str, self.start_placers))})"
                                  f" placed the graph within the constraints")
            started = time.perf_counter() - t0
            used = len(starts)
            best_i = min(range(len(starts)), key=lambda i: (starts[i][2], i))
            start_name, best_state, best = starts[best_i]
            start_score = best
            current, current_score = list(best_state), best
            scopes = _scopes(groups)
            rng = np.random.default_rng(self.seed)
            if self.scheduler is not None and movable and used < self.evaluations:
                pool.close()
                pool = self._pool(problem)
            while movable and used < self.evaluations:
                if self.seconds is not None and time.perf_counter() - t0 > self.seconds:
                    break
                proposals = [self._propose(current, movable, feasible, scopes, rng)
                             for _ in range(min(self.batch, self.evaluations - used))]
                results = pool.map(proposals)
                used += len(proposals)
                i = min(range(len(results)), key=lambda i: (results[i], i))
                if results[i] < best:
                    best, best_state = results[i], proposals[i]
                temp = self.temperature * (best if math.isfinite(best) else 1.0) * \
                    max(0.0, 1 - used / self.evaluations)
                delta = results[i] - current_score
                draw = rng.random()
                if delta <= 0 or (temp > 0 and math.isfinite(delta) and
                                  draw < math.exp(-delta / temp)):
                    current, current_score = proposals[i], results[i]
        finally:
            pool.close()
        seconds = time.perf_counter() - t0
        proposed, searching = used - len(starts), seconds - started
        self.stats = {"evaluations": used, "seconds": seconds, "start_seconds": started,
                      "evals_per_second": proposed / searching if proposed else math.nan,
                      "start": start_score, "start_placer": start_name, "best": best}
        return {g.index: constraints.cluster.devices[k] for g, k in zip(groups, best_state)}

    @staticmethod
    def _propose(current, movable, feasible, scopes, rng) -> list[int]:
        """A neighbour of ``current`` (contract 1)."""
        state = list(current)
        g = movable[int(rng.integers(len(movable)))]
        others = [k for k in feasible[g] if k != state[g]]
        k = others[int(rng.integers(len(others)))]
        if rng.random() < 0.5:
            members = scopes[int(rng.integers(2))].get(g, [g])
            members = [m for m in members if k in feasible[m]]
            for m in members:
                state[m] = k
        state[g] = k
        return state

    def _pool(self, problem):
        if self.scheduler is not None:
            fetch_names = None
            if self.objective is None and self.fetches is not None:
                fetch_names = [f.name for f in self.fetches]
            return _DaskPool(problem, self.scheduler, self.connect_timeout, fetch_names)
        return _LocalPool(problem, self.workers)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(evaluations={self.evaluations}, seed={self.seed}, "
                f"workers={self.workers})")
