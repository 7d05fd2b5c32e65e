"""The Flax NNX loop's step time without any profiler: configurations run interleaved, best of N.

Each run is ``tests/capture/scripts/flax_nnx_loop.py --stats-json -`` in a process of its
own; its step time is the mean host step (start to start) after WARMUP steps, to the device
finishing the last step. Runs of one configuration are interleaved with the others' (a run
on a shared machine is only ever slowed by others), and the best of the repeats is kept.

    python sample_traces/frameworks/flax_measure.py --repeats 3
    python sample_traces/frameworks/flax_measure.py --only slow-w1,slow-w2 --repeats 2
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "tests" / "capture" / "scripts" / "flax_nnx_loop.py"
WARMUP = 30
# name -> the loop's flags
CONFIGS: dict[str, tuple[str, ...]] = {
    # Cheap input (records from memory) on one worker: the device's step.
    "cheap-w1": ("--input-ms", "0", "--workers", "1"),
    # 5 ms of waiting a record, 40 ms a batch: slower than the step on one worker.
    "slow-w1": ("--input-ms", "5", "--workers", "1"),
    "slow-w2": ("--input-ms", "5", "--workers", "2"),
    "slow-w3": ("--input-ms", "5", "--workers", "3"),
    "slow-w4": ("--input-ms", "5", "--workers", "4"),
    # float(loss) every step, light batches (0.6 ms a record, ~5 ms a batch) made inside
    # next(): after the read the device waits for them; without it they overlap its work.
    "read": ("--input-ms", "0.6", "--workers", "0", "--read-threads", "0", "--read-loss"),
    "noread": ("--input-ms", "0.6", "--workers", "0", "--read-threads", "0"),
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


def knee(best_ms: dict[int, float], within: float = 0.10) -> int:
    """The smallest worker count whose step is within ``within`` of the best."""
    best = min(best_ms.values())
    return min(w for w, ms in best_ms.items() if ms <= best * (1 + within))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated configurations (default: all)")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    names = args.only.split(",") if args.only else list(CONFIGS)
    timed = measure(names, args.steps, args.repeats)
    print("| configuration | flags | best ms | runs (ms) |")
    print("|---|---|---:|---|")
    for name, ms in timed.items():
        runs = ", ".join(f"{m:.2f}" for m in ms)
        print(f"| `{name}` | `{' '.join(CONFIGS[name])}` | {min(ms):.2f} | {runs} |")


if __name__ == "__main__":
    main()
