"""Tensors on the wire: the transport layer that the master and worker services build
on, in four modules by job, all re-exported here (``from runtime import wire``):

1. :mod:`runtime.tensor_codec`: the message codec: chunked encoding and checked
   decoding of tensors (``TensorChunk``), rendezvous keys, :class:`WireError`.
   Nothing is ever pickled.
2. :mod:`runtime.grpc_calls`: gRPC servers and channels (limits, keepalive, TLS),
   calls with deadlines (:func:`call_rpc`), :class:`TransportError` and its
   subclasses, and calls as messages on long-lived streams (:class:`StreamCaller`).
3. :mod:`runtime.local_transport`: calls and pushed tensors between processes of one
   host over Unix sockets (:class:`LocalCaller`, :class:`LocalPushSender` and their
   listeners).
4. :mod:`runtime.tensor_store`: TensorStore, a tiny demo service used by the tests and
   ``experiments/bench_wire.py``.

Same-host handoff through shared memory lives in :mod:`runtime.segment_pool` (the
pool production uses) and :mod:`runtime.shm` (the demo's single-use segments).

    >>> import numpy as np
    >>> x = np.arange(6, dtype=np.float32).reshape(2, 3)
    >>> chunks = list(encode_chunks(x, key="a;x:0;b;1", chunk_bytes=8))
    >>> np.array_equal(decode_chunks(chunks, expected_dtype="float32"), x)
    True
"""

from __future__ import annotations

from runtime import GRPC_EXPERIMENTS_OFF  # noqa: F401 - re-exported
from runtime.grpc_calls import *  # noqa: F401,F403
from runtime.grpc_calls import __all__ as _grpc_all
from runtime.local_transport import *  # noqa: F401,F403
from runtime.local_transport import __all__ as _local_all
from runtime.tensor_codec import *  # noqa: F401,F403
from runtime.tensor_codec import __all__ as _codec_all
from runtime.tensor_store import *  # noqa: F401,F403
from runtime.tensor_store import __all__ as _store_all

__all__ = ["GRPC_EXPERIMENTS_OFF", *_codec_all, *_grpc_all, *_local_all, *_store_all]
