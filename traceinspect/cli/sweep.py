"""`traceinspect sweep`: capture and analyse a script once per Grain worker count."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

from traceinspect.cli._options import (
    ProfilerSettings,
    Renamed,
    RenamingCommand,
    json_flag,
    profiler_options,
    verbose_option,
)
from traceinspect.cli._progress import StatusLine, duration

# As traceinspect.sweep.METRICS, without importing the library when the CLI starts.
_METRICS = ("untraced", "typical", "median", "mean")

if TYPE_CHECKING:
    from traceinspect.sweep import SweepProgress, SweepRun


def _worker_counts(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> tuple[int, ...]:
    if value is None:
        raise click.BadParameter("give the counts to try, e.g. --worker-counts 1,2,4,8")
    try:
        return tuple(int(part) for part in value.split(",") if part.strip())
    except ValueError:
        raise click.BadParameter(f"a comma-separated list of integers, got {value!r}") from None


def _describe(run: SweepRun) -> str:
    if run.ok:
        untraced = (
            f"{run.untraced_ms:,.1f} ms/step untraced; traced: "
            if run.untraced_ms is not None
            else ""
        )
        return (
            f"{untraced}median {run.median_ms:,.1f} ms/step (mean {run.mean_ms:,.1f}, "
            f"p90 {run.p90_ms:,.1f}), {run.verdict}"
        )
    return f"{run.status}: {run.message}" if run.message else run.status


class _Progress:
    """The sweep's status line (the count running, how many are left, an estimate of the
    time left from the counts done so far) and a line per count once it ended."""

    def __init__(self, line: StatusLine, quiet: bool) -> None:
        self.line = line
        self.quiet = quiet
        self.done_s: list[float] = []

    def __call__(self, event: SweepProgress) -> None:
        again = ", again" if event.again else ""
        where = f"workers={event.workers} ({event.index + 1}/{event.total}{again})"
        if event.run is not None:
            self.done_s.append(event.elapsed_s)
            if not self.quiet:
                self.line.note(f"traceinspect: {where}: {_describe(event.run)}")
            return
        after = event.total - event.index - 1
        more = f"{after} more after it" + (" at most" if event.again and after else "")
        text = f"sweep: {where} running for {duration(event.elapsed_s)}, {more}"
        if self.done_s:
            per_count = sum(self.done_s) / len(self.done_s)
            left = max(per_count - event.elapsed_s, 0.0) + after * per_count
            text += f"; about {duration(left)} left"
        elif after:
            text += "; time left known once it ends"
        self.line.show(text)


@click.command(
    cls=RenamingCommand,
    # --workers is one count in capture and isolate; kept here for a release.
    renamed=[Renamed("--workers", "--worker-counts")],
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@click.option(
    "--worker-counts",
    "worker_counts",
    metavar="N,N,...",
    required=True,
    callback=_worker_counts,
    help="Grain worker counts to try, comma-separated (was --workers, which is one count in "
    "capture and isolate).",
)
@click.option(
    "--timeout",
    "timeout_s",
    metavar="SECONDS",
    type=click.FloatRange(min=0),
    default=600.0,
    show_default=True,
    help="Seconds per run before it is stopped and marked 'timeout' (0: no limit).",
)
@click.option(
    "--logdir",
    default="traceinspect_sweep",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Where runs (LOGDIR/workers_N/) and sweep.json, .csv, .png go.",
)
@click.option(
    "--skip-steps",
    type=int,
    default=None,
    help="Trace each run after exactly N steps. Default: capture's steady-state window "
    "(compilation done, prefetch buffers drained, step times no longer trending).",
)
@click.option(
    "--steps",
    type=int,
    default=None,
    help="Steps to trace per run. Default: capture's (20, and at least 1 s).",
)
@click.option(
    "--stop-after/--no-stop-after",
    default=True,
    show_default=True,
    help="End each run once its window is captured and the steps after it timed untraced.",
)
@profiler_options
@click.option(
    "--tolerance",
    type=click.FloatRange(min=0),
    default=0.05,
    show_default=True,
    help="Choose the smallest count whose step time is within this of the best.",
)
@click.option(
    "--by",
    "metric",
    type=click.Choice(_METRICS),
    default="untraced",
    show_default=True,
    help=(
        "Compare counts by the time per step of the steps each run goes on with after its "
        "trace, without the profiler (untraced: the profiler slows the step, unevenly "
        "across counts); or by the traced steps: as analyze gives each run (typical: the "
        "mean where its steps come in bursts, else the median), by median, or by mean."
    ),
)
@click.option(
    "--retime",
    "retimes",
    metavar="N",
    type=click.IntRange(min=0),
    default=2,
    show_default=True,
    help="Compared untraced: run again the count with the best step time, then the one "
    "chosen, up to N counts in all, and take each second run's figure (a single run's "
    "scatters; the lowest of several is low by chance). 0: each count once.",
)
@json_flag()
@click.option("-q", "--quiet", is_flag=True, help="No progress or notes on stderr.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
@verbose_option
def sweep(
    ctx: click.Context,
    *,
    worker_counts: tuple[int, ...],
    timeout_s: float,
    logdir: str,
    skip_steps: int | None,
    steps: int | None,
    stop_after: bool,
    profiler: ProfilerSettings,
    tolerance: float,
    metric: str,
    retimes: int,
    as_json: bool,
    quiet: bool,
    command: tuple[str, ...],
) -> None:
    """Measure step time against Grain's worker count, and pick the count to use.

    Captures a short window of the script once per count, then times as many steps again
    without the profiler; analyses each run, prints a table (the untraced step time; the
    traced median, p90 and mean, spread, idle time by cause, verdict) and marks the
    smallest count within 5% of the best untraced step time (--by typical, median or mean
    compares the traced steps instead), after running the best count, then the chosen
    one, a second time (--retime).
    Writes sweep.json, sweep.csv and sweep.png into LOGDIR. A "{workers}" in the script's
    arguments receives the count; otherwise capture sets Grain's worker count. Runs that
    crash, time out or cannot be analysed show as such. Exit code 1 when no run could be
    measured.

    \b
    Examples:
      traceinspect sweep --worker-counts 1,2,4,8 -- python train.py --grain_worker_count={workers}
      traceinspect sweep --worker-counts 0,2,4 --steps 20 --timeout 300 -- python train.py
    """
    from traceinspect.capture import CaptureOptions
    from traceinspect.report.sweep import render_sweep, write_sweep
    from traceinspect.sweep import run_sweep

    options = CaptureOptions(
        logdir=logdir,
        skip_steps=skip_steps,
        steps=steps,
        stop_after=stop_after,
        **profiler.capture_kwargs(),
    )
    with StatusLine.on_stderr(quiet, as_json) as line:
        result = run_sweep(
            command,
            worker_counts,
            options,
            timeout_s=timeout_s or None,
            tolerance=tolerance,
            metric=metric,
            progress=_Progress(line, quiet),
            retimes=retimes,
        )
    written = write_sweep(result, logdir)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2))
    else:
        click.echo(render_sweep(result))
    if not quiet:
        names = ", ".join(path.name for path in written.values())
        click.echo(f"traceinspect: wrote {names} in {logdir}", err=True)
    ctx.exit(0 if result.chosen is not None else 1)
