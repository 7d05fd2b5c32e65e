"""The whole run's step-time curve (report/run_plots.py), drawn from a sidecar built here."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from traceinspect import sidecar as SC
from traceinspect.errors import UsageError
from traceinspect.report.run_plots import (
    UNSTEADY_COLOR,
    WINDOW_COLOR,
    has_step_curve,
    plot_step_curve,
)


def _sidecar(walls: list[float], traced: range, rule: str) -> SC.Sidecar:
    steps: list[dict[str, Any]] = []
    start = 0
    for i, wall in enumerate(walls):
        steps.append(
            {
                "index": i,
                "step_num": None,
                "start_unix_ns": start,
                "wall_ms": wall if i < len(walls) - 1 else None,
                "traced": i in traced,
            }
        )
        start += int(wall * 1e6)
    window = {"rule": rule, "reason": "r", "first_step": traced.start, "complete": True}
    parsed = SC.parse({"steps": steps, "window": {**window, "last_step": traced.stop - 1}})
    assert parsed is not None
    return parsed


def test_the_curve_clips_compilation_and_shades_the_window() -> None:
    # Step 0 compiles (2 s), then 10 ms steps with one 12 ms; steps 10-19 traced, steady.
    walls = [2000.0] + [10.0] * 29 + [0.0]
    walls[15] = 12.0
    ax = plot_step_curve(_sidecar(walls, range(10, 20), "steady"))
    (line,) = ax.get_lines()
    x, y = (np.asarray(v, dtype=float) for v in line.get_data())
    assert list(x) == list(range(30))  # the last step has no time to the next
    # 8x the median (10 ms): step 0 drawn at 80 ms and labelled with its real time.
    assert y[0] == 80.0 and y[15] == 12.0 and np.all(y[1:15] == 10.0)
    assert [t.get_text() for t in ax.texts] == ["step 0: 2.00 s"]
    (span,) = ax.patches
    assert _x_extent(span) == (10.0, 20.0)
    assert span.get_facecolor()[:3] == pytest.approx(_rgb(WINDOW_COLOR))
    legend = _legend(ax)
    assert legend == ["host time per step", "traced window (steady)"]
    assert ax.get_title(loc="left") == "steps 10-19 traced of 30"


def test_an_early_trace_is_marked_not_steady() -> None:
    ax = plot_step_curve(_sidecar([500.0] + [5.0] * 8, range(2, 8), "early"))
    (span,) = ax.patches
    assert span.get_facecolor()[:3] == pytest.approx(_rgb(UNSTEADY_COLOR))
    legend = _legend(ax)
    assert legend[1] == "traced window (the run ended before it was steady)"
    assert ax.get_title(loc="left") == "steps 2-7 traced of 8, not steady"


def test_too_few_steps_is_a_usage_error() -> None:
    one = _sidecar([100.0, 0.0], range(0), "steady")
    assert not has_step_curve(one) and not has_step_curve(None)
    with pytest.raises(UsageError, match="fewer than two timed steps"):
        plot_step_curve(one)


def _rgb(color: str) -> tuple[float, float, float]:
    return tuple(int(color[i : i + 2], 16) / 255 for i in (1, 3, 5))  # type: ignore[return-value]


def _x_extent(patch: Any) -> tuple[float, float]:
    """An axvspan's x range: a Rectangle (matplotlib >= 3.9) or a Polygon (before)."""
    if hasattr(patch, "get_width"):
        return float(patch.get_x()), float(patch.get_x() + patch.get_width())
    xs = np.asarray(patch.get_xy())[:, 0]
    return float(xs.min()), float(xs.max())


def _legend(ax: Any) -> list[str]:
    return [t.get_text() for t in ax.get_legend().get_texts()]
