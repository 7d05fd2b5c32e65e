"""Analyse a multi-host run: every host's file on its own (in parallel), then the pod view.

>>> import traceinspect
>>> pod = traceinspect.analyze_run("gs://bucket/run/tensorboard", jobs=8)
>>> pod.straggler
>>> pod.hosts            # one row per host
>>> pod.steps            # (step, host) rows for the steps every host traced

The per-host work (read the file, analyse it, keep the compact result) runs in this
process, a local process pool (``jobs``, default: every usable core, capped by memory) or
a Dask cluster (``scheduler``). Only the workers hold a host's frames, one host at a
time; what comes back is the analysis with its longest gaps. :func:`load_host` reads one
host's full frames on demand.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from traceinspect import schema as S
from traceinspect.analysis.straggler import HostResult, PodAnalysis, analyze_pod
from traceinspect.errors import AnalysisError, TraceInspectError, UsageError
from traceinspect.pod._engines import (
    DaskEngine,
    Engine,
    ProcessEngine,
    SerialEngine,
    default_jobs,
    make_engine,
)
from traceinspect.xplane.fs import URLPath
from traceinspect.xplane.locate import HostFile, Located, locate
from traceinspect.xplane.reader import DecoderName

if TYPE_CHECKING:
    from traceinspect.trace import Trace

__all__ = [
    "DaskEngine",
    "Engine",
    "HostResult",
    "PodAnalysis",
    "ProcessEngine",
    "SerialEngine",
    "analyze_host",
    "analyze_run",
    "default_jobs",
    "host_files",
    "load_host",
    "make_engine",
]

#: ``progress(hosts_done, hosts_total, result)``, called as each host finishes.
HostProgress = Callable[[int, int, HostResult], object]

# Gaps kept per host in the results (with their evidence): the rest stay in the worker.
KEPT_GAPS = 50


@dataclass(frozen=True)
class HostTask:
    """What a worker needs to analyse one host: picklable, no open files."""

    host: str
    location: str
    size: int
    decoder: DecoderName | None = None
    use_cache: bool = True


def analyze_host(task: HostTask) -> HostResult:
    """Read and analyse one host's file; failures come back as the result's ``error``
    (one bad host out of 64 should not hide the other 63)."""
    from traceinspect import results
    from traceinspect.analysis.analyze import analyze
    from traceinspect.trace import load

    started = time.perf_counter()
    try:
        located = locate(task.location)
        stored = results.load(located) if task.use_cache else None
        if stored is not None:
            analysis = stored
        else:
            analysis = analyze(load(located, decoder=task.decoder, use_cache=task.use_cache))
            if task.use_cache:
                results.store(located, analysis)
    except TraceInspectError as exc:
        return HostResult(
            host=task.host,
            location=task.location,
            file_bytes=task.size,
            analysis=None,
            error=str(exc),
            seconds=time.perf_counter() - started,
            **_from_sidecar(task.location),
        )
    gaps = analysis.gap_columns
    if len(gaps[S.DURATION_NS]) > KEPT_GAPS:
        keep = np.sort(analysis.longest_gaps(KEPT_GAPS))
        gaps = {name: column[keep] for name, column in gaps.items()}
    return HostResult(
        host=task.host,
        location=task.location,
        file_bytes=task.size,
        analysis=replace(analysis, gap_columns=gaps, timeline=None),
        seconds=time.perf_counter() - started,
    )


def _from_sidecar(location: str) -> dict[str, Any]:
    """For a host whose trace could not be analysed (a window the analysis refused, a trace
    without events), what its capture sidecar still says: its batch digests, and the checks
    of the pipeline as the script built it."""
    from traceinspect.analysis.findings import sidecar_findings
    from traceinspect.trace import read_sidecar

    try:
        sidecar = read_sidecar(locate(location))
    except (TraceInspectError, OSError):
        return {}
    grain = sidecar.grain if sidecar is not None else None
    return {
        "first_batches": grain.first_batches if grain is not None else (),
        "findings": sidecar_findings(sidecar),
    }


def host_files(located: Located, hosts: Sequence[str] | None = None) -> tuple[HostFile, ...]:
    """The run's host files, or the named ones (an unknown name is an error listing the
    hosts there are)."""
    files = located.run.files
    if not hosts:
        return files
    by_name = {f.host: f for f in files}
    unknown = [h for h in hosts if h not in by_name]
    if unknown:
        shown = ", ".join(sorted(by_name)[:20])
        raise UsageError(
            f"{located.requested}: no host named {unknown[0]!r} in run {located.run.name}; "
            f"hosts: {shown}."
        )
    return tuple(by_name[h] for h in hosts)


def analyze_run(
    path: str | os.PathLike[str] | URLPath | Located,
    *,
    run: str | None = None,
    hosts: Sequence[str] | None = None,
    jobs: int | None = None,
    scheduler: str | None = None,
    engine: Engine | None = None,
    decoder: DecoderName | None = None,
    use_cache: bool = True,
    progress: HostProgress | None = None,
) -> PodAnalysis:
    """Analyse every host of a run (a run directory or log directory, local or an fsspec
    URL) and compare them.

    ``jobs``: local worker processes (default: every usable core, no more than memory
    allows for the largest files). ``scheduler``: the address of a Dask scheduler to run
    the per-host work on instead (``"local"`` starts a local Dask cluster).
    """
    # A Located (what locate() made of a path) is not listed again.
    located = path if isinstance(path, Located) else locate(path, run)
    files = host_files(located, hosts)
    sizes = [f.size for f in files]
    tasks = [
        HostTask(f.host, f.location, size, decoder, use_cache)
        for f, size in zip(files, sizes, strict=True)
    ]
    notes: tuple[str, ...] = ()
    if engine is None and jobs is None and scheduler is None:
        jobs, reason = default_jobs(sizes)
        if reason.startswith("memory") and len(tasks) > 1:
            notes = (f"Analysed {jobs} host(s) at a time, limited by {reason}.",)
    chosen = engine or make_engine(jobs, scheduler, sizes)
    results: list[HostResult | None] = [None] * len(tasks)
    finished_in_order = chosen.map_unordered(analyze_host, tasks)
    for done, (index, result) in enumerate(finished_in_order, start=1):
        results[index] = result
        if progress is not None:
            progress(done, len(tasks), result)
    finished = tuple(r for r in results if r is not None)
    pod = analyze_pod(finished, path=str(located.requested), run=located.run.name)
    if not any(r.ok for r in finished) and not pod.findings:
        # With findings from the hosts' sidecars the pod still says something worth
        # printing (its verdict is "error"); without, there is nothing but the errors.
        first = finished[0].error if finished else "no host files"
        raise _all_failed(located, len(finished), first)
    return replace(pod, notes=pod.notes + notes) if notes else pod


def _all_failed(located: Located, n: int, first: str | None) -> TraceInspectError:
    if n == 1:
        return AnalysisError(first or f"{located.requested}: the host could not be analysed.")
    return AnalysisError(
        f"{located.requested}: none of the {n} hosts could be analysed; the first says: {first}"
    )


def load_host(pod: PodAnalysis, host: str, **load_kwargs: Any) -> Trace:
    """One host's full frames, read again (the pod analysis keeps only compact results).

    >>> trace = traceinspect.pod.load_host(pod, "host2")
    """
    from traceinspect.trace import load

    for r in pod.results:
        if r.host == host:
            return load(r.location, **load_kwargs)
    names = ", ".join(str(h) for h in pod.hosts.index)
    raise UsageError(f"no host named {host!r} in this run; hosts: {names}.")
