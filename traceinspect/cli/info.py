"""`traceinspect info`: what a trace holds."""

from __future__ import annotations

import json

import click

from traceinspect.cli._options import (
    TraceRequest,
    json_option,
    refuse_unused,
    trace_input,
    verbose_option,
)


@click.command()
@trace_input
@json_option
@click.option(
    "--all-lines", is_flag=True, help="Also list lines that hold no events (--json has them all)."
)
@click.pass_context
@verbose_option
def info(
    ctx: click.Context,
    request: TraceRequest,
    as_json: bool,
    all_lines: bool,
) -> None:
    """Show what a trace holds: hosts, planes, lines, backend, steps, profiler options.

    PATH is a *.xplane.pb[.gz] file, a run directory or a TensorBoard log directory
    (the newest run is read; --run picks another).

    \b
    Examples:
      traceinspect info $(traceinspect sample)
      traceinspect info ./traceinspect_logs --json
    """
    from traceinspect.analysis.overview import overview
    from traceinspect.report.info import render_info

    refuse_unused(ctx, [("all_lines", as_json, "is for the text: --json lists every line.")])
    ov = overview(request.load())
    if as_json:
        click.echo(json.dumps(ov.to_dict(), indent=2))
    else:
        click.echo(render_info(ov, all_lines=all_lines))
