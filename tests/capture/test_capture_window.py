"""The default window on real runs: opened once steady, after the fill phase, with the whole
run's step times and the Grain workers measured over it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from capture_helpers import TRAIN, read_sidecar

from traceinspect.capture import CaptureOptions, run_capture

# A real capture analysed: run on every stack of the support matrix (noxfile.py).
pytestmark = [pytest.mark.slow, pytest.mark.stack]


def _default_capture(logdir: Path, *args: str) -> tuple[object, dict]:  # type: ignore[type-arg]
    result = run_capture([sys.executable, str(TRAIN), *args], CaptureOptions(logdir=str(logdir)))
    return result, read_sidecar(result)


def test_the_default_window_opens_once_steady_and_measures_the_worker(tmp_path: Path) -> None:
    # One worker makes each batch of 16 records, 2 ms each (on 2 read threads): ~16 ms a batch,
    # far slower than the tiny model's step, so the loop is paced by its input once the
    # batches buffered during compilation are used up. 300 steps (~5 s): blocks of 0.5 s are
    # ~29 steps, and the rule waits past blocks whose means move one way (on a steady ~17.5 ms
    # pace, noise made 17.4, 17.6, 18.7 ms: the window opened at step 184).
    result, sidecar = _default_capture(
        tmp_path / "logs", "--steps", "300", "--delay-ms", "2", "--workers", "1"
    )
    assert result.exit_code == 0 and not result.partial  # type: ignore[attr-defined]
    window = sidecar["window"]
    assert window["rule"] == "steady" and window["skip_steps"] is None
    # At least 20 steps and at least 1 s: ~16 ms steps make it about 60.
    traced = window["last_step"] - window["first_step"] + 1
    span_s = (window["trace_stop_unix_ns"] - window["trace_start_unix_ns"]) / 1e9
    assert window["complete"] and traced >= 20 and span_s >= 1.0
    # The rule: three blocks of at least 0.5 s each, from step 1 (step 0 compiles), settled
    # before the window opened.
    starts = [s["start_unix_ns"] for s in sidecar["steps"]]
    assert starts[window["first_step"]] - starts[1] >= 3 * 0.5e9
    assert window["reason"].startswith("steady from step ")
    assert window["reason"].endswith(f"traced from step {window['first_step']}")
    # Every step of the run is kept, before, in and after the window.
    steps = sidecar["steps"]
    assert [s["index"] for s in steps] == list(range(300))
    assert sum(s["traced"] for s in steps) == traced
    # The worker measured over the window: it made the batches the loop drew, and spent the
    # window producing them (its 2 read threads sleep, so little of it on CPU).
    measured = sidecar["grain"]["workers_measured"]
    assert measured["batches"] == traced
    (worker,) = measured["workers"]
    assert worker["timed_elements"] is True and worker["index"] == 0
    # Counted on the worker's own clock (its counters are written every 50 ms) and ahead of
    # the loop by its buffer, so compare rates, which is what the worker rule uses: over a
    # window of >= 1 s they agree within 20% (55 against 58 batches is 5%).
    loop_rate = measured["batches"] / measured["window_s"]
    worker_rate = worker["elements"] / worker["wall_s"]
    assert abs(worker_rate - loop_rate) <= 0.2 * loop_rate
    assert worker["produce_s"] >= 0.8 * worker["wall_s"]
    assert worker["cpu_s"] < 0.5 * worker["produce_s"]
    assert worker["rss_bytes"] > 50 << 20


def test_a_run_that_ends_before_it_is_steady_keeps_its_early_trace(tmp_path: Path) -> None:
    result, sidecar = _default_capture(tmp_path / "logs", "--steps", "6")
    assert result.exit_code == 0 and result.partial  # type: ignore[attr-defined]
    assert result.trace_paths  # type: ignore[attr-defined]
    (reason,) = sidecar["partial_reasons"]
    assert reason == "the script returned before the run was steady"
    window = sidecar["window"]
    assert window["rule"] == "early" and not window["complete"]
    assert (window["first_step"], window["last_step"]) == (2, 5)
    assert window["reason"] == (
        "the script returned before the run was steady (no complete block): kept the early "
        "trace, steps 2-5 after compilation; not a steady window (run more steps, or give "
        "--skip-steps N, for one)"
    )
    assert [s["index"] for s in sidecar["steps"] if s["traced"]] == [2, 3, 4, 5]
    assert sidecar["early_trace"]["state"] == "kept"
    # Said once in the summary line: the window's reason holds the partial reason.
    summary = result.summary()  # type: ignore[attr-defined]
    assert summary.count("before the run was steady") == 1
    assert ", partial; the script returned before the run was steady (no complete" in summary


def test_a_run_of_two_steps_has_no_trace_and_says_why(tmp_path: Path) -> None:
    result, sidecar = _default_capture(tmp_path / "logs", "--steps", "2")
    assert result.exit_code == 0 and not result.trace_paths  # type: ignore[attr-defined]
    (reason,) = sidecar["partial_reasons"]
    assert "before the window opened (2 step(s) seen, not yet steady" in reason
    assert "give --skip-steps N" in reason
