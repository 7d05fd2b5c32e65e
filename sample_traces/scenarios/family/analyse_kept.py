"""Analyse again, with the code of this tree, the captures an ``apply_advice.py --keep`` run
kept, and set each recommendation's expected step against the step that run measured with
that advice applied: how a change to the analysis moves the figures the family's truth
judges, without capturing or timing again (the truth does not depend on the analysis).

A recommendation is compared only where the run timed the same advice (the same kind, and
for a worker count the same value); the others are listed as not timed. Run from the
repository root::

    python sample_traces/scenarios/family/analyse_kept.py RUN.json KEEP [RUN.json KEEP ...] \\
        --out two_causes-long-4-analysed.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path
from typing import Any

import traceinspect
from traceinspect.analysis.analyze import analyze

WITHIN = 0.20


def _commit() -> str:
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    )
    return done.stdout.strip() or "unknown"


def analysed(run: dict[str, Any], keep: Path) -> dict[str, Any]:
    """Each kept capture of ``run`` (an ``apply_advice.py`` record) analysed again."""
    out: dict[str, Any] = {}
    for name, entry in run["configs"].items():
        rows = []
        for i, cap in enumerate(entry.get("captures", [])):
            folder = keep / f"{name}-{i + 1}"
            if not folder.exists():
                continue
            timed = {
                (a["advice"], a.get("value")): a["applied_step_ms"] for a in cap.get("all", [])
            }
            a = analyze(traceinspect.load(folder))
            advice = []
            for r in a.recommendations:
                if r.expected_step_ms is None:
                    continue
                measured = timed.get((r.kind, r.value))
                row: dict[str, Any] = {
                    "advice": r.kind,
                    "value": r.value,
                    "expected_step_ms": r.expected_step_ms,
                    "applied_step_ms": measured,
                }
                if measured is not None:
                    off = round(measured / r.expected_step_ms - 1, 3)
                    row.update(off_by=off, holds=abs(off) <= WITHIN)
                advice.append(row)
            rows.append({"capture": i + 1, "verdict": a.verdict, "advice": advice})
        out[name] = {"step_ms": entry.get("step_ms"), "captures": rows}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pairs", nargs="+", help="RUN.json KEEP, repeated")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if len(args.pairs) % 2:
        parser.error("give each RUN.json with its KEEP folder")
    record: dict[str, Any] = {"analysed_at": _commit(), "runs": []}
    for run_path, keep in zip(args.pairs[::2], args.pairs[1::2], strict=True):
        run = json.loads(Path(run_path).read_text(encoding="utf-8"))
        configs = analysed(run, Path(keep))
        record["runs"].append(
            {"run": Path(run_path).name, "stack": run.get("stack"), "configs": configs}
        )
        for name, entry in configs.items():
            for cap in entry["captures"]:
                figures = "; ".join(
                    f"{r['advice']} {r['expected_step_ms']:.2f}/"
                    + (
                        f"{r['applied_step_ms']:.2f} {r['off_by']:+.1%}"
                        if "off_by" in r
                        else "not timed"
                    )
                    for r in cap["advice"]
                )
                print(f"{Path(run_path).name} {name} {cap['capture']}: {cap['verdict']}: {figures}")
    args.out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
