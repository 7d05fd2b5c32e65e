"""The typed errors of traceinspect: each names the input, what was expected and what to do."""

from __future__ import annotations


class TraceInspectError(Exception):
    """Base of every error traceinspect raises on purpose.

    The message is one line meant for a person: it names the path or command involved,
    says what was expected, and what to do next. The CLI prints it as is (with ``--json``:
    :meth:`to_dict` as ``{"error": ...}`` on stdout) and exits with :attr:`exit_code`: 1
    for a runtime or data error, 2 for a call that cannot work as asked (:class:`UsageError`,
    as Click's own usage errors).
    """

    exit_code: int = 1

    def __init__(self, message: str = "", *, path: object = None) -> None:
        super().__init__(message)
        #: The file, directory or URL the error is about, when there is one.
        self.path: str | None = None if path is None else str(path)

    def __reduce__(self) -> tuple[object, ...]:
        # Keeps ``path`` when a worker process (pod analysis) sends the error back.
        return (type(self), self.args, self.__dict__)

    def to_dict(self) -> dict[str, str | None]:
        """The error as the stable JSON object of ``--json``: type, message, path."""
        return {"type": type(self).__name__, "message": str(self), "path": self.path}


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

    exit_code = 2


class CaptureError(TraceInspectError):
    """Running a script under the profiler failed before the script could start."""


class CaptureUsageError(CaptureError, UsageError):
    """A capture command or option that cannot work as asked: not a Python script, a bad
    option value, an address that is not HOST:PORT (exit code 2, as a usage error)."""


class IsolateError(TraceInspectError):
    """A phase of ``traceinspect isolate`` gave no figure: the script crashed in it, drew no
    Grain batch, or no step was timed."""


class AnalysisError(TraceInspectError):
    """A trace that cannot be analysed as asked: no device activity, too few steps."""
