"""The sender's pool of shared-memory segments never unlinks one a receiver still holds."""

from __future__ import annotations

from runtime.shm import list_segments
from runtime.worker import POOL_PREFIX, SegmentPool


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
