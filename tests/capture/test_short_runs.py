"""Short runs and early ends (issue 22): a default capture always leaves a trace of what ran
after compilation, and every step time it reports is the time per completed step (the
device's throughput), not the host's dispatch rate. The script (scripts/short_run.py): a
~10 ms device step on 2 cores fed by a Grain pipeline of ready-made batches, so the host
dispatches steps much faster than the device runs them."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from capture_helpers import SCRIPTS, read_sidecar
from click.testing import CliRunner

import traceinspect
from traceinspect.capture import CaptureOptions, run_capture
from traceinspect.cli import main

pytestmark = [pytest.mark.slow, pytest.mark.stack]

SHORT = SCRIPTS / "short_run.py"
WITHIN = 0.20


def _truth(steps: int) -> list[float]:
    """The same loop timed without traceinspect on one pre-built batch, 3 times (ms)."""
    out = subprocess.run(
        [sys.executable, str(SHORT), "--truth", "--steps", str(steps)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    reps: list[float] = json.loads(out.strip().splitlines()[-1])["reps_ms"]
    return reps


def _summary_step_ms(summary: str) -> float:
    found = re.search(r"mean step ([0-9.]+) ms over (\d+) completed step", summary)
    assert found, summary
    return float(found.group(1))


def test_a_short_run_leaves_a_trace_timed_by_completed_steps(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    # 40 steps of ~10 ms: the steady-state rule needs ~250 such steps, so the window never
    # opens; the early trace (from step 2) is the run's trace.
    result = run_capture(
        [sys.executable, str(SHORT), "--steps", "40"], CaptureOptions(logdir=str(tmp_path))
    )
    assert result.exit_code == 0 and result.trace_paths and result.partial
    sidecar = read_sidecar(result)
    window = sidecar["window"]
    assert window["rule"] == "early" and (window["first_step"], window["last_step"]) == (2, 39)
    assert sidecar["early_trace"]["state"] == "kept"
    # Every traced step's completion was stamped: its last jitted call's output became ready.
    # Every traced step's completion was stamped (its last jitted call's output became
    # ready), but the last: the script's end waited for it, when, is not known.
    done = [s["done_unix_ns"] for s in sidecar["steps"] if s["traced"]]
    assert None not in done[:-1] and done[:-1] == sorted(done[:-1])
    # The summary's step is the loop's own time per completed step under capture (the
    # script waits for the device at its end: steps 2-39), not the host's dispatch rate.
    loop_ms = json.loads(capfd.readouterr().out.strip().splitlines()[-1])["loop_step_ms"]
    reported = _summary_step_ms(result.summary())
    assert reported == pytest.approx(loop_ms, rel=0.10)
    # A verdict from the early trace, and the analysis says the window was not steady.
    analysis = traceinspect.analyze(traceinspect.load(result.run_dir, use_cache=False))
    assert analysis.verdict == "device-bound"
    assert analysis.window is not None and analysis.window["rule"] == "early"
    assert analysis.window["traced_completed_ms"] == pytest.approx(reported, abs=0.051)


def test_a_script_that_raises_at_step_7_leaves_its_trace(tmp_path: Path) -> None:
    result = run_capture(
        [sys.executable, str(SHORT), "--steps", "40", "--crash-at", "7"],
        CaptureOptions(logdir=str(tmp_path)),
    )
    assert result.exit_code == 1 and result.trace_paths
    sidecar = read_sidecar(result)
    assert sidecar["partial_reasons"] == [
        "the script raised RuntimeError before the run was steady"
    ]
    assert (sidecar["window"]["first_step"], sidecar["window"]["last_step"]) == (2, 6)
    # analyze from the command line: the verdict (ready-made input, no reads: device-bound).
    out = CliRunner().invoke(main, ["analyze", result.run_dir, "--no-cache"])
    assert out.exit_code == 0, out.output
    assert out.stdout.startswith("Verdict   device-bound")
    assert "kept the early trace, steps 2-6 after compilation; not a steady window" in out.stdout


def test_isolate_times_a_45_step_script_by_completed_steps(tmp_path: Path) -> None:
    """isolate's target phase (the first batch repeated, no profiler) against the same loop
    on one pre-built batch, timed 3 times before and 3 times after: this machine's speed
    drifts between runs (best-of-3 figures of one script differ by up to 1.6x here), so the
    target must fall within 20% of the range they span. The host's dispatch rate, which
    isolate reported before, is a fraction of it (5.24 ms for a ~9 ms step). Three rounds,
    so that isolate's figure is a best of 3 as the truth's are: with its default 2 it read
    9.3 ms against 6.8-7.3 timed about 1 run in 8 on Python 3.12 (its two target runs of
    43 steps, 0.4 s each, differed by a third in one isolate run)."""
    before = _truth(45)
    command = [sys.executable, str(SHORT), "--steps", "45"]
    out = subprocess.run(
        [sys.executable, "-m", "traceinspect", "isolate", "--rounds", "3", "--", *command],
        check=False,
        capture_output=True,
        cwd=tmp_path,  # its logs go to ./traceinspect_isolate
        text=True,
    )
    after = _truth(45)
    if out.returncode != 0:
        # Too short to time: said so, no number.
        assert "timed no steady steps" in out.stderr, out.stderr
        return
    found = re.search(r"target step\s+([0-9.]+) ms\s+\((\d+) completed steps", out.stdout)
    assert found, out.stdout
    target = float(found.group(1))
    low, high = min(before + after), max(before + after)
    assert low * (1 - WITHIN) <= target <= high * (1 + WITHIN), (before, target, after)
    assert "timed when their device work finished" in out.stdout


def test_steps_after_the_time_window_still_get_their_trace(tmp_path: Path) -> None:
    """A job whose set-up outlasts the time window's delay (MaxText on a loaded machine took
    over 10 s to its first step, and got 5 s of nothing traced): the time window's trace is
    set aside when the steps begin, and the run's trace is of its steps."""
    result = run_capture(
        [sys.executable, str(SHORT), "--steps", "40", "--start-delay", "6"],
        # After jax's import (2-4 s here), before the loop.
        CaptureOptions(logdir=str(tmp_path), delay_s=4.0, duration_s=1.0),
    )
    assert result.exit_code == 0 and len(result.trace_paths) == 1
    sidecar = read_sidecar(result)
    assert sidecar["step_source"] == "grain"
    assert sidecar["window"]["rule"] == "early"
    (note,) = [n for n in sidecar["notes"] if "time window" in n]
    assert note.endswith(
        "after the time window (--delay): its trace was set aside for a window of steps"
    )
    assert sorted(p.name for p in Path(result.run_dir).iterdir() if p.suffix == ".pb") == [
        Path(result.trace_paths[0]).name
    ]


def test_steps_inside_the_time_window_end_it_and_get_their_trace(tmp_path: Path) -> None:
    """Steps that begin while the time window is traced (Keras' import and model build took
    over 10 s on a loaded machine): the time window ends there and is set aside, and the
    steps get their own trace. Before, the steps' first source took the time window's trace
    as its window: 2 steps "traced", the rest of the run never looked at."""
    result = run_capture(
        [sys.executable, str(SHORT), "--steps", "40", "--start-delay", "7"],
        # The time window opens after jax's import (2-4 s here) and would last past the run.
        CaptureOptions(logdir=str(tmp_path), delay_s=4.0, duration_s=30.0),
    )
    assert result.exit_code == 0 and len(result.trace_paths) == 1
    sidecar = read_sidecar(result)
    assert sidecar["step_source"] == "grain"
    assert sidecar["window"]["rule"] == "early"
    assert (sidecar["window"]["first_step"], sidecar["window"]["last_step"]) == (2, 39)
    (note,) = [n for n in sidecar["notes"] if "time window" in n]
    assert note.endswith(
        "inside the time window (--delay): its trace was set aside for a window of steps"
    )
    assert sorted(p.name for p in Path(result.run_dir).iterdir() if p.suffix == ".pb") == [
        Path(result.trace_paths[0]).name
    ]


def test_steps_that_begin_inside_the_time_window_get_a_window_of_their_own(
    tmp_path: Path,
) -> None:
    """A set-up about as long as the time window's delay (a Flax loop on a loaded machine
    began its steps 0.2 s into it, and its trace was 5 s of the first step's compilation):
    the time window's trace is set aside when it closes, and the run's trace is of steady
    steps."""
    result = run_capture(
        # The loop begins 6 s after the process started: 2 s into the time window.
        [sys.executable, str(SHORT), "--steps", "1500", "--start-at", "6"],
        CaptureOptions(logdir=str(tmp_path), delay_s=4.0, duration_s=4.0, quiet=True),
    )
    assert result.exit_code == 0 and len(result.trace_paths) == 1
    sidecar = read_sidecar(result)
    assert sidecar["step_source"] == "grain"
    (note,) = [n for n in sidecar["notes"] if "time window" in n]
    assert note.endswith(
        "inside the time window (--delay): its trace was set aside for a window of steps"
    ), note
    assert sidecar["window"]["rule"] == "steady", sidecar["window"]
    assert sidecar["window"]["first_step"] > 0 and sidecar["window"]["complete"]
    assert sorted(p.name for p in Path(result.run_dir).iterdir() if p.suffix == ".pb") == [
        Path(result.trace_paths[0]).name
    ]
