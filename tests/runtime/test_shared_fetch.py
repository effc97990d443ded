"""Large fetched values to a client on the master's host come back through the master's
pooled shared-memory segments (RunStepRequest.shared_fetches, honoured on a local
connection only); the client copies them out and hands each segment back."""

from __future__ import annotations

import gc
import os
import sys

import numpy as np
import pytest

import core as tf
from runtime import remote
from runtime.graph_codec import CodecError
from runtime.launcher import free_ports
from runtime.protos import master_pb2, tensor_pb2
from runtime.server import Server
from runtime.session import Session
from runtime.shm import list_segments, shm_available
from runtime.worker import POOL_PREFIX, SEGMENT_HEADER, SegmentMaps, SegmentPool

pytestmark = pytest.mark.skipif(not shm_available(), reason="no /dev/shm on this host")

ROWS = 512  # 512 x 512 float32: 1 MiB, above the servers' shared-memory threshold


def _server(**kwargs) -> Server:
    (port,) = free_ports(1)
    return Server({"worker": [f"127.0.0.1:{port}"]}, "worker", 0, **kwargs)


def _graph():
    g = tf.Graph()
    with g.as_default():
        v = tf.Variable(np.zeros((ROWS, ROWS), np.float32), name="v")
        big = tf.relu(v + 1.0, name="big")
        small = tf.reduce_sum(big, name="small")
    return g, v, big, small


def _spy_take_shared(monkeypatch) -> list:
    taken = []
    take = remote.take_shared
    monkeypatch.setattr(remote, "take_shared",
                        lambda maps, value: (taken.append(value.name), take(maps, value))[1])
    return taken


def _my_pool_segments() -> list[str]:
    return list_segments(f"{POOL_PREFIX}{os.getpid()}_")


def test_a_large_fetch_comes_through_a_reused_segment_and_is_the_callers_copy(monkeypatch):
    taken = _spy_take_shared(monkeypatch)
    server = _server()
    try:
        g, v, big, small = _graph()
        with Session(server.target, graph=g) as sess:
            sess.run(v.initializer)
            first, total = sess.run([big, small])
            assert taken == ["big:0"]  # the small one came inline
            np.testing.assert_array_equal(first, np.ones((ROWS, ROWS), np.float32))
            assert total == ROWS * ROWS
            assert first.flags.writeable and first.flags.owndata
            sess.run(v.assign(np.full((ROWS, ROWS), 2.0, np.float32)).op)
            for _ in range(5):
                later = sess.run(big)
                np.testing.assert_array_equal(later, np.full((ROWS, ROWS), 3.0, np.float32))
            # The first result is a copy: later steps reusing the segment left it alone.
            np.testing.assert_array_equal(first, np.ones((ROWS, ROWS), np.float32))
            # Each step handed the segment back, so the master kept reusing one.
            assert taken.count("big:0") == 6
            assert len(_my_pool_segments()) == 1
    finally:
        server.stop()
    assert _my_pool_segments() == []


def _relu_product(seed: int):
    """``(graph, w, out, x_val, w_val)``: a graph whose ``out`` is relu(x @ w), ``x`` a
    constant of ``ROWS x 64`` and ``w`` a variable of ``64 x ROWS`` (its product goes
    through the master's segment when fetched)."""
    rng = np.random.default_rng(seed)
    x_val = rng.standard_normal((ROWS, 64)).astype(np.float32)
    w_val = rng.standard_normal((64, ROWS)).astype(np.float32)
    g = tf.Graph()
    with g.as_default():
        w = tf.Variable(w_val, name="w")
        out = tf.relu(tf.matmul(tf.constant(x_val), w), name="out")
    return g, w, out, x_val, w_val


def test_a_fetched_product_is_written_straight_into_the_segment(monkeypatch):
    """The master offers its segment to the kernel that makes a fetched tensor (here the
    MatMul a fetched Relu is folded into): no copy into the segment, and the client's
    value is still its own copy."""
    from runtime.worker import WorkerService
    staged = []
    stage = WorkerService.stage_shared
    monkeypatch.setattr(WorkerService, "stage_shared",
                        lambda self, arr, segment=None: (staged.append(arr.shape),
                                                         stage(self, arr, segment))[1])
    taken = _spy_take_shared(monkeypatch)
    server = _server()
    try:
        g, w, out, x_val, w_val = _relu_product(5)
        with g.as_default():
            total = tf.reduce_sum(out, name="total")
        with Session(server.target, graph=g) as sess:
            sess.run(w.initializer)
            first = sess.run(out)
            np.testing.assert_allclose(first, np.maximum(x_val @ w_val, 0), rtol=1e-5,
                                       atol=1e-4)
            assert first.flags.writeable and first.flags.owndata
            sess.run(w.assign(-w_val).op)
            for _ in range(3):
                later, later_total = sess.run([out, total])
                np.testing.assert_allclose(later, np.maximum(-(x_val @ w_val), 0),
                                           rtol=1e-5, atol=1e-4)
                assert later_total == pytest.approx(later.sum(), rel=1e-4)
            np.testing.assert_allclose(first, np.maximum(x_val @ w_val, 0), rtol=1e-5,
                                       atol=1e-4)
            assert taken == ["out:0"] * 4
            assert (ROWS, ROWS) not in staged  # written there by the MatMul, not copied
            assert len(_my_pool_segments()) == 1
    finally:
        server.stop()
    assert _my_pool_segments() == []


def test_a_fetched_product_still_referenced_after_the_step_lets_the_server_stop_cleanly(
        monkeypatch):
    """Issue 4: the kernel that wrote a fetched product into the master's segment can
    leave frames behind that still refer to it after the step (numba, compiling a new
    signature in the middle of a step, keeps the frames under it in a reference cycle
    until the garbage collector runs: seen on fresh clones, whose numba cache is cold).
    Stopping the server before that collection must not fail to close the segment
    ("BufferError: cannot close exported pointers exist" from SharedMemory.__del__), nor
    leave it in /dev/shm; the mapping goes when its last array does."""
    from runtime.kernels import registry
    matmul, dtypes = registry._REGISTRY[("MatMul", "CPU")]

    def matmul_whose_frame_outlives_the_step(ctx, inputs, attrs):
        outs = matmul(ctx, inputs, attrs)
        try:
            raise RuntimeError("handled inside the kernel, as numba's typing errors are")
        except RuntimeError as err:
            caught = err  # noqa: F841 - its traceback holds this frame, which holds it
        return outs

    monkeypatch.setitem(registry._REGISTRY, ("MatMul", "CPU"),
                        (matmul_whose_frame_outlives_the_step, dtypes))
    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    g, w, out, x_val, w_val = _relu_product(7)
    gc.collect()
    gc.disable()  # the cycle stays until the server has stopped, as it did on CI
    try:
        server = _server()
        try:
            with Session(server.target, graph=g) as sess:
                sess.run(w.initializer)
                value = sess.run(out)
                assert len(_my_pool_segments()) == 1  # it came through the segment
        finally:
            server.stop()
        assert _my_pool_segments() == []
    finally:
        gc.enable()
    gc.collect()
    assert [u.exc_value for u in unraisable] == []
    np.testing.assert_allclose(value, np.maximum(x_val @ w_val, 0), rtol=1e-5, atol=1e-4)


def test_the_segment_offered_to_a_failed_step_is_never_offered_again():
    """A failed step returns while ops it started may still run (a MatMul writing the
    fetched product into the segment offered for it): that segment is let go, not put
    back in the pool where the next step would take it."""
    from runtime.errors import FailedPrecondition
    server = _server()
    try:
        g, w, out, x_val, w_val = _relu_product(9)
        with g.as_default():
            never = tf.Variable(np.zeros(3, np.float32), name="never")  # not initialized
        expected = np.maximum(x_val @ w_val, 0)
        with Session(server.target, graph=g) as sess:
            sess.run(w.initializer)
            np.testing.assert_allclose(sess.run(out), expected, rtol=1e-5, atol=1e-4)
            (offered,) = _my_pool_segments()
            with pytest.raises(FailedPrecondition, match="never"):
                sess.run([out, never])
            assert offered not in _my_pool_segments()
            np.testing.assert_allclose(sess.run(out), expected, rtol=1e-5, atol=1e-4)
            assert len(_my_pool_segments()) == 1
    finally:
        server.stop()
    assert _my_pool_segments() == []


@pytest.mark.parametrize("options", [{"local_sockets": False}, {"shm_min_bytes": None}],
                         ids=["by gRPC only", "a server without shared memory"])
def test_large_fetches_come_inline_without_a_local_connection_or_shared_memory(
        monkeypatch, options):
    taken = _spy_take_shared(monkeypatch)
    server = _server(**options)
    try:
        g, v, big, _ = _graph()
        with Session(server.target, graph=g) as sess:
            sess.run(v.initializer)
            np.testing.assert_array_equal(sess.run(big), np.ones((ROWS, ROWS), np.float32))
    finally:
        server.stop()
    assert taken == []


def test_a_failed_answer_frees_the_segments_it_had_filled():
    server = _server()
    try:
        response = master_pb2.RunStepResponse()
        values = {"big:0": np.ones(1 << 18, np.float32), "bad:0": np.array(["text"])}
        with pytest.raises(CodecError):
            server.master._add_values(response, values, shared=True)
        (name,) = _my_pool_segments()
        with open(f"/dev/shm/{name}", "rb") as f:
            assert f.read(1) == b"\0"  # not held for a client that will never read it
    finally:
        server.stop()


def _shared_tensor(segment, arr: np.ndarray, **meta) -> master_pb2.SharedTensor:
    fields = {"dtype": "float32", "shape": arr.shape, "nbytes": arr.nbytes, **meta}
    return master_pb2.SharedTensor(
        name="x:0", meta=tensor_pb2.TensorMeta(**fields),
        shm=tensor_pb2.ShmRef(name=segment.name, offset=SEGMENT_HEADER, nbytes=arr.nbytes))


def test_take_shared_checks_the_value_and_always_hands_the_segment_back():
    pool, maps = SegmentPool(), SegmentMaps()
    arr = np.arange(12, dtype=np.float32).reshape(3, 4)
    try:
        segment = pool.acquire(arr.nbytes)
        segment.buf[SEGMENT_HEADER:SEGMENT_HEADER + arr.nbytes] = arr.tobytes()
        segment.buf[0] = 1
        got = remote.take_shared(maps, _shared_tensor(segment, arr))
        np.testing.assert_array_equal(got, arr)
        assert segment.buf[0] == 0
        segment.buf[0] = 1
        with pytest.raises(CodecError, match="nbytes"):
            remote.take_shared(maps, _shared_tensor(segment, arr, shape=(4, 4)))
        assert segment.buf[0] == 0
    finally:
        maps.close()
        pool.close()
