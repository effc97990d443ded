"""Generated protobuf modules of :mod:`core` (no gRPC): ``tf_graph_pb2``, TensorFlow's
GraphDef wire format (see ``tf_graph.proto``); regenerate with
``python -m core.protos.generate``."""
