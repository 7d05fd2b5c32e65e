"""One phase of ``traceinspect isolate``: the script under the capture child with host timing
only (no profiler), its output in a log file, stopped once its steady steps are timed or at
its time limit.

The child (``_child``, config ``timing``) finds steps and the steady state as capture does,
times ``steps`` steps (default 20 and at least 1 s) and stops the script. In the ``target``
phase the outermost Grain ``next()`` on the main thread returns the first batch it drew, every
time; in the ``loader`` phase the first such ``next()`` drains its iterator, each batch a step,
and never returns; ``real`` runs the script as it is. The runner only starts, bounds and
reads it: what the numbers mean is :mod:`traceinspect.isolate`'s.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, BinaryIO, cast

from traceinspect import sidecar as SC
from traceinspect.capture._child import ENTRY, facts
from traceinspect.capture._child._base import TIMING_LOADER, TIMING_MODES
from traceinspect.capture._command import ScriptCommand, parse_command
from traceinspect.capture._runner import CaptureOptions, _child_config, _exit_code
from traceinspect.errors import CaptureError, CaptureUsageError

# Of a phase's time limit: how long the steady-state rule may wait before the window opens
# anyway, and how long the window may last (at least 5 steps). The rest is the margin for a
# slow last step; the child stops at the first step past the limit.
MAX_WAIT_SHARE = 0.6
WINDOW_SHARE = 0.3
# The child stops itself at a step's start; one stuck between steps is sent SIGTERM this long
# after the limit, and the whole session is killed STOP_GRACE_S after that.
_STOP_SLACK_S = 10.0
STOP_GRACE_S = 15.0
# The child writes its report when the phase is over and stops the script, which then only
# has to exit (Grain's workers shut down in a second or two). One still running this long
# after is stuck on its way out and is stopped; its report stands. Seen on CPython 3.11: the
# main thread deadlocked in multiprocessing's resource tracker, entered from a garbage
# collection of Grain's shared-memory arrays (SharedMemoryArray.__del__ -> unlink ->
# ResourceTracker.ensure_running) while it held the tracker's lock.
EXIT_GRACE_S = 20.0
_POLL_S = 0.25
#: The first line of a Python traceback (log_tail quotes the exception line after it).
_TRACEBACK = "Traceback (most recent call last):"


@dataclasses.dataclass(frozen=True)
class PhaseRun:
    """How one phase ran: the child's report (None if it wrote none) and how the script ended."""

    phase: str
    exit_code: int
    exit_signal: str | None
    #: The runner had to stop the script (it was still running past its time limit).
    stopped: bool
    report: SC.PhaseReportJSON | None
    elapsed_s: float
    log_path: str

    @property
    def record(self) -> SC.Sidecar | None:
        """The report read as a sidecar (steps, window, Grain settings), typed."""
        return SC.parse(self.report) if self.report is not None else None


def run_phase(
    command: Sequence[str],
    phase: str,
    *,
    timeout_s: float,
    log_path: str | Path,
    steps: int | None = None,
    workers: int | None = None,
) -> PhaseRun:
    """Run ``command`` (a Python script or module) once as phase ``phase`` (``target``,
    ``loader`` or ``real``); its stdout and stderr go to ``log_path``.

    Raises :class:`~traceinspect.errors.CaptureError` for a command that is not a Python
    script or module, or that cannot start.
    """
    if phase not in TIMING_MODES:
        raise CaptureUsageError(f"unknown phase {phase!r}: use one of {', '.join(TIMING_MODES)}")
    if timeout_s <= 0:
        raise CaptureUsageError(f"the phase timeout must be positive (seconds), got {timeout_s:g}")
    cmd = parse_command(command)
    scratch = tempfile.mkdtemp(prefix="traceinspect-isolate-")
    try:
        config = phase_config(
            cmd, phase, timeout_s=timeout_s, scratch=scratch, steps=steps, workers=workers
        )
        config_path = Path(scratch, "config.json")
        config_path.write_text(json.dumps(config), encoding="utf-8")
        argv = [cmd.python, *cmd.interpreter_options, ENTRY, str(config_path)]
        started = time.monotonic()
        with Path(log_path).open("wb") as log:
            try:
                proc = start_in_own_session(argv, log)
            except OSError as exc:
                raise CaptureError(f"cannot start {cmd.python!r}: {exc.strerror or exc}") from None
        stopped = _wait_or_stop(proc, timeout_s + _STOP_SLACK_S, config["report_path"])
        elapsed = time.monotonic() - started
        report = _read_phase_report(config["report_path"])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    exit_code, exit_signal = _exit_code(proc.returncode)
    return PhaseRun(
        phase=phase,
        exit_code=exit_code,
        exit_signal=exit_signal,
        stopped=stopped,
        report=report,
        elapsed_s=round(elapsed, 3),
        log_path=str(log_path),
    )


def phase_config(
    cmd: ScriptCommand,
    phase: str,
    *,
    timeout_s: float,
    scratch: str,
    steps: int | None = None,
    workers: int | None = None,
) -> dict[str, Any]:
    """The capture child's config for one phase (its report goes to ``scratch``)."""
    options = CaptureOptions(
        steps=steps,
        max_wait_s=timeout_s * MAX_WAIT_SHARE,
        window_max_s=timeout_s * WINDOW_SHARE,
        stop_after=True,
        # The loader's steps are the batches it drains, whatever else the script marks.
        step_source="grain" if phase == TIMING_LOADER else "auto",
        workers=workers,
        grain_worker_profiling=False,
        quiet=True,
    )
    options.check()
    return {
        **_child_config(cmd, options, scratch, scratch),
        "timing": phase,
        "deadline_s": timeout_s,
        "max_wait_option": f"{MAX_WAIT_SHARE:.0%} of --phase-timeout",
    }


def _read_phase_report(path: str) -> SC.PhaseReportJSON | None:
    try:
        report = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return cast(SC.PhaseReportJSON, report) if isinstance(report, dict) else None


def _wait_or_stop(proc: subprocess.Popen[bytes], timeout_s: float, report_path: str) -> bool:
    """Wait for the phase; stop it past ``timeout_s``, ``EXIT_GRACE_S`` after the child wrote
    its report (the phase is over: the script only has to exit), or on Ctrl-C. True if it
    was stopped."""
    deadline = time.monotonic() + timeout_s
    reported_at: float | None = None
    try:
        while True:
            try:
                proc.wait(timeout=_POLL_S)
                break
            except subprocess.TimeoutExpired:
                now = time.monotonic()
                if reported_at is None and Path(report_path).exists():
                    reported_at = now
                stuck = reported_at is not None and now - reported_at >= EXIT_GRACE_S
                if now >= deadline or stuck:
                    stop_session(proc, STOP_GRACE_S)
                    return True
    except KeyboardInterrupt:
        # The script is in a session of its own: the terminal's Ctrl-C did not reach it.
        stop_session(proc, STOP_GRACE_S)
        raise
    # Whatever the script left behind (Grain workers of a script that did not stop them).
    _kill_session(proc)
    return False


def start_in_own_session(argv: Sequence[str], log: BinaryIO) -> subprocess.Popen[bytes]:
    """Start ``argv`` with no input and its output (both streams) to ``log``, as the leader of
    a session of its own: the terminal's Ctrl-C reaches only us, who stop it in order
    (:func:`stop_session`), and whatever it starts (Grain's workers) goes with its session.
    Raises ``OSError`` when it cannot start."""
    return subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def stop_session(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGTERM ``proc`` (the leader of its own session), then kill the whole session if it
    has not ended ``grace_s`` later, and in any case whatever it left behind."""
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        _kill_session(proc)
        proc.wait()
    _kill_session(proc)


def _kill_session(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def log_tail(path: str | Path, limit: int = 160) -> str:
    """What ended the script, from its log: the exception line of the last traceback it
    printed (``IndexError: list index out of range``, not the notes printed after it:
    Grain adds "For simplicity, Grain has removed its internal frames ..." to every
    exception that passes through its iterators), else the last line that is not ours
    ('' when there is none)."""
    try:
        lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    starts = [i for i, raw in enumerate(lines) if raw.startswith(_TRACEBACK)]
    if starts:
        # The frames are indented; the first line at the margin after them is the exception.
        line = next((raw for raw in lines[starts[-1] + 1 :] if raw and not raw[0].isspace()), "")
        if line:
            return _clip(line.strip(), limit)
    for raw in reversed(lines):
        line = raw.strip()
        if line and not line.startswith("traceinspect:"):
            return _clip(line, limit)
    return ""


def _clip(line: str, limit: int) -> str:
    return line if len(line) <= limit else line[: limit - 3] + "..."


def wait_for_quiet(max_busy_cores: float, limit_s: float, sample_s: float = 0.5) -> float:
    """Wait, at most ``limit_s``, until the machine's cores are busy no more than
    ``max_busy_cores`` over ``sample_s`` (nothing of a phase runs meanwhile: what is busy is
    other processes). Returns the seconds waited (0 where /proc/stat is missing)."""
    started = time.monotonic()
    while True:
        before = facts._machine_busy_s()
        time.sleep(sample_s)
        after = facts._machine_busy_s()
        waited = time.monotonic() - started
        if before is None or after is None:
            return 0.0
        if (after - before) / sample_s <= max_busy_cores or waited >= limit_s:
            return waited
