"""``traceinspect capture --attach``: the command's side (options checked, snapshots taken,
each analysed on request, the first and last compared)."""

from __future__ import annotations

import contextlib
import functools
import io
import json
from collections.abc import Callable
from typing import Any

import click

from traceinspect import schema as S
from traceinspect.cli._options import ProfilerSettings
from traceinspect.errors import UsageError


def run_attach(
    ctx: click.Context,
    *,
    addresses_text: str,
    duration_s: float | None,
    every_s: float | None,
    count: int,
    logdir: str,
    profiler: ProfilerSettings,
    analyze: bool,
    as_json: bool,
    quiet: bool,
    command: tuple[str, ...],
    others: dict[str, Any],
) -> None:
    """Attach to running jobs' profiler servers (see :mod:`traceinspect.attach`)."""
    from traceinspect.attach import Snapshot, snapshots
    from traceinspect.capture.attach import parse_addresses

    if command:
        raise UsageError(
            "--attach traces jobs already running: give no command after it (the command "
            f"was {' '.join(command)!r})"
        )
    ignored = sorted(name for name, value in others.items() if value)
    if ignored:
        raise UsageError(
            f"--attach cannot use {', '.join(ignored)}: those choose steps of a script "
            "capture starts; an attached job is traced for --duration seconds"
        )
    if count < 1:
        raise UsageError(f"--count must be at least 1, got {count}")
    if count > 1 and every_s is None:
        raise UsageError("--count N takes one snapshot every --every SECONDS: give --every")
    if every_s is not None and every_s <= 0:
        raise UsageError(f"--every must be more than 0 seconds, got {every_s:g}")
    addresses = parse_addresses(addresses_text)
    kwargs = profiler.capture_kwargs()
    options: dict[str, Any] = {
        "logdir": logdir,
        "host_tracer_level": kwargs["host_tracer_level"],
        "python_tracer": kwargs["python_tracer"],
        "device_tracer_level": kwargs["device_tracer_level"],
    }

    def announce(i: int, shot: Snapshot) -> None:
        if quiet or as_json:
            return
        label = f"snapshot {i + 1}/{count}: " if count > 1 else ""
        for path in shot.result.trace_paths:
            click.echo(f"traceinspect: trace in {path}", err=True)
        steps = f"; {shot.steps} step(s) of ~{shot.median_step_ms:,.1f} ms" if shot.steps else ""
        note = f" ({shot.note})" if shot.note else ""
        click.echo(f"traceinspect: {label}{shot.result.summary()}{steps}{note}", err=True)

    taken = snapshots(addresses, duration_s, every_s or 0.0, count, on_snapshot=announce, **options)
    runs = [shot.result.run_dir for shot in taken]
    from traceinspect.cli.analyze import analyze as analyze_command
    from traceinspect.cli.compare import compare as compare_command

    def analyse(run: str) -> None:
        ctx.invoke(
            analyze_command,
            path=run,
            run=None,
            no_cache=True,
            decoder="auto",
            quiet=quiet,
            as_json=as_json,
            top_gaps=5,
            all_gaps=False,
            plots_dir=None,
            html_file=None,
            hosts=(),
            jobs=None,
            scheduler=None,
        )

    def compare() -> None:
        ctx.invoke(
            compare_command,
            before=runs[0],
            after=runs[-1],
            run_before=None,
            run_after=None,
            no_cache=True,
            quiet=quiet,
            as_json=as_json,
        )

    if as_json:
        # One document: the snapshots, with each analysis and the comparison as the
        # commands print them with --json.
        out: dict[str, Any] = {"runs": [_shot_dict(s) for s in taken]}
        if analyze:
            out["analyses"] = [_printed_json(functools.partial(analyse, run)) for run in runs]
        if len(runs) > 1:
            out["comparison"] = _printed_json(compare)
        click.echo(json.dumps(out, indent=2))
        return
    if analyze:
        for run in runs:
            analyse(run)
    if len(runs) > 1:
        compare()


def _printed_json(command: Callable[[], None]) -> Any:
    """The JSON document ``command`` prints on stdout, read back."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        command()
    return json.loads(printed.getvalue())


def _shot_dict(shot: Any) -> dict[str, Any]:
    return {
        "run_dir": shot.result.run_dir,
        "trace_paths": list(shot.result.trace_paths),
        "addresses": list(shot.result.addresses),
        "duration_s": shot.result.duration_s,
        "steps": shot.steps,
        S.MEDIAN_STEP_MS: shot.median_step_ms,
        "note": shot.note,
    }
