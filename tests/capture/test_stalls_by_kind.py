"""Stalls named by what they are, on default captures (issue 48): remote logging, garbage
collection, an epoch restart and an evaluation scored on the host, each recurring every N
steps of the scenario family's loop (``sample_traces/scenarios/family/train_family.py``,
its ``--log-every``, ``--gc-every``, ``--epoch-steps`` and ``--eval-every`` habits). Each is
named by its kind, with the period the loop has and a fix of its own. Their costs timed
without the profiler, and these captures repeated: ``sample_traces/scenarios/family/
MEASUREMENTS.md`` ("Stalls by kind")."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from capture_helpers import REPO

import traceinspect
from traceinspect.analysis.result import Analysis
from traceinspect.capture import CaptureOptions, run_capture

# On CI's stack and the newest (3.12); 3.13's run of the same jax and Grain leaves them out.
pytestmark = [pytest.mark.slow, pytest.mark.newest_once]

FAMILY = REPO / "sample_traces" / "scenarios" / "family" / "train_family.py"
# Light records at 2 workers: the pipeline keeps up, the loop's habit is all there is.
BASE = ("--record", "light", "--workers", "2")


def _analysis(tmp_path: Path, *args: str) -> Analysis:
    """A default capture (no option but the log folder) of the family's loop, analysed."""
    command = [sys.executable, str(FAMILY), *BASE, *args]
    result = run_capture(command, CaptureOptions(logdir=str(tmp_path), quiet=True))
    assert result.exit_code == 0, result.summary()
    trace = traceinspect.load(result.run_dir, use_cache=False)
    assert trace.sidecar is not None and trace.sidecar.run_events is not None
    return traceinspect.analyze(trace)


def _stall_advice(analysis: Analysis) -> str:
    (rec,) = [r for r in analysis.recommendations if r.kind == "recurring_stall"]
    assert rec.expected_step_ms is not None
    return rec.message


@pytest.mark.stack
def test_remote_logging_every_10_steps(tmp_path: Path) -> None:
    analysis = _analysis(tmp_path, "--steps", "240", "--log-every", "10", "--log-ms", "60")
    stall = analysis.recurring_stall
    assert stall is not None, analysis.summary
    assert (stall["what"], stall["period_steps"]) == ("logging", 10), stall
    assert analysis.verdict == "host-bound", analysis.summary
    assert "remote logging" in analysis.summary
    assert "background thread" in _stall_advice(analysis)


@pytest.mark.stack
def test_garbage_collection_every_12_steps(tmp_path: Path) -> None:
    analysis = _analysis(tmp_path, "--steps", "240", "--gc-every", "12")
    stall = analysis.recurring_stall
    assert stall is not None, analysis.summary
    assert (stall["what"], stall["period_steps"]) == ("gc", 12), stall
    assert analysis.verdict == "host-bound", analysis.summary
    assert "garbage collection" in analysis.summary
    assert "gc.freeze()" in _stall_advice(analysis)


@pytest.mark.stack
def test_a_new_iterator_every_epoch(tmp_path: Path) -> None:
    analysis = _analysis(tmp_path, "--steps", "240", "--epoch-steps", "40")
    stall = analysis.recurring_stall
    assert stall is not None, analysis.summary
    assert (stall["what"], stall["period_steps"]) == ("epoch", 40), stall
    assert analysis.verdict == "input-bound", analysis.summary
    assert "epoch restart" in analysis.summary and "2 worker process(es)" in analysis.summary
    assert "one iterator for the whole run" in _stall_advice(analysis)


@pytest.mark.stack
def test_an_evaluation_scored_on_the_host(tmp_path: Path) -> None:
    analysis = _analysis(
        tmp_path, "--steps", "240", "--eval-every", "20", "--eval-batches", "5",
        "--eval-score-host",
    )  # fmt: skip
    stall = analysis.recurring_stall
    assert stall is not None, analysis.summary
    assert (stall["what"], stall["period_steps"]) == ("evaluation", 20), stall
    assert analysis.verdict == "host-bound", analysis.summary
    assert "scored on the host" in analysis.summary
    assert "Score the evaluation on the device" in _stall_advice(analysis)
