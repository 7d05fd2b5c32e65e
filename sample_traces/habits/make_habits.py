"""Time the loop habits without the profiler, then judge default captures of them.

The scenario family's loop (``scenarios/family/train_family.py``) on a light Grain pipeline
(2 workers, far faster than the step) with one habit each: synchronous checkpoints at two
periods (one longer than the default 20-step window) and a rare cheap one, the loop's own
waiting and CPU work, a host callback, an evaluation every 20 steps, and per-step reads in four
spellings.
Run from the repository root, on a quiet machine::

    python sample_traces/habits/make_habits.py --out sample_traces/habits/verify-3.11.json

For each configuration: its step time and its fix's (the same loop without the habit) without
the profiler, best of ``--truth`` runs, interleaved; the label the truth says (:func:`label`:
the habit's cause when it slows the loop by more than 5% and by more than the repeated runs
of either scatter, device-bound when by less than 5%, "unresolved" between the two: a
difference the truth cannot tell from noise judges no capture); then ``--repeats`` default
captures (no option but the log folder), each analysed: verdict, the recurring stall found,
and the first recommendation's expected step time against the fix's measured step.

``--relabel FILE`` reads a record this wrote, adds ``--truth`` more interleaved runs of the
configurations named (and their fixes), and judges its captures again.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "sample_traces" / "scenarios" / "family"))
import family_runs  # noqa: E402
from family_runs import WARMUP, truth_ms  # noqa: E402

LIGHT = ["--record", "light", "--workers", "2"]
MATTERS = 0.05


def read_w0(read: str) -> list[str]:
    return ["--record", "light", "--read", read, "--workers", "0", "--read-threads", "0"]


# name -> (arguments, the habit's verdict when it matters, the fix: the loop without it)
CONFIGS: dict[str, tuple[list[str], str, str]] = {
    "checkpoint25": ([*LIGHT, "--checkpoint-every", "25"], "host-bound", "healthy"),
    "checkpoint60": ([*LIGHT, "--checkpoint-every", "60"], "host-bound", "healthy"),
    "checkpoint_rare": (
        [*LIGHT, "--checkpoint-every", "100", "--checkpoint-ms", "20"],
        "host-bound",
        "healthy",
    ),
    "host_wait14": ([*LIGHT, "--host-wait-ms", "14"], "host-bound", "healthy"),
    "host_cpu10": ([*LIGHT, "--host-cpu-ms", "10"], "host-bound", "healthy"),
    "callback6": ([*LIGHT, "--callback-ms", "6"], "host-bound", "healthy"),
    "eval20": ([*LIGHT, "--eval-every", "20"], "device-bound", "healthy"),
    "read_float_w0": (read_w0("float"), "sync-bound", "read_none_w0"),
    "read_item_w0": (read_w0("item"), "sync-bound", "read_none_w0"),
    "read_device_get_w0": (read_w0("device_get"), "sync-bound", "read_none_w0"),
    "read_asarray_w0": (read_w0("asarray"), "sync-bound", "read_none_w0"),
}
BASELINES = {"healthy": LIGHT, "read_none_w0": read_w0("none")}
STEPS = {"checkpoint60": 600, "checkpoint_rare": 600}


def capture_and_analyze(args: list[str], steps: int) -> dict[str, Any]:
    result = family_runs.capture_and_analyze(args, steps)
    if str(result["verdict"]).startswith("error"):
        return {"verdict": result["verdict"]}
    first = (result.get("recommendations") or [{}])[0]
    stall = result.get("recurring_stall")
    return {
        "load_1min": round(os.getloadavg()[0], 2),
        "verdict": result["verdict"],
        "summary": result["summary"],
        "first_advice": first.get("kind"),
        "expected_step_ms": first.get("expected_step_ms"),
        "stall": None if stall is None else {k: stall[k] for k in ("period_steps", "what")},
    }


def label(name: str, runs: dict[str, list[float]]) -> tuple[str, float, float]:
    """The verdict the truth gives ``name``, how much slower it is than its fix (best of
    runs each), and the truth's noise: the larger scatter, (highest - lowest) / lowest, of
    the two's repeated runs."""
    _, verdict, fix = CONFIGS[name]
    slower = min(runs[name]) / min(runs[fix]) - 1
    noise = max(max(v) / min(v) - 1 for v in (runs[name], runs[fix]))
    if slower <= MATTERS:
        return "device-bound", slower, noise
    return (verdict if slower > noise else UNRESOLVED), slower, noise


UNRESOLVED = "unresolved"


def judge(record: dict[str, Any]) -> None:
    """Label each configuration from the record's truth and count its right captures."""
    runs = record["truth_ms"]
    for name, entry in record["configs"].items():
        fix = entry["fix"]
        verdict, slower, noise = label(name, runs)
        best = min(runs[fix])
        entry.update(
            step_ms=min(runs[name]),
            fix_step_ms=best,
            slower=round(slower, 3),
            noise=round(noise, 3),
            label=verdict,
        )
        captures = entry["captures"]
        for got in captures:
            expected = got.get("expected_step_ms")
            got["expected_vs_fix"] = None if expected is None else round(expected / best - 1, 3)
        right = sum(c["verdict"] == verdict for c in captures)
        entry["right"] = "not judged" if verdict == UNRESOLVED else f"{right} of {len(captures)}"


def time_truth(
    runs: dict[str, list[float]], todo: dict[str, tuple[list[str], int]], rounds: int
) -> None:
    for r in range(rounds):
        for name, (cli, steps) in todo.items():
            runs.setdefault(name, []).append(round(truth_ms(cli, steps), 3))
            load = os.getloadavg()[0]
            print(
                f"truth {r + 1}/{rounds} {name}: {runs[name][-1]:.2f} ms (load {load:.2f})",
                flush=True,
            )


def relabel(path: Path, names: list[str], rounds: int) -> None:
    """More truth for ``names`` and their fixes, then the record judged again."""
    record = json.loads(path.read_text(encoding="utf-8"))
    fixes = {CONFIGS[n][2] for n in names}
    todo = {n: (BASELINES[n], 400) for n in sorted(fixes)}
    todo.update({n: (CONFIGS[n][0], STEPS.get(n, 400)) for n in names})
    time_truth(record["truth_ms"], todo, rounds)
    judge(record)
    path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    for name, entry in record["configs"].items():
        print(f"== {name}: {entry['label']}, {entry['right']} right", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--truth", type=int, default=2, help="runs without the profiler")
    parser.add_argument("--repeats", type=int, default=3, help="default captures each")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--relabel", type=Path, metavar="FILE")
    parser.add_argument("names", nargs="*", default=list(CONFIGS))
    args = parser.parse_args()
    if args.relabel is not None:
        relabel(args.relabel, args.names, args.truth)
        return
    if args.out is None:
        parser.error("--out is required (or --relabel FILE)")
    runs: dict[str, list[float]] = {}
    todo = {**{n: (BASELINES[n], 400) for n in BASELINES}}
    todo.update({n: (CONFIGS[n][0], STEPS.get(n, 400)) for n in args.names})
    time_truth(runs, todo, args.truth)
    best = {n: min(v) for n, v in runs.items()}
    record: dict[str, Any] = {
        "stack": {"python": platform.python_version(), **_versions()},
        "cpus": os.cpu_count(),
        "figure": f"mean host step ms from step {WARMUP} to the drained end, best of runs",
        "truth_ms": runs,
        "configs": {},
    }
    for name in args.names:
        cli, _, fix = CONFIGS[name]
        truth = label(name, runs)[0]
        captures = []
        for i in range(args.repeats):
            captures.append(capture_and_analyze(cli, STEPS.get(name, 400)))
            got = captures[-1]
            expected = got.get("expected_step_ms")
            within = None if expected is None else round(expected / best[fix] - 1, 3)
            got["expected_vs_fix"] = within
            print(
                f"{name} {i + 1}/{args.repeats}: {got['verdict']} (truth {truth}); "
                f"expected {expected} vs fix {best[fix]:.2f} ms ({within})",
                flush=True,
            )
        record["configs"][name] = {"args": cli, "fix": fix, "captures": captures}
        judge(record)
        args.out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        entry = record["configs"][name]
        print(f"== {name}: {entry['label']}, {entry['right']} right", flush=True)


def _versions() -> dict[str, str]:
    import importlib.metadata as md

    return {n: md.version(n) for n in ("jax", "jaxlib", "grain")}


if __name__ == "__main__":
    main()
