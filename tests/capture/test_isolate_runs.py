"""``traceinspect isolate`` end to end on small scenario scripts: an input-bound loop, a loop
whose input costs nothing, and a phase bounded by its time limit."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from capture_helpers import REPO, TRAIN

from traceinspect.capture import run_phase
from traceinspect.isolate import TOLERANCE, phase_timing, run_isolate

pytestmark = pytest.mark.slow

SCENARIOS = REPO / "sample_traces" / "scenarios"
# 8 records per batch, each read waiting 2 ms on the training thread: ~17 ms per batch,
# against a tiny model's step well under 1 ms.
STAGES = [sys.executable, str(SCENARIOS / "stages" / "train_stages.py")]
SLOW_READS = [*STAGES, "--read-ms", "2", "--workers", "0", "--steps", "300"]
# The family's MLP with 12 hidden layers (~45 ms per step) on records from memory made by 2
# mp_prefetch workers: input costs the step little (measure_isolate.py's none_w2_deep; with
# the usual ~10 ms step the workers' own work is near the 20% tolerance, none_w2).
FREE_INPUT = [
    sys.executable,
    str(SCENARIOS / "family" / "train_family.py"),
    *("--record", "none", "--workers", "2", "--read-threads", "0", "--read", "none"),
    *("--hidden-layers", "12", "--steps", "300"),
]


def test_a_slow_pipeline_is_input_bound(tmp_path: Path) -> None:
    # One round: the loader's figure is twice the target's at the least.
    result = run_isolate(SLOW_READS, logdir=tmp_path, rounds=1)
    assert result.verdict == "input-bound", result.to_dict()
    # The loader alone pays every read: at least 8 x 2 ms per batch.
    assert result.loader_batch_ms >= 16.0
    assert result.loader_batch_ms > result.target_step_ms * TOLERANCE
    # The target repeats the first batch: none of the reads' 16 ms is in its step.
    assert result.target_step_ms < 8.0
    _target, loader, real = result.phases
    assert loader.step_source_detail == "batches drawn alone from grain PrefetchDatasetIterator"
    assert real.step_source_detail == "StepTraceAnnotation 'train'"  # the script's own
    assert {p.log_path for p in result.phases} == {
        str(tmp_path / f"{name}.log") for name in ("target", "loader", "real")
    }
    # The pipeline runs on the training thread (no read threads, no workers): the count
    # analyze's model gives, held to the cores (nothing measured the thread's CPU share).
    cores = result.evidence.cores
    assert result.evidence.workers == 0 and cores
    needed = math.ceil(result.loader_batch_ms * 1.25 / result.target_step_ms)
    assert result.suggested_workers == min(needed, cores)
    assert "(now 0" in result.reason and "MultiprocessingOptions(num_workers=" in result.reason


def test_a_loop_whose_input_costs_nothing_is_device_bound(tmp_path: Path) -> None:
    result = run_isolate(FREE_INPUT, logdir=tmp_path)
    assert result.verdict == "device-bound", result.to_dict()
    assert result.loader_batch_ms < result.target_step_ms
    assert result.evidence.host_reads_per_step == 0
    target, loader, real = result.phases
    for timing in (target, real):
        assert timing.how == "steady" and timing.count >= 20, timing
    # 364 batches of ~1 ms run out before the steady-state rule's blocks of 0.5 s: the
    # loader's figure is what it had, and says so.
    assert loader.how == "partial" and loader.count >= 100, loader
    assert loader.note is not None
    assert loader.note.startswith("the iterator ran out after 364 batches before a full window")
    # Each phase clocks the process's CPU over the steps it timed, whole window or not,
    # within what the cores give in that time; the 2 workers' CPU per batch is measured.
    cores = os.cpu_count() or 1
    for timing in (target, loader, real):
        assert timing.cpu_ms is not None, timing
        assert 0 < timing.cpu_ms <= timing.mean_ms * cores * 1.1, timing
    assert result.evidence.target_cpu_ms_per_step == target.cpu_ms
    assert result.evidence.host_cpu_ms_per_step == real.cpu_ms
    assert result.evidence.workers_cpu_ms_per_batch is not None


def test_a_stuck_phase_is_stopped_at_its_time_limit_and_uses_what_it_has(
    tmp_path: Path,
) -> None:
    # ~16 ms steps, then the loop hangs at step 60 (about 1 s in, before any window): the
    # runner stops the script 10 s after the phase's limit, and the figure is what the steps
    # gave. The limit leaves the script 6 s to reach its hang: importing jax takes 2-5 s on a
    # loaded 2-core machine, and a limit reached at a step boundary ends the phase there.
    command = [sys.executable, str(TRAIN), "--steps", "200", "--delay-ms", "2"]
    command += ["--hang-at", "60", "--marker", str(tmp_path / "marker")]
    run = run_phase(command, "real", timeout_s=6.0, log_path=tmp_path / "real.log")
    assert run.stopped and run.exit_signal == "SIGTERM" and run.elapsed_s < 6.0 + 10 + 15
    timing = phase_timing(run)
    assert timing.how == "partial" and timing.count >= 3
    # (A window the steady-state rule had not settled by 60% of the limit is said first.)
    assert timing.note is not None
    assert "the script was terminated (SIGTERM) before a full window" in timing.note


def test_the_cli_prints_the_three_figures_and_the_rule(tmp_path: Path) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "traceinspect",
            "isolate",
            "--rounds",
            "1",
            "--logdir",
            str(tmp_path),
            "--",
            *SLOW_READS,
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert [line.split()[0:2] for line in lines[:3]] == [
        ["target", "step"],
        ["loader", "batch"],
        ["real", "step"],
    ]
    assert any(line.startswith("Verdict  input-bound: ") for line in lines)
    assert any(line.startswith("Rule     loader > target x 1.20: ") for line in lines)
    assert "phase 1/3" not in out.stderr  # not a terminal: no progress
