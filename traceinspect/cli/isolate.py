"""`traceinspect isolate`: is it the input? The step with free input, the pipeline alone, the
real step, and the verdict."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

from traceinspect.cli._options import json_flag, verbose_option

if TYPE_CHECKING:
    from traceinspect.isolate import IsolateProgress


def _progress(event: IsolateProgress) -> None:
    """A line on stderr as each phase run starts and ends, terminal or not: a run takes
    tens of seconds to minutes, and a log or a pipe should show where isolate is."""
    from traceinspect.isolate import BUSY_OTHERS, DESCRIPTIONS

    head = f"traceinspect: run {event.index + 1}/{event.total}"
    if event.mean_ms is None:
        again = (
            f" again (try {event.attempt}: other processes kept the machine busy)"
            if event.attempt > 1
            else ""
        )
        click.echo(f"{head}: {DESCRIPTIONS[event.phase]}{again}...", err=True)
        return
    unit = "a batch" if event.phase == "loader" else "a step"
    busy = (
        f" (other processes kept {event.busy:.0%} of the cores busy)"
        if event.busy is not None and event.busy > BUSY_OTHERS
        else ""
    )
    click.echo(f"{head}: {event.phase} {event.mean_ms:.2f} ms {unit}{busy}", err=True)


@click.command(
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@click.option(
    "--phase-timeout",
    "phase_timeout_s",
    metavar="SECONDS",
    type=click.FloatRange(min=0, min_open=True),
    default=300.0,
    show_default=True,
    help="Time limit of each phase: one not steady by 60% of it is timed anyway, one still "
    "running at its end gives what it has (and says so).",
)
@click.option(
    "--steps",
    type=click.IntRange(min=3),
    default=None,
    help="Steps timed per phase once steady. Default: 20, and at least 1 s.",
)
@click.option(
    "--rounds",
    type=click.IntRange(min=1),
    default=2,
    show_default=True,
    help="Runs of each phase, in turn (target, loader, real, target, ...): each figure is "
    "its phase's best run, as a machine's speed drifts from one run to the next.",
)
@click.option(
    "--tries",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Runs of a phase, in a round, while other processes keep the machine busy during "
    "it (a busy run never counts over a quiet one).",
)
@click.option("--workers", type=int, default=None, help="Override Grain's worker count.")
@click.option(
    "--logdir",
    default="traceinspect_isolate",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Where the script's output of each phase goes (target.log, loader.log, real.log: "
    "the runs that count; the others' in <phase>-run<N>.log).",
)
@json_flag()
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@verbose_option
def isolate(
    *,
    phase_timeout_s: float,
    steps: int | None,
    rounds: int,
    tries: int,
    workers: int | None,
    logdir: str,
    as_json: bool,
    command: tuple[str, ...],
) -> None:
    """Is it the input? Run the script three ways, unchanged, and compare.

    \b
    target: the loop's Grain next() returns its first batch every time (no input cost);
    loader: the first Grain iterator drained alone, no training;
    real:   the script as it is.
    Each is timed on the host once steady (20 steps, at least 1 s; no profiler), then
    stopped; the three run in turn, twice (--rounds), and each figure is its phase's best
    run; up to two more rounds run while the next-best runs give another verdict, and one
    that still does is "unknown" (the spread is shown); a run that other processes kept
    busy runs again (--tries) unless the load lasts. Verdict, with a
    20% tolerance: loader slower than target: input-bound (with the worker count that
    should keep up); else real slower than target: sync-bound (a host-device sync each
    step; host-bound if the loop did not wait on device values); else device-bound. The
    script must draw its batches from a Grain iterator (DatasetIterator or DataLoader) on
    its main thread.

    \b
    Examples:
      traceinspect isolate -- python train.py --lr 0.1
      traceinspect isolate --json --phase-timeout 120 -- python -m mypkg.train
    """
    from traceinspect.isolate import run_isolate
    from traceinspect.report.isolate import render_isolation

    # A line per phase run on stderr, terminal or not; none with --json (whose reader wants
    # the document alone, and gets each run's figures in it).
    progress = None if as_json else _progress
    result = run_isolate(
        command,
        phase_timeout_s=phase_timeout_s,
        steps=steps,
        rounds=rounds,
        tries=tries,
        workers=workers,
        logdir=logdir,
        progress=progress,
    )
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2))
    else:
        click.echo(render_isolation(result))
