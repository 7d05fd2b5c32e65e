"""Grain's JAX tutorial loop under default captures, against its steps timed without the
profiler (issue 48's tutorial family; issue 46's "the worker advice, applied and captured
again, never reverses itself by more than one worker").

The loop is ``tests/capture/scripts/grain_tutorial_loop.py`` (an in-memory source, a Python
``map``, Grain's default read threads, ``grain.experimental.device_put``, a jitted step).
Per repeat, interleaved: the loop timed without the profiler at 0 to ``--max-workers``
workers; a default capture at 0 workers, analysed (its verdict and worker advice); and a
default capture at the count that advice names, analysed again (its verdict and advice).
Prints one JSON document:

    python sample_traces/frameworks/grain_tutorial.py --repeats 3 --json grain_tutorial-3.11.json
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
LOOP = REPO / "tests" / "capture" / "scripts" / "grain_tutorial_loop.py"
STEPS = 300


def timed(workers: int) -> float:
    """The loop's ms per step at ``workers``, without the profiler."""
    out = subprocess.run(
        [sys.executable, str(LOOP), str(workers), str(STEPS)],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    found = re.search(r"done: ([0-9.]+) ms/step", out)
    assert found is not None, out
    return float(found.group(1))


def captured(workers: int) -> dict[str, Any]:
    """A default capture at ``workers``, analysed: verdict, deciding cause, worker advice."""
    with tempfile.TemporaryDirectory() as logdir:
        subprocess.run(
            ["traceinspect", "capture", "--logdir", logdir, "-q", "--", sys.executable,
             str(LOOP), str(workers), str(STEPS)],
            check=True, capture_output=True,
        )  # fmt: skip
        out = subprocess.run(
            ["traceinspect", "analyze", logdir, "--json"], check=True, capture_output=True
        ).stdout
    analysis = json.loads(out)
    rec = next((r for r in analysis["recommendations"] if r["kind"] == "grain_worker_count"), {})
    return {
        "workers": workers,
        "verdict": analysis["verdict"],
        "decided_by": (analysis.get("decided_by") or {}).get("cause"),
        "advised_workers": rec.get("value"),
        "expected_step_ms": rec.get("expected_step_ms"),
        "machine_load": analysis.get("machine_load"),
        "loop_code_blamed": any(
            line.startswith("the loop's own code")
            for gap in analysis["gaps"]
            for line in gap["evidence"]
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-workers", type=int, default=4)
    parser.add_argument("--json", help="write the results here too")
    args = parser.parse_args()
    timings: dict[int, list[float]] = {w: [] for w in range(args.max_workers + 1)}
    rounds: list[dict[str, Any]] = []
    for _ in range(args.repeats):
        for w, times in timings.items():
            times.append(timed(w))
        first = captured(0)
        advised = first["advised_workers"]
        again = captured(advised) if advised else None
        rounds.append({"at_0": first, "at_advised": again})
        print(json.dumps(rounds[-1]), {w: t[-1] for w, t in timings.items()}, flush=True)
    text = json.dumps(
        {"python": sys.version.split()[0], "timed_ms": timings, "rounds": rounds}, indent=1
    )
    if args.json:
        Path(args.json).write_text(text + "\n", encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
