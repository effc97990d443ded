"""runtime: runs placed graphs for real, in-process or on gRPC servers.

Importing this package is cheap (no numba, no gRPC): the kernels are imported when a
session first runs, and the gRPC backend only for ``grpc://`` targets.

- :class:`Session` (:mod:`runtime.session`): TensorFlow 1.x's ``tf.Session``;
- :class:`SessionConfig` (:mod:`runtime.config`): its ``ConfigProto``;
- :class:`Executor`, :class:`StepResult` (:mod:`runtime.executor`): one task's part of a
  step on its devices' inter-op pools;
- :class:`LocalDevices` (:mod:`runtime.local_devices`), :class:`VariableStore`
  (:mod:`runtime.variables`);
- :func:`calibrate` (:mod:`runtime.calibrate`): measure this machine into a Cluster JSON;
- :class:`Server` (:mod:`runtime.server`), :class:`LocalCluster` (:mod:`runtime.launcher`),
  :class:`RemoteSession` (:mod:`runtime.remote`): the distributed runtime (gRPC master and
  worker services, a cluster of server processes on 127.0.0.1);
- the errors (:mod:`runtime.errors`).
"""

# Eagerly, so that ``runtime.calibrate`` stays the function: importing the submodule
# ``runtime.calibrate`` after a lazy lookup would rebind the name to the module.
from runtime.calibrate import calibrate
from runtime.config import SessionConfig
from runtime.errors import (DeadlineExceeded, FailedPrecondition, InvalidArgument,
                            LabRuntimeError, NotFound, OpError, Unavailable)
from runtime.variables import VariableStore
from core.version import __version__

__all__ = ["Session", "InteractiveSession", "SessionConfig", "Executor", "StepResult",
           "LocalDevices", "VariableStore", "calibrate", "LabRuntimeError", "OpError",
           "FailedPrecondition", "InvalidArgument", "DeadlineExceeded", "Unavailable",
           "NotFound", "Server", "LocalCluster", "RemoteSession"]

_LAZY = {"Session": "runtime.session", "InteractiveSession": "runtime.session",
         "Executor": "runtime.executor", "StepResult": "runtime.executor",
         "LocalDevices": "runtime.local_devices",
         "Server": "runtime.server", "LocalCluster": "runtime.launcher",
         "RemoteSession": "runtime.remote"}


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'runtime' has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
