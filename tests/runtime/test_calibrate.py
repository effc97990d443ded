"""Calibration writes a loadable Cluster JSON with measured, positive figures."""

from __future__ import annotations

import pytest

from core.cluster import Cluster, usable_cpu_cores
from runtime.calibrate import (calibrate, measure_bandwidth_curve, measure_memcpy,
                               measure_memory_bandwidth, measure_matmul_rate,
                               measure_matmul_rates,
                               measure_lock_wakeup, measure_op_overhead, measure_pcie,
                               measure_shared_bandwidth)


def test_quick_calibration_writes_a_loadable_cluster(tmp_path):
    base = Cluster.single_host(cpu_cores=2)
    path = tmp_path / "cluster.json"
    measured = calibrate(base, quick=True, path=path)
    loaded = Cluster.load(path)
    assert loaded == measured
    cpu = loaded.devices[0]
    assert cpu.peak_flops > 0 and cpu.mem_bandwidth > 0 and cpu.op_overhead > 0
    assert cpu.intra_op_speedup >= 1
    assert cpu.peak_flops != base.devices[0].peak_flops  # measured, not the preset
    memcpy = loaded.links["memcpy:host0"]
    assert memcpy.bandwidth > 0 and memcpy.latency >= 0
    assert loaded.links["network:host0"] == base.links["network:host0"]  # kept
    # The memory rate by working set, and (two cores here) what kernels at once share.
    assert len(cpu.bandwidth_curve) >= 2 and cpu.mem_bandwidth == cpu.bandwidth_curve[-1][1]
    # The convolutions' window gathering: a tap's loop, and its elements.
    per_tap, per_element = cpu.window_copy_costs
    assert 0 < per_tap < 1e-6 and 0 <= per_element < per_tap
    if usable_cpu_cores() >= 2:
        assert len(loaded.hosts[0].shared_bandwidth) == len(cpu.bandwidth_curve)
    # An in-process step's own cost, before its first op; how late a waiting thread
    # gets the interpreter's lock.
    assert 0 < loaded.tasks[0].step_overhead < 0.01
    assert 0 < loaded.tasks[0].lock_wakeup < 0.01


def test_the_cpu_figures_come_from_the_block_of_the_median_dispatch(monkeypatch):
    import sys
    calibration = sys.modules["runtime.calibrate"]  # (the package's name is the function)
    blocks = iter([5e-6, 2e-6, 3e-6])  # a block in a slow spell, a fast one, a usual one
    asked = []

    def block(device, quick, kernel_costs):
        asked.append(quick)
        dispatch = next(blocks)
        return {"op_overhead": dispatch, "peak_flops": dispatch * 1e16}
    monkeypatch.setattr(calibration, "measure_cpu_figures", block)
    cpu = calibrate(Cluster.single_host(cpu_cores=1), quick=True, blocks=3).devices[0]
    # every figure from the one block: its dispatch and its rate
    assert cpu.op_overhead == 3e-6 and cpu.peak_flops == pytest.approx(3e10)
    assert asked == [True] * 3
    blocks = iter([4e-6])
    assert calibrate(Cluster.single_host(cpu_cores=1), quick=True).devices[0].op_overhead == 4e-6
    with pytest.raises(ValueError, match="blocks"):
        calibrate(Cluster.single_host(cpu_cores=1), quick=True, blocks=0)


def test_each_gpu_gets_the_figures_measured_on_the_gpu_of_its_index(monkeypatch):
    """With a real GPU (faked here) every GPU device of the cluster gets the figures
    measured on this process's GPU of its index, once per index, and the CPU keeps
    its own."""
    import sys

    import runtime.calibrate_gpu as calibrate_gpu
    calibration = sys.modules["runtime.calibrate"]
    asked = []

    def gpu_figures(device, quick):
        asked.append((device.index, quick))
        return {"peak_flops": 1e13 + device.index, "op_overhead": 2e-5,
                "alloc_costs": ((1024, 0.0), (1 << 16, 1e-4)),
                "kernel_costs": {"Add": (1.5e-4, 1.0), "*": (1.6e-4, 1.0)}}
    monkeypatch.setattr(calibration, "_real_gpu", lambda: True)
    monkeypatch.setattr(calibration, "measure_pcie", lambda *args: (2e10, 1e-5))
    monkeypatch.setattr(calibration, "measure_cpu_figures",
                        lambda device, quick, kernel_costs: {"op_overhead": 3e-6})
    monkeypatch.setattr(calibrate_gpu, "measure_gpu_figures", gpu_figures)
    cluster = calibrate(Cluster.single_host(gpus=2, cpu_cores=1), quick=True)
    cpu, gpu0, gpu1 = cluster.devices
    assert asked == [(0, True), (1, True)]
    assert (gpu0.peak_flops, gpu1.peak_flops) == (1e13, 1e13 + 1)
    assert gpu1.kernel_cost("Add") == (1.5e-4, 1.0) and gpu1.alloc_costs[1] == (1 << 16, 1e-4)
    assert cpu.op_overhead == 3e-6 and gpu0.op_overhead == 2e-5
    assert cluster.links[f"pcie:{gpu1.name}"].bandwidth == 2e10


def test_the_dispatch_per_op_is_measured_untraced_between_the_kernels():
    from runtime.calibrate_kernels import _fastest_kernels, _traced_steps, untraced_dispatch
    graph, traces = _traced_steps(4, 3, None)
    kernels = _fastest_kernels(traces)
    assert len(kernels) == len(traces[0].ops) > 100
    assert 0 <= untraced_dispatch(4, kernels, steps=3) < 1e-3  # (0: hidden by noise)


def test_the_bandwidth_curves_time_each_size_given():
    sizes = (1 << 12, 1 << 16)
    alone, shared = measure_bandwidth_curve(sizes, repeat=2), measure_shared_bandwidth(sizes, 2)
    assert [n for n, _ in alone] == [12 * s for s in sizes]
    assert [n for n, _ in shared] == [24 * s for s in sizes]
    assert all(rate > 0 for _, rate in alone + shared)


def test_the_speed_up_s_two_rates_are_timed_in_turns(monkeypatch):
    # The one-thread and the multithreaded products alternate, so a spell of other
    # work on the second core slows both sides of the ratio, not only one.
    import runtime.kernels as kernels
    real = kernels.get_kernel("MatMul", "CPU")
    calls = []

    def recording(ctx, inputs, attrs):
        calls.append(ctx.intra_op_threads)
        return real(ctx, inputs, attrs)
    monkeypatch.setattr(kernels, "get_kernel", lambda op, device: recording)
    single, multi = measure_matmul_rates(2, n=64, repeat=3)
    assert single > 0 and multi > 0
    assert calls == [1, 2] + [1, 2] * 3
    calls.clear()
    assert measure_matmul_rates(1, n=64, repeat=3)[0] > 0 and calls == [1] * 4


def test_each_measurement_is_positive():
    assert measure_matmul_rate(1, n=64, repeat=2) > 0
    assert measure_memory_bandwidth(1 << 20, repeat=2) > 0
    assert 0 < measure_op_overhead(ops=10, repeat=2) < 0.01
    assert 0 < measure_lock_wakeup(batches=2, handoffs=20) < 0.01
    bandwidth, latency = measure_memcpy(1 << 20, repeat=2)
    assert bandwidth > 0 and latency >= 0
    assert measure_pcie() is None or measure_pcie()[0] > 0


def test_distributed_figures_are_positive_and_load(tmp_path):
    import runtime
    from experiments.backends import this_host_cluster
    from runtime.calibrate import calibrate_distributed

    base = this_host_cluster()
    path = tmp_path / "cluster.json"
    with runtime.LocalCluster({"ps": 1, "worker": 2}) as local:
        measured, figures = calibrate_distributed(base, local, quick=True, path=path)
    assert Cluster.load(path) == measured
    for t in measured.tasks:
        assert t.step_overhead > 0 and t.part_overhead >= 0
    assert figures["part_overhead"] >= 0 and set(figures["step_samples"]) == {0, 1, 2}
    link = measured.links["memcpy:localhost"]
    assert link.latency > 0 and link.bandwidth > 0
    # The measured sizes, the smallest at the chain's latency (see size_costs).
    samples = figures["transfer_samples"]
    assert [n for n, _ in link.size_costs] == sorted(samples) and len(samples) >= 3
    assert link.time(min(samples)) == pytest.approx(link.latency + min(samples) / link.bandwidth)
    assert all(link.time(n) == max(t, link.latency) for n, t in samples.items()
               if n != min(samples))
    assert all(0 < d.op_overhead < 0.01 for d in measured.devices if d.is_cpu)
    # The servers' CPU per crossing, by size (the interpreter runtime model uses it).
    assert set(figures["crossing_cpu"]) == {n for n, _, _ in link.cpu_costs} == {4, 64 << 10}
    assert all(0 <= sent < 0.01 and 0 <= taken < 0.01 for _, sent, taken in link.cpu_costs)


def test_crossing_cpu_is_what_the_crossings_add_to_each_ends_cpu_per_crossing():
    import contextlib

    from runtime.calibrate import measure_crossing_cpu

    class Servers:  # stands in for a LocalCluster: each step adds to its tasks' CPU
        used = {("ps", 0): 0.0, ("worker", 0): 0.0}

        def target(self, job, index):
            return f"grpc://{job}-{index}"

        def cpu_seconds(self, task):
            return self.used[task]

    servers = Servers()

    @contextlib.contextmanager
    def open_session(target, graph, ops):
        # 1 ms a step on each task; per crossing, 10 us on the sender and 30 us plus
        # 1 us per KiB on the receiver
        crossing = [op for op in ops if op.inputs and op.device != op.inputs[0].op.device]
        kib = sum(op.inputs[0].shape[0] * 4 / 1024 for op in crossing)

        def run():
            servers.used[("ps", 0)] += 1e-3 + 10e-6 * len(crossing)
            servers.used[("worker", 0)] += 1e-3 + 30e-6 * len(crossing) + 1e-6 * kib
        yield run

    got = measure_crossing_cpu(servers, ("ps", 0), ("worker", 0), sizes=(4, 64 << 10),
                               crossings=6, steps=20, block=5, open_session=open_session)
    assert set(got) == {4, 64 << 10}
    assert got[4] == pytest.approx((10e-6, 30e-6 + 1e-6 / 256))
    assert got[64 << 10] == pytest.approx((10e-6, 30e-6 + 64e-6))


def test_a_cpu_with_kernel_costs_gets_the_servers_dispatch_between_kernels():
    import runtime
    from experiments.backends import this_host_cluster
    from runtime.calibrate import calibrate_distributed, measure_server_dispatch

    cpu = this_host_cluster().devices[0]
    base = this_host_cluster().replace_device(cpu.name, kernel_costs={"*": (1e-6, 1.0)})
    with runtime.LocalCluster({"ps": 1, "worker": 2}) as local:
        between = measure_server_dispatch(local, ("worker", 0), steps=3)
        measured, figures = calibrate_distributed(base, local, quick=True)
    # (0 when a loaded machine's noise hid the work between kernels: then the chain's)
    assert 0 <= between < 1e-3
    assert 0 < measured.device(cpu.name).op_overhead < 1e-3
    assert all(d.op_overhead == figures["op_overhead"] for d in measured.devices
               if d.is_cpu and not d.kernel_costs)


def test_interleaved_step_times_times_every_graph_in_every_round():
    import numpy as np

    import core as tf
    import runtime
    from runtime.calibrate import _interleaved_step_times

    def build(value):
        def make():
            g = tf.Graph()
            with g.as_default(), tf.device("/job:worker/replica:0/task:0/device:CPU:0"):
                out = tf.identity(tf.constant(np.float32(value)), name="out")
            return g, [out]
        return make

    with runtime.LocalCluster({"worker": 1}) as local:
        times = _interleaved_step_times(local, {"a": build(1.0), "b": build(2.0)},
                                        ("worker", 0), repeats=4, warmup=1)
    assert set(times) == {"a", "b"}
    assert all(len(v) == 4 and all(t > 0 for t in v) for v in times.values())


def test_step_overheads_fetch_the_tiny_ops_as_targets_when_asked():
    import contextlib

    import core as tf
    from runtime.calibrate import measure_step_overheads

    class Servers:
        tasks = [("worker", 0), ("ps", 0), ("worker", 1)]

        @staticmethod
        def target(job, index):
            return f"{job}{index}"

    fetched = []

    @contextlib.contextmanager
    def open_session(target, graph, fetches):
        fetched.append(fetches)
        yield lambda: None

    for as_tensors in (True, False):
        fetched.clear()
        step, part, samples = measure_step_overheads(Servers(), ("worker", 0), repeats=1,
                                                     rounds=1, open_session=open_session,
                                                     fetch_tensors=as_tensors)
        # One step per number of other tasks (0, 1, 2), one tiny op on each task.
        assert [len(f) for f in fetched] == [1, 2, 3] and sorted(samples) == [0, 1, 2]
        kind = tf.Tensor if as_tensors else tf.Operation
        assert all(isinstance(x, kind) for f in fetched for x in f)
        assert step >= 0 and part >= 0


def _block(step, part, latency, samples, dispatch, between):
    """One block of calibrate_distributed's timed figures (seconds)."""
    from runtime.calibrate import transfer_bandwidth
    return {"step_overhead": step, "part_overhead": part, "step_samples": {0: step, 1: step + part},
            "transfer_latency": latency, "transfer_bandwidth": transfer_bandwidth(samples),
            "transfer_samples": samples, "op_overhead": dispatch, "between_kernels": between}


def test_the_fastest_block_gives_each_figure_its_least_value():
    from runtime.calibrate import combine_blocks, transfer_bandwidth

    slow_state = _block(3e-4, 1e-4, 1.3e-4, {4: 1.3e-4, 1 << 20: 5e-4}, 6e-6, 9e-6)
    fast_state = _block(2e-4, 2e-4, 1.1e-4, {4: 1.1e-4, 1 << 20: 6e-4}, 4e-6, 0.0)
    got = combine_blocks([slow_state, fast_state])
    assert (got["step_overhead"], got["part_overhead"]) == (2e-4, 1e-4)
    assert got["step_samples"] == pytest.approx({0: 2e-4, 1: 4e-4})
    assert got["transfer_latency"] == 1.1e-4 and got["op_overhead"] == 4e-6
    # per size the least, and the bandwidth from those sizes
    assert got["transfer_samples"] == {4: 1.1e-4, 1 << 20: 5e-4}
    assert got["transfer_bandwidth"] == transfer_bandwidth({4: 1.1e-4, 1 << 20: 5e-4})
    # 0 is a block whose noise hid the work between kernels, not the fastest one
    assert got["between_kernels"] == 9e-6
    assert combine_blocks([fast_state])["between_kernels"] == 0.0
    alone = {**fast_state, "transfer_latency": None, "transfer_bandwidth": None,
             "transfer_samples": {}}
    assert combine_blocks([alone])["transfer_latency"] is None


def test_distributed_calibration_in_blocks_takes_each_figures_median(monkeypatch):
    import runtime.calibrate_distributed as distributed
    from experiments.backends import this_host_cluster

    blocks = iter([_block(3e-4, 1e-4, 1.3e-4, {4: 1.3e-4, 1 << 20: 5e-4}, 6e-6, 9e-6),
                   _block(2e-4, 2e-4, 1.1e-4, {4: 1.1e-4, 1 << 20: 6e-4}, 4e-6, 7e-6),
                   _block(2.5e-4, 3e-4, 1.2e-4, {4: 1.2e-4, 1 << 20: 7e-4}, 5e-6, 0.0)])
    monkeypatch.setattr(distributed, "_timed_figures", lambda *args: next(blocks))

    class Servers:  # no cpu_seconds: the CPU per crossing is not measured
        tasks = [("ps", 0), ("worker", 0), ("worker", 1)]

    cpu = this_host_cluster().devices[0]
    base = this_host_cluster().replace_device(cpu.name, kernel_costs={"*": (1e-6, 1.0)})
    measured, figures = distributed.calibrate_distributed(base, Servers(), blocks=3)
    assert len(figures["blocks"]) == 3 and figures["step_overhead"] == 2.5e-4
    assert all((t.step_overhead, t.part_overhead) == (2.5e-4, 2e-4) for t in measured.tasks)
    link = measured.links["memcpy:localhost"]
    assert link.latency == 1.2e-4 and link.time(1 << 20) == pytest.approx(6e-4)
    # a CPU with kernel costs gets the dispatch between kernels (of the blocks that
    # saw it), the others the chain's
    assert measured.device(cpu.name).op_overhead == pytest.approx(8e-6)
    assert {d.op_overhead for d in measured.devices if d.name != cpu.name} == {5e-6}
    # one block's figures make that block's cluster (a paired look at the blocks)
    first = distributed.with_distributed_figures(base, figures["blocks"][0])
    assert first.links["memcpy:localhost"].latency == 1.3e-4
    assert first.device(cpu.name).op_overhead == 9e-6


def test_the_gpus_figures_come_from_the_block_of_the_cpus(monkeypatch):
    """In blocks, a real GPU's figures are measured beside the CPU's in each block and
    kept from the block whose CPU dispatch is the median: both are the host's time,
    and they describe one state of the machine."""
    import sys

    import runtime.calibrate_gpu as calibrate_gpu
    calibration = sys.modules["runtime.calibrate"]
    block = {"cpu": 0, "gpu": 0}
    with_cpu = [True]
    cpu_dispatch = [5e-6, 9e-6, 3e-6]  # the median, 5 us, is the first block's

    def cpu_figures(device, quick, kernel_costs):
        block["cpu"] += 1
        return {"op_overhead": cpu_dispatch[block["cpu"] - 1]}

    def gpu_figures(device, quick):
        if with_cpu[0]:
            assert block["gpu"] < block["cpu"]  # measured after the CPU of its block
        block["gpu"] += 1
        return {"op_overhead": 1e-4 * block["gpu"], "peak_flops": 1e13 * block["gpu"]}
    monkeypatch.setattr(calibration, "_real_gpu", lambda: True)
    monkeypatch.setattr(calibration, "measure_pcie", lambda *args: None)
    monkeypatch.setattr(calibration, "measure_cpu_figures", cpu_figures)
    monkeypatch.setattr(calibrate_gpu, "measure_gpu_figures", gpu_figures)
    cluster = calibrate(Cluster.single_host(gpus=1, cpu_cores=1), quick=True, blocks=3)
    cpu, gpu = cluster.devices
    assert block == {"cpu": 3, "gpu": 3}
    assert cpu.op_overhead == 5e-6
    assert gpu.op_overhead == 1e-4 and gpu.peak_flops == 1e13  # the first block's too
    # Only GPUs asked for: the block of the GPU's median dispatch.
    block.update(cpu=0, gpu=0)
    with_cpu[0] = False
    gpu_name = gpu.name
    cluster = calibrate(Cluster.single_host(gpus=1, cpu_cores=1), devices=[gpu_name],
                        quick=True, blocks=3)
    assert block["cpu"] == 0 and cluster.device(gpu_name).op_overhead == 2e-4
