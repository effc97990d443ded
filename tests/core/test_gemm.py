"""A float matrix product by its BLAS's two paths (:class:`core.gemm.GemmCosts`): the
model, a device's ``gemm_costs``, the cost model's use of them, and their calibration."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, strategies as st

import core as tf
from core.cluster import Cluster, InvalidCluster
from core.costs import StaticCostModel, gemm_parts
from core.dtypes import float32
from core.gemm import GemmCosts
from core.ops import TensorSpec, get_op_def
from runtime.calibrate_gemm import direct_limit, fit_packed, jump_at, transposed_direct_outputs

COSTS = GemmCosts(direct_macs=1_000_000, direct_flops=1e11, transposed_direct_outputs=1200,
                  packed_flops=1e11, per_packed_element=3e-10, per_output_element=1e-10)
dims = st.integers(1, 600)


@given(m=dims, k=dims, n=dims, transposed=st.booleans())
def test_a_product_takes_one_path_and_pays_its_terms(m, k, n, transposed):
    seconds = COSTS.seconds(m, k, n, transposed)
    arithmetic = 2.0 * m * k * n / 1e11
    if COSTS.takes_direct(m, k, n, transposed):
        assert m * k * n <= 1_000_000 and (not transposed or m * n <= 1200)
        assert seconds == pytest.approx(arithmetic) and COSTS.memory_seconds(m, k, n, transposed) == 0
    else:
        memory = k * n * 3e-10 + m * n * 1e-10
        assert COSTS.memory_seconds(m, k, n, transposed) == pytest.approx(memory)
        assert seconds == pytest.approx(arithmetic + memory)


def test_past_the_direct_kernel_a_product_of_few_rows_costs_twice_per_flop():
    """The mechanism the model is for: the same arithmetic just past the limit pays
    for packing the whole second operand."""
    below, above = COSTS.seconds(16, 128, 488), COSTS.seconds(16, 128, 500)
    assert above / 500 > 1.9 * below / 488


@pytest.mark.parametrize("bad", [
    {"direct_flops": 0.0}, {"packed_flops": -1.0}, {"packed_flops": math.inf},
    {"per_packed_element": -1e-10}, {"direct_macs": math.nan}, {"per_output_element": "x"}])
def test_figures_that_cannot_be_a_gemm_are_refused(bad):
    figures = {**COSTS.__dict__, **bad}
    with pytest.raises(ValueError, match=next(iter(bad))):
        GemmCosts(**figures)


def test_the_figures_round_trip_through_a_tuple_and_a_cluster_file(tmp_path):
    assert GemmCosts.from_tuple(list(COSTS.as_tuple())) == COSTS
    with pytest.raises(ValueError, match="takes 6 figures"):
        GemmCosts.from_tuple((1.0, 2.0))
    cluster = Cluster.single_host()
    cpu = cluster.devices[0]
    assert cpu.gemm is None and cpu.gemm_costs == ()
    cluster = cluster.replace_device(cpu.name, gemm_costs=COSTS)   # a GemmCosts or its tuple
    assert cluster.devices[0].gemm == COSTS
    cluster.save(tmp_path / "c.json")
    assert Cluster.load(tmp_path / "c.json").devices[0].gemm == COSTS


def test_a_device_with_malformed_gemm_costs_is_an_invalid_cluster():
    cluster = Cluster.single_host()
    with pytest.raises(InvalidCluster, match="gemm_costs"):
        cluster.replace_device(cluster.devices[0].name, gemm_costs=(1.0, 2.0, 3.0))
    with pytest.raises(InvalidCluster, match="gemm_costs.*packed_flops"):
        cluster.replace_device(cluster.devices[0].name,
                               gemm_costs=(1e6, 1e11, 0, 0.0, 3e-10, 1e-10))


def _product(m, k, n, dtype=float32, transpose_b=False):
    g = tf.Graph()
    with g.as_default():
        a = tf.zeros([m, k], dtype=dtype)
        b = tf.zeros([n, k] if transpose_b else [k, n], dtype=dtype)
        return tf.matmul(a, b, transpose_b=transpose_b).op


def test_the_cost_model_prices_a_float32_matmul_by_the_devices_gemm_costs():
    cluster = Cluster.single_host()
    plain = cluster.devices[0]
    dev = cluster.replace_device(plain.name, gemm_costs=COSTS,
                                 kernel_costs={"MatMul": (2e-6, 1.5)}).devices[0]
    model = StaticCostModel()
    for m, k, n, tb in [(16, 128, 488, False), (16, 128, 500, False), (4, 256, 192, True),
                        (256, 256, 256, False)]:
        op = _product(m, k, n, transpose_b=tb)
        expected = dev.op_overhead + 2e-6 + 1.5 * COSTS.seconds(m, k, n, tb) / dev.intra_op_speedup
        assert model.op_time(op, dev) == pytest.approx(expected)
        moved, memory = model.memory_traffic(op, dev)
        assert memory == pytest.approx(1.5 * COSTS.memory_seconds(m, k, n, tb) / dev.intra_op_speedup)
    # another dtype, another op, a device without the figures: the roofline as before
    double = _product(256, 256, 256, dtype=tf.float64)
    assert model.op_time(double, dev) == pytest.approx(
        model.op_time(double, plain.replace_kernel_costs({"MatMul": (2e-6, 1.5)})))
    assert gemm_parts(get_op_def("Add"), [TensorSpec(float32, (4, 4))] * 2, {}, COSTS) is None
    assert gemm_parts(get_op_def("MatMul"), [TensorSpec(float32, (2, 4, 4))] * 2, {}, COSTS) is None


def test_a_transposed_first_operand_is_the_product_of_its_transpose():
    a, b = TensorSpec(float32, (128, 16)), TensorSpec(float32, (128, 512))
    assert gemm_parts(get_op_def("MatMul"), [a, b], {"transpose_a": True}, COSTS) == (
        COSTS.seconds(16, 128, 512), COSTS.memory_seconds(16, 128, 512))


# -- calibration, on timers with a known answer ------------------------------------------

def _blas(costs: GemmCosts, fixed: float = 2e-6):
    """A timer of a BLAS that behaves exactly as ``costs`` says."""
    return lambda m, k, n, transposed=False: fixed + costs.seconds(m, k, n, transposed)


def test_the_bisections_find_the_limits_of_a_blas_with_a_direct_kernel():
    timer = _blas(COSTS)
    limit = direct_limit(timer, 2e-6)
    assert 0.99e6 <= limit <= 1e6
    found = transposed_direct_outputs(timer, 2e-6, COSTS)
    assert 1150 <= found <= 1200


def test_a_blas_without_a_direct_kernel_has_no_limits():
    packed_only = GemmCosts(0, 1e11, 0, 1e11, 3e-10, 1e-10)
    assert direct_limit(_blas(packed_only), 2e-6) == 0
    assert transposed_direct_outputs(_blas(packed_only), 2e-6, COSTS) == 0
    assert jump_at(lambda n: 1.0, 1, 100) is None


def test_the_packed_fit_recovers_its_terms_and_none_is_negative():
    from runtime.calibrate_gemm import PACKED_SHAPES
    samples = [(m, k, n, COSTS.seconds(m, k, n)) for m, k, n in PACKED_SHAPES]
    per_flop, per_b, per_c = fit_packed(samples)
    assert per_flop == pytest.approx(1e-11, rel=1e-6)
    assert per_b == pytest.approx(3e-10, rel=1e-6) and per_c == pytest.approx(1e-10, rel=1e-6)
    # arithmetic alone: no memory term comes out negative to make up for noise
    noisy = [(m, k, n, 2.0 * m * k * n * 1e-11 * (1.05 if i % 2 else 0.95))
             for i, (m, k, n) in enumerate(PACKED_SHAPES)]
    assert min(fit_packed(noisy)) >= 0


def test_this_machines_calibration_gives_a_usable_model():
    """Whatever the BLAS: positive rates, limits within the probed sizes, and a packed
    product's time ordered by its size (figures checked against measured products in
    ``docs/probes/gemm_paths_probe.py``, not here: timings are the benchmarks')."""
    from runtime.calibrate_gemm import measure_gemm_costs
    costs = measure_gemm_costs(quick=True)
    assert costs.packed_flops > 1e8 and costs.direct_flops > 1e8
    assert 0 <= costs.direct_macs <= 16 * 128 * 1024
    assert costs.seconds(512, 512, 512) > costs.seconds(256, 256, 256) > 0
