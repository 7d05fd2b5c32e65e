"""What a capture is asked to do (CaptureOptions), where a running one is (CaptureProgress)
and what it produced (CaptureResult)."""

from __future__ import annotations

import dataclasses
import functools
import socket
from collections.abc import Callable
from typing import Any

from traceinspect import sidecar as SC
from traceinspect.errors import CaptureUsageError

STEP_SOURCES = ("auto", "annotation", "grain", "jit", "time")
#: How long a script has to end after capture passed on SIGTERM or SIGHUP before capture
#: ends it (``CaptureOptions.kill_grace_s``): its trace is saved by a thread of the child,
#: then it is killed (SIGKILL) with the processes it started.
TERMINATE_GRACE_S = 5.0
#: After a Ctrl-C (SIGINT) reached the script, how long it has to end before capture sends
#: SIGTERM; after that SIGTERM (or the one capture's watchdog sends), how long before capture
#: ends it (trace saved, SIGKILL with what it started). A script that ends on Ctrl-C (its
#: trace written: 47-440 ms in our runs; its Grain workers stopped: a second or two) is gone
#: before; one stuck on its way out (a Grain iterator joining a thread blocked for ever on a
#: dead worker) is ended 6 s after one Ctrl-C.
INTERRUPT_GRACE_S = 3.0


@dataclasses.dataclass(frozen=True)
class CaptureOptions:
    """How to trace: which steps, which profiler settings, where to write."""

    logdir: str = "traceinspect_logs"
    #: None: open the window once the run is steady (``_child.steady.STEADY_*``); N: after N steps.
    skip_steps: int | None = None
    #: None: at least 20 steps and at least 1 s (``_child.state.DEFAULT_STEPS``, ``WINDOW_MIN_S``).
    steps: int | None = None
    #: With the steady-state rule: open the window after this long even if not yet steady.
    max_wait_s: float = 120.0
    #: Close the window after this long even before ``steps`` steps (at least 5 traced).
    window_max_s: float = 60.0
    stop_after: bool = False
    #: After the window, time the steps on without the profiler (``_child.untraced``: as many
    #: steps and as long as the window, at least ``UNTRACED_MIN_S``), kept in the sidecar as
    #: ``window.untraced_after``; with ``stop_after`` the script is stopped after them.
    #: ``sweep`` chooses its count by them: the step the user will get, not the traced one;
    #: ``analyze`` compares the window with them (its untraced step). None: on, unless
    #: ``stop_after`` (``capture --stop-after``: stop once the window is written).
    time_after: bool | None = None
    #: With the steady-state rule: trace from step 2 until the run is first steady, kept only
    #: when the script ends before the window opens (``_child.early.EARLY_*``).
    early_trace: bool = True
    step_source: str = "auto"
    delay_s: float = 10.0
    duration_s: float = 5.0
    host_tracer_level: int = 2
    python_tracer: bool = False
    device_tracer_level: int = 1
    workers: int | None = None
    #: Grain's worker profiling flag (off: jaxlib's ``register_subprocess`` waits for each
    #: worker's profiler server holding the GIL; a worker that dies first hangs the script).
    grain_worker_profiling: bool = False
    #: How often the training thread's Python stack is sampled while tracing (0: never).
    sample_interval_ms: float = 20.0
    quiet: bool = False
    #: The script's stdout goes to this process's stderr (``capture --json``: stdout holds
    #: the JSON alone).
    script_stdout_to_stderr: bool = False
    #: After a stop passed on, how long before the script is ended (``TERMINATE_GRACE_S``).
    kill_grace_s: float = TERMINATE_GRACE_S
    #: A run directory shared by every capture that names it (one per host of a pod); None
    #: for a new timestamped one.
    run_name: str | None = None
    #: The host part of the file names (``<host>.xplane.pb``); None for this machine's name.
    host_name: str | None = None

    @property
    def host(self) -> str:
        """The host the files are named after."""
        return self.host_name if self.host_name is not None else socket.gethostname()

    def check(self) -> None:
        _check_name("--run-name", self.run_name)
        _check_name("--host-name", self.host_name)
        if self.steps is not None and self.steps < 1:
            raise CaptureUsageError(f"--steps must be at least 1, got {self.steps}")
        if self.skip_steps is not None and self.skip_steps < 0:
            raise CaptureUsageError(f"--skip-steps must be 0 or more, got {self.skip_steps}")
        if self.max_wait_s <= 0 or self.window_max_s <= 0:
            raise CaptureUsageError("--max-wait and --window-max must be more than 0 seconds")
        if self.step_source not in STEP_SOURCES:
            raise CaptureUsageError(
                f"unknown step source {self.step_source!r}: use one of {', '.join(STEP_SOURCES)}"
            )
        if self.delay_s < 0 or self.duration_s <= 0:
            raise CaptureUsageError("--delay must be >= 0 and --duration > 0 (seconds)")
        if self.workers is not None and self.workers < 0:
            raise CaptureUsageError(f"--workers must be 0 or more, got {self.workers}")


def _check_name(option: str, name: str | None) -> None:
    """A run or host name must be one plain path component."""
    if name is None:
        return
    if not name.strip() or name in (".", "..") or "/" in name or "\0" in name:
        raise CaptureUsageError(
            f"{option} {name!r} cannot be a file name: give a non-empty name without '/'"
        )


@dataclasses.dataclass(frozen=True)
class CaptureResult:
    """What a capture produced: where the files are, how the run ended, the sidecar."""

    run_dir: str
    sidecar_path: str
    trace_paths: tuple[str, ...]
    exit_code: int
    partial: bool
    partial_reasons: tuple[str, ...]
    #: The sidecar as written (:mod:`traceinspect.sidecar` documents it; :attr:`record`
    #: reads it).
    sidecar: SC.SidecarJSON
    #: Why the run directory could not be written (a full disk, a folder gone), when it
    #: could not: the trace, the report or the sidecar is missing (``capture`` exits 1).
    write_error: str | None = None
    #: Why capture killed the script (it went on ``kill_grace_s`` after SIGTERM), when it did.
    killed: str | None = None
    #: What capture's watchdog saw when it stopped the script (no step for long, a worker
    #: dead: ``_watchdog.Watchdog``), when it did.
    stopped: str | None = None

    @functools.cached_property
    def record(self) -> SC.Sidecar:
        """The sidecar, read (typed)."""
        record = SC.parse(self.sidecar)
        assert record is not None  # written by this very version
        return record

    @property
    def step_source(self) -> str | None:
        return self.record.step_source

    def summary(self) -> str:
        """One line: the window, how steps were found, the mean step time and the exit code."""
        record = self.record
        window, source, detail = record.window, record.step_source, record.step_source_detail
        if not self.trace_paths:
            what = "no trace captured"
        elif source == "time":
            what = f"traced a {detail}"
        elif window is not None and window.first_step is not None:
            what = (
                f"traced steps {window.first_step}-{window.last_step} ({detail}; found by {source})"
            )
        else:
            what = "traced"
        step = record.step_time_ms()
        mean = ""
        if step is not None:
            ms, count, how = step
            mean = {
                "completed": f", mean step {ms:.1f} ms over {count} completed step(s)",
                "host": f", mean step {ms:.1f} ms over {count} step(s) (the host's step starts: "
                "the device finished its steps faster than the host began them)",
                "host only": f", mean step {ms:.1f} ms (the host's step starts: no step output "
                "to wait on)",
            }[how]
        reason = window.reason if window is not None else None
        why = f"; {reason}" if self.trace_paths and reason else ""
        # The window's reason may start with a partial reason ("the script returned before
        # the run was steady (...): kept the early trace"): said once, there.
        reasons = [r for r in self.partial_reasons if not (why and why.startswith(f"; {r}"))]
        state = (
            (", partial" + (f": {'; '.join(reasons)}" if reasons else "")) if self.partial else ""
        )
        return f"{what}{mean}{state}{why}; script exit code {self.exit_code}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_dir": self.run_dir,
            "sidecar_path": self.sidecar_path,
            "trace_paths": list(self.trace_paths),
            "exit_code": self.exit_code,
            "partial": self.partial,
            "partial_reasons": list(self.partial_reasons),
            "write_error": self.write_error,
            "killed": self.killed,
            "stopped": self.stopped,
            "summary": self.summary(),
        }


@dataclasses.dataclass(frozen=True)
class CaptureProgress:
    """Where a running capture is, as its child last said (for a progress display).

    ``phase``: ``starting`` (no word from the child yet), ``waiting`` (counting steps until
    the window opens), ``tracing``, ``writing`` (the profiler writes the trace) or ``done``
    (the window is captured; the script may go on)."""

    elapsed_s: float
    phase: str = "starting"
    #: Steps of the chosen step source so far, and the time of the last complete one.
    steps: int = 0
    last_step_ms: float | None = None
    #: The window's first step and the last traced so far (None before it opens).
    first_step: int | None = None
    last_step: int | None = None
    #: How the window opened (``skip``, ``steady``, ``time_bound``), once it did.
    rule: str | None = None
    #: ``--skip-steps`` (None: the steady-state rule).
    skip_steps: int | None = None
    #: The step source (``annotation``, ``grain``, ``jit``, ``time``), once chosen.
    source: str | None = None


ProgressCallback = Callable[[CaptureProgress], None]
