"""Check the stage breakdown of ``traceinspect analyze`` against each stage's true cost.

For a read-dominated pipeline (2 ms wait per record in the source, 0.5 ms of CPU in the map)
and a preprocessing-dominated one (0.2 ms wait, 2 ms of CPU), with 0, 1 and 2 ``mp_prefetch``
workers, three times each: the truth is each stage's time per batch timed directly around
the source and the map, alone in a process (``train_stages.py --calibrate``: no Grain, no
profiler); the measurement is a default ``traceinspect capture`` (no flags) then
``traceinspect analyze --json``. Prints one row per run and the worst ratio measured/truth
per stage, and writes ``measurements.json`` beside this file with ``--write``::

    python sample_traces/scenarios/stages/measure_stages.py [--repeats 3] [--write]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "train_stages.py"
PIPELINES = {"read": (2.0, 0.5), "preprocessing": (0.2, 2.0)}  # (read ms, map CPU ms) / record
WORKERS = (0, 1, 2)
RECORDS_PER_BATCH = 8  # train_stages.py's
STEPS = 240


def _args(pipeline: str, workers: int) -> list[str]:
    read_ms, cpu_ms = PIPELINES[pipeline]
    return [
        str(SCRIPT),
        "--read-ms",
        str(read_ms),
        "--map-cpu-ms",
        str(cpu_ms),
        "--workers",
        str(workers),
        "--steps",
        str(STEPS),
    ]


def truth(pipeline: str) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, *_args(pipeline, 0), "--calibrate"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return result


def measure(pipeline: str, workers: int) -> tuple[dict[str, Any], dict[str, float]]:
    """The analysis of a default capture, and the run's own timing of its stages over the
    traced window (ms per batch: the mean wall time of the reads and of the maps that
    started inside the window, over every process, times 8)."""
    with tempfile.TemporaryDirectory() as tmp:
        logdir, times = Path(tmp, "logs"), Path(tmp, "times")
        times.mkdir()
        capture = ["traceinspect", "capture", "--logdir", str(logdir), "--"]
        subprocess.run(
            [*capture, sys.executable, *_args(pipeline, workers)],
            check=True,
            capture_output=True,
            env={**os.environ, "TRAIN_STAGES_TIMES": str(times)},
        )
        counts = [json.loads(p.read_text()) for p in times.glob("*.json")]
        (sidecar,) = logdir.glob("plugins/profile/*/traceinspect.capture.json")
        window = json.loads(sidecar.read_text())["window"]
        lo, hi = window["trace_start_unix_ns"], window["trace_stop_unix_ns"]
        out = subprocess.run(
            ["traceinspect", "analyze", str(logdir), "--json"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    analysis: dict[str, Any] = json.loads(out)
    in_run = {}
    for stage, kind in (("read", "read"), ("preprocessing", "map")):
        calls = [ns for c in counts for at, ns in c[kind] if lo <= at < hi]
        in_run[stage] = sum(calls) / max(1, len(calls)) * RECORDS_PER_BATCH / 1e6
    return analysis, in_run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--write", action="store_true", help="write measurements.json")
    args = parser.parse_args()
    rows = []
    for pipeline in PIPELINES:
        true = truth(pipeline)
        for workers in WORKERS:
            for run in range(args.repeats):
                a, in_run = measure(pipeline, workers)
                st = a["input_stages"]
                row = {
                    "pipeline": pipeline,
                    "workers": workers,
                    "run": run,
                    "verdict": a["verdict"],
                    "dominant": st["dominant"] if st else None,
                    "truth_ms": {k.removesuffix("_ms"): round(v, 3) for k, v in true.items()},
                    "in_run_ms": {k: round(v, 3) for k, v in in_run.items()},
                    "measured_ms": st["ms_per_batch"] if st else None,
                    "where": st["where"] if st else None,
                }
                rows.append(row)
                m = row["measured_ms"] or {}
                ratios = "  ".join(
                    f"{s} {m.get(s, float('nan')):6.2f} (alone {t:6.2f}, in run "
                    f"{in_run[s]:6.2f}) ms"
                    for s, t in row["truth_ms"].items()
                )
                print(
                    f"{pipeline:>13} w{workers} #{run}: {row['verdict']:<12} "
                    f"dominant {row['dominant']!s:<13} {ratios}",
                    flush=True,
                )
    right = sum(r["dominant"] == r["pipeline"] for r in rows)
    print(f"dominant stage right in {right} of {len(rows)} runs")
    for truth_key in ("truth_ms", "in_run_ms"):
        for dominant in (True, False):
            offs = [
                (r["measured_ms"] or {}).get(stage, float("nan")) / t - 1
                for r in rows
                for stage, t in r[truth_key].items()
                if t > 0 and (stage == r["pipeline"]) == dominant
            ]
            which = "the dominant stage" if dominant else "the other stage"
            print(
                f"{which} against its {truth_key.removesuffix('_ms')} time: "
                f"{min(offs):+.1%} to {max(offs):+.1%}"
            )
    if args.write:
        (HERE / "measurements.json").write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
