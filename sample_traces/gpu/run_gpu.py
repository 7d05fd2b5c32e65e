"""Time the scenario family and the loop habits on a GPU, then capture each with defaults.

One script for one short lease of a GPU machine (``issue 33``): everything it needs is in
this repository (``sample_traces/scenarios/family/train_family.py``) plus Grain and
traceinspect carried as wheels. Run from the repository root::

    python sample_traces/gpu/run_gpu.py --out OUT [--deadline-s 380]

It writes into ``OUT``:

- ``env.json``: the GPU, driver, Python, jax, jaxlib and Grain it ran on;
- ``truth.json``: every configuration timed **without the profiler** (mean host step time
  from step ``WARMUP`` to the drained end of the run, best of ``--repeats``), and the
  ``--device-repeat`` calibrated so that the device's own step lasts ``--device-ms``;
- ``runs/<name>/``: each default ``traceinspect capture`` run directory (trace and
  sidecar), with ``analyze.json`` (``analyze --json --all-gaps``) and ``capture.log``.

Past ``--deadline-s`` seconds it skips what is left and still writes what it has, so one
call of a fixed length always brings something back.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
FAMILY = REPO / "sample_traces" / "scenarios" / "family"
SCRIPT = FAMILY / "train_family.py"
WARMUP = 40

# name -> the script's arguments (besides --device-repeat, which calibration sets).
LIGHT = ["--record", "light", "--workers", "2"]


def read_w0(read: str) -> list[str]:
    """A light input made on the main thread (no read threads, no workers), loss read so."""
    return ["--record", "light", "--read", read, "--workers", "0", "--read-threads", "0"]


TRUTH: dict[str, list[str]] = {
    "synthetic": ["--synthetic"],
    "io_w1": ["--record", "io", "--workers", "1"],
    "io_w2": ["--record", "io", "--workers", "2"],
    "io_w4": ["--record", "io", "--workers", "4"],
    "io_w6": ["--record", "io", "--workers", "6"],
    "io_w8": ["--record", "io", "--workers", "8"],
    "read_float_w0": read_w0("float"),
    "read_none_w0": read_w0("none"),
    "read_item_w0": read_w0("item"),
    "light_w2": LIGHT,
    "checkpoint25": [*LIGHT, "--checkpoint-every", "25", "--checkpoint-ms", "250"],
    "checkpoint60": [*LIGHT, "--checkpoint-every", "60", "--checkpoint-ms", "250"],
    "checkpoint_rare": [*LIGHT, "--checkpoint-every", "100", "--checkpoint-ms", "30"],
    "eval20": [*LIGHT, "--eval-every", "20", "--eval-batches", "20"],
    "callback6": [*LIGHT, "--callback-ms", "6"],
    "host_wait14": [*LIGHT, "--host-wait-ms", "14"],
}
STEPS = {
    "checkpoint25": 300,
    "checkpoint60": 360,
    "checkpoint_rare": 400,
    "io_w1": 160,
    "io_w2": 160,
}
# The captures (default options; each a fresh process), in order of value.
CAPTURES = [
    "checkpoint25",
    "checkpoint60",
    "read_item_w0",
    "host_wait14",
    "io_w1",
    "callback6",
    "light_w2",
    "eval20",
    "checkpoint_rare",
    "read_float_w0",
]
CAPTURE_STEPS = {"io_w1": 260, "checkpoint25": 400, "checkpoint60": 600, "checkpoint_rare": 600}


def env_facts() -> dict[str, Any]:
    import importlib.metadata as md

    facts: dict[str, Any] = {"python": platform.python_version(), "cpus": os.cpu_count()}
    for name in ("jax", "jaxlib", "grain", "traceinspect"):
        try:
            facts[name] = md.version(name)
        except md.PackageNotFoundError:
            facts[name] = None
    smi = shutil.which("nvidia-smi")
    if smi:
        out = subprocess.run(
            [smi, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            check=False,
        )
        facts["gpu"] = out.stdout.strip()
    return facts


def mean_step_ms(starts: list[float]) -> float:
    """Mean host step time from step WARMUP to the drained end of the run."""
    return (starts[-1] - starts[WARMUP]) * 1000.0 / (len(starts) - 1 - WARMUP)


def measure_truth(
    device_ms: float, repeats: int, deadline: float, fixed_repeat: int | None = None
) -> dict[str, Any]:
    """Every TRUTH configuration timed in this process, without the profiler."""
    sys.path.insert(0, str(FAMILY))
    import jax
    import train_family as tf
    from absl import flags

    flags.FLAGS.mark_as_parsed()

    def run(name: str, repeat: int, steps: int | None = None) -> float:
        parsed = tf.build_parser().parse_args(build_args(TRUTH[name], repeat))
        starts = tf.train(
            parsed.record,
            parsed.workers,
            parsed.read_threads,
            parsed.read,
            steps or STEPS.get(name, 200),
            parsed.synthetic,
            parsed.hidden_layers,
            tf.habits_from(parsed),
        )
        return mean_step_ms(starts)

    # Calibrate: the synthetic step at a few repeat counts, then the count for device_ms.
    probe: dict[int, float] = {}
    if fixed_repeat is None:
        for repeat in (0, 16):
            probe[repeat] = run("synthetic", repeat, steps=100)
        per_repeat = max((probe[16] - probe[0]) / 16, 1e-3)
        repeat = max(0, round((device_ms - probe[0]) / per_repeat))
    else:
        repeat = fixed_repeat
    result: dict[str, Any] = {
        "devices": [str(d) for d in jax.devices()],
        "calibration_ms": {str(k): round(v, 3) for k, v in probe.items()},
        "device_repeat": repeat,
        "warmup": WARMUP,
        "figure": f"mean host step ms from step {WARMUP} to the drained end, best of repeats",
        "runs_ms": {},
    }
    runs: dict[str, list[float]] = result["runs_ms"]
    for r in range(repeats):
        for name in TRUTH:
            if time.monotonic() > deadline:
                result["cut_at_deadline"] = True
                break
            runs.setdefault(name, []).append(round(run(name, repeat), 3))
            print(f"truth {r + 1}/{repeats} {name}: {runs[name][-1]:.2f} ms", flush=True)
    result["best_ms"] = {name: min(v) for name, v in runs.items()}
    return result


def build_args(args: list[str], repeat: int) -> list[str]:
    return [*args, "--device-repeat", str(repeat)]


def capture(name: str, repeat: int, out: Path, timeout_s: float) -> dict[str, Any]:
    """One default ``traceinspect capture`` of the configuration, then ``analyze --json``."""
    logdir = out / "logs" / name
    command = [sys.executable, "-m", "traceinspect", "capture", "--logdir", str(logdir), "--"]
    steps = CAPTURE_STEPS.get(name, 300)
    command += [sys.executable, str(SCRIPT), *build_args(TRUTH[name], repeat)]
    command += ["--steps", str(steps)]
    started = time.monotonic()
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout_s, check=False
        )
        log = f"$ {' '.join(command)}\nexit {done.returncode}\n--- stderr\n{done.stderr}"
        log += f"\n--- stdout (tail)\n{done.stdout[-4000:]}"
    except subprocess.TimeoutExpired as e:
        log = f"$ {' '.join(command)}\ntimed out after {timeout_s:.0f} s\n{e.stderr!r}"
    elapsed = time.monotonic() - started
    target = out / "runs" / name
    target.mkdir(parents=True, exist_ok=True)
    (target / "capture.log").write_text(log, encoding="utf-8")
    runs = sorted((logdir / "plugins" / "profile").glob("*")) if logdir.exists() else []
    record: dict[str, Any] = {"capture_s": round(elapsed, 1), "steps": steps}
    if not runs:
        record["verdict"] = "error: no run directory"
        return record
    for path in runs[-1].iterdir():
        if path.name.endswith((".xplane.pb", ".capture.json")):
            shutil.copy2(path, target / path.name)
    analyzed = subprocess.run(
        [sys.executable, "-m", "traceinspect", "analyze", str(target), "--json", "--all-gaps"],
        capture_output=True,
        text=True,
        check=False,
    )
    if analyzed.returncode == 0:
        (target / "analyze.json").write_text(analyzed.stdout, encoding="utf-8")
        result = json.loads(analyzed.stdout)
        record["verdict"] = result.get("verdict")
        record["workers"] = [
            r.get("value")
            for r in result.get("recommendations", [])
            if r.get("kind") == "grain_worker_count"
        ]
    else:
        record["verdict"] = f"error: {analyzed.stderr.strip()[-500:]}"
    text = subprocess.run(
        [sys.executable, "-m", "traceinspect", "analyze", str(target)],
        capture_output=True,
        text=True,
        check=False,
    )
    (target / "analyze.txt").write_text(text.stdout + text.stderr, encoding="utf-8")
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--deadline-s", type=float, default=380.0)
    parser.add_argument("--device-ms", type=float, default=10.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--device-repeat", type=int, help="the step's extra products (default: calibrated)"
    )
    parser.add_argument("--truth-share", type=float, default=0.4, help="of the deadline")
    parser.add_argument("--only", nargs="*", help="captures to run (default: all)")
    parser.add_argument("--truth-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    start = time.monotonic()
    deadline = start + args.deadline_s
    args.out.mkdir(parents=True, exist_ok=True)
    if args.truth_only:
        truth = measure_truth(args.device_ms, args.repeats, deadline, args.device_repeat)
        (args.out / "truth.json").write_text(json.dumps(truth, indent=1), encoding="utf-8")
        return
    facts = env_facts()
    (args.out / "env.json").write_text(json.dumps(facts, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(facts), flush=True)

    # Truth in a child process, so that this process never holds the GPU during captures.
    truth_path = args.out / "truth.json"
    truth_deadline = args.deadline_s * args.truth_share
    command = [sys.executable, __file__, "--out", str(args.out), "--truth-only"]
    command += ["--device-ms", str(args.device_ms), "--repeats", str(args.repeats)]
    command += ["--deadline-s", str(truth_deadline)]
    if args.device_repeat is not None:
        command += ["--device-repeat", str(args.device_repeat)]
    subprocess.run(command, check=False, timeout=truth_deadline + 60)
    truth = json.loads(truth_path.read_text()) if truth_path.exists() else {}
    repeat = int(truth.get("device_repeat", 0))
    print(f"truth: {json.dumps(truth.get('best_ms'))}", flush=True)

    results: dict[str, Any] = {}
    for name in args.only or CAPTURES:
        left = deadline - time.monotonic()
        if left < 25:
            results[name] = {"verdict": "skipped: deadline"}
            continue
        results[name] = capture(name, repeat, args.out, timeout_s=min(left - 5, 120))
        print(f"capture {name}: {json.dumps(results[name])}", flush=True)
        (args.out / "captures.json").write_text(
            json.dumps(results, indent=1) + "\n", encoding="utf-8"
        )
    shutil.rmtree(args.out / "logs", ignore_errors=True)
    print(f"done in {time.monotonic() - start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
