"""`traceinspect view`: open the run in XProf's web UI, and say where the worst gaps are."""

from __future__ import annotations

import json
import signal
from dataclasses import replace
from types import FrameType
from typing import TYPE_CHECKING

import click

from traceinspect.cli._options import (
    TraceRequest,
    json_option,
    refuse_unused,
    trace_input,
    verbose_option,
)
from traceinspect.errors import AnalysisError, TraceInspectError

if TYPE_CHECKING:
    from traceinspect.analysis.result import Analysis
    from traceinspect.viewer import XProfServer
    from traceinspect.xplane.locate import Located


@click.command()
@trace_input
@json_option
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=None,
    help="The port XProf serves on [default: a free one].",
)
@click.option(
    "--top",
    type=click.IntRange(min=0),
    default=5,
    show_default=True,
    help="How many of the longest gaps to list.",
)
@click.option("--host", metavar="NAME", help="Multi-host runs: list this host's gaps only.")
@click.option("--no-analyze", is_flag=True, help="Only serve XProf; do not analyse the trace.")
@click.pass_context
@verbose_option
def view(
    ctx: click.Context,
    request: TraceRequest,
    as_json: bool,
    port: int | None,
    top: int,
    host: str | None,
    no_analyze: bool,
) -> None:
    """Open the run in XProf's web UI, and say where its worst gaps are.

    Starts XProf (pip install 'traceinspect[xprof]') on the run's log directory, prints
    its address, the verdict and the longest idle gaps at their time in XProf's trace
    viewer, then serves until Ctrl-C. A file or run directory outside a log directory is
    served through a private one that links to it. XProf writes cache files into the log
    directory it serves, and listens on every network interface of the machine.

    \b
    Examples:
      traceinspect view $(traceinspect sample)
      traceinspect view ./traceinspect_logs --run 2025_01_31_12_00_00 --port 8791
      traceinspect view ./pod_logs --host host2 --top 10
    """
    refuse_unused(
        ctx,
        [
            ("top", no_analyze, "lists the analysis' gaps: not with --no-analyze."),
            ("host", no_analyze, "picks the host whose gaps are listed: not with --no-analyze."),
        ],
    )
    from traceinspect.report.view import render_view, worst_gaps
    from traceinspect.viewer import start_xprof
    from traceinspect.xplane.locate import locate

    located = locate(request.path, request.run)
    with start_xprof(located, port) as server:
        analyses, notes = ({}, []) if no_analyze else _analyses(request, located, host)
        runs = server.wait_ready()
        if as_json:
            out = {
                "url": server.url,
                "logdir": str(server.logdir.path),
                "run": server.logdir.run,
                "runs": runs,
                "verdicts": {name: a.verdict for name, a in analyses.items()},
                "gaps": worst_gaps(analyses, top),
                "notes": notes,
            }
            click.echo(json.dumps(out, indent=2))
        else:
            click.echo(render_view(server.url, server.logdir.run, runs, analyses, top, notes))
        _serve(server, request.quiet)


def _analyses(
    request: TraceRequest, located: Located, host: str | None
) -> tuple[dict[str, Analysis], list[str]]:
    """Each host's analysis (one host: its own), or a note saying why there is none."""
    from traceinspect.analysis.analyze import analyze
    from traceinspect.pod import analyze_run, host_files

    try:
        if host is not None:
            (one,) = host_files(located, [host])
            return {host: analyze(replace(request, path=one.path, run=None).load())}, []
        if len(located.run.files) == 1:
            return {located.run.files[0].host: analyze(request.load(located))}, []
        pod = analyze_run(located, decoder=request.decoder, use_cache=not request.no_cache)
        return pod.analyses, []
    except AnalysisError as exc:
        return {}, [f"no gaps to list: {exc}"]


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _serve(server: XProfServer, quiet: bool) -> None:
    """Until Ctrl-C (or SIGTERM, SIGHUP): then XProf is stopped and the command ends with 0."""
    saved = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        code = server.wait()
    except KeyboardInterrupt:
        if not quiet:
            click.echo("Stopping XProf.", err=True)
        return
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
    raise TraceInspectError(f"XProf stopped by itself (exit code {code}): {server.last_words()}")
