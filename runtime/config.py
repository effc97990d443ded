"""Session settings: :class:`SessionConfig`, TensorFlow 1.x's ``ConfigProto`` in one dataclass.

Contract (shared with the gRPC master, which receives it as JSON):

1. Fields and defaults: ``log_device_placement=False``, ``allow_soft_placement=False``,
   ``inter_op_parallelism_threads=0`` and ``intra_op_parallelism_threads=0`` (0: the
   device's ``inter_op_threads`` / ``intra_op_threads`` from the cluster),
   ``use_per_session_threads=False``, ``per_process_gpu_memory_fraction=None`` (a float
   in (0, 1]: the share of each GPU's memory this process may use),
   ``allow_growth=False``, ``placer="simple"`` (a :mod:`placers` name or a placer
   object), ``operation_timeout=60.0`` (seconds: the deadline of one run).
2. Values are checked when the config is built; a bad one raises
   :class:`runtime.errors.InvalidArgument` naming the field and the value.
3. :meth:`SessionConfig.to_dict` / :meth:`SessionConfig.from_dict` round-trip through
   JSON.  The placer travels as its registry name; a placer *object* that is not
   registered can only be used in-process, and ``to_dict`` raises saying so.

>>> c = SessionConfig(allow_soft_placement=True, intra_op_parallelism_threads=2)
>>> SessionConfig.from_dict(c.to_dict()) == c
True
>>> SessionConfig(per_process_gpu_memory_fraction=1.5)
Traceback (most recent call last):
...
runtime.errors.InvalidArgument: per_process_gpu_memory_fraction must be in (0, 1], not 1.5
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any

from runtime.errors import InvalidArgument

__all__ = ["SessionConfig"]


@dataclass
class SessionConfig:
    """How a session places and runs (see the module docstring for the contract)."""

    log_device_placement: bool = False
    allow_soft_placement: bool = False
    inter_op_parallelism_threads: int = 0
    intra_op_parallelism_threads: int = 0
    use_per_session_threads: bool = False
    per_process_gpu_memory_fraction: float | None = None
    allow_growth: bool = False
    placer: Any = "simple"
    operation_timeout: float = 60.0

    def __post_init__(self):
        for name in ("log_device_placement", "allow_soft_placement", "use_per_session_threads",
                     "allow_growth"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidArgument(f"{name} must be True or False, not {getattr(self, name)!r}")
        for name in ("inter_op_parallelism_threads", "intra_op_parallelism_threads"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise InvalidArgument(f"{name} must be an int >= 0 (0: the device's), not {value!r}")
        f = self.per_process_gpu_memory_fraction
        if f is not None:
            if isinstance(f, bool) or not isinstance(f, (int, float)) or not 0 < f <= 1:
                raise InvalidArgument(f"per_process_gpu_memory_fraction must be in (0, 1], not {f!r}")
            self.per_process_gpu_memory_fraction = float(f)
        t = self.operation_timeout
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not t > 0 or math.isnan(t):
            raise InvalidArgument(f"operation_timeout must be a number of seconds > 0, not {t!r}")
        self.operation_timeout = float(t)
        if isinstance(self.placer, str):
            import placers
            if self.placer not in placers.names():
                raise InvalidArgument(f"unknown placer {self.placer!r}; known placers: "
                                      f"{', '.join(placers.names())}")
        elif not callable(getattr(self.placer, "place", None)):
            raise InvalidArgument(f"placer must be a placers name or an object with place(), "
                                  f"not {self.placer!r}")

    @property
    def placer_name(self) -> str | None:
        """The placer's registry name, or None for an unregistered placer object."""
        if isinstance(self.placer, str):
            return self.placer
        import placers
        name = getattr(self.placer, "name", None)
        if isinstance(name, str) and name in placers.names() and type(self.placer) is type(
                placers.get(name)):
            return name
        return None

    def make_placer(self, log=None):
        """A placer for a session: the named one built with this config's soft-placement
        and logging settings, or a copy of the placer object with them set (when it has
        those attributes; the user's object is never changed)."""
        import copy

        import placers
        options = {"allow_soft_placement": self.allow_soft_placement,
                   "log_device_placement": self.log_device_placement}
        if log is not None:
            options["log"] = log
        if isinstance(self.placer, str):
            return placers.get(self.placer, **options)
        placer = self.placer
        if all(hasattr(placer, k) for k in ("allow_soft_placement", "log_device_placement")):
            placer = copy.copy(placer)
            placer.allow_soft_placement = self.allow_soft_placement
            placer.log_device_placement = self.log_device_placement
            if log is not None and hasattr(placer, "_log"):
                placer._log = log
        return placer

    def to_dict(self) -> dict:
        """A JSON-ready dict; the placer as its name.  An unregistered placer object
        raises :class:`InvalidArgument` (it can only be used in-process)."""
        out = asdict(self) if isinstance(self.placer, str) else {
            f.name: getattr(self, f.name) for f in fields(self) if f.name != "placer"}
        name = self.placer_name
        if name is None:
            raise InvalidArgument(
                f"placer {self.placer!r} is an object, not a registered placer name: it can "
                "only be used in-process (target=None); register it with "
                "placers.register(name) to send it to a server")
        out["placer"] = name
        return out

    @classmethod
    def from_dict(cls, data: dict) -> "SessionConfig":
        """The config :meth:`to_dict` wrote; unknown keys raise :class:`InvalidArgument`."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise InvalidArgument(f"unknown SessionConfig fields {unknown}; known: {sorted(known)}")
        return cls(**data)

    def replace(self, **changes) -> "SessionConfig":
        """A copy with ``changes`` (validated)."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update(changes)
        return SessionConfig(**values)
