"""runtime.allocator: freed buffers stay in the heap for the next step."""

import platform
import resource

import numpy as np
import pytest

from runtime.allocator import keep_freed_memory

glibc = platform.libc_ver()[0] == "glibc"


def _faults_of_a_step() -> int:
    """Minor page faults of a step-like pattern: two 4 MiB buffers written, one freed,
    an 8 MiB one written, all freed (with glibc's own thresholds, every round of it
    faults on ~1,500 pages: the heap's top is given back and taken again)."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    x = np.empty(1 << 20, np.float32)
    x.fill(1.0)
    y = np.empty(1 << 20, np.float32)
    y.fill(1.0)
    del x
    z = np.empty(1 << 21, np.float32)
    z.fill(1.0)
    del y, z
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


@pytest.mark.skipif(not glibc, reason="the thresholds are glibc's")
def test_a_step_s_freed_buffers_are_reused_without_page_faults():
    assert keep_freed_memory() is True
    assert keep_freed_memory() is True  # once per process; asking again is harmless
    _faults_of_a_step()  # (the heap grows to hold it once)
    pages = (16 << 20) // resource.getpagesize()
    assert max(_faults_of_a_step() for _ in range(3)) < pages // 10


def test_an_executor_keeps_freed_memory(monkeypatch):
    import runtime.allocator as allocator
    from core.cluster import Cluster
    from runtime.config import SessionConfig
    from runtime.executor import Executor
    from runtime.local_devices import LocalDevices
    calls = []
    monkeypatch.setattr("runtime.executor.keep_freed_memory", lambda: calls.append(1))
    devices = LocalDevices.for_task(Cluster.single_host(cpu_cores=1), "localhost", 0,
                                    SessionConfig(use_per_session_threads=True))
    try:
        Executor(devices)
    finally:
        devices.close()
    assert calls == [1] and allocator.MMAP_THRESHOLD == 32 << 20
