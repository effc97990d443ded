"""Tests of runtime.wire (chunked tensors, gRPC plumbing) and runtime.shm (same-host handoff)."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from runtime import shm, wire
from runtime.protos import tensor_pb2

REPO = Path(__file__).resolve().parents[2]

needs_shm = pytest.mark.skipif(not shm.shm_available(), reason="no /dev/shm on this host")


# ---------------------------------------------------------------------------
# Fixtures

@pytest.fixture(scope="module")
def store():
    """A TensorStore server in this process on 127.0.0.1, ephemeral port."""
    server = wire.start_tensor_store()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def client(store):
    c = wire.TensorStoreClient(store.address, deadline=10.0)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture(scope="module")
def store_process():
    """A TensorStore server in a spawned child process."""
    proc = wire.TensorStoreProcess()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def no_leaked_segments():
    before = set(shm.list_segments())
    yield
    # A segment unlinked by another process may take a moment to vanish from the
    # listing only if that process is still working; ours finish within the call.
    leaked = set(shm.list_segments()) - before
    assert not leaked, f"leaked shared-memory segments: {sorted(leaked)}"


def closed_port() -> int:
    """A port on 127.0.0.1 where, right now, nothing listens."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# ---------------------------------------------------------------------------
# Encode / decode in process

wire_dtypes = st.sampled_from(sorted(wire.WIRE_DTYPES))
wire_arrays = wire_dtypes.flatmap(lambda name: hnp.arrays(
    dtype=np.dtype(name),
    shape=hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=6),
    elements={"allow_nan": True} if np.dtype(name).kind == "f" else None))


def assert_same_array(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype.newbyteorder("=")
    assert got.shape == want.shape
    # Compare bytes so that NaNs and signed zeros count as equal to themselves.
    assert got.tobytes() == np.ascontiguousarray(want).astype(got.dtype).tobytes()


@settings(max_examples=150, deadline=None)
@given(array=wire_arrays, chunk_bytes=st.sampled_from([1, 3, 64, 1 << 20]))
def test_round_trip_in_process(array, chunk_bytes):
    chunks = list(wire.encode_chunks(array, key="k", chunk_bytes=chunk_bytes))
    assert chunks[0].key == "k" and chunks[0].HasField("meta")
    assert not any(c.HasField("meta") or c.key for c in chunks[1:])
    assert all(len(c.data) <= chunk_bytes for c in chunks)
    assert len(chunks) == max(1, -(-array.nbytes // chunk_bytes))
    decoded = wire.decode_chunks(chunks, expected_dtype=array.dtype,
                                 expected_shape=array.shape, expected_key="k")
    assert_same_array(decoded, array)
    assert decoded.flags.writeable and decoded.flags.c_contiguous


@settings(max_examples=60, deadline=None)
@given(array=wire_arrays, chunk_bytes=st.sampled_from([1, 5, 1 << 20]))
def test_frames_are_the_serialized_chunks(array, chunk_bytes):
    frames = list(wire.encode_frames(array, "k", chunk_bytes))
    assert frames == [c.SerializeToString()
                      for c in wire.encode_chunks(array, "k", chunk_bytes)]
    decoded = wire.decode_chunks(tensor_pb2.TensorChunk.FromString(f) for f in frames)
    assert_same_array(decoded, array)


def test_split_frame_accepts_fields_in_any_order_and_refuses_garbage():
    chunk = next(wire.encode_chunks(np.arange(3, dtype=np.int16), "k"))
    data_field = tensor_pb2.TensorChunk(data=chunk.data).SerializeToString()
    rest = tensor_pb2.TensorChunk(key="k", meta=chunk.meta).SerializeToString()
    header, data = wire.split_frame(data_field + rest)  # data first, header after
    assert header.key == "k" and bytes(data) == chunk.data
    assert wire.decode_chunks([data_field + rest]).tolist() == [0, 1, 2]
    for garbage in (b"\x22\x05ab", b"\xff", b"\x0f"):
        with pytest.raises(wire.WireError, match="malformed"):
            wire.split_frame(garbage)


def test_strided_and_big_endian_inputs_are_laid_out_for_the_wire():
    big_endian = np.arange(12, dtype=">i4").reshape(3, 4)
    strided = np.arange(24, dtype=np.float64).reshape(4, 6)[:, ::2].T
    for array in (big_endian, strided, np.float32(2.5), True):
        decoded = wire.decode_chunks(wire.encode_chunks(array, chunk_bytes=7))
        assert_same_array(decoded, np.asarray(array))


def test_partial_expected_shape_accepts_unknown_dimensions():
    chunks = list(wire.encode_chunks(np.zeros((2, 5), np.int8)))
    assert wire.decode_chunks(chunks, expected_shape=(None, 5)).shape == (2, 5)
    with pytest.raises(wire.WireError):
        wire.decode_chunks(chunks, expected_shape=(None, 4))


def test_rendezvous_key_round_trip():
    key = wire.rendezvous_key("/job:ps/task:0/device:CPU:0", "w:0",
                              "/job:worker/task:1/device:CPU:0", 12)
    assert wire.parse_rendezvous_key(key) == (
        "/job:ps/task:0/device:CPU:0", "w:0", "/job:worker/task:1/device:CPU:0", 12)
    with pytest.raises(ValueError):
        wire.rendezvous_key("a;b", "x", "c", 0)
    with pytest.raises(ValueError):
        wire.parse_rendezvous_key("a;x;c")


# ---------------------------------------------------------------------------
# What arrives is checked

KEY = "/cpu:0;x:0;/cpu:1;1"


def chunks_of(array, chunk_bytes=16):
    return list(wire.encode_chunks(array, key=KEY, chunk_bytes=chunk_bytes))


def mismatch(chunks, what, **expected):
    with pytest.raises(wire.WireError) as info:
        wire.decode_chunks(chunks, **expected)
    err = info.value
    assert isinstance(err, ValueError)
    assert err.what == what, str(err)
    assert KEY in str(err)
    return err


def test_dtype_mismatch_names_key_and_both_dtypes():
    err = mismatch(chunks_of(np.zeros(8, np.float32)), "dtype", expected_dtype="float64")
    assert (err.expected, err.got) == ("float64", "float32")


def test_shape_mismatch():
    err = mismatch(chunks_of(np.zeros((2, 4), np.float32)), "shape", expected_shape=(4, 2))
    assert err.got == (2, 4)
    mismatch(chunks_of(np.zeros((2, 4), np.float32)), "shape", expected_shape=(8,))


def test_truncated_stream_is_a_length_error():
    chunks = chunks_of(np.arange(10, dtype=np.int64))
    err = mismatch(chunks[:-1], "nbytes")
    assert err.expected == 80 and err.got < 80


def test_extra_bytes_are_a_length_error():
    chunks = chunks_of(np.arange(4, dtype=np.int64))
    chunks.append(tensor_pb2.TensorChunk(offset=32, data=b"\0" * 8))
    mismatch(chunks, "nbytes")


def test_chunks_out_of_order():
    chunks = chunks_of(np.arange(12, dtype=np.int32))
    chunks[1], chunks[2] = chunks[2], chunks[1]
    mismatch(chunks, "order")


def test_announced_size_inconsistent_with_shape():
    chunks = chunks_of(np.arange(4, dtype=np.int32))
    chunks[0].meta.nbytes = 12
    mismatch(chunks, "nbytes")


def test_unknown_dtype_on_arrival():
    chunks = chunks_of(np.arange(4, dtype=np.int32))
    chunks[0].meta.dtype = "object"
    mismatch(chunks, "dtype")


def test_missing_meta_and_second_meta():
    chunks = chunks_of(np.arange(8, dtype=np.int32))
    chunks[0].ClearField("meta")
    mismatch(chunks, "meta")
    chunks = chunks_of(np.arange(8, dtype=np.int32))
    chunks[1].meta.CopyFrom(chunks[0].meta)
    mismatch(chunks, "meta")


def test_wrong_key():
    mismatch(chunks_of(np.zeros(2)), "key", expected_key="other")


def test_empty_stream():
    with pytest.raises(wire.WireError, match="before the first chunk"):
        wire.decode_chunks([])


@pytest.mark.parametrize("value", [np.zeros(2, np.complex64), np.array(["a"]),
                                   np.zeros(2, np.uint16)])
def test_dtypes_off_the_whitelist_are_refused_when_encoding(value):
    with pytest.raises(wire.WireError, match="cannot cross the wire"):
        wire.encode_chunks(value)


# ---------------------------------------------------------------------------
# Through a real gRPC server on 127.0.0.1

def test_server_binds_loopback_on_an_ephemeral_port(store):
    assert store.host == "127.0.0.1" and store.port > 0


def test_streamed_round_trip_larger_than_4_mib(client, store):
    array = np.random.default_rng(0).standard_normal((3, 1 << 19)).astype(np.float32)
    assert array.nbytes > 4 << 20
    assert client.put("big", array) == array.nbytes
    got = client.get("big", expected_dtype=np.float32, expected_shape=array.shape,
                     remove=True)
    assert np.array_equal(got, array)
    assert "big" not in store.servicer.keys()


def test_unary_message_larger_than_4_mib(client):
    array = np.arange(5 << 18, dtype=np.int64)  # 10 MiB in one message
    assert client.put_unary("unary", array) == array.nbytes
    assert np.array_equal(client.get("unary", chunk_bytes=3 << 20, remove=True), array)


@settings(max_examples=20, deadline=None)
@given(array=wire_arrays)
def test_random_arrays_through_grpc(client, array):
    client.put("h", array, chunk_bytes=17)
    assert_same_array(client.get("h", chunk_bytes=13, remove=True), array)


def test_unknown_key_is_not_found(client):
    import grpc

    with pytest.raises(wire.RemoteError) as info:
        client.get("never-stored")
    assert info.value.code == grpc.StatusCode.NOT_FOUND


def test_expected_shape_checked_on_get(client):
    client.put("s", np.zeros((2, 3)))
    with pytest.raises(wire.WireError) as info:
        client.get("s", expected_shape=(3, 2))
    assert info.value.what == "shape"


def test_bad_stream_is_refused_by_server_with_invalid_argument(store, client):
    import grpc

    chunks = chunks_of(np.arange(10, dtype=np.int64))[:-1]  # truncated
    with pytest.raises(wire.RemoteError) as info:
        wire.call_rpc(client.stub.Put, iter(chunks), address=store.address,
                      method="TensorStore.Put", timeout=5)
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "nbytes" in info.value.details


def test_second_server_on_a_taken_port_is_an_error(store):
    with pytest.raises(wire.BindError):
        wire.create_server(port=store.port)


def test_ping(client):
    assert client.ping(b"hello") == b"hello"


# ---------------------------------------------------------------------------
# Deadlines: a dead peer is an error, never a hang

def test_nothing_listening_fails_fast():
    deadline = 3.0
    with wire.TensorStoreClient(f"127.0.0.1:{closed_port()}", deadline=deadline) as c:
        start = time.perf_counter()
        with pytest.raises(wire.PeerUnavailable) as info:
            c.put("k", np.zeros(4))
        elapsed = time.perf_counter() - start
    assert elapsed < deadline + 1.0
    assert "127.0.0.1" in str(info.value) and info.value.method == "TensorStore.Put"


def test_silent_peer_fails_at_the_deadline():
    # Accepts TCP connections but never speaks HTTP/2: only the deadline ends the call.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        port = sock.getsockname()[1]
        with wire.TensorStoreClient(f"127.0.0.1:{port}") as c:
            start = time.perf_counter()
            with pytest.raises(wire.DeadlineExceeded):
                c.get("k", timeout=1.0)
            elapsed = time.perf_counter() - start
    assert elapsed < 1.0 + 1.0


# ---------------------------------------------------------------------------
# Shared memory

@needs_shm
def test_shm_round_trip_in_process(no_leaked_segments):
    array = np.arange(24, dtype=np.float16).reshape(2, 3, 4)
    chunk = shm.export_array(array, key=KEY)
    assert chunk.WhichOneof("payload") == "shm" and chunk.shm.name in shm.list_segments()
    got = wire.decode_chunks([chunk], expected_dtype="float16", expected_shape=(2, 3, 4))
    assert_same_array(got, array)
    assert chunk.shm.name not in shm.list_segments()


@needs_shm
@pytest.mark.parametrize("array", [np.array(7, np.int64), np.zeros((0, 3), np.uint8)])
def test_shm_zero_d_and_empty(array, no_leaked_segments):
    assert_same_array(wire.decode_chunks([shm.export_array(array)]), array)


@needs_shm
def test_shm_view_lives_as_long_as_the_array(no_leaked_segments):
    array = np.arange(1000, dtype=np.int32)
    view = wire.decode_chunks([shm.export_array(array)], shm_copy=False)
    assert shm.list_segments() == sorted(set(shm.list_segments()))  # name already gone
    part = view[10:20]
    del view
    assert part.tolist() == list(range(10, 20))  # mapping still held by the slice
    part += 1
    assert part[0] == 11


@needs_shm
def test_rejected_shm_tensor_is_still_unlinked(no_leaked_segments):
    chunk = shm.export_array(np.zeros(4, np.float32), key=KEY)
    with pytest.raises(wire.WireError):
        wire.decode_chunks([chunk], expected_dtype="float64")
    with pytest.raises(shm.ShmError, match="does not exist"):
        wire.decode_chunks([chunk])  # taken once already


@needs_shm
def test_ledger_unlinks_unclaimed_segments(no_leaked_segments):
    ledger = shm.SegmentLedger()
    shm.export_array(np.ones(3), ledger=ledger)
    claimed = shm.export_array(np.ones(3), ledger=ledger)
    shm.import_array(claimed)
    assert ledger.unlink_all() == 1 and len(ledger) == 0


@needs_shm
def test_shm_between_two_processes(store_process, no_leaked_segments):
    array = np.random.default_rng(1).random((256, 1024)).astype(np.float32)
    with wire.TensorStoreClient(store_process.address) as c:
        assert c.put_shm("t", array) == array.nbytes            # we create, child unlinks
        assert np.array_equal(c.get("t", via_shm=True), array)  # child creates, we unlink
        view = c.get("t", via_shm=True, shm_copy=False, remove=True)
        assert np.array_equal(view, array)


@needs_shm
def test_failed_shm_put_unlinks_its_segment(no_leaked_segments):
    with wire.TensorStoreClient(f"127.0.0.1:{closed_port()}", deadline=2.0) as c:
        with pytest.raises(wire.PeerUnavailable):
            c.put_shm("k", np.ones(100))


@needs_shm
def test_no_resource_tracker_warnings_across_processes():
    # Both the parent and the spawned server write to this subprocess's stderr; in
    # 3.11 a segment created in one and unlinked in the other makes the resource
    # tracker print "leaked shared_memory objects" or a KeyError at exit.
    script = textwrap.dedent("""
        import numpy as np
        from runtime import wire
        if __name__ == "__main__":
            with wire.TensorStoreProcess() as proc, wire.TensorStoreClient(proc.address) as c:
                c.put_shm("a", np.ones(1000))
                c.get("a", via_shm=True)
                c.put("b", np.ones(10))
                c.get("b", via_shm=True, shm_copy=False)
            print("done")
    """)
    before = set(shm.list_segments())
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "done"
    assert "resource_tracker" not in result.stderr and "leaked" not in result.stderr, \
        result.stderr
    assert set(shm.list_segments()) - before == set()


# ---------------------------------------------------------------------------
# Local pushes over a Unix socket

def _local_address() -> str:
    return f"test-{time.monotonic_ns()}:0"


def test_local_push_delivers_frames_in_order_and_a_large_backlog_drains():
    import threading
    got, done = [], threading.Event()
    arrays = [np.full(n, i, np.float32) for i, n in enumerate([1, 1000, 300_000, 5, 70_000] * 4)]

    def deliver(frame):
        key, array = wire.decode_keyed((frame,), shm_copy=False)
        got.append((key, array.copy()))
        if len(got) == len(arrays):
            done.set()

    address = _local_address()
    listener = wire.LocalPushListener(address, deliver)
    sender = wire.LocalPushSender(address)
    try:
        # 300k floats overflow the socket buffer: the writer thread takes over, in order.
        for i, a in enumerate(arrays):
            sender.send(next(wire.encode_frames(a, f"k{i}", chunk_bytes=1 << 22)))
        assert done.wait(10)
        assert [k for k, _ in got] == [f"k{i}" for i in range(len(arrays))]
        assert all(np.array_equal(a, b) for a, (_, b) in zip(arrays, got))
    finally:
        sender.close()
        listener.close()


def test_local_push_to_a_closed_listener_is_a_connection_error():
    address = _local_address()
    with pytest.raises(OSError):
        wire.LocalPushSender(address)  # nobody listens
    listener = wire.LocalPushListener(address, lambda frame: None)
    sender = wire.LocalPushSender(address)
    listener.close()
    frame = next(wire.encode_frames(np.zeros(1000, np.float32), "k"))
    deadline = time.monotonic() + 10
    with pytest.raises(ConnectionError):
        while time.monotonic() < deadline:  # the first sends may still fill the buffer
            sender.send(frame)
            time.sleep(0.01)
    sender.close()


# ---------------------------------------------------------------------------
# Calls as messages on open streams (gRPC) and on local connections

def _echo(payload: bytes) -> bytes:
    if payload == b"slow":
        time.sleep(1.0)
    return payload


@pytest.fixture
def echo_server():
    import grpc

    def calls(requests, context):
        for request in requests:
            yield tensor_pb2.PingReply(payload=_echo(request.payload))

    server, port = wire.create_server(max_workers=16)
    handler = grpc.stream_stream_rpc_method_handler(
        calls, request_deserializer=tensor_pb2.PingRequest.FromString,
        response_serializer=tensor_pb2.PingReply.SerializeToString)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("test.Echo", {"Calls": handler}),))
    server.start()
    yield server, f"{wire.LOCALHOST}:{port}"
    server.stop(None)


def _stream_caller(address: str, channel=None) -> wire.StreamCaller:
    channel = channel or wire.create_channel(address)
    multicallable = channel.stream_stream(
        "/test.Echo/Calls", request_serializer=tensor_pb2.PingRequest.SerializeToString,
        response_deserializer=tensor_pb2.PingReply.FromString)
    return wire.StreamCaller(multicallable, address=address, method="Echo.Calls")


def test_stream_caller_answers_concurrent_calls_in_order_on_reused_streams(echo_server):
    from concurrent.futures import ThreadPoolExecutor
    _, address = echo_server
    caller = _stream_caller(address)
    try:
        assert caller.call(tensor_pb2.PingRequest(payload=b"a"), 5).payload == b"a"
        with ThreadPoolExecutor(8) as pool:
            got = list(pool.map(lambda i: caller.call(
                tensor_pb2.PingRequest(payload=str(i).encode()), 5).payload, range(64)))
        assert got == [str(i).encode() for i in range(64)]
        assert len(caller._open) <= 8 + 1  # streams are reused, not one per call
    finally:
        caller.close()


def test_stream_caller_deadline_and_dead_peer_are_errors_not_hangs(echo_server):
    server, address = echo_server
    caller = _stream_caller(address)
    try:
        start = time.monotonic()
        with pytest.raises(wire.DeadlineExceeded):
            caller.call(tensor_pb2.PingRequest(payload=b"slow"), 0.2)
        assert time.monotonic() - start < 0.9
        # The late answer is not taken for the next call's.
        assert caller.call(tensor_pb2.PingRequest(payload=b"b"), 5).payload == b"b"
        server.stop(None)
        with pytest.raises(wire.PeerUnavailable):
            caller.call(tensor_pb2.PingRequest(payload=b"c"), 5)
    finally:
        caller.close()
    (port,) = _free_port_list()
    nobody = _stream_caller(f"{wire.LOCALHOST}:{port}")
    start = time.monotonic()
    with pytest.raises(wire.PeerUnavailable):
        nobody.call(tensor_pb2.PingRequest(payload=b"x"), 5)
    assert time.monotonic() - start < 3
    nobody.close()
    with pytest.raises(wire.PeerUnavailable):  # closed (its peer was reset): an error
        nobody.call(tensor_pb2.PingRequest(payload=b"x"), 5)


def test_stream_caller_call_reads_its_answer_in_the_calling_thread(echo_server):
    import threading
    from concurrent.futures import ThreadPoolExecutor
    _, address = echo_server
    caller = _stream_caller(address)
    try:
        assert caller.call(tensor_pb2.PingRequest(payload=b"a"), 5).payload == b"a"
        assert not [t for t in threading.enumerate() if t.name.startswith("stream Echo")]
        # An earlier deadline than the one the deadline thread sleeps for still holds.
        with ThreadPoolExecutor(2) as pool:
            slow = pool.submit(caller.call, tensor_pb2.PingRequest(payload=b"slow"), 5)
            time.sleep(0.1)
            start = time.monotonic()
            with pytest.raises(wire.DeadlineExceeded):
                caller.call(tensor_pb2.PingRequest(payload=b"slow"), 0.2)
            assert time.monotonic() - start < 0.8
            assert slow.result(5).payload == b"slow"  # its own deadline not reached
    finally:
        caller.close()


def _free_port_list():
    from runtime.launcher import free_ports
    return free_ports(1)


def _local_caller(address: str, fallback_address: str | None = None) -> wire.LocalCaller:
    fallback = _stream_caller(fallback_address or address)
    return wire.LocalCaller(address, "Echo.Calls", tensor_pb2.PingReply.FromString, fallback)


def _echo_listener(address: str) -> wire.LocalCallListener:
    return wire.LocalCallListener(address, {"Echo.Calls": lambda data: tensor_pb2.PingReply(
        payload=_echo(tensor_pb2.PingRequest.FromString(data).payload)).SerializeToString()})


def test_local_caller_answers_calls_and_falls_back_to_grpc_without_a_listener(echo_server):
    from concurrent.futures import ThreadPoolExecutor
    _, grpc_address = echo_server
    address = _local_address()
    listener = _echo_listener(address)
    caller = _local_caller(address, grpc_address)
    try:
        big = bytes(range(256)) * 20_000  # 5 MB: more than a socket buffer
        assert caller.call(tensor_pb2.PingRequest(payload=big), 5).payload == big
        with ThreadPoolExecutor(8) as pool:
            got = list(pool.map(lambda i: caller.call(
                tensor_pb2.PingRequest(payload=str(i).encode()), 5).payload, range(64)))
        assert got == [str(i).encode() for i in range(64)]
        assert not caller.fallback._open  # all local
    finally:
        caller.close()
        listener.close()
    # Nothing of this host listens at that name: the call goes by gRPC.
    caller = _local_caller(_local_address(), grpc_address)
    try:
        assert caller.call(tensor_pb2.PingRequest(payload=b"g"), 5).payload == b"g"
        assert caller.fallback._open
    finally:
        caller.close()


def test_local_caller_without_a_listener_tries_again_only_after_a_while(echo_server,
                                                                      monkeypatch):
    _, grpc_address = echo_server
    from runtime import local_transport  # where LocalCaller reads it
    monkeypatch.setattr(local_transport, "LOCAL_RETRY_SECONDS", 0.3)
    address = _local_address()
    caller = _local_caller(address, grpc_address)
    listener = None
    try:
        assert caller.call(tensor_pb2.PingRequest(payload=b"a"), 5).payload == b"a"
        listener = _echo_listener(address)  # a local listener from now on
        got: list = []
        caller.call_async(tensor_pb2.PingRequest(payload=b"b"),
                          lambda r, e: got.append(r.payload), 5)
        assert caller.call(tensor_pb2.PingRequest(payload=b"c"), 5).payload == b"c"
        # Within the window: by gRPC, no local connection tried.
        assert not caller._blocking_idle and not caller._open
        time.sleep(0.4)
        assert caller.call(tensor_pb2.PingRequest(payload=b"d"), 5).payload == b"d"
        assert len(caller._blocking_idle) == 1  # found the listener, kept its connection
        deadline = time.monotonic() + 5
        while not got and time.monotonic() < deadline:
            time.sleep(0.01)
        assert got == [b"b"]
    finally:
        caller.close()
        if listener is not None:
            listener.close()


def test_local_caller_deadline_and_dead_peer_are_errors_not_hangs(echo_server):
    _, grpc_address = echo_server
    address = _local_address()
    listener = _echo_listener(address)
    caller = _local_caller(address, grpc_address)
    try:
        start = time.monotonic()
        with pytest.raises(wire.DeadlineExceeded):
            caller.call(tensor_pb2.PingRequest(payload=b"slow"), 0.2)
        assert time.monotonic() - start < 0.9
        assert caller.call(tensor_pb2.PingRequest(payload=b"b"), 5).payload == b"b"
        # The peer goes away in the middle of a call: an error at once.
        import threading
        threading.Timer(0.2, listener.close).start()
        start = time.monotonic()
        with pytest.raises(wire.PeerUnavailable):
            caller.call(tensor_pb2.PingRequest(payload=b"slow"), 5)
        assert time.monotonic() - start < 0.9
    finally:
        caller.close()
        listener.close()
    with pytest.raises(wire.PeerUnavailable):
        caller.call(tensor_pb2.PingRequest(payload=b"c"), 5)


@pytest.mark.skipif(not shm.shm_available(), reason="no /dev/shm")
def test_pooled_segment_is_used_in_place_and_reused_only_once_the_receiver_let_go():
    import gc

    from runtime.worker import SEGMENT_HEADER, SegmentMaps, SegmentPool, decode_pooled
    pool, maps = SegmentPool(), SegmentMaps()
    try:
        x = np.arange(300_000, dtype=np.float32)
        segment = pool.acquire(x.nbytes)
        np.frombuffer(segment.buf, np.float32, count=x.size, offset=SEGMENT_HEADER)[:] = x
        segment.buf[0] = 1  # handed over
        frame = tensor_pb2.TensorChunk(
            key="a;x:0;b;1", meta=wire.make_meta(x),
            shm=tensor_pb2.ShmRef(name=segment.name, offset=SEGMENT_HEADER, nbytes=x.nbytes))
        key, got = decode_pooled(frame.SerializeToString(), (), None, maps)
        pool.release(segment)
        assert key == "a;x:0;b;1" and np.array_equal(got, x)
        view = got[10:20]  # a view keeps the lease
        del got
        gc.collect()
        assert pool.acquire(x.nbytes) is not segment  # still held by the receiver
        del view
        gc.collect()
        assert segment.buf[0] == 0
        assert pool.acquire(x.nbytes) is segment
        with pytest.raises(wire.WireError, match="header"):
            frame.shm.offset = 0
            decode_pooled(frame.SerializeToString(), (), None, maps)
    finally:
        maps.close()
        pool.close()


@pytest.mark.skipif(not shm.shm_available(), reason="no /dev/shm")
def test_segment_maps_close_unused_mappings_beyond_their_cap():
    from runtime.worker import SEGMENT_HEADER, SegmentMaps, SegmentPool
    pool, maps = SegmentPool(keep=8), SegmentMaps(keep=2)
    try:
        segments = [pool.acquire((i + 1) << 20) for i in range(4)]
        held = maps.lease(segments[0].name, SEGMENT_HEADER, 16, "k")
        for s in segments[1:]:
            maps.lease(s.name, SEGMENT_HEADER, 16, "k")  # dropped at once
        assert len(maps._maps) <= 2 and segments[0].name in maps._maps  # in use: kept
        assert held.sum() == 0
    finally:
        del held
        maps.close()
        pool.close()


def test_local_caller_reaches_a_restarted_server_on_a_new_connection(echo_server):
    _, grpc_address = echo_server
    address = _local_address()
    listener = _echo_listener(address)
    caller = _local_caller(address, grpc_address)
    try:
        assert caller.call(tensor_pb2.PingRequest(payload=b"a"), 5).payload == b"a"
        listener.close()  # the server goes; its connection is left idle in the pool
        time.sleep(0.05)
        listener = _echo_listener(address)  # and comes back at the same address
        assert caller.call(tensor_pb2.PingRequest(payload=b"b"), 5).payload == b"b"
        got: list = []
        caller.call_async(tensor_pb2.PingRequest(payload=b"c"), lambda r, e: got.append((r, e)), 5)
        deadline = time.monotonic() + 5
        while not got and time.monotonic() < deadline:
            time.sleep(0.01)
        assert got and got[0][1] is None and got[0][0].payload == b"c"
        assert not caller.fallback._open  # all local
    finally:
        caller.close()
        listener.close()
