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

import os as _os

#: gRPC core experiments switched off in the processes that load gRPC through the
#: runtime (the servers, their clients), unless ``GRPC_EXPERIMENTS`` is set already (set
#: it, even empty, to keep gRPC's own defaults). With these on, gRPC 1.85 moves every
#: socket event of the synchronous stack through its EventEngine's thread pool: one
#: more thread handoff per message each way (a message round trip between two
#: processes and the client's CPU per round trip both grew by about half on the 2-core
#: test machine; large streamed tensors were not slower). gRPC reads it when it loads,
#: so it is set here, before any module of the runtime imports ``grpc`` (and it is
#: inherited by the server processes started here).
GRPC_EXPERIMENTS_OFF = ("-event_engine_client,-event_engine_listener,"
                        "-event_engine_for_all_other_endpoints")
_os.environ.setdefault("GRPC_EXPERIMENTS", GRPC_EXPERIMENTS_OFF)

# Eagerly, so that ``runtime.calibrate`` stays the function: importing the submodule
# ``runtime.calibrate`` after a lazy lookup would rebind the name to the module.
from runtime.calibrate import calibrate
from runtime.config import SessionConfig
from runtime.errors import (DeadlineExceeded, FailedPrecondition, InvalidArgument,
                            LabRuntimeError, NotFound, OpError, ResourceExhausted,
                            Unavailable)
from runtime.variables import VariableStore

__all__ = ["Session", "InteractiveSession", "SessionConfig", "Executor", "StepResult",
           "LocalDevices", "VariableStore", "calibrate", "LabRuntimeError", "OpError",
           "FailedPrecondition", "InvalidArgument", "DeadlineExceeded", "Unavailable",
           "NotFound", "ResourceExhausted", "Server", "LocalCluster", "RemoteSession"]

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
