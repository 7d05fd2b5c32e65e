"""The profiler and step-finding options that ``capture`` and ``sweep`` share, passed on as
one ProfilerSettings."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


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
            default=False,
            show_default=True,
            help="Turn on Grain's worker profiling flag where jax and Grain support it. Off "
            "by default: jaxlib waits for each worker's profiler server holding the GIL, and "
            "a worker that dies while starting (Ctrl-C) hangs the script.",
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
