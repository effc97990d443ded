"""``Rendezvous``: the tensors in flight to one task, by rendezvous key.

A worker's executor takes the tensors its part of a step receives from here (``take``,
or ``take_async`` with a callback), and pushes from other tasks put them here, in
either order. A step that fails anywhere is aborted here too (``abort``: its takers
wake with the error, its executor stops through ``watch``), and a step that ended is
forgotten (``finish_step``: late pushes for it are dropped). Tensors pushed for steps
that do not run here are bounded by bytes and age (see :class:`Rendezvous`).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Any, Callable

import numpy as np  # noqa: F401 - the doctests' arrays

from runtime import errors
from runtime.tensor_codec import parse_rendezvous_key

__all__ = ["Rendezvous", "StepAborted", "MAX_UNCLAIMED_BYTES", "MAX_UNCLAIMED_AGE"]

#: Bytes of pushed tensors a worker holds for steps that do not run on it (yet): the
#: oldest such steps are dropped beyond it (their parts fail at once if they come).
MAX_UNCLAIMED_BYTES = 1 << 30

#: Seconds a worker holds pushed tensors for a step that does not run on it: beyond
#: it the step is dropped (its master died, or the step never comes). Generous: a
#: step's producers may start while the master still registers its other parts.
MAX_UNCLAIMED_AGE = 120.0


class StepAborted(errors.LabRuntimeError):
    """The step was aborted because another part of it failed."""



class _Slot:
    __slots__ = ("event", "value", "error", "callback")

    def __init__(self):
        self.event = threading.Event()
        self.value = None
        self.error: BaseException | None = None
        self.callback = None  # take_async's, until the value or an abort comes


class Rendezvous:
    """Tensors in flight to this task, by rendezvous key; thread-safe.

    ``put`` (a push arrived) and ``take`` (the executor's recv) may come in either
    order; ``take`` blocks until the value is there, the step is aborted, or the
    deadline passes. ``finish_step`` forgets a step (late pushes for it are dropped).

    Tensors pushed for a step that does not run here (no ``watch`` for it yet) are
    *unclaimed*: at most ``max_unclaimed_bytes`` of them are held (beyond it the oldest
    such steps are dropped, then the push itself), each for at most
    ``max_unclaimed_age`` seconds (:meth:`sweep`). A dropped step is remembered as
    failed with :class:`runtime.errors.ResourceExhausted`: its parts, should they come,
    fail at once instead of waiting for tensors that are gone.

    >>> r = Rendezvous()
    >>> r.put("a;x:0;b;7", np.ones(2))
    >>> r.take("a;x:0;b;7", 7, time.monotonic() + 1).tolist()
    [1.0, 1.0]
    >>> small = Rendezvous(max_unclaimed_bytes=100)
    >>> small.put("a;x:0;b;1", np.ones(10))  # 80 bytes
    >>> small.put("a;x:0;b;2", np.ones(10))  # step 1 is dropped for it
    >>> small.held_bytes()
    (80, 80)
    >>> small.take("a;x:0;b;1", 1, 0)
    Traceback (most recent call last):
    ...
    runtime.errors.ResourceExhausted: step 1 was dropped: its 80 bytes of pushed tensors ...
    """

    def __init__(self, *, max_unclaimed_bytes: int = MAX_UNCLAIMED_BYTES,
                 max_unclaimed_age: float = MAX_UNCLAIMED_AGE):
        self.max_unclaimed_bytes = max_unclaimed_bytes
        self.max_unclaimed_age = max_unclaimed_age
        self._lock = threading.Lock()
        self._steps: dict[int, dict[str, _Slot]] = {}
        self._born: dict[int, float] = {}
        self._bytes: dict[int, int] = {}  # bytes held per step (values not yet taken)
        self._unclaimed = 0  # of those, of steps not watched (not running here)
        self._closed_steps: OrderedDict[int, BaseException | None] = OrderedDict()
        self._watchers: dict[int, list[Callable[[BaseException], None]]] = {}

    def _slot(self, key: str, step_id: int) -> _Slot | None:
        # Under the lock. None when the step already finished.
        if step_id in self._closed_steps:
            return None
        slots = self._steps.get(step_id)
        if slots is None:
            slots = self._steps[step_id] = {}
            self._born[step_id] = time.monotonic()
        slot = slots.get(key)
        if slot is None:
            slot = slots[key] = _Slot()
        return slot

    # -- held bytes (under the lock) ----------------------------------------------------
    def _hold(self, step_id: int, nbytes: int) -> None:
        self._bytes[step_id] = self._bytes.get(step_id, 0) + nbytes
        if step_id not in self._watchers:
            self._unclaimed += nbytes

    def _unhold(self, step_id: int, nbytes: int) -> None:
        left = self._bytes.get(step_id, 0) - nbytes
        if left > 0:
            self._bytes[step_id] = left
        else:
            self._bytes.pop(step_id, None)
        if step_id not in self._watchers:
            self._unclaimed -= nbytes

    def _forget(self, step_id: int) -> dict:
        """Drop a step's slots and bytes; return its slots."""
        nbytes = self._bytes.pop(step_id, 0)
        if step_id not in self._watchers:
            self._unclaimed -= nbytes
        self._born.pop(step_id, None)
        return self._steps.pop(step_id, {})

    def _drop_unclaimed(self, step_id: int, why: str) -> None:
        nbytes = self._bytes.get(step_id, 0)
        self._forget(step_id)
        self._remember(step_id, errors.ResourceExhausted(
            f"step {step_id} was dropped: its {nbytes} bytes of pushed tensors {why}"))

    def _make_room(self, step_id: int) -> None:
        """Drop the oldest unclaimed steps (``step_id`` last) while over the bound."""
        if self._unclaimed <= self.max_unclaimed_bytes:
            return
        for s in sorted((s for s in self._bytes if s not in self._watchers and s != step_id),
                        key=lambda s: self._born.get(s, 0.0)):
            self._drop_unclaimed(s, f"were over the {self.max_unclaimed_bytes}-byte bound of "
                                    "tensors held for steps that do not run here")
            if self._unclaimed <= self.max_unclaimed_bytes:
                return
        if step_id not in self._watchers:
            self._drop_unclaimed(step_id, f"are over the {self.max_unclaimed_bytes}-byte bound "
                                          "of tensors held for steps that do not run here")

    # -- the calls -------------------------------------------------------------------------
    def put(self, key: str, value: Any) -> None:
        """A tensor arrived for ``key`` (dropped if its step already finished)."""
        step_id = parse_rendezvous_key(key).step_id
        with self._lock:
            slot = self._slot(key, step_id)
            if slot is None:
                return
            callback, slot.callback = slot.callback, None
            if callback is None:
                slot.value = value
                self._hold(step_id, getattr(value, "nbytes", 0))
                self._make_room(step_id)
        if callback is not None:
            callback(value, None)
        else:
            slot.event.set()

    def _taken(self, step_id: int, value) -> None:
        with self._lock:
            if step_id in self._bytes:
                self._unhold(step_id, getattr(value, "nbytes", 0))

    def take(self, key: str, step_id: int, deadline: float) -> Any:
        """Block until ``key``'s tensor is here (``deadline``: ``time.monotonic()``)."""
        with self._lock:
            error = self._closed_steps.get(step_id)
            slot = self._slot(key, step_id)
        if slot is None:
            raise error or StepAborted(f"step {step_id} is over")
        if not slot.event.wait(max(0.0, deadline - time.monotonic())):
            raise errors.DeadlineExceeded(
                f"tensor {key!r} did not arrive before the step's deadline", [key])
        if slot.error is not None:
            raise slot.error
        value, slot.value = slot.value, None
        self._taken(step_id, value)
        return value

    def watch(self, step_id: int, abort: Callable[[BaseException], None]) -> None:
        """Call ``abort(error)`` when ``step_id`` is aborted (at once if it was): the
        executor's step stops, not only its recvs (a part busy computing would
        otherwise run to its end while the step already failed). A watched step runs
        here: its tensors are no longer unclaimed."""
        with self._lock:
            if step_id not in self._closed_steps:
                if step_id not in self._watchers:
                    self._unclaimed -= self._bytes.get(step_id, 0)
                self._watchers.setdefault(step_id, []).append(abort)
                return
            error = self._closed_steps[step_id]
        if error is not None:
            abort(error)

    def take_async(self, key: str, step_id: int, callback: Callable) -> Any:
        """``key``'s tensor if it is here; else None, and ``callback(value, None)``
        runs when it arrives (in the delivering thread) or ``callback(None, error)``
        when the step is aborted. A step that finishes first drops the callback."""
        with self._lock:
            error = self._closed_steps.get(step_id)
            slot = self._slot(key, step_id)
            if slot is not None:
                if slot.event.is_set():
                    if slot.error is None:
                        value, slot.value = slot.value, None
                        if step_id in self._bytes:
                            self._unhold(step_id, getattr(value, "nbytes", 0))
                        return value
                    error = slot.error
                else:
                    slot.callback = callback
                    return None
        raise error or StepAborted(f"step {step_id} is over")

    def abort(self, step_id: int, error: BaseException) -> None:
        """Wake every ``take`` of ``step_id`` with ``error``; later ones fail too."""
        with self._lock:
            slots = self._forget(step_id)
            watchers = self._watchers.pop(step_id, ())
            self._remember(step_id, error)
        for slot in slots.values():
            callback = slot.callback
            if callback is not None:
                slot.callback = None
                callback(None, error)
            elif not slot.event.is_set():
                slot.error = error
                slot.event.set()
        for abort in watchers:
            abort(error)

    def finish_step(self, step_id: int) -> None:
        """Forget ``step_id``'s tensors; later pushes for it are dropped."""
        with self._lock:
            self._forget(step_id)
            self._watchers.pop(step_id, None)
            if step_id not in self._closed_steps:
                self._remember(step_id, None)
        self.sweep()

    def sweep(self) -> int:
        """Drop the unclaimed steps held longer than ``max_unclaimed_age``; return how
        many (the worker calls it every few seconds, and every finished step does)."""
        now = time.monotonic()
        with self._lock:
            stale = [s for s, born in self._born.items()
                     if now - born > self.max_unclaimed_age and s not in self._watchers]
            for s in stale:
                self._drop_unclaimed(s, f"waited more than {self.max_unclaimed_age} s for "
                                        "their step to run here")
        return len(stale)

    def _remember(self, step_id: int, error) -> None:
        self._closed_steps[step_id] = error
        while len(self._closed_steps) > 4096:
            self._closed_steps.popitem(last=False)

    def pending(self) -> int:
        """Number of tensors held (for tests: 0 when no step is running)."""
        with self._lock:
            return sum(1 for slots in self._steps.values() for s in slots.values()
                       if s.event.is_set() and s.value is not None)

    def held_bytes(self) -> tuple[int, int]:
        """``(bytes held, of those unclaimed)``: tensors pushed and not yet taken."""
        with self._lock:
            return sum(self._bytes.values()), self._unclaimed


