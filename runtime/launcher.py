"""``LocalCluster``: a whole cluster of server processes on 127.0.0.1, for tests and
experiments.

Each task runs ``python -m runtime.server`` in its own process, on an ephemeral port
(picked by binding ``127.0.0.1:0`` and releasing it; if a server then fails to bind,
every port is picked again and the cluster restarted, a few times). The cluster is
ready when every server answers a ``Ping`` (polled with a deadline). On exit, normal
or not, every process is stopped (SIGTERM, then SIGKILL), and the children also stop
by themselves if this process dies (``--exit-with-parent``).

>>> with LocalCluster({"ps": 1, "worker": 2}) as cluster:  # doctest: +SKIP
...     with Session(cluster.target("worker", 0)) as sess:
...         ...
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import weakref
from pathlib import Path
from typing import Mapping

from core.cluster import ClusterSpec
from runtime import wire
from runtime.errors import LabRuntimeError
from runtime.protos import master_pb2_grpc, tensor_pb2
from runtime.segment_pool import reap_orphans

__all__ = ["LocalCluster", "free_ports", "wait_until_serving", "reap_segments",
           "ClusterStartError"]


class ClusterStartError(LabRuntimeError):
    """A server process did not come up; the message carries the end of its log."""


def free_ports(n: int, host: str = wire.LOCALHOST) -> list[int]:
    """``n`` distinct ports that were free on ``host`` a moment ago (bound to port 0,
    then released; another process may take one before it is used: retry on failure)."""
    socks, ports = [], []
    try:
        while len(ports) < n:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


def reap_segments(pid: int) -> int:
    """Unlink the shared-memory segments a dead server process ``pid`` created (its
    pooled and exported tensors: their names carry the creator's pid), which a process
    killed with SIGKILL leaves behind; return how many.  A receiver's mapping of one
    stays valid."""
    from runtime.segment_pool import POOL_PREFIX
    from runtime.shm import SEGMENT_PREFIX, list_segments, unlink_segment
    names = [n for prefix in (SEGMENT_PREFIX, POOL_PREFIX)
             for n in list_segments(f"{prefix}{pid}_")]
    return sum(unlink_segment(n) for n in names)


def wait_until_serving(address: str, timeout: float, *, alive=lambda: True) -> float:
    """Poll ``address``'s master with ``Ping`` until it answers; return the seconds it
    took. Raises ``TimeoutError`` after ``timeout`` seconds, or ``ClusterStartError`` as
    soon as ``alive()`` is False."""
    start = time.monotonic()
    channel = wire.create_channel(address)
    try:
        stub = master_pb2_grpc.MasterStub(channel)
        while True:
            if not alive():
                raise ClusterStartError(f"the server at {address} exited while starting")
            remaining = timeout - (time.monotonic() - start)
            if remaining <= 0:
                raise TimeoutError(f"no server answered at {address} within {timeout} s")
            try:
                # wait_for_ready: block until the port accepts connections, up to 0.5 s.
                stub.Ping(tensor_pb2.PingRequest(), timeout=min(0.5, remaining),
                          wait_for_ready=True)
                return time.monotonic() - start
            except Exception:  # noqa: BLE001 - not yet
                continue
    finally:
        channel.close()


_LIVE: "weakref.WeakSet[LocalCluster]" = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    for cluster in list(_LIVE):
        cluster.stop()


class LocalCluster:
    """Server processes for a cluster on 127.0.0.1; a context manager.

    Args:
        spec: ``{job: number of tasks}`` (ports picked here) or ``{job: [addresses]}``.
        config: a :class:`runtime.config.SessionConfig` or dict for every server.
        hardware: a calibrated Cluster JSON path for every server's master.
        shm: let same-host tasks hand large tensors over through shared memory.
        local_sockets: let the servers take step-path calls (RunStep, RunGraph) and
            pushed tensors from same-host processes on Unix sockets (``False``: gRPC
            only, as between hosts).
        start_timeout: seconds for all servers to answer.
        env: extra environment variables for the server processes.

    Attributes: ``spec`` (``{job: [addresses]}``), ``cluster_spec``, ``log_dir``.

    Methods: :meth:`target` / :meth:`address` of a task, :meth:`kill` one task (SIGKILL,
    to test faults), :meth:`restart` it on its address, :meth:`log` of a task,
    :meth:`cpu_seconds` the processes used.
    """

    def __init__(self, spec: Mapping | None = None, *, config=None, hardware=None,
                 shm: bool = True, local_sockets: bool = True, start_timeout: float = 60.0,
                 env: Mapping | None = None, attempts: int = 3, start: bool = True):
        self._request = dict(spec or {"ps": 1, "worker": 2})
        self._config = config
        # Absolute: the servers start in the repository's folder, not the caller's.
        self._hardware = None if hardware is None else Path(hardware).resolve()
        self._shm = shm
        self._local_sockets = local_sockets
        self._start_timeout = start_timeout
        self._env = dict(env or {})
        self._attempts = attempts
        self._dir = tempfile.TemporaryDirectory(prefix="plab-cluster-")
        self.log_dir = Path(self._dir.name)
        self.spec: dict[str, list[str]] = {}
        self.processes: dict[tuple[str, int], subprocess.Popen] = {}
        self._logs: dict[tuple[str, int], Path] = {}
        self._started = False
        if start:
            self.start()

    # -- addresses ---------------------------------------------------------------------
    @property
    def cluster_spec(self) -> ClusterSpec:
        return ClusterSpec(self.spec)

    def address(self, job: str, task: int = 0) -> str:
        return self.spec[job][task]

    def target(self, job: str, task: int = 0) -> str:
        """``grpc://127.0.0.1:port`` of a task."""
        return f"grpc://{self.address(job, task)}"

    @property
    def tasks(self) -> list[tuple[str, int]]:
        return [(job, i) for job in self.spec for i in range(len(self.spec[job]))]

    def cpu_seconds(self, task: "tuple[str, int] | None" = None) -> float:
        """CPU seconds (user and system, every thread) the server process of ``task``
        (``(job, index)``; None: all of them) has used so far
        (:func:`runtime.calibrate.measure_crossing_cpu` counts what a crossing costs
        each end)."""
        import psutil
        procs = self.processes.values() if task is None else [self.processes[tuple(task)]]
        return sum(sum(psutil.Process(proc.pid).cpu_times()[:2]) for proc in procs)

    def _pick_spec(self) -> dict[str, list[str]]:
        counts = {j: v for j, v in self._request.items() if isinstance(v, int)}
        ports = iter(free_ports(sum(counts.values())))
        out = {}
        for job, v in self._request.items():
            out[job] = ([f"{wire.LOCALHOST}:{next(ports)}" for _ in range(v)]
                        if isinstance(v, int) else list(v))
        return out

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> "LocalCluster":
        """Start every server and wait until all answer."""
        if self._started:
            return self
        _LIVE.add(self)
        last: BaseException | None = None
        for _ in range(max(1, self._attempts)):
            self.spec = self._pick_spec()
            (self.log_dir / "cluster.json").write_text(json.dumps(self.spec))
            if self._config is not None:
                config = self._config if isinstance(self._config, Mapping) else self._config.to_dict()
                (self.log_dir / "config.json").write_text(json.dumps(config))
            try:
                for job, i in self.tasks:
                    self._spawn(job, i)
                self._wait_all()
                self._started = True
                return self
            except (ClusterStartError, TimeoutError) as err:
                last = err
                self._terminate_all()
                bound_failed = any("cannot bind" in self.log(j, i) for j, i in self.tasks)
                if not bound_failed or any(not isinstance(v, int) for v in self._request.values()):
                    break
        self.stop()
        raise ClusterStartError(f"the cluster did not start: {last}")

    def _spawn(self, job: str, task: int) -> None:
        log = self.log_dir / f"{job}-{task}.log"
        self._logs[(job, task)] = log
        args = [sys.executable, "-m", "runtime.server", "--cluster",
                str(self.log_dir / "cluster.json"), "--job", job, "--task", str(task),
                "--exit-with-parent"]
        if self._config is not None:
            args += ["--config", str(self.log_dir / "config.json")]
        if self._hardware is not None:
            args += ["--hardware", str(self._hardware)]
        if not self._shm:
            args.append("--no-shm")
        if not self._local_sockets:
            args.append("--no-local-sockets")
        env = dict(os.environ)
        env.update(self._env)
        root = str(Path(__file__).resolve().parents[1])
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        with open(log, "ab") as out:
            self.processes[(job, task)] = subprocess.Popen(
                args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                cwd=root)

    def _wait_all(self, tasks=None) -> None:
        deadline = time.monotonic() + self._start_timeout
        for job, i in tasks or self.tasks:
            proc = self.processes[(job, i)]
            try:
                wait_until_serving(self.address(job, i), max(0.1, deadline - time.monotonic()),
                                   alive=lambda p=proc: p.poll() is None)
            except (ClusterStartError, TimeoutError) as err:
                raise ClusterStartError(f"/job:{job}/task:{i}: {err}\n--- log ---\n"
                                        f"{self.log(job, i)[-3000:]}") from None

    def log(self, job: str, task: int = 0) -> str:
        """What a task's process printed so far."""
        path = self._logs.get((job, task))
        return path.read_text(errors="replace") if path is not None and path.exists() else ""

    def kill(self, job: str, task: int = 0) -> None:
        """SIGKILL one task's process (a crash) and reap it (and its shared memory)."""
        proc = self.processes[(job, task)]
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        reap_segments(proc.pid)

    def restart(self, job: str, task: int = 0) -> None:
        """Start a killed (or stopped) task again on its address; wait until it serves."""
        proc = self.processes.get((job, task))
        if proc is not None:
            self._terminate(proc)  # reaps its segments too, whether it died by itself or not
        reap_orphans()
        deadline = time.monotonic() + self._start_timeout
        while True:  # the port may linger a moment after the old process died
            self._spawn(job, task)
            try:
                self._wait_all([(job, task)])
                return
            except ClusterStartError:
                if "cannot bind" not in self.log(job, task) or time.monotonic() > deadline:
                    raise
                self.processes[(job, task)].wait(10)

    @staticmethod
    def _terminate(proc: subprocess.Popen, timeout: float = 5.0) -> None:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout)
        reap_segments(proc.pid)

    def _terminate_all(self) -> None:
        procs = list(self.processes.values())
        for p in procs:  # signal them all first, then wait: they stop in parallel
            if p.poll() is None:
                p.terminate()
        deadline = time.monotonic() + 5.0
        for p in procs:
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5.0)
            reap_segments(p.pid)
        self.processes.clear()
        reap_orphans()  # of earlier processes of a task restarted, killed by others

    def stop(self) -> None:
        """Stop every server process (idempotent); remove the temporary files."""
        self._terminate_all()
        self._started = False
        _LIVE.discard(self)
        try:
            self._dir.cleanup()
        except OSError:
            pass

    def __enter__(self) -> "LocalCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<LocalCluster {self.spec}>"
