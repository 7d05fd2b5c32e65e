"""`traceinspect export`: the trace and the analysis' findings as Perfetto / Chrome JSON."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from traceinspect.cli._options import TraceRequest, trace_input, writing
from traceinspect.errors import UsageError

# Kept in step with traceinspect.report.perfetto.MAX_EVENTS (not imported: it needs pandas,
# and `--help` stays light; tests/test_export.py checks they agree).
MAX_EVENTS = 1_000_000


def _range(value: str | None, cast: type[int] | type[float], single: bool) -> Any:
    """``A:B`` -> ``(A, B)``, either end optional (None); with ``single``, ``A`` alone
    means ``(A, A + 1)``."""
    if value is None:
        return None
    ends = value.split(":")
    form = "A:B" if single else "START_MS:END_MS"
    try:
        if single and len(ends) == 1:
            return (int(ends[0]), int(ends[0]) + 1)
        if len(ends) != 2:
            raise ValueError
        return tuple(cast(v) if v.strip() else None for v in ends)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not of the form {form}.") from None


@click.command()
@trace_input
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The file to write (gzip-compressed when it ends in .gz: trace.json.gz).",
)
@click.option(
    "--steps",
    metavar="A:B",
    callback=lambda _ctx, _param, value: _range(value, int, single=True),
    help="Only analysed steps A to B-1, by position from 0 (as Python slices: 5:, :10, -3:); "
    "A alone: that step.",
)
@click.option(
    "--window",
    metavar="START_MS:END_MS",
    callback=lambda _ctx, _param, value: _range(value, float, single=False),
    help="Only this window, in ms from the trace's first event (with --steps: their overlap).",
)
@click.option(
    "--max-events",
    type=click.IntRange(min=1),
    default=MAX_EVENTS,
    show_default=True,
    metavar="N",
    help="At most N events in the file: past it the trace's shortest events are left out, "
    "other host threads' first, then the training thread's, then the device's "
    "(traceinspect's tracks always stay).",
)
@click.option("--host", metavar="NAME", help="Multi-host runs: the host to export.")
def export(
    request: TraceRequest,
    output: Path,
    steps: tuple[int | None, int | None] | None,
    window: tuple[float | None, float | None] | None,
    max_events: int,
    host: str | None,
) -> None:
    """Write the trace and what analyze found as Chrome trace-event JSON for Perfetto.

    The file holds the events of the analysed steps (every plane a process, every line a
    thread) and traceinspect's own tracks: each step, each idle gap named by its cause
    with its evidence, and the verdict. Open it at https://ui.perfetto.dev (or
    chrome://tracing). Times are microseconds from the trace's first event, as analyze's
    start_ms.

    \b
    Examples:
      traceinspect export $(traceinspect sample) -o trace.json.gz
      traceinspect export ./traceinspect_logs -o steps.json.gz --steps 10:15
      traceinspect export big.xplane.pb -o part.json.gz --window 1200:1800 --max-events 200000
      traceinspect export ./pod_logs -o host2.json.gz --host host2
    """
    from traceinspect.analysis.analyze import analyze
    from traceinspect.report.perfetto import PERFETTO_UI, perfetto_trace
    from traceinspect.xplane.locate import locate

    window_ms = None
    if window is not None:
        if window[0] is None or window[1] is None:
            raise UsageError("--window needs both ends: START_MS:END_MS.")
        window_ms = (window[0], window[1])
    located = locate(request.path, request.run)
    if host is not None:
        from traceinspect.pod import host_files

        (one,) = host_files(located, [host])
        trace = replace(request, path=one.path, run=None).load()
    elif len(located.run.files) > 1:
        hosts = ", ".join(f.host for f in located.run.files[:20])
        raise UsageError(
            f"{request.path}: {len(located.run.files)} hosts in run {located.run.name} "
            f"({hosts}); export one with --host NAME."
        )
    else:
        trace = request.load(located)
    result = perfetto_trace(
        trace,
        analyze(trace),
        steps=None if steps is None else slice(*steps),
        window_ms=window_ms,
        max_events=max_events,
    )
    with writing(output):
        size = result.write(output)
    if request.quiet:
        return
    if result.dropped_count:
        total = result.kept + result.dropped_count
        click.echo(
            f"Left out {result.dropped_count:,} of {total:,} events of the trace, the shortest "
            f"({_kinds(result.dropped)}), to stay within --max-events {max_events:,}; "
            "--steps or --window export a shorter stretch whole.",
            err=True,
        )
    click.echo(
        f"Wrote {result.event_count:,} events ({_size(size)}) to {output}; "
        f"open it at {PERFETTO_UI} (Open trace file) or chrome://tracing.",
        err=True,
    )


def _size(n: int) -> str:
    return f"{n / 1e6:,.1f} MB" if n >= 1e6 else f"{n / 1e3:,.1f} kB"


def _kinds(dropped: dict[str, int]) -> str:
    return ", ".join(f"{n:,} {kind}" for kind, n in dropped.items() if n)
