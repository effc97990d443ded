"""DispatchCalendar (RuntimeModel.dispatch_cores): bookings never overlap on more cores than
the host has, and each begins when asked for or when another ends, never earlier."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sim.pools import DispatchCalendar

requests = st.lists(st.tuples(st.floats(0, 5), st.floats(0, 3), st.floats(0.01, 2)),
                    min_size=1, max_size=40)


@settings(max_examples=200, deadline=None)
@given(cores=st.integers(1, 4), asks=requests)
def test_bookings_fit_the_cores_and_begin_at_a_gap(cores, asks):
    cal = DispatchCalendar(cores)
    now = 0.0
    booked = []
    for step, wait, work in asks:
        now += step  # the clock only moves on
        earliest = now + wait
        begin = cal.book(earliest, now, work)
        assert begin >= earliest
        booked.append((begin, begin + work))
        # At the moment it begins, fewer than `cores` other bookings hold a core, and
        # it begins when asked or when another booking ends (at the first gap of a core).
        others = booked[:-1]
        assert sum(1 for a, b in others if a <= begin < b) < cores
        assert begin == earliest or any(b == begin for _, b in others)
    # At no time do more than `cores` bookings overlap.
    for a, _ in booked:
        assert sum(1 for x, y in booked if x <= a < y) <= cores


@settings(max_examples=200, deadline=None)
@given(cores=st.integers(1, 4), held=st.integers(0, 4), start=st.floats(0, 2),
       length=st.floats(0.01, 3), earliest=st.floats(0, 6), work=st.floats(0.01, 1))
def test_a_booking_finds_the_cores_kernels_hold_taken(cores, held, start, length, earliest, work):
    # Kernels hold `held` cores over [start, start + length) (one each, as HostCores
    # grants them: never more than the host has).  A booking that would overlap them
    # begins at once if a core is left, else when they end.
    held = min(held, cores)
    cal = DispatchCalendar(cores)
    cal.occupy(start, start + length, held, now=0.0)
    begin = cal.book(earliest, now=0.0, work=work)
    overlaps = earliest < start + length and start < earliest + work
    if held == cores and overlaps:
        assert begin == start + length
    else:
        assert begin == earliest
