"""The runtime model: one definition the simulator, the placer's estimate and the
executor share, recorded by a calibrated cluster."""

import numpy as np
import pytest

import core as tf
import placers
import sim
from core.cluster import Cluster, InvalidCluster
from core.hardware import Link
from core.runtime_model import IDEAL, INTERPRETER, TENSORFLOW, RuntimeModel, get_runtime_model


@pytest.mark.parametrize("part", ["dispatch_cores", "copies_on_cores", "step_costs_on_cores"])
def test_a_part_that_refines_serial_dispatch_is_refused_without_it(part):
    with pytest.raises(ValueError, match=f"{part} needs serial_dispatch"):
        RuntimeModel(**{part: True})
    with pytest.raises(ValueError, match="inline_elements needs serial_dispatch"):
        RuntimeModel(inline_elements=16)
    assert getattr(RuntimeModel(serial_dispatch=True, **{part: True}), part)


def test_named_models_and_unknown_names():
    assert get_runtime_model(None) is IDEAL and get_runtime_model("interpreter") is INTERPRETER
    assert get_runtime_model("tensorflow") is TENSORFLOW
    with pytest.raises(ValueError, match=r"unknown runtime model 'cpp'; known: "
                                         r"\['ideal', 'interpreter', 'tensorflow'\]"):
        get_runtime_model("cpp")
    with pytest.raises(ValueError, match="unknown runtime model"):
        sim.SimConfig(runtime="cpp")


def test_crossing_cores_is_for_a_runtime_without_serial_dispatch():
    with pytest.raises(ValueError, match="crossing_cores excludes serial_dispatch"):
        RuntimeModel(serial_dispatch=True, crossing_cores=True)
    assert TENSORFLOW.crossing_cores and not TENSORFLOW.serial_dispatch
    assert RuntimeModel.from_dict(TENSORFLOW.to_dict()) == TENSORFLOW


def test_parts_together_is_for_a_runtime_without_serial_dispatch():
    with pytest.raises(ValueError, match="parts_together excludes serial_dispatch"):
        RuntimeModel(serial_dispatch=True, parts_together=True)
    assert TENSORFLOW.parts_together and not IDEAL.parts_together
    assert not INTERPRETER.parts_together
    assert RuntimeModel.from_dict({**TENSORFLOW.to_dict(), "parts_together": False}) != TENSORFLOW


def test_a_crossing_holds_the_cores_its_links_measured_at_most_its_hosts():
    busy = Link("memcpy:h", "memcpy", 1e9, 1e-4, busy_cores=2.4)
    unmeasured = Link("memcpy:h", "memcpy", 1e9, 1e-4)
    network = Link("network:h", "network", 1e9, 1e-4, busy_cores=2.0)
    assert TENSORFLOW.crossing_cores_of([busy], 8) == 2      # rounded
    assert TENSORFLOW.crossing_cores_of([busy], 1) == 1      # at most the host's
    assert TENSORFLOW.crossing_cores_of([busy.__class__("memcpy:h", "memcpy", 1e9, 1e-4,
                                                        busy_cores=0.2)], 4) == 1  # at least one
    assert TENSORFLOW.crossing_cores_of([unmeasured], 2) == 0  # not measured: none
    assert TENSORFLOW.crossing_cores_of([busy, network], 2) == 0  # between hosts: none
    assert IDEAL.crossing_cores_of([busy], 2) == 0 and INTERPRETER.crossing_cores_of([busy], 2) == 0


def test_the_cheap_op_rule():
    cheap = INTERPRETER.is_cheap
    assert cheap("Add", [(64, 64)] * 3, on_cpu=True)
    assert not cheap("Add", [(64, 65)], on_cpu=True)           # over the limit
    assert not cheap("Add", [(None, 2)], on_cpu=True)          # unknown: not cheap
    assert not cheap("Add", [(2, 2)], on_cpu=False)            # GPU kernels queue
    assert cheap("Variable", [(1 << 20,)], on_cpu=True)        # a variable is its buffer
    assert not IDEAL.is_cheap("Add", [(1,)], on_cpu=True)      # nothing runs inline


def test_a_cluster_keeps_its_runtime_model_through_json_and_replacements(tmp_path):
    c = Cluster.single_host(gpus=1)
    assert c.runtime_model is IDEAL
    calibrated = c.with_runtime_model("interpreter")
    assert calibrated != c and calibrated.runtime_model == INTERPRETER
    assert calibrated.replace_device(c.devices[0].name, op_overhead=1e-6).runtime_model == INTERPRETER
    calibrated.save(tmp_path / "c.json")
    assert Cluster.load(tmp_path / "c.json") == calibrated
    old = c.to_dict()
    del old["runtime_model"]  # a cluster saved before the model was recorded
    assert Cluster.from_dict(old).runtime_model is IDEAL
    with pytest.raises(InvalidCluster, match="runtime_model.*inline_elements needs serial"):
        Cluster.from_dict({**old, "runtime_model": {"name": "x", "inline_elements": 3}})


def _two_task_step():
    spec = {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}
    cluster = Cluster.from_spec(spec, hosts={("worker", 0): "h", ("worker", 1): "h"})
    g = tf.Graph()
    with g.as_default():
        x = tf.constant(np.ones((8, 8), np.float32), name="x")
        fan = []
        for i in range(12):  # independent ops: dispatched one at a time per task, or not
            with tf.device(f"/job:worker/task:{i % 2}"):
                fan.append(tf.tanh(x, name=f"t{i}"))
    placement = placers.SimplePlacer().place(g, cluster)
    return g, placement, cluster, fan


def test_simulate_predicts_the_runtime_the_cluster_was_calibrated_for():
    g, placement, cluster, fetch = _two_task_step()
    ideal = sim.simulate(g, placement, cluster, fetches=fetch)
    calibrated = cluster.with_runtime_model(INTERPRETER)
    interp = sim.simulate(g, placement, calibrated, fetches=fetch)
    explicit = sim.simulate(g, placement, cluster, fetches=fetch,
                            config=sim.SimConfig(runtime=INTERPRETER))
    assert interp.step_time == explicit.step_time != ideal.step_time
    assert interp.meta["runtime_model"] == "interpreter" and ideal.meta["runtime_model"] == "ideal"
    # The placer's estimate follows the same rule: the cluster's model unless told.
    assert placers.estimate_step_time(g, placement, calibrated, fetches=fetch) == \
        placers.estimate_step_time(g, placement, cluster, fetches=fetch, runtime=INTERPRETER)


def _copying_step(update: bool):
    """A step reading a 512 x 512 variable (updating it when ``update``) and reshaping
    the read's product: ``(graph, fetches)``."""
    g = tf.Graph()
    with g.as_default():
        v = tf.Variable(np.ones((512, 512), np.float32), name="v")
        y = tf.reshape(tf.multiply(v.value(), 2.0, name="y"), [512 * 512], name="flat")
        fetches = [y.op]
        if update:
            fetches.append(tf.assign_sub(v, tf.ones([512, 512]) * 0.01, name="update").op)
    return g, fetches


def _step(g, fetches):
    from core.step_ops import step_ops
    return step_ops(g.get_operations(), fetches)[0]


def test_the_interpreters_forwarding_kernels_copy_but_an_unwritten_variables_read():
    g, fetches = _copying_step(update=False)
    assert INTERPRETER.copying_ops(_step(g, fetches)) == {"flat"}  # v/read hands v on
    g, fetches = _copying_step(update=True)
    assert INTERPRETER.copying_ops(_step(g, fetches)) == {"v/read", "flat"}
    assert TENSORFLOW.copying_ops(_step(g, fetches)) == IDEAL.copying_ops(_step(g, fetches)) == set()
    # Saved before the field: an interpreter cluster of then predicts as it did.
    old = {k: v for k, v in INTERPRETER.to_dict().items() if k != "copies_forwarding_ops"}
    assert RuntimeModel.from_dict(old).copies_forwarding_ops is False
    assert RuntimeModel.from_dict(INTERPRETER.to_dict()) == INTERPRETER


def test_a_copying_read_costs_its_copy_in_the_simulator_and_the_placers_estimate():
    from dataclasses import replace
    from core.costs import StaticCostModel
    g, fetches = _copying_step(update=True)
    cluster = Cluster.single_host(cpu_cores=1)
    cpu = cluster.devices[0]
    placement = placers.SimplePlacer().place(g, cluster)
    handed_on = replace(INTERPRETER, copies_forwarding_ops=False)
    model = StaticCostModel()
    read, flat = g.get_operation_by_name("v/read"), g.get_operation_by_name("flat")
    extra = sum(model.copy_time(op, cpu) - model.op_time(op, cpu) for op in (read, flat))
    assert extra > 1e-4  # 1 MiB read and written twice over
    steps = {}
    for runtime in (handed_on, INTERPRETER):
        trace = sim.simulate(g, placement, cluster, fetches=fetches,
                             config=sim.SimConfig(runtime=runtime))
        steps[runtime.copies_forwarding_ops] = trace.step_time
        ops = {r.op: r.end - r.start for r in trace.ops}
        assert (ops["v/read"] == pytest.approx(model.copy_time(read, cpu))) == \
            runtime.copies_forwarding_ops
    # One core, every op in a chain: the step grows by the copies' time.
    assert steps[True] - steps[False] == pytest.approx(extra, rel=0.05)
    estimate = {runtime.copies_forwarding_ops: placers.estimate_step_time(
        g, placement, cluster, fetches=fetches, runtime=runtime)
        for runtime in (handed_on, INTERPRETER)}
    assert estimate[True] - estimate[False] == pytest.approx(extra, rel=0.05)
