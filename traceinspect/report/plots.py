"""Matplotlib figures of an :class:`~traceinspect.analysis.analyze.Analysis`.

Every plot function draws into ``ax`` (a new figure when ``ax`` is None) and returns the
Axes; nothing is shown or printed. New figures are plain ``matplotlib.figure.Figure``
objects on an Agg canvas, not pyplot figures: they need no display, leave pyplot's state
alone and are freed with their last reference. matplotlib is imported inside the
functions, so importing this module (and the CLI) stays fast.

Colours: one per cause everywhere (:data:`CAUSE_COLORS`, from the Okabe-Ito palette,
which stays distinguishable with the common colour-vision deficiencies), device busy time
in a neutral grey (:data:`BUSY_COLOR`).
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from traceinspect import schema as S
from traceinspect.analysis.result import Analysis, Timeline
from traceinspect.analysis.steps import find_steps
from traceinspect.analysis.training_thread import HostActivity
from traceinspect.analysis.training_thread import training_thread_activity as _thread_activity
from traceinspect.backends.activity import device_activity
from traceinspect.errors import UsageError
from traceinspect.intervals import Intervals
from traceinspect.report.axes import figure_of as _figure_of
from traceinspect.report.axes import finish_axes
from traceinspect.report.axes import new_axes as _new_axes
from traceinspect.report.titles import finding
from traceinspect.trace import Trace
from traceinspect.vocabulary import CAUSES, PRECEDENCE

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

CAUSE_COLORS: dict[str, str] = {
    "input": "#0072B2",  # blue
    "sync": "#D55E00",  # vermillion
    "compile": "#CC79A7",  # reddish purple
    "host": "#009E73",  # bluish green
    "runtime": "#E69F00",  # orange: the device's side, its next program already dispatched
    "unknown": "#BBBBBB",  # light grey: nothing known about it
}
BUSY_COLOR = "#4D4D4D"
# Idle time on device lanes: the cause's own colour, hatched so it reads as "idle because
# of" rather than as the thread's activity (a translucent tint would change the colour).
IDLE_HATCH = "////"
# What the training thread was doing, in the precedence the analysis gives idle instants.
THREAD_ORDER = PRECEDENCE
FIGURE_NAMES = ("timeline", "step_breakdown", "gap_distribution")


def _ns_to_ms(ns: np.ndarray | pd.Series | int, origin_ns: int = 0) -> np.ndarray:
    return (np.asarray(ns, dtype=np.float64) - origin_ns) / 1e6


def _spans(iv: Intervals, origin_ns: int) -> list[tuple[float, float]]:
    """``(start_ms, width_ms)`` pairs for ``broken_barh``."""
    starts = _ns_to_ms(iv.starts, origin_ns)
    widths = (iv.ends - iv.starts) / 1e6
    return list(zip(starts.tolist(), widths.tolist(), strict=True))


def format_ms(value: float) -> str:
    """Milliseconds with one decimal, or two significant digits below 1 ms."""
    return f"{value:,.1f} ms" if value >= 1 or value == 0 else f"{value:.2g} ms"


def timeline_of(trace: Trace, analysis: Analysis, host: HostActivity | None = None) -> Timeline:
    """What the timeline draws: the analysis's own, or (for the compact per-host results of
    a pod, which drop it) found again from the trace the way :func:`analyze` finds it."""
    if analysis.timeline is not None and host is None:
        return analysis.timeline
    if host is None:
        host = _thread_activity(trace, find_steps(trace))
    activity = device_activity(trace)
    return Timeline(
        busy=activity.busy,
        thread=Intervals.claim_in_order([(c, getattr(host, c)) for c in THREAD_ORDER]),
        training_line_row=host.main_line_row,
        device_lines=activity.work_line_rows,
        origin_ns=trace.start_ns,
    )


def step_window(analysis: Analysis, steps: int, first_step: int | None) -> tuple[int, int]:
    """Row positions ``[i0, i1)`` in ``analysis.per_step`` of the steps a timeline shows:
    ``steps`` consecutive steps from step number ``first_step``, by default from the middle
    of the run (away from warm-up and the edges of the capture)."""
    per_step = analysis.per_step
    n = len(per_step)
    k = max(1, min(steps, n))
    if first_step is None:
        i0 = (n - k) // 2
    else:
        hits = np.flatnonzero(per_step[S.STEP].to_numpy() == first_step)
        if len(hits) == 0:
            numbers = per_step[S.STEP].tolist()
            raise UsageError(
                f"{analysis.path}: no step {first_step} among the analysed steps "
                f"({numbers[0]}..{numbers[-1]}); pick one of those."
            )
        i0 = min(int(hits[0]), n - k)
    return i0, i0 + k


def _device_label(device: str) -> str:
    return "device (XLA CPU)" if device == "cpu" else device.removeprefix("/device:")


def plot_timeline(
    trace: Trace,
    analysis: Analysis,
    steps: int = 3,
    ax: Axes | None = None,
    *,
    first_step: int | None = None,
    host: HostActivity | None = None,
) -> Axes:
    """A few consecutive steps: one lane per device (busy spans in grey, idle time tinted
    by its cause), one lane for the training thread (what it was doing), step boundaries
    as dashed lines. Time in ms from the start of the trace, as in ``analyze``'s output.

    It draws the analysis's own :class:`~traceinspect.analysis.result.Timeline` and
    analyses nothing again; ``host`` (a training thread's activity) replaces the thread lane.
    """
    if ax is None:
        n_devices = max(1, len(analysis.devices))
        ax = _new_axes(11.0, 2.4 + 0.55 * n_devices)
    timeline = timeline_of(trace, analysis, host)
    return draw_timeline(
        analysis, replace(timeline, origin_ns=trace.start_ns), steps, ax, first_step
    )


def draw_timeline(
    analysis: Analysis,
    timeline: Timeline,
    steps: int,
    ax: Axes,
    first_step: int | None = None,
) -> Axes:
    """:func:`plot_timeline`'s drawing, from an analysis and its timeline alone (times from
    ``timeline.origin_ns``): for a notebook's summary, which has no trace at hand."""
    from matplotlib.patches import Patch
    from matplotlib.transforms import blended_transform_factory

    per_step = analysis.per_step
    origin = timeline.origin_ns
    i0, i1 = step_window(analysis, steps, first_step)
    shown = per_step.iloc[i0:i1]
    lo = int(shown[S.START_NS].iloc[0])
    hi = int(shown[S.START_NS].iloc[-1] + shown[S.WALL_NS].iloc[-1])

    busy = timeline.busy
    devices = list(busy)
    height = 0.6
    # Lanes from the top: devices in trace order, then the training thread at y = 0.
    lane_y = {device: float(len(devices) - j) for j, device in enumerate(devices)}
    if devices:
        region_lo = min(lane_y.values()) - height / 2
        region_hi = max(lane_y.values()) + height / 2
        gaps = analysis.gaps
        inside = gaps[(gaps[S.START_NS] < hi) & (gaps[S.END_NS] > lo)]
        for cause in CAUSES:
            mine = inside[inside[S.CAUSE] == cause]
            if mine.empty:
                continue
            iv = Intervals.union_of(
                np.maximum(mine[S.START_NS].to_numpy(), lo),
                np.minimum(mine[S.END_NS].to_numpy(), hi),
            )
            ax.broken_barh(
                _spans(iv, origin),
                (region_lo, region_hi - region_lo),
                facecolors=CAUSE_COLORS[cause],
                edgecolors="white",
                hatch=IDLE_HATCH,
                linewidth=0,
                gid=f"idle:{cause}",
            )
        for device in devices:
            ax.broken_barh(
                _spans(busy[device].clip(lo, hi), origin),
                (lane_y[device] - height / 2, height),
                facecolors=BUSY_COLOR,
                linewidth=0,
                gid=f"device:{device}",
                zorder=3,
            )

    drawn = set()
    for category, whole in timeline.thread.items():
        iv = whole.clip(lo, hi)
        if len(iv) == 0:
            continue
        drawn.add(category)
        ax.broken_barh(
            _spans(iv, origin),
            (-height / 2, height),
            facecolors=CAUSE_COLORS[category],
            linewidth=0,
            gid=f"thread:{category}",
            zorder=3,
        )

    top = (max(lane_y.values()) if lane_y else 0.0) + height / 2
    label_at = blended_transform_factory(ax.transData, ax.transAxes)
    bounds = [*shown[S.START_NS].tolist(), hi]
    for x in bounds:
        ax.axvline(
            float(_ns_to_ms(x, origin)), color="black", linewidth=0.8, linestyle="--", zorder=4
        )
    # Label step starts, skipping those too close to the previous label to be read.
    min_gap = 0.05 * (hi - lo)
    last_label: int | None = None
    for x, number in zip(shown[S.START_NS].tolist(), shown[S.STEP].tolist(), strict=True):
        if last_label is not None and x - last_label < min_gap:
            continue
        last_label = x
        ax.text(
            float(_ns_to_ms(x, origin)),
            1.01,
            f" step {number}",
            transform=label_at,
            fontsize=8,
            va="bottom",
            ha="left",
        )
    if not drawn:
        ax.text(
            float(_ns_to_ms(lo + (hi - lo) // 2, origin)),
            0.0,
            "no training thread found in the trace"
            if not timeline.training_thread_found
            else "nothing traced on the training thread in these steps",
            ha="center",
            va="center",
            fontsize=9,
            color="#666666",
        )

    ax.set_xlim(float(_ns_to_ms(lo, origin)), float(_ns_to_ms(hi, origin)))
    ax.set_ylim(-0.6, top + 0.3)
    ticks = [*lane_y.values(), 0.0]
    labels = [_device_label(d) for d in lane_y] + ["training thread"]
    ax.set_yticks(ticks, labels)
    ax.tick_params(axis="y", length=0)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    ax.set_xlabel("time since trace start (ms)")
    causes_shown = [c for c in CAUSES if c in drawn or not inside[inside[S.CAUSE] == c].empty]
    handles = [Patch(facecolor=BUSY_COLOR, label="device busy")] + [
        Patch(facecolor=CAUSE_COLORS[c], label=c) for c in causes_shown
    ]
    ax.legend(
        handles=handles,
        loc="upper left",
        bbox_to_anchor=(1.0, 1.0),
        frameon=False,
        fontsize=9,
        title="colour = cause\n(hatched: device\nidle because of it)",
        title_fontsize=8,
        alignment="left",
    )
    first, last = int(shown[S.STEP].iloc[0]), int(shown[S.STEP].iloc[-1])
    which = f"step {first}" if first == last else f"steps {first}-{last}"
    ax.set_title(f"{finding(analysis)}: {which}", loc="left", pad=16)
    return ax


def plot_step_breakdown(analysis: Analysis, ax: Axes | None = None) -> Axes:
    """One stacked bar per step: device busy time, then idle time by cause (ms)."""
    if ax is None:
        ax = _new_axes(9.0, 4.0)
    from matplotlib.patches import Patch

    per_step = analysis.per_step
    x = np.arange(len(per_step))
    bottom = np.zeros(len(per_step))
    layers = [("busy", S.BUSY_NS, BUSY_COLOR)] + [
        (c, S.idle_cause_ns(c), CAUSE_COLORS[c]) for c in CAUSES
    ]
    handles = []
    for name, column, color in layers:
        heights = _ns_to_ms(per_step[column])
        bars = ax.bar(x, heights, bottom=bottom, width=0.8, color=color, label=name, linewidth=0)
        for patch in bars:
            # A stacked bar's own bottom is no edge of the data (an empty layer on top
            # would stop the margin below at the tallest bar); 0 is.
            patch.sticky_edges.y[:] = [0.0]
        bottom = bottom + heights
        if heights.any():
            label = "device busy" if name == "busy" else f"idle: {name}"
            handles.append(Patch(facecolor=color, label=label))
    # Headroom above the tallest bar, so that it does not touch the top of the axes: a
    # margin, not a limit, so that axes sharing y (before and after side by side) still
    # scale to the tallest bar of them all.
    if len(bottom) and bottom.max() > 0:
        ax.margins(y=0.1)
    else:
        ax.set_ylim(0, 1.0)
    # At most ~20 labelled steps, so long runs stay legible.
    every = max(1, int(np.ceil(len(x) / 20)))
    ax.set_xticks(x[::every], [str(s) for s in per_step[S.STEP].tolist()[::every]])
    ax.set_xlabel("step")
    ax.set_ylabel("time per step (ms)")
    return finish_axes(ax, finding(analysis), handles)


def _strip_offsets(n: int) -> np.ndarray:
    """Deterministic vertical jitter in [-0.3, 0.3) (golden-ratio sequence)."""
    return ((np.arange(n) * 0.6180339887) % 1.0 - 0.5) * 0.6


def plot_gap_distribution(analysis: Analysis, ax: Axes | None = None) -> Axes:
    """Every idle gap as a dot at its duration (ms, log scale), one row per main cause
    (the cause of most of the gap), each row labelled with its count and total."""
    if ax is None:
        ax = _new_axes(8.0, 3.8)
    gaps = analysis.gaps
    rows = list(reversed(CAUSES))  # input on top
    labels = []
    totals: dict[str, float] = {}
    for y, cause in enumerate(rows):
        durations = _ns_to_ms(gaps.loc[gaps[S.CAUSE] == cause, S.DURATION_NS])
        totals[cause] = float(durations.sum())
        count = f"{len(durations)} gap" + ("" if len(durations) == 1 else "s")
        labels.append(f"{cause}\n{count}, {format_ms(totals[cause])}")
        if len(durations) == 0:
            continue
        ax.scatter(
            durations,
            y + _strip_offsets(len(durations)),
            s=22,
            color=CAUSE_COLORS[cause],
            alpha=0.85,
            edgecolors="none",
            label=cause,
            gid=f"gaps:{cause}",
            zorder=3,
        )
    ax.set_yticks(range(len(rows)), labels)
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.tick_params(axis="y", length=0)
    ax.set_xscale("log")
    if gaps.empty:
        ax.set_xlim(1e-3, 1.0)
        title = "No idle gaps inside the analysed steps"
    else:
        worst = max(totals, key=lambda c: totals[c])
        n = int((gaps[S.CAUSE] == worst).sum())
        title = (
            f"{worst.capitalize()} gaps cost most: {n} of {len(gaps)} gaps, "
            f"{format_ms(totals[worst])} in all"
        )
    ax.grid(axis="x", which="major", color="#DDDDDD", linewidth=0.8, zorder=0)
    # The idle table splits a gap's instants between causes; here a gap counts whole under
    # the cause of most of it, so the totals differ: say so where the totals are read.
    ax.set_xlabel(
        "gap duration (ms, log scale); each gap counts whole under its main cause "
        "(the idle-time table splits it by cause)"
    )
    ax.set_title(title, loc="left")
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    return ax


def analysis_figures(trace: Trace, analysis: Analysis) -> dict[str, Figure]:
    """The figures of an analysis, by name (:data:`FIGURE_NAMES`, and ``input_stages`` when
    capture measured the input pipeline's stages, ``step_curve`` when a capture sidecar holds
    the run's host step times)."""
    axes = {
        "timeline": plot_timeline(trace, analysis),
        "step_breakdown": plot_step_breakdown(analysis),
        "gap_distribution": plot_gap_distribution(analysis),
    }
    if analysis.input_stages is not None:
        from traceinspect.report.input_plots import plot_input_stages

        axes["input_stages"] = plot_input_stages(analysis.input_stages)
    from traceinspect.report.run_plots import has_step_curve, plot_step_curve

    if trace.sidecar is not None and has_step_curve(trace.sidecar):
        axes["step_curve"] = plot_step_curve(trace.sidecar)
    return {name: _figure_of(ax) for name, ax in axes.items()}


def figure_png(fig: Figure, dpi: int = 110) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()


def save_figures(
    figures: Mapping[str, Figure], directory: str | Path, dpi: int = 110
) -> list[Path]:
    """Write each figure as ``<directory>/<name>.png`` (the directory is created)."""
    out_dir = Path(directory)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, fig in figures.items():
        path = out_dir / f"{name}.png"
        path.write_bytes(figure_png(fig, dpi))
        paths.append(path)
    return paths
