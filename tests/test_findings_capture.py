"""The pipeline checks (analysis/findings.py) on real small scripts: ``traceinspect capture``
(real JAX on CPU, real Grain with mp_prefetch worker processes), then ``analyze``. Each check
fires on a script that has the problem and stays silent on one that does not.

The script is tests/capture/scripts/pipeline.py. Windows are fixed (``--skip-steps``): the
steady-state rule needs more steps than a test can afford on a loaded 2-core machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

import traceinspect
from traceinspect import sidecar as SC
from traceinspect.analysis.result import Finding

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
PIPELINE = REPO / "tests" / "capture" / "scripts" / "pipeline.py"


def _capture(
    logdir: Path,
    script_args: Sequence[str],
    *,
    skip_steps: int,
    steps: int,
    preexec_fn: Callable[[], None] | None = None,
) -> Path:
    """Capture pipeline.py as a user would (``traceinspect capture``, its own process, which
    ``preexec_fn`` may confine), and return the run directory."""
    command = [
        sys.executable,
        "-m",
        "traceinspect",
        "capture",
        "-q",
        "--logdir",
        str(logdir),
        "--skip-steps",
        str(skip_steps),
        "--steps",
        str(steps),
        "--",
        sys.executable,
        str(PIPELINE),
        *script_args,
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        command,
        check=False,
        env=env,
        preexec_fn=preexec_fn,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = (logdir / "plugins" / "profile").iterdir()
    return run_dir


def _analyze(run_dir: Path) -> tuple[list[Finding], dict[str, Any]]:
    analysis = traceinspect.analyze(traceinspect.load(run_dir))
    text = (run_dir / SC.FILE_NAME).read_text(encoding="utf-8")
    sidecar: dict[str, Any] = json.loads(text)
    return list(analysis.findings), sidecar


def _by_rule(findings: list[Finding], rule: str) -> list[Finding]:
    return [f for f in findings if f.rule == rule]


# -- workers_vs_cores ------------------------------------------------------------------------


def _one_core() -> Callable[[], None]:
    """A preexec_fn that confines the capture (and so the script and its workers) to one
    core, as ``taskset -c N`` would."""
    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("no os.sched_setaffinity on this platform")
    core = min(os.sched_getaffinity(0))
    return lambda: os.sched_setaffinity(0, {core})


def test_cpu_bound_workers_beyond_the_usable_cores(tmp_path: Path) -> None:
    # 2 workers, each batch 40 ms of CPU, on the one core the process may use; the device's
    # step is tiny, so the workers produce all the time (the first 16 steps drain the
    # batches made while step 0 compiled).
    run_dir = _capture(
        tmp_path,
        ["--steps", "44", "--workers", "2", "--cpu-ms", "40"],
        skip_steps=16,
        steps=24,
        preexec_fn=_one_core(),
    )
    findings, sidecar = _analyze(run_dir)

    assert sidecar["host"]["cpus_available"] == 1
    workers = sidecar["grain"]["workers_measured"]["workers"]
    assert len(workers) == 2 and all(w["cpu_wait_s"] is not None for w in workers)
    (f,) = _by_rule(findings, "workers_vs_cores")
    assert f.severity == "warning", f
    assert f.message.startswith("2 CPU-bound workers on 1 usable core"), f
    if (os.cpu_count() or 1) > 1:
        assert f"allows 1 of this machine's {os.cpu_count()}: taskset" in f.message, f
    # They queue for the core: each wants it most of the time it makes batches, which it
    # spends on it or waiting for it.
    assert "so they wait for one another and slow the training process" in f.message, f
    assert f.fix.startswith("Use at most 1 worker: more only queue for the same core."), f


def test_io_bound_workers_that_keep_up_on_one_core_are_silent(tmp_path: Path) -> None:
    # The same pipeline on the same one core, but its 2 workers wait 20 ms for each batch
    # (a read) instead of computing it, and keep up with a ~15 ms device step. The host
    # runs ahead of the device until the CPU client's queue of dispatches is full: the
    # window starts after 40 steps.
    run_dir = _capture(
        tmp_path,
        ["--steps", "70", "--workers", "2", "--wait-ms", "20", "--device-ms", "15"],
        skip_steps=40,
        steps=24,
        preexec_fn=_one_core(),
    )
    findings, sidecar = _analyze(run_dir)

    assert sidecar["host"]["cpus_available"] == 1
    assert sidecar["grain"]["workers_measured"] is not None
    assert _by_rule(findings, "workers_vs_cores") == [], findings
