"""The words of a verdict: the causes of idle time, the verdicts, and the bands of a share.

A light module (no pandas, no numpy) so that reports, plots, sweeps and pods name a cause or
a verdict without importing the analysis.
"""

from __future__ import annotations

from typing import Final, Literal

# The bands and the knee's tolerance live in the thresholds' registry; named here too, as
# every report has always imported them from here.
from traceinspect.thresholds import DOMINATES, KNEE_TOLERANCE, MATTERS

__all__ = [
    "CAUSES",
    "CLAIM_ORDER",
    "DOMINATES",
    "KNEE_TOLERANCE",
    "MATTERS",
    "PLACES",
    "PRECEDENCE",
    "STAGES",
    "SYNC_RULE_TAKES",
    "VERDICTS",
    "Cause",
    "Place",
    "Stage",
    "Verdict",
    "band",
]

#: Why the device sat idle: what the training thread was doing (input, sync, compile, host),
#: or ``runtime``: the host had already dispatched the device's next program (the runtime's
#: launch and scheduling latency between programs, which the host does not owe), else
#: ``unknown``. Runtime claims an idle instant first; then the training thread's activity in
#: :data:`PRECEDENCE`; the rest is unknown.
Cause = Literal["input", "sync", "compile", "host", "runtime", "unknown"]
CAUSES: Final[tuple[Cause, ...]] = ("input", "sync", "compile", "host", "runtime", "unknown")
#: The order in which an idle instant claimed by several of the training thread's activities
#: goes to one.
PRECEDENCE: Final[tuple[Cause, ...]] = ("compile", "sync", "input", "host")
#: The order in which an idle instant goes to one cause: runtime first (the device's next
#: program was already dispatched), then the training thread's activities.
CLAIM_ORDER: Final[tuple[Cause, ...]] = ("runtime", *PRECEDENCE)
#: The causes whose share of an idle period a blocking read opened the sync rule may take
#: (``analysis/attribution.py``), in the order of CAUSES.
SYNC_RULE_TAKES: Final[tuple[Cause, ...]] = ("input", "host", "unknown")

Verdict = Literal[
    "input-bound",
    "sync-bound",
    "compile-bound",
    "host-bound",
    "device-bound",
    "unknown",
]
#: The verdict a cause gives when it leads ("unknown" is a verdict of its own: unexplained
#: idle time outweighing every known cause).
VERDICTS: Final[dict[Cause, Verdict]] = {
    "input": "input-bound",
    "sync": "sync-bound",
    "compile": "compile-bound",
    "host": "host-bound",
}


def band(fraction: float) -> str:
    """XProf's bands for a cause's share of step time: "dominates", "matters" or ""."""
    return "dominates" if fraction >= DOMINATES else "matters" if fraction >= MATTERS else ""


#: Where a batch's time goes: reading records, transforming them, batching them, the training
#: thread waiting on a prefetch buffer, and the host-to-device transfer.
Stage = Literal["read", "preprocessing", "batch", "prefetch", "transfer"]
STAGES: Final[tuple[Stage, ...]] = ("read", "preprocessing", "batch", "prefetch", "transfer")
#: Where a stage ran: Grain worker processes, other threads of the training process, or the
#: training thread itself.
Place = Literal["workers", "threads", "main"]
PLACES: Final[tuple[Place, ...]] = ("workers", "threads", "main")
