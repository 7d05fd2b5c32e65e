"""Tunix's PeftTrainer loop's step time without any profiler: configurations run interleaved,
the median and best of N runs each.

Each run is ``tests/capture/scripts/tunix_loop.py --stats-json -`` in a process of its own;
its step time is the mean host step (start to start, stamped by a training hook) after
WARMUP steps, to the end of training (the trainer has every step's loss then). Runs of one
configuration are interleaved with the others' (a run on a shared machine is only ever
slowed by others); the table gives each configuration's median and best run.

    python sample_traces/frameworks/tunix_measure.py --repeats 3
"""

from __future__ import annotations

import sys
from pathlib import Path

# The shared timing module beside this file (this one may be loaded by path, as the
# tests do).
sys.path.insert(0, str(Path(__file__).resolve().parent))
import frameworks_timing as timing

SCRIPT = Path(__file__).resolve().parents[2] / "tests" / "capture" / "scripts" / "tunix_loop.py"
WARMUP = 30
# A slow tokenizer: 1,000 pure-Python passes over a record's ~85 characters, ~5 ms of one
# core a record, ~90 ms a batch of 16: several device steps.
SLOW = ("--tokenize-passes", "1000")
# name -> the loop's flags (the model: 2 blocks 128 wide, 16 sequences of 64 tokens a batch)
CONFIGS: dict[str, tuple[str, ...]] = {
    # Cheap input (records tokenized once) on one worker: the device's step.
    "compute": ("--workers", "1"),
    # The device's step alone: one batch given again every step.
    "device": ("--prebuilt",),
    # The slow tokenizer on 1, 2 and 4 workers.
    "slow-w1": (*SLOW, "--workers", "1"),
    "slow-w2": (*SLOW, "--workers", "2"),
    "slow-w4": (*SLOW, "--workers", "4"),
}


def step_ms(flags: tuple[str, ...], steps: int, python: str = sys.executable) -> float:
    """One run's mean step time in ms, after the warm-up."""
    return timing.step_ms(SCRIPT, flags, steps, WARMUP, python)


def measure(names: list[str], steps: int, repeats: int) -> dict[str, list[float]]:
    return timing.measure(SCRIPT, CONFIGS, names, steps, repeats, WARMUP)


knee = timing.knee


if __name__ == "__main__":
    timing.main(SCRIPT, CONFIGS, WARMUP, __doc__ or "")
