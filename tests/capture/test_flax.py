"""A Flax NNX training loop as a real client (issue 31): default captures follow its steps
and give the right verdict and worker count, against truth measured without any profiler.

The loop is ``scripts/flax_nnx_loop.py`` (an ``nnx.Module`` MLP, ``nnx.Optimizer`` over
optax, an ``@nnx.jit`` step, a Grain ``MapDataset`` pipeline with ``mp_prefetch``); its
configurations and their measured step times: ``sample_traces/frameworks/flax_measure.py``
and ``flax_MEASUREMENTS.md`` there. Needs Flax: ``nox -s flax`` makes that environment and
runs this file (with TRACEINSPECT_FLAX=require, so a broken install fails instead of
skipping). Elsewhere it skips: ``pytest -m 'not flax'`` leaves it out by name.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from capture_helpers import SCRIPTS, framework_measure, read_sidecar

import traceinspect
from traceinspect.analysis.result import Analysis
from traceinspect.capture import CaptureOptions, run_capture

pytestmark = [pytest.mark.slow, pytest.mark.flax]

LOOP = SCRIPTS / "flax_nnx_loop.py"
# Enough for the default window once the run is steady, on a loaded machine too (~15-25 s a
# capture): 200 steps on a 2-core machine running 6x over its cores never got steady. The
# rule's own arithmetic: the host dispatches ~40 steps in 2.5 ms each while the CPU client's
# queue fills (the same without capture), then ~10.5-11 ms a step; three blocks of at least
# STEADY_BLOCK_S (0.5 s) and a window of WINDOW_MIN_S (1 s) after that are ~240 steps. 300
# left 0-35 to spare: steady from step 61-72, the window closed at 266-279 (3 captures
# here) and, at 11.1 ms a step in one CI run, was cut by the script's end at its 91st step.
STEPS = 400
TRUTH_STEPS = 120
# Within this of the best measured step, a worker count is as good as the best (MaxText's).
WITHIN = 0.15


@pytest.fixture(scope="module")
def measure() -> ModuleType:
    return framework_measure("flax", ("flax",))


def _capture(tmp_path: Path, flags: tuple[str, ...]) -> tuple[Analysis, dict[str, Any]]:
    """A default capture (no option but the log folder) of the loop, and its sidecar."""
    command = [sys.executable, str(LOOP), *flags, "--steps", str(STEPS)]
    result = run_capture(command, CaptureOptions(logdir=str(tmp_path), quiet=True))
    assert result.exit_code == 0, result.summary()
    sidecar = read_sidecar(result)
    # Capture followed the loop's steps (one a Grain batch) to a steady window.
    assert sidecar["step_source"] == "grain", sidecar["step_source_detail"]
    assert sidecar["steps_seen"] == STEPS
    window = sidecar["window"]
    assert window["rule"] == "steady" and window["complete"], window
    assert window["first_step"] > 0, window
    return traceinspect.analyze(traceinspect.load(result.run_dir, use_cache=False)), sidecar


def test_cheap_input_is_device_bound(measure: ModuleType, tmp_path: Path) -> None:
    analysis, _ = _capture(tmp_path, measure.CONFIGS["cheap-w1"])
    assert analysis.verdict == "device-bound", analysis.summary


def test_a_per_step_loss_read_is_sync_bound(measure: ModuleType, tmp_path: Path) -> None:
    analysis, _ = _capture(tmp_path, measure.CONFIGS["read"])
    assert analysis.verdict == "sync-bound", analysis.summary
    line = next(
        n
        for n, text in enumerate(LOOP.read_text(encoding="utf-8").splitlines(), 1)
        if "float(loss)" in text and "value =" in text
    )
    assert analysis.sync_sites[0] == f"float() at flax_nnx_loop.py:{line} train", (
        analysis.sync_sites
    )


def test_slow_input_is_input_bound_with_a_worker_count_near_the_knee(
    measure: ModuleType, tmp_path: Path
) -> None:
    # 1 worker once (the premise holds by ~80%); 2-4 best of 3, interleaved: a run on this
    # shared machine is only ever slowed by others, and best of 2 put 3 workers 16% over 4
    # in one run (25.95 against 22.30 ms) where another had them within 10%.
    timed = measure.measure(["slow-w1"], TRUTH_STEPS, 1)
    timed |= measure.measure(["slow-w2", "slow-w3", "slow-w4"], TRUTH_STEPS, 3)
    truth = {int(name[-1]): min(ms) for name, ms in timed.items()}
    best = min(truth.values())
    knee = measure.knee(truth, WITHIN)
    # The premise: one worker holds the step back.
    assert truth[1] > best * (1 + WITHIN), truth

    analysis, _ = _capture(tmp_path, measure.CONFIGS["slow-w1"])
    assert analysis.verdict == "input-bound", analysis.summary
    (rec,) = [r for r in analysis.recommendations if r.kind == "grain_worker_count"]
    # As MaxText's test: at most the knee + 2, and a count whose measured step is as good
    # as the best (within WITHIN) where fewer than the knee.
    assert rec.value is not None and rec.value <= knee + 2, (rec, truth)
    if rec.value < knee:
        assert truth[rec.value] <= best * (1 + WITHIN), (rec.value, truth)
