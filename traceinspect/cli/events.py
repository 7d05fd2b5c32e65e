"""`traceinspect events`: export events (with their stats) as a table, CSV, Parquet or JSON."""

from __future__ import annotations

import math
from pathlib import Path

import click

from traceinspect.cli._options import (
    Renamed,
    RenamingCommand,
    TraceRequest,
    json_flag,
    refuse_unused,
    trace_input,
    verbose_option,
    window_option,
    writing,
)
from traceinspect.errors import UsageError


def _two_numbers(values: list[str]) -> bool:
    """The old ``--window START_MS END_MS``: two numbers, not ``START_MS:END_MS``."""
    try:
        [float(v) for v in values]
    except ValueError:
        return False
    return True


# Old spellings, read as the new ones for a release (CHANGELOG: Deprecated): --host is a
# host's exact name in the other commands, --window one START_MS:END_MS argument in export.
RENAMED = [
    Renamed("--host", "--host-re"),
    Renamed("--window", "--window", nargs=2, join=":", applies=_two_numbers),
]


@click.command(cls=RenamingCommand, renamed=RENAMED)
@trace_input
@click.option("--plane", metavar="RE", help="Regular expression on the plane name.")
@click.option("--line", metavar="RE", help="Regular expression on the line (thread) name.")
@click.option("--name", "name_re", metavar="RE", help="Regular expression on the event name.")
@click.option("--host-re", "host", metavar="RE", help="Regular expression on the host name.")
@window_option(
    "Only events overlapping this window, in ms from the trace's first event; either end "
    "may be left out (100: from 100 ms on)."
)
@click.option(
    "--limit",
    type=click.IntRange(min=0),
    help="At most N events (default: all; the table 50); 0: all of them.",
)
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
@json_flag("The same as --format json: the events as one JSON array of objects.")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write to FILE instead of stdout.",
)
@click.pass_context
@verbose_option
def events(
    ctx: click.Context,
    request: TraceRequest,
    plane: str | None,
    line: str | None,
    name_re: str | None,
    host: str | None,
    window: tuple[float | None, float | None] | None,
    limit: int | None,
    sort: str,
    no_stats: bool,
    fmt: str,
    as_json: bool,
    output: Path | None,
) -> None:
    """Export the events of a trace, filtered, with one column per stat.

    Times: `start_ns` and `duration_ns` are integer nanoseconds in csv, parquet and json,
    `start_ns` on the trace's clock: from the start of the profiling session (jax.profiler
    writes its times relative to it), not Unix time. The table shows ms from the trace's
    first event (as --window takes them, and analyze's start_ms) and durations in us.

    \b
    Examples:
      traceinspect events $(traceinspect sample) --line '^python$' --name PjitFunction
      traceinspect events ./traceinspect_logs --plane 'device:TPU:0' --line 'XLA Ops' \\
          --sort duration --limit 20
      traceinspect events trace.xplane.pb --format parquet -o events.parquet
    """
    from traceinspect.report.events import render_events

    refuse_unused(ctx, [("fmt", as_json and fmt != "json", "cannot go with --json.")])
    fmt = "json" if as_json else fmt
    if fmt == "parquet" and output is None:
        raise UsageError("--format parquet writes a binary file: add -o FILE.parquet.")
    if window is not None and not all(end is None or math.isfinite(end) for end in window):
        raise UsageError(
            f"--window needs finite times in ms (got {window[0]}:{window[1]}); leave an end "
            "out for the trace's own."
        )
    trace = request.load()
    start_ns = end_ns = None
    if window is not None:
        start_ms, end_ms = window
        start_ns = None if start_ms is None else trace.start_ns + int(start_ms * 1e6)
        end_ns = None if end_ms is None else trace.start_ns + int(end_ms * 1e6)
    selected = trace.select(
        plane=plane, line=line, name=name_re, host=host, start_ns=start_ns, end_ns=end_ns
    )
    if limit is None and fmt == "table":
        limit = 50
    elif limit == 0:
        limit = None
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
