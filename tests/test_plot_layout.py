"""Each plot rendered, its layout checked from the artists' bounding boxes: no two labels
overlap, the tallest bar has room above it, the sweep's chosen line sits behind the error
bars, and the titles and axis labels say what the figures mean."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from traces import ROOT

import traceinspect
from traceinspect.analysis.analyze import analyze
from traceinspect.cli.sample import sample_path
from traceinspect.report.plots import (
    plot_gap_distribution,
    plot_step_breakdown,
    plot_timeline,
)
from traceinspect.report.run_plots import plot_step_curve
from traceinspect.report.sweep import plot_sweep, plot_title
from traceinspect.sweep import OK, SweepRun, summarize_sweep


def _boxes(ax: Any) -> list[tuple[str, Any]]:
    """The drawn texts of ``ax`` (annotations and the title) with their boxes on screen."""
    fig = ax.figure
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    texts = [*ax.texts, ax.title, ax._left_title]
    return [(t.get_text(), t.get_window_extent(renderer)) for t in texts if t.get_text()]


def _overlaps(ax: Any) -> list[tuple[str, str]]:
    return [(a, b) for (a, x), (b, y) in itertools.combinations(_boxes(ax), 2) if x.overlaps(y)]


@pytest.fixture(scope="module")
def sample() -> tuple[Any, Any]:
    trace = traceinspect.load(sample_path(), use_cache=False)
    return trace, analyze(trace)


def test_the_analysis_plots_have_no_overlapping_labels(sample: tuple[Any, Any]) -> None:
    trace, a = sample
    for ax in (plot_timeline(trace, a), plot_step_breakdown(a), plot_gap_distribution(a)):
        assert _overlaps(ax) == [], ax.get_title(loc="left")


def test_the_tallest_bar_has_room_above_it(sample: tuple[Any, Any]) -> None:
    ax: Any = plot_step_breakdown(sample[1])
    tallest = max(p.get_y() + p.get_height() for p in ax.patches)
    _, top = ax.get_ylim()
    assert tallest <= top / 1.05  # at least 5% of the axes above the bar
    renderer = ax.figure.canvas.get_renderer()
    ax.figure.canvas.draw()
    axes_top = ax.get_window_extent(renderer).y1
    assert max(p.get_window_extent(renderer).y1 for p in ax.patches) < axes_top - 5


def test_breakdowns_side_by_side_on_one_y_axis_show_every_bar_whole(
    sample: tuple[Any, Any],
) -> None:
    """Before and after with sharey (notebooks/02): the shorter run's plot, drawn second,
    does not cut the taller run's bars off."""
    import matplotlib.pyplot as plt

    healthy = analyze(traceinspect.load(ROOT / "sample_traces/scenarios/healthy", use_cache=False))
    fig, axes = plt.subplots(1, 2, sharey=True)
    try:
        plot_step_breakdown(sample[1], ax=axes[0])
        plot_step_breakdown(healthy, ax=axes[1])
        tallest = max(p.get_y() + p.get_height() for ax in axes for p in ax.patches)
        assert tallest <= axes[0].get_ylim()[1] / 1.05
        assert axes[0].get_ylim() == axes[1].get_ylim() and axes[0].get_ylim()[0] == 0
    finally:
        plt.close(fig)


def test_the_longest_host_bar_has_room_beside_it() -> None:
    pod = traceinspect.analyze_run(ROOT / "sample_traces/pod/straggler", jobs=1)
    ax: Any = traceinspect.plot_hosts(pod)
    longest = max(p.get_x() + p.get_width() for p in ax.patches)
    left, right = ax.get_xlim()
    assert left == 0 and longest <= right / 1.03


def test_the_gap_plot_says_why_its_totals_differ_from_the_idle_table(
    sample: tuple[Any, Any],
) -> None:
    ax = plot_gap_distribution(sample[1])
    assert "each gap counts whole under its main cause" in ax.get_xlabel()


def _curve_sidecar(walls: list[float]) -> Any:
    from traceinspect import sidecar as SC

    steps: list[dict[str, Any]] = []
    start = 0
    for i, wall in enumerate(walls):
        entry: dict[str, Any] = {"index": i, "step_num": None, "start_unix_ns": start}
        entry.update(traced=10 <= i < 20, wall_ms=wall if i < len(walls) - 1 else None)
        steps.append(entry)
        start += int(wall * 1e6)
    window = {"rule": "steady", "reason": "r", "first_step": 10, "last_step": 19}
    return SC.parse({"steps": steps, "window": {**window, "complete": True}})


def test_labels_of_neighbouring_clipped_steps_do_not_overlap() -> None:
    # Steps 0 and 1 both compile (2 s, 1.5 s): both clipped to the top, both labelled.
    ax: Any = plot_step_curve(_curve_sidecar([2000.0, 1500.0, 900.0] + [10.0] * 28))
    assert [t.get_text() for t in ax.texts] == [
        "step 0: 2.00 s",
        "step 1: 1.50 s",
        "step 2: 900 ms",
    ]
    assert _overlaps(ax) == []
    renderer = ax.figure.canvas.get_renderer()
    inside = ax.get_window_extent(renderer)
    assert all(inside.y0 <= t.get_window_extent(renderer).y0 for t in ax.texts)


def _run(workers: int, median: float, p10: float, p90: float) -> SweepRun:
    return SweepRun(
        workers=workers,
        status=OK,
        median_ms=median,
        p90_ms=p90,
        p10_ms=p10,
        mean_ms=median,
        input_wait_ms=0.0,
        idle_fractions=dict.fromkeys(("input", "sync", "compile", "host", "unknown"), 0.0),
        verdict="device-bound",
        steps=10,
        exit_code=0,
        observed_workers=workers,
    )


def test_the_sweeps_chosen_line_is_behind_the_error_bars_and_the_title_fits() -> None:
    best_at_zero = summarize_sweep([_run(0, 10.0, 9.0, 12.0), _run(1, 11.0, 10.0, 13.0)])
    assert best_at_zero.chosen == best_at_zero.best == 0
    assert plot_title(best_at_zero) == "0 workers: 10.00 ms/step, the best"
    ax = plot_sweep(best_at_zero)
    (chosen,) = [line for line in ax.get_lines() if line.get_gid() == "chosen"]
    step = next(line for line in ax.get_lines() if line.get_gid() == "step_time")
    assert ax.collections  # the error bars
    assert all(chosen.get_zorder() < bar.get_zorder() for bar in ax.collections)
    assert chosen.get_zorder() < step.get_zorder()
    assert _overlaps(ax) == []
    close = summarize_sweep([_run(1, 10.2, 9.0, 12.0), _run(2, 10.0, 9.0, 11.0)])
    assert close.chosen == 1 and close.best == 2
    assert plot_title(close) == ("1 workers: 10.20 ms/step, within 5% of the best (10.00 ms at 2)")
