"""The words of a verdict: the causes of idle time, the verdicts, and the bands of a share.

A light module (no pandas, no numpy) so that reports, plots, sweeps and pods name a cause or
a verdict without importing the analysis.
"""

from __future__ import annotations

from typing import Final, Literal

#: What the training thread was doing while the device sat idle, in the precedence each
#: idle instant is given to one of them (compile first, unknown last).
Cause = Literal["input", "sync", "compile", "host", "unknown"]
CAUSES: Final[tuple[Cause, ...]] = ("input", "sync", "compile", "host", "unknown")
#: The order in which an idle instant claimed by several causes goes to one.
PRECEDENCE: Final[tuple[Cause, ...]] = ("compile", "sync", "input", "host")

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

# XProf's bands for a cause's share of step time.
MATTERS: Final = 0.05
DOMINATES: Final = 0.20


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
