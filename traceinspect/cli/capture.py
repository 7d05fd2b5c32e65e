"""The ``capture`` command: run a training script under the profiler and say what was traced."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

from traceinspect.capture import CaptureOptions, CaptureProgress, CaptureResult, run_capture
from traceinspect.cli._options import (
    ProfilerSettings,
    capture_profiler_options,
    json_flag,
    verbose_option,
)
from traceinspect.cli._progress import StatusLine, duration
from traceinspect.errors import TraceInspectError

if TYPE_CHECKING:
    from traceinspect.analysis.result import Analysis


def _analysis(result: CaptureResult) -> Analysis | str:
    """The analysis of the captured run, or one line saying why there is none."""
    from traceinspect.analysis.analyze import analyze as run_analysis
    from traceinspect.trace import load

    if not result.trace_paths:
        return "nothing to analyze: no trace was written"
    # A shared run directory (--run-name) holds other hosts' traces: read only this one's.
    path = result.trace_paths[0] if result.record.shared_run else result.run_dir
    try:
        return run_analysis(load(path, use_cache=False))
    except TraceInspectError as exc:
        return f"cannot analyze the trace: {exc}"


def progress_text(p: CaptureProgress) -> str:
    """The capture's status line: steps seen, the last step's time, the window's state."""
    if p.phase == "starting" or (p.phase == "waiting" and not p.steps):
        return f"capture: waiting for the first step ({duration(p.elapsed_s)})"
    steps = f"{p.steps} steps" if p.source != "time" else "a time window"
    if p.last_step_ms is not None:
        steps += f", last {p.last_step_ms:,.1f} ms"
    window = f"{p.first_step}-{p.last_step}" if p.first_step is not None else ""
    if p.phase == "waiting":
        state = (
            f"skipping to step {p.skip_steps}"
            if p.skip_steps is not None
            else "warming up (step times not steady yet)"
        )
    elif p.phase == "tracing":
        opened = "steady: " if p.rule == "steady" else ""
        state = f"{opened}tracing steps {window}" if window else "tracing"
    elif p.phase == "writing":
        state = "writing the trace"
    else:
        state = f"traced steps {window}; the script goes on" if window else "traced"
    return f"capture: {steps}; {state} ({duration(p.elapsed_s)})"


@click.command(
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@click.option(
    "--logdir",
    default="traceinspect_logs",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Log directory; the run goes to LOGDIR/plugins/profile/<run>/.",
)
@click.option(
    "--run-name",
    metavar="NAME",
    default=None,
    help="Write into LOGDIR/plugins/profile/NAME/, shared by every capture that names it "
    "(one per host of a multi-host run); default a new timestamped run.",
)
@click.option(
    "--host-name",
    metavar="NAME",
    default=None,
    help="Name the files NAME.xplane.pb, ... (default this machine's hostname); needed when "
    "several processes of one machine share a --run-name.",
)
@click.option(
    "--skip-steps",
    type=int,
    default=None,
    help="Trace after exactly N steps. Default: once the run is steady (compilation done, "
    "prefetch buffers drained, step times no longer trending), which the summary explains.",
)
@click.option(
    "--steps",
    type=int,
    default=None,
    help="Steps to trace. Default: 20, and more when steps are short, so the window lasts at "
    "least 1 s (several bursts of a worker pipeline).",
)
@click.option(
    "--max-wait",
    "max_wait_s",
    type=float,
    default=120.0,
    show_default=True,
    help="Seconds to wait for a steady run before tracing anyway.",
)
@click.option(
    "--window-max",
    "window_max_s",
    type=float,
    default=60.0,
    show_default=True,
    help="Close the window after this many seconds even before --steps steps (keeps traces "
    "of slow steps small).",
)
@click.option(
    "--stop-after", is_flag=True, help="End the script once the window is captured (exit 0)."
)
@click.option(
    "--early-trace/--no-early-trace",
    default=True,
    show_default=True,
    help="Trace from step 2 until the run is steady, and keep that trace if the script ends "
    "(returns, crashes, is stopped) before the window opens: a short run is never left "
    "without a trace. It costs the window ~1.5 s more of waiting.",
)
@capture_profiler_options
@click.option("--workers", type=int, default=None, help="Override Grain's worker count.")
@click.option(
    "-q",
    "--quiet",
    is_flag=True,
    help="No message from traceinspect in the script's process, and no progress line.",
)
@click.option(
    "--analyze", is_flag=True, help="Analyze the trace once captured (as `traceinspect analyze`)."
)
@click.option(
    "--attach",
    "attach_to",
    metavar="HOST:PORT[,HOST:PORT...]",
    help="Trace jobs already running, through their profiler servers "
    "(jax.profiler.start_server(PORT) in the job), instead of "
    "starting a script: several hosts of a pod as one run.",
)
@click.option(
    "--every",
    "every_s",
    type=float,
    default=None,
    help="With --attach and --count: seconds from one snapshot's start to the next's.",
)
@click.option(
    "--count",
    type=int,
    default=1,
    show_default=True,
    help="With --attach: snapshots to take; with more than one, the first and last are compared.",
)
@json_flag(
    "Print the result as one JSON document on stdout; the script's own stdout goes to "
    "stderr meanwhile, so stdout holds the JSON alone."
)
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
@verbose_option
def capture(
    ctx: click.Context,
    *,
    logdir: str,
    run_name: str | None,
    host_name: str | None,
    skip_steps: int | None,
    steps: int | None,
    max_wait_s: float,
    window_max_s: float,
    stop_after: bool,
    early_trace: bool,
    profiler: ProfilerSettings,
    workers: int | None,
    quiet: bool,
    analyze: bool,
    attach_to: str | None,
    every_s: float | None,
    count: int,
    as_json: bool,
    command: tuple[str, ...],
) -> None:
    """Run a training script and trace a window of its steps.

    The script runs as it would without traceinspect; the exit code is the script's.
    Messages go to stderr; the script's stdout is left alone (with --json it goes to
    stderr, and stdout holds the JSON alone).

    On a multi-host run, run one capture per process with the same --run-name and a
    --host-name each: the traces land side by side in one run directory, each host with
    its own sidecar NAME.traceinspect.capture.json.

    \b
    Examples:
      traceinspect capture -- python train.py --lr 0.1
      traceinspect capture --skip-steps 30 --steps 10 -- python -m mypkg.train
      traceinspect capture --workers 8 --stop-after -- train.py
      traceinspect capture --run-name pod1 --host-name host0 -- python train.py --id 0
      traceinspect capture --attach localhost:9999 --analyze
      traceinspect capture --attach host1:9999,host2:9999 --every 600 --count 3
    """
    if attach_to is not None:
        from traceinspect.cli.attach import run_attach

        script_only = (
            *("run_name", "host_name", "skip_steps", "steps", "max_wait_s"),
            *("window_max_s", "stop_after", "early_trace", "workers"),
        )
        run_attach(
            ctx,
            addresses_text=attach_to,
            # --duration given: that long; else sized to the job's steps.
            duration_s=profiler.duration_s
            if ctx.get_parameter_source("duration") is not click.core.ParameterSource.DEFAULT
            else None,
            every_s=every_s,
            count=count,
            logdir=logdir,
            profiler=profiler,
            analyze=analyze,
            as_json=as_json,
            quiet=quiet,
            command=command,
            others={
                f"--{name.replace('_s', '').replace('_', '-')}": True
                for name in script_only
                if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT
            },
        )
        return
    extra = (["--every"] if every_s is not None else []) + (["--count"] if count != 1 else [])
    if extra:
        from traceinspect.errors import UsageError

        raise UsageError(f"{', '.join(extra)} go with --attach HOST:PORT")
    options = CaptureOptions(
        logdir=logdir,
        run_name=run_name,
        host_name=host_name,
        skip_steps=skip_steps,
        steps=steps,
        max_wait_s=max_wait_s,
        window_max_s=window_max_s,
        stop_after=stop_after,
        early_trace=early_trace,
        workers=workers,
        **profiler.capture_kwargs(),
        quiet=quiet,
        script_stdout_to_stderr=as_json,
    )
    # The script writes to the same terminal: the line keeps the last row for itself.
    with StatusLine.on_stderr(quiet, as_json, interval_s=0.25, bottom=True) as line:
        progress = None if not line.enabled else lambda p: line.show(progress_text(p))
        result = run_capture(command, options, progress=progress)
    analysis = _analysis(result) if analyze else None
    if as_json:
        out = result.to_dict()
        if analysis is not None:
            out["analysis"] = analysis if isinstance(analysis, str) else analysis.to_dict(50)
        click.echo(json.dumps(out, indent=2))
    else:
        for path in result.trace_paths:
            click.echo(f"traceinspect: trace in {path}", err=True)
        if result.killed is not None:
            click.echo(
                f"traceinspect: the script was killed ({result.killed}), with the processes "
                "it started",
                err=True,
            )
        if result.write_error is not None:
            click.echo(f"traceinspect: no trace written: {result.write_error}", err=True)
        elif not result.trace_paths:
            click.echo(
                f"traceinspect: no trace written; details in {result.sidecar_path}", err=True
            )
        click.echo(f"traceinspect: {result.summary()}", err=True)
        untested = result.record.untested_note
        if untested:
            click.echo(f"traceinspect: {untested}", err=True)
    applied = result.record.device_tracer_level_applied
    if profiler.device_tracer_level != 1 and applied is False:
        click.echo("traceinspect: this jaxlib has no device tracer level; ignored", err=True)
    if analysis is not None and not as_json:
        if isinstance(analysis, str):
            click.echo(f"traceinspect: {analysis}", err=True)
        else:
            from traceinspect.report.analyze import render_analysis

            click.echo(render_analysis(analysis))
    # The script's exit code; 1 when it succeeded but its trace could not be written.
    ctx.exit(result.exit_code or (1 if result.write_error is not None else 0))
