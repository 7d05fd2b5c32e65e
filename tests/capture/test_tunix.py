"""Tunix's ``PeftTrainer`` as a real client (issue 48): default captures of a tiny Flax NNX
language model trained the way Tunix's docs train one give the verdict that the truth,
measured without any profiler, says.

The loop is ``scripts/tunix_loop.py`` (an NNX decoder, ``TrainingConfig`` with
``eval_every_n_steps``, ``max_steps`` and TensorBoard metrics, ``PeftTrainer`` over AdamW with
``with_gen_model_input_fn``, ``trainer.train(train_ds, eval_ds)`` on a Grain ``MapDataset``
with ``mp_prefetch``); its configurations and their measured step times:
``sample_traces/frameworks/tunix_measure.py`` and ``tunix_MEASUREMENTS.md`` there. Tunix
marks each step with a ``StepTraceAnnotation("train")``, which capture follows.

- ``compute``: cheap input (records tokenized once) on one worker: device-bound;
- ``slow-w1``: a slow Python tokenizer on one worker (~94 ms of a core a batch against a
  ~41 ms step): input-bound.

Needs Tunix (``google-tunix``): ``nox -s tunix`` makes that environment and runs this file
(with TRACEINSPECT_TUNIX=require, so a broken install fails instead of skipping). Elsewhere
it skips: ``pytest -m 'not tunix'`` leaves it out by name.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

import pytest
from capture_helpers import SCRIPTS, framework_measure, read_sidecar

import traceinspect
from traceinspect.analysis.result import Analysis
from traceinspect.capture import CaptureOptions, run_capture

pytestmark = [pytest.mark.slow, pytest.mark.tunix]

LOOP = SCRIPTS / "tunix_loop.py"
STEPS = 300


@pytest.fixture(scope="module")
def measure() -> ModuleType:
    return framework_measure("tunix", ("tunix",))


def _capture(tmp_path: Path, flags: tuple[str, ...]) -> Analysis:
    """A default capture (no option but the log folder) of the loop, analysed."""
    command = [sys.executable, str(LOOP), *flags, "--steps", str(STEPS)]
    result = run_capture(command, CaptureOptions(logdir=str(tmp_path), quiet=True))
    assert result.exit_code == 0, result.summary()
    sidecar = read_sidecar(result)
    # Capture followed Tunix's own step annotation to a steady window. The trainer opens one
    # more annotation after its last step, to find it has reached max_steps.
    assert sidecar["step_source"] == "annotation", sidecar["step_source_detail"]
    assert STEPS <= sidecar["steps_seen"] <= STEPS + 1, sidecar["steps_seen"]
    window = sidecar["window"]
    assert window["rule"] == "steady" and window["complete"], window
    assert window["first_step"] > 0, window
    return traceinspect.analyze(traceinspect.load(result.run_dir, use_cache=False))


def test_cheap_input_is_device_bound(measure: ModuleType, tmp_path: Path) -> None:
    analysis = _capture(tmp_path, measure.CONFIGS["compute"])
    assert analysis.verdict == "device-bound", analysis.summary


def test_a_slow_tokenizer_on_one_worker_is_input_bound(measure: ModuleType, tmp_path: Path) -> None:
    analysis = _capture(tmp_path, measure.CONFIGS["slow-w1"])
    assert analysis.verdict == "input-bound", analysis.summary
