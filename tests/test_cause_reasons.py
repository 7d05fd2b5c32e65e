"""Why a gap got its cause where its evidence points elsewhere, on precisely built XSpaces:
the sentence in the gaps frame, `analyze --json`, the text and the HTML report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import xspace as X
from click.testing import CliRunner

import traceinspect
from traceinspect import schema as S
from traceinspect.analysis.analyze import analyze
from traceinspect.analysis.result import Analysis
from traceinspect.analysis.result_record import analysis_from_record, analysis_record
from traceinspect.cli import main
from traceinspect.report.analyze import render_analysis
from traceinspect.report.html import render_html

ms = X.ms
MS = 1_000_000  # ns

# sync_loop(1.0): each 10 ms step fetches for 1 ms, dispatches, and np.asarray waits for the
# kernel, returning 0.3 ms before the step ends; the next step's fetch follows.
SYNC_OVER_INPUT = (
    "sync, because the batch could only be requested after the read returned "
    "(the read ended 0.30 ms before the 1.00 ms wait for input)"
)


def _write(tmp_path: Path, xs: Any) -> Path:
    return Path(X.write(xs, tmp_path / "t.xplane.pb"))


def _analyze(path: Path) -> tuple[traceinspect.Trace, Analysis]:
    trace = traceinspect.load(path)
    return trace, analyze(trace)


def _piece(a: Analysis, start_ms: float) -> dict[str, Any]:
    """The gap piece starting ``start_ms`` after the trace's first event, as a frame row."""
    gaps = a.gaps
    row = gaps[gaps[S.START_NS] == round(start_ms * MS)]
    assert len(row) == 1, gaps
    return dict(row.iloc[0])


def test_sync_over_input_says_the_batch_waited_for_the_read(tmp_path: Path) -> None:
    path = _write(tmp_path, X.sync_loop(input_ms=1.0))
    trace, a = _analyze(path)
    assert a.verdict == "sync-bound"
    # Step 1 opens with the 1 ms fetch the read delayed: all of it the sync's (input 1 ms a
    # step against 8.5 ms of device work), though the evidence shows an input wait.
    piece = _piece(a, 10.0)
    assert piece[S.CAUSE] == "sync" and piece["input"] == 0
    assert piece[S.CAUSE_REASON] == SYNC_OVER_INPUT
    assert any("(input) 1.00 ms of the gap" in e for e in piece[S.EVIDENCE])
    # The end of a step: the read's tail, then 0.3 ms that no event covers.
    tail = _piece(a, 9.5)
    assert tail[S.CAUSE] == "sync"
    assert tail[S.CAUSE_REASON] == (
        "sync, because the host could only go on after the read returned "
        "(the 0.30 ms that no event covers came after it)"
    )
    # Step 0's fetch and dispatch opened no read's period: input, as its evidence says.
    assert _piece(a, 0.0)[S.CAUSE_REASON] is None

    result = CliRunner().invoke(main, ["analyze", str(path), "--json", "--no-cache"])
    assert result.exit_code == 0, result.output
    gaps = json.loads(result.stdout)["gaps"]
    assert {g["start_ms"]: g["cause_reason"] for g in gaps} == {
        0.0: None,
        9.5: tail[S.CAUSE_REASON],
        10.0: SYNC_OVER_INPUT,
        19.5: tail[S.CAUSE_REASON],
        20.0: SYNC_OVER_INPUT,
        29.5: tail[S.CAUSE_REASON],
    }
    text = render_analysis(a)
    assert text.count(f"      why: {SYNC_OVER_INPUT}") == 2
    page = render_html(trace, a, figures={})
    assert f'<p class="why">why: {SYNC_OVER_INPUT}</p>' in page


def test_no_reason_where_the_evidence_agrees(tmp_path: Path) -> None:
    """The same loop fetching 6 ms against 3 ms of device work: input-bound, each gap's cause
    is its evidence's (input; the read's tail and the untraced rest: unknown)."""
    path = _write(tmp_path, X.sync_loop(input_ms=6.0))
    trace, a = _analyze(path)
    assert a.verdict == "input-bound"
    assert a.gaps[S.CAUSE].tolist() == ["input", "unknown"] * 3
    assert a.gaps[S.CAUSE_REASON].tolist() == [None] * 6
    result = CliRunner().invoke(main, ["analyze", str(path), "--json", "--no-cache"])
    assert [g["cause_reason"] for g in json.loads(result.stdout)["gaps"]] == [None] * 6
    assert "why:" not in render_analysis(a)
    assert 'class="why"' not in render_html(trace, a, figures={})


def test_a_read_made_inside_the_wait_for_input_says_so(tmp_path: Path) -> None:
    """The iterator itself reads a device value: the input wait began before the read, so
    'the batch could only be requested after the read' would be false; the sync rule still
    gives the wait to sync, and the reason says how the two lay."""
    xs = X.space()
    host = X.step_events(3, 10)
    kernels = []
    for i in range(3):
        t = 10 * i
        host += [
            X.Ev("PjitFunction(step)", ms(t), ms(0.5)),
            X.Ev("PrefetchDatasetIterator.__next__", ms(t + 1.5), ms(8.3)),
            X.Ev("np.asarray(jax.Array)", ms(t + 2), ms(7.1)),
        ]
        kernels.append(X.Ev("gemm", ms(t + 0.5), ms(8.5)))
    X.add_plane(xs, "/host:CPU").line("python", 0, host)
    X.add_plane(xs, "/device:GPU:0").line("Stream #7(Compute)", 0, kernels)
    _, a = _analyze(_write(tmp_path, xs))
    # Idle from the kernel's end (9.0) to the step's end: the read's last 0.1 ms (from 2.0
    # to 9.1, inside the iterator's 1.5 to 9.8), the iterator's 0.7 ms after it, 0.2 ms
    # untraced; all moved to sync (input 8.3 ms a step against 8.5 ms of device work).
    piece = _piece(a, 9.0)
    assert piece[S.CAUSE] == "sync" and piece["sync"] == 1 * MS
    assert piece[S.CAUSE_REASON] == (
        "sync, by the sync rule: the idle period opened when a read returned, though the "
        "wait for input began 7.60 ms before the read ended (the read was made inside it)"
    )


def test_compile_over_a_longer_wait_for_input(tmp_path: Path) -> None:
    """XLA compiles step 1's program on a compiler thread while the loop waits 9 ms for its
    batch: the 8 ms both overlap go to compile (it comes first), which wins the gap."""
    xs = X.space()
    host = [*X.step_events(3, 10), X.Ev("PrefetchDatasetIterator.__next__", ms(10), ms(9))]
    plane = X.add_plane(xs, "/host:CPU")
    plane.line("python", 0, host)
    plane.line("tf_PjRtCompilerThreadPool/1", 0, [X.Ev("HloPassPipeline", ms(10.5), ms(8))])
    ops = [X.Ev("fusion", ms(1), ms(8)), X.Ev("fusion", ms(21), ms(8))]
    X.add_plane(xs, "/device:TPU:0").line("XLA Ops", 0, ops)
    _, a = _analyze(_write(tmp_path, xs))
    piece = _piece(a, 10.0)
    assert (piece[S.CAUSE], piece["compile"], piece["input"]) == ("compile", 8 * MS, 1 * MS)
    assert piece[S.CAUSE_REASON] == (
        "compile, because XLA was compiling during 8.00 ms of the 9.00 ms wait for input: a "
        "step cannot run before its program is compiled, so compilation comes first"
    )


def test_a_cause_that_won_because_a_third_took_the_time(tmp_path: Path) -> None:
    """A 5 ms wait for input, 3 ms of it while XLA compiled, then 4 ms of other host work:
    compile 3, input 2, host 4: host wins, though the input's evidence is the longest."""
    xs = X.space()
    host = [
        *X.step_events(3, 10),
        X.Ev("PrefetchDatasetIterator.__next__", ms(10), ms(5)),
        X.Ev("save_metrics", ms(15), ms(4)),
    ]
    plane = X.add_plane(xs, "/host:CPU")
    plane.line("python", 0, host)
    plane.line("tf_PjRtCompilerThreadPool/1", 0, [X.Ev("HloPassPipeline", ms(11), ms(3))])
    ops = [X.Ev("fusion", ms(1), ms(8)), X.Ev("fusion", ms(21), ms(8))]
    X.add_plane(xs, "/device:TPU:0").line("XLA Ops", 0, ops)
    _, a = _analyze(_write(tmp_path, xs))
    piece = _piece(a, 10.0)
    assert (piece[S.CAUSE], piece["host"], piece["input"]) == ("host", 4 * MS, 2 * MS)
    assert piece[S.CAUSE_REASON] == (
        "host (4.00 ms), the largest cause once 3.00 ms of the 5.00 ms wait for input went to "
        "compile (XLA was compiling)"
    )


@pytest.mark.parametrize("input_ms", [1.0, 6.0])
def test_the_reason_survives_the_result_cache(tmp_path: Path, input_ms: float) -> None:
    """The cache's record of an analysis keeps the reasons (strings and None) as they were."""
    _, a = _analyze(_write(tmp_path, X.sync_loop(input_ms=input_ms)))
    back = analysis_from_record(*analysis_record(a))
    reasons = a.gap_columns[S.CAUSE_REASON].tolist()
    assert back.gap_columns[S.CAUSE_REASON].tolist() == reasons
    assert (SYNC_OVER_INPUT in reasons) == (input_ms == 1.0)
    assert back.to_dict() == a.to_dict()
