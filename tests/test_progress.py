"""Progress on stderr: a line that rewrites itself on a terminal, and nothing at all when
stderr is piped, with -q or with --json. The library reports through callbacks only."""

from __future__ import annotations

import io
import itertools
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from terminal import REPO, run_on_terminal

from traceinspect.capture import CaptureProgress
from traceinspect.capture import _runner as capture_runner
from traceinspect.capture._child.window import _Capture
from traceinspect.cli import _options, _progress, _trace_input, main
from traceinspect.cli._progress import StatusLine, duration
from traceinspect.cli.capture import progress_text
from traceinspect.cli.sweep import _Progress
from traceinspect.sweep import SweepProgress, SweepRun
from traceinspect.sweep import _runner as sweep_runner

SAMPLE = REPO / "sample_traces" / "scenarios" / "sync_bound" / "vm.xplane.pb"
TRAIN = REPO / "tests" / "capture" / "scripts" / "train.py"


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(StatusLine, "_size", lambda self: (200, 24))


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    fake = _Clock()
    monkeypatch.setattr(time, "monotonic", fake)
    return fake


# -- the status line ------------------------------------------------------------------------


def test_the_line_waits_for_its_delay_rewrites_itself_and_is_erased(clock: _Clock) -> None:
    err = io.StringIO()
    line = StatusLine(True, delay_s=1.5, interval_s=0.1, stream=err)
    line.show("Reading x: 10%")
    assert err.getvalue() == ""  # quick work shows nothing
    clock.now = 1.6
    line.show("Reading x: 50%")
    assert err.getvalue() == "\r\033[KReading x: 50%"
    clock.now = 1.65
    line.show("Reading x: 60%")  # within the interval: not drawn
    clock.now = 1.8
    line.show("Reading x: 60%")  # the pending text is drawn once the interval passed
    assert err.getvalue().endswith("\r\033[KReading x: 60%")
    line.note("a note")  # stays, with the line drawn again under it
    assert err.getvalue().endswith("\r\033[Ka note\n\r\033[KReading x: 60%")
    line.close()
    assert err.getvalue().endswith("\r\033[K")
    assert not line.shown


def test_a_disabled_line_draws_nothing_but_notes(clock: _Clock) -> None:
    err = io.StringIO()
    line = StatusLine(False, stream=err)
    line.show("progress")
    line.note("a note")
    line.close()
    assert err.getvalue() == "a note\n"


def test_the_bottom_line_keeps_the_last_row(clock: _Clock) -> None:
    err = io.StringIO()
    line = StatusLine(True, bottom=True, stream=err)
    line.show("capture: 3 steps")
    # Room made, the scroll region set to rows 1-23, the text drawn on row 24.
    assert err.getvalue() == (
        "\n\0337\033[1;23r\0338\033[1A\0337\033[24;1H\033[2Kcapture: 3 steps\0338"
    )
    line.close()
    assert err.getvalue().endswith("\0337\033[r\033[24;1H\033[2K\0338")


def test_on_stderr_needs_a_terminal_and_neither_quiet_nor_json(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_progress, "is_terminal", lambda stream: True)
    assert StatusLine.on_stderr().enabled
    assert not StatusLine.on_stderr(quiet=True).enabled
    assert not StatusLine.on_stderr(as_json=True).enabled
    monkeypatch.setattr(_progress, "is_terminal", lambda stream: False)
    assert not StatusLine.on_stderr().enabled


def test_durations() -> None:
    assert [duration(s) for s in (0.4, 42, 185, 3725)] == [
        "0 s",
        "42 s",
        "3 min 05 s",
        "1 h 02 min",
    ]


# -- loading --------------------------------------------------------------------------------


def test_decode_progress_counts_files_and_bytes(clock: _Clock) -> None:
    err = io.StringIO()
    progress = _options.DecodeProgress("Reading run", [100, 300], StatusLine(True, stream=err))
    progress(50, 400)
    assert err.getvalue().endswith("Reading run: 0/2 file(s), 0/0 MB decoded (12%)")
    clock.now = 1.0
    progress(100, 400)
    assert "Reading run: 1/2 file(s)" in err.getvalue()
    clock.now = 2.0
    progress(400, 400)
    assert err.getvalue().endswith("2/2 file(s), 0/0 MB decoded (100%)")


def test_analyze_shows_decoding_on_a_terminal_only_and_never_with_json(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_progress, "is_terminal", lambda stream: True)
    monkeypatch.setattr(_trace_input, "DECODE_PROGRESS_AFTER_S", 0.0)
    runner = CliRunner()
    shown = runner.invoke(main, ["analyze", str(SAMPLE), "--no-cache"])
    assert shown.exit_code == 0, shown.output
    assert "Reading vm.xplane.pb: 1/1 file(s)" in shown.stderr
    as_json = runner.invoke(main, ["analyze", str(SAMPLE), "--no-cache", "--json"])
    assert as_json.exit_code == 0
    assert as_json.stderr == ""
    json.loads(as_json.stdout)
    quiet = runner.invoke(main, ["analyze", str(SAMPLE), "--no-cache", "-q"])
    assert "Reading" not in quiet.stderr


def test_piped_analyze_has_no_progress() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "traceinspect", "analyze", str(SAMPLE), "--no-cache", "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0
    assert out.stderr == ""
    json.loads(out.stdout)


# -- capture --------------------------------------------------------------------------------


def test_the_child_writes_its_status_for_the_parent(tmp_path: Path) -> None:
    status = tmp_path / "status.json"
    cap = _Capture(
        {"max_wait_s": 120, "window_max_s": 60, "skip_steps": 30, "status_path": str(status)}
    )
    seen: list[CaptureProgress] = []
    report = capture_runner._Reporter(seen.append, str(status))
    report()  # before the child wrote anything
    cap.on_step("grain", "it", "batches")
    report()
    cap.status_ns = 0  # the next write is due
    cap.on_step("grain", "it", "batches")
    report()
    status.write_text('{"phase": "trac')  # torn: the last status stays
    report()
    assert [(p.phase, p.steps, p.source) for p in seen] == [
        ("starting", 0, None),
        ("waiting", 1, "grain"),
        ("waiting", 2, "grain"),
        ("waiting", 2, "grain"),
    ]
    assert seen[1].skip_steps == 30 and seen[1].last_step_ms is None
    assert seen[2].last_step_ms is not None
    assert 0 <= seen[0].elapsed_s <= seen[-1].elapsed_s


def test_the_child_writes_no_status_unless_asked(tmp_path: Path) -> None:
    cap = _Capture({"max_wait_s": 120, "window_max_s": 60})
    cap.on_step("grain", "it", "batches")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("progress", "expected"),
    [
        (CaptureProgress(3.2), "capture: waiting for the first step (3 s)"),
        (
            CaptureProgress(5, "waiting", 12, 10.26, skip_steps=30),
            "capture: 12 steps, last 10.3 ms; skipping to step 30 (5 s)",
        ),
        (
            CaptureProgress(5, "waiting", 12, 10.26),
            "capture: 12 steps, last 10.3 ms; warming up (step times not steady yet) (5 s)",
        ),
        (
            CaptureProgress(9, "tracing", 45, 9.0, 40, 44, "steady"),
            "capture: 45 steps, last 9.0 ms; steady: tracing steps 40-44 (9 s)",
        ),
        (
            CaptureProgress(9, "writing", 60, 9.0, 40, 59, "skip"),
            "capture: 60 steps, last 9.0 ms; writing the trace (9 s)",
        ),
        (
            CaptureProgress(70, "done", 900, 9.0, 40, 59, "steady"),
            "capture: 900 steps, last 9.0 ms; traced steps 40-59; the script goes on (1 min 10 s)",
        ),
    ],
)
def test_capture_progress_text(progress: CaptureProgress, expected: str) -> None:
    assert progress_text(progress) == expected


def _capture_json(stdout: str) -> Any:
    """capture --json's object: all of stdout (the script's own lines, "final loss", go to
    stderr with --json)."""
    assert "final loss" not in stdout, stdout[:300]
    return json.loads(stdout)


@pytest.mark.slow
def test_capture_on_a_terminal_shows_its_progress(tmp_path: Path) -> None:
    args = ["capture", "--logdir", str(tmp_path), "--skip-steps", "5", "--steps", "5"]
    script = ["--", sys.executable, str(TRAIN), "--steps", "40", "--delay-ms", "30"]
    shown = run_on_terminal([*args, *script])
    assert shown.returncode == 0, shown.screen[-2000:]
    assert "capture: " in shown.screen and "tracing steps 5-" in shown.screen
    assert "traced steps 5-9" in shown.screen
    # The last row was given back to the terminal.
    assert "\0337\033[r" in shown.screen

    # --json: stdout is exactly the JSON; the terminal shows no progress line.
    out = tmp_path / "stdout.json"
    as_json = run_on_terminal([*args, "--json", *script], stdout_to_file=out)
    assert as_json.returncode == 0, as_json.screen[-2000:]
    assert _capture_json(as_json.stdout)["exit_code"] == 0
    assert "capture: " not in as_json.screen and "\033[" not in as_json.screen

    # -q: none either.
    quiet = run_on_terminal(["capture", "-q", *args[1:], *script])
    assert quiet.returncode == 0
    assert "capture: " not in quiet.screen


@pytest.mark.slow
def test_piped_capture_has_no_progress(tmp_path: Path) -> None:
    args = ["capture", "--logdir", str(tmp_path), "--skip-steps", "2", "--steps", "3", "--json"]
    script = ["--", sys.executable, str(TRAIN), "--steps", "10"]
    out = subprocess.run(
        [sys.executable, "-m", "traceinspect", *args, *script],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert _capture_json(out.stdout)["exit_code"] == 0
    assert "capture: " not in out.stderr and "\r" not in out.stderr


# -- sweep ----------------------------------------------------------------------------------


def _ended(workers: int) -> SweepRun:
    return SweepRun(workers=workers, status="ok", median_ms=10.0, mean_ms=10.0, p90_ms=12.0)


def test_sweep_progress_estimates_the_time_left(clock: _Clock) -> None:
    err = io.StringIO()
    line = StatusLine(True, stream=err)
    progress = _Progress(line, quiet=False)
    progress(SweepProgress(0, 0, 4, elapsed_s=5.0))
    assert err.getvalue().endswith(
        "sweep: workers=0 (1/4) running for 5 s, 3 more after it; time left known once it ends"
    )
    progress(SweepProgress(0, 0, 4, _ended(0), elapsed_s=60.0))
    assert "traceinspect: workers=0 (1/4): median 10.0 ms/step" in err.getvalue()
    clock.now = 1.0
    progress(SweepProgress(2, 1, 4, elapsed_s=20.0))
    # 40 s more for this count, then 2 counts of 60 s.
    assert err.getvalue().endswith(
        "sweep: workers=2 (2/4) running for 20 s, 2 more after it; about 2 min 40 s left"
    )
    # The second runs, numbered among themselves: how many more is a most.
    clock.now = 2.0
    progress(SweepProgress(2, 0, 2, elapsed_s=20.0, again=True))
    assert err.getvalue().endswith(
        "sweep: workers=2 (1/2, again) running for 20 s, 1 more after it at most; about 1 min "
        "40 s left"
    )
    progress(SweepProgress(2, 0, 2, _ended(2), elapsed_s=60.0, again=True))
    assert "traceinspect: workers=2 (1/2, again): median 10.0 ms/step" in err.getvalue()


def test_sweep_progress_ticks_while_a_count_runs() -> None:
    ticks: list[float] = []
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(2.5)"])
    timed_out = sweep_runner._wait(proc, None, 1.0, lambda: ticks.append(time.monotonic()))
    elapsed = time.monotonic() - start
    assert not timed_out
    # Every PROGRESS_EVERY_S (1 s) until it ended: at least 2 in its 2.5 s sleep, and no
    # more than whole seconds passed (a loaded machine starts the child late: one more).
    every = sweep_runner.PROGRESS_EVERY_S
    assert 2 <= len(ticks) <= elapsed // every
    gaps = [b - a for a, b in itertools.pairwise([start, *ticks])]
    assert all(gap >= every * 0.99 for gap in gaps)
