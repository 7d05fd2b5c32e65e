"""The words of a verdict: the causes of idle time, the verdicts, and the bands of a share.

A light module (no pandas, no numpy) so that reports, plots, sweeps and pods name a cause or
a verdict without importing the analysis.
"""

from __future__ import annotations

from typing import Final, Literal

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

# A step within this factor of the best counts as keeping up: the tolerance that defines the
# measured knee (the smallest worker count within 10% of the best step). Workers that deliver
# within it are enough; host work after a read within it of the device's step would not hold
# the device back without the read.
KNEE_TOLERANCE: Final = 1.10
