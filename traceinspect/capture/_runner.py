"""The parent side of ``traceinspect capture``: start the child, pass signals, write the sidecar.

The options and results are ``_types.py``; passing signals and reading the child's status
while it runs ``_relay.py``."""

from __future__ import annotations

import contextlib
import errno
import glob
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from traceinspect import sidecar as SC
from traceinspect._version import __version__
from traceinspect.capture import _relay
from traceinspect.capture._child import ENTRY, facts
from traceinspect.capture._child._base import _write_json_atomic
from traceinspect.capture._command import ScriptCommand, parse_command
from traceinspect.capture._relay import PROGRESS_EVERY_S, _exit_code, _Reporter, _SignalRelay
from traceinspect.capture._stderr import ScriptStderr
from traceinspect.capture._types import (
    INTERRUPT_GRACE_S,
    STEP_SOURCES,
    TERMINATE_GRACE_S,
    CaptureOptions,
    CaptureProgress,
    CaptureResult,
    ProgressCallback,
)
from traceinspect.capture._watchdog import Watchdog, stall_floor_s
from traceinspect.errors import CaptureError, CaptureUsageError

__all__ = [
    "INTERRUPT_GRACE_S",
    "PROGRESS_EVERY_S",
    "STEP_SOURCES",
    "TERMINATE_GRACE_S",
    "CaptureOptions",
    "CaptureProgress",
    "CaptureResult",
    "ProgressCallback",
    "_Reporter",
    "_SignalRelay",
    "_child_config",
    "_exit_code",
    "_prepare_logdir",
    "run_capture",
]

# The child rewrites this file in its scratch directory while the script runs: _Reporter
# (progress) and the watchdog (the steps) read it.
STATUS_NAME = "status.json"
# The child's scratch file that says capture is stopping it (``_child.run._stopping``).
STOP_NAME = "stopping"


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
        "time_after": (
            options.time_after if options.time_after is not None else not options.stop_after
        ),
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
        "save_grace_s": _relay.SAVE_GRACE_S,
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
    floor_s = stall_floor_s()
    shared = options.run_name is not None
    run_name, run_dir, scratch = _prepare_logdir(options.logdir, options.run_name)
    sidecar_path = Path(run_dir, SC.file_name(options.host if shared else None))
    control: tuple[int, int] | None = None
    stderr: ScriptStderr | None = None
    try:
        if shared:
            _claim_host(run_dir, options, cmd)
        # The child gets the read end of this pipe; only we hold the write end, so the child
        # sees it close when we die, however we die (run.py: _watch_parent).
        control = os.pipe()
        config = _child_config(cmd, options, run_dir, scratch, control_fd=control[0])
        config["status_path"] = str(Path(scratch, STATUS_NAME))
        config_path = Path(scratch, "config.json")
        config_path.write_text(json.dumps(config), encoding="utf-8")
        argv = [cmd.python, *cmd.interpreter_options, ENTRY, str(config_path)]
        # The script's stderr passes through us (_stderr.py): the watchdog reads what its
        # workers said before they died. With --json its stdout goes there too.
        stderr = ScriptStderr()
        started_ns = time.time_ns()
        proc = subprocess.Popen(
            argv,
            stdout=stderr.write_fd if options.script_stdout_to_stderr else None,
            stderr=stderr.write_fd,
            pass_fds=(control[0],),
        )
    except (CaptureError, OSError) as exc:
        if control is not None:
            os.close(control[1])
        if stderr is not None:
            stderr.abandon()
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
    stderr.start()
    relay = _SignalRelay(
        proc,
        options.kill_grace_s,
        control[1],
        config["stop_path"],
        report_path=config["report_path"],
        say=stderr.say,
    )
    watchdog = Watchdog(
        proc.pid,
        config["status_path"],
        stderr.tracebacks,
        floor_s=floor_s,
        script_path=cmd.target if cmd.mode == "path" else None,
    )
    tick = None if progress is None else _Reporter(progress, config["status_path"])
    try:
        with relay.installed():
            returncode = relay.wait(tick, watchdog)
    finally:
        os.close(control[1])
        stderr.close()
    if relay.stopping:
        # What left the script's tree when its parent died first (the child ended those
        # still below it on its way out).
        watchdog.end_leftovers()
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
        stopped=relay.stopped,
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
        stopped=relay.stopped,
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
    stopped: str | None = None,
) -> SC.SidecarJSON:
    """The sidecar: the run as the parent saw it, and the child's report of it."""
    reasons: list[str] = []
    if stopped is not None:
        reasons.append(f"traceinspect stopped the script: {stopped}")
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
