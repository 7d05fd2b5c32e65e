"""Measure, capture and check the scenario family of ``train_family.py``.

Run from the repository root (each subcommand writes what it finds under this folder)::

    python sample_traces/scenarios/family/make_family.py measure [--repeats 3]
    python sample_traces/scenarios/family/make_family.py capture
    python sample_traces/scenarios/family/make_family.py verify --repeats 10 [NAME ...]
    python sample_traces/scenarios/family/make_family.py auto

``measure`` times every scenario **without the profiler**: the record family (``io``,
``cpu``, ``mix``) at 1, 2, 3, 4, 6 and 8 Grain workers, and the read family (how the loss is
read, with 0 and 2 workers). The figure is the mean host step time (throughput: steps come
in bursts) from step 60 to the end, with the device drained; each configuration runs
``--repeats`` times, interleaved, and keeps the best (noise on a shared machine is mostly
upward). The knee of a record kind is the smallest worker count within 10% of the best.
It writes ``measurements.json`` and the tables in ``MEASUREMENTS.md``.

``capture`` runs ``traceinspect capture`` with **no options** on the bundled scenarios and
keeps each trace and sidecar in ``<name>/``. ``verify`` captures a scenario ``--repeats``
times into a temporary directory and prints each verdict and recommendation (``--out``:
also as JSON, with the stack). ``auto`` prints the worker count Grain's
``pick_performance_config`` picks for each record kind (MaxText's ``grain_worker_count=-1``).
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "train_family.py"
WORKERS = (1, 2, 3, 4, 6, 8)
RECORDS = ("io", "cpu", "mix")
READS = ("none", "float", "device_get", "block", "prev", "every10", "buffer")
WITHIN = 0.10
STEPS = 220
WARMUP = 60


def scenario_args(name: str) -> list[str]:
    """The script's arguments for a scenario name: ``<record>_w<N>`` or ``read_<read>_w<N>``.

    The read family feeds the loop from the main thread (no read threads) with records that
    wait 0.6 ms each: ~5 ms of input per step, half the device's step, so that input only
    slows the loop when a read forces it to happen after the step instead of during it.
    """
    if name.startswith("read_"):
        read, workers = name[len("read_") :].rsplit("_w", 1)
        threads = "0" if workers == "0" else "1"
        return [
            "--record",
            "light",
            "--read",
            read,
            "--workers",
            workers,
            "--read-threads",
            threads,
        ]
    record, workers = name.rsplit("_w", 1)
    return ["--record", record, "--workers", workers]


def run_plain(name: str, steps: int = STEPS) -> float:
    """Mean host step time (ms) from step WARMUP to the end of the drained run."""
    command = [sys.executable, str(SCRIPT), *scenario_args(name), "--steps", str(steps)]
    out = subprocess.run(
        [*command, "--stats-json", "-"], check=True, capture_output=True, text=True
    ).stdout
    starts = json.loads(out.strip().splitlines()[-1])["starts_s"]
    return (starts[-1] - starts[WARMUP]) * 1000.0 / (len(starts) - 1 - WARMUP)


def measure(repeats: int, out: Path | None = None, only: list[str] | None = None) -> dict[str, Any]:
    names = [f"{r}_w{w}" for r in RECORDS for w in WORKERS]
    names += [f"read_{read}_w{w}" for read in READS for w in (0, 2)]
    if only:
        names = [n for n in names if any(n.startswith(prefix) for prefix in only)]
    runs: dict[str, list[float]] = {n: [] for n in names}
    for repeat in range(repeats):
        for name in names:
            runs[name].append(round(run_plain(name), 3))
            print(f"repeat {repeat + 1}/{repeats} {name}: {runs[name][-1]:.2f} ms", flush=True)
    return summarize(runs, out)


def summarize(runs: dict[str, list[float]], out: Path | None = None) -> dict[str, Any]:
    """Best of the repeats per configuration, and each record kind's knee; written to
    ``out`` (default ``measurements.json``, with the stack it ran on)."""
    best = {n: min(v) for n, v in runs.items() if v}
    knees = {}
    for record in RECORDS:
        times = {w: best[f"{record}_w{w}"] for w in WORKERS if f"{record}_w{w}" in best}
        if times:
            fastest = min(times.values())
            knees[record] = min(w for w, t in times.items() if t <= fastest * (1 + WITHIN))
    result = {
        "steps": STEPS,
        "warmup": WARMUP,
        "repeats": max(len(v) for v in runs.values()),
        "figure": "mean host step ms from step 60 to the drained end, best of the repeats",
        "knee_rule": f"smallest worker count within {WITHIN:.0%} of the best",
        "best_ms": best,
        "runs_ms": runs,
        "knees": knees,
        "stack": stack(),
    }
    path = out or HERE / "measurements.json"
    path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return result


def stack() -> dict[str, str]:
    """The Python, jax, jaxlib and Grain the family ran on."""
    import importlib.metadata as md

    found = {"python": platform.python_version()}
    for name in ("jax", "jaxlib", "grain"):
        try:
            found[name] = md.version(name)
        except md.PackageNotFoundError:
            found[name] = "missing"
    return found


def auto_counts(ram_budget_mb: int) -> dict[str, int]:
    """What Grain's ``pick_performance_config`` (MaxText's ``grain_worker_count=-1``) picks for
    each record kind's pipeline: its RAM budget alone, capped at the CPU count."""
    sys.path.insert(0, str(HERE))
    import grain
    import train_family

    counts = {}
    for record in RECORDS:
        wait_ms, cpu_ms = train_family.RECORD_COSTS[record]
        ds = (
            grain.MapDataset.source(train_family.Records(64 * train_family.RECORDS_PER_BATCH))
            .map(train_family.Parse(wait_ms, cpu_ms))
            .batch(train_family.RECORDS_PER_BATCH, drop_remainder=True)
            .to_iter_dataset()
        )
        config = grain.experimental.pick_performance_config(
            ds, ram_budget_mb=ram_budget_mb, max_workers=None, max_buffer_size=None
        )
        counts[record] = config.multiprocessing_options.num_workers
    return counts


def summarize_log(path: Path, out: Path | None = None) -> dict[str, Any]:
    """``summarize`` from the lines ``measure`` printed (``repeat i/n NAME: X ms``)."""
    runs: dict[str, list[float]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("repeat ") and line.endswith(" ms"):
            name, value = line.split(" ", 2)[2].rsplit(": ", 1)
            runs.setdefault(name, []).append(float(value.removesuffix(" ms")))
    return summarize(runs, out)


def capture(name: str, logdir: Path) -> Path:
    """``traceinspect capture`` with no options; returns the run directory."""
    command = [sys.executable, "-m", "traceinspect", "capture", "--logdir", str(logdir)]
    command += ["--", sys.executable, str(SCRIPT), *scenario_args(name), "--steps", "400"]
    subprocess.run(command, check=True, capture_output=True, text=True)
    (run,) = (logdir / "plugins" / "profile").iterdir()
    return run


def analyze(run: Path) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "traceinspect", "analyze", str(run), "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        return {"verdict": f"error: {out.stderr.strip()}"}
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def keep(name: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        run = capture(name, Path(tmp))
        target = HERE / name
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir()
        for path in run.iterdir():
            if path.name.endswith((".xplane.pb", ".capture.json")):
                shutil.copy2(path, target / path.name)
        print(f"{name}: {analyze(target)['verdict']}", flush=True)


def verify(
    names: list[str], repeats: int, out: Path | None = None, keep: Path | None = None
) -> None:
    found: dict[str, list[tuple[str, int | None]]] = {}
    for name in names:
        verdicts = []
        for i in range(repeats):
            with tempfile.TemporaryDirectory() as tmp:
                logdir = keep / f"{name}-{i + 1}" if keep is not None else Path(tmp)
                result = analyze(capture(name, logdir))
            rec = next(
                (r for r in result.get("recommendations", []) if r["kind"] == "grain_worker_count"),
                None,
            )
            verdicts.append((result["verdict"], rec["value"] if rec else None))
            print(f"{name}: {verdicts[-1]}", flush=True)
        counts = statistics.multimode(v for v, _ in verdicts)
        print(f"== {name}: {verdicts} (most common {counts})", flush=True)
        found[name] = verdicts
        if out is not None:
            record = {"stack": stack(), "repeats": repeats, "verdict_and_workers": found}
            out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")


BUNDLED = [
    "io_w1",
    "cpu_w1",
    "mix_w1",
    "io_w4",
    "read_float_w0",
    "read_device_get_w0",
    "read_block_w0",
    "read_prev_w0",
    "read_every10_w0",
    "read_buffer_w2",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--repeats", type=int, default=3)
    m.add_argument("--out", type=Path, help="where to write (default measurements.json)")
    m.add_argument(
        "--only",
        nargs="+",
        metavar="PREFIX",
        help="only the configurations named so (io_, read_prev)",
    )
    c = sub.add_parser("capture")
    c.add_argument("names", nargs="*", default=BUNDLED)
    s = sub.add_parser("summarize", help="measurements.json from a log of `measure`")
    s.add_argument("log", type=Path)
    s.add_argument("--out", type=Path, help="where to write (default measurements.json)")
    a = sub.add_parser("auto", help="Grain's pick_performance_config count per record kind")
    a.add_argument("--ram-budget-mb", type=int, default=1024, help="MaxText's default: 1024")
    v = sub.add_parser("verify")
    v.add_argument("--repeats", type=int, default=10)
    v.add_argument("names", nargs="+")
    v.add_argument("--out", type=Path, help="also write every verdict and count as JSON")
    v.add_argument("--keep", type=Path, help="keep each capture's log directory under KEEP")
    args = parser.parse_args()
    if args.command == "measure":
        out = measure(args.repeats, args.out, args.only)
        print(json.dumps({"best_ms": out["best_ms"], "knees": out["knees"]}, indent=1))
    elif args.command == "auto":
        print(json.dumps(auto_counts(args.ram_budget_mb)))
    elif args.command == "summarize":
        out = summarize_log(args.log, args.out)
        print(json.dumps({"best_ms": out["best_ms"], "knees": out["knees"]}, indent=1))
    elif args.command == "capture":
        for name in args.names:
            keep(name)
    else:
        verify(args.names, args.repeats, args.out, args.keep)


if __name__ == "__main__":
    main()
