"""Capture's watch over a script that stops making steps: the script's process tree and main
thread (Linux's /proc) and the tracebacks on its stderr, read while it runs, and the one line
capture says when no step has come for long and the evidence says none will.

The case it is for: Grain's ``mp_prefetch`` workers are spawned, and a spawned process runs
the script's top level again as it starts. A script without ``if __name__ == "__main__":``
then has its workers die at once, and Grain's iterator waits on them for ever (its
threads block writing the worker's set-up into a pipe no one reads). Without the watch the
capture's progress line says "warming up" for as long as anyone waits.
"""

from __future__ import annotations

import ast
import collections
import contextlib
import dataclasses
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from traceinspect.capture._child import reap
from traceinspect.capture._stderr import Traceback, TracebackReader
from traceinspect.errors import CaptureUsageError

#: The least time without a step before capture stops a script whose worker died. The
#: evidence (a worker exited with an error, the main thread idle) already says the run is
#: broken; the wait leaves room for a script that handles the death itself (retries, or
#: starts another pipeline) and for a long compilation or checkpoint that happens to follow
#: a worker's death. A dead Grain worker left its script waiting within 5 s of its start
#: in the case this is for; 30 s is six times that.
STALL_MIN_S = 30.0
#: ... and at least this many times the slowest step seen so far (steps 0 and 1, which
#: compile, left out): a loop of 10 s steps is not stopped after 30 s. A recurring
#: checkpoint stall every N steps measured 30x the step in the scenario family (250 ms
#: against 8.5 ms), below the floor; the factor matters for steps over 3 s.
STALL_STEP_FACTOR = 10.0
#: The environment variable that replaces ``STALL_MIN_S`` (seconds; 0 turns the watch off).
STALL_ENV = "TRACEINSPECT_STALL_S"
#: How often the tree, the main thread and the step count are read.
WATCH_EVERY_S = 1.0
#: The main thread counts as waiting when it used less than this share of a core over the
#: last ``MAIN_IDLE_WINDOW_S`` (or the floor, if shorter): a compilation or a loop of its
#: own keeps it busy, a wait on a queue or a lock does not.
MAIN_IDLE_SHARE = 0.1
MAIN_IDLE_WINDOW_S = 10.0
#: How long after a failed worker was seen dead its traceback is waited for, when none has
#: come: a process writes it before it exits, but capture reads the script's stderr in a
#: thread of its own, which a loaded machine can hold back.
TRACEBACK_WAIT_S = 2 * WATCH_EVERY_S
_PROC = Path("/proc")
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_FIX = 'put the training loop under `if __name__ == "__main__":`'


def stall_floor_s() -> float | None:
    """``STALL_MIN_S``, or the environment's ``TRACEINSPECT_STALL_S``; None: no watch."""
    text = os.environ.get(STALL_ENV, "").strip()
    if not text:
        return STALL_MIN_S
    try:
        value = float(text)
    except ValueError:
        raise CaptureUsageError(
            f"{STALL_ENV} must be a number of seconds (0 turns the watch off), got {text!r}"
        ) from None
    return value if value > 0 else None


@dataclasses.dataclass
class _Process:
    """A process seen below the script."""

    pid: int
    start: int
    cmdline: str
    #: A worker the script started through multiprocessing (Grain's, a Pool's), or a fork
    #: of the script (the same command line); None: first seen dead (a zombie has no command
    #: line left), an interpreter like the script's.
    worker: bool | None
    #: When it was first seen, and when seen ended (``time.monotonic()``).
    seen_at: float
    ended_at: float | None = None
    #: Its wait status, when it was seen dead before the script reaped it (a zombie).
    status: int | None = None

    def failed(self) -> bool | None:
        """Whether it exited with an error; None when its status is unknown (reaped)."""
        if self.status is None:
            return None
        return not (os.WIFEXITED(self.status) and os.WEXITSTATUS(self.status) == 0)

    def how(self) -> str:
        if self.status is None:
            return ""
        if os.WIFSIGNALED(self.status):
            sig = os.WTERMSIG(self.status)
            with contextlib.suppress(ValueError):
                return f"killed by {signal.Signals(sig).name}"
            return f"killed by signal {sig}"
        return f"exit code {os.WEXITSTATUS(self.status)}"

    def spawned(self) -> bool:
        """Started as a fresh interpreter (spawn, forkserver), which imports ``__main__``."""
        return "spawn_main" in self.cmdline or "forkserver" in self.cmdline


def _proc_stat(pid: int | str, task: int | str | None = None) -> list[bytes] | None:
    """The fields of /proc/PID/stat (or of one of its threads) after the name, from the
    state on (field 3 of proc(5) at index 0); None when gone."""
    path = _PROC / str(pid) / ("stat" if task is None else f"task/{task}/stat")
    try:
        fields = path.read_bytes().rsplit(b")", 1)[-1].split()
    except OSError:
        return None
    return fields if len(fields) >= 20 else None


def _children(pid: int) -> list[int]:
    """The children of ``pid`` (zombies too), from each of its threads' ``children``."""
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in (_PROC / str(pid) / "task").iterdir():
            with contextlib.suppress(OSError, ValueError):
                found += [int(c) for c in (task / "children").read_text().split()]
    return found


def _comm(pid: int) -> str:
    try:
        return (_PROC / str(pid) / "comm").read_text("utf-8", "replace").strip()
    except OSError:
        return ""


def _cmdline(pid: int) -> str:
    try:
        return (
            (_PROC / str(pid) / "cmdline")
            .read_bytes()
            .replace(b"\0", b" ")
            .decode("utf-8", "replace")
        )
    except OSError:
        return ""


def has_main_guard(path: str) -> bool | None:
    """Whether the script's top level holds ``if __name__ == "__main__":``; None when it
    cannot be read."""
    try:
        tree = ast.parse(Path(path).read_bytes())
    except (OSError, SyntaxError, ValueError):
        return None
    return any(isinstance(node, ast.If) and _is_main_test(node.test) for node in tree.body)


def _is_main_test(test: ast.expr) -> bool:
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return False
    if not isinstance(test.ops[0], ast.Eq):
        return False
    sides = (test.left, test.comparators[0])
    names = [s.id for s in sides if isinstance(s, ast.Name)]
    values = [s.value for s in sides if isinstance(s, ast.Constant)]
    return names == ["__name__"] and values == ["__main__"]


class Watchdog:
    """Watches the script (``pid``) while it runs: ``poll()`` returns, once, what to say
    when it should be stopped.

    It is stopped when no step has come for ``max(floor_s, STALL_STEP_FACTOR x the slowest
    step)``, a worker process below it exited with an error since the last step (its wait
    status read while it was a zombie, or, reaped, a worker's traceback on stderr since),
    and its main thread is waiting (``MAIN_IDLE_SHARE``). Where /proc is missing nothing is
    seen and it is never stopped.
    """

    def __init__(
        self,
        pid: int,
        status_path: str,
        tracebacks: TracebackReader,
        *,
        floor_s: float | None = STALL_MIN_S,
        script_path: str | None = None,
    ) -> None:
        self.pid = pid
        self.status_path = status_path
        self.tracebacks = tracebacks
        self.floor_s = floor_s
        self.script_path = script_path
        self.started = time.monotonic()
        self.next_at = self.started
        self.script_cmdline: str | None = None
        self.script_comm = ""
        #: Every process seen below the script, by (pid, start time).
        self.known: dict[tuple[int, int], _Process] = {}
        self.steps = 0
        self.step_at = self.started
        self.slowest_s = 0.0
        self.source: str | None = None
        self.main_cpu: collections.deque[tuple[float, int]] = collections.deque()
        self.fired = False

    def poll(self, now: float | None = None) -> str | None:
        """Look again if ``WATCH_EVERY_S`` has passed; what capture saw, when the script
        should be stopped (once)."""
        now = time.monotonic() if now is None else now
        if self.fired or self.floor_s is None or now < self.next_at:
            return None
        self.next_at = now + WATCH_EVERY_S
        self._read_steps(now)
        self._read_tree(now)
        message = self._decide(now)
        self.fired = message is not None
        return message

    def _read_steps(self, now: float) -> None:
        try:
            status: Any = json.loads(Path(self.status_path).read_text("utf-8"))
        except (OSError, ValueError):
            return
        if not isinstance(status, dict):
            return
        steps = status.get("steps")
        if isinstance(steps, int) and steps != self.steps:
            self.steps, self.step_at = steps, now
            last_ms = status.get("last_step_ms")
            # The wall time reported is step ``steps - 2``'s: steps 0 and 1 compile.
            if steps >= 4 and isinstance(last_ms, (int, float)):
                self.slowest_s = max(self.slowest_s, last_ms / 1000)
        source = status.get("source")
        if isinstance(source, str):
            self.source = source

    def _read_tree(self, now: float) -> None:
        main = _proc_stat(self.pid, self.pid)
        if main is None:
            return
        self.main_cpu.append((now, int(main[11]) + int(main[12])))
        while len(self.main_cpu) > 2 and self.main_cpu[1][0] <= now - MAIN_IDLE_WINDOW_S:
            self.main_cpu.popleft()
        if self.script_cmdline is None:
            self.script_cmdline = _cmdline(self.pid)
            self.script_comm = _comm(self.pid)
        alive: set[tuple[int, int]] = set()
        queue = _children(self.pid)
        while queue:
            pid = queue.pop()
            fields = _proc_stat(pid)
            if fields is None:
                continue
            key = (pid, int(fields[19]))
            process = self.known.get(key)
            dead = fields[0] in (b"Z", b"X")
            if process is None:
                cmdline = _cmdline(pid)
                worker: bool | None = "resource_tracker" not in cmdline and (
                    "multiprocessing" in cmdline or cmdline == self.script_cmdline
                )
                if dead and not cmdline:
                    worker = None if _comm(pid) == self.script_comm else False
                process = self.known[key] = _Process(pid, key[1], cmdline, worker, now)
            if dead:
                if process.ended_at is None:
                    process.ended_at = now
                    # Field 52, the wait status (Linux 3.5 and later).
                    with contextlib.suppress(IndexError, ValueError):
                        process.status = int(fields[49])
            else:
                alive.add(key)
                queue += _children(pid)
        for key, process in self.known.items():
            if process.ended_at is None and key not in alive:
                process.ended_at = now

    def _main_waiting(self, now: float) -> bool:
        assert self.floor_s is not None
        window = min(MAIN_IDLE_WINDOW_S, self.floor_s)
        samples = [(t, cpu) for t, cpu in self.main_cpu if t >= now - window - WATCH_EVERY_S]
        if len(samples) < 2 or samples[-1][0] - samples[0][0] < window * 0.8:
            return False
        (t0, cpu0), (t1, cpu1) = samples[0], samples[-1]
        return (cpu1 - cpu0) / _CLOCK_TICKS < MAIN_IDLE_SHARE * (t1 - t0)

    def _decide(self, now: float) -> str | None:
        assert self.floor_s is not None
        stalled_s = now - self.step_at
        if stalled_s < max(self.floor_s, STALL_STEP_FACTOR * self.slowest_s):
            return None
        # Ended since the last step (one look of slack: both are seen at a look).
        since = self.step_at - WATCH_EVERY_S
        ended = [
            p
            for p in self.known.values()
            if p.worker is not False and p.ended_at is not None and p.ended_at >= since
        ]
        if not ended:
            return None
        # A process's traceback came while it lived: from a look before it was first seen,
        # which may be before the last step (a step counted as the script began waiting).
        lived_from = min(p.seen_at for p in ended) - WATCH_EVERY_S
        worker_tb = self.tracebacks.last(lived_from, worker=True)
        # A process first seen dead is taken for a worker when a worker's traceback came.
        failed = [
            p
            for p in ended
            if (p.worker or worker_tb is not None)
            and (p.failed() or (p.failed() is None and worker_tb is not None))
        ]
        if not failed or not self._main_waiting(now):
            return None
        tb = worker_tb or self.tracebacks.last(lived_from)
        last_ended = max(p.ended_at or now for p in failed)
        if tb is None and now - last_ended < TRACEBACK_WAIT_S:
            return None  # what it said may still be in the pipe: one more look
        return self._say(stalled_s, failed[0], tb)

    def _say(self, stalled_s: float, process: _Process, tb: Traceback | None) -> str:
        grain = self.source == "grain" or (
            tb is not None and any("grain" in file for file, _ in tb.frames)
        )
        who = "a Grain worker process" if grain else "a worker process of the script"
        how = process.how()
        # Its sentence's own full stop would come before ours.
        error = f": {tb.error.removesuffix('.')}" if tb is not None else ""
        said = f"{who} exited" + (f" ({how})" if how else "") + error
        parts = [f"no step for {stalled_s:.0f} s", said]
        guard = has_main_guard(self.script_path) if self.script_path else None
        if (tb is not None and tb.reran_main()) or (guard is False and process.spawned()):
            whose = "Grain's workers" if grain else "processes that multiprocessing spawns"
            parts.append(f"{whose} run your script again as they start: {_FIX}")
        return "; ".join(parts)

    def end_leftovers(self) -> int:
        """End the processes seen below the script that still run (they left its tree:
        their parent died first), as ``reap.end_descendants`` ends those still below it.
        Returns how many were ended."""
        left = [
            (p.pid, p.start)
            for p in self.known.values()
            if p.ended_at is None and reap._alive((p.pid, p.start))
        ]
        if not left:
            return 0
        reap._send(left, signal.SIGTERM)
        deadline = time.monotonic() + reap.CHILDREN_GRACE_S
        while any(reap._alive(p) for p in left) and time.monotonic() < deadline:
            time.sleep(0.02)
        reap._send([p for p in left if reap._alive(p)], signal.SIGKILL)
        return len(left)
