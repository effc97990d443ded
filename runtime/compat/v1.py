"""``tensorflow.compat.v1``'s names over the lab: a TF 1.x program runs here with only
``import tensorflow as tf`` changed to ``from runtime.compat import v1 as tf``.

The graph API comes from :mod:`core` (builders, ``Graph``, ``gradients``,
``import_graph_def``), ``nn`` and ``train`` from :mod:`core` and :mod:`placers`
(``replica_device_setter``), ``train.Server`` is :class:`runtime.Server`, and
``Session`` is :class:`runtime.Session` taking TensorFlow's ``ConfigProto``,
``RunOptions`` and ``RunMetadata``: a run with ``trace_level=FULL_TRACE`` fills
``run_metadata.step_stats`` from the run's :class:`core.Trace`.  Only names TensorFlow's
``tf.compat.v1`` has are offered; a name it has and we do not raises an
:class:`AttributeError` that says so.

>>> from runtime.compat import v1 as tf
>>> g = tf.Graph()
>>> with g.as_default():
...     a = tf.Variable(3.0, name="a")
...     c = a * tf.constant(4.0)
...     init = tf.global_variables_initializer()
>>> config = tf.ConfigProto(allow_soft_placement=True)
>>> config.gpu_options.allow_growth = True
>>> with tf.Session(graph=g, config=config) as sess:
...     _ = sess.run(init)
...     float(sess.run(c))
12.0
>>> tf.while_loop
Traceback (most recent call last):
...
AttributeError: tensorflow.compat.v1.while_loop is not supported by runtime.compat.v1 (TensorFlow has it; placement-lab does not)
"""

from __future__ import annotations

import builtins as _builtins
import sys as _sys
import time as _time
import types as _types

import core as _core
import placers as _placers
from core import builders as _builders
from core import nn as _core_nn
from core import train as _core_train
from core.cluster import ClusterSpec as _ClusterSpec
from core.graph_def import GraphDef, NodeDef, import_graph_def
from core.graph_def import write_graph as _write_graph
from core.protos import tf_graph_pb2 as _pb
from runtime import errors as _errors
from runtime import session as _session
from runtime.compat.tf_v1_names import TF_V1_NAMES as _TF_V1_NAMES
from runtime.config import SessionConfig as _SessionConfig

__all__ = ["ConfigProto", "GPUOptions", "RunOptions", "RunMetadata", "Session",
           "InteractiveSession", "Variable", "nn", "train", "errors", "io", "math"]


def _missing(qualified: str, group: str, name: str) -> AttributeError:
    if name in _TF_V1_NAMES.get(group, ()):
        return AttributeError(f"tensorflow.compat.v1.{qualified} is not supported by "
                               f"runtime.compat.v1 (TensorFlow has it; placement-lab does not)")
    return AttributeError(f"tensorflow.compat.v1 has no {qualified!r} (nor has "
                          f"runtime.compat.v1)")


class _Module(_types.ModuleType):
    """A sub-namespace (``nn``, ``train``...) that names what it lacks."""

    def __init__(self, group: str, values: dict, lazy: dict | None = None):
        super().__init__(f"{__name__}.{group}")
        self._group = group
        self._lazy = lazy or {}  # name -> a function making the value, called when first used
        self.__dict__.update(values)
        self.__all__ = sorted(set(values) | set(self._lazy))

    def __getattr__(self, name: str):
        if name in self._lazy:
            value = self._lazy[name]()
            setattr(self, name, value)
            return value
        if name.startswith("__"):
            raise AttributeError(name)
        raise _missing(f"{self._group}.{name}", self._group, name)


def _only_tf_names(group: str, values: dict) -> dict:
    """The entries of ``values`` that TensorFlow's module ``group`` also has."""
    return {k: v for k, v in values.items() if k in _TF_V1_NAMES[group]}


# --- options and metadata ----------------------------------------------------------------

class _Options:
    """A protobuf-like options message: known fields only, set by keyword or attribute."""

    _FIELDS: dict = {}
    _TF_NAME = ""

    def __init__(self, **fields):
        for name, default in self._FIELDS.items():
            object.__setattr__(self, name, default() if callable(default) else default)
        for name, value in fields.items():
            setattr(self, name, value)

    def __setattr__(self, name: str, value) -> None:
        if name not in self._FIELDS:
            raise AttributeError(f"{self._TF_NAME}.{name} is not supported by "
                                 f"runtime.compat.v1; supported: {sorted(self._FIELDS)}")
        object.__setattr__(self, name, value)

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={getattr(self, k)!r}" for k in self._FIELDS)
        return f"{type(self).__name__}({shown})"


class GPUOptions(_Options):
    """``tf.compat.v1.GPUOptions``: ``per_process_gpu_memory_fraction`` (0: all of each
    GPU) and ``allow_growth``."""

    _FIELDS = {"per_process_gpu_memory_fraction": 0.0, "allow_growth": False}
    _TF_NAME = "GPUOptions"


class ConfigProto(_Options):
    """``tf.compat.v1.ConfigProto``, the fields the lab honours (see
    :class:`runtime.SessionConfig`); ``operation_timeout_in_ms`` 0 means the default.

    >>> ConfigProto(log_device_placement=True).to_session_config().log_device_placement
    True
    """

    _FIELDS = {"log_device_placement": False, "allow_soft_placement": False,
               "inter_op_parallelism_threads": 0, "intra_op_parallelism_threads": 0,
               "use_per_session_threads": False, "operation_timeout_in_ms": 0,
               "gpu_options": GPUOptions}
    _TF_NAME = "ConfigProto"

    def to_session_config(self) -> _SessionConfig:
        """The :class:`runtime.SessionConfig` of these settings (checked there)."""
        gpu = self.gpu_options
        timeout = self.operation_timeout_in_ms
        return _SessionConfig(
            log_device_placement=_bool(self.log_device_placement),
            allow_soft_placement=_bool(self.allow_soft_placement),
            inter_op_parallelism_threads=int(self.inter_op_parallelism_threads),
            intra_op_parallelism_threads=int(self.intra_op_parallelism_threads),
            use_per_session_threads=_bool(self.use_per_session_threads),
            per_process_gpu_memory_fraction=gpu.per_process_gpu_memory_fraction or None,
            allow_growth=_bool(gpu.allow_growth),
            operation_timeout=timeout / 1e3 if timeout and timeout > 0 else 60.0)


class RunOptions(_Options):
    """``tf.compat.v1.RunOptions``: ``trace_level`` (``FULL_TRACE`` or any level but
    ``NO_TRACE`` traces the run) and ``timeout_in_ms``."""

    NO_TRACE, SOFTWARE_TRACE, HARDWARE_TRACE, FULL_TRACE = 0, 1, 2, 3
    _FIELDS = {"trace_level": 0, "timeout_in_ms": 0}
    _TF_NAME = "RunOptions"


class RunMetadata(_Options):
    """``tf.compat.v1.RunMetadata``: ``step_stats`` (a StepStats message in TensorFlow's
    wire format) filled by a traced run; ``trace`` holds the run's :class:`core.Trace`."""

    _FIELDS = {"step_stats": _pb.StepStats, "trace": None}
    _TF_NAME = "RunMetadata"


def step_stats_of(trace, step_start: float) -> _pb.StepStats:
    """TensorFlow's StepStats of a :class:`core.Trace` whose step began at
    ``step_start`` (seconds since the epoch): one DeviceStepStats per device, one
    NodeExecStats per op (thread slot as ``thread_id``)."""
    stats = _pb.StepStats()
    by_device: dict = {}
    base_ns = int(round(step_start * 1e9))  # once: the epoch's float holds no nanoseconds
    for r in sorted(trace.ops, key=lambda r: (r.device, r.start, r.op)):
        dev = by_device.get(r.device)
        if dev is None:
            dev = by_device[r.device] = stats.dev_stats.add(device=r.device)
        start_ns = base_ns + int(round(r.start * 1e9))
        rel_ns = int(round((r.end - r.start) * 1e9))
        dev.node_stats.add(
            node_name=r.op, timeline_label=f"{r.op} = {r.type}()", thread_id=r.thread,
            all_start_micros=start_ns // 1000, op_start_rel_micros=0,
            op_end_rel_micros=rel_ns // 1000, all_end_rel_micros=rel_ns // 1000,
            all_start_nanos=start_ns, op_start_rel_nanos=0, op_end_rel_nanos=rel_ns,
            all_end_rel_nanos=rel_ns)
    return stats


_bool = _builtins.bool  # this module's ``bool`` is TensorFlow's dtype, as in tf.compat.v1


def _session_config(config) -> _SessionConfig | None:
    if config is None or isinstance(config, _SessionConfig):
        return config
    if isinstance(config, ConfigProto):
        return config.to_session_config()
    raise TypeError(f"config must be a ConfigProto, not {type(config).__name__}")


class _TFRun:
    """TensorFlow's ``run(fetches, feed_dict, options, run_metadata)`` over ours."""

    def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
        if options is not None and options.timeout_in_ms:
            raise _errors.InvalidArgument("RunOptions.timeout_in_ms is not supported: set "
                                          "ConfigProto.operation_timeout_in_ms")
        traced = options is not None and options.trace_level != RunOptions.NO_TRACE
        if not traced:
            return super().run(fetches, feed_dict)
        start = _time.time()
        result, trace = super().run(fetches, feed_dict, trace=True)
        if run_metadata is not None:
            run_metadata.step_stats = step_stats_of(trace, start)
            run_metadata.trace = trace
        return result


class Session(_TFRun, _session.Session):
    """``tf.compat.v1.Session(target="", graph=None, config=None)``: in-process for
    ``""``, else on the server at ``grpc://host:port``."""

    def __init__(self, target: str = "", graph=None, config=None):
        super().__init__(target or None, graph, _session_config(config))


class InteractiveSession(_TFRun, _session.InteractiveSession):
    """``tf.compat.v1.InteractiveSession``: a session that makes itself the default."""

    def __init__(self, target: str = "", graph=None, config=None):
        super().__init__(target or None, graph, _session_config(config))


# --- the graph API -------------------------------------------------------------------------

class Variable(_core.Variable):
    """``tf.compat.v1.Variable`` with TensorFlow's argument order; arguments the lab has
    no use for are accepted at their defaults and refused otherwise."""

    def __init__(self, initial_value=None, trainable=None, collections=None,
                 validate_shape=True, caching_device=None, name=None, variable_def=None,
                 dtype=None, expected_shape=None, import_scope=None, constraint=None,
                 use_resource=None, synchronization=None, aggregation=None, shape=None):
        given = {"collections": collections, "caching_device": caching_device,
                 "variable_def": variable_def, "expected_shape": expected_shape,
                 "import_scope": import_scope, "constraint": constraint, "shape": shape,
                 "use_resource": use_resource or None,
                 "validate_shape": None if validate_shape is True else validate_shape}
        refused = sorted(k for k, v in given.items() if v is not None)
        if refused:
            raise TypeError(f"Variable(): arguments not supported by runtime.compat.v1: "
                            f"{refused}")
        if initial_value is None:
            raise ValueError("Variable(): initial_value must be given")
        super().__init__(initial_value, name=name, dtype=dtype, trainable=trainable is not False)


def disable_eager_execution() -> None:
    """Graph mode is the only mode here: nothing to change."""


def disable_v2_behavior() -> None:
    """The TF 1.x behaviour is the only one here: nothing to change."""


def executing_eagerly() -> bool:
    return False


def _builder_functions() -> dict:
    """Every builder of :mod:`core.builders` and :mod:`core.builders_math`, by name."""
    from core import builders_math
    return {name: getattr(module, name) for module in (_builders, builders_math)
            for name in module.__all__}


def _top_level() -> dict:
    values = _builder_functions()
    values.update(
        Graph=_core.Graph, Operation=_core.Operation, Tensor=_core.Tensor, DType=_core.DType,
        DeviceSpec=_core.DeviceSpec, as_dtype=_core.as_dtype, float16=_core.float16,
        float32=_core.float32, float64=_core.float64, int32=_core.int32, int64=_core.int64,
        bool=_core.bool_, gradients=_core.gradients, get_default_graph=_core.get_default_graph,
        reset_default_graph=_core.reset_default_graph,
        get_default_session=_core.get_default_session, import_graph_def=import_graph_def,
        GraphDef=GraphDef, NodeDef=NodeDef, Variable=Variable, Session=Session,
        InteractiveSession=InteractiveSession, ConfigProto=ConfigProto,
        GPUOptions=GPUOptions, RunOptions=RunOptions, RunMetadata=RunMetadata,
        disable_eager_execution=disable_eager_execution,
        disable_v2_behavior=disable_v2_behavior, executing_eagerly=executing_eagerly)
    return _only_tf_names("", values)


def _server_class():
    """``tf.train.Server``: :class:`runtime.Server` taking TensorFlow's ``ConfigProto``."""
    from runtime.server import Server as _Server

    class Server(_Server):
        """``tf.compat.v1.train.Server(server_or_cluster_def, job_name, task_index,
        protocol, config, start)``; ``config`` may be a ``ConfigProto``."""

        def __init__(self, server_or_cluster_def, job_name=None, task_index=None,
                     protocol=None, config=None, start=True):
            super().__init__(server_or_cluster_def, job_name, task_index, protocol,
                             _session_config(config), start)

    Server.__module__ = __name__
    Server.__qualname__ = "train.Server"
    return Server


def _optimizers() -> dict:
    """The optimizers of :mod:`core.train`, by TensorFlow's names."""
    return {n: getattr(_core_train, n) for n in _core_train.__all__}


def _nn() -> dict:
    values = {"relu": _builders.relu, "softmax": _builders.softmax,
              "sigmoid": _builders.sigmoid, "tanh": _builders.tanh}
    values.update({n: getattr(_core_nn, n) for n in _core_nn.__all__})
    return _only_tf_names("nn", values)


_ERRORS = {"OpError": _errors.OpError, "InvalidArgumentError": _errors.InvalidArgument,
           "NotFoundError": _errors.NotFound,
           "FailedPreconditionError": _errors.FailedPrecondition,
           "DeadlineExceededError": _errors.DeadlineExceeded,
           "UnavailableError": _errors.Unavailable}

nn = _Module("nn", _nn())
train = _Module("train", _only_tf_names("train", {
    "ClusterSpec": _ClusterSpec, "replica_device_setter": _placers.replica_device_setter,
    "write_graph": _write_graph, **_optimizers()}),
    lazy={"Server": lambda: _server_class()})  # gRPC: imported when first used
errors = _Module("errors", _only_tf_names("errors", _ERRORS))
io = _Module("io", _only_tf_names("io", {"write_graph": _write_graph}))
math = _Module("math", _only_tf_names("math", _builder_functions()))

globals().update(_top_level())
for _name in ("nn", "train", "errors", "io", "math"):
    _sys.modules[f"{__name__}.{_name}"] = globals()[_name]


def __getattr__(name: str):
    raise _missing(name, "", name)
