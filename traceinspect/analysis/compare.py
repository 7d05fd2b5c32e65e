"""Before and after a change: step time, device busy time, idle time by cause and verdict.

Idle time is compared per step (summed over a run's steps, divided by their count), so
two captures of different lengths compare directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from traceinspect.analysis.result import Analysis
from traceinspect.analysis.steps import step_time_ms
from traceinspect.vocabulary import CAUSES

# A change in median step time smaller than this share of "before" is called "about the
# same": one capture per side says nothing about run-to-run noise, so stay modest.
SAME_WITHIN = 0.01


@dataclass(frozen=True)
class RunSummary:
    """One side of a :class:`Comparison`: the numbers of one :class:`Analysis`."""

    path: str
    backend: str
    steps: int
    median_ms: float
    p90_ms: float
    #: What ``analyze`` calls the run's step: the mean when steps come in bursts.
    mean_ms: float
    bursty: bool
    verdict: str
    busy_fraction: float
    device_busy_ms_per_step: float
    idle_ms_per_step: float
    idle_by_cause_ms_per_step: dict[str, float]

    @classmethod
    def of(cls, a: Analysis) -> RunSummary:
        n = max(a.steps.count, 1)
        by_cause: dict[str, float] = {c: round(a.idle_by_cause_ms[c] / n, 4) for c in CAUSES}
        return cls(
            path=a.path,
            backend=a.backend,
            steps=a.steps.count,
            median_ms=a.steps.median_ms,
            p90_ms=a.steps.p90_ms,
            mean_ms=a.steps.mean_ms,
            bursty=a.steps.bursty,
            verdict=a.verdict,
            busy_fraction=round(a.busy_fraction, 4),
            device_busy_ms_per_step=a.device_busy_ms_per_step,
            idle_ms_per_step=round(sum(a.idle_by_cause_ms[c] for c in CAUSES) / n, 4),
            idle_by_cause_ms_per_step=by_cause,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "backend": self.backend,
            "steps": self.steps,
            "median_ms": self.median_ms,
            "p90_ms": self.p90_ms,
            "mean_ms": self.mean_ms,
            "bursty": self.bursty,
            "verdict": self.verdict,
            "busy_fraction": self.busy_fraction,
            "device_busy_ms_per_step": self.device_busy_ms_per_step,
            "idle_ms_per_step": self.idle_ms_per_step,
            "idle_by_cause_ms_per_step": dict(self.idle_by_cause_ms_per_step),
        }


@dataclass(frozen=True)
class Comparison:
    """The result of :func:`compare`; ``to_dict()`` is what ``compare --json`` prints.

    Changes are ``after - before``: negative step time and idle changes are improvements.
    """

    before: RunSummary
    after: RunSummary
    median_change_ms: float
    median_change_pct: float
    p90_change_ms: float
    p90_change_pct: float
    busy_fraction_change: float
    device_busy_change_ms_per_step: float
    idle_change_ms_per_step: float
    idle_by_cause_change_ms_per_step: dict[str, float]
    finding: str
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "before": self.before.to_dict(),
            "after": self.after.to_dict(),
            "change": {
                "median_ms": self.median_change_ms,
                "median_pct": self.median_change_pct,
                "p90_ms": self.p90_change_ms,
                "p90_pct": self.p90_change_pct,
                "busy_fraction": self.busy_fraction_change,
                "device_busy_ms_per_step": self.device_busy_change_ms_per_step,
                "idle_ms_per_step": self.idle_change_ms_per_step,
                "idle_by_cause_ms_per_step": dict(self.idle_by_cause_change_ms_per_step),
            },
            "finding": self.finding,
            "notes": list(self.notes),
        }


def _pct_change(before: float, after: float) -> float:
    return round((after - before) / before * 100, 2) if before else 0.0


def compare(before: Analysis, after: Analysis) -> Comparison:
    """Compare two analyses of the same training loop, before and after a change."""
    b, a = RunSummary.of(before), RunSummary.of(after)
    idle_change: dict[str, float] = {
        c: round(a.idle_by_cause_ms_per_step[c] - b.idle_by_cause_ms_per_step[c], 4) for c in CAUSES
    }
    notes: list[str] = []
    if b.backend != a.backend:
        notes.append(
            f"The runs use different backends ({b.backend} before, {a.backend} after): "
            "step times are not comparable as a measure of one change."
        )
    if before.steps.source != after.steps.source:
        notes.append(
            f"Steps were found differently (before: {before.steps.source}; after: "
            f"{after.steps.source}), so a step may not mean the same work in both."
        )
    return Comparison(
        before=b,
        after=a,
        median_change_ms=round(a.median_ms - b.median_ms, 4),
        median_change_pct=_pct_change(b.median_ms, a.median_ms),
        p90_change_ms=round(a.p90_ms - b.p90_ms, 4),
        p90_change_pct=_pct_change(b.p90_ms, a.p90_ms),
        busy_fraction_change=round(a.busy_fraction - b.busy_fraction, 4),
        device_busy_change_ms_per_step=round(
            a.device_busy_ms_per_step - b.device_busy_ms_per_step, 4
        ),
        idle_change_ms_per_step=round(a.idle_ms_per_step - b.idle_ms_per_step, 4),
        idle_by_cause_change_ms_per_step=idle_change,
        finding=_finding(b, a),
        notes=tuple(notes),
    )


def _finding(b: RunSummary, a: RunSummary) -> str:
    """One sentence: how step time moved, the biggest mover behind it, and the verdicts.

    Step time is the figure ``analyze`` gives each run: the median, or the mean (throughput)
    when either run's steps come in bursts (a median of bursty steps is a fast step of a
    burst), the same figure on both sides; where the median and the p90 move in opposite
    directions, both are quoted."""
    bursty = a.bursty or b.bursty
    before = step_time_ms(b.median_ms, b.mean_ms, bursty)
    after = step_time_ms(a.median_ms, a.mean_ms, bursty)
    figure = ", the mean: steps come in bursts" if bursty else ""
    share = (after - before) / before if before else 0.0
    times = f"{before:,.2f} -> {after:,.2f} ms{figure}"
    if abs(share) < SAME_WITHIN:
        head = f"Step time is about the same ({times}, {share:+.1%})"
    else:
        head = f"Step time {'fell' if share < 0 else 'rose'} {abs(share):.0%} ({times})"
    p50 = a.median_ms - b.median_ms
    p90 = a.p90_ms - b.p90_ms
    if p50 * p90 < 0:
        moved_50 = abs(_pct_change(b.median_ms, a.median_ms))
        moved_90 = abs(_pct_change(b.p90_ms, a.p90_ms))
        head += (
            f"; the median {'fell' if p50 < 0 else 'rose'} {moved_50:.0f}% "
            f"while the p90 {'fell' if p90 < 0 else 'rose'} {moved_90:.0f}%"
        )
    # The biggest change per step among the idle causes and the device's own work.
    movers = {
        f"{c} idle time": (b.idle_by_cause_ms_per_step[c], a.idle_by_cause_ms_per_step[c])
        for c in CAUSES
    }
    movers["device work"] = (b.device_busy_ms_per_step, a.device_busy_ms_per_step)
    what, (x, y) = max(movers.items(), key=lambda kv: abs(kv[1][1] - kv[1][0]))
    if round(abs(y - x), 2) == 0:
        why = "idle time by cause and device work per step did not change"
    else:
        why = f"{what} went from {x:,.2f} to {y:,.2f} ms/step"
    if b.verdict == a.verdict:
        verdicts = f"verdict stays {a.verdict}"
    else:
        verdicts = f"verdict {b.verdict} -> {a.verdict}"
    return f"{head}: {why}; {verdicts}."
