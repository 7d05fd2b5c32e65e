"""Options shared by several commands, as decorators: ranges, ``--window``, ``--json``, ``-v``,
the output file, and options refused where they would do nothing. Renamed options'
old spellings are ``_renamed.py``; PATH and loading a trace ``_trace_input.py``; the
profiler's options ``_profiler.py``."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click

from traceinspect.cli._profiler import ProfilerSettings, capture_profiler_options, profiler_options
from traceinspect.cli._renamed import DEPRECATED_UNTIL, Renamed, RenamingCommand
from traceinspect.cli._trace_input import (
    DecodeProgress,
    TraceRequest,
    load_trace,
    note_newest_run,
    trace_input,
)

__all__ = [
    "DEPRECATED_UNTIL",
    "DecodeProgress",
    "ProfilerSettings",
    "Renamed",
    "RenamingCommand",
    "TraceRequest",
    "capture_profiler_options",
    "load_trace",
    "note_newest_run",
    "profiler_options",
    "trace_input",
]

F = TypeVar("F", bound=Callable[..., Any])


def parse_range(value: str | None, cast: type[int] | type[float], single: bool) -> Any:
    """``A:B`` -> ``(A, B)``, either end optional (None); with ``single``, ``A`` alone
    means ``(A, A + 1)``."""
    if value is None:
        return None
    ends = value.split(":")
    form = "A:B" if single else "START_MS:END_MS"
    try:
        if single and len(ends) == 1:
            return (int(ends[0]), int(ends[0]) + 1)
        if len(ends) != 2:
            raise ValueError
        return tuple(cast(v) if v.strip() else None for v in ends)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not of the form {form}.") from None


def window_option(help_text: str) -> Callable[[F], F]:
    """``--window START_MS:END_MS`` as ``window``: (start, end) in ms, either end None."""
    return click.option(
        "--window",
        metavar="START_MS:END_MS",
        callback=lambda _ctx, _param, value: parse_range(value, float, single=False),
        help=help_text,
    )


@contextlib.contextmanager
def writing(output: Path | None) -> Iterator[None]:
    """Write ``output`` (None: standard output, flushed at the end) inside this block: an
    OSError (a missing folder, a directory, a full disk) becomes a one-line error."""
    from traceinspect.errors import UsageError

    try:
        yield
        if output is None:
            sys.stdout.flush()
    except BrokenPipeError:
        raise  # the reader left (`| head`): _main ends quietly
    except OSError as exc:
        reason = exc.strerror or str(exc)
        if output is not None:
            raise UsageError(
                f"{output}: cannot write the file ({reason}); pick another -o."
            ) from None
        _drop_stdout()
        raise UsageError(
            f"standard output: cannot write ({reason}); redirect it elsewhere, or use -o "
            "where the command has it."
        ) from None


def _drop_stdout() -> None:
    """Point standard output at /dev/null: what could not be written is not tried again
    (and reported again) when the interpreter flushes it at exit."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


#: ``ctx.meta`` key set once ``--json`` is seen: errors are then printed as JSON (``_main``).
JSON_MODE = "traceinspect.json"
JSON_HELP = 'Print one JSON document on stdout; an error is {"error": {type, message, path}}.'


def _note_json(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    if value:
        ctx.meta[JSON_MODE] = True
    return value


def json_flag(help_text: str = JSON_HELP) -> Callable[[F], F]:
    """``--json`` as ``as_json``; eager, so that an error in any other option is already
    printed as JSON."""
    return click.option(
        "--json", "as_json", is_flag=True, is_eager=True, callback=_note_json, help=help_text
    )


def json_option(func: F) -> F:
    return json_flag()(func)


#: ``ctx.meta`` key: how many ``-v`` were given so far, before and after the command together.
VERBOSE = "traceinspect.verbose"


def _log_to_stderr(ctx: click.Context, param: click.Parameter, count: int) -> int:
    """-v: traceinspect's log records (how the answer was reached) on stderr; -vv: with the
    details too. The group's ``-v`` and the command's add up (``traceinspect -v analyze X -v``
    is -vv). Only the CLI configures logging; the library only logs."""
    if not count:
        return count
    logger = logging.getLogger("traceinspect")
    if VERBOSE not in ctx.meta:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("traceinspect: %(message)s"))
        logger.addHandler(handler)
        level = logger.level

        def stop() -> None:
            # In-process callers (tests, `traceinspect mcp`) go on after the command.
            logger.removeHandler(handler)
            logger.setLevel(level)

        # The root context closes even when the command's own arguments fail to parse.
        ctx.find_root().call_on_close(stop)
    ctx.meta[VERBOSE] = ctx.meta.get(VERBOSE, 0) + count
    logger.setLevel(logging.INFO if ctx.meta[VERBOSE] == 1 else logging.DEBUG)
    return count


def verbose_option(func: F) -> F:
    """``-v`` / ``--verbose``, one meaning on the group and on every command (before or after
    the command's name); it configures logging itself, so commands take no parameter for it."""
    return click.option(
        "-v",
        "--verbose",
        count=True,
        expose_value=False,
        callback=_log_to_stderr,
        help="Say on stderr how the answer was reached: the files read, a kept answer used, "
        "the verdict's reasoning (-vv: more detail). Before or after the command's name.",
    )(func)


def given(ctx: click.Context, name: str) -> bool:
    """Whether the option ``name`` (its parameter name) was given, not left at its default."""
    source = ctx.get_parameter_source(name)
    return source is not None and source is not click.core.ParameterSource.DEFAULT


def refuse_unused(ctx: click.Context, checks: Sequence[tuple[str, bool, str]]) -> None:
    """Refuse an option that would have no effect, with one line saying why: each check is
    (parameter name, whether it is unused in this mode, the reason)."""
    from traceinspect.errors import UsageError

    for name, unused, reason in checks:
        if unused and given(ctx, name):
            param = next(p for p in ctx.command.params if p.name == name)
            shown = max(param.opts, key=len) if isinstance(param, click.Option) else None
            raise UsageError(f"{shown or param.human_readable_name} {reason}")
