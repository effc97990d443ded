"""Shared-memory segments: the sender's pool never unlinks one a receiver still holds,
and a killed server's are reaped. Receive buffers are reused once nothing refers to them."""

from __future__ import annotations

import gc
import sys

import pytest

import runtime
from runtime.shm import SHM_DIR, list_segments, shm_available
import numpy as np

from runtime.worker import POOL_PREFIX, SEGMENT_HEADER, BufferPool, SegmentPool


def test_segments_in_flight_outlive_the_pool_limit_and_cleared_ones_are_reused():
    pool = SegmentPool(keep=1)
    try:
        held = [pool.acquire(100) for _ in range(3)]
        for segment in held:
            segment.buf[0] = 1  # handed to a receiver that has not let go yet
            pool.release(segment)
        names = {s.name for s in held}
        # Over the limit, but every one is still held: none may be unlinked.
        assert names <= set(list_segments(POOL_PREFIX))
        held[1].buf[0] = 0  # its receiver let go: the next push reuses it
        assert pool.acquire(100) is held[1]
        held[1].buf[0] = 1
        pool.release(held[1])
        held[0].buf[0] = held[2].buf[0] = 0  # two let go
        again = pool.acquire(100)  # the first of them is reused ...
        assert again is held[0]
        again.buf[0] = 1
        pool.release(again)  # ... and over the limit the other cleared one is unlinked
        assert names & set(list_segments(POOL_PREFIX)) == {held[0].name, held[1].name}
    finally:
        pool.close()
    assert not names & set(list_segments(POOL_PREFIX))


@pytest.mark.skipif(not shm_available(), reason="no /dev/shm here")
def test_a_segment_an_array_still_views_is_unlinked_at_close_and_unmapped_after_it(
        monkeypatch):
    """Closing the pool never needs every array over its segments gone (some may live on
    in frames a reference cycle keeps until the garbage collector runs, issue 4): the
    name goes at once, the memory when the last array does, and nothing raises, then or
    later (it was SharedMemory.__del__'s "BufferError: cannot close exported pointers
    exist")."""
    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    pool = SegmentPool()
    segment = pool.acquire(100)
    name = segment.name
    view = np.frombuffer(segment.buf, np.uint8, count=100, offset=SEGMENT_HEADER)
    view[:] = 7
    pool.close()
    del segment
    gc.collect()
    assert name not in list_segments(POOL_PREFIX)
    assert (view == 7).all()  # still mapped for the array that uses it
    view[:] = 8
    del view
    gc.collect()
    assert [u.exc_value for u in unraisable] == []


def test_receive_buffers_are_reused_only_once_every_view_is_gone():
    pool = BufferPool(keep=2)

    def buffer_of(lent):  # the pool's buffer behind a lent array
        return lent.base.obj

    first = pool.acquire(64)
    first[:] = 7
    first_buffer = buffer_of(first)
    view = first.view(np.float32).reshape(4, 4)[1:2]  # what a Slice op would keep
    del first
    second = pool.acquire(64)
    assert buffer_of(second) is not first_buffer  # the view still holds the first
    second[:] = 1
    assert (view.view(np.uint8) == 7).all()
    second_buffer = buffer_of(second)
    del view, second
    # Both came back: the next two are those two buffers, no third one is made.
    again = [pool.acquire(64) for _ in range(2)]
    assert {id(buffer_of(a)) for a in again} == {id(first_buffer), id(second_buffer)}
    assert all(a.flags.writeable and a.nbytes == 64 for a in again)


@pytest.mark.skipif(not shm_available(), reason="no /dev/shm here")
def test_a_killed_servers_segments_are_reaped():
    with runtime.LocalCluster({"worker": 1}) as cluster:
        pid = cluster.processes[("worker", 0)].pid
        # What a server leaves behind when SIGKILLed with a push in flight.
        left = f"{POOL_PREFIX}{pid}_deadbeef"
        (SHM_DIR / left).write_bytes(bytes(64))
        cluster.kill("worker", 0)
        assert left not in list_segments(POOL_PREFIX)
