"""Traces: what ran where and when during one step (ops, transfers, memory).

A :class:`Trace` is the one answer format of the lab's two backends: the simulator
(:func:`sim.simulate`) *predicts* it, the runtime *measures* it.  It is plain data —
lists of small records — so it can be compared, saved as JSON, turned into pandas
DataFrames, drawn as a Gantt chart, or opened in Perfetto / ``chrome://tracing``.
:meth:`Trace.validate` checks the execution invariants, so the same code checks a
predicted and a measured trace.

Times are seconds from the start of the step; sizes are bytes.

>>> t = Trace(ops=[OpRecord("a", "Const", "/job:w/replica:0/task:0/device:CPU:0", 0, 0.0, 1e-3)])
>>> t.step_time
0.001
>>> Trace.from_dict(t.to_dict()) == t
True
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, NamedTuple

__all__ = ["OpRecord", "TransferRecord", "MemoryRecord", "OOMEvent", "Trace", "TraceFrames",
           "InvalidTrace", "FORMAT"]

FORMAT = "placement-lab.trace/1"


class OpRecord(NamedTuple):
    """One op's execution: on ``device``, inter-op ``thread`` slot, ``[start, end)``.

    ``cores`` is how many host cores the kernel held (CPU ops: 0 for one the runtime
    served without a kernel, such as a variable; 0 for other devices, 1 when a backend
    does not know).
    """

    op: str
    type: str
    device: str
    thread: int
    start: float
    end: float
    cores: int = 1


class TransferRecord(NamedTuple):
    """One tensor sent from ``src`` to ``dst`` over ``links`` (link names, in order)."""

    tensor: str
    src: str
    dst: str
    links: tuple
    bytes: int
    start: float
    end: float


class MemoryRecord(NamedTuple):
    """Bytes in use on ``device`` from ``time`` on (one record per change)."""

    device: str
    time: float
    bytes: int


class OOMEvent(NamedTuple):
    """An allocation that would exceed a device's capacity.

    ``op`` made the allocation (its outputs, or with ``tensor`` set, a received copy of
    that tensor); ``in_use`` is what the device held before it.
    """

    time: float
    device: str
    op: str
    tensor: str | None
    requested: int
    in_use: int
    capacity: int


class TraceFrames(NamedTuple):
    """The tables of :meth:`Trace.to_frame` (pandas DataFrames)."""

    ops: Any
    transfers: Any
    memory: Any
    oom_events: Any


class InvalidTrace(AssertionError):
    """A trace that breaks an execution invariant; ``problems`` lists each one found."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        shown = "\n  ".join(self.problems[:20])
        more = f"\n  ... and {len(self.problems) - 20} more" if len(self.problems) > 20 else ""
        super().__init__(f"invalid trace ({len(self.problems)} problems):\n  {shown}{more}")


_RECORDS = {"ops": OpRecord, "transfers": TransferRecord, "memory": MemoryRecord,
            "oom_events": OOMEvent}


@dataclass
class Trace:
    """What ran where and when during one step.

    Attributes
    ----------
    ops, transfers, memory, oom_events : lists of :class:`OpRecord`,
        :class:`TransferRecord`, :class:`MemoryRecord`, :class:`OOMEvent`.
    capacity : device -> the memory capacity the run was held to (bytes).
    fetch_end : fetched op name -> when it finished (in an asynchronous training step,
        each worker's train op: the per-worker completion times).
    meta : free-form facts about the run (backend, configuration).

    >>> t = Trace(ops=[OpRecord("a", "NoOp", "/cpu", 0, 0.0, 2.0),
    ...                OpRecord("b", "NoOp", "/cpu", 1, 1.0, 3.0)])
    >>> t.step_time, t.busy_time, t.work_time
    (3.0, {'/cpu': 3.0}, {'/cpu': 4.0})
    """

    ops: list = field(default_factory=list)
    transfers: list = field(default_factory=list)
    memory: list = field(default_factory=list)
    oom_events: list = field(default_factory=list)
    capacity: dict = field(default_factory=dict)
    fetch_end: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)

    # -- lazy records -------------------------------------------------------------------
    @classmethod
    def lazy(cls, records: dict, *, step_time=None, **fields) -> "Trace":
        """A trace whose record lists are made on first access: ``records`` maps a field
        name (``ops``, ``transfers``, ``memory``, ``oom_events``) to a function of no
        argument returning that list; ``fields`` are the other fields; ``step_time``
        (optional): a function of no argument giving :attr:`step_time` without the
        records (read while neither ``ops`` nor ``transfers`` is made).

        The simulator keeps its results in columns and a 100k-op step has ~350k
        records: making the NamedTuples only when someone reads them keeps that out of
        simulate().  Reading, comparing, copying and pickling behave as for a plain
        trace (the lists are made then, once).

        >>> t = Trace.lazy({"ops": lambda: [OpRecord("a", "NoOp", "/cpu", 0, 0.0, 1.0)]})
        >>> t.step_time, t == Trace(ops=[OpRecord("a", "NoOp", "/cpu", 0, 0.0, 1.0)])
        (1.0, True)
        """
        trace = cls(**fields)
        for name in records:
            del trace.__dict__[name]  # so that reading it reaches __getattr__
        trace.__dict__["_lazy"] = dict(records)
        if step_time is not None:  # what step_time gives while the records are not made
            trace.__dict__["_lazy_step_time"] = step_time
        return trace

    def __getattr__(self, name: str):
        # Only called when normal lookup fails: a lazy record list not made yet.
        lazy = self.__dict__.get("_lazy")
        if lazy is None or name not in lazy:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        value = self.__dict__[name] = lazy.pop(name)()
        return value

    def __getstate__(self) -> dict:
        # copy and pickle see every field, made (the makers may not pickle).
        for key in list(self.__dict__.get("_lazy", ())):
            getattr(self, key)
        state = dict(self.__dict__)
        state.pop("_lazy", None)
        state.pop("_lazy_step_time", None)
        return state

    # -- summary figures ----------------------------------------------------------------
    @property
    def step_time(self) -> float:
        """The makespan: the last end of any op or transfer (the step starts at 0)."""
        lazy = self.__dict__.get("_lazy_step_time")
        if lazy is not None and "ops" not in self.__dict__ and "transfers" not in self.__dict__:
            return lazy()  # (the same figure, from the columns the records would be made of)
        ends = [r.end for r in self.ops] + [r.end for r in self.transfers]
        return max(ends, default=0.0)

    @property
    def work_time(self) -> dict[str, float]:
        """Device -> total op seconds (ops running in parallel each count)."""
        out: dict[str, float] = {}
        for r in self.ops:
            out[r.device] = out.get(r.device, 0.0) + (r.end - r.start)
        return out

    @property
    def busy_time(self) -> dict[str, float]:
        """Device -> seconds during which at least one op ran (union of op intervals)."""
        by_device: dict[str, list] = {}
        for r in self.ops:
            by_device.setdefault(r.device, []).append((r.start, r.end))
        return {d: _union_length(iv) for d, iv in by_device.items()}

    @property
    def bytes_per_link(self) -> dict[str, int]:
        """Link -> bytes that crossed it."""
        out: dict[str, int] = {}
        for r in self.transfers:
            for link in r.links:
                out[link] = out.get(link, 0) + r.bytes
        return out

    @property
    def link_busy_time(self) -> dict[str, float]:
        """Link -> seconds during which at least one transfer occupied it."""
        by_link: dict[str, list] = {}
        for r in self.transfers:
            for link in r.links:
                by_link.setdefault(link, []).append((r.start, r.end))
        return {k: _union_length(iv) for k, iv in by_link.items()}

    @property
    def peak_memory(self) -> dict[str, int]:
        """Device -> the most bytes it held at once."""
        out: dict[str, int] = {}
        for r in self.memory:
            if r.bytes > out.get(r.device, -1):
                out[r.device] = r.bytes
        return out

    @property
    def task_end(self) -> dict[str, float]:
        """Task (``/job:j/replica:r/task:t``) -> the end of its last op."""
        out: dict[str, float] = {}
        for r in self.ops:
            task = r.device.rsplit("/device:", 1)[0]
            if r.end > out.get(task, -1.0):
                out[task] = r.end
        return out

    def memory_timeline(self, device: str) -> list[tuple[float, int]]:
        """``(time, bytes in use)`` pairs for one device, in time order."""
        return [(r.time, r.bytes) for r in self.memory if r.device == device]

    def summary(self) -> dict:
        """The headline figures as one JSON-ready dict."""
        return {"step_time": self.step_time, "ops": len(self.ops),
                "transfers": len(self.transfers), "busy_time": self.busy_time,
                "work_time": self.work_time, "bytes_per_link": self.bytes_per_link,
                "peak_memory": self.peak_memory, "oom_events": len(self.oom_events),
                "fetch_end": dict(self.fetch_end), "task_end": self.task_end}

    # -- pandas ---------------------------------------------------------------------------
    def to_frame(self) -> TraceFrames:
        """The records as pandas DataFrames (``.ops``, ``.transfers``, ``.memory``,
        ``.oom_events``), one row per record and one column per field.

        >>> Trace(ops=[OpRecord("a", "NoOp", "/cpu", 0, 0.0, 1.0)]).to_frame().ops.op.tolist()
        ['a']
        """
        import pandas as pd  # lazily: core stays cheap to import

        return TraceFrames(*(pd.DataFrame(list(getattr(self, key)), columns=list(cls._fields))
                             for key, cls in _RECORDS.items()))

    # -- Chrome / Perfetto -----------------------------------------------------------------
    def to_chrome_trace(self, path: "str | os.PathLike | None" = None) -> dict:
        """Chrome trace-event JSON (``chrome://tracing``, https://ui.perfetto.dev).

        One process per device with one thread (track) per inter-op thread slot; one
        process ``links`` with a track per link; each op and transfer is a complete
        event (``"ph": "X"``) in microseconds, named after the op or the tensor; memory
        in use is a counter per device.  Written to ``path`` when given; returned always.
        Format: "Trace Event Format", Google, 2016 (docs.google.com/document/d/
        1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU).
        """
        events: list[dict] = []
        devices = sorted({r.device for r in self.ops} | {r.device for r in self.memory})
        pid = {d: i + 1 for i, d in enumerate(devices)}
        for d, p in pid.items():
            events.append({"name": "process_name", "ph": "M", "pid": p, "tid": 0,
                           "args": {"name": d}})
            events.append({"name": "process_sort_index", "ph": "M", "pid": p, "tid": 0,
                           "args": {"sort_index": p}})
        threads = sorted({(r.device, r.thread) for r in self.ops})
        for d, t in threads:
            events.append({"name": "thread_name", "ph": "M", "pid": pid[d], "tid": t,
                           "args": {"name": f"inter-op thread {t}"}})
        for r in self.ops:
            events.append({"name": r.op, "cat": "op", "ph": "X", "pid": pid[r.device],
                           "tid": r.thread, "ts": r.start * 1e6, "dur": (r.end - r.start) * 1e6,
                           "args": {"type": r.type, "cores": r.cores}})
        links = sorted({link for r in self.transfers for link in r.links})
        if links:
            link_pid = len(devices) + 1
            tid = {link: i for i, link in enumerate(links)}
            events.append({"name": "process_name", "ph": "M", "pid": link_pid, "tid": 0,
                           "args": {"name": "links"}})
            for link, t in tid.items():
                events.append({"name": "thread_name", "ph": "M", "pid": link_pid, "tid": t,
                               "args": {"name": link}})
            for r in self.transfers:
                for link in r.links:
                    events.append({"name": r.tensor, "cat": "transfer", "ph": "X",
                                   "pid": link_pid, "tid": tid[link], "ts": r.start * 1e6,
                                   "dur": (r.end - r.start) * 1e6,
                                   "args": {"src": r.src, "dst": r.dst, "bytes": r.bytes}})
        for r in self.memory:
            events.append({"name": "memory", "ph": "C", "pid": pid[r.device], "ts": r.time * 1e6,
                           "args": {"bytes": r.bytes}})
        for e in self.oom_events:
            events.append({"name": f"OOM {e.op}", "ph": "i", "s": "p", "pid": pid.get(e.device, 0),
                           "tid": 0, "ts": e.time * 1e6,
                           "args": {"requested": e.requested, "in_use": e.in_use,
                                    "capacity": e.capacity}})
        doc = {"traceEvents": events, "displayTimeUnit": "ms", "otherData": dict(self.meta)}
        if path is not None:
            Path(path).write_text(json.dumps(doc))
        return doc

    # -- drawing -----------------------------------------------------------------------------
    def plot(self, path: "str | os.PathLike | None" = None, ax=None, *, legend_types: int = 12):
        """A Gantt chart: one row per device thread and per link, time in microseconds,
        ops coloured by type (the ``legend_types`` op types that took longest; the rest
        as "other ops") and transfers in grey, with a legend.  Drawn on ``ax`` when given,
        else on a new :class:`matplotlib.figure.Figure` (no pyplot: the caller's backend
        and current figure are left alone); saved to ``path`` when given.  Returns the
        Axes.  Needs matplotlib (``pip install 'placement-lab[plot]'``); raises
        ImportError saying so when it is missing.

        >>> t = Trace(ops=[OpRecord("a", "MatMul", "/cpu:0", 0, 0.0, 2e-6)])
        >>> ax = t.plot()
        >>> ax.get_xlabel(), [text.get_text() for text in ax.get_legend().get_texts()]
        ('time (us)', ['MatMul'])
        """
        try:
            from matplotlib import colormaps
            from matplotlib.figure import Figure
            from matplotlib.patches import Patch
        except ImportError as e:
            raise ImportError("Trace.plot needs matplotlib: pip install 'placement-lab[plot]'"
                              ) from e
        us = 1e6
        rows = sorted({(r.device, r.thread) for r in self.ops})
        links = sorted({link for r in self.transfers for link in r.links})
        labels = [f"{d} #{t}" for d, t in rows] + links
        row_of = {key: i for i, key in enumerate(rows)}
        row_of.update({link: len(rows) + i for i, link in enumerate(links)})
        if ax is None:
            ax = Figure(figsize=(12, 0.4 * len(labels) + 2)).add_subplot()
        busy: dict[str, float] = {}
        for r in self.ops:
            busy[r.type] = busy.get(r.type, 0.0) + (r.end - r.start)
        shown = sorted(busy, key=lambda t: (-busy[t], t))[:legend_types]
        cmap = colormaps["tab20"]
        color = {t: cmap(i % 20) for i, t in enumerate(shown)}
        other = "white"  # with the black edges: apart from every colour of tab20
        for r in self.ops:
            ax.barh(row_of[(r.device, r.thread)], (r.end - r.start) * us, left=r.start * us,
                    color=color.get(r.type, other), edgecolor="black", linewidth=0.3)
        for r in self.transfers:
            for link in r.links:
                ax.barh(row_of[link], (r.end - r.start) * us, left=r.start * us, color="grey",
                        edgecolor="black", linewidth=0.3)
        handles = [Patch(color=color[t], label=t) for t in shown]
        if len(busy) > len(shown):
            handles.append(Patch(facecolor=other, edgecolor="black", label="other ops"))
        if self.transfers:
            handles.append(Patch(color="grey", label="transfer"))
        ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        ax.set_yticks(range(len(labels)))
        ax.set_yticklabels(labels, fontsize=7)
        ax.invert_yaxis()
        ax.set_xlim(left=0)  # the step starts at 0
        ax.set_xlabel("time (us)")
        ax.set_title(f"step time {self.step_time * us:.1f} us")
        if path is not None:
            ax.figure.savefig(path, bbox_inches="tight")
        return ax

    # -- JSON -----------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        """A JSON-ready dict (records as lists of field values); see :meth:`from_dict`."""
        out = {"format": FORMAT}
        for key in _RECORDS:
            out[key] = [list(r) for r in getattr(self, key)]
        out.update(capacity=dict(self.capacity), fetch_end=dict(self.fetch_end),
                   meta=dict(self.meta))
        return out

    @classmethod
    def from_dict(cls, data: dict) -> "Trace":
        """Rebuild a trace from :meth:`to_dict`'s output (or its JSON)."""
        if data.get("format") != FORMAT:
            raise ValueError(f"not a trace: \"format\" must be {FORMAT!r}, not {data.get('format')!r}")
        records = {}
        for key, rec in _RECORDS.items():
            rows = []
            for row in data.get(key, []):
                if rec is TransferRecord:
                    row = list(row)
                    row[3] = tuple(row[3])
                rows.append(rec(*row))
            records[key] = rows
        return cls(**records, capacity=dict(data.get("capacity", {})),
                   fetch_end=dict(data.get("fetch_end", {})), meta=dict(data.get("meta", {})))

    def save(self, path: "str | os.PathLike") -> None:
        """Write :meth:`to_dict` as JSON."""
        Path(path).write_text(json.dumps(self.to_dict()))

    @classmethod
    def load(cls, path: "str | os.PathLike") -> "Trace":
        return cls.from_dict(json.loads(Path(path).read_text()))

    # -- invariants -------------------------------------------------------------------------------
    def validate(self, graph, cluster=None, *, tolerance: float = 0.0) -> None:
        """Check the execution invariants; raise :class:`InvalidTrace` listing every problem.

        Checked against ``graph``:

        - each recorded op exists, ran once, and ``0 <= start <= end``;
        - an op starts only after its data and control inputs finished and, for a data
          input from another device, after that tensor's transfer to its device arrived
          (a transfer starts after its producer ended);
        - one transfer per (tensor, destination device), from the producer's device.

        and, when ``cluster`` is given: every device exists; no device runs more ops at
        once than its ``inter_op_threads`` (and no thread slot runs two at once); the
        CPU ops of a host (of a task, in a measured trace, ``meta["backend"]`` ``"runtime"``
        or ``"tensorflow"``: its processes share the cores by time slices) never hold more than
        its cores; memory never exceeds a
        device's capacity unless an out-of-memory event on that device came first.
        ``tolerance`` (seconds) forgives clock skew in measured traces.
        """
        problems: list[str] = []
        tol = tolerance
        by_op: dict[str, OpRecord] = {}
        for r in self.ops:
            if r.op in by_op:
                problems.append(f"op {r.op!r} ran twice")
            by_op[r.op] = r
            if not (r.start >= -tol and r.end >= r.start - tol):
                problems.append(f"op {r.op!r} has start {r.start} and end {r.end}")
            if r.op not in graph:
                problems.append(f"op {r.op!r} is not in the graph")
        arrivals: dict[tuple[str, str], TransferRecord] = {}
        for x in self.transfers:
            key = (x.tensor, x.dst)
            if key in arrivals:
                problems.append(f"tensor {x.tensor!r} was sent to {x.dst} twice")
            arrivals[key] = x
            if x.src == x.dst:
                problems.append(f"tensor {x.tensor!r} was sent from {x.src} to itself")
            producer = by_op.get(x.tensor.rsplit(":", 1)[0])
            if producer is None:
                problems.append(f"tensor {x.tensor!r} was sent but its op did not run")
                continue
            if producer.device != x.src:
                problems.append(f"tensor {x.tensor!r} was sent from {x.src} but made on "
                                f"{producer.device}")
            if x.start < producer.end - tol:
                problems.append(f"tensor {x.tensor!r} was sent at {x.start}, before its op "
                                f"ended at {producer.end}")
            if x.end < x.start - tol:
                problems.append(f"transfer of {x.tensor!r} to {x.dst} ends before it starts")
        for r in self.ops:
            if r.op not in graph:
                continue
            op = graph.get_operation_by_name(r.op)
            for t in op.inputs:
                p = by_op.get(t.op.name)
                if p is None:
                    problems.append(f"op {r.op!r} ran but its input {t.op.name!r} did not")
                    continue
                if p.end > r.start + tol:
                    problems.append(f"op {r.op!r} started at {r.start} before its input "
                                    f"{t.op.name!r} ended at {p.end}")
                if p.device != r.device:
                    x = arrivals.get((t.name, r.device))
                    if x is None:
                        problems.append(f"op {r.op!r} on {r.device} reads {t.name!r} from "
                                        f"{p.device} with no transfer")
                    elif x.end > r.start + tol:
                        problems.append(f"op {r.op!r} started at {r.start} before {t.name!r} "
                                        f"arrived at {x.end}")
            for c in op.control_inputs:
                p = by_op.get(c.name)
                if p is None:
                    problems.append(f"op {r.op!r} ran but its control input {c.name!r} did not")
                elif p.end > r.start + tol:
                    problems.append(f"op {r.op!r} started at {r.start} before its control input "
                                    f"{c.name!r} ended at {p.end}")
        if cluster is not None:
            problems += self._check_resources(cluster, tol)
        if problems:
            raise InvalidTrace(problems)

    def _check_resources(self, cluster, tol: float) -> list[str]:
        problems: list[str] = []
        devices = {}
        for name in sorted({r.device for r in self.ops} | {r.device for r in self.memory}):
            try:
                devices[name] = cluster.device(name)
            except KeyError:
                problems.append(f"device {name} is not in the cluster")
        by_device: dict[str, list[OpRecord]] = {}
        # A real run's server processes share a host's cores by the OS's time slices, so
        # ops of several processes may overlap beyond the cores; each process holds its
        # own ops to them (the runtime counts cores per process).
        measured = self.meta.get("backend") in ("runtime", "tensorflow")
        by_host: dict[tuple, list[OpRecord]] = {}
        for r in self.ops:
            dev = devices.get(r.device)
            if dev is None:
                continue
            by_device.setdefault(r.device, []).append(r)
            if dev.is_cpu:
                by_host.setdefault((dev.host, dev.job, dev.task) if measured else (dev.host,),
                                   []).append(r)
            if not 0 <= r.thread < dev.inter_op_threads:
                problems.append(f"op {r.op!r} ran on thread {r.thread} of {r.device}, which has "
                                f"{dev.inter_op_threads} inter-op threads")
        for name, recs in by_device.items():
            limit = devices[name].inter_op_threads
            most, when = _max_overlap([(r.start, r.end, 1) for r in recs], tol)
            if most > limit:
                problems.append(f"{name} ran {most} ops at once at {when}, with "
                                f"{limit} inter-op threads")
            per_thread: dict[int, list] = {}
            for r in recs:
                per_thread.setdefault(r.thread, []).append((r.start, r.end, 1))
            for thread, iv in per_thread.items():
                most, when = _max_overlap(iv, tol)
                if most > 1:
                    problems.append(f"{name} thread {thread} ran {most} ops at once at {when}")
        for (host, *task), recs in by_host.items():
            cores = cluster.host(host).cpu_cores
            most, when = _max_overlap([(r.start, r.end, r.cores) for r in recs], tol)
            if most > cores:
                who = (f"task /job:{task[0]}/task:{task[1]} on host {host}" if task
                       else f"host {host}")
                problems.append(f"{who} had CPU ops holding {most} cores at {when}, with "
                                f"{cores} cores")
        first_oom: dict[str, float] = {}
        for e in self.oom_events:
            first_oom[e.device] = min(first_oom.get(e.device, e.time), e.time)
        for r in self.memory:
            cap = self.capacity.get(r.device)
            if cap is None and r.device in devices:
                cap = devices[r.device].memory_bytes
            if cap is not None and r.bytes > cap and not first_oom.get(r.device, float("inf")) <= r.time:
                problems.append(f"{r.device} held {r.bytes} bytes at {r.time}, over its capacity "
                                f"{cap}, with no out-of-memory event")
        return problems


def _union_length(intervals: Iterable[tuple[float, float]]) -> float:
    total, cur_start, cur_end = 0.0, None, None
    for s, e in sorted(intervals):
        if cur_end is None or s > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = s, e
        elif e > cur_end:
            cur_end = e
    if cur_end is not None:
        total += cur_end - cur_start
    return total


def _max_overlap(intervals: list[tuple[float, float, int]], tol: float) -> tuple[int, float]:
    """The largest total weight of intervals ``[start, end)`` open at one instant, and
    when.  Intervals that only touch do not overlap; ``tol`` shrinks each interval."""
    points = []
    for s, e, w in intervals:
        if e - s > 2 * tol:  # a zero-length op occupies nothing
            points.append((e - tol, 0, -w))  # at equal times, ends come before starts
            points.append((s + tol, 1, w))
    points.sort()
    cur = most = 0
    when = 0.0
    for t, _, w in points:
        cur += w
        if cur > most:
            most, when = cur, t
    return most, when
