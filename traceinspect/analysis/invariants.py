"""What every analysis must satisfy, checked after :func:`~traceinspect.analysis.analyze`
when ``TRACEINSPECT_CHECK_INVARIANTS`` is set (the test suite sets it, so every analysis the
tests make is checked)."""

from __future__ import annotations

import os

import numpy as np

from traceinspect import schema as S
from traceinspect.analysis.result import Analysis
from traceinspect.vocabulary import CAUSES

ENV = "TRACEINSPECT_CHECK_INVARIANTS"
# Float rounding: busy + idle, each a quotient of the same wall time, sum to 1 within it.
_FLOAT_EPS = 1e-9
# Each cause's fraction is rounded to 4 places: their sum is the idle fraction within this.
_ROUNDED_EPS = 1e-3


def enabled() -> bool:
    return bool(os.environ.get(ENV))


def check_invariants(a: Analysis) -> None:
    """Raise ``AssertionError`` naming the first broken invariant of ``a``."""
    per_step, gaps = a.per_step_columns, a.gap_columns
    wall, busy, idle = per_step[S.WALL_NS], per_step[S.BUSY_NS], per_step[S.IDLE_NS]
    assert (busy >= 0).all() and (busy <= wall).all(), "busy time outside its step"
    assert (busy + idle == wall).all(), "busy + idle != wall in some step"
    by_cause = sum(per_step[S.idle_cause_ns(c)] for c in CAUSES)
    assert np.array_equal(by_cause, idle), "idle time by cause does not sum to idle time"
    if len(gaps[S.DURATION_NS]):
        parts = sum(gaps[c] for c in CAUSES)
        assert np.array_equal(parts, gaps[S.DURATION_NS]), "gap parts != gap"
        assert all((gaps[c] >= 0).all() for c in CAUSES), "a negative part of a gap"
        assert (gaps[S.END_NS] - gaps[S.START_NS] == gaps[S.DURATION_NS]).all()
    total = float(wall.sum())
    assert abs(a.busy_fraction + a.idle_fraction - 1.0) < _FLOAT_EPS or total == 0
    assert abs(sum(a.cause_fractions.values()) - a.idle_fraction) < _ROUNDED_EPS, "fractions"
    assert a.steps.count == len(wall), "step count != per-step rows"
