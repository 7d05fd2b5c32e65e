"""The house style every chart shares: a bare Agg figure per chart (no pyplot state, freed
with its last reference) and the finishing touches. Every plotting module builds on this one,
and this one on matplotlib alone."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from traceinspect.errors import UsageError

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


def new_axes(width: float, height: float) -> Axes:
    """Axes on a figure of its own, ``width`` x ``height`` inches, laid out to fit."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:  # pragma: no cover - a broken install
        # matplotlib is a dependency of traceinspect: only a damaged environment lacks it.
        raise UsageError(
            f"Plots need matplotlib, a dependency of traceinspect, and it cannot be imported "
            f"here ({exc}): the install is incomplete; reinstall traceinspect "
            "(pip install --force-reinstall traceinspect) or pip install matplotlib."
        ) from exc
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig.add_subplot()


def finish_axes(
    ax: Axes, title: str, handles: Sequence[Any], labels: Sequence[str] | None = None
) -> Axes:
    """The house style of a chart: title on the left, no top or right spine, the legend
    outside on the right."""
    ax.set_title(title, loc="left")
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    if labels is None:
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    else:
        ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    return ax


def figure_of(ax: Axes) -> Figure:
    """The figure that holds ``ax``."""
    from matplotlib.figure import Figure

    # ax.figure may be a SubFigure; its own .figure is its parent (get_figure(root=True)
    # says the same from matplotlib 3.10 on).
    fig: Any = ax.figure
    while fig is not None and not isinstance(fig, Figure):
        fig = fig.figure
    assert isinstance(fig, Figure)  # axes made by new_axes always have one
    return fig
