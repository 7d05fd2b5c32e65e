"""`traceinspect events`: export events (with their stats) as a table, CSV, Parquet or JSON."""

from __future__ import annotations

import math
from pathlib import Path

import click

from traceinspect.cli._options import TraceRequest, trace_input, writing
from traceinspect.errors import UsageError


@click.command()
@trace_input
@click.option("--plane", metavar="RE", help="Regular expression on the plane name.")
@click.option("--line", metavar="RE", help="Regular expression on the line (thread) name.")
@click.option("--name", "name_re", metavar="RE", help="Regular expression on the event name.")
@click.option("--host", metavar="RE", help="Regular expression on the host name.")
@click.option(
    "--window",
    nargs=2,
    type=float,
    metavar="START_MS END_MS",
    help="Only events overlapping this window, in ms from the trace's first event.",
)
@click.option("--limit", type=click.IntRange(min=0), help="At most N events (table: 50).")
@click.option(
    "--sort",
    type=click.Choice(["start", "duration", "none"]),
    default="start",
    show_default=True,
    help="Order of the rows ('duration': longest first).",
)
@click.option("--no-stats", is_flag=True, help="Leave out the stat columns.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "csv", "parquet", "json"]),
    default="table",
    show_default=True,
)
@click.option(
    "-o", "--output", type=click.Path(path_type=Path), help="Write to FILE instead of stdout."
)
def events(
    request: TraceRequest,
    plane: str | None,
    line: str | None,
    name_re: str | None,
    host: str | None,
    window: tuple[float, float] | None,
    limit: int | None,
    sort: str,
    no_stats: bool,
    fmt: str,
    output: Path | None,
) -> None:
    """Export the events of a trace, filtered, with one column per stat.

    Times: `start_ns` and `duration_ns` are absolute integer nanoseconds in csv, parquet
    and json; the table shows ms from the trace's first event and durations in us.

    \b
    Examples:
      traceinspect events $(traceinspect sample) --line '^python$' --name PjitFunction
      traceinspect events ./traceinspect_logs --plane 'device:TPU:0' --line 'XLA Ops' \\
          --sort duration --limit 20
      traceinspect events trace.xplane.pb --format parquet -o events.parquet
    """
    from traceinspect.report.events import render_events

    if fmt == "parquet" and output is None:
        raise UsageError("--format parquet writes a binary file: add -o FILE.parquet.")
    if window is not None and not (math.isfinite(window[0]) and math.isfinite(window[1])):
        raise UsageError(f"--window needs two finite times in ms (got {window[0]} {window[1]}).")
    trace = request.load()
    start_ns = end_ns = None
    if window is not None:
        start_ns = trace.start_ns + int(window[0] * 1e6)
        end_ns = trace.start_ns + int(window[1] * 1e6)
    selected = trace.select(
        plane=plane, line=line, name=name_re, host=host, start_ns=start_ns, end_ns=end_ns
    )
    if limit is None and fmt == "table":
        limit = 50
    with writing(output):
        result = render_events(
            trace, selected, fmt=fmt, sort=sort, limit=limit, stats=not no_stats, output=output
        )
        if result.text is not None:
            if output is None:
                click.echo(result.text, nl=not result.text.endswith("\n"))
            else:
                output.write_text(result.text, encoding="utf-8")
    if not request.quiet and result.note:
        click.echo(result.note, err=True)
