"""Presets of real machines: the GPU servers and networks of the placement literature,
with their published figures (:meth:`core.cluster.Cluster.preset` builds them).

Each :class:`MachinePreset` is one server (its GPUs, their interconnect, its CPUs and
host memory); :class:`NetworkPreset` is what joins several of them.  Every figure says
where it is from: the vendor's datasheet or whitepaper, or derived from one (a CPU
core's peak from its clock and its vector units), or *assumed* where no document
publishes it (latencies of a copy, the host of a consumer-card server).  Rates are the
vendor's peaks (bytes/s per direction for links); a calibration run of the lab's runtime
on the real machine measures what a kernel reaches.

How the cluster model maps the hardware (see :mod:`core.cluster`): each GPU has its own
PCIe link to the host; GPUs of one server talk over the host's ``nvlink`` link when
the server has NVLink or NVSwitch (one shared link per host, at the bandwidth one GPU
pair gets: concurrent GPU-to-GPU copies queue on it, which understates an NVSwitch's
aggregate bandwidth), else through both GPUs' PCIe links; servers talk over each
host's ``network`` link.

>>> sorted(PRESETS)
['dgx-a100', 'dgx1-v100', 'pcie-1080ti-x4']
>>> c = build("dgx1-v100")
>>> [d.device_type for d in c.devices].count("GPU"), c.nvlink
(8, True)
>>> gpu = c.devices[1]
>>> gpu.flops_for("float32") / 1e12, gpu.flops_for("float16") / 1e12, gpu.memory_bytes / 2**30
(15.7, 125.0, 32.0)
>>> build("dgx1-v100", gpu_memory_fraction=0.25).devices[1].memory_bytes / 2**30
8.0
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, replace

from core.cluster import Cluster
from core.hardware import GiB

__all__ = ["GPUModel", "MachinePreset", "NetworkPreset", "PRESETS", "NETWORKS", "UnknownPreset",
           "build", "names", "describe"]

GB = 1e9  # vendors quote bandwidths in decimal gigabytes


class UnknownPreset(KeyError):
    """A preset (or network) name that does not exist (``name``, ``known``)."""

    def __init__(self, name, known, what: str = "machine preset"):
        self.name, self.known = name, sorted(known)
        super().__init__(f"unknown {what} {name!r}; known: {self.known}")

    def __str__(self) -> str:
        return self.args[0]


@dataclass(frozen=True)
class GPUModel:
    """One GPU model's peaks: FLOP/s per dtype (float16 on tensor cores where the card
    has them), memory bandwidth (bytes/s) and capacity (bytes); ``source`` names the
    document each figure is from."""

    name: str
    fp32_flops: float
    fp16_flops: float
    fp64_flops: float
    mem_bandwidth: float
    memory_bytes: int
    source: str


@dataclass(frozen=True)
class NetworkPreset:
    """A network between hosts: bandwidth per direction (bytes/s), latency (seconds)."""

    name: str
    bandwidth: float
    latency: float
    source: str


@dataclass(frozen=True)
class MachinePreset:
    """One server: ``gpus`` GPUs of ``gpu``, joined by ``gpu_link`` (``"nvlink"``,
    ``"nvswitch"`` or ``"pcie"``) at ``gpu_link_bandwidth`` per direction for one pair;
    each GPU on a PCIe link of ``pcie_bandwidth``; ``cpu_cores`` cores of
    ``cpu_core_flops`` (float32, one core) sharing ``cpu_mem_bandwidth``; host memory;
    the default ``network`` between several such hosts."""

    name: str
    description: str
    gpu: GPUModel
    gpus: int
    gpu_link: str
    gpu_link_bandwidth: float
    gpu_link_latency: float
    pcie_bandwidth: float
    pcie_latency: float
    cpu_cores: int
    cpu_core_flops: float
    cpu_mem_bandwidth: float
    host_memory_bytes: int
    network: str
    source: str


# --- GPUs --------------------------------------------------------------------------------

V100_SXM2_32GB = GPUModel(
    "Tesla V100 SXM2 32GB", fp32_flops=15.7e12, fp16_flops=125e12, fp64_flops=7.8e12,
    mem_bandwidth=900 * GB, memory_bytes=32 * GiB,
    source="NVIDIA Tesla V100 datasheet (2018), SXM2 column: FP64 7.8, FP32 15.7, "
           "Tensor 125 TFLOPS; HBM2 900 GB/s; 32 GB")

A100_SXM4_40GB = GPUModel(
    "A100 SXM4 40GB", fp32_flops=19.5e12, fp16_flops=312e12, fp64_flops=9.7e12,
    mem_bandwidth=1555 * GB, memory_bytes=40 * GiB,
    source="NVIDIA A100 Tensor Core GPU datasheet (2020), A100 40GB SXM column: FP64 9.7, "
           "FP32 19.5, FP16 Tensor Core 312 TFLOPS; HBM2 1,555 GB/s; 40 GB "
           "(the lab has no TF32 dtype: float32 gets the FP32 figure)")

GTX_1080_TI = GPUModel(
    "GeForce GTX 1080 Ti", fp32_flops=3584 * 2 * 1.582e9, fp16_flops=3584 * 2 * 1.582e9 / 64,
    fp64_flops=3584 * 2 * 1.582e9 / 32, mem_bandwidth=484 * GB, memory_bytes=11 * GiB,
    source="NVIDIA GeForce GTX 1080 Ti specifications page: 3584 CUDA cores, 1582 MHz boost "
           "(FP32 = 2 x cores x clock = 11.3 TFLOPS), 11 GB GDDR5X, 484 GB/s; FP16 1/64 and "
           "FP64 1/32 of FP32 from the CUDA C++ Programming Guide's throughput table for "
           "compute capability 6.1 (no tensor cores)")


# --- networks ------------------------------------------------------------------------------

NETWORKS: dict[str, NetworkPreset] = {n.name: n for n in (
    NetworkPreset("10gbe", 10e9 / 8, 50e-6,
                  "IEEE 802.3ae line rate; latency assumed (a TCP round through the kernel)"),
    NetworkPreset("25gbe", 25e9 / 8, 25e-6,
                  "IEEE 802.3by line rate; latency assumed (a TCP round through the kernel)"),
    NetworkPreset("100gbe", 100e9 / 8, 20e-6,
                  "IEEE 802.3ba/bm line rate; latency assumed (a TCP round through the kernel)"),
    NetworkPreset("ib-edr", 100e9 / 8, 0.6e-6,
                  "InfiniBand EDR 100 Gb/s; NVIDIA (Mellanox) ConnectX-5 datasheet: "
                  "sub-600 ns latency"),
    NetworkPreset("ib-hdr", 200e9 / 8, 0.6e-6,
                  "InfiniBand HDR 200 Gb/s; NVIDIA (Mellanox) ConnectX-6 datasheet: "
                  "600 ns latency"),
)}


# --- servers -------------------------------------------------------------------------------

PRESETS: dict[str, MachinePreset] = {m.name: m for m in (
    MachinePreset(
        "dgx1-v100", "NVIDIA DGX-1 with 8 Tesla V100 SXM2 32GB, NVLink hybrid cube-mesh",
        V100_SXM2_32GB, gpus=8, gpu_link="nvlink", gpu_link_bandwidth=50 * GB,
        gpu_link_latency=5e-6, pcie_bandwidth=16 * GB, pcie_latency=10e-6,
        cpu_cores=40, cpu_core_flops=2.2e9 * 32, cpu_mem_bandwidth=2 * 4 * 2133e6 * 8,
        host_memory_bytes=512 * GiB, network="ib-edr",
        source="NVIDIA DGX-1 datasheet (2018): 8x V100 (256 GB GPU memory), dual 20-core "
               "Xeon E5-2698 v4 2.2 GHz, 512 GB DDR4-2133, 4x IB EDR + dual 10 GbE. "
               "DGX-1 System Architecture whitepaper (WP-08437-002): NVLink 2.0 at 25 GB/s "
               "per direction per link, six links per V100 in a hybrid cube-mesh, so a "
               "neighbouring pair shares one or two links (here: two, 50 GB/s); each GPU "
               "on PCIe 3.0 x16 (16 GB/s per direction).  Derived: a core's float32 peak "
               "= 2.2 GHz x 32 (two AVX2 FMA units); memory = 2 sockets x 4 channels x "
               "DDR4-2133 x 8 bytes.  Latencies assumed."),
    MachinePreset(
        "dgx-a100", "NVIDIA DGX A100 with 8 A100 SXM4 40GB, NVLink 3 through six NVSwitches",
        A100_SXM4_40GB, gpus=8, gpu_link="nvswitch", gpu_link_bandwidth=300 * GB,
        gpu_link_latency=5e-6, pcie_bandwidth=32 * GB, pcie_latency=10e-6,
        cpu_cores=128, cpu_core_flops=2.25e9 * 32, cpu_mem_bandwidth=2 * 8 * 3200e6 * 8,
        host_memory_bytes=1024 * GiB, network="ib-hdr",
        source="NVIDIA DGX A100 datasheet (2020): 8x A100 40GB (320 GB), 6 NVSwitches "
               "(4.8 TB/s bidirectional), dual AMD EPYC 7742 (128 cores, 2.25 GHz base), "
               "1 TB memory, 8x single-port ConnectX-6 200 Gb/s HDR InfiniBand. A100 "
               "datasheet: NVLink 600 GB/s per GPU (300 GB/s per direction, any pair "
               "through the switches), PCIe Gen4 64 GB/s (32 per direction).  Derived: a "
               "core's float32 peak = 2.25 GHz x 32 (two 256-bit FMA units); memory = 2 "
               "sockets x 8 channels x DDR4-3200 x 8 bytes.  Latencies assumed."),
    MachinePreset(
        "pcie-1080ti-x4", "A 4-GPU PCIe server with GeForce GTX 1080 Ti 11GB cards "
        "(Baechi's and Placeto's setting: consumer cards, no NVLink)",
        GTX_1080_TI, gpus=4, gpu_link="pcie", gpu_link_bandwidth=16 * GB,
        gpu_link_latency=10e-6, pcie_bandwidth=16 * GB, pcie_latency=10e-6,
        cpu_cores=20, cpu_core_flops=2.2e9 * 32, cpu_mem_bandwidth=2 * 4 * 2133e6 * 8,
        host_memory_bytes=128 * GiB, network="25gbe",
        source="GPU: see GTX_1080_TI; PCIe 3.0 x16 per card (16 GB/s per direction, PCI-SIG). "
               "Assumed (no paper publishes it): a dual 10-core Xeon E5-2630 v4 class host "
               "(2.2 GHz, AVX2), 128 GB DDR4-2133, a 25 GbE card; latencies assumed."),
)}


def names() -> list[str]:
    """The machine presets' names, sorted."""
    return sorted(PRESETS)


def describe(name: str) -> str:
    """One line on the preset and where its figures come from.

    >>> describe("dgx-a100").startswith("NVIDIA DGX A100")
    True
    """
    return f"{_preset(name).description}. Sources: {_preset(name).source}"


def _preset(name: str) -> MachinePreset:
    if name not in PRESETS:
        raise UnknownPreset(name, PRESETS)
    return PRESETS[name]


def build(name: str, hosts: int = 1, gpu_memory_fraction: float | None = None,
          network: str | None = None) -> Cluster:
    """The cluster of ``hosts`` servers of preset ``name``.

    One host is task ``/job:localhost/replica:0/task:0`` (as
    :meth:`Cluster.single_host`); several are tasks ``/job:worker/task:i`` on hosts
    ``host<i>``, joined by ``network`` (a name of :data:`NETWORKS`; default: the
    preset's).  ``gpu_memory_fraction`` (in (0, 1]) keeps that share of each GPU's memory,
    as TensorFlow's ``per_process_gpu_memory_fraction``: the memory-constrained setting
    of the placement papers, where a model does not fit on one GPU.

    Raises :class:`UnknownPreset` (listing the known names) and ValueError naming a bad
    ``hosts`` or ``gpu_memory_fraction``.

    >>> c = build("pcie-1080ti-x4", hosts=2, network="100gbe")
    >>> sorted({t.host for t in c.tasks}), c.links["network:host0"].bandwidth / 1e9
    (['host0', 'host1'], 12.5)
    """
    machine = _preset(name)
    if not isinstance(hosts, numbers.Integral) or isinstance(hosts, bool) or hosts < 1:
        raise ValueError(f"hosts must be a positive integer, not {hosts!r}")
    fraction = 1.0 if gpu_memory_fraction is None else gpu_memory_fraction
    if not isinstance(fraction, numbers.Real) or not 0 < fraction <= 1:
        raise ValueError(f"gpu_memory_fraction must be in (0, 1], not {gpu_memory_fraction!r}")
    net_name = network or machine.network
    if net_name not in NETWORKS:
        raise UnknownPreset(net_name, NETWORKS, "network")
    net, gpu = NETWORKS[net_name], machine.gpu
    figures = dict(
        cpu_flops=machine.cpu_core_flops, cpu_mem_bandwidth=machine.cpu_mem_bandwidth,
        host_memory_bytes=machine.host_memory_bytes, gpu_flops=gpu.fp32_flops,
        gpu_mem_bandwidth=gpu.mem_bandwidth, gpu_memory_bytes=int(gpu.memory_bytes * fraction),
        pcie_bandwidth=machine.pcie_bandwidth, pcie_latency=machine.pcie_latency,
        nvlink_bandwidth=machine.gpu_link_bandwidth, nvlink_latency=machine.gpu_link_latency,
        network_bandwidth=net.bandwidth, network_latency=net.latency)
    nvlink = machine.gpu_link in ("nvlink", "nvswitch")
    if hosts == 1:
        cluster = Cluster.single_host(gpus=machine.gpus, cpu_cores=machine.cpu_cores,
                                      nvlink=nvlink, **figures)
    else:
        spec = {"worker": [f"host{i}:2222" for i in range(hosts)]}
        cluster = Cluster.from_spec(spec, gpus_per_task=machine.gpus, cpu_cores=machine.cpu_cores,
                                    nvlink=nvlink, **figures)
    gpu_rates = {"float16": gpu.fp16_flops, "float64": gpu.fp64_flops}
    cpu_rates = {"float64": machine.cpu_core_flops / 2}  # half the lanes of a vector
    devices = [replace(d, dtype_flops=cpu_rates if d.is_cpu else gpu_rates)
               for d in cluster.devices]
    return Cluster(cluster.hosts, cluster.tasks, devices, cluster.links, cluster.master,
                   cluster.nvlink)
