"""The Flax NNX loop's step time without any profiler: configurations run interleaved, best of N.

Each run is ``tests/capture/scripts/flax_nnx_loop.py --stats-json -`` in a process of its
own; its step time is the mean host step (start to start) after WARMUP steps, to the device
finishing the last step. Runs of one configuration are interleaved with the others' (a run
on a shared machine is only ever slowed by others), and the best of the repeats is kept.

    python sample_traces/frameworks/flax_measure.py --repeats 3
    python sample_traces/frameworks/flax_measure.py --only slow-w1,slow-w2 --repeats 2
"""

from __future__ import annotations

import sys
from pathlib import Path

# The shared timing module beside this file (this one may be loaded by path, as the
# tests do).
sys.path.insert(0, str(Path(__file__).resolve().parent))
import frameworks_timing as timing

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
    return timing.step_ms(SCRIPT, flags, steps, WARMUP, python)


def measure(names: list[str], steps: int, repeats: int) -> dict[str, list[float]]:
    return timing.measure(SCRIPT, CONFIGS, names, steps, repeats, WARMUP)


knee = timing.knee


if __name__ == "__main__":
    timing.main(SCRIPT, CONFIGS, WARMUP, __doc__ or "")
