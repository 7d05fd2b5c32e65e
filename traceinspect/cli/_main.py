"""The Click group, and the one place where library errors become clean CLI errors."""

from __future__ import annotations

import sys
from typing import Any

import click

from traceinspect._version import __version__
from traceinspect.errors import TraceInspectError


class _Group(click.Group):
    """A group that turns every :class:`TraceInspectError` into a one-line message."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except TraceInspectError as exc:
            click.echo(f"Error: {exc}", err=True)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("Interrupted.", err=True)
            sys.exit(130)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="traceinspect")
def main() -> None:
    """Find out why your accelerator sits idle.

    Read jax.profiler (XPlane) traces into pandas frames, capture new ones from a
    training script, and name the cause of every idle gap.

    \b
    Examples:
      traceinspect info sample_traces/cpu_mlp_sync_every_step.xplane.pb
      traceinspect events ./traceinspect_logs --name 'PjitFunction' --limit 20
    """


def _register() -> None:
    # Imported here, after `main` exists, so command modules may import this one.
    from traceinspect.cli.analyze import analyze
    from traceinspect.cli.capture import capture
    from traceinspect.cli.compare import compare
    from traceinspect.cli.events import events
    from traceinspect.cli.info import info
    from traceinspect.cli.isolate import isolate
    from traceinspect.cli.sweep import sweep

    for command in (analyze, compare, info, events, capture, sweep, isolate):
        main.add_command(command)


_register()
