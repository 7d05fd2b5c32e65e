"""Figures of a multi-host run (:class:`~traceinspect.analysis.straggler.PodAnalysis`).

Same conventions as :mod:`traceinspect.report.plots`: each function draws into ``ax`` (a
new Agg figure when None) and returns it; the cause colours are the same everywhere, and
time inside collectives is the busy grey, hatched: busy on paper, waiting in fact.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from traceinspect import schema as S
from traceinspect.analysis.straggler import PodAnalysis
from traceinspect.report.axes import figure_of as _figure_of
from traceinspect.report.axes import finish_axes
from traceinspect.report.axes import new_axes as _new_axes
from traceinspect.report.plots import BUSY_COLOR, CAUSE_COLORS, IDLE_HATCH
from traceinspect.vocabulary import CAUSES

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

POD_FIGURE_NAMES = ("hosts", "host_steps")
OTHER_HOST_COLOR = "#999999"


def _title(pod: PodAnalysis) -> str:
    if pod.straggler is not None:
        sure = "" if pod.straggler.confirmed else " (unconfirmed)"
        return f"{pod.straggler.host} starves the pod{sure}"
    return f"{len(pod.analyses)} hosts: {pod.verdict}"


def plot_hosts(pod: PodAnalysis, ax: Axes | None = None) -> Axes:
    """One horizontal bar per host: its median step split into device compute, time in
    collectives, and idle time by cause (medians over the steps every host traced)."""
    hosts = sorted(pod.analyses)
    if ax is None:
        ax = _new_axes(9.0, 1.2 + 0.45 * max(1, len(hosts)))
    from matplotlib.patches import Patch

    steps = pod.steps
    med = steps.groupby(S.HOST).median(numeric_only=True) if len(steps) else None
    layers: list[tuple[str, str, str | None]] = [
        ("device compute", BUSY_COLOR, None),
        ("in collectives", BUSY_COLOR, IDLE_HATCH),
        *[(f"idle: {c}", CAUSE_COLORS[c], None) for c in CAUSES],
    ]
    values = np.zeros((len(hosts), len(layers)))
    for i, host in enumerate(hosts):
        if med is not None and host in med.index:
            row = med.loc[host]
            busy, coll = float(row[S.BUSY_NS]), float(row[S.COLLECTIVE_NS])
            idle = [float(row[S.idle_cause_ns(c)]) for c in CAUSES]
        else:  # no aligned steps: the host's own medians
            a = pod.analyses[host]
            busy = a.device_busy_ms_per_step * 1e6
            coll = a.collective_ms_per_step * 1e6
            idle = [float(np.median(a.per_step[S.idle_cause_ns(c)])) for c in CAUSES]
        values[i] = [busy - coll, coll, *idle]
    values /= 1e6
    y = np.arange(len(hosts))[::-1]
    left = np.zeros(len(hosts))
    handles = []
    for j, (label, color, hatch) in enumerate(layers):
        width = values[:, j]
        bars = ax.barh(
            y,
            width,
            left=left,
            height=0.7,
            color="white" if hatch else color,
            edgecolor=color if hatch else None,
            hatch=hatch,
            linewidth=0,
        )
        for patch in bars:
            # A stacked bar's own left end is no edge of the data (an empty layer at the
            # end would hold the longest bar against the right side of the axes); 0 is.
            patch.sticky_edges.x[:] = [0.0]
        left = left + width
        if width.any():
            handles.append(
                Patch(
                    facecolor="white" if hatch else color,
                    edgecolor=color,
                    hatch=hatch,
                    label=label,
                )
            )
    straggler = pod.straggler.host if pod.straggler is not None else None
    ax.set_yticks(y, [f"{h}  (straggler)" if h == straggler else h for h in hosts])
    for tick, host in zip(ax.get_yticklabels(), hosts, strict=True):
        if host == straggler:
            tick.set_color(CAUSE_COLORS["input"])
            tick.set_fontweight("bold")
    ax.set_xlabel("time per step, median (ms)")
    return finish_axes(ax, _title(pod), handles)


def plot_host_steps(pod: PodAnalysis, ax: Axes | None = None) -> Axes:
    """Step time of every host, step by step (aligned by step number); the straggler in
    the input colour, with its input idle time (its device idle, waiting for input) as bars
    underneath."""
    if ax is None:
        ax = _new_axes(9.0, 4.0)
    steps = pod.steps
    straggler = pod.straggler.host if pod.straggler is not None else None
    for host in sorted(pod.analyses):
        mine = steps[steps[S.HOST] == host]
        if mine.empty:
            continue
        x = mine[S.STEP].to_numpy()
        is_straggler = host == straggler
        ax.plot(
            x,
            mine[S.WALL_NS].to_numpy() / 1e6,
            color=CAUSE_COLORS["input"] if is_straggler else OTHER_HOST_COLOR,
            linewidth=2.2 if is_straggler else 1.0,
            marker="o" if is_straggler else None,
            markersize=3,
            label=f"{host} (straggler)" if is_straggler else host,
            zorder=3 if is_straggler else 2,
        )
        if is_straggler:
            ax.bar(
                x,
                mine[S.idle_cause_ns("input")].to_numpy() / 1e6,
                width=0.8,
                color=CAUSE_COLORS["input"],
                alpha=0.35,
                linewidth=0,
                label=f"{host}: input idle (device waiting for input)",
                zorder=1,
            )
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("step")
    ax.set_ylabel("step time (ms)")
    ax.set_ylim(bottom=0)
    handles, labels = ax.get_legend_handles_labels()
    if len(labels) > 12:  # a big pod: the straggler and one entry for the rest
        keep = [i for i, lab in enumerate(labels) if straggler and lab.startswith(straggler)]
        handles = [handles[i] for i in keep]
        labels = [labels[i] for i in keep]
        from matplotlib.lines import Line2D

        handles.append(Line2D([], [], color=OTHER_HOST_COLOR, linewidth=1.0))
        labels.append("other hosts")
    return finish_axes(ax, _title(pod), handles, labels)


def pod_figures(pod: PodAnalysis) -> dict[str, Figure]:
    """The figures of a pod analysis, by name (:data:`POD_FIGURE_NAMES`)."""
    return {
        "hosts": _figure_of(plot_hosts(pod)),
        "host_steps": _figure_of(plot_host_steps(pod)),
    }
