"""Plots and the HTML page: the data drawn (not pixels), colours per cause, the CLI files."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest
import xspace as X
from click.testing import CliRunner
from matplotlib.axes import Axes
from matplotlib.collections import Collection, PathCollection
from matplotlib.colors import to_rgba
from matplotlib.container import BarContainer
from matplotlib.figure import Figure

import traceinspect
from traceinspect import schema as S
from traceinspect.analysis.analyze import Analysis, analyze
from traceinspect.backends.activity import device_activity
from traceinspect.cli import main
from traceinspect.errors import UsageError
from traceinspect.intervals import Intervals
from traceinspect.report.html import render_html
from traceinspect.report.plots import (
    BUSY_COLOR,
    CAUSE_COLORS,
    FIGURE_NAMES,
    analysis_figures,
    plot_gap_distribution,
    plot_step_breakdown,
    plot_timeline,
    step_window,
)
from traceinspect.vocabulary import CAUSES

MS = 1_000_000  # ns
PS = 1_000  # ps per ns
SCENARIOS = Path(__file__).resolve().parents[1] / "sample_traces" / "scenarios"
# jax names jitted lambdas like this: evidence quotes it, the page must escape it.
LAMBDA = "PjitFunction(<lambda> & 'co')"


def ms(x: float) -> int:
    return round(x * MS * PS)


def _sync_trace(tmp_path: Path, steps: int = 5) -> traceinspect.Trace:
    """Per 10 ms step: 1 ms fetch, 0.5 ms dispatch, an 8.5 ms kernel from 1.5 ms; the loop
    reads the result (np.asarray) until 0.1 ms after the kernel ends: sync-bound."""
    xs = X.space()
    host = [X.Ev("train", ms(10 * i), ms(10), {"step_num": i}) for i in range(steps)]
    kernels = []
    for i in range(steps):
        t = 10 * i
        host += [
            X.Ev("PrefetchDatasetIterator.__next__", ms(t), ms(1)),
            X.Ev(LAMBDA, ms(t + 1), ms(0.5)),
            X.Ev("np.asarray(jax.Array)", ms(t + 1.6), ms(8.1)),
        ]
        kernels.append(X.Ev("gemm", ms(t + 1.5), ms(8)))
    X.add_plane(xs, "/host:CPU").line("python", 0, host)
    X.add_plane(xs, "/device:GPU:0").line("Stream #7(Compute)", 0, kernels)
    return traceinspect.load(X.write(xs, tmp_path / "t.xplane.pb"))


@pytest.fixture
def built(tmp_path: Path) -> tuple[traceinspect.Trace, Analysis]:
    trace = _sync_trace(tmp_path)
    return trace, analyze(trace)


@pytest.fixture(scope="module")
def sync_bound() -> tuple[traceinspect.Trace, Analysis]:
    trace = traceinspect.load(SCENARIOS / "sync_bound" / "vm.xplane.pb")
    return trace, analyze(trace)


def _by_gid(ax: Axes) -> dict[str, Collection]:
    return {str(c.get_gid()): c for c in ax.collections if c.get_gid()}


def _x_spans(collection: Collection) -> np.ndarray:
    """(start, end) in data x of each rectangle of a ``broken_barh``, sorted, shape (n, 2)."""
    spans = sorted(
        (float(np.asarray(p.vertices)[:, 0].min()), float(np.asarray(p.vertices)[:, 0].max()))
        for p in collection.get_paths()
    )
    return np.array(spans, dtype=np.float64).reshape(-1, 2)


def _ms_spans(iv: Intervals, origin_ns: int) -> np.ndarray:
    return (np.stack([iv.starts, iv.ends], axis=1) - origin_ns) / 1e6


def _color(collection: Collection) -> tuple[float, ...]:
    return tuple(float(v) for v in np.asarray(collection.get_facecolor())[0])


def test_timeline_lanes_on_a_built_trace(built: tuple[traceinspect.Trace, Analysis]) -> None:
    trace, a = built
    assert a.verdict == "sync-bound"
    ax = plot_timeline(trace, a, steps=2, first_step=2)
    lanes = _by_gid(ax)
    origin = trace.start_ns
    assert origin == 0
    # Steps 2 and 3: [20, 40) ms. The device lane is exactly the two kernels.
    assert ax.get_xlim() == (20.0, 40.0)
    assert _x_spans(lanes["device:/device:GPU:0"]) == pytest.approx(
        np.array([(21.5, 29.5), (31.5, 39.5)])
    )
    # The training thread: fetch, dispatch (host), then the blocking read.
    assert _x_spans(lanes["thread:input"]) == pytest.approx(np.array([(20, 21), (30, 31)]))
    assert _x_spans(lanes["thread:host"]) == pytest.approx(np.array([(21, 21.5), (31, 31.5)]))
    assert _x_spans(lanes["thread:sync"]) == pytest.approx(np.array([(21.6, 29.7), (31.6, 39.7)]))
    # Every idle instant of the window is shaded, by the cause of its gap.
    shaded = sorted(
        tuple(span)
        for gid, c in lanes.items()
        if gid.startswith("idle:")
        for span in _x_spans(c).tolist()
    )
    assert np.array(shaded) == pytest.approx(np.array([(20, 21.5), (29.5, 31.5), (39.5, 40)]))
    assert set(lanes) >= {"idle:sync"}
    # Dashed boundaries at the starts of steps 2 and 3 and the end of step 3.
    bounds = sorted(float(np.asarray(line.get_xdata())[0]) for line in ax.lines)
    assert bounds == [20.0, 30.0, 40.0]
    assert ax.get_title(loc="left").startswith(f"Device idle {a.idle_fraction:.0%}")
    assert "mostly sync" in ax.get_title(loc="left")


def test_timeline_device_lane_matches_busy_intervals_on_a_capture(
    sync_bound: tuple[traceinspect.Trace, Analysis],
) -> None:
    trace, a = sync_bound
    ax = plot_timeline(trace, a)  # default: three steps from the middle of the run
    i0, i1 = step_window(a, 3, None)
    shown = a.per_step.iloc[i0:i1]
    lo = int(shown["start_ns"].iloc[0])
    hi = int(shown["start_ns"].iloc[-1] + shown["wall_ns"].iloc[-1])
    busy = device_activity(trace).busy
    lanes = _by_gid(ax)
    for device, iv in busy.items():
        assert _x_spans(lanes[f"device:{device}"]) == pytest.approx(
            _ms_spans(iv.clip(lo, hi), trace.start_ns)
        )
    # The shading is the analysis' idle time in the window (which counts launch gaps of a
    # few microseconds as busy, so the raw lane may show slightly more white).
    idle = [
        span for gid, c in lanes.items() if gid.startswith("idle:") for span in _x_spans(c).tolist()
    ]
    assert sum(e - s for s, e in idle) == pytest.approx(shown["idle_ns"].sum() / 1e6, abs=1e-6)
    assert "mostly sync" in ax.get_title(loc="left")


def test_timeline_unknown_step_is_a_clean_error(built: tuple[traceinspect.Trace, Analysis]) -> None:
    trace, a = built
    with pytest.raises(UsageError, match="no step 99"):
        plot_timeline(trace, a, first_step=99)


def test_step_breakdown_bars_are_the_per_step_numbers(
    sync_bound: tuple[traceinspect.Trace, Analysis],
) -> None:
    _, a = sync_bound
    ax = plot_step_breakdown(a)
    bars = {str(c.get_label()): c for c in ax.containers if isinstance(c, BarContainer)}
    assert list(bars) == ["busy", *CAUSES]
    ps = a.per_step
    columns: dict[str, str] = {"busy": S.BUSY_NS, **{c: S.idle_cause_ns(c) for c in CAUSES}}
    bottom = np.zeros(len(ps))
    for name, column in columns.items():
        heights = [p.get_height() for p in bars[name].patches]
        bottoms = [p.get_y() for p in bars[name].patches]
        assert heights == pytest.approx((ps[column] / 1e6).tolist())
        assert bottoms == pytest.approx(bottom.tolist())
        bottom += ps[column].to_numpy() / 1e6
    # Each bar stacks up to the step's wall time.
    assert bottom == pytest.approx((ps["wall_ns"] / 1e6).tolist())
    assert [t.get_text() for t in ax.get_xticklabels()] == [str(s) for s in ps["step"]]
    assert "ms" in ax.get_ylabel()
    assert "mostly sync" in ax.get_title(loc="left")


def test_gap_distribution_plots_every_gap_by_cause(
    sync_bound: tuple[traceinspect.Trace, Analysis],
) -> None:
    _, a = sync_bound
    ax = plot_gap_distribution(a)
    dots = {str(c.get_gid()): c for c in ax.collections if isinstance(c, PathCollection)}
    for cause in CAUSES:
        want = sorted((a.gaps.loc[a.gaps["cause"] == cause, "duration_ns"] / 1e6).tolist())
        got = sorted(np.asarray(dots[f"gaps:{cause}"].get_offsets())[:, 0].tolist()) if want else []
        assert got == pytest.approx(want)
        if not want:
            assert f"gaps:{cause}" not in dots
    assert ax.get_xscale() == "log" and "ms" in ax.get_xlabel()
    assert ax.get_title(loc="left").startswith("Sync gaps cost most")


def test_one_colour_per_cause_in_every_plot(built: tuple[traceinspect.Trace, Analysis]) -> None:
    trace, a = built
    timeline = _by_gid(plot_timeline(trace, a, steps=5, first_step=0))
    breakdown = plot_step_breakdown(a)
    gaps = {str(c.get_gid()): c for c in plot_gap_distribution(a).collections}
    bars = {str(c.get_label()): c for c in breakdown.containers if isinstance(c, BarContainer)}
    assert tuple(bars["busy"].patches[0].get_facecolor()) == to_rgba(BUSY_COLOR)
    assert _color(timeline["device:/device:GPU:0"]) == to_rgba(BUSY_COLOR)
    seen = 0
    for cause, color in CAUSE_COLORS.items():
        rgba = to_rgba(color)
        assert tuple(bars[cause].patches[0].get_facecolor()) == rgba
        for gid in (f"idle:{cause}", f"thread:{cause}"):
            if gid in timeline:
                assert _color(timeline[gid]) == rgba
                seen += 1
        if f"gaps:{cause}" in gaps:
            assert _color(gaps[f"gaps:{cause}"])[:3] == rgba[:3]  # dots are translucent
            seen += 1
    assert seen >= 5
    assert len(set(CAUSE_COLORS.values()) | {BUSY_COLOR}) == len(CAUSES) + 1


def test_plots_draw_into_a_given_axes_and_leave_pyplot_alone(
    built: tuple[traceinspect.Trace, Analysis],
) -> None:
    trace, a = built
    before = plt.get_fignums()
    fig = Figure()
    axes = fig.subplots(3)
    assert plot_timeline(trace, a, ax=axes[0]) is axes[0]
    assert plot_step_breakdown(a, ax=axes[1]) is axes[1]
    assert plot_gap_distribution(a, ax=axes[2]) is axes[2]
    figures = analysis_figures(trace, a)
    assert tuple(figures) == FIGURE_NAMES
    assert all(isinstance(f, Figure) for f in figures.values())
    assert plt.get_fignums() == before


def test_html_page(built: tuple[traceinspect.Trace, Analysis]) -> None:
    trace, a = built
    page = render_html(trace, a)
    assert page.startswith("<!DOCTYPE html>")
    assert "<b>sync-bound</b>" in page
    message = a.recommendations[0].message
    assert message.replace("'", "&#x27;") in page
    # Evidence names the jitted lambda: escaped, never raw markup.
    assert any(LAMBDA in line for evidence in a.gaps[S.EVIDENCE] for line in evidence)
    assert "PjitFunction(&lt;lambda&gt; &amp; &#x27;co&#x27;)" in page
    assert "<lambda>" not in page
    # One embedded image per figure, nothing fetched from elsewhere.
    assert page.count('src="data:image/png;base64,') == len(FIGURE_NAMES)
    assert page.count("src=") == len(FIGURE_NAMES)
    assert "http" not in page.replace("http-equiv", "")
    assert "<script" not in page


def test_html_figures_say_in_words_what_they_show(
    built: tuple[traceinspect.Trace, Analysis],
) -> None:
    # 5 steps of 10 ms: 8 ms of kernel, the rest idle (8.5 ms of sync, 1 ms of input and
    # 0.5 ms of dispatch over the 5 steps): a reader without the picture gets its numbers,
    # and they add up to the step (8 + 1.7 + 0.2 + 0.1 = 10).
    trace, a = built
    page = render_html(trace, a)
    alts = re.findall(r'<img [^>]*alt="([^"]+)"', page)
    assert len(alts) == len(FIGURE_NAMES)
    assert (
        "Bars for 5 steps (median 10.00 ms, p90 10.00); on average 10.00 ms a step: the device "
        "busy 8.00 ms, idle by cause sync 1.70 ms, input 0.20 ms, host 0.10 ms."
    ) in alts
    assert (
        "10 idle gaps by duration; idle time by cause over all steps: sync 8.50 ms, input "
        "1.00 ms, host 0.50 ms."
    ) in alts
    # The timeline has no single figure to state: its caption.
    assert alts[0].startswith("A few steps in time.")
    # The step time as the text report gives it: a bursty run's figures use the mean.
    assert "<td>median 10.00 ms, p90 10.00 ms, mean 10.00 ms</td>" in page
    bursty = dataclasses.replace(
        a, steps=dataclasses.replace(a.steps, mean_ms=12.5, p90_ms=20.0, bursty=True)
    )
    page = render_html(trace, bursty, figures={})
    assert "mean 12.50 ms (bursty: figures use the mean)" in page


def test_cli_writes_plots_and_html(tmp_path: Path) -> None:
    trace = SCENARIOS / "sync_bound" / "vm.xplane.pb"
    plots, page = tmp_path / "plots", tmp_path / "out" / "report.html"
    result = CliRunner().invoke(
        main, ["analyze", str(trace), "--json", "--plots", str(plots), "--html", str(page)]
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.lstrip().startswith("{")  # stdout stays JSON
    for name in FIGURE_NAMES:
        png = plots / f"{name}.png"
        assert png.read_bytes().startswith(b"\x89PNG")
        assert f"Wrote {png}" in result.stderr
    # A capture's run: its whole step curve too, from the sidecar.
    assert (plots / "step_curve.png").read_bytes().startswith(b"\x89PNG")
    assert f"Wrote {page}" in result.stderr
    text = page.read_text(encoding="utf-8")
    assert "sync-bound" in text and text.count("data:image/png;base64,") == 4
    assert "The whole run: every step" in text
    quiet = CliRunner().invoke(main, ["analyze", str(trace), "-q", "--plots", str(plots)])
    assert quiet.exit_code == 0 and "Wrote" not in quiet.stderr


def test_the_plots_draw_what_the_analysis_computed(
    sync_bound: tuple[traceinspect.Trace, Analysis], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Prepare, then draw: with the analysis in hand, no figure finds devices, steps or the
    training thread again (--plots and --html cost no second analysis)."""
    from traceinspect.report import plots

    trace, a = sync_bound
    assert a.timeline is not None
    assert a.timeline.training_thread_found and set(a.timeline.thread) == set(plots.THREAD_ORDER)

    def again(*args: object, **kwargs: object) -> None:
        raise AssertionError("the plot analysed the trace again")

    monkeypatch.setattr(plots, "device_activity", again)
    monkeypatch.setattr(plots, "find_steps", again)
    monkeypatch.setattr(plots, "_thread_activity", again)
    figures = analysis_figures(trace, a)
    assert set(figures) == {"timeline", "step_breakdown", "gap_distribution", "step_curve"}
    # The timeline's device lane is the analysis's busy time, clipped to the steps shown.
    busy = _by_gid(plot_timeline(trace, a))[f"device:{a.devices[0]}"]
    assert len(_x_spans(busy)) > 0
