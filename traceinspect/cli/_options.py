"""Options shared by several commands, as decorators, and the one way commands load a trace."""

from __future__ import annotations

import bisect
import contextlib
import functools
import itertools
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


def json_option(func: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")(func)


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

    def capture_kwargs(self) -> dict[str, Any]:
        """As keyword arguments of :class:`traceinspect.capture.CaptureOptions`."""
        return dict(self.__dict__)


def profiler_options(func: F) -> F:
    """The options of :class:`ProfilerSettings`, passed on as ``profiler``."""
    from traceinspect.capture import STEP_SOURCES

    names = (
        "step_source",
        "delay",
        "duration",
        "host_tracer_level",
        "python_tracer",
        "device_tracer_level",
        "grain_worker_profiling",
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
            help="Time window length (s). With capture --attach: how long to trace (default "
            "there: 3 s, or long enough for 20 steps when 3 s hold fewer than 10, at most 60).",
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
    ]
    decorated: Any = wrapper
    for option in reversed(options):
        decorated = option(decorated)
    return decorated
