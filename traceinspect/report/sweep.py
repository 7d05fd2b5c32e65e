"""A sweep's table (text), its files (JSON, CSV, PNG) and its plot: step time against workers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from traceinspect.report.axes import new_axes as _new_axes
from traceinspect.report.plots import (
    BUSY_COLOR,
    CAUSE_COLORS,
)
from traceinspect.sweep import (
    CRASHED,
    OK,
    TYPICAL,
    UNTRACED,
    Scatter,
    SweepResult,
    SweepRun,
    choose,
    counts_in_words,
    prediction_vs_measured,
)
from traceinspect.sweep._load import JSON_NAME
from traceinspect.vocabulary import CAUSES

if TYPE_CHECKING:
    from matplotlib.axes import Axes

CSV_NAME = "sweep.csv"
PLOT_NAME = "sweep.png"
STAGES_PLOT_NAME = "sweep_input_stages.png"

# Okabe-Ito colours (safe for colour-blind readers).
# The analysis plots' colours: input wait in the input cause's blue, step time in the
# device-busy grey; the chosen count and failed runs in colours no cause uses.
STEP_COLOR = BUSY_COLOR
INPUT_COLOR = CAUSE_COLORS["input"]
CHOSEN_COLOR = "#E69F00"
FAILED_COLOR = "#A50021"

# Mean step time above this times the median: steps come in bursts (fast ones, then a
# stall), and the median understates the time per step.
SKEWED = 1.25


def _fmt_ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f}"


def _fmt_pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _failure(run: SweepRun) -> str:
    if run.status == CRASHED and run.exit_code is not None:
        return f"{run.status} (exit {run.exit_code})"
    return run.status


def _untraced_cell(run: SweepRun) -> str:
    """The untraced figure; for a count timed again, the first run's too, in brackets."""
    if run.first_untraced_ms is None:
        return _fmt_ms(run.untraced_ms)
    return f"{_fmt_ms(run.untraced_ms)} ({_fmt_ms(run.first_untraced_ms)})"


def render_sweep(result: SweepResult) -> str:
    """The table MaxText #2509 shows, one row per worker count, the chosen one marked."""
    untraced = any(r.untraced_ms is not None for r in result.runs)
    header = [
        "",
        "workers",
        *(["untraced ms"] if untraced else []),
        "median ms",
        "p90 ms",
        "mean ms",
        "spread",
        *(f"{c} %" for c in CAUSES),
        "verdict",
    ]
    table: list[list[str]] = [header]
    for run in result.runs:
        mark = "*" if run.workers == result.chosen else ""
        if run.ok:
            cells = [
                *([_untraced_cell(run)] if untraced else []),
                _fmt_ms(run.median_ms),
                _fmt_ms(run.p90_ms),
                _fmt_ms(run.mean_ms),
                "-" if run.spread is None else f"{run.spread:.2f}",
                *(_fmt_pct(run.idle_fractions.get(c)) for c in CAUSES),
                run.verdict or "-",
            ]
        else:
            # A dash under every figure; the failure where the verdict goes.
            cells = ["-"] * (len(header) - 3) + [_failure(run)]
        table.append([mark, str(run.workers), *cells])
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    lines = []
    for row in table:
        # Numbers right-aligned, the verdict left-aligned.
        cells = [cell.rjust(width) for cell, width in zip(row[:-1], widths, strict=False)]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
    lines.append("")
    lines.append(choice_sentence(result))
    if result.metric_note:
        lines.append(f"Compared by traced step time: {result.metric_note}.")
    if result.chosen is not None:
        lines.append(
            (
                "untraced: time per step of the steps after the trace, without the profiler; "
                "median, p90, mean: the traced steps. "
                if untraced
                else ""
            )
            + "spread: (p90 - p10) / mean of the step times; input ... unknown %: share of "
            "step time the device sat idle, by cause."
        )
    again = [r.workers for r in result.runs if r.first_untraced_ms is not None]
    if again:
        lines.append(
            f"Timed again: {counts_in_words(again)} workers (the best untraced figure, and the "
            "count chosen where it differed): the figure is the second run's, the first's in "
            "brackets; one run's figure scatters, and the lowest of several is low by chance "
            "more often than not."
        )
    scatter = result.scatter
    if scatter is not None:
        lines.append(scatter_sentence(scatter, result.tolerance))
    skewed = [
        r.workers
        for r in result.runs
        if r.ok and r.mean_ms is not None and r.mean_ms > SKEWED * (r.median_ms or 0.0)
    ]
    bursty = [r.workers for r in result.runs if r.bursty]
    if bursty and result.metric == TYPICAL:
        lines.append(
            f"Steps come in bursts at {', '.join(map(str, bursty))} workers: there the step time "
            "is the mean (throughput), as analyze gives it; elsewhere the median."
        )
    if skewed and result.metric == "median":
        by_mean, _ = choose(result.runs, result.tolerance, "mean")
        lines.append(
            f"Steps come in bursts at {', '.join(map(str, skewed))} workers (mean step time "
            f"over {SKEWED:g}x the median), so the median understates the time per step there; "
            f"by mean step time (throughput) the choice is {by_mean} workers (--by mean)."
        )
    agreement = prediction_vs_measured(result)
    if agreement is not None:
        lines.append(agreement)
    notes = [(run.workers, run.message) for run in result.runs if run.message]
    if notes:
        lines.append("")
        lines.extend(f"workers={workers}: {message}" for workers, message in notes)
    return "\n".join(lines)


def scatter_sentence(scatter: Scatter, tolerance: float) -> str:
    """The counts whose order the runs' own scatter leaves open (:class:`Scatter`)."""
    return (
        f"Within the runs' scatter: the two runs of {scatter.workers} workers read "
        f"{_fmt_ms(scatter.first_ms)} and {_fmt_ms(scatter.second_ms)} ms, "
        f"{scatter.fraction:.0%} apart, more than the {tolerance:.0%} that decides; "
        f"{counts_in_words(scatter.within)} "
        "workers lie within that of the best figure, in an order one run each does not "
        "settle, and another sweep on this machine may choose another of them (more runs, "
        "or a quieter machine, settle it)."
    )


def choice_sentence(result: SweepResult) -> str:
    """One line: which count to use, and why (or that no run could be measured)."""
    if result.chosen is None:
        return "No run could be measured, so no worker count is recommended."
    chosen = result.run(result.chosen)
    best = result.run(result.best) if result.best is not None else chosen
    tol = f"{result.tolerance:.0%}"
    metric = result.metric
    named = {TYPICAL: "", UNTRACED: "untraced "}.get(metric, f"{metric} ")
    if chosen.workers == best.workers:
        return (
            f"* {chosen.workers} workers: the best {named}step time "
            f"({_fmt_ms(chosen.step_ms(metric))} ms), and no smaller count is within {tol} of it."
        )
    return (
        f"* {chosen.workers} workers: the smallest count within {tol} of the best {named}"
        f"step time ({_fmt_ms(chosen.step_ms(metric))} ms against "
        f"{_fmt_ms(best.step_ms(metric))} ms "
        f"at {best.workers} workers)."
    )


def plot_title(result: SweepResult) -> str:
    if result.chosen is None:
        return "No worker count could be measured"
    chosen = result.run(result.chosen)
    head = f"{chosen.workers} workers: {_fmt_ms(chosen.step_ms(result.metric))} ms/step"
    if result.best is None or result.best == result.chosen:
        return f"{head}, the best"
    best = result.run(result.best)
    return (
        f"{head}, within {result.tolerance:.0%} of the best "
        f"({_fmt_ms(best.step_ms(result.metric))} ms at {best.workers})"
    )


def plot_sweep(result: SweepResult, ax: Axes | None = None) -> Axes:
    """Step time (median or mean, as the sweep chose by; p10-p90 as error bars) and input
    wait against the worker count.

    The lines carry gids ``step_time``, ``input_wait`` and ``chosen`` (for tests and styling).

    Counts are evenly spaced (they are usually powers of two, and 0 has no log), the chosen
    count is marked, and counts whose run failed are named on the axis.
    """
    if ax is None:
        ax = _new_axes(7.0, 4.2)
    positions = {run.workers: i for i, run in enumerate(result.runs)}
    ok = [run for run in result.runs if run.ok]
    x = [positions[run.workers] for run in ok]
    median = [float(run.step_ms(result.metric) or 0.0) for run in ok]
    # The mean is the slower of the host's step starts and the completions, while p10-p90
    # are the host's: the mean can lie outside them (1 worker: mean 1.2 ms just above a p90
    # of 1.2), so each bar reaches from the point to its side of the band, or not at all.
    low = [
        max(0.0, m - float(run.p10_ms if run.p10_ms is not None else m))
        for m, run in zip(median, ok, strict=True)
    ]
    high = [
        max(0.0, float(run.p90_ms if run.p90_ms is not None else m) - m)
        for m, run in zip(median, ok, strict=True)
    ]
    if result.metric == UNTRACED:
        # The traced steps' p10-p90 do not bound the untraced pace: the traced typical step
        # is drawn beside it instead, the profiler's cost between the two.
        ax.plot(
            x,
            median,
            color=STEP_COLOR,
            marker="o",
            label="step time without the profiler (after the trace)",
            gid="step_time",
        )
        ax.plot(
            x,
            [float(run.step_ms(TYPICAL) or 0.0) for run in ok],
            color=STEP_COLOR,
            marker="o",
            linestyle=":",
            alpha=0.6,
            label="traced step time",
            gid="traced_step_time",
        )
    else:
        bars = ax.errorbar(
            x,
            median,
            yerr=[low, high],
            color=STEP_COLOR,
            marker="o",
            capsize=3,
            label=f"{result.metric} step time (bars: p10-p90)",
        )
        bars.lines[0].set_gid("step_time")
    ax.plot(
        x,
        [float(run.input_wait_ms or 0.0) for run in ok],
        color=INPUT_COLOR,
        marker="s",
        linestyle="--",
        label="input wait (training loop waiting for a batch)",
        gid="input_wait",
    )
    if result.chosen is not None:
        chosen = result.run(result.chosen)
        ax.axvline(
            positions[chosen.workers],
            color=CHOSEN_COLOR,
            linestyle=":",
            label=f"chosen: {chosen.workers} workers",
            gid="chosen",
            # Behind the step-time line and its error bar, which it would cover.
            zorder=0.5,
        )
    ax.set_xticks(range(len(result.runs)))
    ax.set_xticklabels(
        [str(r.workers) if r.status == OK else f"{r.workers}\n({r.status})" for r in result.runs]
    )
    for label, run in zip(ax.get_xticklabels(), result.runs, strict=True):
        if run.status != OK:
            label.set_color(FAILED_COLOR)
    ax.set_xlim(-0.5, len(result.runs) - 0.5)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("Grain worker count")
    ax.set_ylabel("ms per step")
    ax.set_title(plot_title(result))
    ax.grid(axis="y", alpha=0.3)
    ax.legend(loc="upper right", fontsize="small")
    return ax


def write_sweep(result: SweepResult, directory: str | Path) -> dict[str, Path]:
    """Write ``sweep.json``, ``sweep.csv`` and ``sweep.png``; return them."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    written["json"] = _write_text(out / JSON_NAME, json.dumps(result.to_dict(), indent=2) + "\n")
    written["csv"] = _write_text(out / CSV_NAME, result.rows().to_csv(index=False))
    ax = plot_sweep(result)
    path = out / PLOT_NAME
    figure: Any = ax.figure
    figure.savefig(path, dpi=120)
    written["png"] = path
    stages = {
        f"{r.workers} worker{'s' if r.workers != 1 else ''}": r.input_stages
        for r in result.runs
        if r.input_stages is not None
    }
    if stages:
        from traceinspect.report.input_plots import plot_input_stages

        figure = plot_input_stages(stages).figure
        path = out / STAGES_PLOT_NAME
        figure.savefig(path, dpi=120)
        written["stages_png"] = path
    return written


def _write_text(path: Path, text: str) -> Path:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return path
