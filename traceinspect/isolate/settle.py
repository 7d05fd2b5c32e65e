"""Which runs count: each phase's best, whether the next best agree (:func:`settled`),
and the :class:`Isolation` they give (:func:`summarize`).

The three phases run in turn, ``ROUNDS`` (2) times (target, loader, real, target, loader,
real), and each phase's figure is its best run (the lowest mean among the runs other
processes left quiet): a machine's speed drifts from one run to the next, upward, as
CONTRIBUTING's measurements keep the best of interleaved repeats. On this project's shared
2-core machine, on a quiet machine by ``/proc/stat``, the same synthetic-data step measured
8.3 ms in one run and 12.1 ms in another minutes apart, and one round of isolate read a
target step of 14.7 ms against its own real step of 11.2 ms (``sample_traces/scenarios/
family/isolate_one_round.json``): one run of each phase cannot resolve 20%.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from traceinspect.analysis.result import Recommendation
from traceinspect.analysis.rules import Claim, Decision, decide_measured
from traceinspect.capture import PhaseRun
from traceinspect.isolate.evidence import Evidence, _evidence
from traceinspect.isolate.judge import TOLERANCE, Judgement, claims, judge
from traceinspect.isolate.text import LOADER, PHASE_NAMES, PHASES, REAL, TARGET
from traceinspect.isolate.timing import BUSY_OTHERS, PhaseTiming, phase_timing
from traceinspect.vocabulary import Verdict

#: Runs of each phase, in turn (target, loader, real, target, ...): each figure is its phase's
#: best run. Derived in the module's docstring.
ROUNDS = 2
#: Rounds run beyond ``rounds`` while the best runs and the next best disagree on the
#: verdict (see :func:`settled`); a verdict that still depends on which runs are taken is
#: not given ("unknown", with the spread).
EXTRA_ROUNDS = 2


@dataclasses.dataclass(frozen=True)
class Isolation:
    """The three figures, the verdict and why; ``to_dict()`` is ``isolate --json``."""

    target_step_ms: float
    loader_batch_ms: float
    real_step_ms: float
    verdict: Verdict
    reason: str
    #: The rule that decided, with the numbers (``"loader > target x 1.20: 42.85 > 10.42 ms"``).
    rule: str
    tolerance: float
    #: Workers that should close an input-bound gap (mp_prefetch in use), else None.
    suggested_workers: int | None
    evidence: Evidence
    phases: tuple[PhaseTiming, ...]
    command: tuple[str, ...]
    notes: tuple[str, ...] = ()
    #: The worker count as ``analyze`` words and sizes it (the same model, from the loader
    #: phase's measurement of the workers), where the verdict is input-bound with workers.
    workers: Recommendation | None = None
    #: The verdict the next-best run of each phase gives (None with one run of a phase):
    #: when it differs from the best runs' after every round, the verdict is "unknown".
    next_best_verdict: str | None = None
    #: The rule that fired, its cause and share (``decided_by``, as ``analyze`` prints it).
    decision: Decision | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "target_step_ms": round(self.target_step_ms, 3),
            "loader_batch_ms": round(self.loader_batch_ms, 3),
            "real_step_ms": round(self.real_step_ms, 3),
            "verdict": self.verdict,
            "decided_by": None if self.decision is None else self.decision.to_dict(),
            "reason": self.reason,
            "rule": self.rule,
            "tolerance": self.tolerance,
            "suggested_workers": self.suggested_workers,
            "workers": None if self.workers is None else self.workers.to_dict(),
            "next_best_verdict": self.next_best_verdict,
            "evidence": self.evidence.to_dict(),
            "phases": {p.phase: p.to_dict() for p in self.phases},
            "command": list(self.command),
            "notes": list(self.notes),
        }


@dataclasses.dataclass(frozen=True)
class _Run:
    run: PhaseRun
    mean_ms: float
    busy: float  # the share of the machine's cores other processes kept busy in its window


def _quiet(runs: Sequence[_Run]) -> list[_Run]:
    """The runs that compete for a phase's figure: the quiet ones (all when none was)."""
    return [r for r in runs if r.busy <= BUSY_OTHERS] or list(runs)


def _competing(runs: Sequence[_Run]) -> tuple[float, ...]:
    """The figures that compete for a phase's (:func:`_quiet`), lowest first."""
    return tuple(sorted(r.mean_ms for r in _quiet(runs)))


def settled(
    done: Mapping[str, Sequence[_Run]],
    tolerance: float = TOLERANCE,
    evidence: Evidence | None = None,
) -> bool:
    """Whether the verdict stands whichever runs are taken: the best run of each phase and
    the next best give the same verdict (their figures, with the best runs' ``evidence``
    when given). True while a phase has one run (nothing to compare)."""
    figures = {phase: _competing(runs) for phase, runs in done.items()}
    if any(len(f) < 2 for f in figures.values()):
        return True
    best = judge(*(figures[p][0] for p in PHASES), tolerance=tolerance, evidence=evidence)
    second = judge(*(figures[p][1] for p in PHASES), tolerance=tolerance, evidence=evidence)
    return best.verdict == second.verdict


def _best_evidence(done: Mapping[str, Sequence[_Run]]) -> Evidence | None:
    """The evidence of each phase's best run so far (None until every phase has run)."""
    if any(not runs for runs in done.values()):
        return None
    best = {p: _best(runs).run for p, runs in done.items()}
    timings = {p: phase_timing(run) for p, run in best.items()}
    return _evidence(best, timings[REAL], timings[LOADER], timings[TARGET])


def _best(runs: Sequence[_Run]) -> _Run:
    """The run that counts: the lowest mean among the quiet runs (all when none was)."""
    return min(_quiet(runs), key=lambda r: r.mean_ms)


def _counted(runs: Sequence[_Run], folder: Path) -> PhaseRun:
    """The run that counts: the lowest mean among the quiet runs (all runs when none was
    quiet); its output becomes ``<phase>.log``."""
    best = _best(runs).run
    main = folder / f"{best.phase}.log"
    try:
        Path(best.log_path).replace(main)
    except OSError:
        return best  # the name stays as written; the figure is the same
    return dataclasses.replace(best, log_path=str(main))


def summarize(
    runs: Mapping[str, PhaseRun],
    *,
    command: tuple[str, ...] = (),
    tolerance: float = TOLERANCE,
    kept_logs: bool = True,
    tries: Mapping[str, int] | None = None,
    runs_ms: Mapping[str, Sequence[float]] | None = None,
) -> Isolation:
    """The isolation from the three phases' runs (nothing runs here); ``tries``: how many
    times each phase ran (the run given is the one that counts); ``runs_ms``: the figures
    of the runs that competed for each phase's (its own the lowest). When the next-best
    runs give another verdict than the best (their figures, with the best runs' evidence),
    the verdict is ``unknown``: it depends on which runs are taken."""
    tries = tries or {}
    runs_ms = runs_ms or {}
    timings = tuple(
        dataclasses.replace(
            phase_timing(runs[phase], kept_log=kept_logs),
            tries=tries.get(phase, 1),
            runs_ms=tuple(sorted(runs_ms.get(phase, ()))),
        )
        for phase in PHASES
    )
    target, loader, real = (t.mean_ms for t in timings)
    evidence = _evidence(runs, timings[2], timings[1], timings[0])
    judged = judge(target, loader, real, tolerance=tolerance, evidence=evidence)
    next_best = None
    if all(len(t.runs_ms) >= 2 for t in timings):
        seconds = [t.runs_ms[1] for t in timings]
        next_best = judge(*seconds, tolerance=tolerance, evidence=evidence).verdict
        if next_best != judged.verdict:
            judged = _unsettled(judged, timings, judged.verdict, next_best)
    notes = tuple(f"{t.phase}: {t.note}" for t in timings if t.note)
    if judged.verdict != "unknown":
        near = near_margin(timings, tolerance, judged.verdict, judged.cores_share_ms)
        notes += (near,) if near else ()
    return Isolation(
        target_step_ms=target,
        loader_batch_ms=loader,
        real_step_ms=real,
        verdict=judged.verdict,
        reason=judged.reason,
        rule=judged.rule,
        tolerance=tolerance,
        suggested_workers=judged.suggested_workers,
        evidence=evidence,
        phases=timings,
        command=command,
        notes=notes,
        workers=judged.workers,
        next_best_verdict=next_best,
        decision=judged.decision,
    )


def near_margin(
    timings: Sequence[PhaseTiming],
    tolerance: float = TOLERANCE,
    verdict: str | None = None,
    cores_share_ms: float = 0.0,
) -> str | None:
    """A note when the ratio that decided lies within the runs' own scatter of the margin:
    taken over the best two runs of each phase, every pairing of a loader or real run with
    a target run, the ratios span ``tolerance``. None otherwise, or with one run of a phase.

    The verdict stands (it is the best runs'), but another run on the same machine may read
    the other side: on a loaded machine the family's two light workers took 1.19-1.25x the
    target step, and isolate read host-bound twice and device-bound once
    (``sample_traces/scenarios/family/isolate_loaded-2.json``)."""
    by_phase = {t.phase: t.runs_ms[:2] for t in timings}
    if any(len(runs) < 2 for runs in by_phase.values()):
        return None
    targets = by_phase[TARGET]

    def span(phase: str, beyond: float = 0.0) -> tuple[float, float]:
        ratios = [
            run / (target + beyond) for run in by_phase[phase] for target in targets if target > 0
        ]
        return min(ratios), max(ratios)

    near = []
    lo, hi = span(LOADER)
    if lo <= tolerance < hi:
        near.append(f"the loader batch {lo:.2f}-{hi:.2f}x the target step")
    if verdict != "input-bound":
        lo, hi = span(REAL, cores_share_ms)
        held = (
            f"the target step plus the workers' {cores_share_ms:.2f} ms on the cores"
            if cores_share_ms
            else "the target step"
        )
        if lo <= tolerance < hi:
            near.append(f"the real step {lo:.2f}-{hi:.2f}x {held}")
    if not near:
        return None
    return (
        f"near the verdict's margin ({tolerance:.2f}x): by the best two runs of each phase, "
        + " and ".join(near)
        + "; a rerun on this machine may read the other side of it (more --rounds, or a "
        "quieter machine, settle it)"
    )


def _unsettled(
    judged: Judgement, timings: Sequence[PhaseTiming], best: str, next_best: str
) -> Judgement:
    """The judgement when the best runs and the next best disagree: no verdict, the spread."""
    spreads = ", ".join(
        f"{PHASE_NAMES[t.phase]} " + " / ".join(f"{v:.2f}" for v in t.runs_ms) + " ms"
        for t in timings
    )
    reason = (
        f"The runs disagree: the best run of each phase reads {best}, the next best "
        f"{next_best} ({spreads}). The machine's speed changed between runs by more than "
        "the verdict's margin; run isolate again on a quieter machine, or with more --rounds."
    )
    # The first row of isolate's table: the runs taken decide the verdict.
    disagree = Claim("disagree", 1.0, "measured")
    target, loader, real = (t.mean_ms for t in timings)
    unsettled = decide_measured([disagree, *claims(target, loader, real)])
    return Judgement("unknown", reason, f"best runs: {judged.rule}", None, None, decision=unsettled)
