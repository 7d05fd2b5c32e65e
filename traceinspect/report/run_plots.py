"""The whole run in one picture: every step's host time from the capture sidecar, with the
traced window marked, so a reader sees where the window sits (compile, warm-up, steady, the
end) and whether it is representative of the run."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from traceinspect.errors import UsageError
from traceinspect.report.axes import finish_axes, new_axes
from traceinspect.sidecar import HostStep, Sidecar, completed_gaps_ms

if TYPE_CHECKING:
    from matplotlib.axes import Axes

STEP_COLOR = "#555555"
COMPLETED_COLOR = "#009E73"  # bluish green (Okabe-Ito)
WINDOW_COLOR = "#0072B2"  # blue (Okabe-Ito)
UNSTEADY_COLOR = "#D55E00"  # vermillion: a window traced before the run was steady
#: Steps slower than this many times the run's median are drawn at the top edge and
#: labelled (step 0 compiles and would flatten the rest of the curve).
CLIP_OVER_MEDIAN = 8.0
#: Clipped steps labelled with their time (the slowest first).
MAX_LABELS = 3
#: Window rules that traced a run not yet steady.
NOT_STEADY = ("time_bound", "early")

_RULE_LABEL = {
    "steady": "traced window (steady)",
    "skip": "traced window (--skip-steps)",
    "time_bound": "traced window (not steady: --max-wait reached)",
    "early": "traced window (the run ended before it was steady)",
}


def has_step_curve(sidecar: Sidecar | None) -> bool:
    """Whether ``sidecar`` holds enough host steps for :func:`plot_step_curve`."""
    return sidecar is not None and sum(s.wall_ms is not None for s in sidecar.steps) >= 2


def plot_step_curve(sidecar: Sidecar, ax: Axes | None = None) -> Axes:
    """Host time of every step capture saw (ms, by step index), and where capture stamped
    when each step's device work finished, the time per completed step; the traced steps
    shaded. Steps far slower than the rest (compilation) are clipped to the top edge and the
    slowest labelled."""
    steps = [s for s in sidecar.steps if s.wall_ms is not None]
    if len(steps) < 2:
        raise UsageError(
            "The capture sidecar holds fewer than two timed steps: nothing to draw. "
            "Capture a run of a few steps or more."
        )
    if ax is None:
        ax = new_axes(9.0, 3.2)
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    index = np.array([s.index for s in steps])
    wall = np.array([s.wall_ms for s in steps], dtype=np.float64)
    done_index, done_ms = _completed_steps(sidecar)
    everything = np.concatenate([wall, done_ms])
    top = max(float(np.median(everything)) * CLIP_OVER_MEDIAN, 1e-3)
    handles: list[object] = []
    for xs, ys, color, label in (
        (index, wall, STEP_COLOR, "host time per step"),
        (done_index, done_ms, COMPLETED_COLOR, "time per completed step (device)"),
    ):
        if len(xs):
            ax.plot(xs, np.minimum(ys, top), color=color, linewidth=0.9)
            handles.append(Line2D([], [], color=color, label=label))
    clipped = [(float(w), int(i)) for i, w in zip(index, wall, strict=True) if w > top]
    labelled = sorted(sorted(clipped, reverse=True)[:MAX_LABELS], key=lambda wi: wi[1])
    for row, (w, i) in enumerate(labelled):
        # One line each, down from the top edge in step order: neighbouring steps (0 and 1,
        # both compiling) would otherwise print over one another.
        ax.annotate(
            f"step {i}: {w / 1000:.2f} s" if w >= 1000 else f"step {i}: {w:.0f} ms",
            (float(i), top),
            xytext=(3, -10 - 11 * row),
            textcoords="offset points",
            fontsize=8,
        )
    traced = index[np.array([s.traced for s in steps])]
    window = sidecar.window
    rule = window.rule if window is not None else None
    if len(traced):
        color = UNSTEADY_COLOR if rule in NOT_STEADY else WINDOW_COLOR
        label = _RULE_LABEL.get(rule or "", "traced window")
        ax.axvspan(float(traced.min()), float(traced.max()) + 1, color=color, alpha=0.18)
        handles.append(Patch(color=color, alpha=0.3, label=label))
    ax.set_xlabel("step")
    ax.set_ylabel("time per step (ms)")
    ax.set_ylim(0, top * 1.08 if clipped else float(everything.max()) * 1.1)
    return finish_axes(ax, _curve_title(steps, traced, rule), handles)


def _completed_steps(sidecar: Sidecar) -> tuple[np.ndarray, np.ndarray]:
    """Steps with a completion stamp whose previous step has one too, and the time between
    the two stamps (ms)."""
    gaps = completed_gaps_ms(sidecar.steps)
    return (
        np.array(list(gaps), dtype=np.int64),
        np.array(list(gaps.values()), dtype=np.float64),
    )


def _curve_title(steps: list[HostStep], traced: np.ndarray, rule: str | None) -> str:
    n = len(steps)
    if not len(traced):
        return f"{n} steps, none traced"
    where = f"steps {int(traced.min())}-{int(traced.max())} traced of {n}"
    return where + (", not steady" if rule in NOT_STEADY else "")
