"""What a kernel may know about the call it serves: :class:`KernelContext`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["KernelContext"]


@dataclass(frozen=True)
class KernelContext:
    """The per-call facts a kernel needs beyond its inputs and attrs; the executor builds one.

    Attributes
    ----------
    device_type : ``"CPU"`` or ``"GPU"``; the device the kernel runs on.
    intra_op_threads : threads of the device's intra-op pool this call may use.  Kernels of
        multithreaded ops call ``numba.set_num_threads(min(intra_op_threads,
        NUMBA_NUM_THREADS))`` in the calling (inter-op) thread, which is per thread, so
        concurrent kernels on different devices each keep their own count.  ``1`` runs the
        serial variant, with no parallel region at all.
    feed : the value fed to a ``Placeholder`` (a numpy array; on a GPU, a host array is
        copied in, a device array is taken as it is).  Unused by other ops.
    variable : the buffer of a ``Variable`` (numpy array on a CPU, device array on a GPU).
        ``Variable`` returns it, not a copy, so that ``Assign*`` ops update it in place.
    stream : the ``numba.cuda`` stream GPU kernels are launched on and allocate with
        (None: the default stream).  Unused on a CPU.
    out : a buffer offered for the kernel's first output (None: none).  A kernel that
        can write its result into a given array (MatMul) does so when ``out`` is a
        writable C-contiguous numpy array of the output's shape and dtype, and returns
        it; any other kernel, or another shape, allocates as usual.  The executor offers
        one for a fetched tensor whose destination is known before the step (a shared-
        memory segment the client reads it from: one copy of the tensor fewer).

    Examples
    --------
    >>> ctx = KernelContext("CPU", intra_op_threads=2)
    >>> ctx.intra_op_threads
    2
    """

    device_type: str = "CPU"
    intra_op_threads: int = 1
    feed: Any = None
    variable: Any = None
    stream: Any = None
    out: Any = None

    def __post_init__(self):
        if self.intra_op_threads < 1:
            raise ValueError(f"intra_op_threads must be at least 1, got {self.intra_op_threads}")
