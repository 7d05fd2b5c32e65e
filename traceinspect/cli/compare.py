"""`traceinspect compare`: two traces side by side, before and after a change."""

from __future__ import annotations

import json

import click

from traceinspect.cli._options import TraceRequest, json_option, verbose_option
from traceinspect.cli._trace_input import refuse_run_of_a_file


@click.command()
@click.argument("before")
@click.argument("after")
@click.option(
    "--run-before",
    metavar="NAME",
    help="Which run of BEFORE to read, if it is a log directory (default: the newest).",
)
@click.option(
    "--run-after",
    metavar="NAME",
    help="Which run of AFTER to read, if it is a log directory (default: the newest).",
)
@click.option("--no-cache", is_flag=True, help="Decode the files again instead of using the cache.")
@click.option("-q", "--quiet", is_flag=True, help="No progress or notes on stderr.")
@json_option
@verbose_option
def compare(
    before: str,
    after: str,
    run_before: str | None,
    run_after: str | None,
    no_cache: bool,
    quiet: bool,
    as_json: bool,
) -> None:
    """Compare two traces of one training loop, before and after a change.

    Analyses both, then shows step time (median, p90), the device's busy share and work,
    the per-step ledger (each step's wall time split into device busy time and idle time by
    cause, in ms per step, the part that moved most marked) and the verdict side by side,
    with one sentence saying what changed. Per step, so captures of different lengths
    compare. BEFORE and AFTER are each a trace file, a run directory or a log directory.

    \b
    Examples:
      traceinspect compare $(traceinspect sample) ./traceinspect_logs
      traceinspect compare logs_before/ logs_after/ --json
    """
    from traceinspect.analysis.analyze import analyze
    from traceinspect.analysis.compare import compare as run_compare
    from traceinspect.report.compare import render_comparison
    from traceinspect.xplane.fs import to_location

    for path, run, option in (
        (before, run_before, "--run-before"),
        (after, run_after, "--run-after"),
    ):
        refuse_run_of_a_file(to_location(path), run, option)
    analyses = [
        analyze(TraceRequest(to_location(path), run, no_cache, "auto", quiet, not as_json).load())
        for path, run in ((before, run_before), (after, run_after))
    ]
    result = run_compare(*analyses)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2))
    else:
        click.echo(render_comparison(result))
