"""A phase's figure (:class:`PhaseTiming`) from its run's report, and what counts as busy.

Each run's figure is the mean host time per step (per batch for the loader) over capture's
steady-state window: once block means of the step times agree (``_child.steady._Steady``),
``steps`` steps (default 20) and at least 1 s. The mean, not the median: ``mp_prefetch``
delivers in bursts, and the mean is the throughput: the step time that
``analysis.steps.step_time_ms`` gives a bursty run. Every phase takes it, so that the three
figures are one quantity and a cost every N steps (a read, a stall) counts in the real step.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from traceinspect import sidecar as SC
from traceinspect.capture import PhaseRun
from traceinspect.errors import IsolateError
from traceinspect.thresholds import OTHERS_LOAD

# Fewer timed steps than this make no figure.
MIN_TIMED = 3
# Other processes keeping more than this share of the machine's cores busy during a phase's
# window make it run again (TRIES in all; a busy run never counts over a quiet one), and a note:
# the script competed with them for the cores (on XLA's CPU backend its "device" too). On
# this project's shared 2-core machine, quiet windows measured 0.01-0.14 cores of others'
# work (the kernel, idle tools), busy ones 0.95-1.02, which slowed the same step 1.7-1.9x
# (the phases of sample_traces/scenarios/family/isolate_tolerance.json). The same bound as
# capture's: the registry's OTHERS_LOAD.
BUSY_OTHERS = OTHERS_LOAD


@dataclasses.dataclass(frozen=True)
class PhaseTiming:
    """One phase's figure: the mean host time per step (per batch for the loader)."""

    phase: str
    mean_ms: float
    median_ms: float
    #: Steps (batches) timed.
    count: int
    #: ``steady`` (the steady-state window), ``time_bound`` (not steady by its share of the
    #: phase's time limit: timed anyway), or ``partial`` (the phase ended before a full
    #: window: what it had).
    how: str
    #: Why the figure is not a full steady window (None when it is).
    note: str | None
    #: How steps were found (``grain``, ``annotation``, ``jit``).
    step_source: str | None
    step_source_detail: str | None
    #: Cores other processes of the machine kept busy over the window, on average, and the
    #: machine's cores.
    others_cpu_cores: float | None
    cpu_count: int | None
    elapsed_s: float
    #: The script's output in this phase (None when it was not kept).
    log_path: str | None
    #: Runs of this phase (one per round, more when other processes kept the machine busy);
    #: the figure is the best quiet one.
    tries: int = 1
    #: ``completed``: time per step from when each step's device work finished (the
    #: device's throughput); ``host``: from the host's step starts (the loader's batches, or
    #: a loop whose jitted calls returned nothing to wait on).
    timed_by: str = "host"
    #: Every run's figure that competed for this one (the quiet runs, else all), lowest
    #: first: the figure is the first.
    runs_ms: tuple[float, ...] = ()
    #: The process's CPU time per timed step (ms; its threads together, on XLA's CPU
    #: backend the device's work included), or None when the phase did not clock it.
    cpu_ms: float | None = None

    @property
    def spread(self) -> float | None:
        """(highest - lowest) / lowest of the runs' figures; None with one run."""
        if len(self.runs_ms) < 2 or self.runs_ms[0] <= 0:
            return None
        return (self.runs_ms[-1] - self.runs_ms[0]) / self.runs_ms[0]

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["mean_ms"] = round(self.mean_ms, 3)
        out["median_ms"] = round(self.median_ms, 3)
        out["runs_ms"] = [round(v, 3) for v in self.runs_ms]
        spread = self.spread
        out["spread"] = None if spread is None else round(spread, 3)
        return out


def phase_timing(run: PhaseRun, *, kept_log: bool = True) -> PhaseTiming:
    """A phase's figure from its report: the steady window's steps, else what it had."""
    record = run.record
    if record is None:
        raise IsolateError(f"the {run.phase} phase wrote no report")
    phase = _phase(run)
    window = record.window
    ended_early = phase.get("ended_early")
    timed = {s.index for s in record.steps if s.traced and s.wall_ms is not None}
    walls = [s.wall_ms for s in record.steps if s.traced and s.wall_ms is not None]
    notes: list[str] = []
    how = "steady"
    if window is not None and window.rule == "time_bound" and window.reason:
        how = "time_bound"
        notes.append(window.reason)
    if len(walls) < MIN_TIMED or (window is not None and not window.complete):
        # The phase ended before a full window (its time limit, the script or the iterator
        # ended): the settled steps it has, the last blocks of the steady-state rule.
        how = "partial"
        blocks = [b for b in phase.get("blocks", []) if len(b) == 3]
        first = int(blocks[-3:][0][0]) if blocks else 1
        if len(walls) < MIN_TIMED:
            timed = {s.index for s in record.steps if s.index >= first and s.wall_ms is not None}
            walls = [s.wall_ms for s in record.steps if s.index in timed and s.wall_ms is not None]
        ended = ended_early or f"the script {record.data.get('ended') or 'ended'}"
        notes.append(
            f"{ended} before a full window: timed {len(walls)} step(s) "
            + ("of the last blocks" if blocks else "after the first")
            + (" (not steady)" if window is None or window.first_step is None else "")
        )
    others, cpus = phase.get("others_cpu_cores"), phase.get("cpu_count")
    if others is not None and cpus and others > BUSY_OTHERS * cpus:
        notes.append(
            f"other processes kept {others:.1f} of the machine's {cpus} cores busy during "
            "its window: the figure may be high; run again on a quiet machine"
        )
    if len(walls) < MIN_TIMED:
        seen = len(record.steps)
        raise IsolateError(
            f"the {run.phase} phase timed no steady steps ({seen} step(s) seen in "
            f"{run.elapsed_s:.0f} s): give the script more steps, or a longer --phase-timeout"
        )
    pace = SC.step_pace(record.steps, lambda s: s.index in timed, min_completed=MIN_TIMED)
    if pace is None:  # not reached: MIN_TIMED walls at least
        raise IsolateError(f"the {run.phase} phase timed no steps")
    clocked = [s.cpu_ms for s in record.steps if s.index in timed and s.cpu_ms is not None]
    cpu_ms = sum(clocked) / len(clocked) if len(clocked) >= MIN_TIMED else None
    return PhaseTiming(
        phase=run.phase,
        mean_ms=pace.mean_ms,
        median_ms=pace.median_ms,
        count=pace.count,
        timed_by="completed" if pace.how == "completed" else "host",
        how=how,
        note="; ".join(notes) or None,
        step_source=record.step_source,
        step_source_detail=record.step_source_detail,
        others_cpu_cores=others,
        cpu_count=cpus,
        elapsed_s=run.elapsed_s,
        log_path=run.log_path if kept_log else None,
        cpu_ms=cpu_ms,
    )


def _phase(run: PhaseRun) -> SC.PhaseJSON | dict[str, Any]:
    phase = run.report.get("phase") if run.report is not None else None
    return phase if phase is not None else {}


def _busy(timing: PhaseTiming) -> float:
    """The share of the machine's cores other processes kept busy over the phase's window
    (0 when unknown)."""
    if timing.others_cpu_cores is None or not timing.cpu_count:
        return 0.0
    return timing.others_cpu_cores / timing.cpu_count
