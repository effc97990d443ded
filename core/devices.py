"""Device names: parse, merge and print them.

A device name has up to five fields, each optional::

    /job:<name>/replica:<int>/task:<int>/device:<TYPE>:<int|*>

Short forms are accepted (``/cpu:0``, ``/GPU:1``, ``/device:GPU:1``, ``/job:ps``,
``/task:1``, ``/job:worker/task:1/gpu:0``); device types are upper-cased when printed,
so ``/gpu:1`` prints as ``/device:GPU:1``.  The model is TensorFlow's ``DeviceSpecV2``:
an immutable value with :meth:`DeviceSpec.from_string`, :meth:`DeviceSpec.to_string`
and a field-wise :meth:`DeviceSpec.merged` in which the fields set by the argument win.

>>> DeviceSpec.from_string("/job:ps/task:0/cpu:0").merged("/gpu:1").to_string()
'/job:ps/task:0/device:GPU:1'
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace

__all__ = ["DeviceSpec", "InvalidDeviceSpec", "full_name", "canonical"]

# Device types that may be written in the short form `/<type>:<index>`.
SHORT_FORM_TYPES = ("CPU", "GPU")

_JOB_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_\-]*\Z")
_DEVICE_TYPE = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")
_INDEX = re.compile(r"(0|[1-9][0-9]*)\Z")


class InvalidDeviceSpec(ValueError):
    """A device string that cannot be parsed.

    Attributes: ``spec`` (the whole string), ``field`` (the part at fault), ``reason``.
    """

    def __init__(self, spec: str, field: str, reason: str):
        self.spec, self.field, self.reason = spec, field, reason
        super().__init__(f"invalid device specification {spec!r}: {field!r}: {reason}")


@dataclass(frozen=True, slots=True)
class DeviceSpec:
    """An immutable, possibly partial, device name.

    ``None`` in a field means "unset".  ``device_index`` is also ``None`` for ``*``
    (any device of the type).

    >>> DeviceSpec.from_string("/gpu:1")
    DeviceSpec(job=None, replica=None, task=None, device_type='GPU', device_index=1)
    >>> str(DeviceSpec(job="ps", task=0))
    '/job:ps/task:0'
    """

    job: str | None = None
    replica: int | None = None
    task: int | None = None
    device_type: str | None = None
    device_index: int | None = None

    def __post_init__(self):
        if self.device_type is not None:
            object.__setattr__(self, "device_type", self.device_type.upper())

    # -- parsing -----------------------------------------------------------------
    @classmethod
    def from_string(cls, spec: "str | DeviceSpec | None") -> "DeviceSpec":
        """Parse a device string; raise :class:`InvalidDeviceSpec` naming the bad field."""
        if isinstance(spec, DeviceSpec):
            return spec
        if spec is None:
            return cls()
        if not isinstance(spec, str):
            raise TypeError(f"a device name must be a string, got {type(spec).__name__}")
        values: dict[str, object] = {}

        def put(key: str, value: object, part: str) -> None:
            if key in values:
                what = "device" if key == "device_type" else key
                raise InvalidDeviceSpec(spec, part, f"more than one {what} field")
            values[key] = value

        for part in spec.split("/"):
            if not part:
                continue
            pieces = part.split(":")
            head = pieces[0].lower()
            if head == "job":
                if len(pieces) != 2 or not _JOB_NAME.match(pieces[1]):
                    raise InvalidDeviceSpec(spec, part, "a job name must start with a letter "
                                            "and hold only letters, digits, '_' and '-'")
                put("job", pieces[1], part)
            elif head in ("replica", "task"):
                if len(pieces) != 2 or not _INDEX.match(pieces[1]):
                    raise InvalidDeviceSpec(spec, part, f"{head} must be a non-negative integer")
                put(head, int(pieces[1]), part)
            elif head == "device":
                if len(pieces) not in (2, 3) or not _DEVICE_TYPE.match(pieces[1]):
                    raise InvalidDeviceSpec(spec, part, "expected device:<TYPE>:<index or *>")
                put("device_type", pieces[1].upper(), part)
                values["device_index"] = _parse_index(spec, part, pieces[2] if len(pieces) == 3 else "*")
            elif head.upper() in SHORT_FORM_TYPES:
                if len(pieces) != 2:
                    raise InvalidDeviceSpec(spec, part, f"expected {head}:<index or *>")
                put("device_type", head.upper(), part)
                values["device_index"] = _parse_index(spec, part, pieces[1])
            else:
                raise InvalidDeviceSpec(spec, part, "unknown field; expected job, replica, task, "
                                        "device, cpu or gpu")
        return cls(**values)

    # -- printing ------------------------------------------------------------------
    def to_string(self) -> str:
        """The canonical string: only the set fields, types upper-cased."""
        out = []
        if self.job is not None:
            out.append(f"/job:{self.job}")
        if self.replica is not None:
            out.append(f"/replica:{self.replica}")
        if self.task is not None:
            out.append(f"/task:{self.task}")
        if self.device_type is not None:
            index = "*" if self.device_index is None else self.device_index
            out.append(f"/device:{self.device_type}:{index}")
        return "".join(out)

    __str__ = to_string

    # -- algebra -------------------------------------------------------------------
    def merged(self, other: "str | DeviceSpec | None") -> "DeviceSpec":
        """Field-wise merge: every field that ``other`` sets wins.

        >>> str(DeviceSpec.from_string("/job:ps/task:0/device:GPU:1").merged("/job:worker"))
        '/job:worker/task:0/device:GPU:1'
        """
        other = DeviceSpec.from_string(other)
        changes = {f.name: getattr(other, f.name) for f in fields(self)
                   if getattr(other, f.name) is not None}
        if other.device_type is not None:
            # A new device type brings its own index (None meaning '*').
            changes["device_index"] = other.device_index
        return replace(self, **changes)

    def replace(self, **changes) -> "DeviceSpec":
        """A copy with the given fields changed."""
        return replace(self, **changes)

    @property
    def is_empty(self) -> bool:
        return (self.job is None and self.replica is None and self.task is None
                and self.device_type is None and self.device_index is None)

    @property
    def is_full(self) -> bool:
        """True when every field is set, as in a placed op's device."""
        return (self.job is not None and self.replica is not None and self.task is not None
                and self.device_type is not None and self.device_index is not None)

    def matches(self, other: "str | DeviceSpec") -> bool:
        """True when every field set here equals the same field of ``other``."""
        other = DeviceSpec.from_string(other)
        return all(getattr(self, f.name) is None or getattr(self, f.name) == getattr(other, f.name)
                   for f in fields(self))

    @property
    def task_name(self) -> str:
        """``/job:j/replica:r/task:t`` of a fully specified device."""
        return f"/job:{self.job}/replica:{self.replica or 0}/task:{self.task}"


def _parse_index(spec: str, part: str, text: str) -> int | None:
    if text == "*":
        return None
    if not _INDEX.match(text):
        raise InvalidDeviceSpec(spec, part, "the device index must be a non-negative integer or *")
    return int(text)


def canonical(spec: "str | DeviceSpec | None") -> str:
    """The canonical form of a device string (``'/gpu:1'`` -> ``'/device:GPU:1'``)."""
    return DeviceSpec.from_string(spec).to_string()


def full_name(job: str, task: int, device_type: str, index: int, replica: int = 0) -> str:
    """The full name of one device: ``/job:j/replica:0/task:t/device:TYPE:i``."""
    return f"/job:{job}/replica:{replica}/task:{task}/device:{device_type.upper()}:{index}"
