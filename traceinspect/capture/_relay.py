"""While the child runs: signals passed on the way a shell user expects, the child's status
read for progress, and how it ended in the shell's terms."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

from traceinspect.capture._child import reap
from traceinspect.capture._types import CaptureProgress, ProgressCallback

# How often a caller's progress callback is called while the script runs (seconds).
PROGRESS_EVERY_S = 0.2
#: How long the child may take to save its trace once asked to (``TERMINATE_GRACE_S``) before
#: the script and what it started are killed regardless.
SAVE_GRACE_S = 15.0


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


def _exit_code(returncode: int) -> tuple[int, str | None]:
    """The shell's view: a child killed by signal N exits 128 + N."""
    if returncode >= 0:
        return returncode, None
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    return 128 - returncode, name
