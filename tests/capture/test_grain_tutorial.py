"""A loop shaped like Grain's own JAX tutorial (``scripts/grain_tutorial_loop.py``: a Python
``map`` on Grain's 16 default read threads, ``device_put``, a jitted step), under a default
capture (issue 48). At 0 workers the read threads take turns with the GIL and pace the loop:
the run is input-bound, the training thread's waits for the GIL are not "the loop's own
code", and the bursts are not said to come from workers it does not have."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from capture_helpers import SCRIPTS

import traceinspect
from traceinspect import schema as S
from traceinspect.capture import CaptureOptions, run_capture

pytestmark = [pytest.mark.slow]


def test_the_tutorial_loop_at_0_workers_is_input_bound_not_its_own_code(tmp_path: Path) -> None:
    command = [sys.executable, str(SCRIPTS / "grain_tutorial_loop.py"), "0", "240"]
    result = run_capture(command, CaptureOptions(logdir=str(tmp_path), quiet=True))
    assert result.exit_code == 0, result.summary()
    analysis = traceinspect.analyze(traceinspect.load(result.run_dir, use_cache=False))
    stages = analysis.input_stages
    assert stages is not None and stages.workers == 0
    if stages.threads_cpu_share is None:
        # Known gap (issue 48): on a loaded machine capture's window can close before the
        # read threads' CPU is read, and the rule has nothing to go on.
        pytest.skip("capture did not measure the read threads' CPU in this window")
    window = analysis.window or {}
    traced = window.get("traced_mean_ms")
    # The run's steps: those after the window, or, where the script ended right after it,
    # the steady ones before it (1 capture in 5 here: 537 ms a step traced from step 174,
    # 133-142 ms before it, one step after).
    after = window.get("after_mean_ms") or window.get("before_mean_ms")
    if traced and after and traced > 2 * after:
        # Known gap (issue 46): 1 default capture in 3 on a fresh 2-core machine traced the
        # loop 4.7-8.6x slower than its untraced steps after the window (211 and 366 ms a
        # step against 45 and 42), its read threads 1-2% on a CPU, and read host-bound; the
        # code before this session did the same. Such a window is not the run the rule is
        # about, and analyze says so ("the window may not represent the run").
        pytest.skip(f"the window ran {traced / after:.1f}x slower than the run's steps")
    assert analysis.verdict == "input-bound", analysis.summary
    assert analysis.decision is not None and analysis.decision.cause in ("pipeline_cpu", "input")
    kinds = [r.kind for r in analysis.recommendations]
    assert "reduce_host_overhead" not in kinds, kinds
    # Its read threads run Python and take turns with the GIL: more of them is no advice.
    inputs = [r.message for r in analysis.recommendations if r.kind == "input_pipeline"]
    assert all("more read threads do not help" in text for text in inputs), inputs
    assert stages.threads_compute_share is not None and stages.threads_compute_share >= 0.5
    assert not any("one per Grain worker" in n for n in analysis.notes)
    # No gap blames the loop's own code: its untraced time is a wait for the GIL the read
    # threads hold (their line names it so).
    lines = [line for ev in analysis.gaps[S.EVIDENCE] for line in ev]
    assert not any(line.startswith("the loop's own code") for line in lines), lines[:5]
