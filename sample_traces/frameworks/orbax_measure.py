"""The Flax NNX + Orbax loop's step time without any profiler: configurations run interleaved,
the median and best of N runs each.

Each run is ``tests/capture/scripts/nnx_orbax_loop.py --stats-json -`` in a process of its
own; its step time is the mean host step (start to start) after WARMUP steps, to the device
(and any checkpoint write) finishing the last step: a checkpoint every 10 steps is in it.
Runs of one configuration are interleaved with the others' (a run on a shared machine is
only ever slowed by others); the table gives each configuration's median and best run.

    python sample_traces/frameworks/orbax_measure.py --repeats 3
    python sample_traces/frameworks/orbax_measure.py --only sync,async,none --repeats 3
"""

from __future__ import annotations

import sys
from pathlib import Path

# The shared timing module beside this file (this one may be loaded by path, as the
# tests do).
sys.path.insert(0, str(Path(__file__).resolve().parent))
import frameworks_timing as timing

SCRIPT = Path(__file__).resolve().parents[2] / "tests" / "capture" / "scripts" / "nnx_orbax_loop.py"
WARMUP = 30
# The checkpoint-heavy model: 256 -> 1536 -> 4 x 1536 -> 10 (39 MB of parameters in 12
# arrays), one row a record: a synchronous save costs several steps; an asynchronous one
# holds the loop for Orbax's own Python (~10-20 ms), a few percent of 10 steps.
HEAVY = ("--hidden", "1536", "--layers", "4", "--batch", "8")
# The compute-heavy step: 512 rows (64 a record) through 256 -> 512 -> 2 x 512 -> 10.
COMPUTE = ("--hidden", "512", "--batch", "512")
# name -> the loop's flags
CONFIGS: dict[str, tuple[str, ...]] = {
    # (a) The heavy model saved synchronously every 10 steps: the loop waits for each write.
    "sync": (*HEAVY, "--checkpoint", "sync"),
    # The same with the metrics computed at every save (``metrics.compute()`` and reset
    # every 10 steps): a checkpoint still, not an evaluation.
    "sync-metrics": (*HEAVY, "--checkpoint", "sync", "--metrics-every", "10"),
    # (b) The same saved asynchronously: the write runs beside the next steps.
    "async": (*HEAVY, "--checkpoint", "async"),
    # The same without checkpoints, and its device's step alone (one prebuilt batch).
    "none": (*HEAVY, "--checkpoint", "none"),
    "heavy-device": (*HEAVY, "--prebuilt"),
    # (c) The compute-heavy step on cheap input, not checkpointed (saved asynchronously, its
    # background writes starve beside XLA's two threads and hold the loop: see
    # orbax_MEASUREMENTS.md); and its device's step alone.
    "compute": (*COMPUTE, "--checkpoint", "none"),
    "compute-device": (*COMPUTE, "--prebuilt"),
    # (d) The default model (128 rows, 512 wide, ~2.6 MB saved asynchronously) on a slow
    # Python map (60 passes over 2,048 values a record, ~4 ms of one core), 1 worker; 2 and
    # 4 workers, cheap input and the device's step alone show what the input costs.
    "slow-w1": ("--map-passes", "60", "--workers", "1", "--checkpoint", "async"),
    "slow-w2": ("--map-passes", "60", "--workers", "2", "--checkpoint", "async"),
    "slow-w4": ("--map-passes", "60", "--workers", "4", "--checkpoint", "async"),
    "cheap-w1": ("--map-passes", "0", "--workers", "1", "--checkpoint", "async"),
    "small-device": ("--prebuilt",),
}


def step_ms(flags: tuple[str, ...], steps: int, python: str = sys.executable) -> float:
    """One run's mean step time in ms, after the warm-up."""
    return timing.step_ms(SCRIPT, flags, steps, WARMUP, python)


def measure(names: list[str], steps: int, repeats: int) -> dict[str, list[float]]:
    return timing.measure(SCRIPT, CONFIGS, names, steps, repeats, WARMUP)


knee = timing.knee


if __name__ == "__main__":
    timing.main(SCRIPT, CONFIGS, WARMUP, __doc__ or "")
