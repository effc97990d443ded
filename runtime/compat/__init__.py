"""TensorFlow's compatibility names over the lab: ``from runtime.compat import v1 as tf``
runs a TF 1.x program (the seed texts') on our graph, placers and runtime.  See
:mod:`runtime.compat.v1`."""

__all__ = ["v1"]
