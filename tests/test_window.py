"""The steady-state window rule of ``traceinspect capture`` (``_child.steady._Steady``), on step
series shaped like the scenario family's (sample_traces/scenarios/family)."""

from __future__ import annotations

import itertools
import math

from hypothesis import given
from hypothesis import strategies as st

from traceinspect.capture._child.measured import _Snapshot
from traceinspect.capture._child.steady import (
    STEADY_BLOCK_S,
    STEADY_BLOCKS,
    STEADY_TOLERANCE,
    _Steady,
)
from traceinspect.capture._child.window import _Capture


def _starts(step_ms: list[float]) -> list[int]:
    """Step start times (ns) from step durations (ms); step 0 starts at 0."""
    return [0, *itertools.accumulate(round(ms * 1e6) for ms in step_ms)]


def _first_steady(step_ms: list[float], block_steps: int = 8) -> int | None:
    """The step at which the rule first says steady (fed one step at a time, as capture does)."""
    starts = _starts(step_ms)
    steady = _Steady(block_steps)
    for n in range(1, len(starts) + 1):
        steady.add(starts[:n])
        if steady.is_steady():
            return n - 1
    return None


def test_a_filling_queue_is_not_steady() -> None:
    # Compile, then 30 dispatches of 0.2 ms while the CPU client's queue fills, then 30 ms.
    series = [2000.0] + [0.2] * 30 + [30.0] * 100
    first = _first_steady(series)
    assert first is not None
    # The block holding the fill phase (0.2 ms steps, then the first 30 ms ones) averages far
    # below the next; steady only once STEADY_BLOCKS blocks of settled steps agree.
    settled_blocks_span = STEADY_BLOCKS * STEADY_BLOCK_S * 1000 / 30.0
    assert first >= 31 + settled_blocks_span - 1
    assert first <= 31 + settled_blocks_span + 3 * 17 + 1


def test_a_trend_is_not_steady() -> None:
    # Step times growing 2% a step never settle within the tolerance.
    series = [10.0 * 1.02**i for i in range(150)]
    assert _first_steady(series) is None


def test_bursts_are_steady_when_blocks_hold_whole_bursts() -> None:
    # Two workers alternate a 0.1 ms step and a 60 ms one: blocks of >= 8 steps average them.
    series = [1500.0] + [0.1, 60.0] * 60
    first = _first_steady(series, block_steps=4)
    assert first is not None and first < 60


def test_describe_names_the_block_means() -> None:
    steady = _Steady(8)
    steady.add(_starts([100.0] + [50.0] * 60))
    assert steady.is_steady()
    assert steady.describe() == "mean step of the last blocks 50.0, 50.0, 50.0 ms"
    assert "traced from step 60" in steady.reason(60)


@given(
    step=st.floats(min_value=0.5, max_value=200.0),
    jitter=st.lists(st.floats(min_value=0.0, max_value=0.15), min_size=120, max_size=120),
)
def test_a_constant_pace_with_noise_is_steady(step: float, jitter: list[float]) -> None:
    # Noise within +-15% keeps a run from being called steady only while its block means
    # move one way.
    series = [1000.0] + [step * (1 + j) for j in jitter]
    starts = _starts(series)
    steady = _Steady(8)
    steady.add(starts)
    if len(steady.blocks) >= STEADY_BLOCKS:
        means = [b[2] for b in steady.blocks[-STEADY_BLOCKS:]]
        assert max(means) / min(means) <= STEADY_TOLERANCE
        moving = means == sorted(means) or means == sorted(means, reverse=True)
        assert steady.is_steady() or (moving and len(set(means)) == len(means))


# MaxText (tiny model, 4 Grain workers, 2 cores, jax 0.12): the block means the window
# opened on before the rule looked for a trend (issue 21).
MAXTEXT_W4_BLOCKS = [546.6, 421.8, 406.9]


def _blocks(means_ms: list[float]) -> list[float]:
    """A step series whose blocks (>= 8 steps, >= 0.5 s) have these means, in order."""
    return [m for m in means_ms for _ in range(max(8, math.ceil(500 / m)))]


def test_a_falling_series_never_opens_the_window() -> None:
    # Within 35% of each other, but each block faster than the last: not steady, and said.
    series = [3000.0, *_blocks(MAXTEXT_W4_BLOCKS)]
    steady = _Steady(8)
    steady.add(_starts(series))
    assert [round(b[2], 1) for b in steady.blocks] == [546.6, 421.8, 406.9]
    assert not steady.is_steady()
    assert steady.describe() == "mean step of the last blocks 546.6, 421.8, 406.9 ms, still falling"
    # However close the means: a series still moving one way is not steady.
    steady = _Steady(8)
    steady.add(_starts([3000.0, *_blocks([100.3, 100.2, 100.1])]))
    assert steady.trend() == "falling" and not steady.is_steady()
    steady = _Steady(8)
    steady.add(_starts([3000.0, *_blocks([50.0, 50.5, 51.0])]))
    assert steady.trend() == "rising" and not steady.is_steady()


def test_the_window_opens_once_the_fall_stops() -> None:
    # The recorded series, then blocks that level off: 406.9, 398.2, 401.5 ms are the first
    # three that agree and turn, once step 41 starts (steps 1-40 fill five blocks of 8).
    series = [3000.0, *_blocks([*MAXTEXT_W4_BLOCKS, 398.2, 401.5])]
    assert _first_steady(series) == 1 + 8 * 5


def _probe(
    t_s: float, elements: int, produce_s: float, cpu_s: float, run_delay_s: float | None = None
) -> dict[str, object]:
    """A worker probe's counters as it writes them (times in ns)."""
    ns = 1_000_000_000
    return {
        "run_delay_ns": None if run_delay_s is None else round(run_delay_s * ns),
        "index": 0,
        "pid": 7,
        "t_ns": round(t_s * ns),
        "elements": elements,
        "produce_ns": round(produce_s * ns),
        "blocked_ns": round((t_s - produce_s) * ns),
        "cpu_ns": round(cpu_s * ns),
        "rss_bytes": 1 << 20,
        "timed": True,
    }


def test_workers_are_measured_between_the_windows_two_snapshots() -> None:
    cap = _Capture({"max_wait_s": 120, "window_max_s": 60})
    cap.batches_in_window = 12
    # Worker counters on the worker's own clock; this process's on its own.
    cap.at_open = _Snapshot(
        wall_ns=10**9, cpu_ns=5 * 10**8, workers={"w": _probe(1, 3, 0.5, 0.2, 0.1)}
    )
    cap.at_close = _Snapshot(
        wall_ns=3 * 10**9, cpu_ns=2 * 10**9, workers={"w": _probe(3, 15, 2, 1, 0.4)}
    )

    measured = cap._workers_measured()

    assert measured is not None
    assert (measured["window_s"], measured["batches"], measured["elements"]) == (2.0, 12, 12)
    assert measured["main_process_cpu_s"] == 1.5
    (worker,) = measured["workers"]
    assert (worker["wall_s"], worker["produce_s"], worker["blocked_s"]) == (2.0, 1.5, 0.5)
    assert worker["cpu_s"] == 0.8 and worker["timed_elements"] is True
    assert worker["cpu_wait_s"] == 0.3
    # A kernel without schedstat: the wait is unknown, not 0.
    cap.at_close.workers["w"]["run_delay_ns"] = None
    (worker,) = cap._workers_measured()["workers"]  # type: ignore[index]
    assert worker["cpu_wait_s"] is None
    # No probe had written when the window opened: nothing to compare.
    cap.at_open = _Snapshot(wall_ns=10**9, cpu_ns=0, workers={})
    assert cap._workers_measured() is None


def test_after_a_pause_one_fresh_block_must_agree() -> None:
    """capture stops its early trace when the run is first steady, a pause of up to ~0.5 s:
    the block it falls in is dropped, and the run is steady again once the next block agrees
    with the two before it (not at once, and not only after three new blocks)."""
    # 10 ms steps, then a 400 ms pause in step 151, then 10 ms steps again.
    starts = _starts([10.0] * 151 + [410.0] + [10.0] * 100)
    steady = _Steady(8)
    steady.add(starts, 152)  # blocks of 50 steps (0.5 s): 1-50, 51-100, 101-150
    assert [b[:2] for b in steady.blocks] == [(1, 50), (51, 100), (101, 150)]
    assert steady.is_steady()
    steady.resume_after(151)  # the early trace stopped at the start of step 151
    assert not steady.is_steady()
    steady.add(starts, 202)
    assert len(steady.blocks) == 3 and not steady.is_steady()  # 152-201 not closed yet
    steady.add(starts, 203)
    assert steady.blocks[-1][:2] == (152, 201) and steady.is_steady()
