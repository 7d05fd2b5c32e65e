"""The one way commands load a trace: PATH and the options that say how to read it
(TraceRequest, trace_input), with the decoding's progress on a terminal."""

from __future__ import annotations

import bisect
import functools
import itertools
from collections.abc import Callable, Sequence
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

        path, run = to_location(kwargs.pop("path")), kwargs.pop("run")
        refuse_run_of_a_file(path, run)
        request = TraceRequest(
            path=path,
            run=run,
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


def refuse_run_of_a_file(path: Path | URLPath, run: str | None, option: str = "--run") -> None:
    """``--run NAME`` picks one run of a log directory: given with a single trace file, it
    would be ignored; refused instead, in one line. (A URL is not listed for this: one
    ending in ``.xplane.pb`` is taken for a file.)"""
    if run is None:
        return
    if path.is_file() if isinstance(path, Path) else path.name.endswith(".xplane.pb"):
        from traceinspect.errors import UsageError

        raise UsageError(
            f"{option} {run} picks a run of a log directory, but {path} is one trace file: "
            f"leave {option} out, or pass the log directory.",
            path=path,
        )


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
