"""TensorFlow's cluster spec: job names mapped to ``host:port`` addresses.

A :class:`ClusterSpec` is ``tf.train.ClusterSpec``: ``/job:ps/task:1`` is the second
address of job ``ps``.  :mod:`core.cluster` builds the hardware view on it.

>>> ClusterSpec({"ps": ["127.0.0.1:2221"], "worker": ["127.0.0.1:2223"]}).task_address("ps", 0)
'127.0.0.1:2221'
"""

from __future__ import annotations

import re
from typing import Iterable, Mapping

# One rule for job names, shared with device names.
from core.devices import _JOB_NAME as JOB_NAME_RE

__all__ = ["ClusterSpec", "InvalidClusterSpec", "UnknownTask", "split_address"]


# ======================================================================================
# Errors
# ======================================================================================

class InvalidClusterSpec(ValueError):
    """A malformed cluster spec.

    Attributes: ``reason``, and the culprit where there is one: ``job``, ``task``,
    ``address``; for a duplicate address, ``other`` is the ``(job, task)`` that has it first.
    """

    def __init__(self, reason: str, *, job=None, task=None, address=None, other=None):
        self.reason, self.job, self.task, self.address, self.other = reason, job, task, address, other
        where = ""
        if job is not None:
            where = f"job {job!r}" + (f" task {task}" if task is not None else "") + ": "
        super().__init__(f"invalid cluster spec: {where}{reason}")


class UnknownTask(KeyError):
    """A job or task the cluster does not have (``job``, ``task``, ``known``)."""

    def __init__(self, job, task=None, known: Iterable = ()):
        self.job, self.task, self.known = job, task, list(known)
        what = f"job {job!r}" if task is None else f"task {task} of job {job!r}"
        super().__init__(f"unknown {what}; the cluster has {self.known}")

    def __str__(self) -> str:  # KeyError would print the message quoted
        return self.args[0]


# ======================================================================================
# ClusterSpec
# ======================================================================================

# host:port where host is a name, an IPv4 address or a bracketed IPv6 address.
_ADDRESS = re.compile(r"(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._\-]+):(?P<port>[0-9]{1,5})\Z")


def split_address(address: str) -> tuple[str, int]:
    """``"host:port"`` -> ``(host, port)``; raise :class:`InvalidClusterSpec` if malformed.

    Port 0 is allowed: it asks the server to pick a free (ephemeral) port.

    >>> split_address("127.0.0.1:2222")
    ('127.0.0.1', 2222)
    """
    match = _ADDRESS.match(address) if isinstance(address, str) else None
    if not match or int(match["port"]) > 65535:
        raise InvalidClusterSpec(f"malformed address {address!r}; expected host:port with "
                                 "an integer port in 0..65535", address=address)
    return match["host"], int(match["port"])


class ClusterSpec:
    """Job names mapped to task addresses, as ``tf.train.ClusterSpec``.

    ``jobs`` maps each job name to a list of ``"host:port"`` strings (task ``i`` is the
    ``i``-th) or, for a sparse job, to a dict task index -> address.

    >>> spec = ClusterSpec({"ps": ["127.0.0.1:2221", "127.0.0.1:2222"],
    ...                     "worker": ["127.0.0.1:2223"]})
    >>> spec.task_address("ps", 1), spec.num_tasks("ps"), spec.jobs
    ('127.0.0.1:2222', 2, ['ps', 'worker'])
    >>> ClusterSpec(spec.as_dict()) == spec
    True
    """

    def __init__(self, jobs: "Mapping | ClusterSpec"):
        if isinstance(jobs, ClusterSpec):
            jobs = jobs.as_dict()
        if not isinstance(jobs, Mapping) or not jobs:
            raise InvalidClusterSpec("a cluster spec needs at least one job")
        for job in jobs:
            if not isinstance(job, str) or not JOB_NAME_RE.match(job):
                raise InvalidClusterSpec(f"bad job name {job!r}: a job name starts with a letter "
                                         "and holds only letters, digits, '_' and '-'", job=job)
        self._jobs: dict[str, dict[int, str]] = {}
        owner: dict[str, tuple[str, int]] = {}  # address -> the first task that has it
        for job in sorted(jobs):
            tasks = _task_items(job, jobs[job])
            for task, address in tasks.items():
                try:
                    _, port = split_address(address)
                except InvalidClusterSpec as e:
                    raise InvalidClusterSpec(e.reason, job=job, task=task, address=address) from None
                # Port 0 means "any free port", so two tasks may both ask for it.
                if port != 0 and address in owner:
                    first = owner[address]
                    raise InvalidClusterSpec(
                        f"address {address!r} is used by both /job:{first[0]}/task:{first[1]} "
                        f"and /job:{job}/task:{task}", job=job, task=task, address=address, other=first)
                owner.setdefault(address, (job, task))
            self._jobs[job] = tasks

    # -- lookups ---------------------------------------------------------------------
    @property
    def jobs(self) -> list[str]:
        """The job names, sorted."""
        return list(self._jobs)

    def _tasks_of(self, job: str) -> dict[int, str]:
        if job not in self._jobs:
            raise UnknownTask(job, None, self.jobs)
        return self._jobs[job]

    def num_tasks(self, job: str) -> int:
        """How many tasks ``job`` has."""
        return len(self._tasks_of(job))

    def task_indices(self, job: str) -> list[int]:
        """The task indices of ``job``, sorted (``0..n-1`` unless the job is sparse)."""
        return list(self._tasks_of(job))

    def task_address(self, job: str, task: int) -> str:
        """The address of task ``task`` of ``job``."""
        tasks = self._tasks_of(job)
        if task not in tasks:
            raise UnknownTask(job, task, [f"/job:{job}/task:{t}" for t in tasks])
        return tasks[task]

    def job_tasks(self, job: str) -> list[str | None]:
        """The addresses of ``job``, where position ``i`` is task ``i``; as in TensorFlow,
        a sparse job has ``None`` at the indices it lacks."""
        tasks = self._tasks_of(job)
        return [tasks.get(i) for i in range(max(tasks) + 1)]

    def tasks(self) -> list[tuple[str, int]]:
        """Every ``(job, task)``, sorted."""
        return [(job, task) for job, tasks in self._jobs.items() for task in tasks]

    def as_dict(self) -> dict[str, "list[str] | dict[int, str]"]:
        """Jobs -> list of addresses (dense jobs) or dict index -> address (sparse ones)."""
        out: dict = {}
        for job, tasks in self._jobs.items():
            dense = list(tasks) == list(range(len(tasks)))
            out[job] = list(tasks.values()) if dense else dict(tasks)
        return out

    def __eq__(self, other) -> bool:
        return isinstance(other, ClusterSpec) and self._jobs == other._jobs

    def __hash__(self) -> int:
        return hash(tuple((job, tuple(tasks.items())) for job, tasks in self._jobs.items()))

    def __repr__(self) -> str:
        return f"ClusterSpec({self.as_dict()!r})"


def _task_items(job: str, tasks) -> dict[int, str]:
    """A job's tasks as a dict index -> address, sorted by index."""
    if isinstance(tasks, Mapping):
        for task in tasks:
            if not isinstance(task, int) or isinstance(task, bool) or task < 0:
                raise InvalidClusterSpec(f"task index {task!r} is not a non-negative integer", job=job)
        items = dict(sorted(tasks.items()))
    elif isinstance(tasks, (list, tuple)):
        items = dict(enumerate(tasks))
    else:  # a bare string is the usual mistake: {"worker": "host:2222"}
        raise InvalidClusterSpec(f"the tasks must be a list of addresses or a dict "
                                 f"index -> address, not {tasks!r}", job=job)
    if not items:
        raise InvalidClusterSpec("the job has no tasks", job=job)
    return items
