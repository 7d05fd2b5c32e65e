"""Timing a framework loop's configurations without the profiler, shared by
``flax_measure.py``, ``orbax_measure.py`` and ``tunix_measure.py``: each loop prints its
step start times (``--stats-json -``), and a configuration's step time is the mean host step
(start to start) after the warm-up."""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

Configs = Mapping[str, tuple[str, ...]]


def step_ms(
    script: Path, flags: tuple[str, ...], steps: int, warmup: int, python: str = sys.executable
) -> float:
    """One run's mean step time in ms, after ``warmup`` steps."""
    done = subprocess.run(
        [python, str(script), *flags, "--steps", str(steps), "--stats-json", "-"],
        capture_output=True,
        text=True,
        check=True,
    )
    line = next(t for t in reversed(done.stdout.splitlines()) if t.startswith("{"))
    starts = json.loads(line)["starts_s"][warmup:]
    return (starts[-1] - starts[0]) / (len(starts) - 1) * 1000.0


def measure(
    script: Path, configs: Configs, names: list[str], steps: int, repeats: int, warmup: int
) -> dict[str, list[float]]:
    """Each configuration's step times, ``repeats`` runs each, interleaved."""
    timed: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(repeats):
        for name in names:
            timed[name].append(step_ms(script, configs[name], steps, warmup))
    return timed


def knee(best_ms: dict[int, float], within: float = 0.10) -> int:
    """The smallest worker count whose step is within ``within`` of the best."""
    best = min(best_ms.values())
    return min(w for w, ms in best_ms.items() if ms <= best * (1 + within))


def main(script: Path, configs: Configs, warmup: int, doc: str) -> None:
    """The command line of a measure script: time the configurations, print a table."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--only", help="comma-separated configurations (default: all)")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    names = args.only.split(",") if args.only else list(configs)
    timed = measure(script, configs, names, args.steps, args.repeats, warmup)
    print("| configuration | flags | median ms | best ms | runs (ms) |")
    print("|---|---|---:|---:|---|")
    for name, ms in timed.items():
        runs = ", ".join(f"{m:.2f}" for m in ms)
        flags = " ".join(configs[name])
        print(f"| `{name}` | `{flags}` | {statistics.median(ms):.2f} | {min(ms):.2f} | {runs} |")
