"""TensorFlow's own runtime as a measured backend, beside ``sim`` and ``runtime``.

A placed graph is exported with its placement (:func:`placed_graph_def`: every op pinned
to its placed device, in TensorFlow's GraphDef format), run by TensorFlow 2.x's
``tf.compat.v1`` session — in this process for a single-task cluster (its devices are
TensorFlow's local ``/job:localhost/replica:0/task:0`` devices), or on
``tf.distribute.Server`` processes started on this machine with the cluster's jobs and
tasks (:class:`TFLocalCluster`, as :class:`runtime.LocalCluster` starts ours) — and its
``RunMetadata.step_stats`` turned into a :class:`core.Trace`
(:func:`trace_from_step_stats`) that :meth:`core.Trace.validate` checks like any other.
So the simulator can be compared with a runtime nobody here wrote.

TensorFlow's graph rewrites are turned off (:func:`session_config`: no Grappler, no
constant folding), so every op of the graph runs as placed and under its own name.
Needs ``tensorflow`` (``pip install -e '.[tensorflow]'``); importing this module does
not import it.
"""

from __future__ import annotations

import contextlib
import functools
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from typing import Mapping

import numpy as np

from core.cluster import Cluster
from core.graph import Graph
from core.placement import Placement
from core.trace import OpRecord, Trace, TransferRecord
from experiments.backends import Measurement, pinned_graph, timed_rounds
from experiments.machine_load import OtherLoad
from experiments.workloads.mlp import Workload
from runtime.launcher import free_ports

__all__ = ["import_tensorflow", "session_config", "placed_graph_def", "TFLocalCluster",
           "trace_from_step_stats", "measure_on_tensorflow", "wait_for_port"]


def import_tensorflow():
    """``tensorflow``, or ImportError saying how to install it."""
    try:
        import tensorflow as tf
    except ImportError as e:
        raise ImportError("the tensorflow backend needs TensorFlow: pip install -e "
                          "'.[tensorflow]' (tensorflow-cpu)") from e
    tf.compat.v1.disable_eager_execution()
    return tf


def session_config(tf, cluster: Cluster | None = None, task=None):
    """A ``tf.compat.v1.ConfigProto`` that runs a graph as placed: Grappler and the
    classic graph optimizer off (no folded, pruned or renamed ops), no soft placement,
    and the inter-/intra-op thread counts of ``task``'s CPU device in ``cluster`` (the
    master's when ``task`` is None; TensorFlow's defaults without a cluster)."""
    v1 = tf.compat.v1
    config = v1.ConfigProto(allow_soft_placement=False)
    config.graph_options.rewrite_options.disable_meta_optimizer = True
    config.graph_options.optimizer_options.opt_level = v1.OptimizerOptions.L0
    config.graph_options.optimizer_options.do_constant_folding = False
    config.graph_options.optimizer_options.do_function_inlining = False
    if cluster is not None:
        job, index = task or cluster.master
        cpu = next(d for d in cluster.devices if d.is_cpu and (d.job, d.task) == (job, index))
        config.inter_op_parallelism_threads = cpu.inter_op_threads
        config.intra_op_parallelism_threads = cpu.intra_op_threads
    return config


def placed_graph_def(graph: Graph, placement: Placement) -> bytes:
    """``graph`` with every op pinned to its device of ``placement``, as serialized
    GraphDef bytes for TensorFlow."""
    return pinned_graph(graph, placement).as_graph_def().SerializeToString()


# --- TensorFlow's servers ------------------------------------------------------------------

# Serves the tasks ``{tasks}`` (job, index, inter-op threads, intra-op threads).
_TF_SERVERS = """
import tensorflow as tf
v1 = tf.compat.v1
servers = []
for job, index, inter, intra in {tasks!r}:
    config = v1.ConfigProto(inter_op_parallelism_threads=inter,
                            intra_op_parallelism_threads=intra)
    config.graph_options.rewrite_options.disable_meta_optimizer = True
    config.graph_options.optimizer_options.opt_level = v1.OptimizerOptions.L0
    config.graph_options.optimizer_options.do_constant_folding = False
    servers.append(tf.distribute.Server(tf.train.ClusterSpec({spec!r}), job_name=job,
                                        task_index=index, config=config, start=True))
servers[0].join()
"""


def wait_for_port(address: str, timeout: float, alive=lambda: True) -> None:
    """Block until something accepts connections at ``host:port``; TimeoutError after
    ``timeout`` seconds, RuntimeError as soon as ``alive()`` is False."""
    host, port = address.rsplit(":", 1)
    deadline = time.monotonic() + timeout
    while True:
        if not alive():
            raise RuntimeError(f"the TensorFlow server for {address} exited while starting")
        try:
            socket.create_connection((host, int(port)), timeout=0.5).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing listens at {address} after {timeout} s") from None
            time.sleep(0.1)


class TFLocalCluster:
    """``tf.distribute.Server`` processes on 127.0.0.1, one per task of ``cluster`` (same
    job names and task indices, so the placement's device names are TensorFlow's); each
    with its CPU device's thread counts and TensorFlow's rewrites off.  ``one_process``:
    all the servers in one process instead (they still talk gRPC to each other; it
    starts in a third of the time, as TensorFlow's import is what takes seconds).

    >>> from core.cluster import Cluster, ClusterSpec
    >>> c = Cluster.from_spec(ClusterSpec({"ps": ["a:1"], "worker": ["b:1", "b:2"]}))
    >>> TFLocalCluster(c).tasks
    [('ps', 0), ('worker', 0), ('worker', 1)]
    """

    def __init__(self, cluster: Cluster, start_timeout: float = 120.0, env: dict | None = None,
                 one_process: bool = False):
        self.cluster = cluster
        self.one_process = one_process
        self.tasks = sorted({(t.job, t.index) for t in cluster.tasks})
        self.start_timeout = start_timeout
        self.env = env or {}
        self.spec: dict[str, list[str]] = {}
        self._procs: list[subprocess.Popen] = []
        self._logs: list = []  # each process's stderr, shown when it fails to start

    def target(self, job: str, task: int = 0) -> str:
        return "grpc://" + self.spec[job][task]

    def start(self) -> "TFLocalCluster":
        ports = iter(free_ports(len(self.tasks)))
        for job, _ in self.tasks:
            self.spec.setdefault(job, []).append(f"127.0.0.1:{next(ports)}")
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **self.env)
        rows = []
        for job, index in self.tasks:
            cpu = next(d for d in self.cluster.devices
                       if d.is_cpu and (d.job, d.task) == (job, index))
            rows.append((job, index, cpu.inter_op_threads, cpu.intra_op_threads))
        groups = [rows] if self.one_process else [[row] for row in rows]
        try:
            for group in groups:
                code = textwrap.dedent(_TF_SERVERS.format(spec=self.spec, tasks=group))
                log = tempfile.TemporaryFile()
                proc = subprocess.Popen([sys.executable, "-c", code], env=env,
                                        stdout=subprocess.DEVNULL, stderr=log)
                self._procs.append(proc)
                self._logs.append(log)
                for job, index, _, _ in group:
                    try:
                        wait_for_port(self.spec[job][index], self.start_timeout,
                                      alive=lambda p=proc: p.poll() is None)
                    except (RuntimeError, TimeoutError) as e:
                        log.seek(0)
                        tail = log.read().decode(errors="replace").strip().splitlines()[-5:]
                        raise RuntimeError(f"{e}; its last lines: {tail}") from None
        except BaseException:
            self.stop()
            raise
        return self

    def cpu_seconds(self) -> float:
        """CPU seconds (user and system) the server processes have used so far."""
        import psutil
        return sum(sum(psutil.Process(proc.pid).cpu_times()[:2]) for proc in self._procs)

    def stop(self) -> None:
        for proc in self._procs:
            proc.kill()
            proc.wait()
        for log in self._logs:
            log.close()
        self._procs, self._logs = [], []

    def __enter__(self) -> "TFLocalCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# --- step stats -> Trace --------------------------------------------------------------------

def _slots(records: list[tuple[float, float, str]]) -> dict[str, int]:
    """Each op's inter-op slot: the lowest slot free when it starts (TensorFlow's thread
    ids include the caller's thread, which runs ops inline; slots count concurrency)."""
    ends: list[float] = []
    slot = {}
    for start, end, name in sorted(records):
        free = next((i for i, e in enumerate(ends) if e <= start), None)
        if free is None:
            free = len(ends)
            ends.append(end)
        ends[free] = end
        slot[name] = free
    return slot


def trace_from_step_stats(step_stats, graph: Graph, placement: Placement | None = None,
                          fed=(), meta: Mapping | None = None) -> Trace:
    """A :class:`core.Trace` of TensorFlow's ``RunMetadata.step_stats`` for ``graph``.

    Each node of ``graph`` that ran is an op record from its kernel's start to its end
    (``op_start``/``op_end``: TensorFlow records ``all_end`` after the node has handed
    its outputs on, when its consumers may already run); nodes TensorFlow adds
    (``_SOURCE``, send/recv, the const inputs the export writes) are left out.  Fed
    placeholders are zero-length records at 0 on their device of ``placement`` (their
requested device without one).  Each tensor read on another device is a
    transfer from its producer's end to its first reader's start there (what the step
    stats bound it by).  Times are seconds from the first recorded start.
    """
    raw = []
    for dev in step_stats.dev_stats:
        for n in dev.node_stats:
            start_ns = n.all_start_nanos or n.all_start_micros * 1000
            op_start = n.op_start_rel_nanos or n.op_start_rel_micros * 1000
            op_end = n.op_end_rel_nanos or n.op_end_rel_micros * 1000
            raw.append((dev.device, n.node_name, start_ns + op_start, start_ns + op_end))
    t0 = min((r[2] for r in raw), default=0)
    runs = {}
    for device, name, start, end in raw:
        if name in graph and name not in runs and "/stream:" not in device:
            runs[name] = (device, (start - t0) / 1e9, (max(start, end) - t0) / 1e9)
    for name in fed:
        if name not in runs:
            device = placement[name] if placement is not None else \
                _full_device(graph.get_operation_by_name(name).device)
            runs[name] = (device, 0.0, 0.0)
    ops = []
    by_device: dict[str, list] = {}
    for name, (device, start, end) in runs.items():
        by_device.setdefault(device, []).append((start, end, name))
    slots = {}
    for records in by_device.values():
        slots.update(_slots(records))
    for name, (device, start, end) in sorted(runs.items(), key=lambda kv: (kv[1][1], kv[0])):
        ops.append(OpRecord(name, graph.get_operation_by_name(name).type, device, slots[name],
                            start, end))
    return Trace(ops=ops, transfers=_transfers(graph, runs),
                 meta={"backend": "tensorflow", **(meta or {})})


def _full_device(device: str) -> str:
    from core.devices import DeviceSpec
    spec = DeviceSpec.from_string(device)
    return (f"/job:{spec.job or 'localhost'}/replica:{spec.replica or 0}/task:{spec.task or 0}"
            f"/device:{spec.device_type or 'CPU'}:{spec.device_index or 0}")


def _transfers(graph: Graph, runs: dict) -> list[TransferRecord]:
    first_read: dict[tuple[str, str], float] = {}
    tensors = {}
    for name, (device, start, _) in runs.items():
        for t in graph.get_operation_by_name(name).inputs:
            producer = runs.get(t.op.name)
            if producer is not None and producer[0] != device:
                key = (t.name, device)
                first_read[key] = min(first_read.get(key, start), start)
                tensors[t.name] = t
    out = []
    for (tensor, dst), read in sorted(first_read.items()):
        t = tensors[tensor]
        src, _, produced = runs[t.op.name]
        size = int(np.prod([d or 1 for d in t.shape], dtype=np.int64)) * t.dtype.itemsize
        out.append(TransferRecord(tensor, src, dst, (), size, produced, max(read, produced)))
    return out


# --- measuring -------------------------------------------------------------------------------

@contextlib.contextmanager
def _tf_session(tf, workload: Workload, placement: Placement, target: str, config):
    v1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default():
        v1.import_graph_def(v1.GraphDef.FromString(placed_graph_def(workload.graph, placement)),
                            name="")
    with v1.Session(target, graph=graph, config=config) as sess:
        if workload.init is not None:
            sess.run(workload.init.name)
        yield sess


def measure_on_tensorflow(workload: Workload, placements: Mapping[str, Placement],
                          cluster: Cluster, tf_cluster: TFLocalCluster | None = None, *,
                          repeats: int = 5, warmup: int = 2, traced: int = 1,
                          master=("worker", 0), settle: bool = True
                          ) -> dict[str, Measurement]:
    """Time several placements of ``workload`` on TensorFlow's runtime, side by side in
    rounds as :func:`experiments.backends.measure_placements` does ours (each timed step
    right after a step of its own placement with ``settle``:
    :func:`experiments.backends.timed_rounds`).

    Without ``tf_cluster`` the session runs in this process (``cluster`` must be a single
    task, whose devices are TensorFlow's local ones); with it, on its servers, opened at
    ``master`` (or the cluster's only task).  Each traced step's step stats become a
    :class:`core.Trace` (:func:`trace_from_step_stats`)."""
    tf = import_tensorflow()
    v1 = tf.compat.v1
    if tf_cluster is None:
        target, task = "", None
    else:
        task = master if master[0] in tf_cluster.spec else tf_cluster.tasks[0]
        target = tf_cluster.target(*task)
    config = session_config(tf, cluster, task)
    fetches = [f.name for f in workload.fetches] or [workload.graph.get_operations()[-1].name]
    feeds = {t.name: v for t, v in workload.feeds.items()} or None
    fed = [t.op.name for t in workload.feeds]
    names = list(placements)
    with contextlib.ExitStack() as stack:
        sessions = {n: stack.enter_context(_tf_session(tf, workload, placements[n], target,
                                                       config)) for n in names}
        for sess in sessions.values():
            for _ in range(warmup):
                sess.run(fetches, feeds)
        with OtherLoad() as load:
            steps, after_other = timed_rounds(
                {n: functools.partial(sessions[n].run, fetches, feeds) for n in names},
                repeats, settle)
        out = {}
        for n in names:
            traces = []
            for _ in range(max(1, traced)):
                meta = v1.RunMetadata()
                sessions[n].run(fetches, feeds, options=v1.RunOptions(
                    trace_level=v1.RunOptions.FULL_TRACE), run_metadata=meta)
                traces.append(trace_from_step_stats(
                    meta.step_stats, workload.graph, placements[n], fed,
                    {"tensorflow": tf.__version__, "target": target or "in-process"}))
            out[n] = Measurement(min(steps[n]), steps[n], traces, load.other_cores,
                                 after_other[n])
    return out
