"""The truth behind tests/capture/test_stalls_by_kind.py, timed without any profiler.

Runs the family's loop (``train_family.py``, light records at 2 workers) with each habit that
stalls every N steps (remote logging, ``gc.collect()``, a new iterator every epoch, an
evaluation scored on the host) and without any, ``--repeats`` times each, interleaved, and
prints per configuration: the mean step (after the first 10), the period the slow steps
recur at (the most common spacing between steps over 3x the mean step) and a slow
step's time above the median. With ``--captures``, it also captures each habit with
``traceinspect capture`` (default options) and prints what ``analyze`` named: the stall's
kind, its period and the expected step without it.

    python sample_traces/scenarios/family/stall_kinds.py --repeats 3 --captures --json out.json
    python sample_traces/scenarios/family/stall_kinds.py --habits gc --repeats 10 --captures
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
LOOP = HERE / "train_family.py"
BASE = ["--record", "light", "--workers", "2", "--steps", "240"]
HABITS: dict[str, list[str]] = {
    "none": [],
    "logging": ["--log-every", "10", "--log-ms", "60"],
    "gc": ["--gc-every", "12"],
    "epoch": ["--epoch-steps", "40"],
    "evaluation": ["--eval-every", "20", "--eval-batches", "5", "--eval-score-host"],
}


def timed(habit: str) -> dict[str, float | int | None]:
    """One run without the profiler: its mean step, the stalls' period and cost."""
    out = subprocess.run(
        [sys.executable, str(LOOP), *BASE, *HABITS[habit], "--stats-json", "-"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    starts = json.loads(out.strip().splitlines()[-1])["starts_s"]
    steps = np.diff(np.array(starts)) * 1000.0
    steady = steps[10:]
    median = float(np.median(steady))
    # Slow steps: 3 times the mean (the loop runs ahead of the device, so most of its steps
    # take only their dispatch, far below the mean; a stall stands above both).
    slow = np.flatnonzero(steady > 3 * float(steady.mean())) + 10
    spacing = Counter(np.diff(slow).tolist()).most_common(1)
    return {
        "mean_ms": round(float(steady.mean()), 3),
        "median_ms": round(median, 3),
        "period": int(spacing[0][0]) if spacing else None,
        "cost_ms": round(float(np.median(steps[slow] - median)), 1) if len(slow) else None,
    }


def captured(habit: str) -> dict[str, Any]:
    """A default capture of the habit, analysed: the stall's kind, period and expected step."""
    with tempfile.TemporaryDirectory() as logdir:
        subprocess.run(
            ["traceinspect", "capture", "--logdir", logdir, "-q", "--", sys.executable,
             str(LOOP), *BASE, *HABITS[habit]],
            check=True, capture_output=True,
        )  # fmt: skip
        out = subprocess.run(
            ["traceinspect", "analyze", logdir, "--json"], check=True, capture_output=True
        ).stdout
    analysis = json.loads(out)
    stall = analysis.get("recurring_stall") or {}
    rec = next((r for r in analysis["recommendations"] if r["kind"] == "recurring_stall"), {})
    return {
        "verdict": analysis["verdict"],
        "what": stall.get("what"),
        "period": stall.get("period_steps"),
        "cost_ms": stall.get("cost_ms"),
        "expected_step_ms": rec.get("expected_step_ms"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--captures", action="store_true")
    parser.add_argument("--json", help="write the results here too")
    parser.add_argument(
        "--habits", nargs="+", choices=list(HABITS), default=list(HABITS),
        help="only these habits (default: all, and the loop without any)",
    )  # fmt: skip
    args = parser.parse_args()
    habits: list[str] = args.habits
    results: dict[str, dict[str, list[Any]]] = {h: {"timed": [], "captured": []} for h in habits}
    for _ in range(args.repeats):
        for habit in habits:
            results[habit]["timed"].append(timed(habit))
            if args.captures and habit != "none":
                results[habit]["captured"].append(captured(habit))
            print(habit, results[habit]["timed"][-1], results[habit]["captured"][-1:], flush=True)
    text = json.dumps({"python": sys.version.split()[0], "results": results}, indent=1)
    if args.json:
        Path(args.json).write_text(text + "\n", encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
