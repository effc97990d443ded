"""The runtime's errors, shared by the local executor, sessions and the gRPC services.

Every class derives from :class:`LabRuntimeError` (a :class:`RuntimeError`), carries the
facts it names as attributes and in its message, and is named after TensorFlow's
``tf.errors`` class of the same meaning, so code written against TF 1.x reads the same.
They are plain exceptions with positional arguments, so they pickle and can be rebuilt
on the other side of a gRPC call from ``(type name, args)``.

===============================  ====================================================
class                            raised when
===============================  ====================================================
:class:`OpError`                 a kernel failed: ``op``, ``device``, ``message``
:class:`FailedPrecondition`      state is not ready (an uninitialised variable)
:class:`InvalidArgument`         a bad feed, fetch or configuration value
:class:`DeadlineExceeded`        a step ran past its ``operation_timeout``
:class:`Unavailable`             a task cannot be reached: ``task``
:class:`NotFound`                something named does not exist (a tensor, a device)
:class:`ResourceExhausted`       a bound was reached (held tensor bytes, a size)
===============================  ====================================================

>>> e = OpError("mul", "/job:localhost/replica:0/task:0/device:CPU:0", "boom")
>>> str(e)
"op 'mul' on /job:localhost/replica:0/task:0/device:CPU:0 failed: boom"
>>> isinstance(FailedPrecondition("x"), LabRuntimeError), isinstance(NotFound("x"), KeyError)
(True, True)
"""

from __future__ import annotations

__all__ = ["LabRuntimeError", "OpError", "FailedPrecondition", "InvalidArgument",
           "DeadlineExceeded", "Unavailable", "NotFound", "ResourceExhausted", "ERRORS"]


class LabRuntimeError(RuntimeError):
    """The base of every runtime error (``tf.errors.OpError`` in TensorFlow)."""


class OpError(LabRuntimeError):
    """Op ``op`` (name) failed on ``device`` (full name); ``message`` says why.

    The original exception is chained as ``__cause__`` when raised in-process.
    """

    def __init__(self, op: str, device: str, message: str):
        self.op, self.device, self.message = op, device, message
        super().__init__(op, device, message)

    def __str__(self) -> str:
        return f"op {self.op!r} on {self.device} failed: {self.message}"


class FailedPrecondition(LabRuntimeError):
    """The state needed is not there, e.g. ``Attempting to use uninitialized value v``.

    ``name`` is the variable (or other resource) concerned, when known.
    """

    def __init__(self, message: str, name: str | None = None):
        self.message, self.name = message, name
        super().__init__(message, name)

    def __str__(self) -> str:
        return self.message


class InvalidArgument(LabRuntimeError, ValueError):
    """A value the caller gave is wrong (a feed's dtype or shape, a fetch, a setting)."""


class DeadlineExceeded(LabRuntimeError, TimeoutError):
    """A step ran past its deadline; ``waiting`` lists the ops that had not finished."""

    def __init__(self, message: str, waiting=()):
        self.message, self.waiting = message, list(waiting)
        super().__init__(message, self.waiting)

    def __str__(self) -> str:
        return self.message


class Unavailable(LabRuntimeError, ConnectionError):
    """Task ``task`` (``/job:j/replica:0/task:t`` or an address) cannot be reached."""

    def __init__(self, task: str, message: str = ""):
        self.task, self.message = task, message
        super().__init__(task, message)

    def __str__(self) -> str:
        return f"task {self.task} is unavailable" + (f": {self.message}" if self.message else "")


class NotFound(LabRuntimeError, KeyError):
    """Something named does not exist (a tensor to fetch, a device, a variable)."""

    def __str__(self) -> str:  # KeyError would print the message quoted
        return str(self.args[0]) if self.args else ""


class ResourceExhausted(LabRuntimeError, MemoryError):
    """A bound was reached: tensors held for steps that do not run here, a tensor
    larger than a server takes."""


#: The classes by name, for services that rebuild an error sent over the wire.
ERRORS = {cls.__name__: cls for cls in (LabRuntimeError, OpError, FailedPrecondition,
                                        InvalidArgument, DeadlineExceeded, Unavailable,
                                        NotFound, ResourceExhausted)}
