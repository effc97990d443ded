"""Device memory: what a step allocates, when it frees it, and the capacity.

Rules (the semantics page, "GPU memory"):

- Capacity: the device's ``memory_bytes``; a GPU's times
  ``SimConfig.per_process_gpu_memory_fraction`` when set (TensorFlow's ``GPUOptions``).
  Each device is held to its own capacity (a host's CPU devices are not summed).
- Resident state: the outputs of persistent ops (variables) among the ops the step
  runs occupy their device from time 0 and are never freed.
- An op's outputs are allocated when it starts (an output that aliases a ref input,
  as ``Assign``'s, takes nothing) and freed when their last reader on that device and
  their last outgoing transfer have finished; an output nobody reads is freed when
  the op ends; a fetched tensor is held to the end of the step.
- A received tensor occupies its destination from the start of its transfer until its
  last reader there has finished.
- An allocation that would exceed the capacity records an :class:`core.trace.OOMEvent`
  naming the op (and tensor, for a received copy) and raises :class:`sim.OutOfMemory`;
  with ``SimConfig.record_oom`` the allocation is made anyway and the step goes on.
- ``allow_growth`` changes when a real process reserves memory, not what a step needs:
  ignored.

>>> from core.cluster import Cluster
>>> from sim.config import SimConfig
>>> gpu = Cluster.single_host(gpus=1, gpu_memory_bytes=1000).devices[1]
>>> device_capacity(gpu, SimConfig(per_process_gpu_memory_fraction=0.4))
400
"""

from __future__ import annotations

__all__ = ["device_capacity"]


def device_capacity(device, config) -> int:
    """The bytes ``device`` may hold under ``config``."""
    fraction = config.per_process_gpu_memory_fraction
    if fraction is not None and device.device_type == "GPU":
        return int(device.memory_bytes * fraction)
    return int(device.memory_bytes)
