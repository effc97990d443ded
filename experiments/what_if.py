"""What-if edits of a calibrated cluster's figures: ``cpu.op_overhead*=0.25``.

A prediction rests on a few dozen calibrated figures, and a researcher asking "how much
of this row's error would a cheaper dispatch explain?" or "what does one inter-op thread
predict?" wants the same saved measurements predicted again with one figure changed,
not a new calibration (which moves every figure with the machine's speed).
:func:`apply_changes` makes that cluster; :mod:`experiments.repredict` takes the
changes on its command line (``--what-if``), so a hypothesis about the model is checked
against every saved run, paired with their measurements, before any code changes.

A change reads ``KIND.FIELD=VALUE`` (set) or ``KIND.FIELD*=FACTOR`` (scale), where
``KIND`` picks the records changed, every one of its kind in the cluster:

========  ==========================================================
``cpu``   the CPU devices (:class:`core.cluster.Device`)
``gpu``   the GPU devices
``task``  the tasks (:class:`core.cluster.Task`)
``host``  the hosts (:class:`core.cluster.Host`)
``link``  the links (:class:`core.cluster.Link`)
========  ==========================================================

and ``FIELD`` is one of that record's numeric figures (names and indices are not
figures).  An integer figure stays an integer (a scaled one is rounded).  The edited
cluster is validated as any cluster is: a negative time raises
:class:`core.cluster.InvalidCluster`.

>>> from core.cluster import Cluster
>>> c = Cluster.single_host()
>>> edited = apply_changes(c, [parse_change("cpu.op_overhead=2e-6"),
...                            parse_change("task.lock_wakeup*=2")])
>>> [d.op_overhead for d in edited.devices if d.is_cpu]
[2e-06]
>>> parse_change("cpu.name=x")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ValueError: cpu has no numeric figure 'name'; its figures: peak_flops, mem_bandwidth, ...
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields

from core.cluster import Cluster
from core.hardware import Device, Host, Link, Task

__all__ = ["Change", "parse_change", "apply_changes", "figures_of"]

_RECORDS = {"cpu": Device, "gpu": Device, "task": Task, "host": Host, "link": Link}
# Integer fields that say which record it is, not what it measures.
_IDENTITY = {"task", "index"}
_SYNTAX = re.compile(r"^(?P<kind>\w+)\.(?P<field>\w+)\s*(?P<op>\*?=)\s*(?P<value>\S+)$")


@dataclass(frozen=True)
class Change:
    """One edit: ``field`` of every record of ``kind`` set to ``value``, or multiplied by
    it when ``scale``."""

    kind: str
    field: str
    value: float
    scale: bool = False

    def __str__(self) -> str:
        return f"{self.kind}.{self.field}{'*=' if self.scale else '='}{self.value:g}"

    def applied(self, old):
        """The field's new value from its ``old`` one (an integer field stays one)."""
        new = old * self.value if self.scale else self.value
        return round(new) if isinstance(old, int) and not isinstance(old, bool) else float(new)


def figures_of(kind: str) -> list[str]:
    """The numeric figures a change of ``kind`` may name, in the record's order."""
    if kind not in _RECORDS:
        raise ValueError(f"unknown kind {kind!r}; one of {', '.join(_RECORDS)}")
    return [f.name for f in fields(_RECORDS[kind])
            if f.type in ("float", "int") and f.name not in _IDENTITY]


def parse_change(text: str) -> Change:
    """A :class:`Change` from ``KIND.FIELD=VALUE`` or ``KIND.FIELD*=FACTOR`` (see the
    module's docstring); ValueError naming what is wrong."""
    match = _SYNTAX.match(text.strip())
    if not match:
        raise ValueError(f"a change reads KIND.FIELD=VALUE or KIND.FIELD*=FACTOR, not {text!r}")
    kind, field = match["kind"], match["field"]
    allowed = figures_of(kind)
    if field not in allowed:
        raise ValueError(f"{kind} has no numeric figure {field!r}; its figures: "
                         f"{', '.join(allowed)}")
    try:
        value = float(match["value"])
    except ValueError:
        raise ValueError(f"{text!r}: {match['value']!r} is not a number") from None
    if not value >= 0 or value == float("inf"):  # (no figure is negative, or endless)
        raise ValueError(f"{text!r}: a figure or a factor must be finite and not negative")
    return Change(kind, field, value, scale=match["op"] == "*=")


def apply_changes(cluster: Cluster, changes) -> Cluster:
    """``cluster`` with each of ``changes`` (:class:`Change`) made in turn; a kind the
    cluster has none of (``gpu`` on a CPU-only cluster) changes nothing."""
    for change in changes:
        records, replace_one = _EDITS[change.kind]
        for record in records(cluster):
            new = change.applied(getattr(record, change.field))
            cluster = replace_one(cluster, record, **{change.field: new})
    return cluster


# Per kind: the records of a cluster it changes, and how one of them is replaced.
_EDITS = {
    "cpu": (lambda c: [d for d in c.devices if d.device_type == "CPU"],
            lambda c, d, **new: c.replace_device(d.name, **new)),
    "gpu": (lambda c: [d for d in c.devices if d.device_type == "GPU"],
            lambda c, d, **new: c.replace_device(d.name, **new)),
    "task": (lambda c: c.tasks, lambda c, t, **new: c.replace_task(t.job, t.index, **new)),
    "host": (lambda c: c.hosts, lambda c, h, **new: c.replace_host(h.name, **new)),
    "link": (lambda c: list(c.links.values()),
             lambda c, link, **new: c.replace_link(link.name, **new)),
}
