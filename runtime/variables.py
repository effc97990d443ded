"""Variable buffers that outlive a step: :class:`VariableStore`.

Contract (the worker service owns one store per task for the server's lifetime, as
TensorFlow's resource containers; an in-process session owns one for its lifetime):

- keys are variable *op* names (``"layer0/w"``), values the buffers: a numpy array for a
  variable on a CPU, a ``numba.cuda`` device array for one on a GPU;
- :meth:`~VariableStore.get` raises :class:`runtime.errors.FailedPrecondition`
  (``Attempting to use uninitialized value <name>``) for a name never set;
- the store is thread-safe; values survive across runs, and across sessions that share
  the store.  Kernels update buffers in place (``Assign*``), so a value read from the
  store is the live buffer, not a copy.

>>> import numpy as np
>>> store = VariableStore()
>>> store.contains("v")
False
>>> store.get("v")
Traceback (most recent call last):
...
runtime.errors.FailedPrecondition: Attempting to use uninitialized value v
>>> store.set("v", np.zeros(2)); store.names()
['v']
"""

from __future__ import annotations

import threading

from runtime.errors import FailedPrecondition

__all__ = ["VariableStore"]


class VariableStore:
    """A thread-safe mapping: variable op name -> buffer (see the module docstring)."""

    def __init__(self):
        self._values: dict = {}
        self._lock = threading.Lock()

    def get(self, name: str):
        """The live buffer of ``name``; :class:`FailedPrecondition` when uninitialised."""
        try:
            return self._values[name]  # a dict read is atomic under the GIL
        except KeyError:
            raise FailedPrecondition(f"Attempting to use uninitialized value {name}", name) from None

    def set(self, name: str, value) -> None:
        """Make ``value`` the buffer of ``name`` (replacing any previous one)."""
        with self._lock:
            self._values[name] = value

    def setdefault(self, name: str, value):
        """The buffer of ``name``, set to ``value`` first if it has none (atomically)."""
        with self._lock:
            return self._values.setdefault(name, value)

    def contains(self, name: str) -> bool:
        return name in self._values

    __contains__ = contains

    def delete(self, name: str) -> None:
        """Forget ``name`` (a later read is uninitialised again); no error if absent."""
        with self._lock:
            self._values.pop(name, None)

    def clear(self) -> None:
        with self._lock:
            self._values.clear()

    def names(self) -> list[str]:
        """The initialised variables, sorted."""
        with self._lock:
            return sorted(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"<VariableStore of {len(self)} variables>"
