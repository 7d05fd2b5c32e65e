"""compare(): exact numbers on built traces, and the bundled sync_bound -> healthy pair."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import xspace as X
from click.testing import CliRunner

import traceinspect
from traceinspect.analysis.analyze import Analysis, analyze
from traceinspect.analysis.compare import RunSummary, _finding, compare
from traceinspect.cli import main
from traceinspect.report.compare import render_comparison
from traceinspect.report.notebook import comparison_html
from traceinspect.vocabulary import CAUSES

SCENARIOS = Path(__file__).parent.parent / "sample_traces" / "scenarios"
ms = X.ms
_steps = X.step_events


def _sync_loop() -> object:
    """idle input 1, sync 4.5, host 0.5 ms over 3 steps of 10 ms (see test_analyze_rules)."""
    return X.sync_loop(input_ms=1.0)


def _fixed_loop(device: str = "gpu") -> object:
    """The same kernel with the sync removed, over 4 steps (a different length): each
    8.3 ms step is 0.3 ms of dispatch then the 8 ms kernel, while the next batch is
    fetched under the kernel."""
    xs = X.space()
    host = _steps(4, 8.3)
    kernels = []
    for i in range(4):
        t = 8.3 * i
        host += [
            X.Ev("PjitFunction(step)", ms(t), ms(0.3)),
            X.Ev("PrefetchDatasetIterator.__next__", ms(t + 0.5), ms(1)),
        ]
        kernels.append(X.Ev("gemm", ms(t + 0.3), ms(8)))
    X.add_plane(xs, "/host:CPU").line("python", 0, host)
    if device == "gpu":
        X.add_plane(xs, "/device:GPU:0").line("Stream #7(Compute)", 0, kernels)
    else:
        X.add_plane(xs, "/device:TPU:0").line("XLA Ops", 0, kernels)
    return xs


def _analyze(tmp_path: Path, name: str, xs: object) -> Analysis:
    return analyze(traceinspect.load(X.write(xs, tmp_path / f"{name}.xplane.pb")))


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Analysis, Analysis]:
    return _analyze(tmp_path, "before", _sync_loop()), _analyze(tmp_path, "after", _fixed_loop())


def test_sync_removed(pair: tuple[Analysis, Analysis]) -> None:
    before, after = pair
    c = compare(before, after)
    b, a = c.before, c.after
    assert (b.steps, b.median_ms, b.p90_ms, b.verdict) == (3, 10.0, 10.0, "sync-bound")
    assert (a.steps, a.median_ms, a.p90_ms, a.verdict) == (4, 8.3, 8.3, "device-bound")
    # Per step: 6 ms of idle time over 3 steps before, 0.3 ms of dispatch per step after.
    assert b.idle_by_cause_ms_per_step == {
        "input": 0.3333,
        "sync": 1.5,
        "compile": 0.0,
        "host": 0.1667,
        "runtime": 0.0,
        "unknown": 0.0,
    }
    assert a.idle_by_cause_ms_per_step == {
        "input": 0.0,
        "sync": 0.0,
        "compile": 0.0,
        "host": 0.3,
        "runtime": 0.0,
        "unknown": 0.0,
    }
    assert (b.idle_ms_per_step, a.idle_ms_per_step) == (2.0, 0.3)
    assert (b.busy_fraction, a.busy_fraction) == (0.8, 0.9639)
    assert b.device_busy_ms_per_step == a.device_busy_ms_per_step == 8.0
    assert (c.median_change_ms, c.median_change_pct) == (-1.7, -17.0)
    assert (c.p90_change_ms, c.p90_change_pct) == (-1.7, -17.0)
    assert c.busy_fraction_change == 0.1639
    assert c.device_busy_change_ms_per_step == 0.0
    assert c.idle_change_ms_per_step == -1.7
    assert c.idle_by_cause_change_ms_per_step == {
        "input": -0.3333,
        "sync": -1.5,
        "compile": 0.0,
        "host": 0.1333,
        "runtime": 0.0,
        "unknown": 0.0,
    }
    # The per-step ledger: the wall and the parts that add up to it, per step.
    assert b.ledger_ms_per_step == {
        "wall": 10.0,
        "busy": 8.0,
        "idle_input": 0.3333,
        "idle_sync": 1.5,
        "idle_compile": 0.0,
        "idle_host": 0.1667,
        "idle_runtime": 0.0,
        "idle_unknown": 0.0,
    }
    assert a.ledger_ms_per_step == {
        "wall": 8.3,
        "busy": 8.0,
        "idle_input": 0.0,
        "idle_sync": 0.0,
        "idle_compile": 0.0,
        "idle_host": 0.3,
        "idle_runtime": 0.0,
        "idle_unknown": 0.0,
    }
    assert c.ledger_change_ms_per_step == {
        "wall": -1.7,
        "busy": 0.0,
        "idle_input": -0.3333,
        "idle_sync": -1.5,
        "idle_compile": 0.0,
        "idle_host": 0.1333,
        "idle_runtime": 0.0,
        "idle_unknown": 0.0,
    }
    assert c.moved_most == "idle_sync"
    assert c.finding == (
        "Step time fell 17% (10.00 -> 8.30 ms): sync idle time went from 1.50 to 0.00 "
        "ms/step; verdict sync-bound -> device-bound."
    )
    assert c.notes == ()
    d = c.to_dict()
    assert json.loads(json.dumps(d)) == d
    assert d["change"]["median_pct"] == -17.0
    assert d["before"]["idle_by_cause_ms_per_step"]["sync"] == 1.5
    assert d["before"]["ledger_ms_per_step"]["wall"] == 10.0
    assert d["change"]["ledger_ms_per_step"]["idle_sync"] == -1.5
    assert d["change"]["moved_most"] == "idle_sync"


def test_other_way_round_and_same(pair: tuple[Analysis, Analysis]) -> None:
    before, after = pair
    assert compare(after, before).finding == (
        "Step time rose 20% (8.30 -> 10.00 ms): sync idle time went from 0.00 to 1.50 "
        "ms/step; verdict device-bound -> sync-bound."
    )
    same = compare(before, before)
    assert same.finding == (
        "Step time is about the same (10.00 -> 10.00 ms, +0.0%): device busy time and idle "
        "time by cause per step did not change; verdict stays sync-bound."
    )
    assert same.moved_most is None and set(same.ledger_change_ms_per_step.values()) == {0.0}


def test_different_backends_are_noted(tmp_path: Path) -> None:
    before = _analyze(tmp_path, "before", _sync_loop())
    after = _analyze(tmp_path, "after", _fixed_loop(device="tpu"))
    c = compare(before, after)
    assert c.after.backend == "tpu"
    assert c.notes == (
        "The runs use different backends (gpu before, tpu after): step times are not "
        "comparable as a measure of one change.",
    )
    assert render_comparison(c).endswith("Note: " + c.notes[0])


def test_text_and_html(pair: tuple[Analysis, Analysis]) -> None:
    c = compare(*pair)
    text = render_comparison(c).splitlines()
    assert text[0] == c.finding
    assert text[5].split() == ["before", "after", "change"]
    assert text[6].split() == ["Verdict", "sync-bound", "device-bound"]
    assert text[7].split() == [
        "Step",
        "time",
        "median",
        "(ms)",
        "10.00",
        "8.30",
        "-1.70",
        "(-17.0%)",
    ]
    assert text[9].split() == ["Device", "busy", "80.0%", "96.4%", "+16.4", "pts"]
    # The ledger: the wall per step, then its parts, the one that moved most marked.
    assert text[11].split() == ["Step", "wall", "(ms/step)", "10.00", "8.30", "-1.70"]
    assert text[12].split() == ["device", "busy", "8.00", "8.00", "+0.00"]
    assert text[13].split() == ["idle", "2.00", "0.30", "-1.70"]
    assert text[14].split() == ["input", "0.33", "0.00", "-0.33"]
    assert text[15].split() == ["sync", "1.50", "0.00", "-1.50", "<-", "moved", "most"]
    assert sum("moved most" in line for line in text) == 1
    html = comparison_html(c)
    assert html.startswith("<p>Step time fell 17% (10.00 -&gt; 8.30 ms)")
    assert "<td>sync-bound</td><td>device-bound</td>" in html
    assert "<td>&nbsp;&nbsp;sync</td><td>1.50</td><td>0.00</td><td>-1.50</td>" in html


def test_top_level_export() -> None:
    assert traceinspect.compare is compare
    assert "compare" in traceinspect.__all__ and "Comparison" in traceinspect.__all__


def test_cli_sample_pair() -> None:
    """The bundled sync_bound run against the same loop with the read moved off the step."""
    before = str(SCENARIOS / "sync_bound" / "vm.xplane.pb")
    after = str(SCENARIOS / "healthy" / "vm.xplane.pb")
    runner = CliRunner()
    result = runner.invoke(main, ["compare", before, after, "--json"])
    assert result.exit_code == 0, result.output
    d = json.loads(result.output)
    assert (d["before"]["verdict"], d["after"]["verdict"]) == ("sync-bound", "device-bound")
    assert (d["before"]["median_ms"], d["after"]["median_ms"]) == (21.9326, 10.452)
    assert d["change"]["median_ms"] == pytest.approx(10.452 - 21.9326, abs=1e-4)
    assert d["change"]["median_pct"] == -52.34
    assert d["before"]["idle_by_cause_ms_per_step"]["sync"] > 7
    assert d["after"]["idle_by_cause_ms_per_step"]["sync"] == 0.0
    assert d["finding"].startswith("Step time fell 52% (21.93 -> 10.45 ms): sync idle time")
    assert d["finding"].endswith("verdict sync-bound -> device-bound.")
    # The ledger per step: its parts add up to the wall; the sync's moved most.
    before_ledger, after_ledger = (
        d["before"]["ledger_ms_per_step"],
        d["after"]["ledger_ms_per_step"],
    )
    assert (before_ledger["wall"], after_ledger["wall"]) == (22.3719, 10.766)
    assert (before_ledger["busy"], after_ledger["busy"]) == (13.7461, 10.6069)
    assert (before_ledger["idle_sync"], before_ledger["idle_input"]) == (7.4036, 1.131)
    for ledger in (before_ledger, after_ledger):
        parts = sum(v for k, v in ledger.items() if k != "wall")
        assert parts == pytest.approx(ledger["wall"], abs=1e-3)
    assert d["change"]["ledger_ms_per_step"]["wall"] == -11.6059
    assert d["change"]["ledger_ms_per_step"]["busy"] == -3.1392
    assert d["change"]["moved_most"] == "idle_sync"

    text = runner.invoke(main, ["compare", before, after])
    assert text.exit_code == 0, text.output
    lines = text.output.splitlines()
    assert lines[0] == d["finding"]
    assert any(line.split()[:3] == ["Verdict", "sync-bound", "device-bound"] for line in lines)
    assert any(line.split()[:3] == ["sync", "7.40", "0.00"] for line in lines)
    assert any(line.split()[:3] == ["device", "busy", "13.75"] for line in lines)
    assert next(line for line in lines if "moved most" in line).split()[0] == "sync"


def test_cli_runs_of_one_logdir(tmp_path: Path) -> None:
    """--run-before/--run-after pick two runs of one log directory."""
    for scenario in ("sync_bound", "healthy"):
        run = tmp_path / "plugins" / "profile" / scenario
        run.mkdir(parents=True)
        shutil.copy(SCENARIOS / scenario / "vm.xplane.pb", run)
    args = ["compare", str(tmp_path), str(tmp_path), "--run-before", "sync_bound"]
    result = CliRunner().invoke(main, [*args, "--run-after", "healthy", "--json", "-q"])
    assert result.exit_code == 0, result.output
    d = json.loads(result.output)
    assert (d["before"]["verdict"], d["after"]["verdict"]) == ("sync-bound", "device-bound")


def test_cli_error_names_the_trace(tmp_path: Path) -> None:
    xs = X.space()
    X.add_plane(xs, "/host:CPU").line("python", 0, _steps(3, 10))
    idle = X.write(xs, tmp_path / "idle.xplane.pb")
    good = str(SCENARIOS / "healthy" / "vm.xplane.pb")
    result = CliRunner().invoke(main, ["compare", good, str(idle)])
    assert result.exit_code == 1
    assert "idle.xplane.pb: no device activity found" in result.output


def test_cli_compare_accepts_urls() -> None:
    """BEFORE and AFTER may be fsspec URLs (a remote log directory), read unmangled."""
    pytest.importorskip("fsspec")
    before = (SCENARIOS / "sync_bound" / "vm.xplane.pb").as_uri()
    after = (SCENARIOS / "healthy" / "vm.xplane.pb").as_uri()
    result = CliRunner().invoke(main, ["compare", before, after, "--json"])
    assert result.exit_code == 0, result.output
    d = json.loads(result.output)
    assert (d["before"]["median_ms"], d["after"]["median_ms"]) == (21.9326, 10.452)


def _summary(median: float, p90: float, mean: float, bursty: bool) -> RunSummary:
    return RunSummary(
        path="run",
        backend="cpu",
        steps=100,
        median_ms=median,
        p90_ms=p90,
        mean_ms=mean,
        bursty=bursty,
        verdict="input-bound",
        busy_fraction=0.5,
        device_busy_ms_per_step=2.0,
        idle_ms_per_step=1.0,
        idle_by_cause_ms_per_step=dict.fromkeys(CAUSES, 0.0),
        ledger_ms_per_step={"wall": mean, "busy": mean},
    )


def test_bursty_runs_are_compared_by_their_mean_with_both_percentiles_when_they_disagree() -> None:
    """A burst's median is a fast step: "fell 49%" while the p90 rose 67% told nothing."""
    before = _summary(median=4.0, p90=6.0, mean=5.0, bursty=False)
    after = _summary(median=2.04, p90=10.0, mean=5.5, bursty=True)
    text = _finding(before, after)
    assert text.startswith("Step time rose 10% (5.00 -> 5.50 ms, the mean: steps come in bursts)")
    assert "the median fell 49% while the p90 rose 67%" in text


def test_a_stall_taken_away_shows_as_a_run_part() -> None:
    """A synchronous checkpoint every 25 steps (an H200 capture) against the same loop
    without it: the stall's 10.21 ms a step over the run, a part no window row holds, is
    the change compare shows besides the ledger."""
    samples = Path(__file__).parent.parent / "sample_traces" / "gpu"
    before = analyze(traceinspect.load(samples / "checkpoint", use_cache=False))
    after = analyze(traceinspect.load(samples / "device_bound", use_cache=False))
    assert before.run_parts["stall"] == {
        "ms_per_step": 10.2096,
        "share": 0.5471,
        "basis": "measured",
    }
    c = compare(before, after)
    assert c.before.run_parts_ms_per_step == {"stall": 10.2096}
    assert c.run_parts_change_ms_per_step["stall"] == -10.2096
    assert c.to_dict()["change"]["run_parts_ms_per_step"]["stall"] == -10.2096
    row = next(line for line in render_comparison(c).splitlines() if line.startswith("Run part"))
    assert "recurring stall" in row and row.split()[-3:] == ["10.21", "0.00", "-10.21"]
