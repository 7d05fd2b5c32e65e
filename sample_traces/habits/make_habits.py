"""Time the loop habits without the profiler, then judge default captures of them.

The scenario family's loop (``scenarios/family/train_family.py``) on a light Grain pipeline
(2 workers, far faster than the step) with one habit each: synchronous checkpoints at two
periods (one longer than the default 20-step window) and a rare cheap one, the loop's own
waiting and CPU work, a host callback, an evaluation every 20 steps, and per-step reads in four
spellings.
Run from the repository root, on a quiet machine::

    python sample_traces/habits/make_habits.py --out sample_traces/habits/verify-3.11.json

For each configuration: its step time and its fix's (the same loop without the habit) without
the profiler, best of ``--truth`` runs, interleaved; the label the truth says (the habit's
cause when it slows the loop by more than 5%, else device-bound); then ``--repeats`` default
captures (no option but the log folder), each analysed: verdict, the recurring stall found,
and the first recommendation's expected step time against the fix's measured step.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "sample_traces" / "scenarios" / "family" / "train_family.py"
LIGHT = ["--record", "light", "--workers", "2"]
WARMUP = 60
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


def truth_ms(args: list[str], steps: int) -> float:
    """Mean host step time (ms) from step WARMUP to the drained end, without the profiler."""
    out = subprocess.run(
        [sys.executable, str(SCRIPT), *args, "--steps", str(steps), "--stats-json", "-"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    starts = json.loads(out.strip().splitlines()[-1])["starts_s"]
    return (starts[-1] - starts[WARMUP]) * 1000.0 / (len(starts) - 1 - WARMUP)


def capture_and_analyze(args: list[str], steps: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        command = [sys.executable, "-m", "traceinspect", "capture", "--logdir", tmp, "--"]
        command += [sys.executable, str(SCRIPT), *args, "--steps", str(steps)]
        subprocess.run(command, check=True, capture_output=True, text=True)
        (run,) = (Path(tmp) / "plugins" / "profile").iterdir()
        done = subprocess.run(
            [sys.executable, "-m", "traceinspect", "analyze", str(run), "--json"],
            capture_output=True,
            text=True,
            check=False,
        )
    if done.returncode != 0:
        return {"verdict": f"error: {done.stderr.strip()[-300:]}"}
    result = json.loads(done.stdout)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--truth", type=int, default=2, help="runs without the profiler")
    parser.add_argument("--repeats", type=int, default=3, help="default captures each")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("names", nargs="*", default=list(CONFIGS))
    args = parser.parse_args()
    runs: dict[str, list[float]] = {}
    todo = {**{n: (BASELINES[n], 400) for n in BASELINES}}
    todo.update({n: (CONFIGS[n][0], STEPS.get(n, 400)) for n in args.names})
    for r in range(args.truth):
        for name, (cli, steps) in todo.items():
            runs.setdefault(name, []).append(round(truth_ms(cli, steps), 3))
            load = os.getloadavg()[0]
            print(
                f"truth {r + 1}/{args.truth} {name}: {runs[name][-1]:.2f} ms (load {load:.2f})",
                flush=True,
            )
    best = {n: min(v) for n, v in runs.items()}
    record: dict[str, Any] = {
        "stack": {"python": platform.python_version(), **_versions()},
        "cpus": os.cpu_count(),
        "figure": f"mean host step ms from step {WARMUP} to the drained end, best of runs",
        "truth_ms": runs,
        "configs": {},
    }
    for name in args.names:
        cli, verdict, fix = CONFIGS[name]
        slower = best[name] / best[fix] - 1
        label = verdict if slower > MATTERS else "device-bound"
        captures = []
        for i in range(args.repeats):
            captures.append(capture_and_analyze(cli, STEPS.get(name, 400)))
            got = captures[-1]
            expected = got.get("expected_step_ms")
            within = None if expected is None else round(expected / best[fix] - 1, 3)
            got["expected_vs_fix"] = within
            print(
                f"{name} {i + 1}/{args.repeats}: {got['verdict']} (truth {label}); "
                f"expected {expected} vs fix {best[fix]:.2f} ms ({within})",
                flush=True,
            )
        right = sum(c["verdict"] == label for c in captures)
        record["configs"][name] = {
            "args": cli,
            "step_ms": best[name],
            "fix": fix,
            "fix_step_ms": best[fix],
            "slower": round(slower, 3),
            "label": label,
            "right": f"{right} of {len(captures)}",
            "captures": captures,
        }
        args.out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        print(f"== {name}: {label}, {right} of {len(captures)} right", flush=True)


def _versions() -> dict[str, str]:
    import importlib.metadata as md

    return {n: md.version(n) for n in ("jax", "jaxlib", "grain")}


if __name__ == "__main__":
    main()
