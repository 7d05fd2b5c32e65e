"""The one decision: claims on a step's time in, the verdict and the rule that named it out.

Every cause the analysis knows reaches the verdict the same way: a detector measures it as a
:class:`Claim` (a share of step time, with the basis of that figure), and :func:`decide` reads
:data:`RULES` top to bottom; the first row whose claim passes its test names the verdict.
This table is the only place the precedence between causes is written. A new cause costs one
detector (``analysis/detectors.py``), one row here and one renderer (``analysis/explain.py``).

Two kinds of row, as the causes were measured:

- **idle rows** (the last three) share out the device's idle time the trace shows, instant by
  instant: the known cause with the largest share names the run from ``MATTERS`` on (a read
  of a device value only where it recurs: ``SYNC_RECURS``), unexplained idle time when it
  outweighs every known cause, else the device's own work.
- **run rows** (above them) are causes that show as something else in the idle time: a stall
  that recurs over the whole run (a 20-step window holds one or none), a host callback inside
  the jitted step, the loop's CPU that stretches the program on XLA's CPU backend, a pipeline
  on the training process's threads that paces the loop. Each must beat the largest idle
  share other than the host's (where their own idle time goes), and some may only replace
  an idle verdict of ``device-bound`` or ``host-bound`` (``over``): an inferred figure never
  overrules idle time the trace shows for another cause.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from traceinspect.thresholds import (
    DOMINATES,
    ISOLATE_NEXT_SHARE,
    ISOLATE_TOLERANCE,
    MATTERS,
    SYNC_RECURS,
    TIED,
)
from traceinspect.vocabulary import CAUSES, VERDICTS

#: How a claim's figure was got: seen as idle time in the trace, inferred by a model from
#: what the trace shows (the loop's CPU over the cores), or measured over the whole run
#: (capture's per-step host times).
Basis = Literal["observed", "inferred", "measured"]

#: Causes that are not idle time of their own, each found by a detector.
RUN_CAUSES: Final = ("stall", "callback", "loop_cpu", "pipeline_cpu")


@dataclass(frozen=True)
class Claim:
    """A detector's figure for one cause: its share of step time and how it was got.
    ``verdict``: the verdict the claim names where that depends on what was found (a
    stall's: a checkpoint is host-bound, an input stall input-bound), else None."""

    cause: str
    share: float
    basis: Basis
    verdict: str | None = None


@dataclass(frozen=True)
class Rule:
    """One row of the decision table. ``threshold``: the share the claim must reach;
    ``beats_idle``: it must also exceed the largest idle share other than the host's, by more
    than :data:`~traceinspect.thresholds.TIED` of it (shares that close are a tie, which the
    window's own cause takes);
    ``over``: the idle verdicts it may replace (None: any)."""

    id: str
    cause: str
    verdict: str | None
    threshold: float
    beats_idle: bool
    over: tuple[str, ...] | None
    meaning: str


_EITHER = ("device-bound", "host-bound")

#: The decision table, first row first. The idle rows' ``cause`` "idle" stands for the known
#: idle cause with the largest share.
RULES: Final[tuple[Rule, ...]] = (
    Rule(
        id="recurring_stall",
        cause="stall",
        verdict=None,
        threshold=MATTERS,
        beats_idle=True,
        over=None,
        meaning="a stall every N steps over the whole run (checkpoint, evaluation, input, ...) "
        "costs more of the run's step time than any cause in the window",
    ),
    Rule(
        id="host_callback",
        cause="callback",
        verdict="host-bound",
        threshold=MATTERS,
        beats_idle=True,
        over=None,
        meaning="a host callback inside the jitted step holds the step longer than any cause "
        "of idle time but the host's",
    ),
    Rule(
        id="loop_cpu",
        cause="loop_cpu",
        verdict="host-bound",
        threshold=DOMINATES,
        beats_idle=True,
        over=_EITHER,
        meaning="on XLA's CPU backend the loop's own CPU work stretches the program beside it "
        "(inferred: decides only where it dominates)",
    ),
    Rule(
        id="pipeline_cpu",
        cause="pipeline_cpu",
        verdict="input-bound",
        threshold=0.0,
        beats_idle=False,
        over=_EITHER,
        meaning="a pipeline on the training process's read threads runs flat out on a CPU and "
        "paces the loop, which loses the time as host work more than as waiting in next()",
    ),
    Rule(
        id="unexplained",
        cause="unknown",
        verdict="unknown",
        threshold=MATTERS,
        beats_idle=False,
        over=None,
        meaning="idle time nothing on the host explains outweighs every known cause",
    ),
    Rule(
        id="idle_cause",
        cause="idle",
        verdict=None,
        threshold=MATTERS,
        beats_idle=False,
        over=None,
        meaning="the known cause of idle time with the largest share (a read of a device value "
        "only where it idles the device in most steps)",
    ),
    Rule(
        id="device",
        cause="device",
        verdict="device-bound",
        threshold=0.0,
        beats_idle=False,
        over=None,
        meaning="no cause of idle time reaches its threshold: the device's own work sets the step",
    ),
)


@dataclass(frozen=True)
class Decision:
    """What named the verdict: the rule (a row of :data:`RULES`), its cause and that cause's
    share of step time (the device's: its busy share) and basis, and the runner-up (the
    next largest claim). ``sync_steps``: the share of steps with idle time after a read;
    ``occasional_sync``: such idle time matters but recurs in too few steps to name the
    verdict."""

    verdict: str
    cause: str
    rule: str
    share: float
    basis: Basis
    runner_up: str | None = None
    runner_up_share: float = 0.0
    occasional_sync: bool = False
    sync_steps: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """What ``analyze --json`` prints as ``decided_by``."""
        return {
            "rule": self.rule,
            "cause": self.cause,
            "share": round(self.share, 4),
            "basis": self.basis,
            "runner_up": self.runner_up,
            "runner_up_share": round(self.runner_up_share, 4),
        }


def idle_claims(fractions: Mapping[str, float]) -> list[Claim]:
    """The idle time the trace shows, as claims: one per cause of idle time."""
    return [Claim(c, fractions[c], "observed") for c in CAUSES]


def decide(claims: Iterable[Claim], sync_steps: float = 1.0) -> Decision:
    """The verdict the first row of :data:`RULES` that fires names. ``claims``: the idle
    claims (:func:`idle_claims`) and those of the run's detectors; ``sync_steps``: the share
    of steps with idle time after a read of a device value."""
    by_cause = {c.cause: c for c in claims}
    share = {cause: claim.share for cause, claim in by_cause.items()}
    known: dict[str, float] = {c: share.get(c, 0.0) for c in VERDICTS}
    occasional = known["sync"] >= MATTERS and sync_steps < SYNC_RECURS
    if occasional:
        known["sync"] = 0.0
    largest_but_host = max(share.get(c, 0.0) for c in VERDICTS if c != "host")
    top = max(known, key=known.__getitem__)
    idle = _idle_decision(known[top], share.get("unknown", 0.0))
    idle_verdict = _VERDICT_OF[top] if idle.verdict is None else idle.verdict
    chosen = idle
    for rule in RULES:
        claim = by_cause.get(rule.cause)
        if rule.cause not in RUN_CAUSES or claim is None or claim.share < rule.threshold:
            continue
        # A tie (shares within TIED) only between different verdicts: a cause naming the
        # window's own is it said more precisely (an epoch's restart, 0.82 against 0.79).
        tied = TIED if _names(rule, claim, idle_verdict) != idle_verdict else 0.0
        if rule.beats_idle and claim.share <= largest_but_host * (1.0 + tied):
            continue
        if rule.over is not None and idle_verdict not in rule.over:
            continue
        chosen = rule
        break
    basis: Basis = "observed"
    if chosen.cause == "device":
        # The device's share: the step time it is busy.
        cause, verdict = "device", idle_verdict
        value = max(0.0, 1.0 - sum(share.get(c, 0.0) for c in CAUSES))
    else:
        # The idle_cause row names the largest known idle cause; every other row, its own.
        cause = top if chosen.cause == "idle" else chosen.cause
        claim = by_cause[cause]
        basis, value = claim.basis, claim.share
        verdict = _names(chosen, claim, idle_verdict)
    others = [c for c in by_cause.values() if c.cause not in (cause, "runtime") and c.share > 0]
    runner = max(others, key=lambda c: c.share, default=None)
    return Decision(
        verdict=verdict,
        cause=cause,
        rule=chosen.id,
        share=value,
        basis=basis,
        runner_up=None if runner is None else runner.cause,
        runner_up_share=0.0 if runner is None else runner.share,
        occasional_sync=occasional and chosen.id != "recurring_stall",
        sync_steps=sync_steps,
    )


def _names(rule: Rule, claim: Claim, idle_verdict: str) -> str:
    """The verdict a row names for a claim: its own, else the claim's, else the window's."""
    return rule.verdict or claim.verdict or idle_verdict


_BY_ID: Final = {r.id: r for r in RULES}
# The verdict each idle cause names (the vocabulary's, keyed by plain strings).
_VERDICT_OF: Final[dict[str, str]] = {str(c): str(v) for c, v in VERDICTS.items()}


def _idle_decision(top_share: float, unknown: float) -> Rule:
    """The idle row that fires, given the largest known idle share: unexplained idle time,
    the largest known cause, or the device."""
    if unknown >= _BY_ID["unexplained"].threshold and unknown > top_share:
        return _BY_ID["unexplained"]
    if top_share >= _BY_ID["idle_cause"].threshold:
        return _BY_ID["idle_cause"]
    return _BY_ID["device"]


def rules_table() -> list[dict[str, Any]]:
    """The table as rows, for the docs and ``--json``."""
    return [
        {
            "rule": r.id,
            "cause": r.cause,
            "verdict": r.verdict or "by what was found",
            "threshold": r.threshold,
            "beats_idle": r.beats_idle,
            "over": list(r.over) if r.over else None,
            "meaning": r.meaning,
        }
        for r in RULES
    ]


# =============================================================================================
# isolate's table: the same reading, on the three timings of ``traceinspect isolate``
# =============================================================================================
#
# isolate runs the script three ways and times each: ``T`` the step with free input (the
# first batch repeated), ``L`` the loader alone, ``R`` the real step. Its claims are those
# figures, and the real phase's evidence, as ratios (basis "measured", built by
# ``isolate/judge.py``):
#
#   loader        L / T             the loader alone against the step with free input
#   real          R / T             the real step against it
#   reads         reads / T         the loop's wait per step in host reads of device values
#   next          next() / (R - T)  its wait per step in Grain next(), over the real step's loss
#   cores         R / (T + W / c)   XLA's CPU backend with worker processes: the real step
#                                   against T plus the workers' CPU per batch W over the c
#                                   cores the script had (``Evidence.workers_on_cores_ms``)
#   disagree      1                 the next best run of each phase reads another verdict
#   loss          (R - T) / R       the real step's loss, as a share of it
#   loss_on_cores (R - T - W/c) / R the loss beyond the workers' share of the cores
#
# A claim not measured is absent, and a check of it fails. Each row's checks all pass, or it
# does not fire; :func:`decide_measured` reads the table top to bottom like :func:`decide`
# reads RULES, and records the row that fired in the same :class:`Decision` (``decided_by``),
# with the share of the real step its cause took (``loss``; the device's: the rest).

#: How a test compares its claim with its threshold.
Op = Literal[">", "<", "<="]


@dataclass(frozen=True)
class Check:
    """One comparison a row of a measured table makes: claim ``claim`` against ``threshold``."""

    claim: str
    op: Op
    threshold: float

    def passes(self, claim: Claim | None) -> bool:
        if claim is None:
            return False
        if self.op == ">":
            return claim.share > self.threshold
        if self.op == "<":
            return claim.share < self.threshold
        return claim.share <= self.threshold

    def __str__(self) -> str:
        return f"{self.claim} {self.op} {self.threshold:g}"


@dataclass(frozen=True)
class MeasuredRule(Rule):
    """A row of a table of measured figures (:data:`ISOLATE_RULES`): it fires when every one
    of its ``checks`` passes (a row without checks always fires); ``loss``: the claim whose share
    the decision records (the device's: one less it). ``threshold``, ``beats_idle`` and
    ``over`` (the idle time's) do not apply: 0, False, None."""

    checks: tuple[Check, ...] = ()
    loss: str = "loss"


def isolate_rules(tolerance: float = ISOLATE_TOLERANCE) -> tuple[MeasuredRule, ...]:
    """isolate's table for a tolerance (``--tolerance``; :data:`ISOLATE_RULES`: the default),
    first row first."""

    def row(
        rule_id: str,
        cause: str,
        verdict: str,
        checks: tuple[Check, ...],
        meaning: str,
        loss: str = "loss",
    ) -> MeasuredRule:
        return MeasuredRule(rule_id, cause, verdict, 0.0, False, None, meaning, checks, loss)

    slower = Check("real", ">", tolerance)
    # Less than the tolerance's share of T waited in reads: nothing waits on the device.
    no_sync = Check("reads", "<", tolerance - 1)
    # Less than a share of the loss waited in next(): the loss is not on the loop's thread.
    not_in_next = Check("next", "<", ISOLATE_NEXT_SHARE)
    return (
        row(
            "runs_disagree",
            "unknown",
            "unknown",
            (Check("disagree", ">", 0.0),),
            "the best run of each phase and the next best read different verdicts: which runs "
            "are taken decides, so no verdict is given",
        ),
        row(
            "loader_slower",
            "input",
            "input-bound",
            (Check("loader", ">", tolerance),),
            "the input pipeline alone cannot keep up with the step with free input",
        ),
        row(
            "workers_on_the_cores",
            "device",
            "device-bound",
            (slower, no_sync, not_in_next, Check("cores", "<=", tolerance)),
            "on XLA's CPU backend, a real step that waits nowhere is within the tolerance of "
            "the step with free input plus the workers' CPU per batch over the cores: the "
            "cores, this backend's device, set the pace",
            loss="loss_on_cores",
        ),
        row(
            "workers_on_the_cores",
            "host",
            "host-bound",
            (slower, no_sync, not_in_next, Check("cores", ">", tolerance)),
            "the same, beyond the workers' share of the cores: the training process's own work "
            "beside or between the steps costs the step",
            loss="loss_on_cores",
        ),
        row(
            "no_wait_beside_the_step",
            "host",
            "host-bound",
            (slower, no_sync, not_in_next),
            "the real step is slower, and the loop waits neither on the device nor in next(): "
            "the pipeline's work beside the step competes with it for the host's cores",
        ),
        row(
            "training_thread_work",
            "host",
            "host-bound",
            (slower, no_sync),
            "the real step is slower and the loop hardly waits on the device: the training "
            "thread's own work (the pipeline's on it, Python, dispatch) sets the pace",
        ),
        row(
            "real_slower_no_overlap",
            "sync",
            "sync-bound",
            (slower,),
            "the pipeline keeps up, yet the real step is slower than the step with free input: "
            "input and the step do not overlap, as a host-device sync each step does",
        ),
        row(
            "within_tolerance",
            "device",
            "device-bound",
            (),
            "the real step is within the tolerance of the step with free input, and the "
            "pipeline keeps up: the device's work sets the pace",
        ),
    )


#: isolate's table at its default tolerance (``ISOLATE_TOLERANCE``).
ISOLATE_RULES: Final = isolate_rules()


def decide_measured(
    claims: Iterable[Claim], table: Sequence[MeasuredRule] = ISOLATE_RULES
) -> Decision:
    """The verdict the first row of ``table`` whose checks all pass names, recorded as
    :func:`decide` records its own: the row, its cause, and the share of the step that cause
    took (the row's ``loss`` claim; the device's: the rest), measured."""
    by_cause = {c.cause: c for c in claims}
    rule = next((r for r in table if all(t.passes(by_cause.get(t.claim)) for t in r.checks)), None)
    if rule is None:
        raise ValueError("the table's last row must fire always (a row without checks)")
    loss = by_cause[rule.loss].share if rule.loss in by_cause else 0.0
    return Decision(
        verdict=rule.verdict or "unknown",
        cause=rule.cause,
        rule=rule.id,
        share=1.0 - loss if rule.cause == "device" else loss,
        basis="measured",
    )
