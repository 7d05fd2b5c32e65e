"""The steady-state window rule of ``traceinspect capture`` (``_child.steady._Steady``), on step
series shaped like the scenario family's (sample_traces/scenarios/family)."""

from __future__ import annotations

import itertools
import json
import math
import random
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from traceinspect.capture._child._base import SOURCE_GRAIN, SOURCE_JIT, SOURCE_TIME, _StopAfter
from traceinspect.capture._child.measured import _Snapshot
from traceinspect.capture._child.steady import (
    STEADY_BLOCK_S,
    STEADY_BLOCKS,
    STEADY_TREND,
    _Steady,
)
from traceinspect.capture._child.window import _TRACING, TAKEOVER_STEPS, _Capture, _Source
from traceinspect.capture._command import parse_command
from traceinspect.capture._phase import PhaseRun, phase_config
from traceinspect.isolate import phase_timing


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
    # Step times within +15% of a constant pace: block means within 15% of each other, so
    # steady once there are enough blocks, in whatever order they come.
    series = [1000.0] + [step * (1 + j) for j in jitter]
    starts = _starts(series)
    steady = _Steady(8)
    steady.add(starts)
    assert steady.is_steady() == (len(steady.blocks) >= STEADY_BLOCKS)


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
    # Moving one way by more than settled blocks differ: still settling, within the tolerance.
    steady = _Steady(8)
    steady.add(_starts([3000.0, *_blocks([50.0, 55.0, 61.0])]))
    assert steady.trend() == "rising" and not steady.is_steady()


def test_isolate_s_phases_take_any_order_for_settling() -> None:
    # A phase's figure is set against the others within 20%: an order under 20% inside it
    # still counts as settling there (as before), and the phase waits for a turn.
    steady = _Steady(8, trend_above=1.0)
    steady.add(_starts([3000.0, *_blocks([15.2, 14.4, 13.0])]))
    assert steady.trend() == "falling" and not steady.is_steady()
    steady.add(_starts([3000.0, *_blocks([15.2, 14.4, 13.0, 13.6])]))
    assert steady.is_steady()
    assert "not moving one way (14.4, 13.0, 13.6 ms)" in steady.reason(200)


# A Flax NNX loop's settled blocks (2-core machine, cheap input, 1 worker): in order by chance,
# as three settled blocks are one time in three.
@pytest.mark.parametrize("means", [[15.2, 14.4, 13.0], [13.3, 13.7, 15.1], [100.3, 100.2, 100.1]])
def test_settled_blocks_in_order_by_chance_are_steady(means: list[float]) -> None:
    steady = _Steady(8)
    steady.add(_starts([3000.0, *_blocks(means)]))
    assert max(means) / min(means) <= STEADY_TREND
    assert steady.trend() is None and steady.is_steady()
    assert "not moving one way by over 20%" in steady.reason(100)


def test_the_window_opens_once_the_fall_stops() -> None:
    # The recorded series, then blocks that level off: 421.8, 406.9, 398.2 ms still fall, but
    # by 6%, as settled blocks differ: the first three that agree, once step 33 starts (steps
    # 1-32 fill four blocks of 8). 546.6 ms, 34% above them, was the settle.
    series = [3000.0, *_blocks([*MAXTEXT_W4_BLOCKS, 398.2, 401.5])]
    assert _first_steady(series) == 1 + 8 * 4


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


def test_a_gap_in_the_steps_starts_the_block_again() -> None:
    """Steps fed one at a time, as capture does; one never seen (a step source chosen past the
    steps it kept) starts the block again at the next step seen."""
    steady = _Steady(8)
    for index in range(60):  # 10 ms steps: blocks of 50 steps, 1-50
        steady.step(index, index * 10_000_000)
    assert steady.blocks == [(1, 50, 10.0)]
    steady.step(59, 0)  # seen already: ignored
    for index in range(70, 130):  # 60-69 never seen: the block 51-... is dropped
        steady.step(index, index * 10_000_000)
    assert [b[:2] for b in steady.blocks] == [(1, 50), (70, 119)]


def test_a_loader_unsteady_past_10000_batches_is_timed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """isolate's loader phase drained a 10,000-batch dataset on CI without settling (CI's
    stack run of issue 25): the steady-state rule read the 10,001st step's start from the
    kept 10,000 and raised IndexError inside the script's next(). Now the rule sees every
    step, and the window's steps are kept past the first 10,000 and timed."""
    # Block means that disagree (0.6 s of 0.1 ms batches, then 0.6 s of 0.5 ms ones, in
    # turn) for 14,400 batches, then a steady 0.1 ms a batch.
    unsteady = [[0.1] * 6000, [0.5] * 1200] * 2
    series = [50.0, *itertools.chain(*unsteady), *[0.1] * 60_000]
    script = tmp_path / "train.py"
    script.write_text("", encoding="utf-8")
    config = phase_config(
        parse_command([sys.executable, str(script)]),
        "loader",
        timeout_s=60,  # isolate's default --phase-timeout
        scratch=str(tmp_path),
    )
    report_path = Path(config["report_path"])
    starts = _starts(series)
    began = time.time_ns()
    now = [began]
    cap = _Capture(config)
    # The child reads the clock through the time module: every reading is the step's start.
    monkeypatch.setattr(time, "time_ns", lambda: now[0])
    index = 0
    with pytest.raises(_StopAfter):
        for index, start in enumerate(starts):  # noqa: B007
            now[0] = began + start
            cap.on_step(SOURCE_GRAIN, "It", "batches drawn alone")
    monkeypatch.undo()
    assert cap.window_rule == "steady" and cap.window_first is not None
    assert cap.window_first > 14_400 and cap.window_end == index
    # The progress line's last step, past the steps kept too.
    assert cap.chosen is not None and cap.chosen.last_wall_ns == 100_000
    report = json.loads(report_path.read_text(encoding="utf-8"))
    steps = report["steps"]
    assert report["steps_seen"] == index + 1
    # Steps 0-9,999, then the window's: its first step to the one whose start closed it.
    window = list(range(cap.window_first, cap.window_end + 1))
    assert [s["index"] for s in steps] == [*range(10_000), *window]
    assert steps[9_999]["wall_ms"] is None  # step 10,000 is not listed
    traced = [s for s in steps if s["traced"]]
    assert [s["index"] for s in traced] == window[:-1]
    assert all(s["wall_ms"] == pytest.approx(0.1) for s in traced)
    # At least 1 s of them (the default window), and isolate's figure is their mean.
    assert len(traced) >= 10_000
    run = PhaseRun(
        phase="loader",
        exit_code=0,
        exit_signal=None,
        stopped=False,
        report=report,
        elapsed_s=3.0,
        log_path=str(tmp_path / "loader.log"),
    )
    timing = phase_timing(run)
    assert (timing.how, timing.count) == ("steady", len(traced))
    assert timing.mean_ms == pytest.approx(0.1)


def _steady_after(starts: list[int]) -> tuple[int | None, _Steady]:
    steady = _Steady(8)
    for index, start in enumerate(starts):
        steady.step(index, start)
        if steady.is_steady():
            return index, steady
    return None, steady


GPU_CHECKPOINT = Path(__file__).resolve().parents[1] / "sample_traces" / "gpu" / "checkpoint"


def test_a_stall_every_25_steps_is_steady_in_blocks_of_whole_periods() -> None:
    """The host's step starts of a GPU loop checkpointing every 25 steps (250 ms of storage
    against ~8.5 ms steps): blocks of 0.5 s held one, two or no checkpoints (18.8, 27.3,
    12.6 ms) and the capture never saw the run steady; in blocks of whole periods it is."""
    sidecar = json.loads((GPU_CHECKPOINT / "traceinspect.capture.json").read_text("utf-8"))
    opened, steady = _steady_after([s["start_unix_ns"] for s in sidecar["steps"]])
    assert steady.period == 25
    assert opened is not None and opened < 300
    assert steady.steady_by_period() and steady.by_period is not None
    for first, last, _ in steady.by_period.blocks[-STEADY_BLOCKS:]:
        assert (last + 1 - first) % 25 == 0
    assert "a stall recurs every 25 steps" in steady.reason(opened)


def test_a_run_steady_before_keeps_its_opening() -> None:
    """The blocks of whole periods only add a way to be steady: a loop reading every 10th
    step (the family's read_every10_w0, whose reads stall the host) opens where it did."""
    path = GPU_CHECKPOINT.parents[1] / "scenarios" / "family" / "read_every10_w0"
    sidecar = json.loads((path / "traceinspect.capture.json").read_text("utf-8"))
    starts = [s["start_unix_ns"] for s in sidecar["steps"]]
    opened, steady = _steady_after(starts)
    # Where its capture opened (blocks of 12.0, 11.4, 11.2 ms: in order, but by 7%)...
    assert opened == sidecar["window"]["first_step"] == 136
    assert not steady.steady_by_period()
    # ... though the rule learns the reads' period over the run.
    whole = _Steady(8)
    whole.add(starts)
    assert whole.period == 10


def test_bursts_and_noise_teach_no_period() -> None:
    rng = random.Random(3)
    bursts = [2000.0] + [30.0 if i % 4 == 0 else 0.5 for i in range(1, 400)]
    noisy = [2000.0] + [10.0 * rng.uniform(0.7, 1.3) for _ in range(400)]
    for series in (bursts, noisy):
        _, steady = _steady_after(_starts(series))
        assert steady.period is None


# -- which source's steps are followed -----------------------------------------------------


def _choosing_capture() -> _Capture:
    # The default rule, but nothing opens in these few fast steps (blocks last >= 0.5 s), and
    # no early trace: no profiler starts.
    return _Capture({"max_wait_s": 120, "window_max_s": 60, "no_early_trace": True})


def test_a_source_that_goes_on_alone_takes_over_from_one_that_stopped() -> None:
    """Keras' fit on a Grain dataset: two batches drawn from a first iterator (to learn their
    shapes), then every step from another iterator of another class, and a jitted step."""
    cap = _choosing_capture()
    for _ in range(2):
        cap.on_step(SOURCE_GRAIN, "InterleaveDatasetIterator", "batches from grain Interleave")
    cap.completions.done_ns[0] = 1  # a stamp of the first source's step 0
    for step in range(30):
        cap.on_step(SOURCE_GRAIN, "_MapDatasetIterator", "batches from grain _Map")
        cap.on_step(SOURCE_JIT, "train_step@1", "calls of jitted train_step")
        chosen = cap.chosen
        assert chosen is not None
        # Taken over once it went on alone for a block's worth of steps (and for longer
        # than the first source ran), and kept: the jitted step is a worse marker.
        expected = "_MapDatasetIterator" if step >= TAKEOVER_STEPS - 1 else "Interleave"
        assert chosen.key.startswith(expected), step
    assert cap.chosen is not None and cap.chosen.count == 30
    assert cap.completions.done_ns == {}  # step 0 is now another source's
    (note,) = cap.notes
    assert note == (
        "steps are batches from grain _Map: batches from grain Interleave stopped after 2 "
        "step(s) while these went on (8 steps)"
    )


def test_a_source_that_pauses_keeps_its_place() -> None:
    """An evaluation of 20 batches from another iterator after 40 training steps: the
    training iterator ran longer before it, so it stays the step source; a source drawn
    beside the chosen one every step never takes over."""
    cap = _choosing_capture()
    for _ in range(40):
        cap.on_step(SOURCE_GRAIN, "Train", "train batches")
        cap.on_step(SOURCE_GRAIN, "Side", "side batches")
    for _ in range(20):
        cap.on_step(SOURCE_GRAIN, "Eval", "eval batches")
    cap.on_step(SOURCE_GRAIN, "Train", "train batches")
    assert cap.chosen is not None and cap.chosen.key == "Train" and not cap.notes
    # An evaluation longer than all the training before it is what the run now does.
    for _ in range(42):
        cap.on_step(SOURCE_GRAIN, "Eval", "eval batches")
    assert cap.chosen is not None and cap.chosen.key == "Eval"


def test_a_worse_marker_takes_over_when_the_better_one_stops() -> None:
    """Batches drawn up front (10), then 11 steps of a jitted function alone: the jitted
    function is what advances every step; when batches come again they are the steps."""
    cap = _choosing_capture()
    for _ in range(10):
        cap.on_step(SOURCE_GRAIN, "Prefill", "batches")
    for _ in range(10):
        cap.on_step(SOURCE_JIT, "step@1", "calls of jitted step")
    assert cap.chosen is not None and cap.chosen.kind == SOURCE_GRAIN
    cap.on_step(SOURCE_JIT, "step@1", "calls of jitted step")
    assert cap.chosen is not None and cap.chosen.kind == SOURCE_JIT
    cap.on_step(SOURCE_GRAIN, "Prefill", "batches")
    assert cap.chosen is not None and cap.chosen.kind == SOURCE_GRAIN


def test_a_set_up_call_inside_the_time_window_does_not_end_it() -> None:
    """A jitted function called once, or a batch drawn to peek, while the time window traces
    a script whose steps were not found: not yet a loop, so the time window goes on (a
    source's third step, or a jitted function's 8th call, ends it: test_short_runs.py)."""
    cap = _choosing_capture()
    time_source = cap.chosen = _Source(SOURCE_TIME, "time", "time window of 5 s")
    cap.phase = _TRACING
    cap.on_step(SOURCE_JIT, "init@1", "calls of jitted init")
    for _ in range(2):
        cap.on_step(SOURCE_GRAIN, "Peek", "batches from grain Peek")
    assert cap.chosen is time_source and cap.phase == _TRACING
