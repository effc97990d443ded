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
