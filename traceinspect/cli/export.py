"""`traceinspect export`: the trace and the analysis' findings as Perfetto / Chrome JSON."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import click

from traceinspect.cli._options import (
    Renamed,
    RenamingCommand,
    TraceRequest,
    json_option,
    parse_range,
    trace_input,
    verbose_option,
    window_option,
    writing,
)
from traceinspect.errors import UsageError

# Kept in step with traceinspect.report.perfetto.MAX_EVENTS (not imported: it needs pandas,
# and `--help` stays light; tests/test_export.py checks they agree).
MAX_EVENTS = 1_000_000


@click.command(cls=RenamingCommand, renamed=[Renamed("--steps", "--step-range")])
@trace_input
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The file to write (gzip-compressed when it ends in .gz: trace.json.gz). Default: "
    "RUN.perfetto.json.gz (RUN-HOST... with --host) in the current directory, RUN the name "
    "of the run directory.",
)
@click.option(
    "--step-range",
    "steps",
    metavar="A:B",
    callback=lambda _ctx, _param, value: parse_range(value, int, single=True),
    help="Only analysed steps A to B-1, by position from 0 (as Python slices: 5:, :10, -3:); "
    "A alone: that step. (Was --steps A:B; --steps is a count in the other commands.)",
)
@window_option(
    "Only this window, in ms from the trace's first event (with --step-range: their overlap)."
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
@json_option
@verbose_option
def export(
    request: TraceRequest,
    output: Path | None,
    steps: tuple[int | None, int | None] | None,
    window: tuple[float | None, float | None] | None,
    max_events: int,
    host: str | None,
    as_json: bool,
) -> None:
    """Write the trace and what analyze found as Chrome trace-event JSON for Perfetto.

    The file holds the events of the analysed steps (every plane a process, every line a
    thread) and traceinspect's own tracks: each step, each idle gap named by its cause
    with its evidence, and the verdict. Open it at https://ui.perfetto.dev (or
    chrome://tracing). Times are microseconds from the trace's first event, as analyze's
    start_ms.

    \b
    Examples:
      traceinspect export $(traceinspect sample)
      traceinspect export $(traceinspect sample) -o trace.json.gz
      traceinspect export ./traceinspect_logs -o steps.json.gz --step-range 10:15
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
    if output is None:
        output = Path(f"{located.run.path.name}{'-' + host if host else ''}.perfetto.json.gz")
    result = perfetto_trace(
        trace,
        analyze(trace),
        steps=None if steps is None else slice(*steps),
        window_ms=window_ms,
        max_events=max_events,
    )
    with writing(output):
        size = result.write(output)
    if as_json:
        out = {
            "output": str(output),
            "bytes": size,
            "events": result.event_count,
            "left_out": result.dropped_count,
            "left_out_by_kind": result.dropped,
        }
        click.echo(json.dumps(out, indent=2))
        return
    if request.quiet:
        return
    if result.dropped_count:
        total = result.kept + result.dropped_count
        click.echo(
            f"Left out {result.dropped_count:,} of {total:,} events of the trace, the shortest "
            f"({_kinds(result.dropped)}), to stay within --max-events {max_events:,}; "
            "--step-range or --window export a shorter stretch whole.",
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
