"""Progress of long work on stderr: one line that rewrites itself, on a terminal only.

The library reports progress through callbacks and never prints; the commands turn those
calls into a :class:`StatusLine`. It is drawn only when stderr is a terminal, never with
``-q`` or ``--json``, so piped output and logs hold none of it.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from types import TracebackType
from typing import TextIO

# Cursor and screen control (VT100, which every terminal emulator in use speaks).
_CLEAR_LINE = "\r\033[K"
_SAVE, _RESTORE = "\0337", "\0338"


def is_terminal(stream: TextIO) -> bool:
    """Whether ``stream`` is a terminal that understands cursor movement."""
    try:
        return stream.isatty() and os.environ.get("TERM") != "dumb"
    except (AttributeError, ValueError):  # a replaced or closed stream
        return False


def duration(seconds: float) -> str:
    """``42 s``, ``3 min 05 s``, ``1 h 02 min``: elapsed or remaining time, for people."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


class StatusLine:
    """A line on stderr that shows where long work is, rewritten in place.

    ``show(text)`` redraws it (at most every ``interval_s`` unless forced; not before
    ``delay_s`` have passed, so quick work shows nothing), ``note(text)`` prints a line that
    stays above it, ``close()`` (or leaving the ``with`` block) erases it.

    With ``bottom=True`` the line keeps the terminal's last row for itself and everything
    else scrolls above it: for work whose child process writes to the same terminal (the
    script that ``capture`` runs), whose output would otherwise run into the line.
    """

    def __init__(
        self,
        enabled: bool,
        *,
        delay_s: float = 0.0,
        interval_s: float = 0.1,
        bottom: bool = False,
        stream: TextIO | None = None,
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.delay_s = delay_s
        self.interval_s = interval_s
        self.bottom = bottom
        self.started = time.monotonic()
        self.drawn_at: float | None = None
        self.text = ""
        self.drawn_text = ""
        self.rows = 0  # bottom mode: the terminal's height when the row was reserved

    @classmethod
    def on_stderr(
        cls,
        quiet: bool = False,
        as_json: bool = False,
        *,
        delay_s: float = 0.0,
        interval_s: float = 0.1,
        bottom: bool = False,
    ) -> StatusLine:
        """A line on stderr, drawn only when stderr is a terminal and neither ``-q`` nor
        ``--json`` was given."""
        enabled = not quiet and not as_json and is_terminal(sys.stderr)
        return cls(enabled, delay_s=delay_s, interval_s=interval_s, bottom=bottom)

    @property
    def shown(self) -> bool:
        return self.drawn_at is not None

    def show(self, text: str, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        self.text = text
        if now - self.started < self.delay_s:
            return
        recent = self.drawn_at is not None and now - self.drawn_at < self.interval_s
        if not force and self.drawn_at is not None and (recent or text == self.drawn_text):
            return
        self.drawn_at = now
        self._draw()

    def note(self, text: str) -> None:
        """A line that stays (above the status line, which is drawn again under it)."""
        if self.shown and not self.bottom:
            self._write(_CLEAR_LINE)
        self._write(text + "\n")
        if self.shown and not self.bottom:
            self._draw()

    def close(self) -> None:
        if not self.shown:
            return
        if self.rows:
            # Give the last row back: scroll over the whole screen again, row cleared.
            self._write(f"{_SAVE}\033[r\033[{self.rows};1H\033[2K{_RESTORE}")
            self.rows = 0
        else:
            self._write(_CLEAR_LINE)
        self.drawn_at = None

    def __enter__(self) -> StatusLine:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _draw(self) -> None:
        self.drawn_text = self.text
        columns, rows = self._size()
        text = self.text[: max(columns - 1, 10)]
        if not self.bottom or rows < 3:
            self._write(_CLEAR_LINE + text)
            return
        if rows != self.rows:
            # A new line first, so reserving the last row hides nothing; then the scroll
            # region is every row but the last (setting it homes the cursor: saved around).
            self._write(f"\n{_SAVE}\033[1;{rows - 1}r{_RESTORE}\033[1A")
            self.rows = rows
        self._write(f"{_SAVE}\033[{rows};1H\033[2K{text}{_RESTORE}")

    def _size(self) -> tuple[int, int]:
        """The terminal's columns and rows: stderr's own (stdout may be a file)."""
        try:
            size = os.get_terminal_size(self.stream.fileno())
        except (AttributeError, OSError, ValueError):
            return shutil.get_terminal_size()
        return size.columns or 80, size.lines

    def _write(self, data: str) -> None:
        try:
            self.stream.write(data)
            self.stream.flush()
        except (OSError, ValueError):  # the terminal went away: progress is not worth a crash
            self.enabled = False
