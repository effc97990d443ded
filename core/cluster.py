"""Clusters: which tasks exist (:class:`ClusterSpec`) and what hardware they run on
(:class:`Cluster`).

A :class:`ClusterSpec` is TensorFlow's ``tf.train.ClusterSpec``: job names mapped to
``host:port`` addresses, ``/job:ps/task:1`` being the second address of job ``ps``.

A :class:`Cluster` is the hardware view the placers, the simulator and the runtime share:
hosts (machines), tasks (server processes, each on one host), devices (a task's CPU and
GPUs, with speed, memory and thread pools) and links (shared resources a transfer
occupies).  All times are in seconds, rates in FLOP/s and bytes/s, sizes in bytes.

Links are found by name, so a cluster is plain data that round-trips through JSON:

==========================  =========  ===============================================
name                        kind       used by
==========================  =========  ===============================================
``memcpy:<host>``           memcpy     transfers between two tasks of the host
``network:<host>``          network    transfers leaving or entering the host
``pcie:<device full name>`` pcie       transfers to or from that GPU
``nvlink:<host>``           nvlink     GPU to GPU inside one task (``nvlink=True``)
==========================  =========  ===============================================

>>> spec = ClusterSpec({"ps": ["127.0.0.1:2221"], "worker": ["127.0.0.1:2223"]})
>>> cluster = Cluster.from_spec(spec, gpus_per_task={"worker": 1})
>>> cluster.default_device("worker", 0).name
'/job:worker/replica:0/task:0/device:GPU:0'
>>> [link.name for link in cluster.route("/job:ps/task:0/cpu:0", "/job:worker/task:0/gpu:0")]
['network:host0', 'network:host1', 'pcie:/job:worker/replica:0/task:0/device:GPU:0']
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, replace
from pathlib import Path
from typing import Iterable, Mapping

# One rule for job names, shared with device names.
from core.cluster_spec import JOB_NAME_RE, ClusterSpec, InvalidClusterSpec, UnknownTask, split_address
from core.devices import DeviceSpec, InvalidDeviceSpec, full_name
# The hardware records live in core.hardware; they are importable from here too.
from core.hardware import (DEFAULT_FIGURES, LINK_KINDS, Device, HardwareFigures, Host,
                           InvalidCluster, Link, Task, UnknownDevice, _is_int, _is_number,
                           _non_negative, _non_negative_int, _positive, _positive_int, _record,
                           bandwidth_at, device_sort_key, memcpy_link_name, network_link_name,
                           nvlink_link_name, pcie_link_name)
from core.runtime_model import RuntimeModel, get_runtime_model

__all__ = [
    "ClusterSpec", "InvalidClusterSpec", "UnknownTask", "split_address",
    "Host", "Task", "Device", "Link", "LINK_KINDS", "Cluster", "InvalidCluster",
    "UnknownDevice", "HardwareFigures", "DEFAULT_FIGURES", "FORMAT", "usable_cpu_cores",
    "bandwidth_at",
]

FORMAT = "placement-lab.cluster/1"


# ======================================================================================
# Cluster
# ======================================================================================

class Cluster:
    """Hosts, tasks, devices and links; immutable, validated when built.

    ``devices`` is kept sorted by :func:`device_sort_key` whatever order it is given in;
    ``hosts`` by name and ``tasks`` by ``(job, index)``.  ``master`` is the ``(job, task)``
    of the session's master; by default the first task of job ``localhost``, else of job
    ``worker``, else the first task.  Link names follow the table in the module docstring.

    >>> cluster = Cluster.single_host(gpus=2, cpu_cores=4)
    >>> [d.name for d in cluster.devices]  # doctest: +NORMALIZE_WHITESPACE
    ['/job:localhost/replica:0/task:0/device:CPU:0',
     '/job:localhost/replica:0/task:0/device:GPU:0',
     '/job:localhost/replica:0/task:0/device:GPU:1']
    >>> cluster.master, cluster.default_device("localhost", 0).device_type
    (('localhost', 0), 'GPU')
    >>> Cluster.from_dict(cluster.to_dict()) == cluster
    True
    """

    def __init__(self, hosts: Iterable[Host], tasks: Iterable[Task], devices: Iterable[Device],
                 links: "Mapping[str, Link] | Iterable[Link]", master=None, nvlink: bool = False,
                 runtime_model: "RuntimeModel | str | None" = None):
        self._hosts = tuple(sorted(hosts, key=lambda h: h.name))
        self._tasks = tuple(sorted(tasks, key=lambda t: (t.job, t.index)))
        self._devices = tuple(sorted(devices, key=device_sort_key))
        link_list = list(links.values()) if isinstance(links, Mapping) else list(links)
        self._links = {link.name: link for link in sorted(link_list, key=lambda l: l.name)}
        self._link_count = len(link_list)  # to catch two links with one name
        self._nvlink = bool(nvlink)
        self._runtime_model = get_runtime_model(runtime_model)
        self._master = tuple(master) if master is not None else _default_master(self._tasks)
        # Lookups; validate() reports the duplicates these would hide.
        self._host_by_name = {h.name: h for h in self._hosts}
        self._task_by_key = {(t.job, t.index): t for t in self._tasks}
        self._device_by_name = {d.name: d for d in self._devices}
        self.validate()

    # -- plain views -------------------------------------------------------------------
    @property
    def hosts(self) -> tuple[Host, ...]:
        return self._hosts

    @property
    def runtime_model(self) -> RuntimeModel:
        """The runtime the cluster's figures describe (:mod:`core.runtime_model`): what
        ``sim.simulate`` predicts by default.  A preset's is :data:`~core.runtime_model.IDEAL`;
        a calibration records the runtime it measured."""
        return self._runtime_model

    def with_runtime_model(self, model: "RuntimeModel | str") -> "Cluster":
        """The same cluster with another runtime model.

        >>> Cluster.single_host().with_runtime_model("interpreter").runtime_model.name
        'interpreter'
        """
        return Cluster(self._hosts, self._tasks, self._devices, self._links, self._master,
                       self._nvlink, model)

    @property
    def tasks(self) -> tuple[Task, ...]:
        return self._tasks

    @property
    def devices(self) -> tuple[Device, ...]:
        return self._devices

    @property
    def links(self) -> dict[str, Link]:
        return dict(self._links)

    @property
    def master(self) -> tuple[str, int]:
        return self._master

    @property
    def nvlink(self) -> bool:
        return self._nvlink

    @property
    def job_names(self) -> list[str]:
        """The jobs, sorted."""
        return sorted({t.job for t in self._tasks})

    # -- lookups -------------------------------------------------------------------------
    def host(self, name: str) -> Host:
        """The host called ``name`` (KeyError if none)."""
        if name not in self._host_by_name:
            raise KeyError(f"unknown host {name!r}; the cluster has {list(self._host_by_name)}")
        return self._host_by_name[name]

    def task(self, job: str, index: int) -> Task:
        """The task ``(job, index)``; :class:`UnknownTask` if none."""
        task = self._task_by_key.get((job, index))
        if task is None:
            raise UnknownTask(job, index, [t.name for t in self._tasks])
        return task

    def device(self, name: "str | DeviceSpec | Device") -> Device:
        """The device a full name denotes, in any spelling (``/job:j/task:0/cpu:0`` and
        ``/job:j/replica:0/task:0/device:CPU:0`` are one device); a missing replica is 0.
        Raises :class:`UnknownDevice` naming it and listing the devices."""
        if isinstance(name, Device):
            name = name.name
        known = list(self._device_by_name)
        try:
            spec = DeviceSpec.from_string(name)
        except InvalidDeviceSpec as e:
            raise UnknownDevice(name, known, str(e)) from None
        if None in (spec.job, spec.task, spec.device_type, spec.device_index):
            raise UnknownDevice(name, known, "not a full device name")
        key = full_name(spec.job, spec.task, spec.device_type, spec.device_index, spec.replica or 0)
        if key not in self._device_by_name:
            raise UnknownDevice(name, known)
        return self._device_by_name[key]

    def devices_of_task(self, job: str, task: int) -> tuple[Device, ...]:
        """The devices of one task, in cluster order (CPU first)."""
        self.task(job, task)  # raises UnknownTask
        return tuple(d for d in self._devices if d.job == job and d.task == task)

    def default_device(self, job: str, task: int) -> Device:
        """GPU:0 of the task if it has one, else its CPU:0 (TensorFlow's default)."""
        devices = {(d.device_type, d.index): d for d in self.devices_of_task(job, task)}
        return devices.get(("GPU", 0)) or devices[("CPU", 0)]

    def host_of(self, device_name: "str | Device") -> Host:
        """The :class:`Host` the device is on."""
        return self._host_by_name[self.device(device_name).host]

    def cluster_spec(self) -> ClusterSpec:
        """The tasks' addresses as a :class:`ClusterSpec`; every task needs an address."""
        missing = [t.name for t in self._tasks if t.address is None]
        if missing:
            raise InvalidCluster("tasks without an address cannot form a cluster spec",
                                 culprit=", ".join(missing))
        jobs: dict[str, dict[int, str]] = {}
        for t in self._tasks:
            jobs.setdefault(t.job, {})[t.index] = t.address
        return ClusterSpec(jobs)

    # -- routes ----------------------------------------------------------------------------
    def route(self, src: "str | Device", dst: "str | Device") -> tuple[Link, ...]:
        """The links a tensor crosses from ``src`` to ``dst``, in order.

        - same device, or two CPUs of one task (one address space): no link;
        - CPU <-> GPU of one task: the GPU's PCIe link;
        - GPU <-> GPU of one task: the host's NVLink with ``nvlink=True``, else both
          GPUs' PCIe links (staged through host memory);
        - two tasks of one host: the host's memcpy link (plus the PCIe of GPU ends);
        - two hosts: the source host's network link then the destination host's
          (plus the PCIe of GPU ends).
        """
        a, b = self.device(src), self.device(dst)
        if a.name == b.name:
            return ()
        names: list[str] = []
        if (a.job, a.task) == (b.job, b.task):
            if not a.is_cpu and not b.is_cpu and self._nvlink:
                names = [nvlink_link_name(a.host)]
            else:
                names = [pcie_link_name(d.name) for d in (a, b) if not d.is_cpu]
        else:
            middle = ([memcpy_link_name(a.host)] if a.host == b.host
                      else [network_link_name(a.host), network_link_name(b.host)])
            names = ([pcie_link_name(a.name)] if not a.is_cpu else []) + middle + \
                    ([pcie_link_name(b.name)] if not b.is_cpu else [])
        return tuple(self._link(name) for name in names)

    def _link(self, name: str) -> Link:
        if name not in self._links:
            raise InvalidCluster("a route needs this link, which the cluster does not have",
                                 culprit=name)
        return self._links[name]

    def _needed_links(self) -> dict[str, str]:
        """Link name -> the device or host that needs it, for every route there can be."""
        needed: dict[str, str] = {}
        for d in self._devices:
            if not d.is_cpu:
                needed[pcie_link_name(d.name)] = d.name
        tasks_per_host: dict[str, int] = {}
        for t in self._tasks:
            tasks_per_host[t.host] = tasks_per_host.get(t.host, 0) + 1
            gpus = [d for d in self._devices if (d.job, d.task) == (t.job, t.index) and not d.is_cpu]
            if self._nvlink and len(gpus) >= 2:
                needed[nvlink_link_name(t.host)] = t.name
        for host, count in tasks_per_host.items():
            if count >= 2:
                needed[memcpy_link_name(host)] = f"host {host}"
            if len(tasks_per_host) >= 2:
                needed[network_link_name(host)] = f"host {host}"
        return needed

    # -- invariants -------------------------------------------------------------------------
    def validate(self) -> None:
        """Raise :class:`InvalidCluster` naming the first culprit of a broken invariant:
        no tasks or devices; duplicate host, task, device, link names or addresses; a
        device on an unknown task or host, or whose name disagrees with its fields; a task
        on an unknown host or without a CPU; non-positive rates, capacities or threads; a
        link of an unknown kind; a link some route needs but the cluster lacks; an unknown
        master."""
        if not self._tasks:
            raise InvalidCluster("the cluster has no tasks")
        if not self._devices:
            raise InvalidCluster("the cluster has no devices")
        _no_duplicates("host", [h.name for h in self._hosts])
        _no_duplicates("task", [t.name for t in self._tasks])
        _no_duplicates("device", [d.name for d in self._devices])
        if self._link_count != len(self._links):
            raise InvalidCluster("two links share one name")
        for h in self._hosts:
            _positive_int(h.name, "cpu_cores", h.cpu_cores)
            _positive_int(h.name, "memory_bytes", h.memory_bytes)
        self._validate_tasks()
        for d in self._devices:
            self._validate_device(d)
        for t in self._tasks:  # after the devices, so that a misnamed CPU is named itself
            if full_name(t.job, t.index, "CPU", 0) not in self._device_by_name:
                raise InvalidCluster("the task has no CPU:0 device", t.name)
        for name, link in self._links.items():
            if link.kind not in LINK_KINDS:
                raise InvalidCluster(f"link kind {link.kind!r} is not one of {LINK_KINDS}", name)
            _positive(name, "bandwidth", link.bandwidth)
            _non_negative(name, "latency", link.latency)
            sizes = [n for n, _ in link.size_costs]
            if len(set(sizes)) != len(sizes):
                raise InvalidCluster(f"size_costs has two points for one size: {sizes}", name)
            for n, t in link.size_costs:
                _non_negative(name, "size_costs bytes", n)
                _non_negative(name, f"size_costs seconds at {n} bytes", t)
        for name, user in self._needed_links().items():
            if name not in self._links:
                raise InvalidCluster(f"link {name!r} is missing; routes of {user} need it",
                                     culprit=name)
        if self._master not in self._task_by_key:
            raise InvalidCluster(f"the master is not a task of the cluster "
                                 f"(tasks: {[t.name for t in self._tasks]})", culprit=self._master)

    def _validate_tasks(self) -> None:
        owner: dict[str, str] = {}
        for t in self._tasks:
            if not isinstance(t.job, str) or not JOB_NAME_RE.match(t.job):
                raise InvalidCluster(f"bad job name {t.job!r}", t.name)
            _non_negative_int(t.name, "index", t.index)
            _non_negative(t.name, "step_overhead", t.step_overhead)
            _non_negative(t.name, "part_overhead", t.part_overhead)
            _non_negative(t.name, "lock_wakeup", t.lock_wakeup)
            if t.host not in self._host_by_name:
                raise InvalidCluster(f"the task is on unknown host {t.host!r}", t.name)
            if t.address is not None:
                try:
                    _, port = split_address(t.address)
                except InvalidClusterSpec as e:
                    raise InvalidCluster(e.reason, t.name) from None
                if port != 0 and t.address in owner:
                    raise InvalidCluster(f"address {t.address!r} is used by both "
                                         f"{owner[t.address]} and {t.name}", t.name)
                owner.setdefault(t.address, t.name)

    def _validate_device(self, d: Device) -> None:
        task = self._task_by_key.get((d.job, d.task))
        if task is None:
            raise InvalidCluster("the device is on an unknown task", d.name)
        if d.host not in self._host_by_name:
            raise InvalidCluster(f"the device is on unknown host {d.host!r}", d.name)
        if d.host != task.host:
            raise InvalidCluster(f"the device is on host {d.host!r} but its task is on "
                                 f"{task.host!r}", d.name)
        _non_negative_int(d.name, "index", d.index)
        expected = full_name(d.job, d.task, str(d.device_type), d.index)
        if d.name != expected:
            raise InvalidCluster("the name disagrees with job, task, device_type and index "
                                 f"(expected {expected!r})", d.name)
        for attr in ("peak_flops", "mem_bandwidth"):
            _positive(d.name, attr, getattr(d, attr))
        for attr in ("memory_bytes", "inter_op_threads", "intra_op_threads"):
            _positive_int(d.name, attr, getattr(d, attr))
        if not _is_number(d.intra_op_speedup) or d.intra_op_speedup < 1:
            raise InvalidCluster(f"intra_op_speedup must be >= 1, not {d.intra_op_speedup!r}", d.name)
        _non_negative(d.name, "op_overhead", d.op_overhead)
        _non_negative_int(d.name, "parallel_min_elements", d.parallel_min_elements)
        if not isinstance(d.products_split, bool):
            raise InvalidCluster(f"products_split must be true or false, not "
                                 f"{d.products_split!r}", d.name)
        for op_type, fixed, factor in d.kernel_costs:
            _non_negative(d.name, f"kernel_costs[{op_type!r}] fixed seconds", fixed)
            _positive(d.name, f"kernel_costs[{op_type!r}] factor", factor)
        for dtype, rate in d.dtype_flops:
            _positive(d.name, f"dtype_flops[{dtype!r}]", rate)
        for op_type, seconds in d.warm_kernel_costs:
            _non_negative(d.name, f"warm_kernel_costs[{op_type!r}]", seconds)
        _non_negative_int(d.name, "warm_span", d.warm_span)
        if d.warm_kernel_costs and not d.warm_span:
            raise InvalidCluster("warm_kernel_costs need a warm_span of at least 1", d.name)

    # -- copies with changes ------------------------------------------------------------------
    def replace_device(self, name: "str | Device", **changes) -> "Cluster":
        """A new cluster where one device has some fields changed (validated).

        >>> c = Cluster.single_host().replace_device("/job:localhost/task:0/cpu:0", memory_bytes=1024)
        >>> c.device("/job:localhost/task:0/cpu:0").memory_bytes
        1024
        """
        old = self.device(name)
        devices = [replace(d, **changes) if d.name == old.name else d for d in self._devices]
        return Cluster(self._hosts, self._tasks, devices, self._links, self._master, self._nvlink,
                       self._runtime_model)

    def replace_task(self, job: str, index: int, **changes) -> "Cluster":
        """A new cluster where task ``(job, index)`` has some fields changed (validated);
        :class:`UnknownTask` if there is none.

        >>> c = Cluster.single_host().replace_task("localhost", 0, lock_wakeup=2e-5)
        >>> c.task("localhost", 0).lock_wakeup
        2e-05
        """
        old = self.task(job, index)
        tasks = [replace(t, **changes) if t is old else t for t in self._tasks]
        return Cluster(self._hosts, tasks, self._devices, self._links, self._master, self._nvlink,
                       self._runtime_model)

    def replace_host(self, name: str, **changes) -> "Cluster":
        """A new cluster where one host has some fields changed (validated).

        >>> c = Cluster.single_host().replace_host("host0", shared_bandwidth=[(1 << 20, 9e10)])
        >>> c.host("host0").shared_bandwidth
        ((1048576, 90000000000.0),)
        """
        old = self.host(name)
        hosts = [replace(h, **changes) if h.name == old.name else h for h in self._hosts]
        return Cluster(hosts, self._tasks, self._devices, self._links, self._master, self._nvlink,
                       self._runtime_model)

    def replace_link(self, name: str, **changes) -> "Cluster":
        """A new cluster where one link has some fields changed (validated)."""
        if name not in self._links:
            raise KeyError(f"unknown link {name!r}; the cluster has {list(self._links)}")
        links = [replace(l, **changes) if l.name == name else l for l in self._links.values()]
        return Cluster(self._hosts, self._tasks, self._devices, links, self._master, self._nvlink,
                       self._runtime_model)

    # -- JSON ---------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        """A JSON-ready dict with a ``"format"`` key; :meth:`from_dict` reads it back."""
        return {
            "format": FORMAT,
            "master": list(self._master),
            "nvlink": self._nvlink,
            "hosts": [asdict(h) for h in self._hosts],
            "tasks": [asdict(t) for t in self._tasks],
            "devices": [{**asdict(d), "kernel_costs": {k: [fixed, factor] for k, fixed, factor
                                                       in d.kernel_costs},
                         "dtype_flops": dict(d.dtype_flops),
                         "warm_kernel_costs": dict(d.warm_kernel_costs)}
                        for d in self._devices],
            "links": [asdict(l) for l in self._links.values()],
            "runtime_model": self._runtime_model.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Mapping) -> "Cluster":
        """Build and validate a cluster from :meth:`to_dict`'s output; a malformed dict
        raises :class:`InvalidCluster` saying what is wrong and where."""
        if not isinstance(data, Mapping):
            raise InvalidCluster(f"expected a JSON object, got {type(data).__name__}")
        if data.get("format") != FORMAT:
            raise InvalidCluster(f"\"format\" must be {FORMAT!r}, not {data.get('format')!r}")
        keys = {"format", "master", "nvlink", "hosts", "tasks", "devices", "links"}
        optional = {"runtime_model"}  # clusters saved before it was recorded: the ideal one
        if not keys <= set(data) <= keys | optional:
            raise InvalidCluster(f"expected the keys {sorted(keys)}; missing "
                                 f"{sorted(keys - set(data))}, unexpected {sorted(set(data) - keys)}")
        master = data["master"]
        if not (isinstance(master, list) and len(master) == 2 and isinstance(master[0], str)
                and _is_int(master[1])):
            raise InvalidCluster(f"\"master\" must be [job, task], not {master!r}")
        if not isinstance(data["nvlink"], bool):
            raise InvalidCluster(f"\"nvlink\" must be true or false, not {data['nvlink']!r}")
        records = {key: [_record(kind, item, f"{key}[{i}]") for i, item in enumerate(_list(data, key))]
                   for key, kind in (("hosts", Host), ("tasks", Task), ("devices", Device),
                                     ("links", Link))}
        try:
            runtime_model = RuntimeModel.from_dict(data.get("runtime_model", "ideal"))
        except (TypeError, ValueError) as e:
            raise InvalidCluster(f"\"runtime_model\": {e}") from None
        return cls(records["hosts"], records["tasks"], records["devices"], records["links"],
                   master=tuple(master), nvlink=data["nvlink"], runtime_model=runtime_model)

    def save(self, path: "str | os.PathLike") -> None:
        """Write the cluster as JSON (see :meth:`to_dict`)."""
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, path: "str | os.PathLike") -> "Cluster":
        """Read a cluster saved by :meth:`save`; :class:`InvalidCluster` names the path and
        the problem when the file is malformed."""
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise InvalidCluster(f"cannot read a cluster: {e}", path=str(path)) from e
        try:
            return cls.from_dict(data)
        except InvalidCluster as e:
            raise InvalidCluster(e.reason, e.culprit, path=str(path)) from e

    # -- value semantics ------------------------------------------------------------------------
    def _key(self) -> tuple:
        return (self._hosts, self._tasks, self._devices, tuple(self._links.values()),
                self._master, self._nvlink, self._runtime_model)

    def __eq__(self, other) -> bool:
        return isinstance(other, Cluster) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (f"Cluster({len(self._hosts)} hosts, {len(self._tasks)} tasks, "
                f"devices={[d.name for d in self._devices]})")

    # -- presets ----------------------------------------------------------------------------------
    @classmethod
    def single_host(cls, gpus: int = 0, cpu_cores: int = 2, job: str = "localhost", *,
                    nvlink: bool = False, **overrides) -> "Cluster":
        """One task ``/job:<job>/replica:0/task:0`` on host ``host0``, with a CPU and
        ``gpus`` GPUs; figures from :data:`DEFAULT_FIGURES`, changed by ``overrides``
        (names of :class:`HardwareFigures` fields, e.g. ``gpu_memory_bytes=8 * 2**30``).

        >>> [d.name for d in Cluster.single_host(gpus=1).devices]
        ['/job:localhost/replica:0/task:0/device:CPU:0', '/job:localhost/replica:0/task:0/device:GPU:0']
        """
        figures = DEFAULT_FIGURES.with_(**overrides)
        return _build([Task(job, 0, "host0")], {(job, 0): gpus}, cpu_cores, figures, nvlink)

    @classmethod
    def from_spec(cls, cluster_spec: "ClusterSpec | Mapping",
                  gpus_per_task: "int | Mapping[str, int]" = 0, hosts: Mapping | None = None,
                  cpu_cores: int = 2, *, nvlink: bool = False, **overrides) -> "Cluster":
        """One task per ``(job, task)`` of the spec, with its address.

        Each task gets its own host (``host0``, ``host1``, ... in task order) unless
        ``hosts`` maps ``(job, task)`` or ``"job/task"`` to a host name: tasks mapped to
        one host share its ``cpu_cores`` (each task's CPU gets all of them as threads,
        and the simulator charges the host).  ``gpus_per_task`` is an int or a dict
        job -> int (absent jobs: 0).  ``overrides`` change :class:`HardwareFigures`.

        >>> c = Cluster.from_spec({"ps": ["a:1"], "worker": ["b:1", "c:1"]},
        ...                       hosts={("worker", 0): "big", "worker/1": "big"})
        >>> [(t.name, t.host) for t in c.tasks]  # doctest: +NORMALIZE_WHITESPACE
        [('/job:ps/replica:0/task:0', 'host0'), ('/job:worker/replica:0/task:0', 'big'),
         ('/job:worker/replica:0/task:1', 'big')]
        """
        spec = ClusterSpec(cluster_spec)
        figures = DEFAULT_FIGURES.with_(**overrides)
        chosen = _host_choice(spec, hosts or {})
        if not isinstance(gpus_per_task, int):
            for job in gpus_per_task:  # a misspelt job would silently get no GPU
                spec.num_tasks(job)  # raises UnknownTask
        used = set(chosen.values())
        fresh = (f"host{i}" for i in range(len(spec.tasks()) + len(used) + 1)
                 if f"host{i}" not in used)
        tasks, gpus = [], {}
        for job, index in spec.tasks():
            host = chosen.get((job, index)) or next(fresh)
            tasks.append(Task(job, index, host, spec.task_address(job, index)))
            gpus[(job, index)] = (gpus_per_task if isinstance(gpus_per_task, int)
                                  else gpus_per_task.get(job, 0))
        return _build(tasks, gpus, cpu_cores, figures, nvlink)

    @classmethod
    def preset(cls, name: str, hosts: int = 1, gpu_memory_fraction: float | None = None,
               network: str | None = None) -> "Cluster":
        """A real machine with its published figures (``hosts`` of them, joined by
        ``network``); ``gpu_memory_fraction`` keeps that share of each GPU's memory.  See
        :func:`core.presets.build` for the machines, their sources and the errors.

        >>> c = Cluster.preset("dgx-a100", hosts=2)
        >>> len(c.devices), c.devices[1].flops_for("float16") / 1e12
        (18, 312.0)
        """
        from core import presets  # core.presets builds on this module
        return presets.build(name, hosts, gpu_memory_fraction, network)

    @classmethod
    def presets(cls) -> list[str]:
        """The names :meth:`preset` knows, sorted.

        >>> Cluster.presets()
        ['dgx-a100', 'dgx1-v100', 'pcie-1080ti-x4']
        """
        from core import presets
        return presets.names()

    @classmethod
    def this_machine(cls, job: str = "localhost", gpus: int | None = None, **overrides) -> "Cluster":
        """A single-host cluster for the machine this runs on: its usable CPU cores
        (``os.sched_getaffinity``), its memory, and its GPUs (``gpus=None`` detects them
        with numba, imported only here; any failure, or ``CUDA_VISIBLE_DEVICES=""``, means
        none).  Rates are the default figures until a calibration run measures them.

        Detection initialises the CUDA driver in this process; a program that forks
        processes which use CUDA should pass ``gpus`` or detect in a child.
        """
        cores = usable_cpu_cores()
        overrides.setdefault("host_memory_bytes", _memory_bytes())
        return cls.single_host(gpus=_detect_gpu_count() if gpus is None else gpus,
                               cpu_cores=cores, job=job, **overrides)


# ======================================================================================
# Helpers
# ======================================================================================

def _default_master(tasks: tuple[Task, ...]) -> tuple[str, int] | None:
    for job in ("localhost", "worker"):
        for t in tasks:
            if t.job == job:
                return (t.job, t.index)
    return (tasks[0].job, tasks[0].index) if tasks else None


def _host_choice(spec: ClusterSpec, hosts: Mapping) -> dict[tuple[str, int], str]:
    """Normalise the ``hosts`` argument of :meth:`Cluster.from_spec` to (job, task) -> host."""
    chosen = {}
    for key, host in hosts.items():
        if isinstance(key, str) and key.count("/") == 1 and key.split("/")[1].isdigit():
            job, task = key.split("/")[0], int(key.split("/")[1])
        elif isinstance(key, tuple) and len(key) == 2:
            job, task = key
        else:
            raise TypeError(f"a hosts key must be (job, task) or 'job/task', not {key!r}")
        spec.task_address(job, task)  # raises UnknownTask
        chosen[(job, task)] = host
    return chosen


def _build(tasks: list[Task], gpus: Mapping[tuple[str, int], int], cpu_cores: int,
           figures: HardwareFigures, nvlink: bool) -> Cluster:
    """The devices and links of the presets, from the tasks and the figures."""
    f = figures
    host_names = sorted({t.host for t in tasks})
    hosts = [Host(name, cpu_cores, f.host_memory_bytes) for name in host_names]
    devices, links = [], []
    for t in tasks:
        cpu_name = full_name(t.job, t.index, "CPU", 0)
        devices.append(Device(
            cpu_name, t.job, t.index, "CPU", 0, t.host, f.cpu_flops, f.cpu_mem_bandwidth,
            f.host_memory_bytes,
            inter_op_threads=f.cpu_inter_op_threads or cpu_cores,
            intra_op_threads=f.cpu_intra_op_threads or cpu_cores,
            intra_op_speedup=1 + f.cpu_parallel_efficiency * (cpu_cores - 1),
            op_overhead=f.cpu_op_overhead))
        for i in range(gpus.get((t.job, t.index), 0)):
            gpu_name = full_name(t.job, t.index, "GPU", i)
            devices.append(Device(
                gpu_name, t.job, t.index, "GPU", i, t.host, f.gpu_flops, f.gpu_mem_bandwidth,
                f.gpu_memory_bytes, f.gpu_inter_op_threads, f.gpu_intra_op_threads,
                intra_op_speedup=1.0, op_overhead=f.gpu_op_overhead))
            links.append(Link(pcie_link_name(gpu_name), "pcie", f.pcie_bandwidth, f.pcie_latency))
        if nvlink and gpus.get((t.job, t.index), 0) >= 2 and \
                nvlink_link_name(t.host) not in {l.name for l in links}:
            links.append(Link(nvlink_link_name(t.host), "nvlink", f.nvlink_bandwidth, f.nvlink_latency))
    # Every host has host memory and a network card, whether a route uses them or not.
    for name in host_names:
        links.append(Link(memcpy_link_name(name), "memcpy", f.memcpy_bandwidth, f.memcpy_latency))
        links.append(Link(network_link_name(name), "network", f.network_bandwidth, f.network_latency))
    return Cluster(hosts, tasks, devices, links, nvlink=nvlink)


def usable_cpu_cores() -> int:
    """The cores this process may run on (its affinity; all of them where that is not
    known), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def _memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        pass
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return DEFAULT_FIGURES.host_memory_bytes


def _detect_gpu_count() -> int:
    """How many CUDA GPUs this process sees; 0 on any failure."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return 0
    try:
        from numba import cuda  # lazily: core must not import numba at import time
        return len(cuda.gpus) if cuda.is_available() else 0
    except Exception:  # no numba, no driver, no device: all mean "no GPU"
        return 0


def _no_duplicates(what: str, names: list[str]) -> None:
    seen = set()
    for name in names:
        if name in seen:
            raise InvalidCluster(f"two {what}s share this name", name)
        seen.add(name)


def _list(data: Mapping, key: str) -> list:
    if not isinstance(data[key], list):
        raise InvalidCluster(f"\"{key}\" must be a list, not {type(data[key]).__name__}")
    return data[key]
