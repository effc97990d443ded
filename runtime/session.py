"""``Session``: TensorFlow 1.x's ``tf.Session`` over the local executor or a gRPC master.

Contract:

1. ``Session(target=None, graph=None, config=None, *, cluster=None, security=None)``
   (``security``: a :class:`runtime.security.Security` for a ``grpc://`` target that
   asks for TLS or a token).
   ``target=None`` (or ``""``) runs in-process on this machine
   (``Cluster.this_machine(job="localhost")`` unless ``cluster`` is given; the session's
   task is the cluster's master task, ``/job:localhost/replica:0/task:0``);
   ``target="grpc://host:port"`` hands every call to
   ``runtime.remote.RemoteSession(target, graph, config)``, whose
   ``run(fetch_names, target_names, feeds, trace) -> (values by tensor name,
   Trace | None)``, ``close()`` and ``placement`` it uses.  The gRPC side is imported
   only then, so ``import runtime`` stays quick.
2. ``run(fetches, feed_dict=None, trace=False)`` takes TF's fetch structures: a tensor,
   an op, a Variable, a tensor or op name, or nested lists, tuples, namedtuples and
   dicts of them; an op gives None.  A 0-d result is a numpy scalar, as in TensorFlow.
   With ``trace=True`` it returns ``(values, trace)``, a :class:`core.trace.Trace` that
   passes ``trace.validate(session.graph, session.cluster)``.  Fetch flattening and feed
   checking happen here, on the client side, for both paths.
3. ``feed_dict`` keys are tensors, placeholders, Variables or tensor names.  Values are
   converted as TensorFlow converts them: a Python float or a float64 array fed to a
   float32 tensor is cast; an int fed to a float tensor is cast; a value of another
   kind (a float into an int32 tensor, a bool into a float one) raises
   :class:`~runtime.errors.InvalidArgument`, and so does an int that does not fit, and a
   shape incompatible with the tensor's static shape (naming the tensor and both shapes).
   Fetching a name the graph does not have raises :class:`~runtime.errors.NotFound`.
4. In-process: the first run places the whole graph with ``config.placer`` (the simple
   placer by default); a run after ops were added places only the new ones (earlier
   ones keep their device).  ``log_device_placement`` prints each op's line once (on
   stderr, as TensorFlow).  Only the ops the fetches need run.  The numba kernels are
   compiled (or loaded from numba's cache) before the first run's step starts, so
   compile time never lands in a measured step.
5. ``with Session() as sess:`` makes it the default session (``Tensor.eval()``,
   ``Operation.run()``) and its graph the default graph, and closes it at the end;
   ``as_default()`` only makes it the default.  ``graph``, ``placement`` (the current
   :class:`core.placement.Placement`), ``cluster`` (with the thread counts in use),
   ``list_devices()``, ``close()``.

>>> import core as tf
>>> g = tf.Graph()
>>> with g.as_default(), tf.device("/cpu:0"):
...     a = tf.Variable(3.0, name="a")
...     c = a * tf.constant(4.0)
>>> from core.cluster import Cluster
>>> with Session(graph=g, cluster=Cluster.single_host()) as sess:
...     _ = sess.run(a.initializer)
...     out = sess.run({"c": c, "both": [a, c.op]})
>>> float(out["c"]), float(out["both"][0]), out["both"][1]
(12.0, 3.0, None)
"""

from __future__ import annotations

import threading
from typing import Any, Mapping, NamedTuple

import numpy as np

from core.graph import (Graph, GraphError, Operation, Tensor, get_default_graph,
                        push_default_session)
from core.partition import ops_needed
from runtime.config import SessionConfig
from runtime.errors import InvalidArgument, LabRuntimeError, NotFound

__all__ = ["Session", "DeviceAttributes", "InteractiveSession"]

_WARM: set = set()
_WARM_LOCK = threading.Lock()


class DeviceAttributes(NamedTuple):
    """What ``Session.list_devices()`` gives for each device (TF's ``_DeviceAttributes``)."""

    name: str
    device_type: str
    memory_limit_bytes: int


def _warmup(ops, gpu: bool) -> None:
    """Compile (or load) the kernels a step of ``ops`` runs, once per process."""
    from runtime import kernels
    with _WARM_LOCK:
        kernels.warmup_for(ops, ("CPU", "GPU") if gpu else ("CPU",), _WARM)


class _Fetches:
    """A fetch structure flattened: the elements (tensor or op) and how to rebuild it."""

    def __init__(self, graph: Graph, fetches):
        self.elements: list = []
        self.template = self._flatten(graph, fetches)

    def _flatten(self, graph, f):
        if isinstance(f, dict):
            return ("dict", type(f), [(k, self._flatten(graph, v)) for k, v in f.items()])
        if isinstance(f, tuple) and hasattr(f, "_fields"):
            return ("namedtuple", type(f), [self._flatten(graph, v) for v in f])
        if isinstance(f, (list, tuple)):
            return ("seq", type(f), [self._flatten(graph, v) for v in f])
        self.elements.append(_element(graph, f))
        return ("leaf", len(self.elements) - 1)

    def build(self, values: list):
        return self._build(self.template, values)

    def _build(self, t, values):
        kind = t[0]
        if kind == "leaf":
            return values[t[1]]
        if kind == "dict":
            out = t[1]() if t[1] is not dict else {}
            for k, sub in t[2]:
                out[k] = self._build(sub, values)
            return out
        if kind == "namedtuple":
            return t[1](*[self._build(sub, values) for sub in t[2]])
        items = [self._build(sub, values) for sub in t[2]]
        return items if t[1] is list else t[1](items)


def _element(graph: Graph, f):
    """A fetch resolved to a Tensor or Operation of ``graph``."""
    if f is None:
        raise TypeError("Fetch argument None has invalid type <class 'NoneType'>")
    try:
        element = graph.as_graph_element(f)
    except KeyError as e:
        if isinstance(f, str) and ":" in f:
            op_name = f.rpartition(":")[0]
            if op_name in graph:
                raise NotFound(f"The name {f!r} refers to a Tensor which does not exist: the "
                               f"operation {op_name!r} has {len(graph.get_operation_by_name(op_name).outputs)}"
                               " outputs") from None
            raise NotFound(f"The name {f!r} refers to a Tensor which does not exist. The "
                           f"operation, {op_name!r}, does not exist in the graph.") from None
        raise NotFound(f"The name {f!r} refers to an Operation not in the graph.") from None
    except ValueError as e:
        raise InvalidArgument(f"cannot fetch {f!r}: {e}") from None
    except GraphError as e:
        raise InvalidArgument(f"cannot fetch {f!r}: {e}; fetches must come from the session's "
                              "graph") from None
    except TypeError:
        raise TypeError(f"Fetch argument {f!r} has invalid type {type(f)}, must be a string, "
                        "a Tensor, an Operation or a Variable") from None
    return element


def _feed_tensor(graph: Graph, key) -> Tensor:
    try:
        t = graph.as_graph_element(key, allow_operation=False)
    except KeyError as e:
        raise NotFound(f"cannot feed {key!r}: {str(e).strip(chr(34))}") from None
    except (GraphError, ValueError) as e:
        raise InvalidArgument(f"cannot feed {key!r}: {e}") from None
    except TypeError:
        raise TypeError(f"The key of a feed must be a Tensor, a Variable or a tensor name, "
                        f"not {key!r}") from None
    return t


_OK_KINDS = {"f": "fiu", "i": "iu", "u": "iu", "b": "b"}


def check_feed(tensor: Tensor, value) -> np.ndarray:
    """``value`` converted for ``tensor`` as TensorFlow converts feeds (contract item 3).

    >>> import core as tf
    >>> g = tf.Graph()
    >>> with g.as_default():
    ...     x = tf.placeholder(tf.float32, (None, 2), name="x")
    >>> check_feed(x, [[1, 2]]).dtype
    dtype('float32')
    >>> check_feed(x, [1.0, 2.0])
    Traceback (most recent call last):
    ...
    runtime.errors.InvalidArgument: Cannot feed value of shape (2,) for Tensor 'x:0', which has shape (None, 2)
    """
    if isinstance(value, (Tensor, Operation)):
        raise TypeError(f"The value of a feed cannot be a graph element ({value!r}); feed a "
                        "numpy array or a Python value")
    target = tensor.dtype.np
    if isinstance(value, np.ndarray):
        arr = value
    else:
        try:
            arr = np.asarray(value)
        except ValueError as err:  # a ragged nested list: numpy says "inhomogeneous"
            raise InvalidArgument(
                f"Cannot feed a ragged value to Tensor {tensor.name!r} of shape "
                f"{tensor.shape}: its nested lists differ in length ({err})") from None
    if arr.dtype == object:
        raise InvalidArgument(f"Cannot feed a value of Python objects to Tensor "
                              f"{tensor.name!r}: a ragged list, or elements that are not "
                              "numbers")
    kind = arr.dtype.kind
    if kind not in _OK_KINDS.get(target.kind, target.kind):
        raise InvalidArgument(f"Cannot feed a value of dtype {arr.dtype.name} to Tensor "
                              f"{tensor.name!r} of dtype {tensor.dtype.name}: the value would "
                              "lose its kind (cast it explicitly)")
    if kind in "iu" and target.kind in "iu" and arr.size and arr.dtype != target:
        info = np.iinfo(target)
        if arr.min() < info.min or arr.max() > info.max:
            raise InvalidArgument(f"Cannot feed {arr.dtype.name} values outside "
                                  f"[{info.min}, {info.max}] to Tensor {tensor.name!r} of "
                                  f"dtype {tensor.dtype.name}")
    shape = tensor.shape
    if arr.ndim != len(shape) or any(d is not None and d != s for d, s in zip(shape, arr.shape)):
        raise InvalidArgument(f"Cannot feed value of shape {arr.shape} for Tensor "
                              f"{tensor.name!r}, which has shape {shape}")
    if arr.dtype != target or not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr, dtype=target)
    return arr


class Session:
    """A TF 1.x session (see the module docstring for the contract)."""

    def __init__(self, target: str | None = None, graph: Graph | None = None,
                 config: SessionConfig | Mapping | None = None, *, cluster=None,
                 security=None):
        if config is None:
            config = SessionConfig()
        elif isinstance(config, Mapping):
            config = SessionConfig.from_dict(dict(config))
        elif not isinstance(config, SessionConfig):
            raise TypeError(f"config must be a SessionConfig or a dict, not {config!r}")
        self._config = config
        self._graph = graph if graph is not None else get_default_graph()
        self._closed = False
        self._remote = None
        self._target = target or ""
        self._context_stack: list = []
        self._lock = threading.RLock()
        self._needed_cache: dict = {}
        if self._target:
            if not self._target.startswith("grpc://"):
                raise InvalidArgument(f"unknown session target {target!r}: use None for "
                                      "in-process, or 'grpc://host:port'")
            import importlib
            try:
                remote = importlib.import_module("runtime.remote")
            except ModuleNotFoundError as e:
                if e.name in ("runtime.remote", "grpc"):
                    raise LabRuntimeError(
                        f"target {target!r} needs the gRPC backend (runtime.remote), which is "
                        f"not available here ({e})") from e
                raise
            self._remote = remote.RemoteSession(self._target, self._graph, config,
                                                security=security)
            return
        from core.cluster import Cluster
        from runtime.executor import Executor
        from runtime.local_devices import LocalDevices
        from runtime.variables import VariableStore

        base = cluster if cluster is not None else Cluster.this_machine(job="localhost")
        job, task = base.master
        self._devices = LocalDevices.for_task(base, job, task, config)
        self._cluster = self._devices.effective_cluster()
        self._variables = VariableStore()
        self._executor = Executor(self._devices, self._variables)
        self._placer = config.make_placer()
        self._placement = None
        self._placed_version = -1

    # -- properties ------------------------------------------------------------------
    @property
    def graph(self) -> Graph:
        return self._graph

    @property
    def config(self) -> SessionConfig:
        return self._config

    @property
    def target(self) -> str:
        return self._target

    @property
    def placement(self):
        """The current placement (None before the first run)."""
        if self._remote is not None:
            return self._remote.placement
        return self._placement

    @property
    def cluster(self):
        """The cluster the session runs on, with the thread counts in use (in-process)."""
        if self._remote is not None:
            return getattr(self._remote, "cluster", None)
        return self._cluster

    @property
    def variables(self):
        """The in-process :class:`~runtime.variables.VariableStore`."""
        return None if self._remote is not None else self._variables

    def list_devices(self) -> list[DeviceAttributes]:
        """The devices the session can use."""
        if self._remote is not None:
            if hasattr(self._remote, "list_devices"):
                return self._remote.list_devices()
            cluster = getattr(self._remote, "cluster", None)
            devices = cluster.devices if cluster is not None else ()
        else:
            devices = [d.device for d in self._devices]
            caps = self._devices.capacities()
            return [DeviceAttributes(d.name, d.device_type, caps[d.name]) for d in devices]
        return [DeviceAttributes(d.name, d.device_type, d.memory_bytes) for d in devices]

    # -- running -----------------------------------------------------------------------
    def run(self, fetches, feed_dict=None, trace: bool = False):
        """Run ``fetches``; see the module docstring (contract item 2)."""
        if self._closed:
            raise LabRuntimeError("Attempted to use a closed Session.")
        flat = _Fetches(self._graph, fetches)
        fetch_names: list[str] = []
        target_names: list[str] = []
        for e in flat.elements:
            if isinstance(e, Tensor):
                if e.name not in fetch_names:
                    fetch_names.append(e.name)
            elif e.name not in target_names:
                target_names.append(e.name)
        feeds: dict[str, np.ndarray] = {}
        for key, value in (feed_dict or {}).items():
            t = _feed_tensor(self._graph, key)
            feeds[t.name] = check_feed(t, value)
        if self._remote is not None:
            values, tr = self._remote.run(fetch_names, target_names, feeds, trace)
        else:
            values, tr = self._run_local(flat, fetch_names, target_names, feeds, trace)
        out = []
        for e in flat.elements:
            if isinstance(e, Tensor):
                v = values[e.name]
                out.append(v[()] if isinstance(v, np.ndarray) and v.ndim == 0 else v)
            else:
                out.append(None)
        result = flat.build(out)
        return (result, tr) if trace else result

    def _place(self):
        with self._lock:
            version = self._graph.version
            if version != self._placed_version:
                self._placement = self._placer.place(self._graph, self._cluster,
                                                     previous=self._placement)
                self._placed_version = version
            return self._placement

    def _run_local(self, flat, fetch_names, target_names, feeds, trace):
        placement = self._place()
        key = (tuple(fetch_names), tuple(target_names), frozenset(feeds), self._graph.version)
        ops = self._needed_cache.get(key)
        if ops is None:
            roots = [e.op if isinstance(e, Tensor) else e for e in flat.elements]
            # A tuple: the executor memoises its plan key by the tuple's identity.
            ops = tuple(ops_needed(roots, set(feeds)))
            if len(self._needed_cache) > 256:
                self._needed_cache.clear()
            self._needed_cache[key] = ops
            gpu = any("/device:GPU:" in placement[op.name] for op in ops)
            if gpu:
                from numba import config as numba_config
                gpu = not numba_config.ENABLE_CUDASIM  # the simulator has nothing to compile
            _warmup(ops, gpu)
        result = self._executor.run_step(ops, placement, fetches=fetch_names,
                                         targets=target_names, feeds=feeds, trace=trace,
                                         timeout=self._config.operation_timeout)
        tr = None
        if trace:
            tr = result.to_trace()
            ends = {}
            for r in tr.ops:
                ends[r.op] = r.end
            wanted = [n.rpartition(":")[0] for n in fetch_names] + list(target_names)
            tr.fetch_end = {n: ends[n] for n in wanted if n in ends}
            tr.meta.update(target="in-process", config=self._config_summary())
        return result.values, tr

    def _config_summary(self) -> dict:
        try:
            return self._config.to_dict()
        except InvalidArgument:
            return {"placer": repr(self._config.placer)}

    # -- lifecycle ---------------------------------------------------------------------
    def close(self) -> None:
        """Release the session's resources (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._remote is not None:
            self._remote.close()
            return
        self._executor.close()
        self._devices.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def as_default(self):
        """A context manager making this the default session (it stays open after)."""
        return push_default_session(self)

    def __enter__(self) -> "Session":
        graph_cm = self._graph.as_default()
        session_cm = push_default_session(self)
        graph_cm.__enter__()
        session_cm.__enter__()
        self._context_stack.append((graph_cm, session_cm))
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        graph_cm, session_cm = self._context_stack.pop()
        session_cm.__exit__(exc_type, exc, tb)
        graph_cm.__exit__(exc_type, exc, tb)
        self.close()

    def __del__(self):
        try:
            if not self._closed and getattr(self, "_devices", None) is not None:
                self._devices.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def __repr__(self) -> str:
        where = self._target or "in-process"
        return f"<Session {where} graph={self._graph!r}{' closed' if self._closed else ''}>"


class InteractiveSession(Session):
    """A session that makes itself the default when built (TF's ``InteractiveSession``)."""

    def __init__(self, target: str | None = None, graph: Graph | None = None,
                 config: Any = None, **kwargs):
        super().__init__(target, graph, config, **kwargs)
        self._default_cm = push_default_session(self)
        self._default_cm.__enter__()

    def close(self) -> None:
        if not self._closed and getattr(self, "_default_cm", None) is not None:
            try:
                self._default_cm.__exit__(None, None, None)
            except IndexError:
                pass
        super().close()
