"""The generic input advice on the bundled family captures: "more read threads" only where
the pipeline's stages wait on reads. A CPU-bound pipeline's read threads take turns with the
GIL (Grain's tutorial loop at 2 workers: 30-40 ms a step with 16 read threads a worker, 11-15
with 1-2; ``sample_traces/frameworks/grain_tutorial_MEASUREMENTS.md``)."""

from __future__ import annotations

from pathlib import Path

import pytest

import traceinspect

FAMILY = Path(__file__).resolve().parents[1] / "sample_traces" / "scenarios" / "family"


def _input_advice(run: str) -> str:
    analysis = traceinspect.analyze(traceinspect.load(FAMILY / run, use_cache=False))
    assert analysis.verdict == "input-bound", analysis.summary
    return next(r.message for r in analysis.recommendations if r.kind == "input_pipeline")


@pytest.mark.parametrize("run", ["io_w1", "mix_w1"])
def test_workers_that_wait_on_reads_may_use_more_read_threads(run: str) -> None:
    message = _input_advice(run)
    assert "more read threads" in message
    assert "GIL" not in message


def test_cpu_bound_workers_are_not_told_to_add_read_threads() -> None:
    # cpu_w1: one worker on a core 97% of the window, its records burning CPU.
    message = _input_advice("cpu_w1")
    assert "more read threads do not help" in message
    assert "grain.ReadOptions(num_threads=1 or 2)" in message
    assert "more Grain mp_prefetch worker processes" in message
