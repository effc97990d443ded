"""Device.warm_kernel_costs: a kernel right after kernels of its own type costs less
than its calibrated (cold) fixed cost, by its reuse distance (sim.warm_kernels)."""

import numpy as np
import pytest

import core as tf
from core.cluster import Cluster, InvalidCluster
from core.placement import Placement
from core.runtime_model import INTERPRETER
from sim import SimConfig, simulate

CPU = "/job:localhost/replica:0/task:0/device:CPU:0"
COLD, WARM = 10e-6, 2e-6


def device_cluster(warm=None, span=4, overhead=0.0):
    c = Cluster.single_host()
    kwargs = {"kernel_costs": {"Tanh": (COLD, 1.0), "Sigmoid": (COLD, 1.0),
                               "Neg": (COLD, 1.0), "Relu": (COLD, 1.0)},
              "op_overhead": overhead}
    if warm is not None:
        kwargs.update(warm_kernel_costs=warm, warm_span=span)
    return c.replace_device(CPU, **kwargs)


def chain(types, length=8):
    """A chain of tiny ops cycling through ``types``, on the CPU."""
    g = tf.Graph()
    with g.as_default(), tf.device(CPU):
        x = tf.constant(np.ones((2, 2), np.float32), name="x")
        fns = {"Tanh": tf.tanh, "Sigmoid": tf.sigmoid, "Neg": tf.negative, "Relu": tf.relu}
        for i in range(length):
            x = fns[types[i % len(types)]](x)
    return g, Placement({op.name: CPU for op in g.get_operations()})


@pytest.mark.parametrize("config", [None, SimConfig(runtime=INTERPRETER)])
def test_a_chain_of_one_type_runs_warm(config):
    g, p = chain(["Tanh"])
    cold = simulate(g, p, device_cluster(), config=config).step_time
    warm = simulate(g, p, device_cluster({"Tanh": WARM}), config=config).step_time
    # every Tanh right after another but the first, after the constant x (the chain's
    # last Tanh, of the step before, ran before x): distance 1 of a span of 4
    assert cold - warm == pytest.approx((7 + 0.75) * (COLD - WARM), rel=1e-6)


def test_the_saving_shrinks_with_the_types_between():
    warm = {t: WARM for t in ("Tanh", "Sigmoid", "Neg", "Relu")}
    saved = []
    for types in (["Tanh"], ["Tanh", "Sigmoid"], ["Tanh", "Sigmoid", "Neg"],
                  ["Tanh", "Sigmoid", "Neg", "Relu"]):
        g, p = chain(types)
        saved.append(simulate(g, p, device_cluster()).step_time
                     - simulate(g, p, device_cluster(warm, span=3)).step_time)
    # Const x, then the chain; by hand, each op's distance (cyclic) of a span of 3,
    # and what it saves: all of (cold - warm) at 0, 2/3 at 1, 1/3 at 2, none from 3
    per_op = COLD - WARM
    assert saved == pytest.approx([(7 + 2 / 3) * per_op,  # T x8: 1, then 0s
                                   (2 / 3 + 6 * 2 / 3) * per_op,  # T S ...: 2 2 1 1 1 1 1 1
                                   (7 * 1 / 3) * per_op,  # T S N ...: 2 2 3 2 2 2 2 2
                                   0.0], abs=1e-12)  # T S N R ...: 3 or more each


def test_a_type_without_a_warm_cost_and_a_warm_cost_above_the_cold_one_save_nothing():
    g, p = chain(["Tanh"])
    base = simulate(g, p, device_cluster()).step_time
    assert simulate(g, p, device_cluster({"Relu": WARM})).step_time == base
    assert simulate(g, p, device_cluster({"Tanh": 2 * COLD})).step_time == base


def test_warm_costs_are_checked_and_saved_with_the_cluster(tmp_path):
    c = device_cluster({"Tanh": WARM}, span=8)
    again = Cluster.from_dict(c.to_dict())
    assert again.device(CPU).warm_kernel_cost("Tanh") == WARM
    assert again.device(CPU).warm_span == 8 and again.device(CPU).warm_kernel_cost("Neg") is None
    with pytest.raises(InvalidCluster, match="warm_span"):
        device_cluster({"Tanh": WARM}, span=0)
    with pytest.raises(InvalidCluster, match="warm_kernel_costs"):
        device_cluster({"Tanh": -1e-6})
