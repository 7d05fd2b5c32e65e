"""The parent side of ``traceinspect capture``: start the child, pass signals, write the sidecar."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import functools
import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import Any, cast

from traceinspect import sidecar as SC
from traceinspect._version import __version__
from traceinspect.capture._child import ENTRY, facts, reap
from traceinspect.capture._child._base import _write_json_atomic
from traceinspect.capture._command import ScriptCommand, parse_command
from traceinspect.errors import CaptureError, CaptureUsageError

STEP_SOURCES = ("auto", "annotation", "grain", "jit", "time")
# The child rewrites this file in its scratch directory while the script runs (when the
# caller asked for progress): _Reporter reads it.
STATUS_NAME = "status.json"
# How often a caller's progress callback is called while the script runs (seconds).
PROGRESS_EVERY_S = 0.2
#: How long a script has to end after capture passed on SIGTERM or SIGHUP (or a second
#: Ctrl-C) before capture ends it (``CaptureOptions.kill_grace_s``): its trace is saved by a
#: thread of the child, then it is killed (SIGKILL) with the processes it started.
TERMINATE_GRACE_S = 5.0
#: How long that save may take before the script and what it started are killed regardless.
SAVE_GRACE_S = 15.0
# The child's scratch file that says capture is stopping it (``_child.run._stopping``).
STOP_NAME = "stopping"


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
    #: ``sweep`` chooses its count by them: the step the user will get, not the traced one.
    time_after: bool = False
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
    grain_worker_profiling: bool = True
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


def _read_status(path: str | Path) -> dict[str, Any] | None:
    """The child's status file (:class:`CaptureProgress`'s fields but the time), or None
    while there is none."""
    try:
        status = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(status, dict):
        return None
    known = {f.name for f in dataclasses.fields(CaptureProgress)} - {"elapsed_s"}
    return {key: value for key, value in status.items() if key in known}


class _Reporter:
    """Calls ``progress`` with the child's last status (kept when a read finds none)."""

    def __init__(self, progress: ProgressCallback, status_path: str) -> None:
        self.progress = progress
        self.status_path = status_path
        self.started = time.monotonic()
        self.last: dict[str, Any] = {}

    def __call__(self) -> None:
        status = _read_status(self.status_path)
        if status is not None:
            self.last = status
        self.progress(CaptureProgress(time.monotonic() - self.started, **self.last))


def _prepare_logdir(logdir: str, run_name: str | None = None) -> tuple[str, str, str]:
    """Create the run directory and a private scratch directory; fail early if unwritable.

    With ``run_name`` the run directory is that one, created if missing and shared with every
    other capture naming it; otherwise a new one named after the time.
    """
    root = Path(logdir).absolute()
    profile_root = root / "plugins" / "profile"
    try:
        profile_root.mkdir(parents=True, exist_ok=True)
        scratch = tempfile.mkdtemp(prefix=".traceinspect-tmp-", dir=root)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise CaptureError(
            f"cannot write to log directory '{root}' ({reason}): choose another with --logdir"
        ) from None
    if run_name is not None:
        run_dir = profile_root / run_name
        try:
            run_dir.mkdir(exist_ok=True)
        except OSError as exc:
            shutil.rmtree(scratch, ignore_errors=True)
            raise CaptureError(
                f"cannot create '{run_dir}' ({exc.strerror}): choose another --run-name"
            ) from None
        return run_name, str(run_dir), scratch
    # Same name format as jax's own runs, so TensorBoard and XProf sort them together.
    base = time.strftime("%Y_%m_%d_%H_%M_%S")
    for n in range(1, 1000):
        run_name = base if n == 1 else f"{base}_{n}"
        run_dir = profile_root / run_name
        try:
            run_dir.mkdir()
        except FileExistsError:
            continue
        except OSError as exc:
            shutil.rmtree(scratch, ignore_errors=True)
            raise CaptureError(
                f"cannot create '{run_dir}' ({exc.strerror}): choose another with --logdir"
            ) from None
        return run_name, str(run_dir), scratch
    raise CaptureError(f"too many runs named {base} in '{profile_root}'")


def _claim_host(run_dir: str, options: CaptureOptions, cmd: ScriptCommand) -> Path:
    """Reserve this host's place in a shared run directory, or refuse if it is taken.

    The host's sidecar is created exclusively, so two captures naming the same host in one
    run cannot both start; until the capture ends it says the capture has not finished.
    """
    host = options.host
    sidecar = Path(run_dir, SC.file_name(host))
    taken = f"run directory '{run_dir}' already holds host '{host}'"
    advice = "give each process its own --host-name, or use another --run-name"
    trace = Path(run_dir, f"{host}.xplane.pb")
    if trace.exists():
        raise CaptureUsageError(f"{taken} ({trace.name}): {advice}")
    placeholder: SC.SidecarJSON = {
        "schema_version": SC.SCHEMA_VERSION,
        "tool": {"name": "traceinspect", "version": __version__},
        "command": list(cmd.original),
        "run_name": options.run_name,
        "host_name": host,
        "run_dir": run_dir,
        "trace_files": [],
        "started_unix_ns": time.time_ns(),
        "partial": True,
        "partial_reasons": ["the capture had not ended (still running, or its parent died)"],
    }
    try:
        with sidecar.open("x", encoding="utf-8") as f:
            f.write(json.dumps(placeholder, indent=2) + "\n")
    except FileExistsError:
        raise CaptureUsageError(f"{taken} ({sidecar.name}): {advice}") from None
    except OSError as exc:
        raise CaptureError(f"cannot write '{sidecar}' ({exc.strerror})") from None
    return sidecar


def _window_options(options: CaptureOptions) -> dict[str, Any]:
    """The options that choose the traced window (given to the child, kept in the sidecar)."""
    return {
        "skip_steps": options.skip_steps,
        "steps": options.steps,
        "max_wait_s": options.max_wait_s,
        "window_max_s": options.window_max_s,
        "stop_after": options.stop_after,
        "time_after": options.time_after,
        "no_early_trace": not options.early_trace,
        "step_source": options.step_source,
        "delay_s": options.delay_s,
        "duration_s": options.duration_s,
    }


def _child_config(
    cmd: ScriptCommand,
    options: CaptureOptions,
    run_dir: str,
    scratch: str,
    control_fd: int | None = None,
) -> dict[str, Any]:
    return {
        "mode": cmd.mode,
        "target": cmd.target,
        "argv0": cmd.target,
        "args": list(cmd.args),
        "run_dir": run_dir,
        "host_name": options.host_name,
        "export_dir": str(Path(scratch, "export")),
        # The child dies with us (run.py: PR_SET_PDEATHSIG and _watch_parent), not on
        # orphaned, and so does what it started when we stop it (the stop file).
        "parent_pid": os.getpid(),
        "stop_path": str(Path(scratch, STOP_NAME)),
        "control_fd": control_fd,
        "kill_grace_s": options.kill_grace_s,
        "save_grace_s": SAVE_GRACE_S,
        "report_path": str(Path(scratch, "report.json")),
        **_window_options(options),
        "host_tracer_level": options.host_tracer_level,
        "python_tracer_level": 1 if options.python_tracer else 0,
        "device_tracer_level": options.device_tracer_level,
        "workers": options.workers,
        "grain_worker_profiling": options.grain_worker_profiling,
        "sample_interval_ms": options.sample_interval_ms,
        "quiet": options.quiet,
    }


class _SignalRelay:
    """Pass signals to the child the way a shell user expects, and never wait forever.

    Ctrl-C reaches the whole foreground process group, so the child already has it: the first
    SIGINT is not forwarded; a second one is, and a third ends the child at once. SIGTERM and
    SIGHUP sent to us are forwarded. Each stop first writes the stop file, so that the child
    ends what it started on its way out. If the child is still alive ``grace_s`` after a
    forwarded signal (it ignores SIGTERM, or is stuck), a line on the control pipe has a
    thread of the child save its trace and kill it; ``SAVE_GRACE_S`` later it is killed from
    here, with every process below it.
    """

    def __init__(
        self, proc: subprocess.Popen[bytes], grace_s: float, control_fd: int, stop_path: str
    ) -> None:
        self.proc = proc
        self.grace_s = grace_s
        self.control_fd = control_fd
        self.stop_path = stop_path
        self.interrupts = 0
        self.kill_at: float | None = None
        self.kill_why = ""
        self.hard_kill_at: float | None = None
        #: Why the child was ended from here, once it was.
        self.killed: str | None = None

    def _send(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(sig)

    def _stopping(self) -> None:
        with contextlib.suppress(OSError):
            Path(self.stop_path).touch()

    def _end(self, why: str) -> None:
        """Have the child save its trace and die; kill it from here if it cannot."""
        self.kill_at = None
        if self.killed is not None:
            return
        self.killed = why
        with contextlib.suppress(OSError):
            os.write(self.control_fd, f"{why}\n".encode())
        self.hard_kill_at = time.monotonic() + SAVE_GRACE_S

    def on_sigint(self, signum: int, frame: FrameType | None) -> None:
        self.interrupts += 1
        self._stopping()
        if self.interrupts == 2:
            self._send(signal.SIGINT)
            self.kill_at = time.monotonic() + self.grace_s
            self.kill_why = f"it went on {self.grace_s:g} s after a second Ctrl-C"
        elif self.interrupts >= 3:
            self._end("a third Ctrl-C")

    def on_terminate(self, signum: int, frame: FrameType | None) -> None:
        self._stopping()
        self._send(signum)
        if self.kill_at is None and self.killed is None:
            self.kill_at = time.monotonic() + self.grace_s
            name = signal.Signals(signum).name
            self.kill_why = f"it went on {self.grace_s:g} s after {name}"

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        handlers = {
            signal.SIGINT: self.on_sigint,
            signal.SIGTERM: self.on_terminate,
            signal.SIGHUP: self.on_terminate,
        }
        # A signal this process was started with ignored stays ignored: the script inherits
        # that (exec keeps an ignored signal ignored, and Python then installs no
        # KeyboardInterrupt), as it would without traceinspect. A background job of a
        # non-interactive shell ignores SIGINT, nohup ignores SIGHUP: relayed, capture would
        # wait on a script that never hears it, or end a run nohup was asked to keep.
        handlers = {
            sig: handler
            for sig, handler in handlers.items()
            if signal.getsignal(sig) is not signal.SIG_IGN
        }
        saved = {sig: signal.signal(sig, handler) for sig, handler in handlers.items()}
        try:
            yield
        finally:
            for sig, handler in saved.items():
                signal.signal(sig, handler)

    def wait(self, tick: Callable[[], None] | None = None) -> int:
        while True:
            try:
                return self.proc.wait(timeout=PROGRESS_EVERY_S)
            except subprocess.TimeoutExpired:
                now = time.monotonic()
                if self.kill_at is not None and now > self.kill_at:
                    self._end(self.kill_why)
                if self.hard_kill_at is not None and now > self.hard_kill_at:
                    self.hard_kill_at = None
                    if self.proc.poll() is None:  # not reaped: the pid is still the child's
                        reap.kill_tree(self.proc.pid)
                if tick is not None:
                    tick()


def _read_report(path: str) -> SC.ChildReportJSON | None:
    try:
        report = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return cast(SC.ChildReportJSON, report) if isinstance(report, dict) else None


def _write_error(run_dir: str) -> str | None:
    """Why nothing more can be written in ``run_dir``, or None when it can."""
    if not Path(run_dir).is_dir():
        return f"the run directory '{run_dir}' was removed while the script ran"
    try:
        with tempfile.TemporaryFile(dir=run_dir) as probe:
            probe.write(bytes(1 << 16))
            probe.flush()
            os.fsync(probe.fileno())
    except OSError as exc:
        reason = exc.strerror or str(exc)
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return f"the disk under '{run_dir}' is full ({reason})"
        return f"cannot write in '{run_dir}' ({reason})"
    return None


def _exit_code(returncode: int) -> tuple[int, str | None]:
    """The shell's view: a child killed by signal N exits 128 + N."""
    if returncode >= 0:
        return returncode, None
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    return 128 - returncode, name


def run_capture(
    command: Sequence[str],
    options: CaptureOptions | None = None,
    progress: ProgressCallback | None = None,
) -> CaptureResult:
    """Run ``command`` (a Python script or module) under the profiler and write a run directory.

    Returns once the script has ended. The script's exit code is in the result; errors in the
    command or the log directory raise :class:`~traceinspect.errors.CaptureError` before the
    script starts. ``progress`` is called every ``PROGRESS_EVERY_S`` while the script runs
    with a :class:`CaptureProgress` (steps seen, the window's state).
    """
    options = options or CaptureOptions()
    options.check()
    cmd = parse_command(command)
    shared = options.run_name is not None
    run_name, run_dir, scratch = _prepare_logdir(options.logdir, options.run_name)
    sidecar_path = Path(run_dir, SC.file_name(options.host if shared else None))
    control: tuple[int, int] | None = None
    try:
        if shared:
            _claim_host(run_dir, options, cmd)
        # The child gets the read end of this pipe; only we hold the write end, so the child
        # sees it close when we die, however we die (run.py: _watch_parent).
        control = os.pipe()
        config = _child_config(cmd, options, run_dir, scratch, control_fd=control[0])
        if progress is not None:
            config["status_path"] = str(Path(scratch, STATUS_NAME))
        config_path = Path(scratch, "config.json")
        config_path.write_text(json.dumps(config), encoding="utf-8")
        argv = [cmd.python, *cmd.interpreter_options, ENTRY, str(config_path)]
        started_ns = time.time_ns()
        # fd 2, this process' stderr: the script's output stays apart from our JSON.
        proc = subprocess.Popen(
            argv,
            stdout=2 if options.script_stdout_to_stderr else None,
            pass_fds=(control[0],),
        )
    except (CaptureError, OSError) as exc:
        if control is not None:
            os.close(control[1])
        shutil.rmtree(scratch, ignore_errors=True)
        if isinstance(exc, CaptureError):
            raise
        if shared:
            sidecar_path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            # Only if empty: a shared run directory may hold other hosts' files.
            Path(run_dir).rmdir()
        raise CaptureError(f"cannot start {cmd.python!r}: {exc.strerror or exc}") from None
    finally:
        if control is not None:
            os.close(control[0])
    relay = _SignalRelay(proc, options.kill_grace_s, control[1], config["stop_path"])
    tick = None if progress is None else _Reporter(progress, config["status_path"])
    try:
        with relay.installed():
            returncode = relay.wait(tick)
    finally:
        os.close(control[1])
    ended_ns = time.time_ns()

    exit_code, exit_signal = _exit_code(returncode)
    # Asked to end, it may have ended by itself meanwhile: killed only if it died so.
    killed = relay.killed if exit_signal == "SIGKILL" else None
    report = _read_report(config["report_path"])
    shutil.rmtree(scratch, ignore_errors=True)
    # No report, or no trace: say why when the run directory cannot be written (the child's
    # own message about it went to the script's stderr).
    missing = report is None or not report.get("trace_files")
    write_error = _write_error(run_dir) if missing else None
    sidecar = _build_sidecar(
        cmd,
        options,
        run_name=run_name,
        run_dir=run_dir,
        report=report,
        exit_code=exit_code,
        exit_signal=exit_signal,
        started_ns=started_ns,
        ended_ns=ended_ns,
        write_error=write_error,
        killed=killed,
    )
    try:
        _write_json_atomic(str(sidecar_path), sidecar)
    except OSError as exc:
        write_error = write_error or f"cannot write '{sidecar_path}' ({exc.strerror or exc})"
        with contextlib.suppress(OSError):
            Path(f"{sidecar_path}.tmp{os.getpid()}").unlink()
    # A shared run directory holds other hosts' files too: list only this host's.
    pattern = f"{glob.escape(options.host)}.xplane.pb" if shared else "*.xplane.pb"
    traces = tuple(str(p) for p in sorted(Path(run_dir).glob(pattern)))
    return CaptureResult(
        run_dir=run_dir,
        sidecar_path=str(sidecar_path),
        trace_paths=traces,
        exit_code=exit_code,
        partial=bool(sidecar["partial"]),
        partial_reasons=tuple(sidecar["partial_reasons"]),
        sidecar=sidecar,
        write_error=write_error,
        killed=killed,
    )


def _build_sidecar(
    cmd: ScriptCommand,
    options: CaptureOptions,
    *,
    run_name: str,
    run_dir: str,
    report: SC.ChildReportJSON | None,
    exit_code: int,
    exit_signal: str | None,
    started_ns: int,
    ended_ns: int,
    write_error: str | None = None,
    killed: str | None = None,
) -> SC.SidecarJSON:
    """The sidecar: the run as the parent saw it, and the child's report of it."""
    reasons: list[str] = []
    if write_error is not None:
        reasons.append(f"no trace could be written: {write_error}")
    if report is None and killed is not None:
        reasons.append(f"the script was killed by traceinspect ({killed}) before it saved a trace")
    elif report is None and write_error is None:
        reasons.append(
            "the script ended before traceinspect could record anything"
            + (f" (killed by {exit_signal})" if exit_signal else "")
        )
    if report is None:
        report = {"host": facts._host_info(), "versions": facts._versions()}
    reasons.extend(report.get("partial_reasons", []))
    window = report.get("window")
    trace_files = [name for name in report.get("trace_files", []) if name.endswith(".xplane.pb")]
    if not trace_files and not reasons:
        reasons.append("no trace was written")
    elif not (window is not None and window.get("complete")) and not reasons:
        reasons.append(f"the script ended with exit code {exit_code} inside the window")
    sidecar: SC.SidecarJSON = {
        "schema_version": SC.SCHEMA_VERSION,
        "tool": {"name": "traceinspect", "version": __version__},
        "command": list(cmd.original),
        "python": cmd.python,
        "cwd": str(Path.cwd()),
        "run_name": run_name,
        "run_dir": run_dir,
        "host_name": options.host,
        "shared_run": options.run_name is not None,
        "trace_files": trace_files,
        "started_unix_ns": started_ns,
        "ended_unix_ns": ended_ns,
        "exit_code": exit_code,
        "exit_signal": exit_signal,
        "partial": bool(reasons),
        "partial_reasons": reasons,
        "options": {**_window_options(options), "workers": options.workers},
    }
    # The child's report follows, less what the parent decided above.
    rest = {key: value for key, value in report.items() if key not in sidecar}
    return cast(SC.SidecarJSON, {**sidecar, **rest})
