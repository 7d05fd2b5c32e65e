"""Grain's JAX tutorial loop timed without the profiler, block by block: how its step
changes over a run with the worker count and the read threads (issue 46's worker count;
``grain_tutorial_MEASUREMENTS.md``, "Phases").

The loop is ``tests/capture/scripts/grain_tutorial_loop.py``; each run prints the mean step
of each block of 100 steps. Runs interleave the settings, ``--repeats`` times each.
Prints one JSON line per run and one JSON document at the end:

    python sample_traces/frameworks/grain_tutorial_phases.py --repeats 2 \
        --json grain_tutorial_phases-3.11.json
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
LOOP = REPO / "tests" / "capture" / "scripts" / "grain_tutorial_loop.py"
STEPS = 900
# (workers, read threads); None: Grain's default read threads (16).
SETTINGS: list[tuple[int, int | None]] = [
    (0, None),
    (1, None),
    (2, None),
    (3, None),
    (0, 2),
    (2, 2),
    (0, 1),
    (2, 1),
]


def phases(workers: int, read_threads: int | None) -> list[float]:
    """The loop's mean step per block of 100 steps (ms), the first block with its start."""
    args = [str(workers), str(STEPS)] + ([] if read_threads is None else [str(read_threads)])
    out = subprocess.run(
        [sys.executable, str(LOOP), *args], capture_output=True, text=True, check=True
    ).stdout
    found = re.search(r"^phases: (.*) \(ms a step", out, re.MULTILINE)
    if found is None:
        raise SystemExit(f"no phases line in the loop's output:\n{out}")
    return [float(v) for v in found.group(1).split()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json", help="write the results here too")
    args = parser.parse_args()
    runs: list[dict[str, Any]] = []
    for _ in range(args.repeats):
        for workers, threads in SETTINGS:
            timed = phases(workers, threads)
            run = {"workers": workers, "read_threads": threads, "phases_ms": timed}
            runs.append(run)
            print(json.dumps(run), flush=True)
    text = json.dumps({"python": sys.version.split()[0], "steps": STEPS, "runs": runs}, indent=1)
    if args.json:
        Path(args.json).write_text(text + "\n", encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
