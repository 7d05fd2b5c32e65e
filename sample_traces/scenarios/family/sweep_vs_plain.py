"""``traceinspect sweep``'s untraced figure for one count against a plain run of the same
loop, run by run: what timing a count under ``traceinspect capture`` (its steps after the
trace window) adds to the step a run without it has.

Each round, for each count: one plain run (the mean host step from step 60 to the drained
end, as ``apply_advice.py``'s truth) and one single-count sweep (``--retime 0``); one JSON
line each. Run from the repository root, on a quiet machine::

    python sample_traces/scenarios/family/sweep_vs_plain.py --counts 3,4 --rounds 3 \\
        --record slow --read-threads 1 --read float
"""

from __future__ import annotations

import argparse
import json

from apply_advice import STEPS, SWEEP_STEPS, run_tool
from family_runs import truth_ms


def sweep_figures(loop: list[str], workers: int) -> dict[str, float | int | None]:
    """One single-count sweep's untraced figure (ms), how many steps it timed, and the
    traced window's mean step (ms)."""
    flags = ["--worker-counts", str(workers), "--retime", "0"]
    swept = run_tool("sweep", flags, [*loop, "--workers", "{workers}"], None, "", SWEEP_STEPS)
    if "runs" not in swept:
        raise RuntimeError(f"traceinspect sweep failed: {swept.get('verdict')}")
    (run,) = swept["runs"]
    return {
        "sweep_untraced_ms": run.get("untraced_step_ms"),
        "untraced_steps": run.get("untraced_steps"),
        "traced_mean_ms": run.get("mean_step_ms"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", default="3,4", help="worker counts, comma-separated")
    parser.add_argument("--rounds", type=int, default=3)
    args, loop = parser.parse_known_args()
    for _ in range(args.rounds):
        for workers in (int(c) for c in args.counts.split(",")):
            plain = truth_ms([*loop, "--workers", str(workers)], STEPS)
            row = {"workers": workers, "plain_ms": round(plain, 3)}
            row.update(sweep_figures(loop, workers))
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
