"""Time and measure `traceinspect export` on the 89 MB capture, against `analyze --json`.

The reference is `traceinspect analyze FILE --json`: export reads and analyses the trace
the same way, then writes it with the findings, so the ratio of the two wall times is what
the export adds. Each run is the whole command in a fresh process (start-up included,
`--no-cache`, so both decode the file), alternated so noise on a shared machine hits both
alike; peak RSS is that process's own (``os.wait4``). The file is read once first, so both
find it in the page cache. A ``phases`` run times load, analysis, building the events and
writing them inside one process.

Targets (printed as met or MISSED, not asserted): the export completes in seconds, and the
file holds no more events than the cap (``--max-events``, default 1,000,000).

    python benchmarks/make_large_trace.py       # once: ~30 s, writes benchmarks/_data/
    python benchmarks/bench_export.py           # the 89 MB capture, 3 runs each: a few minutes
    python benchmarks/bench_export.py --quick   # a 3 MB capture, one run each: ~10 s
    python benchmarks/bench_export.py FILE --repeat 5 --max-events 200000 --json out.json
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))  # make_large_trace, when run as a script

from make_large_trace import REAL, SMALL  # noqa: E402

MB = 1 << 20
TARGET_SECONDS = 10.0  # "completes in seconds"


def _command(args: list[str], out: Path) -> dict[str, Any]:
    """``traceinspect ARGS`` from this checkout in a fresh process: wall time, peak RSS of
    that process alone, stderr. stdout goes to ``out`` (analyze --json prints the result)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))  # this checkout, not an installed copy
    with out.open("wb") as stdout, tempfile.TemporaryFile() as stderr:
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "traceinspect", *args],
            cwd=ROOT,
            env=env,
            stdout=stdout,
            stderr=stderr,
        )
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        stderr.seek(0)
        err = stderr.read().decode(errors="replace")
    if proc.returncode != 0:
        raise RuntimeError(f"traceinspect {' '.join(args)} exited {proc.returncode}:\n{err}")
    return {"wall_s": wall, "peak_bytes": usage.ru_maxrss * 1024, "stderr": err}


def _export(path: Path, workdir: Path, max_events: int) -> dict[str, Any]:
    output = workdir / "trace.json.gz"
    args = ["export", str(path), "-o", str(output), "--no-cache", "--max-events", str(max_events)]
    run = _command(args, workdir / "export.out")
    run["output_bytes"] = output.stat().st_size
    # The metadata closes the file: its counts, without parsing a million events.
    text = gzip.decompress(output.read_bytes()).decode()
    metadata = json.loads(text[text.rindex('"metadata":') + len('"metadata":') : -2])
    run["events"] = metadata["events"]
    run["trace_events"] = metadata["trace_events"]
    run["dropped"] = metadata["dropped_events"]
    run["json_bytes"] = len(text.encode())
    return run


def _analyze(path: Path, workdir: Path) -> dict[str, Any]:
    run = _command(["analyze", str(path), "--json", "--no-cache"], workdir / "analyze.json")
    json.loads((workdir / "analyze.json").read_text())  # it printed a whole result
    return run


_PHASES = """
import json, sys, time
from traceinspect.analysis.analyze import analyze
from traceinspect.report.perfetto import perfetto_trace
from traceinspect.trace import load
t = [time.perf_counter()]
trace = load(sys.argv[1], use_cache=False); t.append(time.perf_counter())
analysis = analyze(trace); t.append(time.perf_counter())
result = perfetto_trace(trace, analysis, max_events=int(sys.argv[3])); t.append(time.perf_counter())
result.write(sys.argv[2]); t.append(time.perf_counter())
names = ("load_s", "analyze_s", "build_s", "write_gz_s")
print(json.dumps({n: b - a for n, a, b in zip(names, t, t[1:])}))
"""


def _phases(path: Path, workdir: Path, max_events: int) -> dict[str, float]:
    """Where an export's time goes, in one process (after its imports)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-c", _PHASES, str(path), str(workdir / "phases.json.gz")]
    proc = subprocess.run(
        [*cmd, str(max_events)], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    phases: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    return phases


def _machine() -> str:
    import platform

    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1 << 30)
    return (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, {mem:.0f} GiB, "
        f"Python {platform.python_version()}, load avg {os.getloadavg()[0]:.2f}"
    )


def bench(path: Path, repeat: int, max_events: int) -> dict[str, Any]:
    path.read_bytes()  # into the page cache, for both commands alike
    exports: list[dict[str, Any]] = []
    analyses: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        for i in range(repeat):
            print(f"  run {i + 1}/{repeat}", file=sys.stderr)
            exports.append(_export(path, workdir, max_events))
            analyses.append(_analyze(path, workdir))
        phases = _phases(path, workdir, max_events)
    best_export = min(exports, key=lambda r: r["wall_s"])
    best_analyze = min(analyses, key=lambda r: r["wall_s"])
    return {
        "file": str(path),
        "file_bytes": path.stat().st_size,
        "max_events": max_events,
        "export": best_export,
        "analyze": best_analyze,
        "export_walls": [r["wall_s"] for r in exports],
        "analyze_walls": [r["wall_s"] for r in analyses],
        "ratio": best_export["wall_s"] / best_analyze["wall_s"],
        "phases": phases,
    }


def report(fig: dict[str, Any]) -> None:
    ex, an = fig["export"], fig["analyze"]
    spread_ex = max(fig["export_walls"]) - min(fig["export_walls"])
    spread_an = max(fig["analyze_walls"]) - min(fig["analyze_walls"])
    print(f"\n{fig['file']}: {fig['file_bytes'] / 1e6:.1f} MB")
    print(f"{'command':<48} {'wall s':>7} {'spread':>7} {'peak MiB':>9}")
    print(
        f"{'traceinspect export -o trace.json.gz':<48} {ex['wall_s']:>7.2f} {spread_ex:>7.2f} "
        f"{ex['peak_bytes'] / MB:>9,.0f}"
    )
    print(
        f"{'traceinspect analyze --json (reference)':<48} {an['wall_s']:>7.2f} {spread_an:>7.2f} "
        f"{an['peak_bytes'] / MB:>9,.0f}"
    )
    print(f"export / analyze wall time: {fig['ratio']:.2f}x")
    total = ex["trace_events"] + ex["dropped"]
    print(
        f"output: {ex['output_bytes'] / 1e6:.1f} MB gzip ({ex['json_bytes'] / 1e6:.1f} MB of "
        f"JSON), {ex['events']:,} events; of the trace's {total:,} events in the window, "
        f"{ex['trace_events']:,} written and {ex['dropped']:,} left out"
    )
    ph = fig["phases"]
    print(
        "phases (one process, after imports): "
        + ", ".join(f"{k.removesuffix('_s')} {v:.2f} s" for k, v in ph.items() if k.endswith("_s"))
    )
    fast = ex["wall_s"] <= TARGET_SECONDS
    capped = ex["events"] <= fig["max_events"]
    print(
        f"target: completes in seconds (<= {TARGET_SECONDS:.0f} s): {'met' if fast else 'MISSED'}"
    )
    print(
        f"target: at most --max-events {fig['max_events']:,} events: "
        f"{'met' if capped else 'MISSED'} ({ex['events']:,})"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        epilog="Make the capture first: python benchmarks/make_large_trace.py",
    )
    parser.add_argument("file", nargs="?", type=Path, help=f"default: _data/{REAL.name}")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each command; best shown")
    parser.add_argument("--max-events", type=int, default=1_000_000, help="export's cap")
    parser.add_argument(
        "--quick", action="store_true", help=f"{SMALL.name} (made if missing), one run each"
    )
    parser.add_argument("--json", type=Path, help="also write every figure to this file")
    args = parser.parse_args(argv)
    path, repeat = args.file or REAL, args.repeat
    if args.quick:
        if not SMALL.exists():
            subprocess.run(
                [sys.executable, str(HERE / "make_large_trace.py"), "--small"], check=True
            )
        path, repeat = SMALL, 1
    if not path.is_file():
        print(
            f"error: {path} not found; make it with python benchmarks/make_large_trace.py",
            file=sys.stderr,
        )
        return 2
    print(f"machine: {_machine()}")
    fig = bench(path, repeat, args.max_events)
    report(fig)
    print(f"machine after: load avg {os.getloadavg()[0]:.2f}")
    if args.json:
        for run in (fig["export"], fig["analyze"]):
            run.pop("stderr", None)
        args.json.write_text(json.dumps({"machine": _machine(), **fig}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
