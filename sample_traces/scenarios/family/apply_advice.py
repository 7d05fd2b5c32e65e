"""Apply the top advice of default captures and time the result: does the step land where the
advice said it would?

For each configuration of the scenario family (``train_family.py``): ``--repeats`` default
captures (``traceinspect capture --logdir D -- python train_family.py ARGS``), each analysed
(``analyze --json``); its first recommendation is applied to the script's arguments (a worker
count: ``--workers N``; a per-step read to remove: ``--read none``), and the loop so changed is
timed without the profiler (best of ``--truth`` runs, the mean host step from step 60 to the
drained end, as ``MEASUREMENTS.md``). The advice holds when the measured step lies within 20%
of the step it expected (with ``--truth-each``, each capture's advice is timed right after
that capture: this machine's speed drifts by 20% within an hour, and a prediction is held to
the step of the same minutes). Advice that no argument applies (a stage to make cheaper) is
recorded as such. With ``--sweep 1,2,3,4``, the worker counts are timed too (the knee: the
smallest count within 10% of the best), and each worker count the captures advised is set
against it ([knee, knee + 2] agrees). ``--isolate N`` runs ``traceinspect isolate`` N times on
each configuration and times the worker count it gives as the captures' is timed;
``--tool-sweep 0,1,2,3`` runs ``traceinspect sweep`` over those counts (``--sweep-repeats``
times): the three commands' counts side by side. ``--baselines`` times each configuration
also without its per-step read (``--read none``) and, without it, on pre-built batches
(``--synthetic``: the device's step): the
truth a read's verdict is judged by. ``--extra "--device-repeat 23"`` adds arguments to every
run (an accelerator's step sized like the CPU machine's: ``sample_traces/gpu/``), and
``--deadline-s`` starts no capture, ``isolate`` or ``sweep`` once that many seconds have passed,
keeping what it has (one lease of a GPU machine). Run from the repository root, on a quiet machine::

    python sample_traces/scenarios/family/apply_advice.py --out \\
        sample_traces/scenarios/family/apply_advice-3.11.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from family_runs import SCRIPT, WARMUP, capture_and_analyze, truth_ms

STEPS = 300
# The script's steps under `traceinspect sweep`, which stops each run once it has timed its
# steps after the window untraced (steady again, then as long as the window): 300 steps end
# first at 2-6 workers.
SWEEP_STEPS = 1500
WITHIN = 0.20
KNEE = 1.10

CONFIGS: dict[str, list[str]] = {
    # The pipeline slower than the device, in worker processes: waiting (io), CPU-bound
    # (cpu) and both (mix), one worker each.
    "io_w1": ["--record", "io", "--workers", "1"],
    "cpu_w1": ["--record", "cpu", "--workers", "1"],
    "mix_w1": ["--record", "mix", "--workers", "1"],
    # Two waiting workers, still slower than the device; one under a per-step read.
    "io_w2": ["--record", "io", "--workers", "2"],
    "io_read_w1": ["--record", "io", "--workers", "1", "--read", "float"],
    # On the training process's read threads: 16 of them, and 1 with a per-step read.
    "io_w0_t16": ["--record", "io", "--workers", "0", "--read-threads", "16"],
    "slow_read_t1": [
        *["--record", "slow", "--workers", "0", "--read-threads", "1", "--read", "float"]
    ],
    # On one read thread of the training process, no workers: records that compute (cpu) and
    # that wait and compute (mix); the read threads' CPU share sets how many workers the
    # cores run.
    "cpu_t1": ["--record", "cpu", "--workers", "0", "--read-threads", "1"],
    "mix_t1": ["--record", "mix", "--workers", "0", "--read-threads", "1"],
    # A per-step read over a pipeline that keeps up: remove it.
    "light_read_w0": [
        *["--record", "light", "--read", "float", "--workers", "0", "--read-threads", "0"]
    ],
    # `.block_until_ready()` every step over a pipeline that keeps up (records from memory,
    # 2 read threads): on XLA's CPU backend the step is the same with and without it.
    "block_keepup": [
        *["--record", "none", "--read", "block", "--workers", "0", "--read-threads", "2"]
    ],
}

# Two causes at once (issue 46): each loop has two things that cost it time, and every piece
# of advice that carries an expected step is applied and timed (``--all-advice``).
CKPT = ["--checkpoint-every", "40", "--checkpoint-ms", "250"]
TWO_CAUSES: dict[str, list[str]] = {
    # A per-step read with a synchronous checkpoint every 40 steps.
    "read_ckpt": [
        *["--record", "light", "--read", "float", "--workers", "0", "--read-threads", "0"],
        *CKPT,
    ],
    # A slow pipeline on one read thread with the same checkpoint.
    "slow_ckpt": ["--record", "slow", "--workers", "0", "--read-threads", "1", *CKPT],
    # A per-step read with the loop's own waiting (4 ms a step between next() and dispatch).
    "read_wait": [
        *["--record", "light", "--read", "float", "--workers", "0", "--read-threads", "0"],
        *["--host-wait-ms", "4"],
    ],
    # A host callback (5 ms) with the checkpoint.
    "callback_ckpt": [
        *["--record", "none", "--workers", "0", "--read-threads", "2", "--callback-ms", "5"],
        *CKPT,
    ],
    # Read threads running Python (records that compute, 4 threads) beside a slow device
    # step (6 hidden layers: ~2.5x the family's step).
    "threads_slowdev": [
        *["--record", "cpu", "--workers", "0", "--read-threads", "4", "--hidden-layers", "6"]
    ],
}
CONFIGS.update(TWO_CAUSES)


def _set(args: list[str], flag: str, value: str) -> list[str]:
    out = list(args)
    if flag in out:
        out[out.index(flag) + 1] = value
    else:
        out += [flag, value]
    return out


def applied(args: list[str], rec: dict[str, Any]) -> list[str] | None:
    """The arguments with the advice applied, or None when no argument applies it."""
    kind = rec.get("kind")
    if kind == "grain_worker_count" and rec.get("value") is not None:
        return _set(args, "--workers", str(rec["value"]))
    if kind == "remove_sync":
        return _set(args, "--read", "none")
    if kind == "recurring_stall" and "--checkpoint-every" in args:
        return _set(args, "--checkpoint-every", "0")
    if kind == "host_callback" and "--callback-ms" in args:
        return _set(args, "--callback-ms", "0")
    if kind == "reduce_host_overhead" and "--host-wait-ms" in args:
        return _set(args, "--host-wait-ms", "0")
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--steps",
        type=int,
        default=STEPS,
        help="the script's steps, captured and timed (a longer script leaves capture room to "
        "time its untraced block after the window)",
    )
    parser.add_argument("--truth", type=int, default=2, help="runs without the profiler")
    parser.add_argument(
        "--truth-each",
        action="store_true",
        help="time the advice of each capture right after it (best of --truth runs), not once "
        "per configuration: this machine's speed drifts by 20%% within an hour",
    )
    parser.add_argument("--sweep", default="", help="worker counts to time, e.g. 1,2,3,4")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--keep", type=Path, help="keep each capture in KEEP/NAME-N")
    parser.add_argument("--isolate", type=int, default=0, help="traceinspect isolate runs")
    parser.add_argument("--tool-sweep", default="", help="traceinspect sweep's worker counts")
    parser.add_argument("--sweep-repeats", type=int, default=1, help="traceinspect sweep runs")
    parser.add_argument(
        "--baselines",
        action="store_true",
        help="time each configuration also without its read and on pre-built batches",
    )
    parser.add_argument("--extra", default="", help="arguments added to every run, quoted")
    parser.add_argument(
        "--all-advice",
        action="store_true",
        help="apply and time every recommendation that carries an expected step, not only "
        "the first",
    )
    parser.add_argument(
        "--deadline-s", type=float, help="start no capture, isolate or sweep after this many s"
    )
    parser.add_argument("names", nargs="*", default=list(CONFIGS))
    args = parser.parse_args()
    extra = shlex.split(args.extra)
    stop_at = None if args.deadline_s is None else time.monotonic() + args.deadline_s
    timed: dict[str, list[float]] = {}

    def late() -> bool:
        """Past ``--deadline-s``: no new capture, isolate or sweep run (recorded as such)."""
        if stop_at is None or time.monotonic() <= stop_at:
            return False
        record["cut_at_deadline"] = True
        return True

    def best(cli: list[str], fresh: bool = False) -> float:
        """The best of ``--truth`` plain runs of the loop (timed once and kept, or, with
        ``fresh``, timed anew now and added to the runs kept)."""
        key = " ".join(cli)
        runs = timed.setdefault(key, [])
        want = len(runs) + args.truth if fresh else args.truth
        while len(runs) < want:
            runs.append(round(truth_ms(cli, args.steps), 3))
            print(f"  timed {key}: {runs[-1]:.2f} ms", flush=True)
        return min(runs[-args.truth :]) if fresh else min(runs)

    record: dict[str, Any] = {
        "stack": {"python": platform.python_version(), **_versions()},
        "cpus": os.cpu_count(),
        "figure": f"mean host step ms from step {WARMUP} to the drained end, best of runs",
        "configs": {},
        "timed_ms": timed,
    }
    if extra:
        record["extra"] = extra
    for name in args.names:
        if late():
            break
        cli = [*CONFIGS[name], *extra]
        entry: dict[str, Any] = {"args": cli, "step_ms": best(cli), "captures": []}
        if args.baselines:
            entry["without_read_ms"] = best(_set(cli, "--read", "none"))
            entry["prebuilt_ms"] = best([*_set(cli, "--read", "none"), "--synthetic"])
        if args.sweep and "--workers" in cli:
            counts = [int(c) for c in args.sweep.split(",")]
            steps = {c: best(_set(cli, "--workers", str(c))) for c in counts}
            fastest = min(steps.values())
            entry["sweep_ms"] = steps
            entry["knee"] = min(c for c, ms in steps.items() if ms <= fastest * KNEE)
        for i in range(args.repeats):
            if late():
                break
            keep = None if args.keep is None else args.keep / f"{name}-{i + 1}"
            result = capture_and_analyze(cli, args.steps, keep)
            first = (result.get("recommendations") or [{}])[0]
            got: dict[str, Any] = {
                "load_1min": round(os.getloadavg()[0], 2),
                "verdict": result.get("verdict"),
                "advice": first.get("kind"),
                "value": first.get("value"),
                "expected_step_ms": first.get("expected_step_ms"),
            }
            fixed = applied(cli, first)
            if fixed is not None and got["expected_step_ms"]:
                measured = best(fixed, fresh=args.truth_each)
                got["applied"] = fixed
                got["applied_step_ms"] = measured
                got["off_by"] = round(measured / got["expected_step_ms"] - 1, 3)
                got["holds"] = abs(got["off_by"]) <= WITHIN
            if args.all_advice:
                got["all"] = []
                for rec in result.get("recommendations") or []:
                    fixed = applied(cli, rec)
                    if fixed is None or not rec.get("expected_step_ms"):
                        continue
                    measured = best(fixed, fresh=args.truth_each)
                    off = round(measured / rec["expected_step_ms"] - 1, 3)
                    got["all"].append(
                        {
                            "advice": rec.get("kind"),
                            "value": rec.get("value"),
                            "expected_step_ms": rec["expected_step_ms"],
                            "applied_step_ms": measured,
                            "off_by": off,
                            "holds": abs(off) <= WITHIN,
                        }
                    )
            if "knee" in entry and first.get("kind") == "grain_worker_count":
                knee = entry["knee"]
                got["count_agrees"] = knee <= (first.get("value") or 0) <= knee + 2
            entry["captures"].append(got)
            print(f"{name} {i + 1}/{args.repeats}: {json.dumps(got)}", flush=True)
            record["configs"][name] = entry
            args.out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        record["configs"][name] = entry
        args.out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        for i in range(args.isolate):
            if late():
                break
            iso = run_tool("isolate", [], cli, args.keep, f"{name}-isolate-{i + 1}")
            count = iso.get("suggested_workers")
            expected = (iso.get("workers") or {}).get("expected_step_ms")
            got = {
                "load_1min": round(os.getloadavg()[0], 2),
                "verdict": iso.get("verdict"),
                "value": count,
                "expected_step_ms": expected,
                "figures_ms": [iso.get(k) for k in ISOLATE_FIGURES],
                "evidence": iso.get("evidence"),
            }
            if count is not None and expected:
                got["applied_step_ms"] = best(_set(cli, "--workers", str(count)))
                got["off_by"] = round(got["applied_step_ms"] / expected - 1, 3)
                got["holds"] = abs(got["off_by"]) <= WITHIN
            if "knee" in entry and count is not None:
                got["count_agrees"] = entry["knee"] <= count <= entry["knee"] + 2
            entry.setdefault("isolate", []).append(got)
            print(f"{name} isolate {i + 1}/{args.isolate}: {json.dumps(got)}", flush=True)
            args.out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        for i in range(args.sweep_repeats if args.tool_sweep and "--workers" in cli else 0):
            if late():
                break
            flags = ["--worker-counts", args.tool_sweep]
            # A script long enough for sweep's untraced steps after each window: it stops
            # each run once they are timed.
            swept = run_tool(
                "sweep",
                flags,
                _set(cli, "--workers", "{workers}"),
                args.keep,
                f"{name}-{i + 1}",
                steps=SWEEP_STEPS,
            )
            keys = ("workers", "untraced_step_ms", "first_untraced_step_ms", "median_step_ms")
            keys += ("mean_step_ms", "verdict")
            got = {
                "load_1min": round(os.getloadavg()[0], 2),
                "chosen": swept.get("chosen"),
                "metric": swept.get("metric"),
                "runs": [{k: r.get(k) for k in keys} for r in swept.get("runs") or []],
            }
            if "knee" in entry and isinstance(got["chosen"], int):
                got["count_agrees"] = entry["knee"] <= got["chosen"] <= entry["knee"] + 2
            entry.setdefault("sweeps", []).append(got)
            entry["sweep"] = entry["sweeps"][0]
            print(f"{name} sweep {i + 1}/{args.sweep_repeats}: {json.dumps(got)}", flush=True)
            args.out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")


ISOLATE_FIGURES = ("target_step_ms", "loader_batch_ms", "real_step_ms")


def run_tool(
    tool: str, flags: list[str], cli: list[str], keep: Path | None, name: str, steps: int = STEPS
) -> dict[str, Any]:
    """``traceinspect isolate|sweep --json`` on the loop (its logs in KEEP/TOOL-NAME when
    kept); ``{"verdict": "error: ..."}`` when it failed."""
    with tempfile.TemporaryDirectory() as tmp:
        logdir = keep / f"{tool}-{name}" if keep is not None else Path(tmp) / "logs"
        command = [sys.executable, "-m", "traceinspect", tool, "--json", *flags]
        command += ["--logdir", str(logdir), "--", sys.executable, str(SCRIPT), *cli]
        command += ["--steps", str(steps)]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return {"verdict": f"error: {done.stderr.strip()[-300:]}"}
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _versions() -> dict[str, str]:
    import importlib.metadata as md

    return {n: md.version(n) for n in ("jax", "jaxlib", "grain")}


if __name__ == "__main__":
    main()
