"""Regenerate the Python modules of the ``.proto`` files in this folder.

Run from anywhere with the project's interpreter::

    python -m runtime.protos.generate

For every ``*.proto`` here it runs ``grpc_tools.protoc`` and writes
``<name>_pb2.py``, ``<name>_pb2.pyi`` and ``<name>_pb2_grpc.py`` beside it.
protoc writes top-level imports (``import tensor_pb2 as tensor__pb2``), which only
work when this folder is on ``sys.path``; they are rewritten to relative imports so
the modules import as ``runtime.protos.tensor_pb2`` from an installed package.

The generated code is committed, so users need only ``grpcio`` and ``protobuf``;
``grpcio-tools`` (a dev dependency) is needed only to run this script.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

PROTO_DIR = Path(__file__).resolve().parent

# "import tensor_pb2 as tensor__pb2" -> "from . import tensor_pb2 as tensor__pb2",
# only for modules generated from our own protos (google.protobuf imports stay).
_TOP_LEVEL_IMPORT = re.compile(r"^import (\w+_pb2) as (\w+)$", re.MULTILINE)


class ProtocError(RuntimeError):
    """protoc failed; the message carries its exit status."""


def _make_imports_relative(path: Path, local_modules: set[str]) -> None:
    text = path.read_text()

    def fix(match: re.Match[str]) -> str:
        module, alias = match.groups()
        if module in local_modules:
            return f"from . import {module} as {alias}"
        return match.group(0)

    fixed = _TOP_LEVEL_IMPORT.sub(fix, text)
    if fixed != text:
        path.write_text(fixed)


def generate(proto_dir: Path = PROTO_DIR) -> list[Path]:
    """Compile every ``.proto`` in ``proto_dir``; return the files written.

    Example::

        >>> generate()  # doctest: +SKIP
        [PosixPath('.../tensor_pb2.py'), PosixPath('.../tensor_pb2_grpc.py'), ...]
    """
    import grpc_tools
    from grpc_tools import protoc

    protos = sorted(proto_dir.glob("*.proto"))
    if not protos:
        raise ProtocError(f"no .proto files in {proto_dir}")
    # grpc_tools ships the well-known types (google/protobuf/*.proto) here.
    well_known = Path(grpc_tools.__file__).resolve().parent / "_proto"
    args = [
        "grpc_tools.protoc",
        f"-I{proto_dir}",
        f"-I{well_known}",
        f"--python_out={proto_dir}",
        f"--pyi_out={proto_dir}",
        f"--grpc_python_out={proto_dir}",
        *[str(p) for p in protos],
    ]
    status = protoc.main(args)
    if status != 0:
        raise ProtocError(f"protoc exited with status {status}: {' '.join(args)}")

    local_modules = {f"{p.stem}_pb2" for p in protos}
    written: list[Path] = []
    for proto in protos:
        for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py"):
            out = proto_dir / f"{proto.stem}{suffix}"
            if out.exists():
                _make_imports_relative(out, local_modules)
                written.append(out)
    return written


def main() -> int:
    for path in generate():
        print(path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
