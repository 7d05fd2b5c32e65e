"""The untraced block after capture's window holds the run's pace, not the run-down of the
batches stored while the trace's write held the script (``steady.slowed_within`` and the
child's ``_untraced_step``), on step series shaped like the scenario family's
``threads_slowdev`` captures (sample_traces/scenarios/family, MEASUREMENTS.md)."""

from __future__ import annotations

import itertools

import pytest

from traceinspect.capture._child.state import _Untraced
from traceinspect.capture._child.steady import (
    STEADY_TREND,
    UNTRACED_RETRIES,
    _Steady,
    slowed_within,
)
from traceinspect.capture._child.window import _Capture


def _starts(step_ms: list[float], t0_ns: int = 0) -> list[int]:
    """Step start times (ns) from step durations (ms): one more start than durations."""
    return [t0_ns + s for s in [0, *itertools.accumulate(round(ms * 1e6) for ms in step_ms)]]


def test_a_drain_that_ends_inside_the_block_is_found() -> None:
    # threads_slowdev-2 (Python 3.11): thirds of 29.0, 26.7, 34.2 ms.
    walls = [29.0] * 22 + [26.7] * 22 + [34.2] * 22
    means = slowed_within(_starts(walls))
    assert means == pytest.approx([29.0, 26.7, 34.2])


def test_settled_blocks_and_a_slowing_within_the_trend_are_kept() -> None:
    assert slowed_within(_starts([20.0, 22.0] * 30)) is None
    # The last third slower than the fastest by just under STEADY_TREND: kept.
    edge = 25.0 * (STEADY_TREND - 0.01)
    assert slowed_within(_starts([25.0] * 40 + [edge] * 20)) is None
    # A block that got faster (the pipeline caught up): not a drain.
    assert slowed_within(_starts([35.0] * 30 + [25.0] * 30)) is None


def test_a_recurring_stall_is_cut_in_whole_periods() -> None:
    # slow_ckpt-3: a 250 ms checkpoint every 40 steps, the block two periods from a
    # checkpoint: by thirds 23.2, 33.2, 37.0 ms, by periods 31.1 and 31.0.
    period = [24.5] * 39 + [270.0]
    walls = period * 2
    thirds = slowed_within(_starts(walls))
    assert thirds is not None and thirds[-1] / min(thirds[:-1]) > STEADY_TREND
    assert slowed_within(_starts(walls), period=40) is None
    # A checkpoint late in the second period only, whole periods: found.
    assert slowed_within(_starts(period + [24.5] * 20 + [60.0] * 20), period=40) is not None
    # One period: nothing to set against.
    assert slowed_within(_starts(period), period=40) is None
    assert slowed_within(_starts([30.0])) is None


def _capture_timing(min_steps: int) -> _Capture:
    """A capture whose untraced block after the window is about to be timed, from step 100."""
    cap = _Capture({"max_wait_s": 120, "window_max_s": 60, "time_after": True})
    steady = _Steady(8, trend_above=1.0)
    cap.untraced = _Untraced(resumed_ns=0, min_steps=min_steps, min_s=0.0, steady=steady)
    return cap


def _feed(cap: _Capture, walls: list[float], first: int = 100) -> None:
    """Steps ``first``, ``first + 1`` ... of the given walls; the steady rule over the steps
    after the write already agrees (the block begins at ``first``)."""
    assert cap.untraced is not None
    cap.untraced.steady.is_steady = lambda: True  # type: ignore[method-assign]
    for k, start in enumerate(_starts(walls, t0_ns=1_000_000_000)):
        if cap.untraced.last is not None:
            break
        cap._untraced_step(first + k, start)


def test_capture_times_the_block_again_once_the_drain_ended_in_it() -> None:
    # 40 stored batches at 26 ms, then the run's 34.5 ms: the first block (100-159) holds
    # the drain's end; the block timed again (160-219) holds the run's pace only.
    cap = _capture_timing(min_steps=60)
    _feed(cap, [26.0] * 40 + [34.5] * 200)
    u = cap.untraced
    assert u is not None
    assert (u.first, u.last, u.retries) == (160, 219, 1)
    mean_ms = (u.starts_ns[-1] - u.starts_ns[0]) / (len(u.starts_ns) - 1) / 1e6
    assert mean_ms == pytest.approx(34.5)
    assert cap.notes == [
        "the untraced steps 100-159 after the window slowed as they ran (26.0, 26.0, 34.5 ms "
        "a step, in order): timed again from step 160"
    ]


def test_a_block_with_no_drain_is_timed_once() -> None:
    cap = _capture_timing(min_steps=60)
    _feed(cap, [34.0, 35.0] * 100)
    u = cap.untraced
    assert u is not None
    assert (u.first, u.last, u.retries) == (100, 159, 0)
    assert cap.notes == []


def test_a_loop_that_keeps_slowing_is_timed_again_a_bounded_number_of_times() -> None:
    # Each step 1% slower than the last: every block slows within itself.
    cap = _capture_timing(min_steps=30)
    _feed(cap, [10.0 * 1.01**k for k in range(400)])
    u = cap.untraced
    assert u is not None
    assert u.retries == UNTRACED_RETRIES
    assert (u.first, u.last) == (100 + 30 * UNTRACED_RETRIES, 129 + 30 * UNTRACED_RETRIES)
    assert len(cap.notes) == UNTRACED_RETRIES
