"""A placement: which device each op runs on.

>>> p = Placement({"a": "/job:localhost/replica:0/task:0/cpu:0"})
>>> p["a"]
'/job:localhost/replica:0/task:0/device:CPU:0'
>>> p.log_lines()
['a: /job:localhost/replica:0/task:0/device:CPU:0']
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from typing import Iterable, Iterator, NamedTuple, Sequence

from core.devices import DeviceSpec
from core.graph import Graph, Operation, Tensor, ops_needed
from core.ops import has_kernel

__all__ = ["Placement", "PlacementError", "InvalidPlacement", "Transfer", "kernel_dtype",
           "transfers", "log_placement"]

_log = logging.getLogger(__name__)


def log_placement(lines: Iterable[str], logger: logging.Logger | None = None) -> None:
    """Log ``log_device_placement`` lines, each an INFO record of ``logger`` (default
    this module's, ``core.placement``).

    The user asked for these lines by setting ``log_device_placement``, so they reach the
    terminal as TensorFlow's do even when the program configured no logging at all: when
    no handler is found on ``logger`` or above it (:meth:`logging.Logger.hasHandlers`),
    where :data:`logging.lastResort` would drop an INFO record, each line is written to
    stderr.  Once the program configures logging (``logging.basicConfig``, a handler on
    ``core``, pytest's ``caplog``) the records follow that configuration: its levels and
    handlers decide.

    >>> import logging
    >>> class Lines(logging.Handler):
    ...     def emit(self, record):
    ...         print("got", record.levelname, record.getMessage())
    >>> logger = logging.getLogger("doctest.placement")
    >>> logger.addHandler(Lines()); logger.setLevel(logging.INFO)
    >>> log_placement(["a: /job:localhost/replica:0/task:0/device:CPU:0"], logger)
    got INFO a: /job:localhost/replica:0/task:0/device:CPU:0
    """
    logger = logger or _log
    if logger.hasHandlers():
        for line in lines:
            logger.info(line)
    elif not logger.disabled:
        for line in lines:
            print(line, file=sys.stderr, flush=True)


class PlacementError(ValueError):
    """An op that cannot be placed: ``op`` (name), ``device`` (requested), ``reason``.

    The message follows TensorFlow's: ``Cannot assign a device to node 'Variable': Could
    not satisfy explicit device specification '/device:GPU:0' because ...``.
    """

    def __init__(self, op: str, device: str | None, reason: str):
        self.op, self.device, self.reason = op, device, reason
        if device:
            text = (f"Cannot assign a device to node '{op}': Could not satisfy explicit device "
                    f"specification '{device}' because {reason}")
        else:
            text = f"Cannot assign a device to node '{op}': {reason}"
        super().__init__(text)


class InvalidPlacement(ValueError):
    """A placement that breaks an invariant; ``problems`` lists every one found."""

    def __init__(self, problems: Sequence[str]):
        self.problems = list(problems)
        shown = "\n  ".join(self.problems[:20])
        more = f"\n  ... and {len(self.problems) - 20} more" if len(self.problems) > 20 else ""
        super().__init__(f"invalid placement ({len(self.problems)} problems):\n  {shown}{more}")


class Transfer(NamedTuple):
    """One tensor sent from the device that makes it to one device that needs it."""

    tensor: Tensor
    src: str
    dst: str


def kernel_dtype(op: Operation) -> str | None:
    """The dtype name an op's kernel is chosen by (see :meth:`core.ops.OpDef.kernel_dtype`)."""
    return op.op_def.kernel_dtype(op.inputs, op.outputs)


def _full_device_name(op_name: str, device) -> str:
    spec = DeviceSpec.from_string(device)
    if spec.replica is None:
        spec = spec.replace(replica=0)
    if not spec.is_full:
        raise ValueError(f"op {op_name!r}: {device!r} is not a full device name "
                         "(/job:j/replica:r/task:t/device:TYPE:i)")
    return spec.to_string()


class Placement(Mapping):
    """An immutable mapping: op name -> full device name.

    Device names are stored canonically (``/job:j/replica:r/task:t/device:TYPE:i``);
    iteration keeps the order in which ops were placed, which is the order of
    :meth:`log_lines`.
    """

    def __init__(self, assignments: Mapping[str, str] | Iterable[tuple[str, str]] = ()):
        items = assignments.items() if isinstance(assignments, Mapping) else assignments
        self._devices: dict[str, str] = {}
        canonical: dict[str, str] = {}  # few distinct devices, many ops: parse each once
        for op_name, device in items:
            name = canonical.get(device)
            if name is None:
                name = canonical[device] = _full_device_name(op_name, device)
            self._devices[op_name] = name

    @classmethod
    def of_canonical(cls, op_names: list[str], devices: list[str]) -> "Placement":
        """``op_names[i]`` on ``devices[i]``, the device names already canonical (as a
        cluster's device names or a placement's values are): none is parsed again, for
        a caller making many placements (a search, one per candidate).

        >>> Placement.of_canonical(["a"], ["/job:w/replica:0/task:0/device:CPU:0"])["a"]
        '/job:w/replica:0/task:0/device:CPU:0'
        """
        self = cls.__new__(cls)
        self._devices = dict(zip(op_names, devices))
        return self

    def __getitem__(self, op_name: str) -> str:
        return self._devices[op_name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._devices)

    def __len__(self) -> int:
        return len(self._devices)

    def __eq__(self, other) -> bool:
        if isinstance(other, Placement):
            return self._devices == other._devices
        return NotImplemented

    def __hash__(self):
        return hash(frozenset(self._devices.items()))

    def __repr__(self) -> str:
        return f"<Placement of {len(self)} ops on {len(self.devices())} devices>"

    def devices(self) -> list[str]:
        """The devices used, sorted."""
        return sorted(set(self._devices.values()))

    def ops_on(self, device: str) -> list[str]:
        """The ops placed on ``device``, in placement order."""
        device = DeviceSpec.from_string(device).to_string()
        return [op for op, d in self._devices.items() if d == device]

    def counts(self) -> dict[str, int]:
        """Ops per device."""
        out: dict[str, int] = {}
        for d in self._devices.values():
            out[d] = out.get(d, 0) + 1
        return out

    def updated(self, more: Mapping[str, str]) -> "Placement":
        """A new placement with ``more`` added after these ops."""
        return Placement(list(self._devices.items()) + list(Placement(more).items()))

    def to_dict(self) -> dict[str, str]:
        return dict(self._devices)

    def log_lines(self, ops: Iterable[str] | None = None) -> list[str]:
        """``log_device_placement`` lines, ``name: device``, in placement order."""
        names = self._devices if ops is None else ops
        return [f"{name}: {self._devices[name]}" for name in names]

    # -- checks ------------------------------------------------------------------------
    def validate(self, graph: Graph, cluster=None, *, fetches: Iterable | None = None,
                 allow_soft_placement: bool = False, pin_of=None) -> None:
        """Check the placement invariants; raise :class:`InvalidPlacement` listing every
        problem.

        Checked: every op that the run needs (all ops of the graph when ``fetches`` is
        None) is placed; each device exists in ``cluster`` (when given) and has a kernel
        for the op's type and dtype; colocated ops share a device; an explicit pin is
        kept, unless ``allow_soft_placement`` and the pinned device is impossible.
        ``pin_of(op)`` gives the device an op asked for (default ``op.device_spec``; a
        function placer's requests replace the scopes').
        """
        pin_of = pin_of or (lambda op: op.device_spec)
        problems: list[str] = []
        if fetches is None:
            ops = graph.get_operations()
        else:
            ops = ops_needed([f.op if isinstance(f, Tensor) else f for f in fetches])
        names = {d.name for d in cluster.devices} if cluster is not None else None
        groups: dict[str, list[Operation]] = {}
        for op in ops:
            for g in op.colocation_groups():
                groups.setdefault(g, []).append(op)
        for op in ops:
            device = self._devices.get(op.name)
            if device is None:
                problems.append(f"op {op.name!r} is not placed")
                continue
            spec = DeviceSpec.from_string(device)
            if names is not None and device not in names:
                problems.append(f"op {op.name!r} is on {device}, which the cluster does not have")
            dtype = kernel_dtype(op)
            if not has_kernel(op.type, spec.device_type, dtype):
                problems.append(f"op {op.name!r} ({op.type}, {dtype}) is on {device}, which has "
                                f"no kernel for it")
            pin = pin_of(op)
            if not pin.is_empty and not pin.matches(spec):
                group = [o for g in op.colocation_groups() for o in groups[g]]
                if not allow_soft_placement or _pin_satisfiable(pin, group, cluster, pin_of):
                    problems.append(f"op {op.name!r} is pinned to {pin} but placed on {device}")
        for g, members in sorted(groups.items()):
            devices = {self._devices[o.name] for o in members if o.name in self._devices}
            if len(devices) > 1:
                problems.append(f"colocation group {g} is split over {sorted(devices)}")
        if problems:
            raise InvalidPlacement(problems)


def _pin_satisfiable(pin: DeviceSpec, group: Sequence[Operation], cluster, pin_of) -> bool:
    """Whether a device matching ``pin`` (and every colocated op's pin) has kernels for the
    whole colocation group: when not, soft placement was entitled to move the op."""
    if cluster is None:
        return True
    for other in group:
        o = pin_of(other)
        for f in ("job", "replica", "task", "device_type", "device_index"):
            if getattr(o, f) is not None and getattr(pin, f) is not None \
                    and getattr(o, f) != getattr(pin, f):
                return False  # conflicting requests in one group: one of them must give
    return any(pin.matches(d.name) and all(has_kernel(o.type, d.device_type, kernel_dtype(o))
                                           for o in group)
               for d in cluster.devices)


def transfers(graph_ops: Sequence[Operation], placement: Placement) -> list[Transfer]:
    """The send/recv pairs a placement needs: one per (tensor, destination device).

    Only data edges between ``graph_ops`` whose ends are on different devices count; the
    order is deterministic (consumer order, then input order).
    """
    names = {op.name for op in graph_ops}
    seen: set[tuple[str, str]] = set()
    out: list[Transfer] = []
    for op in graph_ops:
        dst = placement[op.name]
        for t in op.inputs:
            if t.op.name not in names:
                continue
            src = placement[t.op.name]
            if src != dst and (t.name, dst) not in seen:
                seen.add((t.name, dst))
                out.append(Transfer(t, src, dst))
    return out
