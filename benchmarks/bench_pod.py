"""Time and measure multi-host analysis (``traceinspect.pod.analyze_run``) at pod scale.

A run directory of N host files is analysed in each configuration, every one in a fresh
Python process so its peak RSS (``ru_maxrss``, a high-water mark for the process) is its
own:

- ``serial``: ``SerialEngine()``, every host in the analysing process: the reference;
- ``processes``: ``ProcessEngine(jobs)``, a local pool of ``jobs`` forked workers;
- ``dask``: a ``distributed.LocalCluster`` of ``jobs`` single-threaded worker processes
  (what ``DaskEngine("local", jobs)`` starts), started and warmed first (workers import
  traceinspect) and timed apart as *start-up*; the run is ``DaskEngine(address, jobs)``
  on that scheduler, as with a long-lived cluster;
- ``dask-local``: ``DaskEngine("local", jobs)`` as a user calls it, start-up included
  (not run by default: it is ``dask``'s start-up + run);
- ``merged`` (the memory reference, smallest N only): ``traceinspect.load(run_dir)``,
  every host's frames merged into one Trace, as a tool without per-host workers would.

Peak RSS is given for the analysing process (the *parent*: with workers it holds only
the compact per-host results) and for the largest worker (``RUSAGE_CHILDREN`` after the
pool or cluster is closed). The host files are hard links of one real capture (copies
where links fail): fine for timing, and said so in the output; the decode cache is off
(``use_cache=False``), so every host is really decoded. Nothing is asserted.

    python benchmarks/bench_pod.py                  # 8 and 32 hosts of the 89 MB capture
    python benchmarks/bench_pod.py --quick          # 8 hosts of the 3 MB capture: ~30 s
    python benchmarks/bench_pod.py --hosts 8 --configs serial,dask --jobs 2 --json out.json
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))  # make_large_trace, when run as a script

from make_large_trace import DATA, REAL, SMALL, count_events  # noqa: E402

MB = 1 << 20
CONFIGS = ("serial", "processes", "dask", "dask-local")
DEFAULT_CONFIGS = ("serial", "processes", "dask")
LABELS = {
    "serial": "serial (reference)",
    "processes": "ProcessEngine",
    "dask": "DaskEngine, started cluster",
    "dask-local": 'DaskEngine("local")',
    "merged": "load(run_dir), merged",
}


# --- measurements, each run in its own process ---------------------------------------------


def _self_peak_bytes() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def _children_peak_bytes() -> int:
    import resource

    # The largest RSS of any waited-for descendant: the pool's or the cluster's workers.
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024


def _imports() -> None:
    # Paid before the timer in every configuration (pandas is ~0.3 s); forked workers
    # inherit them, Dask's spawned workers import them during start-up.
    import traceinspect.analysis.analyze
    import traceinspect.pod
    import traceinspect.trace  # noqa: F401


def _warm_workers() -> int:
    """Import what the work needs; the worker's peak RSS so far (its base)."""
    _imports()
    return _self_peak_bytes()


def _analyse(run_dir: Path, engine: Any) -> dict[str, Any]:
    from traceinspect.pod import analyze_run

    t0 = time.perf_counter()
    pod = analyze_run(run_dir, engine=engine, use_cache=False)
    t1 = time.perf_counter()
    return {
        "wall_s": t1 - t0,
        "hosts_ok": sum(r.ok for r in pod.results),
        "errors": [r.error for r in pod.results if r.error][:3],
        "host_seconds": sorted(r.seconds for r in pod.results),
        "straggler": pod.straggler.host if pod.straggler else None,
        "verdict": pod.verdict,
    }


def _m_serial(run_dir: Path, jobs: int) -> dict[str, Any]:
    from traceinspect.pod import SerialEngine

    return {**_analyse(run_dir, SerialEngine()), "workers": 1}


def _m_processes(run_dir: Path, jobs: int) -> dict[str, Any]:
    from traceinspect.pod import ProcessEngine

    return {**_analyse(run_dir, ProcessEngine(jobs)), "workers": jobs}


def _m_dask(run_dir: Path, jobs: int) -> dict[str, Any]:
    from traceinspect.pod import DaskEngine

    # Untyped library: used through Any, as traceinspect.pod._engines does.
    distributed: Any = importlib.import_module("distributed")

    # The cluster DaskEngine("local", jobs) starts, here started by hand so that its
    # start-up (and the workers' first imports) is timed apart from the work.
    t0 = time.perf_counter()
    cluster = distributed.LocalCluster(
        n_workers=jobs, threads_per_worker=1, processes=True, dashboard_address=":0"
    )
    with distributed.Client(cluster) as client:
        client.wait_for_workers(jobs)
        bases = client.run(_warm_workers)
    started = time.perf_counter() - t0
    try:
        out = _analyse(run_dir, DaskEngine(cluster.scheduler_address, jobs))
    finally:
        cluster.close()
    return {**out, "workers": jobs, "startup_s": started, "worker_base_bytes": max(bases.values())}


def _m_dask_local(run_dir: Path, jobs: int) -> dict[str, Any]:
    from traceinspect.pod import DaskEngine

    return {**_analyse(run_dir, DaskEngine("local", jobs)), "workers": jobs}


def _m_merged(run_dir: Path, jobs: int) -> dict[str, Any]:
    import traceinspect

    t0 = time.perf_counter()
    trace = traceinspect.load(run_dir, use_cache=False)
    events = len(trace.events) + len(trace.frames.aggregated_events)
    t1 = time.perf_counter()
    return {"wall_s": t1 - t0, "workers": 1, "events": events}


def _m_events(path: Path, jobs: int) -> dict[str, Any]:
    return {"wall_s": 0.0, "events": count_events(path)}


CHILD_METHODS = {
    "events": _m_events,
    "serial": _m_serial,
    "processes": _m_processes,
    "dask": _m_dask,
    "dask-local": _m_dask_local,
    "merged": _m_merged,
}


def _child(config: str, run_dir: Path, jobs: int) -> dict[str, Any]:
    _imports()
    import traceinspect

    if not Path(traceinspect.__file__).resolve().is_relative_to(ROOT):
        raise RuntimeError(f"measuring {traceinspect.__file__}, not this checkout ({ROOT})")
    base = _self_peak_bytes()
    out = CHILD_METHODS[config](run_dir, jobs)
    # Read after the pool / cluster is closed: only then are its workers waited for.
    return {
        **out,
        "parent_base_bytes": base,
        "parent_peak_bytes": _self_peak_bytes(),
        "worker_peak_bytes": _children_peak_bytes(),
    }


# --- the inputs ----------------------------------------------------------------------------


def run_directory(source: Path, hosts: int, root: Path = DATA) -> Path:
    """``<root>/pod_<hosts>[_<source>]/host00.xplane.pb ...``: ``hosts`` names for
    ``source``, hard-linked (copied where links fail); kept while they still match it."""
    stem = source.name.removesuffix(".gz").removesuffix(".xplane.pb")
    run_dir = root / (f"pod_{hosts}" if source == REAL else f"pod_{hosts}_{stem}")
    run_dir.mkdir(parents=True, exist_ok=True)
    src = source.stat()
    for i in range(hosts):
        dest = run_dir / f"host{i:02d}.xplane.pb"
        if dest.exists():
            st = dest.stat()
            if dest.samefile(source) or (st.st_size, st.st_mtime) == (src.st_size, src.st_mtime):
                continue
            dest.unlink()
        try:
            os.link(source, dest)
        except OSError:
            shutil.copy2(source, dest)
    return run_dir


def _warm(run_dir: Path) -> None:
    # Read each distinct file once so every configuration finds the hosts in the page cache.
    seen: set[tuple[int, int]] = set()
    for path in sorted(run_dir.glob("*.xplane.pb")):
        st = path.stat()
        if (st.st_dev, st.st_ino) in seen:
            continue
        seen.add((st.st_dev, st.st_ino))
        with path.open("rb") as fh:
            while fh.read(64 * MB):
                pass


# --- the parent: runs the children, prints the table ----------------------------------------


@dataclass
class Result:
    hosts: int
    config: str
    jobs: int
    runs: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None

    @property
    def best(self) -> dict[str, Any]:
        return min(self.runs, key=lambda r: r["wall_s"])

    @property
    def ok(self) -> bool:
        return bool(self.runs) and self.error is None


def _run_child(config: str, run_dir: Path, jobs: int) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--_child", config, str(run_dir)]
    cmd += ["--jobs", str(jobs)]
    # This checkout's package (not an installed copy), in the child and the workers it starts.
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr + proc.stdout).strip().splitlines()[-5:])
        raise RuntimeError(f"{config} failed (exit {proc.returncode}):\n{tail}")
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def _measure(config: str, run_dir: Path, hosts: int, jobs: int, repeat: int) -> Result:
    res = Result(hosts, config, jobs)
    for _ in range(repeat):
        print(f"  {hosts} hosts, {config} ...", file=sys.stderr, flush=True)
        try:
            run = _run_child(config, run_dir, jobs)
        except RuntimeError as exc:
            res.error = str(exc)
            return res
        # The box is shared: the 1-minute load average as the run ends says how much.
        run["load_avg"] = os.getloadavg()[0]
        if run.get("errors"):
            res.error = f"{hosts - run['hosts_ok']} host(s) failed: {run['errors'][0]}"
            return res
        res.runs.append(run)
    return res


def _mib(n: int) -> str:
    return f"{n / MB:,.0f}" if n else "-"


# The pod targets: a worker peaks at no more than this many times one host's file,
# and the pod's time scales with hosts / workers (shown: serial time / (wall x workers), the
# share of the ideal speed-up reached; met from this share).
WORKER_FILE_FACTOR = 4
SCALING_SHARE = 0.8


def report(results: list[Result], file_bytes: int = 0) -> None:
    cols = (
        ("hosts", 5),
        ("engine", 28),
        ("workers", 7),
        ("wall s", 8),
        ("s/host", 7),
        ("vs serial", 9),
        ("start-up s", 10),
        ("parent MiB", 10),
        ("worker MiB", 10),
        ("load", 5),
    )
    header = " ".join(
        f"{name:>{w}}" if i != 1 else f"{name:{w}}" for i, (name, w) in enumerate(cols)
    )
    print(header)
    print("-" * len(header))
    serial = {r.hosts: r.best["wall_s"] for r in results if r.config == "serial" and r.ok}
    for r in results:
        label = LABELS[r.config]
        if not r.ok:
            print(f"{r.hosts:5} {label:28} ERROR: {r.error}")
            continue
        b = r.best
        ref = serial.get(r.hosts)
        speedup = f"{ref / b['wall_s']:.2f}x" if ref and r.config != "merged" else "-"
        startup = f"{b['startup_s']:.1f}" if "startup_s" in b else ""
        parent = max(run["parent_peak_bytes"] for run in r.runs)
        worker = max(run["worker_peak_bytes"] for run in r.runs)
        print(
            f"{r.hosts:5} {label:28} {b['workers']:7} {b['wall_s']:8.1f} "
            f"{b['wall_s'] / r.hosts:7.2f} {speedup:>9} {startup:>10} "
            f"{_mib(parent):>10} {_mib(worker):>10} {b['load_avg']:5.1f}"
        )
    base = min(run["parent_base_bytes"] for r in results if r.ok for run in r.runs)
    print(
        "\nvs serial: the serial wall time / this one (start-up not counted); parent MiB: "
        "peak RSS of the process calling analyze_run (with dask it also runs the scheduler; "
        f"{base / MB:,.0f} MiB after its imports); worker MiB: the largest worker's peak RSS; "
        "merged: load() only, no analysis; load: 1-minute load average as the run ended."
    )
    for r in results:
        if r.ok and r.config != "merged":
            b = r.best
            if "startup_s" in b and r.hosts in serial:
                total = b["wall_s"] + b["startup_s"]
                print(
                    f"{r.hosts} hosts, dask with start-up: {total:.1f} s, "
                    f"{serial[r.hosts] / total:.2f}x vs serial"
                )
    verdicts = {
        (r.best["verdict"], r.best["straggler"]) for r in results if r.ok and "verdict" in r.best
    }
    print(f"every analysis: verdict / straggler {sorted(verdicts, key=str)}")
    if file_bytes:
        targets(results, serial, file_bytes)


def targets(results: list[Result], serial: dict[int, float], file_bytes: int) -> None:
    budget = WORKER_FILE_FACTOR * file_bytes
    for r in results:
        if not r.ok or r.config in ("serial", "merged"):
            continue
        b = r.best
        worker = max(run["worker_peak_bytes"] for run in r.runs)
        base = b.get("worker_base_bytes")
        after = f", {base / MB:,.0f} MiB of it before any host (imports)" if base else ""
        print(
            f"target: {r.hosts} hosts, {LABELS[r.config]}: worker peak <= {WORKER_FILE_FACTOR}x "
            f"one host file ({budget / MB:,.0f} MiB): {worker / MB:,.0f} MiB = "
            f"{worker / file_bytes:.1f}x{after}, {'MET' if worker <= budget else 'MISSED'}"
        )
        if r.hosts in serial:
            share = serial[r.hosts] / (b["wall_s"] * b["workers"])
            print(
                f"target: {r.hosts} hosts, {LABELS[r.config]}: time scales with hosts / "
                f"workers: {b['wall_s']:.1f} s against {serial[r.hosts]:.1f} s / "
                f"{b['workers']} = {share:.0%} of the ideal speed-up, "
                f"{'MET' if share >= SCALING_SHARE else 'MISSED'} (>= {SCALING_SHARE:.0%})"
            )
    per_host = {
        (r.config, r.hosts): r.best["wall_s"] / r.hosts
        for r in results
        if r.ok and r.config != "merged"
    }
    for config in sorted({c for c, _ in per_host}):
        counts = sorted(n for c, n in per_host if c == config)
        if len(counts) > 1:
            shown = ", ".join(f"{n} hosts {per_host[(config, n)]:.2f}" for n in counts)
            print(f"s/host by pod size, {LABELS[config]}: {shown}")


def _version(package: str) -> str:
    try:
        return f"{package} {importlib.metadata.version(package)}"
    except importlib.metadata.PackageNotFoundError:
        return f"no {package}"


def _machine() -> str:
    import platform

    # Versions from the installed metadata: importing pandas here would raise the RSS
    # every child starts from (Linux keeps ru_maxrss across fork and exec).
    cpus = os.cpu_count()
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1 << 30)
    versions = ", ".join(_version(p) for p in ("pandas", "distributed"))
    return (
        f"{platform.processor() or platform.machine()}, {cpus} CPUs, {mem:.0f} GiB, "
        f"Python {platform.python_version()}, {versions}, traceinspect from {ROOT}, "
        f"load avg {os.getloadavg()[0]:.2f}"
    )


def _csv(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        epilog="Make the source first: python benchmarks/make_large_trace.py",
    )
    parser.add_argument("--hosts", default="8,32", help="host counts (default: 8,32)")
    parser.add_argument(
        "--configs",
        default=",".join(DEFAULT_CONFIGS),
        help=f"comma-separated subset of: {', '.join(CONFIGS)} (default: "
        f"{','.join(DEFAULT_CONFIGS)})",
    )
    parser.add_argument("--jobs", type=int, default=2, help="workers of the parallel engines")
    parser.add_argument("--repeat", type=int, default=1, help="runs per configuration; best shown")
    parser.add_argument(
        "--source", type=Path, help=f"the file every host is a link of (default: {REAL.name})"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"smoke test: 8 hosts of {SMALL.name} (made if missing)",
    )
    parser.add_argument(
        "--no-merged", action="store_true", help="skip the merged load() memory reference"
    )
    parser.add_argument("--json", type=Path, help="also write every figure to this file")
    parser.add_argument(
        "--workdir",
        type=Path,
        default=DATA,
        help="where the run directories of links are made (default: benchmarks/_data)",
    )
    parser.add_argument("--_child", help=argparse.SUPPRESS)
    parser.add_argument("run_dir", nargs="?", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args._child:
        print(json.dumps(_child(args._child, args.run_dir, args.jobs)))
        return 0

    configs = _csv(args.configs)
    unknown = sorted(set(configs) - set(CONFIGS))
    if unknown:
        parser.error(f"unknown configs {', '.join(unknown)}; choose from {', '.join(CONFIGS)}")
    hosts = sorted({int(n) for n in _csv(args.hosts)})
    source = args.source or REAL
    if args.quick:
        source, hosts = args.source or SMALL, [8]
        if not source.exists() and source == SMALL:
            subprocess.run(
                [sys.executable, str(HERE / "make_large_trace.py"), "--small"], check=True
            )
    if not source.is_file():
        print(
            f"error: {source} not found; make it with python benchmarks/make_large_trace.py",
            file=sys.stderr,
        )
        return 2

    size = source.stat().st_size
    # Counted in a child: decoding here would raise the RSS every later child starts from.
    events = _run_child("events", source, 1)["events"]
    print(f"machine: {_machine()}")
    print(
        f"every host: {source.name}, {size / 1e6:,.1f} MB, {events:,} events (identical "
        "hosts, hard-linked: fine for timing, so no straggler is expected); decode cache "
        f"off; best of {args.repeat}"
    )
    results: list[Result] = []
    for n in hosts:
        run_dir = run_directory(source, n, args.workdir)
        _warm(run_dir)
        print(f"{run_dir}:", file=sys.stderr)
        for config in configs:
            results.append(_measure(config, run_dir, n, args.jobs, args.repeat))
        if n == hosts[0] and not args.no_merged:
            results.append(_measure("merged", run_dir, n, 1, args.repeat))
    print()
    report(results, size)
    print(f"\nmachine after: load avg {os.getloadavg()[0]:.2f}")
    if args.json:
        figures = {
            "machine": _machine(),
            "source": str(source),
            "source_bytes": size,
            "source_events": events,
            "results": [asdict(r) for r in results],
        }
        args.json.write_text(json.dumps(figures, indent=2))
    return 1 if any(r.error for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
