"""Before and after a change: step time, the per-step ledger's parts, and the verdict.

The ledger (``analysis/measure.py``) splits each step's wall time into parts that add up to
it (``analysis/invariants.py``): the device's busy time and its idle time by cause. Each
part is compared per step (summed over a run's steps, divided by their count), so two
captures of different lengths compare directly, and the part that moved most is named.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from traceinspect import schema as S
from traceinspect.analysis.result import Analysis
from traceinspect.analysis.steps import step_time_ms
from traceinspect.vocabulary import CAUSES

# A change in median step time smaller than this share of "before" is called "about the
# same": one capture per side says nothing about run-to-run noise, so stay modest.
SAME_WITHIN = 0.01

#: The ledger's columns compared, the step's wall time first, then its parts, which add up
#: to it: the device's busy time, then its idle time by cause.
LEDGER: Final = (S.WALL_NS, S.BUSY_NS, *(S.idle_cause_ns(c) for c in CAUSES))


def ledger_part(column: str) -> str:
    """The key of a ledger column in ``ledger_ms_per_step``: its name less ``_ns``
    (``wall``, ``busy``, ``idle_input``, ...)."""
    return column.removesuffix("_ns")


def ledger_ms_per_step(a: Analysis) -> dict[str, float]:
    """Each of the ledger's columns in ms per step: its sum over the steps over their count
    (``wall`` is the mean step, the throughput)."""
    n = max(a.steps.count, 1)
    columns = a.per_step_columns
    return {ledger_part(c): round(float(columns[c].sum()) / n / 1e6, 4) for c in LEDGER}


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
    #: The ledger, ms per step: ``wall`` and the parts that add up to it (:data:`LEDGER`).
    ledger_ms_per_step: dict[str, float]
    #: What the run's detectors found beside the window's rows (a stall spread over the
    #: run, a callback, the loop's CPU), ms per step (``Analysis.run_parts``).
    run_parts_ms_per_step: dict[str, float] = field(default_factory=dict)

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
            ledger_ms_per_step=ledger_ms_per_step(a),
            run_parts_ms_per_step={c: p["ms_per_step"] for c, p in a.run_parts.items()},
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
            "ledger_ms_per_step": dict(self.ledger_ms_per_step),
            "run_parts_ms_per_step": dict(self.run_parts_ms_per_step),
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
    #: Each ledger column's change, ms per step (after - before).
    ledger_change_ms_per_step: dict[str, float] = field(default_factory=dict)
    #: The part of the ledger (not the wall) whose time per step changed most (None: none
    #: changed at 0.01 ms).
    moved_most: str | None = None
    #: Each run part's change, ms per step (after - before; 0 where a side has none).
    run_parts_change_ms_per_step: dict[str, float] = field(default_factory=dict)

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
                "ledger_ms_per_step": dict(self.ledger_change_ms_per_step),
                "moved_most": self.moved_most,
                "run_parts_ms_per_step": dict(self.run_parts_change_ms_per_step),
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
    ledger = {
        part: round(a.ledger_ms_per_step[part] - b.ledger_ms_per_step[part], 4)
        for part in b.ledger_ms_per_step
    }
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
        ledger_change_ms_per_step=ledger,
        moved_most=_moved_most(b, a),
        run_parts_change_ms_per_step=_run_parts_change(b, a),
    )


def _run_parts_change(b: RunSummary, a: RunSummary) -> dict[str, float]:
    """Each run part's change, ms per step; a part one side lacks counts 0 there."""
    before, after = b.run_parts_ms_per_step, a.run_parts_ms_per_step
    return {
        part: round(after.get(part, 0.0) - before.get(part, 0.0), 4)
        for part in sorted({*before, *after})
    }


def _moved_most(b: RunSummary, a: RunSummary) -> str | None:
    """The ledger's part (not the wall) whose time per step changed most, where it changed
    at the 0.01 ms a step the table shows."""
    parts = [p for p in b.ledger_ms_per_step if p != ledger_part(S.WALL_NS)]
    if not parts:
        return None
    part = max(parts, key=lambda p: abs(a.ledger_ms_per_step[p] - b.ledger_ms_per_step[p]))
    moved = abs(a.ledger_ms_per_step[part] - b.ledger_ms_per_step[part])
    return part if round(moved, 2) > 0 else None


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
    part = _moved_most(b, a)
    if part is not None:
        x, y = b.ledger_ms_per_step[part], a.ledger_ms_per_step[part]
        why = f"{_PART_WORDS.get(part, part)} went from {x:,.2f} to {y:,.2f} ms/step"
    else:
        why = "device busy time and idle time by cause per step did not change"
    if b.verdict == a.verdict:
        verdicts = f"verdict stays {a.verdict}"
    else:
        verdicts = f"verdict {b.verdict} -> {a.verdict}"
    return f"{head}: {why}; {verdicts}."


#: The ledger's parts in words (``busy``, ``idle_<cause>``).
_PART_WORDS: Final = {
    ledger_part(S.BUSY_NS): "device busy time",
    **{ledger_part(S.idle_cause_ns(c)): f"{c} idle time" for c in CAUSES},
}
