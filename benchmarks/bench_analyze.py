"""Time and measure `traceinspect analyze --json` on the large captures, whole process.

Every measurement is a whole command in a fresh process (start-up and imports included),
run in turns with the others so noise on a shared machine hits all alike; the best of
``--repeat`` runs is shown, with the spread. Peak RSS is each process's own (``os.wait4``).
The file is read once first, so every command finds it in the page cache.

- ``analyze --json --no-cache``: the command under test (decodes the file, analyses it);
- ``info --no-cache``: the reference of the same package: it decodes the file and
  summarises it, so ``analyze / info`` is what the analysis adds to reading;
- ``xprof-rs get_overview`` and ``get_step_trace`` (``--bypass_cache``): a peer, XProf's
  tools in Rust, on a session directory holding a link to the file (every file but the
  534 MB one; the ``xprof-rs`` found on PATH or given with ``--xprof-rs``);
- ``analyze --json`` twice with the default cache, in an empty cache directory: the second
  run finds the first's result (``cached``), and its output must equal the uncached one.

A ``phases`` run times imports, load, analysis and the JSON inside one process.

The checkout's modules are compiled to bytecode first, as a pip install does (where
``PYTHONDONTWRITEBYTECODE`` is set, every run would compile them anew).

Besides, ``analyze --no-cache`` of the bundled 0.3 MB ``sync_bound`` sample (the whole
command: what a first try costs).

Targets (printed as met or MISSED, not asserted): on the ~63 MB and 89 MB captures, analyze
at most 1.2x info and at most 1.25x xprof-rs get_overview, peak RSS at most 2x the file +
300 MB; on the 534 MB capture (``--large``), peak RSS at most 2 GB; a second analyze of an
unchanged file prints the uncached output in under 0.2 s; the sample in under 0.35 s.

    python benchmarks/make_large_trace.py            # once: writes benchmarks/_data/
    python benchmarks/bench_analyze.py               # the 63 and 89 MB files, 3 runs each
    python benchmarks/bench_analyze.py --quick       # the 3 MB capture, one run each
    python benchmarks/bench_analyze.py FILE --repeat 5 --xprof-rs /tmp/xr/bin/xprof-rs
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))  # make_large_trace, when run as a script

from make_large_trace import LARGE, MEDIUM, REAL, SMALL  # noqa: E402

MB = 1 << 20
SAMPLE = ROOT / "sample_traces" / "scenarios" / "sync_bound"
# The targets.
VS_INFO = 1.2  # analyze wall time / info wall time, same file
VS_XPROF_RS = 1.25  # analyze wall time / xprof-rs get_overview, same file
CACHED_S = 0.2  # a second analyze of an unchanged file
SAMPLE_S = 0.35  # analyze --no-cache of the bundled sync_bound sample
RSS_FILE_FACTOR = 2  # peak RSS <= 2 x file size + 300 MB
RSS_EXTRA_BYTES = 300_000_000
LARGE_RSS_BYTES = 2_000_000_000  # the 534 MB capture completes within 2 GB peak


def _run(cmd: list[str], out: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    """``cmd`` in a fresh process from this checkout: wall time and its own peak RSS; stdout
    goes to ``out``."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))  # this checkout's package
    with out.open("wb") as stdout, tempfile.TemporaryFile() as stderr:
        load = os.getloadavg()[0]
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=stdout, stderr=stderr)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        code = os.waitstatus_to_exitcode(status)
        stderr.seek(0)
        err = stderr.read().decode(errors="replace")
    if code != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {code}:\n{err[-2000:]}")
    cpu = usage.ru_utime + usage.ru_stime
    return {"wall_s": wall, "cpu_s": cpu, "peak_bytes": usage.ru_maxrss * 1024, "load_avg": load}


def _traceinspect(args: list[str], out: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    return _run([sys.executable, "-m", "traceinspect", *args], out, env)


_PHASES = """
import time
t0 = time.perf_counter()
import json, sys
import traceinspect.cli.analyze
from traceinspect.analysis.analyze import analyze
from traceinspect.trace import load
t = [t0, time.perf_counter()]
trace = load(sys.argv[1], use_cache=False); t.append(time.perf_counter())
analysis = analyze(trace); t.append(time.perf_counter())
text = json.dumps(analysis.to_dict(max_gaps=50), indent=2); t.append(time.perf_counter())
names = ("imports_s", "load_s", "analyze_s", "json_s")
print(json.dumps({n: b - a for n, a, b in zip(names, t, t[1:])}))
"""


def _phases(path: Path) -> dict[str, float]:
    """Where one analyze's time goes, in one process (its imports from the start of the
    script, so without the interpreter's own start-up)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-c", _PHASES, str(path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    phases: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    return phases


def _best(runs: list[dict[str, Any]]) -> dict[str, Any]:
    best = dict(min(runs, key=lambda r: r["wall_s"]))
    walls = [r["wall_s"] for r in runs]
    best["spread_s"] = max(walls) - min(walls)
    best["peak_bytes"] = max(r["peak_bytes"] for r in runs)  # the worst peak, not the best
    best["runs"] = len(runs)
    best["load_avgs"] = [r["load_avg"] for r in runs]
    return best


def bench_file(path: Path, repeat: int, xprof_rs: str | None, workdir: Path) -> dict[str, Any]:
    """Every command on ``path``, in turns, ``repeat`` times."""
    path.read_bytes()  # into the page cache, for every command alike
    session = workdir / f"session_{path.stem}"
    session.mkdir()
    (session / "host.xplane.pb").symlink_to(path.resolve())
    commands: dict[str, Any] = {
        "analyze": lambda out: _traceinspect(["analyze", str(path), "--json", "--no-cache"], out),
        "info": lambda out: _traceinspect(["info", str(path), "--no-cache"], out),
    }
    if xprof_rs:
        for tool in ("get_overview", "get_step_trace"):
            commands[tool] = lambda out, tool=tool: _run(
                [xprof_rs, tool, str(session), "--bypass_cache"], out
            )
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in commands}
    for i in range(repeat):
        print(f"  {path.name}: run {i + 1}/{repeat}", file=sys.stderr, flush=True)
        for name, command in commands.items():
            runs[name].append(command(workdir / f"{name}.out"))
    uncached = (workdir / "analyze.out").read_text()
    # The result cache: an empty cache directory, a first run that fills it, a second that
    # reuses it (its output must be the same).
    cache = workdir / f"cache_{path.stem}"
    env = {"TRACEINSPECT_CACHE_DIR": str(cache)}
    args = ["analyze", str(path), "--json"]
    first = _traceinspect(args, workdir / "first.out", env)
    second = [_traceinspect(args, workdir / "cached.out", env) for _ in range(repeat)]
    same = (workdir / "cached.out").read_text() == uncached
    fig = {name: _best(r) for name, r in runs.items()}
    fig["first_open"] = {**first, "spread_s": 0.0, "runs": 1}
    fig["cached"] = {**_best(second), "same_output": same}
    result = json.loads(uncached)
    return {
        "file": str(path),
        "file_bytes": path.stat().st_size,
        "verdict": result["verdict"],
        "gaps": len(result["gaps"]),
        "commands": fig,
        "phases": _phases(path),
    }


LABELS = {
    "analyze": "traceinspect analyze --json --no-cache",
    "info": "traceinspect info --no-cache (reference)",
    "get_overview": "xprof-rs get_overview --bypass_cache (peer)",
    "get_step_trace": "xprof-rs get_step_trace --bypass_cache",
    "first_open": "analyze --json, 1st run (fills the caches)",
    "cached": "analyze --json, 2nd run (cached result)",
}


def _verdict(ok: bool) -> str:
    return "MET" if ok else "MISSED"


def report(fig: dict[str, Any], large: bool) -> None:
    size = fig["file_bytes"]
    cmds = fig["commands"]
    print(f"\n{fig['file']}: {size / 1e6:.1f} MB (verdict {fig['verdict']}, {fig['gaps']} gaps)")
    print(
        f"{'command':<46} {'wall s':>7} {'spread':>7} {'cpu s':>6} {'peak MiB':>9} "
        f"{'analyze/it':>10}"
    )
    an = cmds["analyze"]
    for name, r in cmds.items():
        ratio = an["wall_s"] / r["wall_s"] if name != "analyze" else 1.0
        print(
            f"{LABELS[name]:<46} {r['wall_s']:>7.2f} {r['spread_s']:>7.2f} {r['cpu_s']:>6.2f} "
            f"{r['peak_bytes'] / MB:>9,.0f} {ratio:>9.2f}x"
        )
    ph = fig["phases"]
    print(
        "phases of one analyze (one process, after the interpreter's start-up): "
        + ", ".join(f"{k.removesuffix('_s')} {v:.2f} s" for k, v in ph.items())
    )
    loads = [x for r in cmds.values() for x in r.get("load_avgs", [r.get("load_avg", 0.0)])]
    print(f"1-minute load average as the runs started: {min(loads):.2f}-{max(loads):.2f}")
    print(
        "cpu s: user + system time of the best run's process (xprof-rs runs on several "
        "threads, traceinspect on one)"
    )
    info = cmds["info"]["wall_s"]
    vs_info = an["wall_s"] / info
    budget = RSS_FILE_FACTOR * size + RSS_EXTRA_BYTES
    if not large:
        print(
            f"target: analyze <= {VS_INFO}x info --no-cache: {vs_info:.2f}x "
            f"({an['wall_s']:.2f} / {info:.2f} s), {_verdict(vs_info <= VS_INFO)}"
        )
        if "get_overview" in cmds:
            peer = cmds["get_overview"]["wall_s"]
            vs_peer = an["wall_s"] / peer
            print(
                f"target: analyze <= {VS_XPROF_RS}x xprof-rs get_overview: {vs_peer:.2f}x "
                f"({an['wall_s']:.2f} / {peer:.2f} s), {_verdict(vs_peer <= VS_XPROF_RS)}"
            )
        else:
            print("target: analyze <= 2x xprof-rs get_overview: not measured (no xprof-rs)")
        print(
            f"target: peak RSS <= 2 x file + 300 MB = {budget / 1e6:,.0f} MB: "
            f"{an['peak_bytes'] / 1e6:,.0f} MB, {_verdict(an['peak_bytes'] <= budget)}"
        )
    else:
        print(f"analyze / info --no-cache: {vs_info:.2f}x ({an['wall_s']:.2f} / {info:.2f} s)")
        print(
            f"target: peak RSS <= {LARGE_RSS_BYTES / 1e9:.0f} GB: "
            f"{an['peak_bytes'] / 1e6:,.0f} MB, {_verdict(an['peak_bytes'] <= LARGE_RSS_BYTES)}"
        )
    cached = cmds["cached"]
    reused = cached["same_output"] and cached["wall_s"] < CACHED_S
    print(
        f"target: a 2nd analyze < {CACHED_S} s: {cached['wall_s']:.3f} s against "
        f"{an['wall_s']:.2f} s uncached, output "
        f"{'identical' if cached['same_output'] else 'DIFFERENT'}, {_verdict(reused)}"
    )


def bench_sample(repeat: int, workdir: Path) -> dict[str, Any]:
    """``analyze --no-cache`` of the bundled sample, best of ``repeat``."""
    runs = [
        _traceinspect(["analyze", str(SAMPLE), "--no-cache"], workdir / "sample.out")
        for _ in range(repeat)
    ]
    return {"file": str(SAMPLE), "analyze_no_cache": _best(runs)}


def report_sample(fig: dict[str, Any]) -> None:
    r = fig["analyze_no_cache"]
    print(
        f"\n{SAMPLE.relative_to(ROOT)}: analyze --no-cache {r['wall_s']:.3f} s (spread "
        f"{r['spread_s']:.3f}, cpu {r['cpu_s']:.2f} s, peak {r['peak_bytes'] / MB:,.0f} MiB); "
        f"target < {SAMPLE_S} s: {_verdict(r['wall_s'] < SAMPLE_S)}"
    )


def _machine() -> str:
    import platform

    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1 << 30)
    return (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, {mem:.0f} GiB, "
        f"Python {platform.python_version()}, load avg {os.getloadavg()[0]:.2f}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        epilog="Make the captures first: python benchmarks/make_large_trace.py",
    )
    parser.add_argument(
        "files", nargs="*", type=Path, help=f"default: _data/{MEDIUM.name} and _data/{REAL.name}"
    )
    parser.add_argument("--large", action="store_true", help=f"also _data/{LARGE.name}")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each command; best shown")
    parser.add_argument(
        "--large-repeat", type=int, default=2, help=f"runs on {LARGE.name} (default 2)"
    )
    parser.add_argument(
        "--xprof-rs",
        default=shutil.which("xprof-rs"),
        help="the xprof-rs executable (pip install xprof-rs; default: the one on PATH)",
    )
    parser.add_argument(
        "--quick", action="store_true", help=f"{SMALL.name} (made if missing), one run each"
    )
    parser.add_argument("--json", type=Path, help="also write every figure to this file")
    args = parser.parse_args(argv)
    files = args.files or [MEDIUM, REAL, *([LARGE] if args.large else [])]
    repeat = args.repeat
    if args.quick:
        if not SMALL.exists():
            subprocess.run(
                [sys.executable, str(HERE / "make_large_trace.py"), "--small"], check=True
            )
        files, repeat = [SMALL], 1
    missing = [f for f in files if not f.is_file()]
    if missing:
        print(
            f"error: {missing[0]} not found; make it with python benchmarks/make_large_trace.py",
            file=sys.stderr,
        )
        return 2
    print(f"machine: {_machine()}")
    # As installed: pip writes every module's bytecode at install time. A checkout under
    # PYTHONDONTWRITEBYTECODE=1 (this machine's environment) would otherwise compile
    # traceinspect's modules from source in every timed process (~40 ms of each run).
    compileall.compile_dir(ROOT / "traceinspect", quiet=1)
    print("bytecode: traceinspect's modules compiled first (compileall), as an install has them")
    if args.xprof_rs:
        print(f"xprof-rs: {args.xprof_rs}")
    figures = []
    for path in files:
        large = path.resolve() == LARGE.resolve()
        with tempfile.TemporaryDirectory() as tmp:
            fig = bench_file(
                path,
                args.large_repeat if large else repeat,
                None if large else args.xprof_rs,  # the peer on all but the 534 MB file
                Path(tmp),
            )
        report(fig, large)
        figures.append(fig)
    with tempfile.TemporaryDirectory() as tmp:
        sample = bench_sample(max(repeat, 3), Path(tmp))
    report_sample(sample)
    figures.append(sample)
    print(f"\nmachine after: load avg {os.getloadavg()[0]:.2f}")
    if args.json:
        args.json.write_text(json.dumps({"machine": _machine(), "files": figures}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
