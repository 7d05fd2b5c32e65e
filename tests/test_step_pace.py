"""The pace of a run read back from a sidecar's steps: the time per completed step from the
completion stamps, and the slower of it and the host's step starts (sidecar.step_pace)."""

from __future__ import annotations

import pytest

from traceinspect.sidecar import HostStep, completed_step_ms, step_pace


def _steps(done: list[int | None]) -> list[HostStep]:
    return [HostStep(i, None, i * 1_000_000, 1.0, i >= 2, d) for i, d in enumerate(done)]


def test_time_per_completed_step_spans_from_the_step_before_the_first() -> None:
    # Steps 2-5 traced; stamps of steps 1..5 every 10 ms: 4 steps in 40 ms.
    steps = _steps([None, 100_000_000, 110_000_000, 120_000_000, 130_000_000, 140_000_000])
    assert completed_step_ms(steps, lambda s: s.traced) == pytest.approx((10.0, 4))
    # Without the stamp before the window: from the first traced one, one step fewer.
    steps = _steps([None, None, 110_000_000, 120_000_000, None, 150_000_000])
    assert completed_step_ms(steps, lambda s: s.traced) == pytest.approx((40 / 3, 3))
    assert completed_step_ms(_steps([None, None, 1, None]), lambda s: s.traced) is None


def _walled(walls: list[float], done_ms: list[float | None]) -> list[HostStep]:
    return [
        HostStep(i, None, i * 1_000_000, w, True, None if d is None else int(d * 1e6))
        for i, (w, d) in enumerate(zip(walls, done_ms, strict=True))
    ]


def test_the_pace_is_the_slower_of_step_starts_and_completions() -> None:
    # The host started a step every 5 ms while the device completed one every 10, 10, 16:
    # the host ran ahead into the queue; the pace is the completions' (mean 12, median 10).
    steps = _walled([5.0, 5.0, 5.0, 5.0], [100.0, 110.0, 120.0, 136.0])
    pace = step_pace(steps, lambda s: True)
    assert pace is not None
    assert (pace.mean_ms, pace.median_ms, pace.count, pace.how) == pytest.approx(
        (12.0, 10.0, 3, "completed")
    )
    # The host's starts slower than the completions (the device ran down a queue): the host's.
    steps = _walled([20.0, 30.0, 20.0, 20.0], [100.0, 110.0, 120.0, 130.0])
    pace = step_pace(steps, lambda s: True)
    assert pace is not None and (pace.mean_ms, pace.median_ms, pace.how) == (22.5, 20.0, "host")
    # Fewer completed steps than asked for: the host's, as if unstamped.
    pace = step_pace(steps, lambda s: True, min_completed=4)
    assert pace is not None and (pace.mean_ms, pace.count, pace.how) == (22.5, 4, "host only")
    assert step_pace(steps, lambda s: False) is None
