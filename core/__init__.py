"""core: the shared vocabulary of the lab (graphs, device names, clusters, placements,
costs and traces).  Plain data and pure functions: no simpy, grpc or numba imports.

The TensorFlow-1.x-style building API is re-exported here, so ``import core as tf``
reads like the seed texts:

>>> import core as tf
>>> g = tf.Graph()
>>> with g.as_default(), tf.device("/cpu:0"):
...     a = tf.Variable(3.0, name="a")
...     b = tf.constant(4.0)
>>> c = a * b
"""

from core.builders import *  # noqa: F401,F403
from core.builders import Variable, __all__ as _builders_all
from core.builders_math import *  # noqa: F401,F403
from core.builders_math import __all__ as _builders_math_all
from core.devices import DeviceSpec, InvalidDeviceSpec
from core.dtypes import DType, as_dtype, bool_, float16, float32, float64, int32, int64
from core.autodiff import gradients
from core.graph import (Graph, GraphCycleError, GraphError, Operation, Tensor,
                        get_default_graph, get_default_session, reset_default_graph)
from core.ops import OPS, ShapeError
from core.graph_def import GraphDefError, UnsupportedOpError, import_graph_def, write_graph
from core import nn  # noqa: F401
from core.version import __version__

__all__ = list(_builders_all) + list(_builders_math_all) + [
    "Variable", "DeviceSpec", "InvalidDeviceSpec", "DType", "as_dtype", "bool_", "float16",
    "float32", "float64", "int32", "int64", "gradients", "Graph", "GraphCycleError",
    "GraphError", "Operation", "Tensor", "get_default_graph", "get_default_session",
    "reset_default_graph", "OPS", "ShapeError", "import_graph_def", "write_graph",
    "GraphDefError", "UnsupportedOpError",
]
from core import train  # noqa: E402  (tf.train: the optimizers)
