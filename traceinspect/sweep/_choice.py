"""The choice of a worker count from the runs: the tolerance, the step time compared, and
analyze's prediction from each run against the count the sweep measured."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from traceinspect.sweep._runs import TYPICAL, UNTRACED, SweepRun

if TYPE_CHECKING:
    from traceinspect.sweep._summary import SweepResult

# Within 5% of the best median step time counts as "as fast": step times of repeated runs
# vary by a few percent on a shared host, and fewer workers save CPU and RAM.
TOLERANCE = 0.05

#: A prediction agrees with the measured knee when it lies in [knee, knee + this].
AGREES_ABOVE_KNEE = 2


def choose(
    runs: Iterable[SweepRun], tolerance: float = TOLERANCE, metric: str = TYPICAL
) -> tuple[int | None, int | None]:
    """(chosen, best): the smallest count within ``tolerance`` of the best step time, and
    the count with the best step time (the smaller one on a tie). Failed runs never count."""
    timed = sorted(
        ((r.workers, t) for r in runs if r.ok and (t := r.step_ms(metric)) is not None and t > 0),
    )
    if not timed:
        return None, None
    best_workers, best_ms = min(timed, key=lambda wt: (wt[1], wt[0]))
    # A hair of slack so that "exactly 5% slower" survives float rounding.
    limit = best_ms * (1 + tolerance) * (1 + 1e-12)
    chosen = next(workers for workers, t in timed if t <= limit)
    return chosen, best_workers


def resolve_metric(runs: Sequence[SweepRun], metric: str) -> tuple[str, str | None]:
    """The step time to compare by: ``metric``, unless it is ``untraced`` and a measured run
    has no untraced steps (every run is then compared by the typical traced step, one
    quantity for all), with the sentence that says so."""
    if metric != UNTRACED:
        return metric, None
    missing = [r.workers for r in runs if r.ok and r.untraced_ms is None]
    if not missing:
        return metric, None
    counts = ", ".join(map(str, missing))
    return TYPICAL, (
        f"the run(s) at {counts} worker(s) timed no steps after the trace (the script ended "
        "before it was steady again and had run as many steps as the trace held, or the "
        "sweep was made by an older version), so every count is compared by its traced step "
        "time, which the profiler slows; give the script more steps to compare counts "
        "without it"
    )


def prediction_vs_measured(result: SweepResult) -> str | None:
    """A line on ``analyze``'s prediction from each run against the count the sweep
    measured, and why they differ where they do (None when no run predicted a count)."""
    predicted = [
        (r.workers, r.predicted_workers, r.predicted_step_ms)
        for r in result.runs
        if r.ok and r.predicted_workers is not None
    ]
    if result.chosen is None or not predicted:
        return None
    knee = result.chosen
    each = ", ".join(
        f"{w} -> {p}" + (f" ({ms:.2f} ms)" if ms is not None else "") for w, p, ms in predicted
    )
    off = [(w, p) for w, p, _ in predicted if not knee <= p <= knee + AGREES_ABOVE_KNEE]
    head = f"analyze, from each run alone (workers -> count, expected step): {each}"
    if not off:
        return f"{head}; within [{knee}, {knee + AGREES_ABOVE_KNEE}] of the measured {knee}."
    why = (
        "the sweep measured each count's step; analyze predicts from one run (a batch's cost "
        "to a worker against the device's work, with 25% headroom, within the cores), which "
        "does not see the workers' competition for the cores with the step and with each "
        "other: the measured count wins"
    )
    runs = ", ".join(f"{w}" for w, _ in off)
    scatter = result.scatter
    if scatter is not None and all(p in scatter.within for _, p in off):
        return (
            f"{head}; from the run(s) at {runs} it differs from the measured {knee}, within "
            f"the runs' own scatter: the sweep does not settle the order of "
            f"{counts_in_words(scatter.within)} workers either."
        )
    return f"{head}; from the run(s) at {runs} it differs from the measured {knee}: {why}."


def counts_in_words(counts: Sequence[int]) -> str:
    """``3, 4 and 6``."""
    words = [str(c) for c in counts]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]
