"""The script's stderr as capture passes it on: copied to capture's own as it comes, and read
for the Python tracebacks in it (what a worker process said before it died).

The script writes into a pipe, or a pseudo-terminal when capture's stderr is a terminal, so
that the script still sees one (``isatty``, its width, colours). The bytes are passed on
unchanged: the pseudo-terminal does no output processing of its own (no ``\\r`` added).
Everything the script starts writes there too (Grain's workers inherit the script's stderr),
so a worker's traceback passes through here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import select
import threading
import time
from collections import deque

#: The first line of a Python traceback.
TRACEBACK = "Traceback (most recent call last):"
_TRACEBACK_BYTES = TRACEBACK.encode()
_FRAME = re.compile(r'^\s+File "(?P<file>[^"]*)", line \d+, in (?P<name>\S+)')
# The exception line: a (dotted) class name at the margin, alone or before ": message".
# Frames, source lines and carets are indented; a caret line that lost its indent when two
# processes wrote at once (seen with two Grain workers dying together) is not one.
_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(:\s.*)?$")
# How many tracebacks are kept, the newest last.
_KEPT = 16
# After the script ended: how long its stderr is read on for what is still on the way
# (processes it left running may keep it open: no end of file comes then).
DRAIN_S = 0.5
_CHUNK = 1 << 16


@dataclasses.dataclass(frozen=True)
class Traceback:
    """One traceback seen on the script's stderr."""

    #: The exception line (``ValueError: ...``), at most ``_LINE_MAX`` characters.
    error: str
    #: The frames, outermost first: (file, function).
    frames: tuple[tuple[str, str], ...]
    #: When its exception line came (``time.monotonic()``).
    at: float

    def in_worker(self) -> bool:
        """Whether it came from a process that multiprocessing started (spawned, forked or
        from a forkserver): its outermost frames are multiprocessing's bootstrap."""
        return any(
            "multiprocessing" in file and name in ("spawn_main", "_bootstrap", "_main")
            for file, name in self.frames
        )

    def reran_main(self) -> bool:
        """Whether it was raised while the script ran again at a worker's start: a spawned
        process imports ``__main__`` anew (multiprocessing's ``_fixup_main_from_path`` or
        ``_fixup_main_from_name``), running its top level; a guarded script stops at
        ``if __name__ == "__main__":``."""
        return any(name.startswith("_fixup_main_from_") for _, name in self.frames)


_LINE_MAX = 300


class TracebackReader:
    """Finds Python tracebacks in lines of text as they come, and keeps the last few."""

    def __init__(self) -> None:
        self._frames: list[tuple[str, str]] | None = None
        self.seen: deque[Traceback] = deque(maxlen=_KEPT)

    @property
    def inside(self) -> bool:
        """Whether the last line fed was inside a traceback (before its exception line)."""
        return self._frames is not None

    def feed(self, line: str) -> None:
        if line.startswith(TRACEBACK):
            self._frames = []
            return
        if self._frames is None:
            return
        frame = _FRAME.match(line)
        if frame is not None:
            self._frames.append((frame["file"], frame["name"]))
        elif line and _EXCEPTION.match(line):
            error = line.strip()
            if len(error) > _LINE_MAX:
                error = error[: _LINE_MAX - 3] + "..."
            self.seen.append(Traceback(error, tuple(self._frames), time.monotonic()))
            self._frames = None

    def last(self, since: float = 0.0, worker: bool = False) -> Traceback | None:
        """The newest traceback whose exception line came at or after ``since`` (and that
        came from a worker process, with ``worker``)."""
        for tb in reversed(self.seen):
            if tb.at < since:
                return None
            if not worker or tb.in_worker():
                return tb
        return None


class ScriptStderr:
    """The script's stderr: ``write_fd`` for the script, copied to ``out_fd`` by a thread.

    ``say(text)`` writes a line of capture's own there, after the script's line in progress.
    """

    def __init__(self, out_fd: int = 2) -> None:
        self.out_fd = out_fd
        self.read_fd, self.write_fd = _open(out_fd)
        self.tracebacks = TracebackReader()
        self._lock = threading.Lock()
        self._line_open = False
        self._pending = b""
        self._closing_at: float | None = None
        self._thread = threading.Thread(target=self._copy, name="traceinspect-stderr", daemon=True)

    def start(self) -> None:
        """Once the script has started: our copy of its end is closed (the end of file then
        comes when the script and what it started have closed theirs) and the copying starts."""
        os.close(self.write_fd)
        self._thread.start()

    def _copy(self) -> None:
        while True:
            closing = self._closing_at
            wait = 0.05 if closing is None else max(0.0, closing - time.monotonic())
            try:
                ready, _, _ = select.select([self.read_fd], [], [], wait)
            except ValueError:  # a descriptor past select's limit: plain blocking reads
                ready = [self.read_fd]
            except OSError:
                return
            if not ready:
                if closing is not None and time.monotonic() >= closing:
                    return
                continue
            try:
                data = os.read(self.read_fd, _CHUNK)
            except OSError:  # EIO: a pseudo-terminal whose every other end is closed
                data = b""
            if not data:
                return
            with self._lock:
                _write_all(self.out_fd, data)
                self._line_open = not data.endswith(b"\n")
            self._read_lines(data)

    def _read_lines(self, data: bytes) -> None:
        text = self._pending + data
        if not self.tracebacks.inside:
            # Only tracebacks are read: a script that logs much costs a search per chunk.
            start = text.find(_TRACEBACK_BYTES)
            if start < 0:
                # The unfinished last line is kept: a traceback may begin in it.
                self._pending = text[text.rfind(b"\n") + 1 :][-_CHUNK:]
                return
            text = text[start:]
        *lines, self._pending = text.split(b"\n")
        if len(self._pending) > _CHUNK:  # no line end in sight (a progress bar's \r)
            self._pending = b""
        for line in lines:
            self.tracebacks.feed(line.decode("utf-8", "replace").rstrip("\r"))

    def say(self, text: str) -> None:
        """One line of capture's on the script's stderr, on a line of its own."""
        with self._lock:
            prefix = "\n" if self._line_open else ""
            _write_all(self.out_fd, f"{prefix}{text}\n".encode())
            self._line_open = False

    def close(self, drain_s: float = DRAIN_S) -> None:
        """Once the script has ended: pass on what it wrote until the end of file, or for
        ``drain_s`` at most, then stop."""
        if self._thread.is_alive():
            self._closing_at = time.monotonic() + drain_s
            self._thread.join(drain_s + 1.0)
        with contextlib.suppress(OSError):
            os.close(self.read_fd)

    def abandon(self) -> None:
        """The script never started: close both ends."""
        for fd in (self.read_fd, self.write_fd):
            with contextlib.suppress(OSError):
                os.close(fd)


def _open(out_fd: int) -> tuple[int, int]:
    """A pseudo-terminal like ``out_fd`` when it is a terminal, else a pipe: (read, write)."""
    if os.isatty(out_fd):
        try:
            return _pseudo_terminal(out_fd)
        except (ImportError, OSError):
            pass
    return os.pipe()


def _pseudo_terminal(like_fd: int) -> tuple[int, int]:
    import fcntl
    import termios

    controller, script_end = os.openpty()
    try:
        attrs = termios.tcgetattr(script_end)
        attrs[1] &= ~termios.OPOST  # bytes pass unchanged; the real terminal processes them
        termios.tcsetattr(script_end, termios.TCSANOW, attrs)
        with contextlib.suppress(OSError):
            size = fcntl.ioctl(like_fd, termios.TIOCGWINSZ, b"\0" * 8)
            fcntl.ioctl(script_end, termios.TIOCSWINSZ, size)
    except (OSError, termios.error):
        os.close(controller)
        os.close(script_end)
        raise OSError("cannot set up a pseudo-terminal") from None
    os.set_inheritable(script_end, False)
    return controller, script_end


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except BlockingIOError:
            select.select([], [fd], [], 1.0)
            continue
        except OSError:  # our stderr is gone: the script's output goes nowhere, as it would
            return
        view = view[written:]
