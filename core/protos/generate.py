"""Regenerate ``tf_graph_pb2.py`` (and its ``.pyi``) from ``tf_graph.proto``::

    python -m core.protos.generate

Only message code is generated (``core`` imports protobuf, never gRPC); the output is
committed, so users need only ``protobuf``.  ``grpcio-tools`` (a dev dependency) ships
the ``protoc`` this runs.
"""

from __future__ import annotations

import sys
from pathlib import Path

PROTO_DIR = Path(__file__).resolve().parent


class ProtocError(RuntimeError):
    """protoc failed; the message carries its exit status and arguments."""


def generate(proto_dir: Path = PROTO_DIR) -> list[Path]:
    """Compile every ``.proto`` in ``proto_dir``; return the files written.

    Example::

        >>> generate()  # doctest: +SKIP
        [PosixPath('.../tf_graph_pb2.py'), PosixPath('.../tf_graph_pb2.pyi')]
    """
    from grpc_tools import protoc

    protos = sorted(proto_dir.glob("*.proto"))
    if not protos:
        raise ProtocError(f"no .proto files in {proto_dir}")
    args = ["grpc_tools.protoc", f"-I{proto_dir}", f"--python_out={proto_dir}",
            f"--pyi_out={proto_dir}", *[str(p) for p in protos]]
    status = protoc.main(args)
    if status != 0:
        raise ProtocError(f"protoc exited with status {status}: {' '.join(args)}")
    return [proto_dir / f"{p.stem}{suffix}" for p in protos for suffix in ("_pb2.py", "_pb2.pyi")]


def main() -> int:
    for path in generate():
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
