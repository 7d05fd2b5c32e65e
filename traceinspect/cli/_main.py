"""The Click group, and the one place where library errors become clean CLI errors."""

from __future__ import annotations

import atexit
import gc
import importlib
import json
import sys
from typing import Any

import click

from traceinspect._version import __version__
from traceinspect.cli._options import JSON_MODE, verbose_option
from traceinspect.errors import TraceInspectError

# Each command's module, imported only when that command runs (or help lists it): a
# command pays for its own imports alone (`analyze` does not import capture's runner).
_COMMANDS = (
    "analyze", "compare", "info", "events", "export", "view", "capture", "sweep", "isolate",
    "sample", "mcp",
)  # fmt: skip


def _wants_json(ctx: click.Context, args: list[str]) -> bool:
    """Whether the command was asked for JSON: its ``--json`` was read (``JSON_MODE``), or,
    for an error Click raises before reading any option, ``--json`` is among the command's
    arguments (before a ``--``, after which the script's own arguments start)."""
    if ctx.meta.get(JSON_MODE):
        return True
    return "--json" in (args[: args.index("--")] if "--" in args else args)


def _json_error(kind: str, message: str, path: str | None = None) -> None:
    """The ``error`` object on stdout; where stdout cannot take it (a full disk, the error
    being about stdout itself), the plain line on stderr instead."""
    try:
        click.echo(
            json.dumps({"error": {"type": kind, "message": message, "path": path}}, indent=2)
        )
        sys.stdout.flush()
    except OSError:
        from traceinspect.cli._options import _drop_stdout

        _drop_stdout()
        click.echo(f"Error: {message}", err=True)


class _Group(click.Group):
    """A group that turns every :class:`TraceInspectError` into a one-line message (with
    ``--json``: a JSON ``error`` object on stdout), and imports a command's module when the
    command is asked for.

    Exit codes: 0 done, 1 a runtime or data error, 2 a usage error (Click's own, or a
    :class:`~traceinspect.errors.UsageError`), 130 interrupted; ``capture`` ends with the
    script's."""

    def invoke(self, ctx: click.Context) -> Any:
        protected = getattr(ctx, "_protected_args", None)
        args = [*(protected if protected is not None else ctx.protected_args), *ctx.args]
        try:
            return super().invoke(ctx)
        except TraceInspectError as exc:
            # (An error about standard output itself cannot be written there.)
            on_stdout = str(exc).startswith("standard output:")
            if _wants_json(ctx, args) and not on_stdout:
                _json_error(type(exc).__name__, str(exc), exc.path)
            else:
                click.echo(f"Error: {exc}", err=True)
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            if not _wants_json(ctx, args):
                raise
            _json_error(type(exc).__name__, exc.format_message())
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            if _wants_json(ctx, args):
                _json_error("Interrupted", "interrupted (SIGINT)")
            else:
                click.echo("Interrupted.", err=True)
            sys.exit(130)
        except BrokenPipeError:
            # The reader of our output left (`| head`): nothing to report, as for other
            # Unix tools; stdout goes to /dev/null so the exit flush does not fail again.
            from traceinspect.cli._options import _drop_stdout

            _drop_stdout()
            sys.exit(1)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in _COMMANDS and cmd_name not in self.commands:
            module = importlib.import_module(f"traceinspect.cli.{cmd_name}")
            self.add_command(getattr(module, cmd_name))
        return super().get_command(ctx, cmd_name)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="traceinspect")
@verbose_option
def main() -> None:
    """Find out why your accelerator sits idle.

    Read jax.profiler (XPlane) traces into pandas frames, capture new ones from a
    training script, and name the cause of every idle gap.

    \b
    Examples:
      traceinspect analyze $(traceinspect sample)
      traceinspect info $(traceinspect sample)
      traceinspect events ./traceinspect_logs --name 'PjitFunction' --limit 20

    Every command takes --json (but mcp, which speaks MCP on stdio): one JSON document on
    stdout, and an error as {"error": {"type": ..., "message": ..., "path": ...}} there too
    (path: the file or directory it is about, or null). Notes and progress go to stderr.

    \b
    Exit codes:
      0  done
      1  a runtime or data error (no trace there, a corrupt file, nothing to analyse)
      2  a usage error (an unknown option, a bad value, options that do not go together)
      130  interrupted (Ctrl-C)
    capture ends with the script's own exit code once the script ran.
    """


def run() -> None:
    """The console entry point: :func:`main`, without the interpreter's last garbage
    collection at exit. After a large analysis that pass walks every object still alive
    (pandas' modules, the frames) only to free memory the process is giving back anyway:
    0.07-0.13 s of a 1 s `analyze` on the 89 MB benchmark capture. Exit handlers and
    finalizers run as usual; in-process callers (tests, CliRunner) use ``main``."""
    atexit.register(gc.freeze)
    main()
