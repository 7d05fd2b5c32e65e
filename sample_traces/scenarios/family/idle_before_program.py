"""Does the device's program run slower when the host pauses before dispatching it?

The family's ``read_wait`` loop (``--read float``, batches made on the training thread,
``--host-wait-ms 4``) loses more than its wait: removing a 4 ms ``time.sleep`` takes its step
from ~19-21 ms to ~12 ms. This script times the phases of that loop, without the profiler:
``next()``, the pause, the dispatch and the read of the loss (which waits for the program:
the program's time once dispatched), with a pause of 0, 4 and 8 ms of sleep, 4 ms of CPU
(``burn_cpu``), and the same with one batch fed again and again (no fresh data: whatever
slows the program then is not the batch). Run from the repository root::

    python sample_traces/scenarios/family/idle_before_program.py \\
        --out sample_traces/scenarios/family/idle_before_program-3.11.json

Each figure is the mean over steps 60 to the end of one run of ``--steps`` steps; each pause
is run ``--repeats`` times, in turn.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import jax
from absl import flags

sys.path.insert(0, str(Path(__file__).resolve().parent))
import train_family as T

WARMUP = 60
PHASES = ("next", "pause", "dispatch", "read", "step")
PAUSES: dict[str, tuple[str, float]] = {
    "none": ("sleep", 0.0),
    "sleep 4 ms": ("sleep", 4.0),
    "sleep 8 ms": ("sleep", 8.0),
    "CPU 4 ms": ("cpu", 4.0),
}


def run(kind: str, ms: float, steps: int, same_batch: bool) -> dict[str, float]:
    """One run of the loop: each phase's mean time (ms) over steps WARMUP to the end."""
    params = T.init_params(T.HIDDEN_LAYERS)
    it = iter(T.make_dataset("light", 0, 0, steps))
    train_step = T.make_train_step(0, 0.0)
    first = None
    times: dict[str, list[float]] = {p: [] for p in PHASES}
    for step in range(steps):
        t0 = time.perf_counter()
        batch = next(it)
        if same_batch:
            first = first or batch
            batch = first
        t1 = time.perf_counter()
        if kind == "sleep" and ms:
            time.sleep(ms / 1000.0)
        elif kind == "cpu" and ms:
            T.burn_cpu(ms / 1000.0)
        t2 = time.perf_counter()
        params, loss = train_step(params, batch["x"], batch["y"])
        t3 = time.perf_counter()
        float(loss)
        t4 = time.perf_counter()
        if step >= WARMUP:
            for phase, a, b in zip(PHASES, (t0, t1, t2, t3, t0), (t1, t2, t3, t4, t4), strict=True):
                times[phase].append((b - a) * 1000.0)
    return {p: round(statistics.mean(v), 3) for p, v in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    flags.FLAGS.mark_as_parsed()
    runs: list[dict[str, Any]] = []
    for repeat in range(args.repeats):
        for same_batch in (False, True):
            for name, (kind, ms) in PAUSES.items():
                got = run(kind, ms, args.steps, same_batch)
                runs.append(
                    {"repeat": repeat, "before_dispatch": name, "same_batch": same_batch, **got}
                )
                print(json.dumps(runs[-1]), flush=True)
    record = {
        "stack": {"python": platform.python_version(), "jax": jax.__version__},
        "figure": f"mean ms per step from step {WARMUP}, one run of {args.steps} steps each",
        "runs": runs,
    }
    args.out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
