"""The untraced block after capture's window holds the run's pace, not the run-down of the
batches stored while the trace's write held the script (``steady.slowed_within`` and the
child's ``_untraced_step``), on step series shaped like the scenario family's
``threads_slowdev`` captures (sample_traces/scenarios/family, MEASUREMENTS.md)."""

from __future__ import annotations

import itertools

import pytest

from traceinspect.capture._child.report import _untraced_after
from traceinspect.capture._child.state import _Untraced
from traceinspect.capture._child.steady import (
    STEADY_TREND,
    UNTRACED_PARTS,
    UNTRACED_RETRIES,
    _Steady,
    look_ahead_steps,
    slowed_within,
)
from traceinspect.capture._child.window import _Capture, _Source


def _starts(step_ms: list[float], t0_ns: int = 0) -> list[int]:
    """Step start times (ns) from step durations (ms): one more start than durations."""
    return [t0_ns + s for s in [0, *itertools.accumulate(round(ms * 1e6) for ms in step_ms)]]


def test_a_drain_that_ends_inside_the_block_is_found() -> None:
    # Parts of threads_slowdev-1 (Python 3.11, session 12): 26.2 ms, ..., 35.7 ms.
    walls = [26.2] * 16 + [28.0] * 16 + [31.9] * 16 + [35.7] * 16
    means = slowed_within(_starts(walls), block_steps=64)
    assert means == pytest.approx([26.2, 28.0, 31.9, 35.7])


def test_a_drain_that_ends_in_the_block_s_last_steps_is_found_by_the_look_ahead() -> None:
    # threads_slowdev-3 (3.11, session 13): 71 steps whose parts read 27.4, 28.1, 26.1,
    # 31.9 ms, the drain over 11 steps before the block's end, then the run's 34.5 ms.
    block = [27.4] * 18 + [28.1] * 18 + [26.1] * 18 + [26.1] * 6 + [34.5] * 11
    ahead = look_ahead_steps(len(block))
    assert ahead == round(len(block) / UNTRACED_PARTS)
    means = slowed_within(_starts(block + [34.5] * ahead), block_steps=len(block))
    assert means is not None and means[-1] == pytest.approx(34.5)
    # Its last part alone, 11 of 17 steps at the run's pace, moves it by under the trend.
    assert means[-2] / min(means[:-2]) < STEADY_TREND * 1.01


def test_settled_blocks_and_a_slowing_within_the_trend_are_kept() -> None:
    assert slowed_within(_starts([20.0, 22.0] * 40), block_steps=64) is None
    # The look-ahead slower than the fastest part by just under STEADY_TREND: kept.
    edge = 25.0 * (STEADY_TREND - 0.01)
    assert slowed_within(_starts([25.0] * 64 + [edge] * 16), block_steps=64) is None
    # A block that got faster (the pipeline caught up): not a drain.
    assert slowed_within(_starts([35.0] * 40 + [25.0] * 40), block_steps=64) is None


def test_a_recurring_stall_is_cut_in_whole_periods() -> None:
    # slow_ckpt-3 (session 12): a 250 ms checkpoint every 40 steps, the block two periods
    # from a checkpoint: by quarters the last holds the checkpoint, by periods 31.1 and 31.0.
    period = [24.5] * 39 + [270.0]
    assert look_ahead_steps(80, period=40) == 40
    walls = period * 3
    assert slowed_within(_starts(walls), block_steps=80) is not None
    assert slowed_within(_starts(walls), block_steps=80, period=40) is None
    # A look-ahead period whose checkpoint took 3x as long: found.
    slow = [24.5] * 39 + [810.0]
    assert slowed_within(_starts(period * 2 + slow), block_steps=80, period=40) is not None
    # One period and no look-ahead: nothing to set against.
    assert slowed_within(_starts(period), block_steps=40, period=40) is None
    assert slowed_within(_starts([30.0]), block_steps=1) is None


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


def _mean_ms(u: _Untraced) -> float:
    return (u.starts_ns[-1] - u.starts_ns[0]) / (len(u.starts_ns) - 1) / 1e6


def test_capture_times_the_block_again_once_the_drain_ended_in_it() -> None:
    # 40 stored batches at 26 ms, then the run's 34.5 ms: the first block (100-159) and its
    # look-ahead (160-174) hold the drain's end; the block timed again from 175 (60 steps
    # and 15 of look-ahead) holds the run's pace only.
    cap = _capture_timing(min_steps=60)
    _feed(cap, [26.0] * 40 + [34.5] * 200)
    u = cap.untraced
    assert u is not None
    assert (u.first, u.last, u.retries) == (175, 249, 1)
    assert _mean_ms(u) == pytest.approx(34.5)
    assert cap.notes == [
        "the untraced steps 100-174 after the window slowed as they ran (26.0, 26.0, 28.8, "
        "34.5, 34.5 ms a step, in order, the last 15 steps after the block): timed again "
        "from step 175"
    ]


def test_a_block_with_no_drain_is_timed_once_with_its_look_ahead() -> None:
    cap = _capture_timing(min_steps=60)
    _feed(cap, [34.0, 35.0] * 100)
    u = cap.untraced
    assert u is not None
    assert (u.first, u.last, u.retries) == (100, 174, 0)
    assert cap.notes == []


def test_a_loop_that_keeps_slowing_is_timed_again_a_bounded_number_of_times() -> None:
    # Each step 1% slower than the last: every block slows within itself.
    cap = _capture_timing(min_steps=32)
    _feed(cap, [10.0 * 1.01**k for k in range(600)])
    u = cap.untraced
    assert u is not None
    assert u.retries == UNTRACED_RETRIES
    span = 32 + look_ahead_steps(32)
    assert (u.first, u.last) == (100 + span * UNTRACED_RETRIES, 99 + span * (1 + UNTRACED_RETRIES))
    assert len(cap.notes) == UNTRACED_RETRIES


def test_a_block_whose_look_ahead_the_script_s_end_cut_short_is_the_block() -> None:
    cap = _capture_timing(min_steps=60)
    _feed(cap, [34.0, 35.0] * 35)  # steps 100-169: the block and 10 of its 15 steps ahead
    cap.chosen = _Source("grain", "it", "batches")
    cap.chosen.count = 170
    assert _untraced_after(cap) == {"first_step": 100, "last_step": 159, "complete": True}
    # Ended inside the block: up to the last step whose successor began, incomplete.
    cap = _capture_timing(min_steps=60)
    _feed(cap, [34.0, 35.0] * 20)
    cap.chosen = _Source("grain", "it", "batches")
    cap.chosen.count = 140
    assert _untraced_after(cap) == {"first_step": 100, "last_step": 138, "complete": False}
