"""Is it the input? ``traceinspect isolate``: the script run three ways, unchanged, judged."""

from __future__ import annotations

from traceinspect.isolate.evidence import Evidence
from traceinspect.isolate.judge import TOLERANCE, Judgement, judge
from traceinspect.isolate.runner import (
    DEFAULT_PHASE_TIMEOUT_S,
    QUIET_WAIT_S,
    TRIES,
    IsolateProgress,
    ProgressCallback,
    run_isolate,
)
from traceinspect.isolate.settle import (
    EXTRA_ROUNDS,
    ROUNDS,
    Isolation,
    near_margin,
    settled,
    summarize,
)
from traceinspect.isolate.text import DESCRIPTIONS, LOADER, PHASE_NAMES, PHASES, REAL, TARGET
from traceinspect.isolate.timing import BUSY_OTHERS, MIN_TIMED, PhaseTiming, phase_timing

__all__ = [
    "BUSY_OTHERS",
    "DEFAULT_PHASE_TIMEOUT_S",
    "DESCRIPTIONS",
    "EXTRA_ROUNDS",
    "LOADER",
    "MIN_TIMED",
    "PHASES",
    "PHASE_NAMES",
    "QUIET_WAIT_S",
    "REAL",
    "ROUNDS",
    "TARGET",
    "TOLERANCE",
    "TRIES",
    "Evidence",
    "IsolateProgress",
    "Isolation",
    "Judgement",
    "PhaseTiming",
    "ProgressCallback",
    "judge",
    "near_margin",
    "phase_timing",
    "run_isolate",
    "settled",
    "summarize",
]
