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

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

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
    done = subprocess.run(
        [python, str(SCRIPT), *flags, "--steps", str(steps), "--stats-json", "-"],
        capture_output=True,
        text=True,
        check=True,
    )
    line = next(t for t in reversed(done.stdout.splitlines()) if t.startswith("{"))
    starts = json.loads(line)["starts_s"][WARMUP:]
    return (starts[-1] - starts[0]) / (len(starts) - 1) * 1000.0


def measure(names: list[str], steps: int, repeats: int) -> dict[str, list[float]]:
    timed: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(repeats):
        for name in names:
            timed[name].append(step_ms(CONFIGS[name], steps))
    return timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated configurations (default: all)")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    names = args.only.split(",") if args.only else list(CONFIGS)
    timed = measure(names, args.steps, args.repeats)
    print("| configuration | flags | median ms | best ms | runs (ms) |")
    print("|---|---|---:|---:|---|")
    for name, ms in timed.items():
        runs = ", ".join(f"{m:.2f}" for m in ms)
        flags = " ".join(CONFIGS[name])
        print(f"| `{name}` | `{flags}` | {statistics.median(ms):.2f} | {min(ms):.2f} | {runs} |")


if __name__ == "__main__":
    main()
