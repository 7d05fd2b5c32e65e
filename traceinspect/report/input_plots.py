"""The input pipeline's stages as a chart: where a batch's time goes, against the step.

One stacked bar per run (a single analysis, or one per worker count of a sweep): each
stage's time per step, its time per batch over how many ran at once (workers x read threads)
(:attr:`~traceinspect.analysis.input_stages.InputStages.effective_ms`), and a line at the
device's work per step, the time a batch must beat for the device never to wait.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from traceinspect.analysis.input_stages import InputStages
from traceinspect.report.axes import finish_axes
from traceinspect.report.axes import new_axes as _new_axes
from traceinspect.vocabulary import STAGES

if TYPE_CHECKING:
    from matplotlib.axes import Axes

#: One colour per stage (Okabe-Ito, distinct from the causes' where they share a chart).
STAGE_COLORS: dict[str, str] = {
    "read": "#56B4E9",  # sky blue
    "preprocessing": "#E69F00",  # orange
    "batch": "#F0E442",  # yellow
    "prefetch": "#999999",  # grey: waiting, not working
    "transfer": "#0072B2",  # blue
}
BUDGET_COLOR = "#000000"


def plot_input_stages(
    runs: InputStages | Mapping[str, InputStages], ax: Axes | None = None
) -> Axes:
    """Stacked bars of ms per step by stage (a stage's time per batch over how many ran at
    once: workers x read threads), one per run, and the device's work per step as a dashed
    line."""
    items = {"this run": runs} if isinstance(runs, InputStages) else dict(runs)
    if ax is None:
        ax = _new_axes(8.0, 1.2 + 0.6 * len(items))
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    labels = list(items)
    for y, label in enumerate(labels):
        stages = items[label]
        left = 0.0
        for stage in STAGES:
            width = stages.effective_ms[stage]
            if width <= 0:
                continue
            ax.barh(
                y,
                width,
                left=left,
                height=0.6,
                color=STAGE_COLORS[stage],
                linewidth=0,
                gid=f"stage:{label}:{stage}",
            )
            left += width
        ax.plot(
            [stages.budget_ms] * 2,
            [y - 0.4, y + 0.4],
            color=BUDGET_COLOR,
            linestyle="--",
            linewidth=1.2,
            gid=f"budget:{label}",
        )
    ax.set_yticks(range(len(labels)), labels)
    ax.invert_yaxis()
    ax.set_xlabel("ms per step (a stage's time per batch over how many ran at once)")
    handles = [Patch(facecolor=STAGE_COLORS[s], label=s) for s in STAGES] + [
        Line2D([], [], color=BUDGET_COLOR, linestyle="--", label="device work per step")
    ]
    first = items[labels[0]]
    title = (
        f"Input: {first.dominant} dominates" if len(items) == 1 else "Input stages per batch by run"
    )
    return finish_axes(ax, title, handles)
