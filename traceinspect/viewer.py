"""Opening a run in XProf's web UI (``traceinspect view``): the log directory XProf needs, a
free port, and the server process, started and stopped cleanly.

XProf (``pip install 'traceinspect[xprof]'``) reads only ``LOGDIR/plugins/profile/RUN/``. A run
already in that layout is served from its own log directory (XProf writes its cache files
next to the trace, as when it is started by hand); a file or directory outside it gets a
private log directory whose run links to the trace files, removed when the server stops.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from traceinspect.capture import start_in_own_session
from traceinspect.errors import UsageError
from traceinspect.xplane.fs import Location, URLPath
from traceinspect.xplane.locate import PROFILE_DIR, Located

INSTALL_HINT = "pip install 'traceinspect[xprof]'"
# XProf's HTTP route that lists the runs of its log directory (xprof 2.24: a JSON list).
RUNS_ROUTE = "/data/plugin/profile/runs"
# Seconds XProf gets to answer after it starts, and to exit after SIGINT before SIGKILL.
START_TIMEOUT_S = 120.0
STOP_GRACE_S = 10.0


@dataclass(frozen=True)
class XProfLogdir:
    """What XProf serves: its log directory, the run's name there, and whether the
    directory is a private one of links (removed with the server)."""

    path: Location
    run: str
    private: bool


def xprof_logdir(located: Located, scratch: Path) -> XProfLogdir:
    """The log directory to serve for ``located``'s run: its own when the run sits in
    ``LOGDIR/plugins/profile/RUN/``, else a directory under ``scratch`` whose run links
    to the trace files."""
    run_dir = located.run.path
    profile = run_dir.parent
    if (profile.parent.name, profile.name) == PROFILE_DIR:
        return XProfLogdir(profile.parent.parent, run_dir.name, private=False)
    if isinstance(run_dir, URLPath):
        raise UsageError(
            f"{located.requested}: XProf reads remote runs only in a log directory "
            f"(LOGDIR/{'/'.join(PROFILE_DIR)}/RUN/); pass the log directory, or download "
            "the files."
        )
    name = run_dir.name or "run"
    target = scratch / "logdir" / Path(*PROFILE_DIR) / name
    target.mkdir(parents=True)
    for host_file in located.run.files:
        source = Path(str(host_file.path)).resolve()
        link = target / source.name
        try:
            link.symlink_to(source)
        except OSError:  # a file system without symbolic links
            shutil.copy2(source, link)
    return XProfLogdir(scratch / "logdir", name, private=True)


def free_port() -> int:
    """A TCP port no one listens on now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        port: int = sock.getsockname()[1]
        return port


def xprof_installed() -> bool:
    return importlib.util.find_spec("xprof") is not None


class XProfServer:
    """XProf's web server on ``port``, in a process (and session) of its own, its output in
    ``log_path``. :meth:`wait_ready` waits until it answers; :meth:`stop` (or leaving the
    ``with`` block) stops it and removes the private files."""

    def __init__(self, logdir: XProfLogdir, port: int, scratch: Path) -> None:
        self.logdir = logdir
        self.port = port
        self.scratch = scratch
        self.log_path = scratch / "xprof.log"
        grpc_port = free_port()
        while grpc_port == port:
            grpc_port = free_port()
        argv = [
            sys.executable,
            "-m",
            "xprof.server",
            "--logdir",
            str(logdir.path),
            "--port",
            str(port),
            # XProf's own worker service, on a port of its own: its default (50051) is
            # taken by the second XProf on a machine.
            "--grpc_port",
            str(grpc_port),
        ]
        with self.log_path.open("wb") as log:
            try:
                self.proc = start_in_own_session(argv, log)
            except OSError as exc:
                raise UsageError(f"cannot start XProf ({exc.strerror or exc}).") from None

    @property
    def url(self) -> str:
        return f"http://localhost:{self.port}/"

    def runs(self, timeout_s: float = 5.0) -> list[str]:
        """The runs XProf lists (raises OSError while it does not answer)."""
        address = f"http://127.0.0.1:{self.port}{RUNS_ROUTE}"
        with urllib.request.urlopen(address, timeout=timeout_s) as response:
            data = response.read()
            if response.headers.get("Content-Encoding") == "gzip":
                import gzip

                data = gzip.decompress(data)
        runs = json.loads(data)
        if not isinstance(runs, list):
            raise OSError(f"XProf answered {RUNS_ROUTE} with {type(runs).__name__}")
        return [str(run) for run in runs]

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> list[str]:
        """Wait until XProf answers and return its runs; raise UsageError (with the last
        line it wrote) if it exits first or does not answer in time."""
        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc.poll() is not None:
                raise UsageError(
                    f"XProf exited with code {self.proc.returncode} before it answered on "
                    f"port {self.port}: {self.last_words()}"
                )
            try:
                return self.runs()
            except (OSError, ValueError):
                if time.monotonic() > deadline:
                    raise UsageError(
                        f"XProf did not answer on port {self.port} within {timeout_s:g} s; "
                        f"its output is in {self.log_path}."
                    ) from None
                time.sleep(0.25)

    def last_words(self) -> str:
        """The last line XProf wrote that says something (its error, usually)."""
        try:
            lines = self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return "no output"
        said = [line.strip() for line in lines if line.strip()]
        return said[-1][:300] if said else "no output"

    def wait(self) -> int:
        """Block until XProf exits (Ctrl-C raises KeyboardInterrupt here); its exit code."""
        while True:
            try:
                return self.proc.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                continue

    def stop(self) -> None:
        """SIGINT XProf's session (its own clean shutdown), SIGKILL it if it lingers; then
        remove the private files. A second Ctrl-C meanwhile does not cut this short."""
        main = threading.current_thread() is threading.main_thread()
        saved = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
        try:
            self._stop()
        finally:
            if saved is not None:
                signal.signal(signal.SIGINT, saved)

    def _stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        shutil.rmtree(self.scratch, ignore_errors=True)

    def __enter__(self) -> XProfServer:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def start_xprof(located: Located, port: int | None = None) -> XProfServer:
    """Start XProf on ``located``'s run, on ``port`` (default: a free one). Returns at once;
    :meth:`XProfServer.wait_ready` waits for it to answer."""
    if not xprof_installed():
        raise UsageError(f"traceinspect view runs XProf, which is not installed: {INSTALL_HINT}.")
    scratch = Path(tempfile.mkdtemp(prefix="traceinspect-xprof-"))
    try:
        logdir = xprof_logdir(located, scratch)
        return XProfServer(logdir, port or free_port(), scratch)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
