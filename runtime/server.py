"""``Server``: TensorFlow 1.x's ``tf.train.Server``, a task of a cluster serving gRPC.

A server is started with the cluster spec, its job name and task index. It binds the
port of its address in the spec (on ``127.0.0.1`` unless ``bind_host`` says otherwise)
and offers two services over one gRPC server:

- the *master* (:class:`runtime.master.MasterService`): clients open sessions on it
  (``Session("grpc://host:port")``); it places, partitions and runs their steps;
- the *worker* (:class:`runtime.worker.WorkerService`): runs this task's part of every
  step, holds the task's variables across runs and sessions, and exchanges tensors with
  the other tasks.

The hardware view the master places on is ``Cluster.from_spec(spec, hosts=...)`` with
the tasks grouped by the host of their address (every loopback address is host
``localhost``, so tasks on one machine share its CPU cores), or a calibrated Cluster
JSON (``hardware=``), with the master set to this task.

From the shell::

    python -m runtime.server --cluster cluster.json --job ps --task 0

where ``cluster.json`` is ``{"ps": ["127.0.0.1:2221"], "worker": [...]}`` (or that
under a ``"cluster"`` key). It prints ``Started server with target: grpc://...`` and
serves until SIGTERM or SIGINT.

>>> server = Server.create_local_server()
>>> server.target.startswith("grpc://127.0.0.1:")
True
>>> server.stop()
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import weakref
from pathlib import Path
from typing import Any, Mapping

from core.cluster import Cluster, ClusterSpec, split_address, usable_cpu_cores
from runtime import wire
from runtime.call_guard import STREAM_IDLE_SECONDS, CallGuard
from runtime.config import SessionConfig
from runtime.errors import InvalidArgument, LabRuntimeError
from runtime.master import MasterService
from runtime.protos import master_pb2, master_pb2_grpc, worker_pb2
from runtime.segment_pool import reap_orphans
from runtime.worker import SHM_MIN_BYTES, PeerChannels, WorkerService, add_worker_to_server

__all__ = ["Server", "hardware_view", "default_bind_host", "main", "LOOPBACK_HOSTS"]

_log = logging.getLogger(__name__)

#: Address hosts that all mean "this machine" (one host, ``localhost``, in the view).
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]", "0.0.0.0"})


def hardware_view(spec: "ClusterSpec | Mapping", job: str, task: int,
                  hardware: "Cluster | str | os.PathLike | None" = None) -> Cluster:
    """The cluster a master on ``(job, task)`` places on (see the module docstring).

    >>> c = hardware_view({"ps": ["127.0.0.1:1"], "worker": ["localhost:2"]}, "worker", 0)
    >>> c.master, sorted({t.host for t in c.tasks})
    (('worker', 0), ['localhost'])
    """
    spec = ClusterSpec(spec)
    if hardware is not None:
        base = hardware if isinstance(hardware, Cluster) else Cluster.load(hardware)
        missing = [f"/job:{j}/task:{t}" for j, t in spec.tasks()
                   if not any(x.job == j and x.index == t for x in base.tasks)]
        if missing:
            raise InvalidArgument(f"the hardware view lacks tasks of the cluster spec: {missing}")
    else:
        hosts = {}
        for j, t in spec.tasks():
            host = split_address(spec.task_address(j, t))[0]
            hosts[(j, t)] = "localhost" if host in LOOPBACK_HOSTS else host
        base = Cluster.from_spec(spec, hosts=hosts, cpu_cores=usable_cpu_cores())
    return Cluster(base.hosts, base.tasks, base.devices, base.links, master=(job, task),
                   nvlink=base.nvlink)


def default_bind_host(host: str) -> str:
    """The interface a server binds for the spec's ``host`` when not told: loopback
    always, of the address's family (an IPv4 loopback address is kept as it is).

    >>> default_bind_host("[::1]"), default_bind_host("127.0.0.2"), default_bind_host("10.1.2.3")
    ('::1', '127.0.0.2', '127.0.0.1')
    >>> default_bind_host("[fe80::1]"), default_bind_host("localhost")
    ('::1', '127.0.0.1')
    """
    import ipaddress

    try:
        ip = ipaddress.ip_address(host.strip("[]"))
    except ValueError:  # a name: IPv4 loopback
        return wire.LOCALHOST
    if ip.version == 6:
        return "::1"
    return str(ip) if ip.is_loopback else wire.LOCALHOST


class Server:
    """One task of a cluster, serving the master and worker services.

    Args:
        server_or_cluster_def: a :class:`core.cluster.ClusterSpec` or a dict
            ``{job: [addresses]}``.
        job_name: this task's job (may be left out when the spec has one job).
        task_index: this task's index in its job (default 0).
        protocol: only ``"grpc"`` (TensorFlow's argument).
        config: a :class:`runtime.config.SessionConfig` (or its dict): thread counts of
            this task's devices; the default config of sessions.
        start: start serving now (else call :meth:`start`).
        bind_host: the interface to bind; by default the loopback address of the
            spec's host (its own when it is one, ``::1`` for an IPv6 address, else
            ``127.0.0.1``): nothing outside the host can reach the server unless told
            (:func:`default_bind_host`).
        hardware: a calibrated :class:`core.cluster.Cluster` (or its JSON path) to place
            on instead of the default view.
        shm_min_bytes: tensors at least this large go to tasks on the same host through
            shared memory; ``None`` always uses the socket.
        local_sockets: take the step-path calls (RunStep, RunGraph) and the pushed
            tensors of processes of this host on Unix sockets too (``False``: gRPC
            only, as from another host).
        max_workers: gRPC handler threads (each open stream holds one).
        max_receive_bytes: the largest message (gRPC) or frame (local socket) taken;
            larger ones are refused before they are read (``RESOURCE_EXHAUSTED``).
        max_local_connections: local-socket connections held at once, per listener.
        security: a :class:`runtime.security.Security`: serve TLS and check a shared
            token on every gRPC call, and use them towards the other tasks (a
            cluster across hosts; the same for every task and client).
        stream_idle_seconds: a gRPC stream that waits longer for its next message is
            ended (its handler thread freed); streams hold at most ``max_workers``
            less an eighth (at least 4 threads stay for unary calls), and at most
            :data:`runtime.call_guard.MAX_STREAMS_PER_PEER` per connection
            (:class:`runtime.call_guard.CallGuard`).

    Attributes: ``target`` (``grpc://host:port``), ``cluster_spec``, ``job_name``,
    ``task_index``, ``cluster`` (the hardware view), ``worker``, ``master``.
    """

    def __init__(self, server_or_cluster_def, job_name: str | None = None,
                 task_index: int | None = None, protocol: str | None = None, config=None,
                 start: bool = True, *, bind_host: str | None = None,
                 hardware: "Cluster | str | os.PathLike | None" = None,
                 shm_min_bytes: int | None = SHM_MIN_BYTES, local_sockets: bool = True,
                 max_workers: int = 256, max_receive_bytes: int = wire.MAX_RECEIVE_BYTES,
                 max_local_connections: int = wire.MAX_LOCAL_CONNECTIONS,
                 stream_idle_seconds: float = STREAM_IDLE_SECONDS, security=None):
        if protocol not in (None, "grpc"):
            raise InvalidArgument(f"unknown protocol {protocol!r}; only 'grpc' is supported")
        spec = ClusterSpec(server_or_cluster_def)
        if job_name is None:
            if len(spec.jobs) != 1:
                raise InvalidArgument(f"job_name is needed: the cluster has jobs {spec.jobs}")
            job_name = spec.jobs[0]
        task_index = 0 if task_index is None else int(task_index)
        address = spec.task_address(job_name, task_index)  # raises UnknownTask
        if isinstance(config, Mapping):
            config = SessionConfig.from_dict(dict(config))
        self.config = config or SessionConfig()
        self.cluster_spec = spec
        self.job_name, self.task_index = job_name, task_index
        self.address = address
        self.cluster = hardware_view(spec, job_name, task_index, hardware)
        host, port = split_address(address)
        if bind_host is None:
            bind_host = default_bind_host(host)
        self.bind_host = bind_host.strip("[]")
        self.security = security
        self._peers = PeerChannels(security)
        self.worker = WorkerService(self.cluster, job_name, task_index, self.config,
                                    peers=self._peers, shm_min_bytes=shm_min_bytes)
        self.master = MasterService(self.cluster, self.worker, self._peers)
        self.guard = CallGuard(max_streams=max_workers - max(4, max_workers // 8),
                               stream_idle_seconds=stream_idle_seconds,
                               token=security.token if security is not None else None)
        try:
            self._server, self.port = wire.create_server(
                self.bind_host, port, max_workers=max_workers,
                options=wire.server_options(max_receive_bytes), interceptors=[self.guard],
                credentials=security.server_credentials() if security is not None else None)
        except BaseException:
            self.worker.close()
            self.master.close()
            self.guard.close()
            raise
        add_worker_to_server(self.worker, self._server)
        master_pb2_grpc.add_MasterServicer_to_server(self.master, self._server)
        self._started = False
        self._local_calls: wire.LocalCallListener | None = None
        self._local_sockets = local_sockets
        self._local_limits = {"max_frame_bytes": max_receive_bytes,
                              "max_connections": max_local_connections}
        self._stopped = threading.Event()
        self._stop_lock = threading.Lock()
        if start:
            self.start()

    @classmethod
    def create_local_server(cls, config=None, start: bool = True) -> "Server":
        """A one-task server ``/job:localhost/task:0`` on a free port of 127.0.0.1."""
        from runtime.launcher import free_ports
        (port,) = free_ports(1)
        return cls({"localhost": [f"{wire.LOCALHOST}:{port}"]}, "localhost", 0, config=config,
                   start=start)

    @property
    def target(self) -> str:
        """``grpc://host:port``: what a client passes to ``Session``: the address bound
        (the spec's host when bound to every interface)."""
        host, spec_host = self.bind_host, split_address(self.address)[0]
        if host in ("0.0.0.0", "::", "") or (
                spec_host in LOOPBACK_HOSTS and default_bind_host(spec_host) == host):
            # The spec's name for it (the local sockets are named after that address).
            return f"grpc://{spec_host}:{self.port}"
        return f"grpc://[{host}]:{self.port}" if ":" in host else f"grpc://{host}:{self.port}"

    @property
    def server_def(self) -> dict:
        return {"cluster": self.cluster_spec.as_dict(), "job_name": self.job_name,
                "task_index": self.task_index, "protocol": "grpc"}

    def start(self) -> None:
        """Start serving (idempotent)."""
        if not self._started:
            reap_orphans()  # of servers of this host that were killed
            _stop_at_exit(self)
            self._server.start()
            # Only once the gRPC port is ours: the local sockets are named after it.
            if self._local_sockets:
                self.worker.listen_local(**self._local_limits)
                self._listen_local_calls()
            self._started = True

    def _listen_local_calls(self) -> None:
        """Take the step-path calls (RunStep, RunGraph) of processes of this host on a
        Unix socket too (:class:`runtime.wire.LocalCallListener`); not where abstract
        sockets do not exist (then they come by gRPC)."""
        worker, master = self.worker, self.master
        handlers = {
            "Worker.RunGraph": lambda data: worker.RunGraph(
                worker_pb2.RunGraphRequest.FromString(data), None).SerializeToString(),
            "Master.RunStep": lambda data: master.run_local_step(
                master_pb2.RunStepRequest.FromString(data)).SerializeToString(),
        }
        try:
            self._local_calls = wire.LocalCallListener(self.address, handlers,
                                                       **self._local_limits)
        except (OSError, TypeError):
            self._local_calls = None

    def join(self) -> None:
        """Block for as long as the server serves (until :meth:`stop`)."""
        while not self._stopped.wait(1.0):  # a timeout keeps signal handlers responsive
            pass

    def stop(self, grace: float | None = 0.5) -> None:
        """Stop serving, finish or cancel calls within ``grace`` seconds, release the
        devices, threads and channels (idempotent)."""
        with self._stop_lock:
            if self._stopped.is_set():
                return
            if self._local_calls is not None:
                self._local_calls.close()
            self._server.stop(grace).wait()
            self.guard.close()
            self.master.close()
            self.worker.close()
            self._peers.close()
            reap_orphans()
            self._stopped.set()

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<Server /job:{self.job_name}/task:{self.task_index} {self.target}>"


# ---------------------------------------------------------------------------
# Command line

_RUNNING: "weakref.WeakSet[Server]" = weakref.WeakSet()


def _stop_at_exit(server: Server) -> None:
    """Stop ``server`` when the interpreter exits, as a TensorFlow server ends with its
    process: a program that starts servers and returns (the seed texts' do) must exit.

    At exit ``concurrent.futures`` joins the gRPC handler pool's threads, and a handler
    serving a long-lived stream never returns until the server stops; ``threading``'s
    exit hooks run newest first, so this one (registered after ``concurrent.futures``
    was imported) stops the servers before that join.
    """
    if not _RUNNING:
        register = getattr(threading, "_register_atexit", None)
        if register is not None:
            register(_stop_running)
    _RUNNING.add(server)


def _stop_running() -> None:
    for server in list(_RUNNING):
        server.stop(grace=0)


def _load_spec(path: str) -> dict:
    try:
        data = json.loads(Path(path).read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not JSON: {err}") from None
    if isinstance(data, dict) and isinstance(data.get("cluster"), dict):
        data = data["cluster"]
    if not isinstance(data, dict):
        raise ValueError(f"{path} holds no cluster spec: expected an object "
                         '{"job": ["host:port", ...]}')
    return data


def _watch_parent(server: Server, parent: int) -> None:
    # Stop when the process that started us is gone (a test runner killed hard).
    while not server._stopped.wait(0.5):
        if os.getppid() != parent:
            server.stop(grace=0)
            return


def tune_malloc() -> bool:
    """Keep freed memory of this process for reuse instead of handing it back to the
    OS at once (glibc). A streamed tensor arrives and leaves as ~1 MiB messages that
    gRPC allocates and frees one after another; with glibc's defaults each is fresh
    memory again (unmapped or trimmed on free), and first-touching fresh pages costs
    more than copying the bytes (measured: the receiver's CPU per 64 MiB went from
    ~75 to ~55 ms). One arena for all threads: a thread's own arena lives in 64 MiB
    heaps that glibc unmaps whenever one empties, whatever the thresholds, and a
    sender's frames fill and empty one per 64 MiB tensor (measured: 3,500-6,000 page
    faults per 64 MiB sent without it, none with it). Call it before the process starts
    threads. False where it does not apply (not glibc)."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    m_trim_threshold, m_mmap_threshold, m_arena_max = -1, -3, -8
    ok = mallopt(m_mmap_threshold, 32 << 20)  # glibc's largest: 1 MiB blocks from heaps
    ok = ok and mallopt(m_trim_threshold, 1 << 30)
    return bool(ok and mallopt(m_arena_max, 1))


def main(argv: list[str] | None = None) -> int:
    """``python -m runtime.server --cluster cluster.json --job ps --task 0``."""
    parser = argparse.ArgumentParser(prog="python -m runtime.server",
                                     description="Start one task of a placement-lab cluster.")
    parser.add_argument("--cluster", required=True,
                        help='JSON file: {"ps": ["host:port", ...], "worker": [...]}')
    parser.add_argument("--job", required=True, help="this task's job name")
    parser.add_argument("--task", type=int, default=0, help="this task's index (default 0)")
    parser.add_argument("--config", help="JSON file with a SessionConfig dict")
    parser.add_argument("--hardware", help="calibrated Cluster JSON to place on")
    parser.add_argument("--bind", default=None,
                        help="interface to bind (default: loopback, ::1 for an IPv6 address)")
    parser.add_argument("--no-shm", action="store_true",
                        help="send tensors to same-host tasks over the socket only")
    parser.add_argument("--no-local-sockets", action="store_true",
                        help="take calls and tensors from same-host processes by gRPC only")
    parser.add_argument("--tls-cert", help="PEM certificate: serve TLS (with --tls-key)")
    parser.add_argument("--tls-key", help="PEM private key of --tls-cert")
    parser.add_argument("--tls-ca", help="PEM CA that the other tasks' certificates are "
                                         "verified against (default: --tls-cert)")
    parser.add_argument("--token-file", help="file holding the cluster's shared token, "
                                             "checked on every call")
    parser.add_argument("--exit-with-parent", action="store_true",
                        help="stop when the parent process exits")
    parser.add_argument("--log-level", default="INFO", type=str.upper,
                        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                        help="the records this process shows on stderr (INFO: the "
                             "log_device_placement lines too)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(levelname)s %(name)s: %(message)s")
    parent = os.getppid()
    tune_malloc()
    try:
        config = (SessionConfig.from_dict(json.loads(Path(args.config).read_text()))
                  if args.config else None)
        security = None
        if args.tls_cert or args.tls_key or args.tls_ca or args.token_file:
            from runtime.security import Security
            security = Security.from_files(token_file=args.token_file, cert=args.tls_cert,
                                           key=args.tls_key, ca=args.tls_ca)
        server = Server(_load_spec(args.cluster), args.job, args.task, config=config,
                        bind_host=args.bind, hardware=args.hardware,
                        shm_min_bytes=None if args.no_shm else SHM_MIN_BYTES,
                        local_sockets=not args.no_local_sockets, security=security)
    except wire.BindError as err:
        _log.error("%s", err)
        return 3
    except (OSError, ValueError, TypeError, KeyError, LabRuntimeError) as err:
        # A file that is missing or not JSON, a spec or config that is wrong: one line,
        # and the usage error's status (as argparse's own).
        _log.error("%s", err.args[0] if isinstance(err, KeyError) and err.args else err)
        return 2

    def on_signal(signum, frame):  # noqa: ARG001
        threading.Thread(target=server.stop, daemon=True).start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if args.exit_with_parent:
        threading.Thread(target=_watch_parent, args=(server, parent), daemon=True).start()
    print(f"Started server with target: {server.target}", flush=True)
    server.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
