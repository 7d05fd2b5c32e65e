"""traceinspect sweep: the choice of worker count on given numbers, the table, its files and
plot, the run classification on real sample traces, and real small sweeps on CPU."""

from __future__ import annotations

import json
import math
import sys
from dataclasses import replace
from pathlib import Path
from typing import cast

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from traceinspect.capture import CaptureOptions, CaptureResult
from traceinspect.capture._child.steady import look_ahead_steps
from traceinspect.cli import main
from traceinspect.errors import UsageError
from traceinspect.report.sweep import (
    CSV_NAME,
    PLOT_NAME,
    plot_sweep,
    render_sweep,
    write_sweep,
)
from traceinspect.sidecar import SidecarJSON
from traceinspect.sweep import (
    CRASHED,
    ERROR,
    NO_TRACE,
    OK,
    TIMEOUT,
    TYPICAL,
    UNANALYSABLE,
    UNTRACED,
    SweepProgress,
    SweepResult,
    SweepRun,
    _runner,
    check_worker_counts,
    command_for,
    idle_column,
    run_sweep,
    summarize_sweep,
)
from traceinspect.sweep._load import JSON_NAME

ROOT = Path(__file__).resolve().parents[1]
TRAIN = ROOT / "tests" / "capture" / "scripts" / "train.py"
SCENARIOS = ROOT / "sample_traces" / "scenarios"


def ok(workers: int, median: float, p90: float | None = None, p10: float | None = None,
       input_wait: float = 0.0, input_idle: float = 0.0,
       mean: float | None = None) -> SweepRun:  # fmt: skip
    return SweepRun(
        workers=workers,
        status=OK,
        median_ms=median,
        p90_ms=median if p90 is None else p90,
        p10_ms=median if p10 is None else p10,
        mean_ms=median if mean is None else mean,
        input_wait_ms=input_wait,
        idle_fractions={
            "input": input_idle,
            "sync": 0.0,
            "compile": 0.0,
            "host": 0.0,
            "unknown": 0.0,
        },
        verdict="input-bound" if input_idle >= 0.05 else "device-bound",
        steps=10,
        exit_code=0,
        observed_workers=workers,
    )


def maxtext() -> list[SweepRun]:
    """MaxText #2509's numbers (ms), with a timed-out and a crashed count added."""
    return [
        ok(8, 4250.0, 4500.0, 4200.0, input_wait=5.0),
        ok(1, 30000.0, 33000.0, 29000.0, input_wait=25000.0, input_idle=0.8),
        ok(2, 13500.0, 14000.0, 13000.0, input_wait=9000.0, input_idle=0.6),
        ok(4, 4300.0, 4400.0, 4250.0, input_wait=10.0, input_idle=0.01),
        SweepRun(16, TIMEOUT, exit_code=143, message="still running after 600 s: stopped"),
        SweepRun(32, CRASHED, exit_code=1, message="exit code 1: MemoryError"),
    ]


# -- the choice -------------------------------------------------------------------------------


def test_smallest_count_within_five_percent_of_the_best() -> None:
    result = summarize_sweep(maxtext())
    assert [r.workers for r in result.runs] == [1, 2, 4, 8, 16, 32]
    assert result.best == 8
    assert result.best_step_ms == 4250.0
    # 4300 / 4250 = 1.0118: as fast, with half the workers.
    assert result.chosen == 4


@pytest.mark.parametrize(
    ("medians", "chosen", "best"),
    [
        ({1: 105.0, 2: 100.0}, 1, 2),  # exactly 5% slower still counts
        ({1: 105.01, 2: 100.0}, 2, 2),  # a hair more does not
        ({2: 10.0, 4: 10.0, 8: 10.0}, 2, 2),  # a tie: the smallest count, best included
        ({0: 12.0, 1: 11.0, 2: 11.5}, 1, 1),  # 0 workers (no mp_prefetch) is a count too
        ({4: 7.0}, 4, 4),
    ],
)
def test_choice_on_exact_numbers(medians: dict[int, float], chosen: int, best: int) -> None:
    result = summarize_sweep([ok(w, m) for w, m in medians.items()])
    assert (result.chosen, result.best) == (chosen, best)


def test_by_untraced_steps_where_the_profiler_flattens_the_curve() -> None:
    # Shaped after a family loop that reads its loss every step (io_read_w1, 2026-11-27):
    # traced, 3 to 6 workers ran 12-13.4 ms (3 within 5% of the best, one below the knee of
    # 4 that the timed sweep found); without the profiler 14.6, 10.1, 10.6, 10.4 ms.
    traced = {3: 12.5, 4: 13.40, 5: 12.04, 6: 13.26}
    untraced = {3: 14.6, 4: 10.1, 5: 10.6, 6: 10.4}
    runs = [replace(ok(w, traced[w]), untraced_ms=untraced[w], untraced_steps=80) for w in traced]
    by_trace = summarize_sweep(runs)
    assert (by_trace.chosen, by_trace.best) == (3, 5)
    result = summarize_sweep(runs, metric=UNTRACED)
    assert (result.metric, result.metric_note) == (UNTRACED, None)
    assert (result.chosen, result.best) == (4, 4)
    assert result.best_step_ms == 10.1
    assert result.vs_best(result.run(3)) == pytest.approx(14.6 / 10.1)
    lines = render_sweep(result).splitlines()
    assert lines[0].split()[:4] == ["workers", "untraced", "ms", "median"]
    row4 = next(line for line in lines if line.split()[:2] == ["*", "4"])
    assert row4.split()[2:4] == ["10.10", "13.40"]
    assert (
        "* 4 workers: the best untraced step time (10.10 ms), and no smaller count is "
        "within 5% of it." in lines
    )
    assert SweepResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result
    ax = plot_sweep(result)
    lines_by_gid = {line.get_gid(): line for line in ax.get_lines() if line.get_gid()}
    assert np.asarray(lines_by_gid["step_time"].get_ydata()).tolist() == [14.6, 10.1, 10.6, 10.4]
    assert np.asarray(lines_by_gid["traced_step_time"].get_ydata()).tolist() == [
        12.5,
        13.40,
        12.04,
        13.26,
    ]


def test_untraced_falls_back_to_the_traced_step_for_every_run_when_one_lacks_it() -> None:
    runs = [
        replace(ok(1, 20.0), untraced_ms=18.0, untraced_steps=40),
        ok(2, 10.0),  # its script ended before any step after the trace
    ]
    result = summarize_sweep(runs, metric=UNTRACED)
    assert result.metric == TYPICAL
    assert result.chosen == 2
    assert result.metric_note is not None
    assert result.metric_note.startswith("the run(s) at 2 worker(s) timed no steps after")
    assert f"Compared by traced step time: {result.metric_note}." in render_sweep(result)
    assert SweepResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result


def test_tolerance_zero_takes_the_best() -> None:
    assert summarize_sweep(maxtext(), tolerance=0.0).chosen == 8
    assert summarize_sweep(maxtext(), tolerance=0.5).chosen == 4  # 13500 is 3.2x the best


def test_by_mean_when_steps_come_in_bursts() -> None:
    # 4 workers: most steps fast, every few a long stall. The median says 4 is fastest;
    # the mean (the throughput) says 8, and so does the figure analyze gives each run (the
    # default): the mean at 4 workers, whose steps come in bursts ((30 - 1) / 9 > 1), the
    # median elsewhere.
    runs = [
        ok(2, 10.0, p90=12.0, p10=9.0, mean=10.5),
        ok(4, 2.0, p90=30.0, p10=1.0, mean=9.0),
        ok(8, 3.0, p90=3.5, p10=2.8, mean=3.1),
    ]
    typical = summarize_sweep(runs)
    assert [r.bursty for r in runs] == [False, True, False]
    assert (typical.metric, typical.chosen, typical.best, typical.best_step_ms) == (
        "typical",
        8,
        8,
        3.0,
    )
    assert typical.vs_best(typical.run(4)) == pytest.approx(9.0 / 3.0)
    text = render_sweep(typical)
    assert "* 8 workers: the best step time (3.00 ms)" in text
    assert (
        "Steps come in bursts at 4 workers: there the step time is the mean (throughput), as "
        "analyze gives it; elsewhere the median." in text
    )
    by_median = summarize_sweep(runs, metric="median")
    assert (by_median.chosen, by_median.best) == (4, 4)
    text = render_sweep(by_median)
    assert (
        "Steps come in bursts at 4 workers (mean step time over 1.25x the median), so the "
        "median understates the time per step there; by mean step time (throughput) the "
        "choice is 8 workers (--by mean)." in text
    )
    by_mean = summarize_sweep(runs, metric="mean")
    assert (by_mean.chosen, by_mean.best, by_mean.best_step_ms) == (8, 8, 3.1)
    assert by_mean.vs_best(by_mean.run(4)) == pytest.approx(9.0 / 3.1)
    assert "best mean step time (3.10 ms)" in render_sweep(by_mean)
    assert "bursts" not in render_sweep(by_mean)
    with pytest.raises(UsageError, match="unknown step time"):
        summarize_sweep(runs, metric="p90")


def test_failed_runs_never_chosen() -> None:
    runs = [
        ok(1, 20.0),
        SweepRun(2, TIMEOUT),
        SweepRun(4, CRASHED, exit_code=1),
        SweepRun(8, UNANALYSABLE, exit_code=0),
        # Only "ok" rows count, even if a number slipped into another one.
        SweepRun(16, NO_TRACE, median_ms=1.0),
    ]
    result = summarize_sweep(runs)
    assert (result.chosen, result.best) == (1, 1)
    assert result.vs_best(result.run(2)) is None


def test_no_measured_run_chooses_nothing() -> None:
    result = summarize_sweep([SweepRun(1, TIMEOUT), SweepRun(2, ERROR, message="bad")])
    assert (result.chosen, result.best, result.best_step_ms) == (None, None, None)
    assert "No run could be measured" in render_sweep(result)


def test_duplicate_counts_and_negative_tolerance_are_usage_errors() -> None:
    with pytest.raises(UsageError, match="one run per worker count"):
        summarize_sweep([ok(1, 1.0), ok(1, 2.0)])
    with pytest.raises(UsageError, match="tolerance"):
        summarize_sweep([ok(1, 1.0)], tolerance=-0.1)


def test_worker_counts_and_placeholder() -> None:
    assert check_worker_counts([8, 1, 4, 2]) == (1, 2, 4, 8)
    for bad in ([], [1, -1], [2, 2]):
        with pytest.raises(UsageError):
            check_worker_counts(bad)
    assert command_for(["python", "t.py", "--w={workers}", "--n", "{workers}"], 4) == [
        "python",
        "t.py",
        "--w=4",
        "--n",
        "4",
    ]


# -- one step time, one spread ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("trace", "bursty", "step_ms", "spread"),
    [
        # Steps in bursts (one worker, 33 steps): the mean is the step, not the 18.28 median.
        ("scenarios/family/cpu_w1", True, 27.6499, 1.9443),
        ("scenarios/healthy/vm.xplane.pb", False, 10.452, 0.2004),
    ],
)
def test_a_runs_step_time_and_spread_are_analyzes(
    trace: str, bursty: bool, step_ms: float, spread: float
) -> None:
    """One definition (``steps.step_time_ms``, ``steps.step_spread``): a sweep run of the
    same steps has analyze's step time ("typical") and spread."""
    import traceinspect
    from traceinspect.analysis.analyze import analyze
    from traceinspect.analysis.steps import step_spread, step_time_ms

    s = analyze(traceinspect.load(str(ROOT / "sample_traces" / trace))).steps
    run = SweepRun(workers=1, status=OK, median_ms=s.median_ms, p90_ms=s.p90_ms,
                   p10_ms=s.p10_ms, mean_ms=s.mean_ms, steps=s.count)  # fmt: skip
    assert run.bursty == s.bursty == bursty
    assert run.step_ms(TYPICAL) == s.typical_ms == step_ms
    assert s.typical_ms == step_time_ms(s.median_ms, s.mean_ms, s.bursty)
    assert run.spread == pytest.approx(s.spread) and round(s.spread, 4) == spread
    assert s.spread == pytest.approx(step_spread(s.p10_ms, s.p90_ms, s.mean_ms))


def test_the_bundled_sweeps_spread_is_by_the_mean() -> None:
    """sweep.json's spread is recomputed on load: (p90 - p10) / mean, as analyze's (it was
    by the median, 0.3935 for the 2-worker run's bursty-looking steps)."""
    from traceinspect.sweep import load_sweep

    result = load_sweep(ROOT / "sample_traces" / "sweep")
    assert result.run(2).spread == pytest.approx((19.4381 - 12.4593) / 16.6791)
    assert round(result.run(0).spread or 0.0, 4) == round((25.0718 - 23.2884) / 23.9893, 4)


# -- table, JSON, CSV, plot -------------------------------------------------------------------


def test_rows_frame() -> None:
    rows = summarize_sweep(maxtext()).rows()
    assert rows["workers"].tolist() == [1, 2, 4, 8, 16, 32]
    assert rows["status"].tolist() == [OK, OK, OK, OK, TIMEOUT, CRASHED]
    assert rows["chosen"].tolist() == [False, False, True, False, False, False]
    assert rows["median_step_ms"].iloc[:4].tolist() == [30000.0, 13500.0, 4300.0, 4250.0]
    assert rows["p90_step_ms"].iloc[0] == 33000.0
    assert rows["p10_step_ms"].iloc[0] == 29000.0
    assert rows["mean_step_ms"].iloc[0] == 30000.0
    assert rows["spread"].iloc[0] == pytest.approx((33000 - 29000) / 30000)
    assert rows["vs_best"].iloc[2] == pytest.approx(4300 / 4250)
    assert rows[idle_column("input")].iloc[1] == 0.6
    assert rows["median_step_ms"].iloc[4:].isna().all()
    assert rows["exit_code"].tolist() == [0, 0, 0, 0, 143, 1]
    assert rows["median_step_ms"].dtype == "float64"


def test_to_dict_is_plain_json() -> None:
    data = json.loads(json.dumps(summarize_sweep(maxtext()).to_dict(), allow_nan=False))
    assert (data["chosen"], data["best"], data["best_step_ms"], data["tolerance"]) == (
        4,
        8,
        4250.0,
        0.05,
    )
    assert data["metric"] == "typical"
    by_workers = {r["workers"]: r for r in data["runs"]}
    assert by_workers[4]["chosen"] is True
    assert by_workers[4]["vs_best"] == round(4300 / 4250, 4)
    assert by_workers[1]["spread"] == round(4000 / 30000, 4)
    assert by_workers[16]["status"] == TIMEOUT
    assert by_workers[16]["median_step_ms"] is None
    assert by_workers[2]["idle_fractions"]["input"] == 0.6


def test_table_text() -> None:
    lines = render_sweep(summarize_sweep(maxtext())).splitlines()
    assert lines[0].split() == [
        "workers", "median", "ms", "p90", "ms", "mean", "ms", "spread", "input", "%", "sync", "%",
        "compile", "%", "host", "%", "runtime", "%", "unknown", "%", "verdict",
    ]  # fmt: skip
    row4 = next(line for line in lines if line.split()[:2] == ["*", "4"])
    assert row4.split()[2:6] == ["4,300.00", "4,400.00", "4,300.00", "0.03"]
    assert row4.endswith("device-bound")
    assert sum(line.startswith("*") for line in lines[1:7]) == 1
    assert lines[5].split()[-1] == "timeout"
    assert lines[6].split()[-3:] == ["crashed", "(exit", "1)"]
    assert (
        "* 4 workers: the smallest count within 5% of the best step time "
        "(4,300.00 ms against 4,250.00 ms at 8 workers)." in lines
    )
    assert "workers=32: exit code 1: MemoryError" in lines


def test_analyze_s_prediction_from_each_run_is_set_against_the_measured_knee() -> None:
    from dataclasses import replace

    from traceinspect.sweep import prediction_vs_measured

    runs = maxtext()
    # From the run at 1 worker analyze predicts 5 (the knee 4 plus one: agrees); from 2, 8.
    predicted = {1: (5, 4300.0), 2: (8, 4250.0), 4: (4, 4300.0), 8: (4, 4300.0)}
    runs = [
        replace(
            r, predicted_workers=predicted[r.workers][0], predicted_step_ms=predicted[r.workers][1]
        )
        if r.workers in predicted
        else r
        for r in runs
    ]
    result = summarize_sweep(runs)
    line = prediction_vs_measured(result)
    assert line is not None
    assert line.startswith(
        "analyze, from each run alone (workers -> count, expected step): 1 -> 5 (4300.00 ms), "
        "2 -> 8 (4250.00 ms), 4 -> 4 (4300.00 ms), 8 -> 4 (4300.00 ms); from the run(s) at 2 "
        "it differs from the measured 4: the sweep measured each count's step"
    )
    assert line in render_sweep(result).splitlines()
    agreeing = summarize_sweep(
        [replace(r, predicted_workers=None) if r.workers == 2 else r for r in runs]
    )
    assert prediction_vs_measured(agreeing) == (
        "analyze, from each run alone (workers -> count, expected step): 1 -> 5 (4300.00 ms), "
        "4 -> 4 (4300.00 ms), 8 -> 4 (4300.00 ms); within [4, 6] of the measured 4."
    )
    back = SweepRun.from_dict(json.loads(json.dumps(result.run(2).to_dict())))
    assert (back.predicted_workers, back.predicted_step_ms) == (8, 4250.0)
    assert prediction_vs_measured(summarize_sweep(maxtext())) is None


def test_written_files(tmp_path: Path) -> None:
    result = summarize_sweep(maxtext())
    written = write_sweep(result, tmp_path / "out")
    assert sorted(p.name for p in written.values()) == sorted([CSV_NAME, JSON_NAME, PLOT_NAME])
    csv = pd.read_csv(written["csv"])
    assert csv.columns.tolist() == result.rows().columns.tolist()
    assert csv["workers"].tolist() == [1, 2, 4, 8, 16, 32]
    assert csv.loc[csv["chosen"], "workers"].tolist() == [4]
    assert math.isnan(csv["median_step_ms"].iloc[4])
    assert json.loads(written["json"].read_text())["chosen"] == 4
    assert written["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_data() -> None:
    from matplotlib.figure import Figure

    ax = Figure().add_subplot()
    assert plot_sweep(summarize_sweep(maxtext()), ax=ax) is ax
    lines = {line.get_gid(): line for line in ax.get_lines() if line.get_gid()}
    step, wait, chosen = lines["step_time"], lines["input_wait"], lines["chosen"]
    # Counts are evenly spaced: failed ones keep their place but have no point.
    assert np.asarray(step.get_xdata()).tolist() == [0, 1, 2, 3]
    assert np.asarray(step.get_ydata()).tolist() == [30000.0, 13500.0, 4300.0, 4250.0]
    assert np.asarray(wait.get_ydata()).tolist() == [25000.0, 9000.0, 10.0, 5.0]
    assert chosen.get_label() == "chosen: 4 workers"
    assert np.asarray(chosen.get_xdata()).tolist() == [2, 2]
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert ticks == ["1", "2", "4", "8", "16\n(timeout)", "32\n(crashed)"]
    assert ax.get_title().startswith("4 workers: 4,300.00 ms/step")
    assert ax.get_ylabel() == "ms per step"


def test_plot_a_mean_outside_the_p10_p90_band() -> None:
    """By mean (the slower of step starts and completions) a run's step can lie outside its
    host steps' p10-p90 (a real sweep: 1 worker, mean 1.2 ms just above its p90 of 1.2, and
    matplotlib refused the negative bar): the bar reaches only the band's side it is on."""
    from matplotlib.figure import Figure

    runs = [ok(0, 0.6, p90=1.0, p10=0.5, mean=4.6), ok(1, 0.9, p90=1.2, p10=0.8, mean=1.0)]
    ax = Figure().add_subplot()
    plot_sweep(summarize_sweep(runs, metric="mean"), ax=ax)
    step = next(line for line in ax.get_lines() if line.get_gid() == "step_time")
    assert np.asarray(step.get_ydata()).tolist() == [4.6, 1.0]


def test_plot_without_axes_makes_its_figure() -> None:
    ax = plot_sweep(summarize_sweep([SweepRun(1, TIMEOUT)]))
    assert ax.figure is not None
    assert ax.get_title() == "No worker count could be measured"


# -- classification of runs, on real sample traces (no process started) -----------------------


def _capture(run_dir: Path, exit_code: int = 0, traces: bool = True) -> CaptureResult:
    paths = tuple(str(p) for p in sorted(run_dir.glob("*.xplane.pb"))) if traces else ()
    # Only the field the sweep reads.
    sidecar = cast(SidecarJSON, {"grain": {"worker_count": 3}})
    return CaptureResult(
        run_dir=str(run_dir),
        sidecar_path=str(run_dir / "traceinspect.capture.json"),
        trace_paths=paths,
        exit_code=exit_code,
        partial=not traces,
        partial_reasons=() if traces else ("no trace was written",),
        sidecar=sidecar,
    )


def test_runs_classified(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "vm.xplane.pb").write_bytes(b"not an xspace")
    outcomes = {
        1: _runner._Outcome(_capture(SCENARIOS / "input_bound"), None, False, 1.0),
        2: _runner._Outcome(_capture(SCENARIOS / "healthy"), None, False, 1.0),
        3: _runner._Outcome(_capture(tmp_path, 1, traces=False), None, False, 1.0),
        4: _runner._Outcome(_capture(tmp_path, 0, traces=False), None, False, 1.0),
        5: _runner._Outcome(_capture(SCENARIOS / "healthy", 143), None, True, 5.0),
        6: _runner._Outcome(_capture(corrupt), None, False, 1.0),
        7: _runner._Outcome(None, "cannot start 'python'", False, 0.1),
    }
    commands: list[tuple[list[str], int | None]] = []

    def fake(command: list[str], options: CaptureOptions, timeout_s: float | None,
             log_path: Path, tick: object = None) -> _runner._Outcome:  # fmt: skip
        commands.append((command, options.workers))
        log_path.write_text("Traceback ...\nRuntimeError: boom at step 0\n")
        return outcomes[int(Path(options.logdir).name.split("_")[1])]

    monkeypatch.setattr(_runner, "_capture_with_timeout", fake)
    events: list[SweepProgress] = []
    result = run_sweep(
        [sys.executable, str(TRAIN)],
        [7, 6, 5, 4, 3, 2, 1],
        CaptureOptions(logdir=str(tmp_path / "sweep")),
        timeout_s=5,
        progress=events.append,
    )
    status = {r.workers: r.status for r in result.runs}
    assert status == {
        1: OK, 2: OK, 3: CRASHED, 4: NO_TRACE, 5: TIMEOUT, 6: UNANALYSABLE, 7: ERROR,
    }  # fmt: skip
    assert result.run(1).verdict == "input-bound"
    assert result.run(2).verdict == "device-bound"
    assert result.chosen == 2  # the healthy trace's steps are shorter
    assert result.run(1).observed_workers == 3
    assert "Grain ran with 3 workers, not 1" in result.run(1).message
    assert "RuntimeError: boom at step 0" in result.run(3).message
    assert "still running after 5 s" in result.run(5).message
    assert result.run(7).message == "cannot start 'python'"
    # No placeholder: the count goes through capture's Grain override, the command unchanged.
    assert commands[0] == ([sys.executable, str(TRAIN)], 1)
    assert [(e.workers, e.run is None) for e in events[:2]] == [(1, True), (1, False)]
    assert len(events) == 14


def test_placeholder_goes_into_the_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[list[str], int | None]] = []

    def fake(command: list[str], options: CaptureOptions, timeout_s: float | None,
             log_path: Path, tick: object = None) -> _runner._Outcome:  # fmt: skip
        seen.append((command, options.workers))
        return _runner._Outcome(None, "not run", False, 0.0)

    monkeypatch.setattr(_runner, "_capture_with_timeout", fake)
    command = [sys.executable, str(TRAIN), "--workers={workers}"]
    run_sweep(command, [2, 4], CaptureOptions(logdir=str(tmp_path)))
    assert seen == [
        ([*command[:2], "--workers=2"], None),
        ([*command[:2], "--workers=4"], None),
    ]


# A command that parses (the runs themselves are replaced).
COMMAND = [sys.executable, str(TRAIN)]


def _fake_runs(
    monkeypatch: pytest.MonkeyPatch, figures: dict[int, list[float | None]]
) -> list[tuple[int, bool]]:
    """Replace each capture by a run whose untraced figure is the next of ``figures[N]``
    (None: the run failed); returns the (count, again) of every run, in order."""
    calls: list[tuple[int, bool]] = []

    def fake(command: object, workers: int, options: object, timeout_s: object,
             placeholder: object, tick: object = None,
             again: bool = False) -> SweepRun:  # fmt: skip
        calls.append((workers, again))
        figure = figures[workers].pop(0)
        if figure is None:
            return SweepRun(workers=workers, status=CRASHED, message="exit code 1: boom")
        return replace(ok(workers, figure * 1.2), untraced_ms=figure, untraced_steps=20)

    monkeypatch.setattr(_runner, "_run_one", fake)
    return calls


def test_the_best_and_the_chosen_counts_are_timed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A sweep of the family's loop under a per-step read (2026-11-28): one run at 6 workers
    # read 10.62 ms untraced, the others at 3-5 12.5-14.0, and 6 was chosen at a knee of 3.
    # Timed again, 6 reads 12.00: 4 (12.50) comes within 5% of it and is chosen, then timed
    # again itself (11.90): 4 workers.
    figures: dict[int, list[float | None]] = {
        3: [14.02], 4: [12.50, 11.90], 5: [13.84], 6: [10.62, 12.00],
    }  # fmt: skip
    calls = _fake_runs(monkeypatch, figures)
    events: list[SweepProgress] = []
    options = CaptureOptions(logdir=str(tmp_path))
    result = run_sweep(COMMAND, [3, 4, 5, 6], options, progress=events.append)
    assert calls == [(3, False), (4, False), (5, False), (6, False), (6, True), (4, True)]
    assert (result.chosen, result.best) == (4, 4)
    assert (result.run(6).untraced_ms, result.run(6).first_untraced_ms) == (12.0, 10.62)
    assert (result.run(4).untraced_ms, result.run(4).first_untraced_ms) == (11.9, 12.5)
    assert result.run(3).first_untraced_ms is None
    # Progress numbers the counts (of 4), then the second runs (of at most 2).
    assert [(e.index, e.total, e.again) for e in events if e.run is not None] == [
        (0, 4, False),
        (1, 4, False),
        (2, 4, False),
        (3, 4, False),
        (0, 2, True),
        (1, 2, True),
    ]
    text = render_sweep(result)
    assert " 11.90 (12.50) " in text and " 12.00 (10.62) " in text
    assert "Timed again: 4 and 6 workers" in text
    saved = result.to_dict()
    assert saved["runs"][3]["first_untraced_step_ms"] == 10.62
    assert SweepResult.from_dict(json.loads(json.dumps(saved))).run(6).first_untraced_ms == 10.62
    assert result.rows()["first_untraced_step_ms"].tolist()[1] == 12.5
    # Without: each count once, and the lucky run chooses.
    calls = _fake_runs(monkeypatch, {3: [14.02], 4: [12.50], 5: [13.84], 6: [10.62]})
    once = run_sweep(COMMAND, [3, 4, 5, 6], options, retimes=0)
    assert once.chosen == 6 and len(calls) == 4
    with pytest.raises(UsageError, match="0 or more"):
        run_sweep(COMMAND, [3], options, retimes=-1)


def _untraced(workers: int, figure: float, first: float | None = None) -> SweepRun:
    """A run compared by its untraced figure (``first``: the first of two runs)."""
    return replace(
        ok(workers, figure * 1.2), untraced_ms=figure, untraced_steps=20, first_untraced_ms=first
    )


def test_counts_within_the_runs_own_scatter_are_named() -> None:
    from traceinspect.sweep import prediction_vs_measured, scatter_of

    # The family sweep of the test above, after its second runs: 6 workers read 10.62 then
    # 12.00 ms (13% apart, more than the 5% that decides). 4 (11.90) and 6 lie within 13%
    # of the best, 11.90; 3 (14.02, 18% above) and 5 (13.84, 16.3%) do not.
    runs = [_untraced(3, 14.02), _untraced(4, 11.90, 12.50), _untraced(5, 13.84),
            _untraced(6, 12.00, 10.62)]  # fmt: skip
    result = summarize_sweep(runs, metric=UNTRACED)
    scatter = scatter_of(result)
    assert scatter is not None and scatter == result.scatter
    assert (scatter.workers, scatter.first_ms, scatter.second_ms) == (6, 10.62, 12.00)
    assert scatter.fraction == pytest.approx(1.38 / 10.62)
    assert scatter.within == (4, 6)
    text = render_sweep(result)
    assert (
        "Within the runs' scatter: the two runs of 6 workers read 10.62 and 12.00 ms, 13% "
        "apart, more than the 5% that decides; 4 and 6 workers lie within that of the best "
        "figure, in an order one run each does not settle"
    ) in text
    assert result.to_dict()["scatter"] == {
        "workers": 6, "first_step_ms": 10.62, "second_step_ms": 12.0, "fraction": 0.1299,
        "within": [4, 6],
    }  # fmt: skip
    # A prediction of 3 from the run at 5 lies below the knee and outside the scatter: it
    # differs.
    predicted = [replace(r, predicted_workers=3) if r.workers == 5 else r for r in runs]
    line = prediction_vs_measured(summarize_sweep(predicted, metric=UNTRACED))
    assert line is not None and "it differs from the measured 4: the sweep measured" in line
    # As on the knee-margin loop of MEASUREMENTS.md (Python 3.12): 3 workers 8% above the
    # best, outside the tolerance but within the scatter; analyze's 3 from the run at 5 is
    # then one of the counts the sweep cannot order.
    runs[0] = _untraced(3, 12.90)
    predicted = [replace(r, predicted_workers=3) if r.workers == 5 else r for r in runs]
    result = summarize_sweep(predicted, metric=UNTRACED)
    assert result.chosen == 4 and result.scatter is not None
    assert result.scatter.within == (3, 4, 6)
    assert prediction_vs_measured(result) == (
        "analyze, from each run alone (workers -> count, expected step): 5 -> 3; from the "
        "run(s) at 5 it differs from the measured 4, within the runs' own scatter: the sweep "
        "does not settle the order of 3, 4 and 6 workers either."
    )


def test_a_scatter_within_the_tolerance_or_of_one_count_leaves_no_note() -> None:
    from traceinspect.sweep import scatter_of

    # Two runs 3% apart: the 5% tolerance already spans them.
    close = [_untraced(2, 20.0), _untraced(3, 10.30, 10.0), _untraced(4, 10.6)]
    assert scatter_of(summarize_sweep(close, metric=UNTRACED)) is None
    # 20% apart, but nothing else within 20% of the best: the choice stands.
    alone = [_untraced(2, 20.0), _untraced(3, 10.0, 12.0), _untraced(4, 12.5)]
    result = summarize_sweep(alone, metric=UNTRACED)
    assert scatter_of(result) is None and "Within the runs' scatter" not in render_sweep(result)
    assert result.to_dict()["scatter"] is None
    # Compared by the traced step (no untraced figures): no second runs, no scatter.
    assert scatter_of(summarize_sweep([ok(2, 10.0), ok(3, 10.2)])) is None


def test_a_count_timed_again_that_fails_keeps_its_first_figure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _fake_runs(monkeypatch, {1: [20.0], 2: [10.0, None], 3: [10.3]})
    result = run_sweep(COMMAND, [1, 2, 3], CaptureOptions(logdir=str(tmp_path)))
    # 2 is best and chosen: timed again, which failed; nothing else to time again.
    assert calls[3:] == [(2, True)]
    assert result.chosen == 2 and result.run(2).untraced_ms == 10.0
    assert result.run(2).first_untraced_ms is None
    assert "timed again: no figure (exit code 1: boom); the first run's stands" in (
        result.run(2).message
    )


def test_compared_by_the_traced_steps_nothing_is_timed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    options = CaptureOptions(logdir=str(tmp_path))
    calls = _fake_runs(monkeypatch, {1: [20.0], 2: [10.0]})
    run_sweep(COMMAND, [1, 2], options, metric=TYPICAL)
    assert calls == [(1, False), (2, False)]
    # Nor where a run has no untraced figure (every count is then compared traced), though
    # another has one, which alone would read best.
    calls = _fake_runs(monkeypatch, {1: [20.0], 2: [10.0]})
    fake = _runner._run_one

    def one_untimed(*args: object, **kwargs: object) -> SweepRun:
        run = fake(*args, **kwargs)  # type: ignore[arg-type]
        return replace(run, untraced_ms=None) if run.workers == 1 else run

    monkeypatch.setattr(_runner, "_run_one", one_untimed)
    assert run_sweep(COMMAND, [1, 2], options).metric == TYPICAL
    assert calls == [(1, False), (2, False)]


def test_cli_usage_errors(tmp_path: Path) -> None:
    runner = CliRunner()
    bad = runner.invoke(main, ["sweep", "--worker-counts", "1,x", "--", "train.py"])
    assert bad.exit_code == 2
    assert "comma-separated list of integers" in bad.stderr
    dup = runner.invoke(
        main, ["sweep", "--worker-counts", "2,2", "--logdir", str(tmp_path), "--", str(TRAIN)]
    )
    assert dup.exit_code == 2
    assert dup.stderr.strip().splitlines() == ["Error: each worker count once, please: got [2, 2]"]


# -- real runs ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_real_sweep_through_the_cli(tmp_path: Path) -> None:
    logdir = tmp_path / "sweep"
    args = [
        "sweep", "--worker-counts", "0,1", "--logdir", str(logdir), "--skip-steps", "2",
        "--steps", "5", "--timeout", "120", "--",
        sys.executable, str(TRAIN), "--steps", "40", "--delay-ms", "1", "--workers", "{workers}",
    ]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    # A line per count once it ended; the status line only on a terminal (not here).
    assert "traceinspect: workers=0 (1/2): median" in result.stderr
    assert "running for" not in result.stderr and "\r" not in result.stderr
    # The pipeline's stages were measured in each run: their plot is written too.
    assert (
        f"wrote sweep.json, sweep.csv, sweep.png, sweep_input_stages.png in {logdir}"
        in result.stderr
    )
    saved = json.loads((logdir / "sweep.json").read_text())
    assert all(run["input_stages"]["dominant"] for run in saved["runs"])
    data = json.loads((logdir / JSON_NAME).read_text())
    assert [r["workers"] for r in data["runs"]] == [0, 1]
    assert [r["status"] for r in data["runs"]] == [OK, OK]
    assert data["chosen"] in (0, 1)
    # The script's 40 steps end before it could be timed untraced after its window (the
    # default): every count is compared by the traced step, and the output says why.
    assert data["metric"] == "typical"
    assert data["metric_note"].startswith("the run(s) at 0, 1 worker(s) timed no steps")
    assert "Compared by traced step time: the run(s) at 0, 1 worker(s)" in result.stdout
    assert data["runs"][1]["observed_workers"] == 1  # the placeholder reached Grain
    assert all(r["median_step_ms"] > 0 and r["mean_step_ms"] > 0 for r in data["runs"])
    assert all(r["steps"] >= 2 for r in data["runs"])
    assert pd.read_csv(logdir / CSV_NAME)["workers"].tolist() == [0, 1]
    assert (logdir / PLOT_NAME).stat().st_size > 0
    for n in (0, 1):
        assert list((logdir / f"workers_{n}" / "plugins" / "profile").glob("*/*.xplane.pb"))
    lines = result.stdout.splitlines()
    assert lines[0].split()[:2] == ["workers", "median"]
    assert sum(line.startswith("*") for line in lines) == 2  # the row and the sentence


@pytest.mark.slow
def test_by_default_each_run_goes_on_untraced_after_its_window(tmp_path: Path) -> None:
    from traceinspect.sidecar import FILE_NAME, parse

    result = run_sweep(
        [
            sys.executable,
            str(TRAIN),
            "--steps",
            "5000",
            "--delay-ms",
            "2",
            "--workers",
            "{workers}",
        ],
        [0],
        CaptureOptions(logdir=str(tmp_path), skip_steps=3, steps=8, stop_after=True),
        timeout_s=120,
    )
    assert result.metric == UNTRACED and result.metric_note is None
    run = result.run(0)
    assert run.ok and result.chosen == 0
    assert run.run_dir is not None
    record = parse(json.loads((Path(run.run_dir) / FILE_NAME).read_text(encoding="utf-8")))
    assert record is not None and record.window is not None
    window = record.window
    assert (window.first_step, window.last_step) == (3, 10)
    # Steady again after the window (step 11 holds the trace's write; then 3 blocks of at
    # least 8 steps and 0.5 s), then as many steps as the window traced (8; an explicit
    # --steps asks no minimum time) and its look-ahead (2), then stopped: the script's 5,000
    # steps were not run.
    assert window.untraced_after is not None and window.untraced_complete
    first, last = window.untraced_after
    timed_steps = 8 + look_ahead_steps(8)
    assert first >= 12 + 3 * 8 and last == first + timed_steps - 1
    assert (record.steps[first].start_unix_ns or 0) - (record.steps[12].start_unix_ns or 0) >= 1.5e9
    timed = [s for s in record.steps if first <= s.index <= last]
    assert len(timed) == timed_steps and not any(s.traced for s in timed)
    # Every timed step has its host time, and they tile the block: from the first step's
    # start to the start of the one after the last (where the script was stopped). (The
    # script's 2 ms a batch is read ahead: a step's host time can be shorter.)
    walls = [s.wall_ms for s in timed]
    assert all(w is not None and w > 0 for w in walls)
    after = next(s for s in record.steps if s.index == last + 1)
    span_ms = ((after.start_unix_ns or 0) - (timed[0].start_unix_ns or 0)) / 1e6
    assert sum(w or 0.0 for w in walls) == pytest.approx(span_ms, abs=1e-3)
    assert record.data["stopped_by_traceinspect"] is True
    assert record.data["steps_seen"] == last + 2
    pace = record.untraced_pace()
    # By the host's steps, or by the completions: as many gaps from the step before the
    # block's first when that one was stamped, else one fewer.
    assert pace is not None
    n = timed_steps
    assert pace.count in ((n - 1, n) if pace.how == "completed" else (n,))
    # The only count, so the best: timed a second time (LOGDIR/workers_0_again), whose
    # figure is the count's, the first run's kept beside it.
    assert run.first_untraced_ms == pytest.approx(pace.mean_ms, abs=1e-3)
    again = list((tmp_path / "workers_0_again" / "plugins" / "profile").glob("*/" + FILE_NAME))
    assert len(again) == 1
    second = parse(json.loads(again[0].read_text(encoding="utf-8")))
    assert second is not None
    second_pace = second.untraced_pace()
    assert second_pace is not None
    assert run.untraced_ms == pytest.approx(second_pace.mean_ms, abs=1e-3)
    assert run.untraced_steps == second_pace.count


@pytest.mark.slow
def test_crashing_run_is_a_row(tmp_path: Path) -> None:
    result = run_sweep(
        [sys.executable, str(TRAIN), "--crash-at", "0", "--workers", "{workers}"],
        [0],
        CaptureOptions(logdir=str(tmp_path), stop_after=True),
        timeout_s=120,
    )
    run = result.run(0)
    assert (run.status, run.exit_code, result.chosen) == (CRASHED, 1, None)
    assert "RuntimeError: boom at step 0" in run.message


@pytest.mark.slow
def test_timeout_stops_the_run(tmp_path: Path) -> None:
    script = tmp_path / "forever.py"
    script.write_text("import time\n\nif __name__ == '__main__':\n    time.sleep(10_000)\n")
    result = run_sweep(
        [sys.executable, str(script)],
        [1],
        CaptureOptions(logdir=str(tmp_path / "sweep"), stop_after=True),
        timeout_s=5,
    )
    run = result.run(1)
    assert run.status == TIMEOUT
    assert run.elapsed_s is not None
    assert 5 <= run.elapsed_s < 15
    assert run.exit_code == 128 + 15  # SIGTERM reached the script through capture
    assert "still running after 5 s" in run.message
