"""Options shared by several commands, as decorators, and the one way commands load a trace."""

from __future__ import annotations

import bisect
import contextlib
import functools
import itertools
import logging
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from traceinspect.cli._progress import StatusLine

if TYPE_CHECKING:
    from traceinspect.xplane.fs import URLPath
    from traceinspect.xplane.locate import Located
    from traceinspect.xplane.reader import DecoderName

F = TypeVar("F", bound=Callable[..., Any])


#: The last release in which a deprecated option spelling (CHANGELOG: Deprecated) still works.
DEPRECATED_UNTIL = "0.2"


@dataclass(frozen=True)
class Renamed:
    """An option's old spelling, kept working for a release: ``old`` is read as ``new``.
    ``nargs`` tokens followed the old spelling, joined with ``join`` into the new one's value
    (``--window 10 20`` -> ``--window 10:20``); ``applies`` says whether the tokens are in the
    old form at all (a spelling whose name did not change)."""

    old: str
    new: str
    nargs: int = 1
    join: str = ""
    applies: Callable[[list[str]], bool] = lambda values: True


class RenamingCommand(click.Command):
    """A command that reads the old spellings of its renamed options (``renamed=``) as the
    new ones, with a deprecation note on stderr, so that one option name means one thing
    across commands (tests/test_option_names.py) without breaking a user's scripts."""

    def __init__(self, *args: Any, renamed: Sequence[Renamed] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.renamed = {r.old: r for r in renamed}

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, self._renamed_args(ctx, args))

    def _renamed_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        takes = {
            opt: param.nargs
            for param in self.params
            if isinstance(param, click.Option) and not param.is_flag and not param.count
            for opt in param.opts
        }
        out: list[str] = []
        i = 0
        while i < len(args):
            token = args[i]
            name, eq, value = token.partition("=")
            if token == "--" or not token.startswith("-") or token == "-":
                if token == "--" or not ctx.allow_interspersed_args:
                    return out + args[i:]  # the script's own arguments from here on
                out.append(token)
                i += 1
                continue
            old = self.renamed.get(name) if name.startswith("--") else None
            values = [value] if eq else args[i + 1 : i + 1 + (old.nargs if old else 0)]
            if old is not None and len(values) == (1 if eq else old.nargs) and old.applies(values):
                click.echo(
                    f"traceinspect: {self.name} {old.old} {' '.join(values)} is deprecated (it "
                    f"works until {DEPRECATED_UNTIL}): use {old.new} {old.join.join(values)}.",
                    err=True,
                )
                out += [old.new, old.join.join(values)]
                i += 1 if eq else 1 + old.nargs
                continue
            out.append(token)
            i += 1
            if not eq and name in takes:
                out += args[i : i + takes[name]]
                i += takes[name]
        return out


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


@dataclass(frozen=True)
class TraceRequest:
    """PATH and the options that say how to read it, as one value for a command."""

    path: Path | URLPath  # a URL (gs://bucket/logdir) stays a URL
    run: str | None
    no_cache: bool
    decoder: DecoderName  # click.Choice keeps it to these
    quiet: bool
    #: False with --json: stderr shows no progress while the JSON is written.
    show_progress: bool = True

    def load(self, located: Located | None = None) -> Any:
        """The trace; ``located``: what :func:`~traceinspect.xplane.locate.locate` already
        made of ``path`` (it is not listed again)."""
        return load_trace(
            self.path,
            self.run,
            self.no_cache,
            self.decoder,
            self.quiet,
            located,
            show_progress=self.show_progress,
        )

    def start_load(self, located: Located) -> Callable[[], Any]:
        """Begin reading the trace; the function returned waits for it. With no progress
        line to draw (stderr not a terminal, ``-q``, ``--json``), the file decodes on
        another thread while the command imports what it needs meanwhile
        (:func:`~traceinspect.loading.load_in_background`); else as :meth:`load`."""
        if StatusLine.on_stderr(quiet=self.quiet or not self.show_progress).enabled:
            return lambda: self.load(located)
        from traceinspect.loading import load_in_background

        loading = load_in_background(located, decoder=self.decoder, use_cache=not self.no_cache)

        def finish() -> Any:
            trace = loading.result()
            note_newest_run(trace.located, self.path, self.quiet)
            return trace

        return finish


def trace_input(func: F) -> F:
    """PATH plus the options that say how to read it, passed on as ``request``."""

    @functools.wraps(func)
    def wrapper(**kwargs: Any) -> Any:
        from traceinspect.xplane.fs import to_location

        request = TraceRequest(
            path=to_location(kwargs.pop("path")),
            run=kwargs.pop("run"),
            no_cache=kwargs.pop("no_cache"),
            decoder=kwargs.pop("decoder"),
            quiet=kwargs.pop("quiet"),
            show_progress=not kwargs.get("as_json", False),
        )
        return func(request=request, **kwargs)

    options = [
        # A plain string: click.Path would turn gs://bucket into gs:/bucket.
        click.argument("path", type=str),
        click.option(
            "--run",
            "run",
            metavar="NAME",
            help="Which run of a log directory to read (default: the newest).",
        ),
        click.option(
            "--no-cache", is_flag=True, help="Decode the file again instead of using the cache."
        ),
        click.option(
            "--decoder",
            type=click.Choice(["auto", "c", "python"]),
            default="auto",
            show_default=True,
            hidden=True,
            help="Force a decoder (for debugging and benchmarks).",
        ),
        click.option("-q", "--quiet", is_flag=True, help="No progress or notes on stderr."),
    ]
    decorated: Any = wrapper
    for option in reversed(options):
        decorated = option(decorated)
    return decorated


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


# Decoding that ends sooner shows no progress: a line that flashes by says nothing.
DECODE_PROGRESS_AFTER_S = 1.5


class DecodeProgress:
    """``load()``'s progress callback, shown as files and bytes decoded on a status line."""

    def __init__(self, label: str, sizes: Sequence[int], line: StatusLine) -> None:
        self.label = label
        self.ends = list(itertools.accumulate(sizes))
        self.line = line

    def __call__(self, done: int, total: int) -> None:
        files = bisect.bisect_right(self.ends, done)
        frac = min(done / total, 1.0) if total else 1.0
        self.line.show(
            f"{self.label}: {files}/{len(self.ends)} file(s), "
            f"{done / 1e6:,.0f}/{total / 1e6:,.0f} MB decoded ({frac:.0%})"
        )


def load_trace(
    path: Path | URLPath,
    run: str | None,
    no_cache: bool,
    decoder: DecoderName,
    quiet: bool,
    located: Located | None = None,
    show_progress: bool = True,
) -> Any:
    """Load with progress on a terminal (when decoding takes a while), and say which run
    was picked."""
    from traceinspect.trace import load
    from traceinspect.xplane.locate import locate

    located = located or locate(path, run)
    with StatusLine.on_stderr(
        quiet=quiet or not show_progress, delay_s=DECODE_PROGRESS_AFTER_S
    ) as line:
        progress = DecodeProgress(f"Reading {path.name}", [f.size for f in located.run.files], line)
        trace = load(located, decoder=decoder, use_cache=not no_cache, progress=progress)
    note_newest_run(trace.located, path, quiet)
    return trace


def note_newest_run(located: Located, path: Path | URLPath, quiet: bool) -> None:
    """Say on stderr which run of a log directory was read, when there were several."""
    if located.chose_newest and not quiet:
        click.echo(
            f"Note: {len(located.all_runs)} runs in {path}; reading the newest, "
            f"{located.run.name} (--run NAME for another).",
            err=True,
        )


@dataclass(frozen=True)
class ProfilerSettings:
    """The profiler and step-finding options `capture` and `sweep` share."""

    step_source: str
    delay_s: float
    duration_s: float
    host_tracer_level: int
    python_tracer: bool
    device_tracer_level: int
    grain_worker_profiling: bool
    sample_interval_ms: float = 20.0

    def capture_kwargs(self) -> dict[str, Any]:
        """As keyword arguments of :class:`traceinspect.capture.CaptureOptions`."""
        return dict(self.__dict__)


def profiler_options(func: F) -> F:
    """The options of :class:`ProfilerSettings`, passed on as ``profiler`` (sweep's)."""
    return _profiler_options(func, attach=False)


def capture_profiler_options(func: F) -> F:
    """:func:`profiler_options` as capture has them: ``--duration`` also says how long
    ``--attach`` traces."""
    return _profiler_options(func, attach=True)


def _profiler_options(func: F, attach: bool) -> F:
    from traceinspect.capture import STEP_SOURCES

    names = (
        "step_source",
        "delay",
        "duration",
        "host_tracer_level",
        "python_tracer",
        "device_tracer_level",
        "grain_worker_profiling",
        "sample_interval_ms",
    )

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        values = {name: kwargs.pop(name) for name in names}
        values["delay_s"] = values.pop("delay")
        values["duration_s"] = values.pop("duration")
        return func(*args, profiler=ProfilerSettings(**values), **kwargs)

    options = [
        click.option(
            "--step-source",
            type=click.Choice(STEP_SOURCES),
            default="auto",
            show_default=True,
            help="How to find steps; auto: StepTraceAnnotation, then Grain batches, then "
            "jit calls.",
        ),
        click.option(
            "--delay",
            default=10.0,
            show_default=True,
            help="Time window start (s after start) if no step was found by then.",
        ),
        click.option(
            "--duration",
            default=5.0,
            show_default=True,
            help="Time window length (s), when no step was found by --delay (or with "
            "--step-source time)."
            + (
                " With --attach: how long to trace (default there: 3 s, or long enough for 20 "
                "steps when 3 s hold fewer than 10, at most 60)."
                if attach
                else ""
            ),
        ),
        click.option("--host-tracer-level", default=2, show_default=True, help="0-3."),
        click.option(
            "--python-tracer/--no-python-tracer",
            default=False,
            show_default=True,
            help="Trace Python calls (file:line of a sync; traces grow ~100x).",
        ),
        click.option(
            "--device-tracer-level",
            default=1,
            show_default=True,
            help="0 turns device tracing off where jaxlib supports it.",
        ),
        click.option(
            "--grain-worker-profiling/--no-grain-worker-profiling",
            default=True,
            show_default=True,
            help="Trace Grain mp_prefetch workers where jax and Grain support it.",
        ),
        click.option(
            "--sample-interval-ms",
            type=click.FloatRange(min=0.0),
            default=20.0,
            show_default=True,
            help="Look at the training thread's Python stack this often while tracing, to "
            "name the loop's own untraced code by file:line (0: off).",
        ),
    ]
    decorated: Any = wrapper
    for option in reversed(options):
        decorated = option(decorated)
    return decorated
