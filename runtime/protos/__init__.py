"""Generated protobuf and gRPC modules of placement-lab (see ``tensor.proto``).

Do not edit the ``*_pb2*.py`` files: change the ``.proto`` and run
``python -m runtime.protos.generate``. Import the modules by name::

    from runtime.protos import tensor_pb2, tensor_pb2_grpc

This ``__init__`` imports nothing itself, so the generator still runs when the
generated files are missing or stale.
"""
