"""Linking each step to the executions it dispatched (``analysis.executions``)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from traceinspect.analysis.executions import _offset


def _simulate(
    host_gaps: list[float], work: list[float], queued: int, idle_at: int
) -> tuple[np.ndarray, np.ndarray]:
    """A device running one program in dispatch order. ``queued`` executions dispatched
    before the trace are still to run when it begins; the host waits ``idle_at`` so long
    before one dispatch that the device runs dry once."""
    dispatch = np.cumsum(host_gaps)
    n = len(dispatch)
    dispatch[idle_at:] += 1e6  # the host stalls: the device empties its queue
    starts = []
    free = 0.0
    for k in range(queued + n):
        ready = 0.0 if k < queued else dispatch[k - queued]
        start = max(free, ready)
        starts.append(start)
        free = start + work[k % len(work)]
    return dispatch, np.array(starts)


@given(
    host_gaps=st.lists(st.floats(min_value=0.1, max_value=50.0), min_size=5, max_size=40),
    work=st.lists(st.floats(min_value=1.0, max_value=30.0), min_size=1, max_size=5),
    queued=st.integers(min_value=0, max_value=40),
    data=st.data(),
)
def test_the_offset_is_the_queue_at_trace_start_once_the_device_idled(
    host_gaps: list[float], work: list[float], queued: int, data: st.DataObject
) -> None:
    idle_at = data.draw(st.integers(min_value=0, max_value=len(host_gaps) - 1))
    dispatch, starts = _simulate(host_gaps, work, queued, idle_at)
    assert _offset(dispatch, starts) == queued


def test_a_device_that_never_idles_links_causally() -> None:
    # The host dispatches every 1 ms, the device needs 10: no anchor, but no execution is
    # ever linked to a dispatch that came after it started.
    dispatch = np.arange(20, dtype=float)
    starts = 5.0 + 10.0 * np.arange(25)
    q = _offset(dispatch, starts)
    assert q == 0
    assert np.all(starts[q : q + 20] >= dispatch)


def test_no_offset_when_executions_precede_every_dispatch() -> None:
    assert _offset(np.array([100.0, 200.0]), np.array([1.0, 2.0, 3.0])) == 3
    assert _offset(np.array([100.0]), np.array([])) == 0
