"""Running a sweep: one capture per worker count, each timed out on its own, then analysed."""

from __future__ import annotations

import dataclasses
import functools
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from traceinspect.capture import (
    CaptureOptions,
    CaptureResult,
    log_tail,
    parse_command,
    start_in_own_session,
    stop_session,
)
from traceinspect.errors import CaptureError, TraceInspectError, UsageError
from traceinspect.sweep._summary import (
    CRASHED,
    ERROR,
    NO_TRACE,
    OK,
    TIMEOUT,
    TOLERANCE,
    UNANALYSABLE,
    UNTRACED,
    SweepResult,
    SweepRun,
    choose,
    resolve_metric,
    summarize_sweep,
)

PLACEHOLDER = "{workers}"
DEFAULT_LOGDIR = "traceinspect_sweep"
LOG_NAME = "output.log"
# After a timeout the script gets this long to save its trace before it is killed.
TIMEOUT_GRACE_S = 10.0
# Counts timed a second time, at most: the one with the best untraced figure, then the one
# chosen (each single run's figure scatters by 10-15% on a shared machine, and the lowest of
# several is low by chance more often than not: a sweep of the family's loop under a
# per-step read timed 6 workers at 10.62 ms untraced, 13.08 traced, against 12.5-14.0 at
# 3-5, and chose 6 at a knee of 3). The second run's figure is the count's.
RETIMES = 2
# The worker process itself then gets this much longer to write its result.
_WORKER_SLACK_S = 10.0
# The worker runs from this package's own location, whatever the current directory holds.
_PACKAGE_PARENT = str(Path(__file__).resolve().parents[2])
_BOOTSTRAP = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "from traceinspect.sweep._worker import run; run(sys.argv[2])"
)


@dataclasses.dataclass(frozen=True)
class SweepProgress:
    """Where a sweep is: ``run`` is None when the count starts and while it runs, the
    result when it ended; ``elapsed_s``: seconds since this count started."""

    workers: int
    index: int
    total: int
    run: SweepRun | None = None
    elapsed_s: float = 0.0
    #: A count timed a second time (see ``RETIMES``): ``index`` and ``total`` then number
    #: the second runs, ``total`` the most there may be.
    again: bool = False


ProgressCallback = Callable[[SweepProgress], None]
# While a count runs, progress is called this often (seconds).
PROGRESS_EVERY_S = 1.0


@dataclasses.dataclass(frozen=True)
class _Outcome:
    capture: CaptureResult | None
    error: str | None
    timed_out: bool
    elapsed_s: float


def run_dir_for(logdir: str | Path, workers: int, again: bool = False) -> Path:
    """The log directory of one worker count: ``LOGDIR/workers_N`` (a TensorBoard run);
    ``LOGDIR/workers_N_again`` for its second run."""
    return Path(logdir) / (f"workers_{workers}_again" if again else f"workers_{workers}")


def check_worker_counts(worker_counts: Sequence[int]) -> tuple[int, ...]:
    counts = tuple(int(n) for n in worker_counts)
    if not counts:
        raise UsageError("give at least one worker count, e.g. --worker-counts 1,2,4,8")
    if any(n < 0 for n in counts):
        raise UsageError(f"worker counts must be 0 or more, got {list(counts)}")
    if len(set(counts)) != len(counts):
        raise UsageError(f"each worker count once, please: got {list(counts)}")
    return tuple(sorted(counts))


def command_for(command: Sequence[str], workers: int) -> list[str]:
    """The command with ``{workers}`` replaced by the count (where it appears)."""
    return [arg.replace(PLACEHOLDER, str(workers)) for arg in command]


def run_sweep(
    command: Sequence[str],
    worker_counts: Sequence[int],
    options: CaptureOptions | None = None,
    timeout_s: float | None = None,
    *,
    tolerance: float = TOLERANCE,
    metric: str = UNTRACED,
    progress: ProgressCallback | None = None,
    retimes: int = RETIMES,
) -> SweepResult:
    """Capture and analyse ``command`` once per worker count; return the table and the choice.

    Each count is captured into ``<options.logdir>/workers_N/`` (the script's output in
    ``output.log`` there). When an argument of ``command`` contains ``{workers}`` the count is
    written into it; otherwise capture's Grain override (``CaptureOptions.workers``) sets it.
    A run that crashes, writes no trace, cannot be analysed or runs longer than ``timeout_s``
    (it is then terminated, and killed ``TIMEOUT_GRACE_S`` later) becomes a row saying so,
    and the sweep goes on. ``progress`` is called when a count starts, about every
    ``PROGRESS_EVERY_S`` while it runs (``run`` None) and when it ends. ``metric`` and
    ``tolerance`` decide the chosen count: by default (``untraced``) each run goes on after
    its window for as many steps and as long, untraced (capture's ``time_after``), and
    counts are compared by the time per step there, the step the user will get; else by the
    traced steps (``typical``, ``median`` or ``mean``). Compared untraced, up to
    ``retimes`` counts are then run a second time, into ``LOGDIR/workers_N_again/``: the
    one with the best figure, then the one chosen (where it was not timed again already),
    and the second run's figure replaces the first's (kept as ``first_untraced_ms``).

    Errors in the command, the options or the log directory raise
    :class:`~traceinspect.errors.TraceInspectError` before anything runs.
    """
    options = options or CaptureOptions(logdir=DEFAULT_LOGDIR, stop_after=True)
    if metric == UNTRACED:
        options = dataclasses.replace(options, time_after=True)
    options.check()
    parse_command(command)  # a bad command fails once, not once per count
    counts = check_worker_counts(worker_counts)
    if timeout_s is not None and timeout_s <= 0:
        raise UsageError(f"the timeout must be positive (seconds), got {timeout_s}")
    summarize_sweep([], tolerance=tolerance, metric=metric)  # bad settings fail before running
    if retimes < 0:
        raise UsageError(f"the counts to time again must be 0 or more, got {retimes}")
    placeholder = any(PLACEHOLDER in arg for arg in command)
    retimes = retimes if metric == UNTRACED else 0

    def one(workers: int, index: int, again: bool = False) -> SweepRun:
        # The counts are numbered among themselves, the second runs among themselves.
        total = retimes if again else len(counts)
        started = time.monotonic()
        tick: Callable[[], None] | None = None
        if progress is not None:
            tick = functools.partial(_tick, progress, workers, index, total, started, again)
            tick()
        run = _run_one(command, workers, options, timeout_s, placeholder, tick, again)
        if progress is not None:
            elapsed = time.monotonic() - started
            progress(SweepProgress(workers, index, total, run, elapsed, again))
        return run

    runs = [one(workers, index) for index, workers in enumerate(counts)]
    if retimes:
        runs = _time_again(runs, tolerance, retimes, one)
    return summarize_sweep(
        runs,
        tolerance=tolerance,
        metric=metric,
        command=tuple(command),
        logdir=str(Path(options.logdir)),
    )


def _time_again(
    runs: list[SweepRun], tolerance: float, retimes: int, one: Callable[[int, int, bool], SweepRun]
) -> list[SweepRun]:
    """The runs with up to ``retimes`` counts timed a second time (the best figure's, then
    the chosen one's; :data:`RETIMES` says why), each second figure in place of the first.
    Nothing is timed again when some measured run has no untraced figure (every count is
    then compared by its traced steps)."""
    if resolve_metric(runs, UNTRACED)[0] != UNTRACED:
        return runs
    by_count = {r.workers: r for r in runs}
    done: list[int] = []
    while len(done) < retimes:
        chosen, best = choose(by_count.values(), tolerance, UNTRACED)
        workers = next((w for w in (best, chosen) if w is not None and w not in done), None)
        if workers is None:
            break
        done.append(workers)
        first = by_count[workers]
        again = one(workers, len(done) - 1, True)
        if again.ok and again.untraced_ms is not None:
            by_count[workers] = dataclasses.replace(
                first,
                untraced_ms=again.untraced_ms,
                untraced_steps=again.untraced_steps,
                first_untraced_ms=first.untraced_ms,
            )
        else:
            why = again.message or again.status
            note = f"timed again: no figure ({why}); the first run's stands"
            message = f"{first.message}; {note}" if first.message else note
            by_count[workers] = dataclasses.replace(first, message=message)
    return [by_count[r.workers] for r in runs]


def _tick(
    progress: ProgressCallback,
    workers: int,
    index: int,
    total: int,
    started: float,
    again: bool = False,
) -> None:
    elapsed = time.monotonic() - started
    progress(SweepProgress(workers, index, total, elapsed_s=elapsed, again=again))


def _run_one(
    command: Sequence[str],
    workers: int,
    options: CaptureOptions,
    timeout_s: float | None,
    placeholder: bool,
    tick: Callable[[], None] | None = None,
    again: bool = False,
) -> SweepRun:
    logdir = run_dir_for(options.logdir, workers, again)
    try:
        logdir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CaptureError(
            f"cannot create '{logdir}' ({exc.strerror or exc}): choose another --logdir"
        ) from None
    run_options = dataclasses.replace(
        options,
        logdir=str(logdir),
        workers=None if placeholder else workers,
        kill_grace_s=min(options.kill_grace_s, TIMEOUT_GRACE_S),
    )
    log_path = logdir / LOG_NAME
    outcome = _capture_with_timeout(
        command_for(command, workers) if placeholder else list(command),
        run_options,
        timeout_s,
        log_path,
        tick,
    )
    return _judge(workers, outcome, timeout_s, log_path)


def _capture_with_timeout(
    command: list[str],
    options: CaptureOptions,
    timeout_s: float | None,
    log_path: Path,
    tick: Callable[[], None] | None = None,
) -> _Outcome:
    """run_capture in a process of its own session, so the whole run can be stopped.

    capture's parent waits on the script in its main thread with signal handlers of its
    own; running it in a separate process (rather than a thread) lets a SIGTERM go through
    that relay, so the script still saves its trace, and lets us kill every process of the
    run (Grain workers included) through the session if it does not end.
    """
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=".traceinspect-sweep-", dir=options.logdir) as tmp:
        result_path = Path(tmp, "result.json")
        config_path = Path(tmp, "config.json")
        config = {
            "command": command,
            "options": dataclasses.asdict(options),
            "result_path": str(result_path),
        }
        config_path.write_text(json.dumps(config), encoding="utf-8")
        argv = [sys.executable, "-c", _BOOTSTRAP, _PACKAGE_PARENT, str(config_path)]
        with log_path.open("wb") as log:
            try:
                proc = start_in_own_session(argv, log)
            except OSError as exc:
                raise CaptureError(
                    f"cannot start {sys.executable!r}: {exc.strerror or exc}"
                ) from None
        timed_out = _wait(proc, timeout_s, options.kill_grace_s, tick)
        elapsed = time.monotonic() - started
        try:
            report: dict[str, Any] = json.loads(result_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            tail = log_tail(log_path)
            return _Outcome(
                None,
                f"the capture process ended with code {proc.returncode}"
                + (f": {tail}" if tail else ""),
                timed_out,
                elapsed,
            )
    if "error" in report:
        return _Outcome(None, str(report["error"]), timed_out, elapsed)
    raw = report["capture"]
    capture = CaptureResult(
        **{
            **raw,
            "trace_paths": tuple(raw["trace_paths"]),
            "partial_reasons": tuple(raw["partial_reasons"]),
        }
    )
    return _Outcome(capture, None, timed_out, elapsed)


def _wait(
    proc: subprocess.Popen[bytes],
    timeout_s: float | None,
    grace_s: float,
    tick: Callable[[], None] | None = None,
) -> bool:
    """Wait for the capture process, calling ``tick`` every ``PROGRESS_EVERY_S``; stop it at
    the timeout or on Ctrl-C. True if timed out."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    try:
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(proc.args, timeout_s or 0.0)
            step = left if tick is None else min(PROGRESS_EVERY_S, left or PROGRESS_EVERY_S)
            try:
                proc.wait(timeout=step)
                return False
            except subprocess.TimeoutExpired:
                if deadline is not None and time.monotonic() >= deadline:
                    raise
                if tick is not None:
                    tick()
    except subprocess.TimeoutExpired:
        _stop(proc, grace_s)
        return True
    except KeyboardInterrupt:
        # The run is in a session of its own, so the terminal's Ctrl-C did not reach it.
        _stop(proc, grace_s)
        raise


def _stop(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGTERM the capture process (it passes it on to the script), then kill the session,
    and whatever the killed script left behind (Grain worker processes)."""
    stop_session(proc, grace_s + _WORKER_SLACK_S)


def _observed_workers(capture: CaptureResult) -> int | None:
    grain = capture.record.grain
    return grain.worker_count if grain is not None else None


def _judge(workers: int, outcome: _Outcome, timeout_s: float | None, log_path: Path) -> SweepRun:
    """The row for one count: the analysis of its trace, or what went wrong."""
    elapsed = round(outcome.elapsed_s, 3)
    capture = outcome.capture
    common: dict[str, Any] = {"workers": workers, "elapsed_s": elapsed}
    if capture is not None:
        common |= {
            "exit_code": capture.exit_code,
            "observed_workers": _observed_workers(capture),
            "run_dir": capture.run_dir,
        }
    if outcome.timed_out:
        return SweepRun(
            status=TIMEOUT,
            message=f"still running after {timeout_s:g} s: stopped (output in {log_path})",
            **common,
        )
    if capture is None:
        return SweepRun(status=ERROR, message=outcome.error or "capture failed", **common)
    if not capture.trace_paths:
        tail = log_tail(log_path)
        reason = tail or "; ".join(capture.partial_reasons) or "no trace was written"
        if capture.exit_code != 0:
            return SweepRun(
                status=CRASHED,
                message=f"exit code {capture.exit_code}: {reason} (output in {log_path})",
                **common,
            )
        return SweepRun(
            status=NO_TRACE,
            message=f"no trace: {'; '.join(capture.partial_reasons) or reason}",
            **common,
        )
    try:
        numbers = _analyse(capture.run_dir)
    except TraceInspectError as exc:
        return SweepRun(status=UNANALYSABLE, message=str(exc), **common)
    pace = capture.record.untraced_pace()
    if pace is not None:
        numbers |= {"untraced_ms": round(pace.mean_ms, 4), "untraced_steps": pace.count}
    notes = []
    observed = common["observed_workers"]
    if observed is None and workers > 0:
        notes.append("no Grain worker count was seen in the script; did the value reach it?")
    elif observed is not None and observed != workers:
        notes.append(f"Grain ran with {observed} workers, not {workers}")
    if capture.exit_code != 0:
        notes.append(f"the script ended with exit code {capture.exit_code} after the window")
    return SweepRun(status=OK, message="; ".join(notes), **common, **numbers)


def _analyse(run_dir: str) -> dict[str, Any]:
    from traceinspect.analysis.analyze import analyze
    from traceinspect.trace import load

    analysis = analyze(load(run_dir, use_cache=False))
    workers_advice = next(
        (r for r in analysis.recommendations if r.kind == "grain_worker_count"), None
    )
    steps = analysis.steps
    completed = (analysis.window or {}).get("traced_completed_ms")
    return {
        # analyze's own figures of the traced steps, not computed again here.
        "median_ms": steps.median_ms,
        "p90_ms": steps.p90_ms,
        "p10_ms": steps.p10_ms if steps.count else None,
        # Time per completed step (the device's throughput) where capture stamped when each
        # step's work finished, else the traced steps' mean host time.
        "mean_ms": max(completed or 0.0, steps.mean_ms) or None,
        "input_wait_ms": analysis.input_ms_per_step,
        "idle_fractions": dict(analysis.cause_fractions),
        "verdict": analysis.verdict,
        "steps": analysis.steps.count,
        "input_stages": analysis.input_stages,
        "predicted_workers": None if workers_advice is None else workers_advice.value,
        "predicted_step_ms": None if workers_advice is None else workers_advice.expected_step_ms,
    }
