"""Tests of core.presets: real machines with their published figures, as Cluster.preset."""

import numpy as np
import pytest

import core as tf
from core.cluster import Cluster, Device, InvalidCluster
from core.costs import StaticCostModel
from core.presets import NETWORKS, PRESETS, UnknownPreset, describe

GPU = "/job:localhost/replica:0/task:0/device:GPU:{}"


def test_presets_lists_the_machines_the_papers_use():
    assert Cluster.presets() == sorted(PRESETS)
    assert {"dgx1-v100", "dgx-a100", "pcie-1080ti-x4"} <= set(Cluster.presets())


@pytest.mark.parametrize("name", sorted(PRESETS))
@pytest.mark.parametrize("hosts", [1, 3])
def test_each_preset_builds_validates_and_round_trips(name, hosts):
    c = Cluster.preset(name, hosts=hosts)
    c.validate()
    assert Cluster.from_dict(c.to_dict()) == c
    assert len(c.hosts) == hosts
    gpus = [d for d in c.devices if not d.is_cpu]
    assert len(gpus) == hosts * PRESETS[name].gpus
    machine = PRESETS[name]
    for d in gpus:
        assert d.flops_for("float32") == machine.gpu.fp32_flops == d.peak_flops
        assert d.flops_for("float16") == machine.gpu.fp16_flops
        assert d.flops_for("float64") == machine.gpu.fp64_flops
        assert d.memory_bytes == machine.gpu.memory_bytes
        assert d.mem_bandwidth == machine.gpu.mem_bandwidth
    assert machine.source in describe(name)


def test_published_figures():
    v100 = Cluster.preset("dgx1-v100").device(GPU.format(0))
    a100 = Cluster.preset("dgx-a100").device(GPU.format(7))
    gtx = Cluster.preset("pcie-1080ti-x4").device(GPU.format(3))
    assert (v100.peak_flops, v100.flops_for("float16"), v100.mem_bandwidth) == (15.7e12, 125e12, 900e9)
    assert (a100.peak_flops, a100.flops_for("float16"), a100.mem_bandwidth) == (19.5e12, 312e12, 1555e9)
    assert gtx.memory_bytes == 11 * 2**30 and round(gtx.peak_flops / 1e12, 1) == 11.3
    assert gtx.flops_for("float16") < gtx.peak_flops / 50  # no tensor cores on Pascal GP102


def test_gpu_to_gpu_routes_follow_the_interconnect():
    dgx = Cluster.preset("dgx-a100")
    route = dgx.route(GPU.format(0), GPU.format(5))
    assert [l.kind for l in route] == ["nvlink"] and route[0].bandwidth == 300e9
    pcie = Cluster.preset("pcie-1080ti-x4")
    assert [l.kind for l in pcie.route(GPU.format(0), GPU.format(1))] == ["pcie", "pcie"]
    multi = Cluster.preset("dgx1-v100", hosts=2, network="25gbe")
    route = multi.route("/job:worker/task:0/gpu:0", "/job:worker/task:1/gpu:3")
    assert [l.kind for l in route] == ["pcie", "network", "network", "pcie"]
    assert route[1].bandwidth == NETWORKS["25gbe"].bandwidth == 25e9 / 8


def test_memory_fraction_is_the_memory_constrained_variant():
    full = Cluster.preset("dgx1-v100")
    quarter = Cluster.preset("dgx1-v100", gpu_memory_fraction=0.25)
    for a, b in zip(full.devices, quarter.devices):
        if a.is_cpu:
            assert a == b
        else:
            assert b.memory_bytes == a.memory_bytes // 4


@pytest.mark.parametrize("kwargs, culprit", [
    ({"hosts": 0}, "hosts"), ({"hosts": -2}, "hosts"), ({"hosts": 1.5}, "hosts"),
    ({"gpu_memory_fraction": 0}, "gpu_memory_fraction"),
    ({"gpu_memory_fraction": 1.5}, "gpu_memory_fraction"),
    ({"gpu_memory_fraction": "half"}, "gpu_memory_fraction"),
])
def test_bad_arguments_name_themselves(kwargs, culprit):
    with pytest.raises(ValueError, match=culprit):
        Cluster.preset("dgx1-v100", **kwargs)


def test_unknown_names_list_the_known_ones():
    with pytest.raises(UnknownPreset) as err:
        Cluster.preset("dgx-9000")
    assert "dgx-9000" in str(err.value) and "dgx1-v100" in str(err.value)
    assert err.value.known == Cluster.presets() and isinstance(err.value, KeyError)
    with pytest.raises(UnknownPreset, match="ib-edr"):
        Cluster.preset("dgx1-v100", hosts=2, network="carrier-pigeon")


def test_dtype_flops_json_validation_and_old_files():
    c = Cluster.preset("pcie-1080ti-x4")
    data = c.to_dict()
    assert data["devices"][1]["dtype_flops"] == {"float16": PRESETS["pcie-1080ti-x4"].gpu.fp16_flops,
                                                 "float64": PRESETS["pcie-1080ti-x4"].gpu.fp64_flops}
    for d in data["devices"]:
        del d["dtype_flops"]  # a file written before the field existed
    old = Cluster.from_dict(data)
    assert all(d.dtype_flops == () and d.flops_for("float16") == d.peak_flops for d in old.devices)
    with pytest.raises(InvalidCluster, match="dtype_flops"):
        c.replace_device(GPU.format(0), dtype_flops={"float16": -1.0})
    with pytest.raises(InvalidCluster, match="dtype_flops"):
        Device(**{**vars(c.devices[0]), "dtype_flops": 3})


def test_cost_model_reads_the_rate_of_the_ops_dtype():
    gpu = Cluster.preset("dgx1-v100").device(GPU.format(0))
    times = {}
    for dtype in (np.float16, np.float32, np.float64):
        g = tf.Graph()
        with g.as_default():
            a = tf.constant(np.ones((4096, 4096), dtype))
            mm = tf.matmul(a, a)
        times[dtype] = StaticCostModel().op_time(mm.op, gpu)
    assert times[np.float16] < times[np.float32] < times[np.float64]
    # The roofline's compute term follows the dtype's rate.
    flops = 2.0 * 4096 ** 3
    assert times[np.float64] - times[np.float32] > flops / 7.8e12 - flops / 15.7e12 - 1e-4
