"""`traceinspect analyze`: why the device was idle, gap by gap."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import click

from traceinspect.cli._options import (
    VERBOSE,
    TraceRequest,
    json_option,
    note_newest_run,
    refuse_unused,
    trace_input,
    verbose_option,
    writing,
)
from traceinspect.cli._progress import StatusLine
from traceinspect.errors import UsageError

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from traceinspect.analysis.result import Analysis
    from traceinspect.analysis.straggler import HostResult
    from traceinspect.trace import Trace
    from traceinspect.xplane.locate import Located

log = logging.getLogger(__name__)


@click.command()
@trace_input
@json_option
@click.option(
    "--top",
    "top_gaps",
    type=click.IntRange(min=0),
    default=5,
    show_default=True,
    help="How many of the longest gaps the text shows with their evidence.",
)
@click.option("--all-gaps", is_flag=True, help="With --json: every gap (default: the 50 longest).")
@click.option(
    "--plots",
    "plots_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write the timeline, per-step and gap plots as PNG files into this directory.",
)
@click.option(
    "--html",
    "html_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write one self-contained HTML page: verdict, numbers, what to do, gaps and plots.",
)
@click.option(
    "--host",
    "hosts",
    multiple=True,
    metavar="NAME",
    help="Multi-host runs: analyse only this host (repeat for several).",
)
@click.option(
    "--jobs",
    "-j",
    type=int,
    default=None,
    help="Multi-host runs: local worker processes [default: every usable core, capped by memory].",
)
@click.option(
    "--scheduler",
    metavar="ADDRESS",
    help="Multi-host runs: analyse the hosts on this Dask scheduler (tcp://host:8786), or "
    "'local' for a local Dask cluster; needs traceinspect[distributed].",
)
@click.pass_context
@verbose_option
def analyze(
    ctx: click.Context,
    request: TraceRequest,
    as_json: bool,
    top_gaps: int,
    all_gaps: bool,
    plots_dir: Path | None,
    html_file: Path | None,
    hosts: tuple[str, ...],
    jobs: int | None,
    scheduler: str | None,
) -> None:
    """Find every idle gap of the device and say why it happened.

    Each gap inside a complete step is attributed to input (waiting for the next batch),
    sync (the loop read a device value, so the next step was prepared too late), compile,
    other host work, or unknown; the verdict names the cause that costs most.

    A run with one trace file per host is analysed host by host, in parallel, then
    across hosts: steps aligned by step number, the slowest host per step, and the
    straggler, the host whose device idles for input while the others wait for it in
    their collectives.

    \b
    Examples:
      traceinspect analyze $(traceinspect sample)
      traceinspect analyze ./traceinspect_logs --json
      traceinspect analyze ./traceinspect_logs --plots plots/ --html report.html
      traceinspect analyze ./pod_logs --jobs 2
      traceinspect analyze gs://bucket/run/tensorboard --scheduler tcp://10.0.0.2:8786
    """
    from traceinspect.xplane.locate import locate

    refuse_unused(
        ctx,
        [
            ("all_gaps", not as_json, "goes with --json (the text shows --top N gaps)."),
            ("top_gaps", as_json, "sets the gaps of the text; --json holds 50, --all-gaps all."),
        ],
    )
    located = locate(request.path, request.run)
    if jobs is not None and jobs < 1:
        raise UsageError(f"--jobs must be at least 1 (got {jobs}).")
    if len(hosts) == 1 or (not hosts and len(located.run.files) == 1):
        # One host: the single-trace analysis (of that host's file).
        if hosts:
            from traceinspect.pod import host_files

            (one,) = host_files(located, hosts)
            request = replace(request, path=one.path, run=None)
            located = locate(one.path)
    else:
        _analyze_pod(request, located, hosts, jobs, scheduler, as_json, plots_dir, html_file)
        return
    from traceinspect import answers

    # What the answer is printed as: a second run that prints it the same way, of a trace
    # that did not change, prints the text kept from the first (no numpy, no pandas).
    printed = f"json:{'all' if all_gaps else 50}" if as_json else f"text:{top_gaps}"
    if not request.no_cache and plots_dir is None and html_file is None:
        kept = answers.read(located, printed)
        if kept is not None:
            note_newest_run(located, request.path, request.quiet)
            if ctx.meta.get(VERBOSE):
                _say_kept_reasoning(located)
            with writing(None):
                click.echo(kept)
            return
    result, trace = _one_host_analysis(request, located)
    if as_json:
        text = json.dumps(result.to_dict(max_gaps=None if all_gaps else 50), indent=2)
    else:
        from traceinspect.report.analyze import render_analysis

        text = render_analysis(result, top_gaps=top_gaps)
    with writing(None):
        click.echo(text)
    if not request.no_cache:
        answers.write(located, printed, text)
    if plots_dir is not None or html_file is not None:
        from traceinspect.report.html import render_html
        from traceinspect.report.plots import analysis_figures

        # The plots draw the trace itself: read it when the result came from the cache.
        shown = trace if trace is not None else request.load(located)
        _write_reports(
            analysis_figures(shown, result),
            lambda figures: render_html(shown, result, figures=figures),
            plots_dir,
            html_file,
            quiet=request.quiet,
        )


def _one_host_analysis(request: TraceRequest, located: Located) -> tuple[Analysis, Trace | None]:
    """The analysis of one host's trace: the stored one when the trace (and its sidecar)
    did not change since it was made, else made now from the trace (and stored); the
    trace too when it was read."""
    from traceinspect import answers

    if not request.no_cache and (kept := answers.analysis_path(located)) and kept.exists():
        from traceinspect import results

        stored = results.load(located)
        if stored is not None:
            note_newest_run(located, request.path, request.quiet)
            _say_reasoning(stored)
            return stored, None
    # The file decodes (without the GIL) while numpy and the analysis are imported.
    finish_loading = request.start_load(located)
    from traceinspect.analysis.analyze import analyze as run_analysis

    trace = finish_loading()
    result = run_analysis(trace)
    if not request.no_cache:
        from traceinspect import results

        results.store(located, result)
    return result, trace


def _say_kept_reasoning(located: Located) -> None:
    """-v on a kept answer: the reasoning of the analysis kept beside it (read for that
    alone), or where to find it when that analysis is gone."""
    from traceinspect import results

    stored = results.load(located)
    if stored is None:
        log.info("the answer came from the cache: run with --no-cache to see the reasoning")
    else:
        _say_reasoning(stored)


def _say_reasoning(analysis: Analysis) -> None:
    """For -v, the verdict's reasoning from a kept analysis, in the line the analysis logs
    when it decides (``analysis.result.reasoning``): the record keeps the decision and the
    idle shares it read."""
    from traceinspect.analysis.result import reasoning

    decision = analysis.decision
    if decision is None:
        log.info("the kept analysis records no decision: run with --no-cache to see the reasoning")
        return
    log.info("%s", reasoning(decision, analysis.cause_fractions))


def _write_reports(
    figures: Mapping[str, Figure],
    page: Callable[[Mapping[str, Figure]], str],
    plots_dir: Path | None,
    html_file: Path | None,
    quiet: bool,
) -> None:
    """--plots and --html: the figures are drawn once for both; ``page`` renders the
    HTML around them."""
    from traceinspect.report.plots import save_figures

    written: list[Path] = []
    if plots_dir is not None:
        written += save_figures(figures, plots_dir)
    if html_file is not None:
        with writing(html_file):
            html_file.parent.mkdir(parents=True, exist_ok=True)
            html_file.write_text(page(figures), encoding="utf-8")
        written.append(html_file)
    if not quiet:
        for path in written:
            click.echo(f"Wrote {path}", err=True)


def _analyze_pod(
    request: TraceRequest,
    located: Located,
    hosts: tuple[str, ...],
    jobs: int | None,
    scheduler: str | None,
    as_json: bool,
    plots_dir: Path | None,
    html_file: Path | None,
) -> None:
    """Several hosts: per-host analyses on the chosen engine, then the pod view."""
    from traceinspect.pod import analyze_run
    from traceinspect.report.pod import render_pod

    with StatusLine.on_stderr(request.quiet, as_json) as line:

        def progress(done: int, total: int, result: HostResult) -> None:
            status = "failed" if result.error else f"{result.seconds:.1f} s"
            line.show(f"Analysed {done}/{total} hosts ({result.host}: {status})", force=True)

        pod = analyze_run(
            located,
            hosts=hosts or None,
            jobs=jobs,
            scheduler=scheduler,
            decoder=request.decoder,
            use_cache=not request.no_cache,
            progress=progress,
        )
    note_newest_run(located, request.path, request.quiet)
    if as_json:
        click.echo(json.dumps(pod.to_dict(), indent=2))
    else:
        click.echo(render_pod(pod))
    if plots_dir is not None or html_file is not None:
        from traceinspect.report.html import render_pod_html
        from traceinspect.report.pod_plots import pod_figures

        _write_reports(
            pod_figures(pod),
            lambda figures: render_pod_html(pod, figures=figures),
            plots_dir,
            html_file,
            quiet=request.quiet,
        )
