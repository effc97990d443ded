"""The placers from the literature (m_topo, m_etf, m_sct), the exact `optimal`, the
simulator-guided `search`, and placers registered through entry points."""

import itertools
import math
import time
from importlib.metadata import EntryPoint

import pytest
from hypothesis import given, settings, strategies as st

import core as tf
import placers
import sim
from core.cluster import Cluster
from core.placement import Placement
from experiments.workloads import mlp_training_step, random_layered_dag
from placers.m_etf import ListScheduler
from placers.m_sct import favorite_parents
from strategies import dags, float_dags

MEMORY_AWARE = ("m_topo", "m_etf", "m_sct")


def tight_cluster(graph, fetches, gpus=4, fraction=0.7):
    """``gpus`` GPUs, none of which holds the step alone: each gets ``fraction`` of the
    one-GPU peak."""
    cluster = Cluster.single_host(gpus=gpus)
    gpu = cluster.devices[1].name
    one = sim.simulate(graph, Placement({op.name: gpu for op in graph.get_operations()}),
                       cluster, fetches=fetches)
    memory = int(max(one.peak_memory.values()) * fraction)
    for d in cluster.devices:
        if d.device_type == "GPU":
            cluster = cluster.replace_device(d.name, memory_bytes=memory)
    return cluster, memory


def chain(n=6, size=128):
    g = tf.Graph()
    with g.as_default():
        x = tf.constant([[1.0] * size] * size, name="x")
        for i in range(n):
            x = tf.matmul(x, x, name=f"m{i}")
    return g


# --- memory-aware placers ---------------------------------------------------------------------

@pytest.mark.parametrize("name", MEMORY_AWARE)
def test_memory_aware_placers_spread_a_model_no_gpu_holds(name):
    w = mlp_training_step(batch=64, layers=4, width=256)
    cluster, _ = tight_cluster(w.graph, w.fetches)
    with pytest.raises(sim.OutOfMemory):  # one GPU cannot hold it...
        gpu = cluster.devices[1].name
        sim.simulate(w.graph, Placement({op.name: gpu for op in w.graph.get_operations()}),
                     cluster, fetches=w.fetches)
    p = placers.get(name, fetches=w.fetches).place(w.graph, cluster)  # ...they spread it
    trace = sim.simulate(w.graph, p, cluster, fetches=w.fetches)
    assert len({d for d in trace.peak_memory if trace.peak_memory[d] > 0}) >= 2


@pytest.mark.parametrize("name", MEMORY_AWARE)
def test_a_model_no_device_can_hold_names_group_bytes_and_free_memory(name):
    g = tf.Graph()
    with g.as_default():
        v = tf.Variable([[1.0] * 256] * 256, name="big")  # 256 KiB
        tf.identity(v, name="use")
    cluster = Cluster.single_host(gpus=2)
    for d in cluster.devices:
        cluster = cluster.replace_device(d.name, memory_bytes=100_000)
    with pytest.raises(placers.PlacementError) as info:
        placers.get(name).place(g, cluster)
    message = str(info.value)
    assert "big" in message and "262144" in message and "largest free memory" in message


def test_a_group_keeps_room_on_its_device_for_its_later_ops():
    # The group {a, big, b}: a (16 bytes) decides its device; big and b (4 KiB each)
    # come later, held to that device.  Another group's 6 KiB may not take their room.
    from core.costs import StaticCostModel
    from placers.cost_model import _Model
    from placers.memory import MemoryLedger
    g = tf.Graph()
    with g.as_default():
        a = tf.relu(tf.constant([1.0] * 4, name="s"), name="a")
        c = tf.constant([1.0] * 1536, name="c")
        tf.relu(c, name="d")  # (c is held until d reads it)
        with g.colocate_with(a.op):
            b = tf.relu(tf.constant([1.0] * 1024, name="big"), name="b")
    model = _Model(g.get_operations(), Cluster.single_host(gpus=1), StaticCostModel())
    index = {op.name: i for i, op in enumerate(model.ops)}
    group = {index[n]: 0 for n in ("a", "big", "b")}
    ledger = MemoryLedger(model, [9000, 9000], group)
    ledger.commit(index["s"], 0)
    ledger.commit(index["a"], 0)
    assert not ledger.fits(index["c"], 0) and ledger.fits(index["c"], 1)
    assert ledger.room(0) == 4096
    assert ledger.fits(index["c"], 0, relaxed=True)  # (it does fit, the room let go)
    ledger.commit(index["c"], 1)
    for name in ("big", "b"):  # the group's own ops take their room
        assert ledger.fits(index[name], 0)
        ledger.commit(index[name], 0)
    assert ledger.room(0) == 0 and ledger.peak[0] == 8192
    del b, c


@pytest.mark.parametrize("name", MEMORY_AWARE)
def test_memory_aware_placers_fit_a_training_step_where_the_expert_placement_fits(name):
    # A small Transformer on four GPUs of 60% of its one-GPU step (the benchmark's
    # `:tight` preset): its loss's gradients, the embedding's summed gradient, come at
    # the end, when the forward pass's activations fill the devices; m_etf and m_sct
    # ran out of room for them before the ledger kept room for what is to come.
    from experiments.bench_placement import expert_placement, make_cluster
    from experiments.workloads import get
    w = get("transformer", batch=2, seq_len=8, layers=1, d_model=16, d_ff=32, heads=2,
            vocab=2000)
    cluster = make_cluster("pcie-1080ti-x4:tight", w, tight_fraction=0.6)
    config = sim.SimConfig(record_oom=True)
    assert not sim.simulate(w.graph, expert_placement(w, cluster), cluster, fetches=w.fetches,
                            config=config).oom_events
    p = placers.get(name, fetches=w.fetch_ops).place(w.graph, cluster)
    assert not sim.simulate(w.graph, p, cluster, fetches=w.fetches, config=config).oom_events


def layers_summed_at_the_end(layers=3, steps=8, size=16384, each_row=False, lead=0):
    """``layers`` rows of ``steps`` ops, row ``l`` pinned to GPU ``l`` (and reading
    row ``l - 1``: the rows run at once, a step apart), each op's output (``size``
    floats) summed per row by an ``AddN``, free to go anywhere (as a weight's gradients
    over the time steps of an RNN), made after every row or, with ``each_row``, after
    its own; ``lead``: a free chain first, over which m_topo reaches the last GPU."""
    g = tf.Graph()
    with g.as_default():
        below = [tf.constant([1.0] * size, name=f"in{t}") for t in range(steps)]
        if lead:
            x = tf.constant([1.0] * size, name="lead")
            for i in range(lead):
                x = tf.relu(x, name=f"lead{i}")
            below = [tf.add(x, b, name=f"in{t}_led") for t, b in enumerate(below)]
        parts = []
        for row in range(layers):
            with g.device(f"/device:GPU:{row}"):
                h = tf.constant([0.0] * size, name=f"h{row}")
                outs, mine = [], []
                for t in range(steps):
                    h = tf.add(h, below[t], name=f"x{row}_{t}")
                    outs.append(h)
                    mine.append(tf.sigmoid(h, name=f"g{row}_{t}"))
            below = outs
            parts.append(mine)
            if each_row:
                tf.add_n(mine, name=f"sum{row}")
        for row in range(layers if not each_row else 0):
            tf.add_n(parts[row], name=f"sum{row}")
    return g


def test_the_ledger_over_a_simulated_schedule_holds_what_devices_send_at_once():
    # Rows on GPU:0-2 send their outputs to their sums on GPU:3 as they are made, all
    # rows at once in the simulator; replayed a row and its sum after another (a
    # topological order, as gnmt's layers come in m_topo's), the ledger held one row's
    # copies at a time on GPU:3.  Over the simulated schedule it holds them all.
    from core.costs import StaticCostModel
    from placers.cost_model import _Model
    from placers.memory import MemoryLedger
    from placers.objective import simulated_memory
    g = layers_summed_at_the_end()
    cluster = Cluster.single_host(gpus=4)
    gpu = [d.name for d in cluster.devices if d.device_type == "GPU"]
    placement = Placement({op.name: gpu[3] if op.name.startswith("sum") else
                           gpu[int(op.name[1])] if op.name[0] in "hxg" and op.name[1].isdigit()
                           else gpu[0] for op in g.get_operations()})
    peaks, schedule = simulated_memory(g, placement, cluster)
    model = _Model(g.get_operations(), cluster, StaticCostModel())
    def row(name):  # inputs first (-1), then each row's ops and its sum
        return int(name[3:]) if name.startswith("sum") else \
            int(name[1]) if name[0] in "hxg" and name[1].isdigit() else -1

    order = sorted(range(len(model.ops)), key=lambda i: (row(model.ops[i].name),
                                                         model.ops[i].name.startswith("sum")))

    def replay(schedule):
        ledger = MemoryLedger(model, [2**40] * len(model.devices), {}, schedule=schedule)
        for i in order:  # inputs, then each row and its sum
            ledger.commit(i, model.dev_index[placement[model.ops[i].name]])
        return ledger.peak[model.dev_index[gpu[3]]]

    row = 8 * 16384 * 4  # one row's outputs
    assert peaks[gpu[3]] >= 2.5 * row  # the simulator: the rows' copies at once
    assert replay(None) < 1.5 * row  # the replay alone: about one row's
    assert replay(schedule) >= peaks[gpu[3]]


def test_m_topo_fits_where_devices_send_one_device_their_outputs_at_once():
    # m_topo puts the sums on the last device, which each row's copies fit, not all
    # rows' at once, as the simulator holds them from their producers' ends (it ran
    # out of memory when the ledger received each copy with its reader).
    g = layers_summed_at_the_end()
    cluster = Cluster.single_host(gpus=4)
    for d in cluster.devices:
        if d.device_type == "GPU":
            cluster = cluster.replace_device(d.name, memory_bytes=int(2.5 * 8 * 16384 * 4))
    placer = placers.get("m_topo", headroom=0.0)
    p = placer.place(g, cluster)
    trace = sim.simulate(g, p, cluster, config=sim.SimConfig(record_oom=True))
    assert not trace.oom_events


def test_m_topo_places_again_over_the_simulated_schedule_where_rows_run_at_once():
    # Each row's sum made after it: the replay, in that order, holds one row's copies
    # at a time on the sums' device, the simulator all of them (the rows run at once):
    # gnmt's case.  The first placement runs out; the second counts over its schedule.
    g = layers_summed_at_the_end(size=4096, each_row=True, lead=8)
    cluster = Cluster.single_host(gpus=4)
    for d in cluster.devices:
        if d.device_type == "GPU":
            cluster = cluster.replace_device(d.name, memory_bytes=2 * 8 * 4096 * 4)
    placer = placers.get("m_topo", headroom=0.0)
    p = placer.place(g, cluster)
    trace = sim.simulate(g, p, cluster, config=sim.SimConfig(record_oom=True))
    assert not trace.oom_events
    assert placer.memory_tries == 2 and placer._ledger.profile is not None


def test_m_topo_fills_devices_in_topological_slices():
    g = chain(8)
    p = placers.get("m_topo").place(g, Cluster.single_host(gpus=2))
    devices = [p[f"m{i}"] for i in range(8)]
    switches = sum(a != b for a, b in zip(devices, devices[1:]))
    assert switches == 1  # one contiguous slice per GPU


def test_m_etf_takes_the_earliest_start_and_keeps_chains_together():
    g = tf.Graph()
    with g.as_default():
        for c in range(2):  # two independent chains: one per GPU
            x = tf.constant([[1.0] * 256] * 256, name=f"x{c}")
            for i in range(3):
                x = tf.matmul(x, x, name=f"c{c}_{i}")
    placer = placers.get("m_etf")
    p = placer.place(g, Cluster.single_host(gpus=2))
    assert {p["c0_0"], p["c0_1"], p["c0_2"]} != {p["c1_0"], p["c1_1"], p["c1_2"]}
    assert len({p["c0_0"], p["c0_1"], p["c0_2"]}) == 1
    assert placer.estimated_step_time > 0


def test_m_sct_favorite_children_come_from_the_lp():
    g = chain(4)
    constraints = placers.resolve(g, Cluster.single_host(gpus=2))
    favorite = favorite_parents(ListScheduler(constraints))
    # a chain: every op's only child is its favorite
    assert [f for f in favorite if f >= 0] == list(range(len(favorite) - 1))
    p = placers.get("m_sct").place(g, Cluster.single_host(gpus=2))
    assert len({p[f"m{i}"] for i in range(4)}) == 1


@settings(max_examples=15)
@given(dags(pins=False), st.sampled_from(MEMORY_AWARE + ("search",)),
       st.randoms(use_true_random=False))
def test_new_placers_are_deterministic_whatever_the_device_order(dag, name, rnd):
    g, _ = dag
    cluster = Cluster.single_host(gpus=3)
    devices = list(cluster.devices)
    rnd.shuffle(devices)
    shuffled = Cluster(cluster.hosts, cluster.tasks, devices, cluster.links, cluster.master)
    options = ({"evaluations": 6, "workers": 1, "start_placers": ("m_etf",)}
               if name == "search" else {})
    p = placers.get(name, **options).place(g, cluster)
    p.validate(g, cluster)
    assert p == placers.get(name, **options).place(g, shuffled)


# --- optimal --------------------------------------------------------------------------------

def enumerate_best(graph, cluster, fetches=None):
    """The least simulated step over every placement of every op (no pins here)."""
    constraints = placers.resolve(graph, cluster)
    groups = constraints.to_place()
    best = math.inf
    for choice in itertools.product(*[g.feasible for g in groups]):
        p = Placement([(op.name, d.name) for g, d in zip(groups, choice) for op in g.ops])
        best = min(best, placers.simulated_step(graph, p, cluster, fetches=fetches))
    return best


@settings(max_examples=8)
@given(float_dags(max_ops=6, control=False), st.integers(1, 2))
def test_optimal_matches_enumeration_within_two_percent(graph, gpus):
    cluster = Cluster.single_host(gpus=gpus)
    placer = placers.get("optimal")
    p = placer.place(graph, cluster)
    found = placers.simulated_step(graph, p, cluster)
    assert found <= enumerate_best(graph, cluster) * 1.02
    assert placer.report["method"] == "branch_and_bound"


def fan(n=8, size=128):
    """``n`` independent matmuls of one constant."""
    g = tf.Graph()
    with g.as_default():
        x = tf.constant([[1.0] * size] * size, name="x")
        for i in range(n):
            tf.matmul(x, x, name=f"m{i}")
    return g


def test_optimal_past_its_limit_points_to_the_limit_and_to_search():
    g = fan(8)
    with pytest.raises(placers.OptimalLimitError, match="search") as info:
        placers.get("optimal", max_evaluations=3).place(g, Cluster.single_host(gpus=3))
    assert "max_evaluations=3" in str(info.value)
    with pytest.raises(placers.OptimalLimitError, match="milp_max_ops=5.*search"):
        placers.get("optimal", max_groups=2, milp_max_ops=5).place(g, Cluster.single_host(gpus=3))


def test_optimal_milp_reports_its_gap_on_larger_graphs():
    g = random_layered_dag(30, width=5)
    placer = placers.get("optimal", max_groups=4, time_limit=2)
    p = placer.place(g, Cluster.single_host(gpus=2))
    p.validate(g, Cluster.single_host(gpus=2))
    assert placer.report["method"] == "milp" and 0 <= placer.report["gap"] <= 1


# --- search ---------------------------------------------------------------------------------

@settings(max_examples=10)
@given(dags(pins=False), st.integers(1, 3), st.randoms(use_true_random=False))
def test_search_evaluates_a_state_as_a_fresh_simulation_does(dag, gpus, rnd):
    # The objective's step time (read from the run's columns, no record made) is the
    # makespan of a fresh simulation's records, to the bit.
    graph, _ = dag
    from placers.objective import step_objective
    from placers.search import _Problem
    cluster = Cluster.single_host(gpus=gpus)
    constraints = placers.resolve(graph, cluster)
    devices = [d.name for d in cluster.devices]
    index = {name: k for k, name in enumerate(devices)}
    state = [index[rnd.choice(g.feasible).name] for g in constraints.to_place()]
    fetches = [rnd.choice(graph.get_operations())] if rnd.random() < 0.5 else None
    problem = _Problem(graph, cluster, step_objective(None, fetches), constraints.previous,
                       constraints, devices)
    placement = problem.placement(state)
    assert placement == Placement([(op.name, devices[k]) for g, k in
                                   zip(constraints.to_place(), state) for op in g.ops])
    assert list(placement) == [op.name for op in graph.get_operations()]
    trace = sim.simulate(graph, placement, cluster, fetches=fetches)
    ends = [r.end for r in trace.ops] + [r.end for r in trace.transfers]
    assert problem.evaluate(state) == max(ends, default=0.0) == trace.step_time


def test_search_is_never_worse_than_its_starts_and_is_deterministic():
    w = mlp_training_step(batch=64, layers=3, width=128)
    cluster = Cluster.single_host(gpus=2)
    runs = []
    for workers in (1, 2):
        placer = placers.get("search", fetches=w.fetches, evaluations=16, workers=workers, seed=3)
        runs.append(placer.place(w.graph, cluster))
        assert placer.stats["best"] <= placer.stats["start"]
        assert placer.stats["evaluations"] <= 16 and placer.stats["evals_per_second"] > 0
    assert runs[0] == runs[1]
    simulated = placers.simulated_step(w.graph, runs[0], cluster, fetches=w.fetches)
    for name in ("m_etf", "cost_model"):
        options = {"fetches": w.fetches} if name.startswith("m_") else {}
        start = placers.get(name, **options).place(w.graph, cluster)
        assert simulated <= placers.simulated_step(w.graph, start, cluster, fetches=w.fetches)


def test_search_starts_from_an_expert_placement():
    g = chain(4)
    cluster = Cluster.single_host(gpus=2)
    gpu = cluster.devices[1].name
    expert = Placement({op.name: gpu for op in g.get_operations()})
    placer = placers.get("search", expert=expert, start_placers=(), evaluations=4, workers=1)
    placer.place(g, cluster)
    assert placer.stats["start_placer"] == "expert"


def test_search_takes_its_objective_as_a_callable():
    g = chain(3)
    cluster = Cluster.single_host(gpus=2)
    cpu = cluster.devices[0].name

    def on_cpu_is_best(graph, placement, cluster):
        return sum(placement[op.name] != cpu for op in graph.get_operations())

    p = placers.get("search", objective=on_cpu_is_best, evaluations=60, workers=1).place(g, cluster)
    assert set(p.to_dict().values()) == {cpu}


def test_search_on_a_dask_address_that_does_not_answer_fails_fast():
    g = chain(2)
    t0 = time.perf_counter()
    with pytest.raises(placers.SearchError, match="127.0.0.1:9"):
        placers.get("search", scheduler="tcp://127.0.0.1:9", connect_timeout=1.0,
                    evaluations=10).place(g, Cluster.single_host(gpus=2))
    assert time.perf_counter() - t0 < 8


def test_search_on_a_dask_cluster_gives_the_local_answer():
    distributed = pytest.importorskip("distributed")
    w = mlp_training_step(batch=16, layers=2, width=32)
    cluster = Cluster.single_host(gpus=2)
    options = dict(fetches=w.fetches, evaluations=10, seed=1)
    local = placers.get("search", workers=1, **options).place(w.graph, cluster)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                  dashboard_address=None) as dask_cluster:
        placer = placers.get("search", scheduler=dask_cluster.scheduler_address, **options)
        assert placer.place(w.graph, cluster) == local


# --- entry points ---------------------------------------------------------------------------

class PluginPlacer(placers.SimplePlacer):
    """A placer another distribution registers."""


def test_placers_registered_by_other_packages_through_entry_points(monkeypatch):
    import importlib.metadata

    real = importlib.metadata.entry_points

    def entry_points(**kw):
        if kw.get("group") == placers.ENTRY_POINT_GROUP:
            group = placers.ENTRY_POINT_GROUP
            return [EntryPoint("plugin_placer", f"{__name__}:PluginPlacer", group),
                    EntryPoint("broken", "no_such_module:X", group),
                    EntryPoint("simple", "no_such_module:X", group)]
        return real(**kw)

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    assert "plugin_placer" in placers.names() and placers.names().count("simple") == 1
    assert isinstance(placers.get("plugin_placer"), PluginPlacer)
    assert isinstance(placers.get("simple"), placers.SimplePlacer)  # not shadowed
    with pytest.raises(placers.PlacerPluginError, match="broken.*no_such_module"):
        placers.get("broken")
    with pytest.raises(placers.UnknownPlacer, match="plugin_placer"):
        placers.get("nope")


# --- the simulator, reached at call time only ------------------------------------------------

def test_placers_do_not_import_the_simulator():
    import subprocess
    import sys
    code = "import sys, placers; placers.get('m_etf'); print('sim' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_memory_aware_placers_place_again_where_the_simulator_runs_out(monkeypatch):
    import placers.objective as objective
    w = mlp_training_step(batch=64, layers=4, width=256)
    cluster, memory = tight_cluster(w.graph, w.fetches)
    calls = []

    def simulated(graph, placement, cluster, fetches=None):
        calls.append(placement)  # the first two checks report GPU:0 over its capacity
        used = {d: 0 for d in placement.devices()}
        if len(calls) <= 2:
            used[cluster.devices[1].name] = 2 * memory
        order = {op.name: (p, p + 1) for p, op in enumerate(graph.get_operations())}
        return used, order

    monkeypatch.setattr(objective, "simulated_memory", simulated)
    placer = placers.get("m_topo", fetches=w.fetches)
    placer.place(w.graph, cluster)
    assert placer.memory_tries == 3 and len(calls) == 3
    # the second run counted over the first's schedule; the third also scaled GPU:0
    # down by its overshoot (half)
    assert placer._ledger.profile is not None
    assert placer._ledger.capacity[1] < memory / 2 <= placer._ledger.capacity[2]
