"""Running the script's phases in turn (:func:`run_isolate`), again while other processes
keep the machine busy or the runs disagree, and the progress of each run.

Is it the input? ``traceinspect isolate``: the MaxText performance guide's manual recipe,
run on the user's script unchanged, and its verdict.

Three runs of the script, each under capture's child with host timing only (no profiler,
:func:`traceinspect.capture.run_phase`), each stopped once its steady steps are timed:

- **target**: the outermost Grain ``next()`` of the training loop returns the first batch it
  drew, every time. The step with input costing nothing: the pace the pipeline must beat.
- **loader**: the first such ``next()`` drains its iterator, batch after batch, and never
  returns to the loop: the script's own pipeline (its workers, threads, buffers) alone.
- **real**: the script as it is.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from traceinspect.capture import PhaseRun, log_tail, parse_command, run_phase, wait_for_quiet
from traceinspect.errors import IsolateError, UsageError
from traceinspect.isolate.judge import TOLERANCE
from traceinspect.isolate.settle import (
    EXTRA_ROUNDS,
    ROUNDS,
    Isolation,
    _best_evidence,
    _competing,
    _counted,
    _Run,
    settled,
    summarize,
)
from traceinspect.isolate.text import PHASES, TARGET
from traceinspect.isolate.timing import BUSY_OTHERS, MIN_TIMED, _busy, _phase, phase_timing

DEFAULT_PHASE_TIMEOUT_S = 300.0
# Runs of a phase in a round at most: a run that other processes kept busy (BUSY_OTHERS)
# runs again, up to this many times in all.
TRIES = 3
# Before running a phase again, wait at most this long for other processes to quieten (below
# BUSY_OTHERS): a run into a busy machine is a run to repeat.
QUIET_WAIT_S = 30.0


@dataclasses.dataclass(frozen=True)
class IsolateProgress:
    """A phase run starts (``mean_ms`` None) or has its figure: run ``index`` (from 0) of
    the ``total`` planned so far (rounds added while the verdict is not settled raise it),
    its ``attempt``-th try in its round (more when other processes kept the machine busy)."""

    phase: str
    index: int
    total: int
    attempt: int
    mean_ms: float | None = None
    #: The share of the machine's cores other processes kept busy in its window.
    busy: float | None = None


ProgressCallback = Callable[[IsolateProgress], None]


def run_isolate(
    command: Sequence[str],
    *,
    phase_timeout_s: float = DEFAULT_PHASE_TIMEOUT_S,
    steps: int | None = None,
    workers: int | None = None,
    logdir: str | Path | None = None,
    tolerance: float = TOLERANCE,
    rounds: int = ROUNDS,
    extra_rounds: int = EXTRA_ROUNDS,
    tries: int = TRIES,
    progress: ProgressCallback | None = None,
) -> Isolation:
    """Run ``command`` (a Python script or module using a Grain iterator) as the target,
    loader and real phases, ``rounds`` times in turn, and judge.

    Each phase's figure is its best run (the lowest mean; noise on a shared machine is
    upward), among the runs other processes left quiet when there are any. A run whose
    window other processes kept busy (more than ``BUSY_OTHERS`` of the machine's cores)
    runs again, up to ``tries`` times in all, each time once they leave the machine quiet
    (waiting at most ``QUIET_WAIT_S``). The output of the run that counts goes to
    ``<logdir>/<phase>.log``, the other runs' to ``<phase>-run<N>.log`` (a temporary folder,
    removed, when ``logdir`` is None). Raises :class:`~traceinspect.errors.IsolateError`
    when a phase crashes, the script draws no Grain batch, or a phase times no step;
    ``CaptureError`` for a command that is not a Python script or module.
    """
    if phase_timeout_s <= 0:
        raise UsageError(f"--phase-timeout must be positive (seconds), got {phase_timeout_s:g}")
    if steps is not None and steps < MIN_TIMED:
        raise UsageError(f"--steps must be at least {MIN_TIMED}, got {steps}")
    if tolerance < 1:
        raise UsageError(f"the tolerance is a factor of at least 1, got {tolerance:g}")
    if rounds < 1:
        raise UsageError(f"--rounds must be at least 1, got {rounds}")
    if tries < 1:
        raise UsageError(f"--tries must be at least 1, got {tries}")
    if extra_rounds < 0:
        raise UsageError(f"extra rounds must be 0 or more, got {extra_rounds}")
    parse_command(command)  # a bad command fails before anything runs
    kept = logdir is not None
    with tempfile.TemporaryDirectory(prefix="traceinspect-isolate-") as scratch:
        folder = Path(logdir) if logdir is not None else Path(scratch)
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(
                f"cannot create '{folder}' ({exc.strerror or exc}): choose another --logdir"
            ) from None
        done: dict[str, list[_Run]] = {phase: [] for phase in PHASES}
        waited_s = 0.0
        cores = os.cpu_count() or 1
        # Once a wait for a quiet machine runs out, the load is taken as lasting: runs are
        # not repeated for it any more (each would be as busy), and every phase shares it.
        lasting_load = False
        planned = rounds
        index = 0
        while index < planned * len(PHASES):
            phase = PHASES[index % len(PHASES)]
            for attempt in range(1, tries + 1):
                if attempt > 1:
                    if lasting_load:
                        break
                    waited = wait_for_quiet(BUSY_OTHERS * cores, QUIET_WAIT_S)
                    waited_s += waited
                    if waited >= QUIET_WAIT_S:
                        lasting_load = True
                        break
                total = planned * len(PHASES)
                if progress is not None:
                    progress(IsolateProgress(phase, index, total, attempt))
                log = folder / f"{phase}-run{len(done[phase]) + 1}.log"
                run = run_phase(
                    command,
                    phase,
                    timeout_s=phase_timeout_s,
                    log_path=log,
                    steps=steps,
                    workers=workers,
                )
                timing = phase_timing(_phase_or_error(run, kept=kept))
                busy = _busy(timing)
                done[phase].append(_Run(run, timing.mean_ms, busy))
                if progress is not None:
                    progress(IsolateProgress(phase, index, total, attempt, timing.mean_ms, busy))
                if busy <= BUSY_OTHERS:
                    break
            index += 1
            last_of_round = index == planned * len(PHASES)
            if (
                last_of_round
                and planned < rounds + extra_rounds
                and not settled(done, tolerance, _best_evidence(done))
            ):
                planned += 1
        counted = {phase: _counted(runs, folder) for phase, runs in done.items()}
        busy_runs = {p: sum(r.busy > BUSY_OTHERS for r in runs) for p, runs in done.items()}
        result = summarize(
            counted,
            command=tuple(command),
            tolerance=tolerance,
            kept_logs=kept,
            tries={phase: len(runs) for phase, runs in done.items()},
            runs_ms={phase: _competing(runs) for phase, runs in done.items()},
        )
    notes = tuple(
        f"{phase}: {n} of its runs had other processes keeping the machine busy"
        for phase, n in busy_runs.items()
        if n
    )
    if lasting_load:
        notes += (
            "other processes kept the machine busy throughout: the figures are those of a "
            "loaded machine, which every phase shared",
        )
    if waited_s >= 1.0:
        notes += (f"waited {waited_s:.0f} s in all for other processes to leave the machine quiet",)
    if planned > rounds:
        notes += (
            f"ran {planned} rounds: after {rounds} the best runs and the next best disagreed "
            "on the verdict",
        )
    if notes:
        result = dataclasses.replace(result, notes=(*result.notes, *notes))
    return result


def _phase_or_error(run: PhaseRun, *, kept: bool) -> PhaseRun:
    """The run, or the one-line error that says why its phase gave no figure."""
    record = run.record
    where = f" (its output: {run.log_path})" if kept else ""
    crashed = run.exit_code != 0 and not run.stopped
    stopped_by_us = bool(run.report and run.report.get("stopped_by_traceinspect"))
    if record is None or (crashed and not stopped_by_us):
        tail = log_tail(run.log_path)
        how = f"was killed by {run.exit_signal}" if run.exit_signal else "exited"
        raise IsolateError(
            f"the {run.phase} phase: the script {how} with code {run.exit_code} before its "
            f"steps were timed" + (f": {tail}" if tail else "") + where
        )
    if run.phase == TARGET and _phase(run).get("batches_drawn", 0) == 0:
        found = record.step_source_detail or "no steps found"
        raise IsolateError(
            "isolation needs a Grain iterator: the script drew no batch from a Grain "
            f"iterator on its main thread ({found}); isolate times scripts whose loop feeds "
            "on grain's DatasetIterator or DataLoader"
        )
    return run
