"""Run a command on a pseudo-terminal, as a person at a terminal would: for the progress
lines that only a terminal gets."""

from __future__ import annotations

import fcntl
import os
import select
import struct
import subprocess
import sys
import termios
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Terminal:
    returncode: int
    #: What the command wrote to the terminal (stderr, and stdout unless it went to a file).
    screen: str
    #: stdout, when it was sent to a file instead of the terminal.
    stdout: str


def run_on_terminal(
    args: list[str],
    *,
    stdout_to_file: Path | None = None,
    rows: int = 24,
    columns: int = 120,
    timeout_s: float = 300.0,
) -> Terminal:
    """``python -m traceinspect ARGS`` from this checkout with stderr (and stdout, unless
    ``stdout_to_file``) on a terminal of ``rows`` x ``columns``."""
    controller, device = os.openpty()
    fcntl.ioctl(device, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    env = {**os.environ, "PYTHONPATH": str(REPO), "TERM": "xterm", "COLUMNS": str(columns)}
    out = stdout_to_file.open("wb") if stdout_to_file is not None else None
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "traceinspect", *args],
            stdin=subprocess.DEVNULL,
            stdout=out if out is not None else device,
            stderr=device,
            cwd=REPO,
            env=env,
        )
    finally:
        os.close(device)
        if out is not None:
            out.close()
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([controller], [], [], 0.2)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                data = os.read(controller, 65536)
            except OSError:  # EIO: every writer closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        else:
            proc.kill()
        returncode = proc.wait(timeout=30)
    finally:
        os.close(controller)
    stdout = stdout_to_file.read_text(encoding="utf-8") if stdout_to_file is not None else ""
    return Terminal(returncode, b"".join(chunks).decode("utf-8", "replace"), stdout)
