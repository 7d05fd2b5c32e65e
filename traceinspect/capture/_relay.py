"""While the child runs: signals passed on the way a shell user expects, the child's status
read for progress, and how it ended in the shell's terms."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

from traceinspect.capture._child import reap
from traceinspect.capture._types import INTERRUPT_GRACE_S, CaptureProgress, ProgressCallback
from traceinspect.capture._watchdog import Watchdog

# How often a caller's progress callback is called while the script runs (seconds).
PROGRESS_EVERY_S = 0.2
#: How long the child may take to save its trace once asked to (``TERMINATE_GRACE_S``) before
#: the script and what it started are killed regardless.
SAVE_GRACE_S = 15.0
#: The control line that tells the child a SIGINT came (``run._pass_on_interrupt``).
INTERRUPT = "interrupt"


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
    """Pass signals to the child the way a shell user expects, stop it when asked, and never
    wait forever.

    One SIGINT ends the script, whether a terminal sent it to the whole foreground process
    group (the script has it already) or someone sent it to capture alone (``timeout``,
    ``kill -INT``): the child is told, and raises it in itself unless it had it
    (``run._pass_on_interrupt``), so it gets it once. ``INTERRUPT_GRACE_S`` later a script
    still running gets SIGTERM (unless it is on its way out, its trace saved), and
    ``INTERRUPT_GRACE_S`` after that it is ended: its trace saved by a thread of the child,
    then killed (SIGKILL) with what it started. A second SIGINT sends the SIGTERM at once, a
    third ends it at once. SIGTERM and SIGHUP sent to us are forwarded, and the script is
    ended ``grace_s`` later. :meth:`stop` (capture's watchdog) sends SIGTERM and ends it
    ``INTERRUPT_GRACE_S`` later. Each stop first writes the stop file, so that the child ends
    what it started on its way out. A child that cannot save its trace (it holds the GIL) is
    killed from here, with every process below it, ``SAVE_GRACE_S`` after it was asked.
    """

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        grace_s: float,
        control_fd: int,
        stop_path: str,
        report_path: str | None = None,
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.proc = proc
        self.grace_s = grace_s
        self.control_fd = control_fd
        self.stop_path = stop_path
        self.report_path = report_path
        self.say = say if say is not None else _say_on_stderr
        self.interrupts = 0
        #: When a SIGTERM follows the first Ctrl-C.
        self.term_at: float | None = None
        self.kill_at: float | None = None
        self.kill_why = ""
        self.hard_kill_at: float | None = None
        #: Whether capture is stopping the script (a signal passed on, or its watchdog).
        self.stopping = False
        #: Why capture's watchdog stopped the script, when it did.
        self.stopped: str | None = None
        #: Why the child was ended from here, once it was.
        self.killed: str | None = None

    def _send(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(sig)

    def _tell(self, line: str) -> None:
        """A line to the child's watch on the control pipe (``run._watch_parent``)."""
        with contextlib.suppress(OSError):
            os.write(self.control_fd, f"{line}\n".encode())

    def _stopping(self) -> None:
        self.stopping = True
        with contextlib.suppress(OSError):
            Path(self.stop_path).touch()

    def _end(self, why: str) -> None:
        """Have the child save its trace and die; kill it from here if it cannot."""
        self.kill_at = self.term_at = None
        if self.killed is not None:
            return
        self.killed = why
        self._tell(why)
        self.hard_kill_at = time.monotonic() + SAVE_GRACE_S

    def _terminate(self, after: str) -> None:
        """SIGTERM the script, and end it ``INTERRUPT_GRACE_S`` later."""
        self.term_at = None
        self._send(signal.SIGTERM)
        if self.kill_at is None and self.killed is None:
            self.kill_at = time.monotonic() + INTERRUPT_GRACE_S
            self.kill_why = f"it went on {INTERRUPT_GRACE_S:g} s after {after}"

    def _ended_its_run(self) -> bool:
        """Whether the child has ended the script's run (its trace saved) and only has to
        exit: its report says how the script ended."""
        if self.report_path is None:
            return False
        try:
            report = json.loads(Path(self.report_path).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False
        return isinstance(report, dict) and bool(report.get("ended"))

    def _after_interrupt(self) -> None:
        """``INTERRUPT_GRACE_S`` after the first Ctrl-C: SIGTERM unless it is on its way out
        (its atexit handlers, Grain's workers ending), which it then has as long again."""
        if self._ended_its_run():
            self.term_at = None
            self.kill_at = time.monotonic() + INTERRUPT_GRACE_S
            self.kill_why = f"it went on {2 * INTERRUPT_GRACE_S:g} s after Ctrl-C"
        else:
            self._terminate("Ctrl-C and SIGTERM")

    def on_sigint(self, signum: int, frame: FrameType | None) -> None:
        self.interrupts += 1
        self._stopping()
        if self.interrupts == 1:
            self._tell(f"{INTERRUPT} {time.monotonic():.6f}")
            self.term_at = time.monotonic() + INTERRUPT_GRACE_S
        elif self.interrupts == 2:
            self._terminate("a second Ctrl-C and SIGTERM")
        else:
            self._end("a third Ctrl-C")

    def on_terminate(self, signum: int, frame: FrameType | None) -> None:
        self._stopping()
        self._send(signum)
        if self.kill_at is None and self.killed is None:
            self.kill_at = time.monotonic() + self.grace_s
            name = signal.Signals(signum).name
            self.kill_why = f"it went on {self.grace_s:g} s after {name}"

    def stop(self, why: str) -> None:
        """Stop the script on capture's own account (``why``): SIGTERM, then the end."""
        if self.stopping:
            return
        self.stopped = why
        self._stopping()
        self._terminate("SIGTERM")

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

    def wait(self, tick: Callable[[], None] | None = None, watchdog: Watchdog | None = None) -> int:
        while True:
            try:
                return self.proc.wait(timeout=PROGRESS_EVERY_S)
            except subprocess.TimeoutExpired:
                now = time.monotonic()
                if self.term_at is not None and now > self.term_at:
                    self._after_interrupt()
                if self.kill_at is not None and now > self.kill_at:
                    self._end(self.kill_why)
                if self.hard_kill_at is not None and now > self.hard_kill_at:
                    self.hard_kill_at = None
                    if self.proc.poll() is None:  # not reaped: the pid is still the child's
                        reap.kill_tree(self.proc.pid)
                if watchdog is not None and not self.stopping:
                    seen = watchdog.poll(now)
                    if seen is not None:
                        self.say(f"traceinspect: {seen}; stopping the script")
                        self.stop(seen)
                if tick is not None:
                    tick()


def _say_on_stderr(line: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(f"{line}\n")
        sys.stderr.flush()


def _exit_code(returncode: int) -> tuple[int, str | None]:
    """The shell's view: a child killed by signal N exits 128 + N."""
    if returncode >= 0:
        return returncode, None
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    return 128 - returncode, name
