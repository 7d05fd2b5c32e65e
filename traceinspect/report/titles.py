"""A run's headline in a few words, for plot, HTML and notebook titles: by the cause that
decided its verdict."""

from __future__ import annotations

from traceinspect.analysis.result import Analysis
from traceinspect.vocabulary import CAUSES, MATTERS, VERDICTS

__all__ = ["finding", "top_cause"]

_CAUSE_OF_VERDICT: dict[str, str] = {verdict: cause for cause, verdict in VERDICTS.items()}


def top_cause(analysis: Analysis) -> str | None:
    """The cause of idle time the verdict names, from the decision (None when the run is
    device-bound, or when a cause that is not idle time of its own decided it: a stall, a
    callback, the loop's or the pipeline's CPU). An analysis without a decision (an old
    record) is read back from its verdict."""
    decision = analysis.decision
    if decision is not None:
        return decision.cause if decision.cause in CAUSES else None
    if analysis.verdict == "unknown":
        return "unknown"
    return _CAUSE_OF_VERDICT.get(analysis.verdict)


# What each cause that is not idle time of its own is, in a title.
_RUN_CAUSE_WORDS = {
    "stall": "a stall that recurs",
    "callback": "a host callback in the step",
    "loop_cpu": "the loop's own CPU work",
    "pipeline_cpu": "the input pipeline's CPU work",
}


def finding(analysis: Analysis) -> str:
    """The headline of the analysis in a few words, for titles: by the cause that decided."""
    decision = analysis.decision
    if decision is not None and decision.cause in _RUN_CAUSE_WORDS:
        return (
            f"Device idle {analysis.idle_fraction:.0%} of step time; "
            f"{_RUN_CAUSE_WORDS[decision.cause]} costs {decision.share:.0%}"
        )
    cause = top_cause(analysis)
    if cause is None:
        return (
            f"Device busy {analysis.busy_fraction:.0%} of step time; "
            f"no cause of idle time reaches {MATTERS:.0%}"
        )
    share = analysis.cause_fractions[cause]
    what = "unexplained" if cause == "unknown" else cause
    return f"Device idle {analysis.idle_fraction:.0%} of step time, mostly {what} ({share:.0%})"
