"""The typed errors of traceinspect: each names the input, what was expected and what to do."""

from __future__ import annotations


class TraceInspectError(Exception):
    """Base of every error traceinspect raises on purpose.

    The message is one line meant for a person: it names the path or command involved,
    says what was expected, and what to do next. The CLI prints it as is and exits with
    :attr:`exit_code`.
    """

    exit_code: int = 2


class TraceNotFoundError(TraceInspectError):
    """The path does not exist, or holds no ``*.xplane.pb`` file."""


class AmbiguousRunError(TraceInspectError):
    """A log directory holds several profile locations and the caller must pick one."""


class TraceDecodeError(TraceInspectError):
    """A file is not a readable XSpace: empty, truncated, corrupt or another format."""


class EmptyTraceError(TraceInspectError):
    """A well-formed XSpace that holds no events at all."""


class UsageError(TraceInspectError):
    """A call that cannot work as asked (bad regex, unknown format, unknown run name)."""


class CaptureError(TraceInspectError):
    """Running a script under the profiler failed before the script could start."""


class IsolateError(TraceInspectError):
    """A phase of ``traceinspect isolate`` gave no figure: the script crashed in it, drew no
    Grain batch, or no step was timed."""


class AnalysisError(TraceInspectError):
    """A trace that cannot be analysed as asked: no device activity, too few steps."""
