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
- An op that forwards its input (``OpDef.forwards_input``: a variable's read,
  Identity, Reshape, StopGradient), on its input's device, allocates nothing: its
  output is the input's buffer, which is freed only once both have been let go of (so
  a variable's weights count once, not once more per read).
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

import numpy as np

__all__ = ["device_capacity", "memory_records", "TrackedLog"]


def device_capacity(device, config) -> int:
    """The bytes ``device`` may hold under ``config``."""
    fraction = config.per_process_gpu_memory_fraction
    if fraction is not None and device.device_type == "GPU":
        return int(device.memory_bytes * fraction)
    return int(device.memory_bytes)


class TrackedLog:
    """The run's log for a step where some device could run out of memory: its
    ``append(code)`` notes ``code`` in ``codes`` (the list :func:`memory_records`
    reads) and applies the change to the bytes in use as it happens.  An allocation
    past the device's capacity first calls ``out_of_memory(device, bytes, op, tensor)``
    (which raises unless the run only records it), so a refused allocation is not
    noted.  The engine's handlers note every change with ``log.append`` either way,
    and a step where nothing can run out pays nothing for the tracking (its log is the
    plain list).

    An end lets go of buffers as :class:`core.dataflow.StepState` counts references
    (an op's end: its release list; a transfer's end: its source buffer), except that an
    output nobody reads holds one reference, its op's.  ``in_use`` (bytes per device,
    updated in place) and ``capacity`` are lists by device index; ``op_alloc`` (an
    array) the bytes of each op's outputs.  (``append`` is a closure over local lists:
    it runs for every end and allocation; as a list subclass's method reading
    ``self.x`` and calling helpers it made a tracked step 1.4x as costly.)
    """

    __slots__ = ("append",)

    def __init__(self, codes: list, plan, op_alloc, in_use: list, capacity: list,
                 out_of_memory):
        n, n_made, n_tensors = plan.n_ops, plan.n_ops + plan.n_transfers, plan.n_tensors
        refs = list(plan.buffer_refs)
        for b in plan.array("csr_op_dead_outputs")[1].tolist():
            refs[b] = 1
        parent = plan.array("buffer_parent")
        forwarded = np.flatnonzero(parent >= 0)
        for b in parent[forwarded].tolist():  # a forwarded buffer holds its input's
            refs[b] += 1
        parent = parent.tolist()

        def let_go(b: int) -> None:
            """Buffer ``b`` lost its last reference: its bytes, then its parent's
            reference (a forwarded output's input), and so on up."""
            while True:
                in_use[buffer_device[b]] -= buffer_bytes[b]
                b = parent[b]
                if b < 0:
                    return
                left = refs[b] - 1
                refs[b] = left
                if left:
                    return
        release_ptr, releases = plan.csr_op_releases
        buffer_bytes, buffer_device = plan.buffer_bytes, plan.buffer_device
        tensor_op, transfer_tensor = plan.tensor_op, plan.transfer_tensor
        transfer_dst, op_device = plan.transfer_dst, plan.op_device
        op_alloc = op_alloc.tolist()
        note = codes.append

        def append(code: int) -> None:
            if code >= 0:  # an end: noted, then its buffers are let go of
                note(code)
                if code < n:
                    for b in releases[release_ptr[code]:release_ptr[code + 1]]:
                        left = refs[b] - 1
                        refs[b] = left
                        if not left:
                            let_go(b)
                else:  # (a transfer's source buffer: the same, without a loop)
                    b = transfer_tensor[code - n]
                    left = refs[b] - 1
                    refs[b] = left
                    if not left:
                        let_go(b)
                return
            # An allocation (memory_records' numbering): an op's outputs, a transfer's
            # received copy, a resident buffer; checked before it is noted.
            made = ~code
            if made < n:
                d, nbytes, op, tensor = op_device[made], op_alloc[made], made, None
            elif made < n_made:
                k = made - n
                tensor = transfer_tensor[k]
                d, op = transfer_dst[k], tensor_op[tensor]
                nbytes = buffer_bytes[n_tensors + k]
            else:
                b = made - n_made
                d, nbytes = buffer_device[b], buffer_bytes[b]
                op, tensor = tensor_op[b], None
            use = in_use[d] + nbytes
            if use > capacity[d]:
                out_of_memory(d, nbytes, op, tensor)
            in_use[d] = use
            note(code)

        self.append = append


def memory_records(plan, log, op_alloc, times, begin=0) -> tuple[list, list, list]:
    """The memory records of a run, as three lists: device index, time, bytes in use on
    that device after the change; in the order the changes happened.

    ``log`` lists, in the order they happened, the run's events that change memory:
    each op's end (``i``) and transfer's end (``n_ops + k``), and each allocation: an
    op's outputs when it starts (``~i``; ``op_alloc[i]`` bytes), a received copy when its
    transfer starts (``~(n_ops + k)``), a resident buffer before time 0 (``~(n_ops +
    n_transfers + b)``, at time ``begin``).  ``times`` is a new list ``op_end + x_end +
    op_start + x_start`` of the run's columns (this appends to it).  A buffer is freed
    by the last of the ends that let go of it (its readers', its transfers', its own
    op's for an output nobody reads), once all of them happened; an end frees before
    anything it started allocates, in ascending buffer order, as the engine's handlers
    do (see :mod:`sim.engine`).  So the run only appends an integer per change, and
    none at all for a free.

    A change of zero bytes makes no record.
    """
    n, m = plan.n_ops, plan.n_transfers
    nbytes = plan.array("buffer_bytes")
    log = np.fromiter(log, np.int64, len(log))
    position = np.arange(len(log))
    is_end = log >= 0
    # Frees: for each buffer, the log position of the last end that lets go of it.
    when = np.full(n + m, -1, np.int64)
    when[log[is_end]] = position[is_end]
    release_ptr, released = plan.array("csr_op_releases")
    owner = np.concatenate([np.repeat(np.arange(n), np.diff(release_ptr)), n + np.arange(m)])
    buffer = np.concatenate([released, plan.array("transfer_tensor")])
    at = when[owner]
    last = np.full(len(nbytes), -1, np.int64)
    np.maximum.at(last, buffer, at)
    missing = np.bincount(buffer[at < 0], minlength=len(nbytes))
    done = (last >= 0) & (missing == 0)
    for held in (plan.resident, plan.held):  # to the end: variables, fetched tensors
        done[np.asarray(held, dtype=np.int64)] = False
    # A forwarded output's input lives as long as it: freed at the later of the two
    # (children before parents: a forwarded output comes after its input).
    parent = plan.array("buffer_parent")
    for child in np.flatnonzero(parent >= 0)[::-1].tolist():
        p = int(parent[child])
        if done[child]:
            last[p] = max(last[p], last[child])
        else:
            done[p] = False
    freed = np.flatnonzero(done & (nbytes > 0))
    # Allocations, by what allocated: an op, a transfer, a resident buffer.
    made = ~log[~is_end]
    alloc_device = np.concatenate([plan.array("op_device"), plan.array("transfer_dst"),
                                   plan.array("buffer_device")])
    alloc_bytes = np.concatenate([op_alloc, nbytes[plan.n_tensors:], nbytes])
    # All changes, in the order they happened: by log position, frees of one end by
    # buffer (an allocation has a position of its own).
    key = np.concatenate([last[freed] * len(nbytes) + freed, position[~is_end] * len(nbytes)])
    order = np.argsort(key, kind="stable")  # (runs: the allocations are in order)
    device = np.concatenate([plan.array("buffer_device")[freed], alloc_device[made]])[order]
    delta = np.concatenate([-nbytes[freed], alloc_bytes[made]])[order]
    # Bytes in use after each change: a running sum per device.
    by_device = np.argsort(device, kind="stable")
    grouped = device[by_device]
    total = np.cumsum(delta[by_device])
    starts = np.flatnonzero(grouped[1:] != grouped[:-1]) + 1
    # (the sum up to each device's first change is subtracted from its changes)
    before = np.concatenate([[0], total[starts - 1]])
    use = np.empty_like(total)
    use[by_device] = total - np.repeat(before, np.diff(np.concatenate([[0], starts, [len(total)]])))
    # Times: an end's, or the start of what allocated (begin for a resident buffer).
    index = np.concatenate([log[last[freed]], n + m + np.minimum(made, n + m)])[order]
    times.append(begin)
    return device.tolist(), list(map(times.__getitem__, index.tolist())), use.tolist()
