"""The watchdog's decision over a precisely built state (no script runs): which traceback
names a dead worker, and how long one is waited for."""

from __future__ import annotations

import os
import sys
from collections import deque

import pytest
from capture_helpers import SCRIPTS

from traceinspect.capture._stderr import Traceback, TracebackReader
from traceinspect.capture._watchdog import TRACEBACK_WAIT_S, WATCH_EVERY_S, Watchdog, _Process

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="wait statuses")

_EXIT_1 = 1 << 8  # a wait status: exited with code 1
_SPAWNED = "python -c from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5)"
_FLAGS = "absl.flags._exceptions.UnparsedFlagAccessError: Trying to access flag --x"
_WORKER_FRAMES = (
    ("/usr/lib/python3.11/multiprocessing/spawn.py", "spawn_main"),
    ("/usr/lib/python3.11/multiprocessing/spawn.py", "_fixup_main_from_path"),
    ("/work/grain_noguard.py", "<module>"),
)


def _watchdog(step_at: float, now: float) -> Watchdog:
    """A watch over a Grain script whose main thread used no CPU for the last 12 s and
    whose last step came at ``step_at``."""
    dog = Watchdog(
        os.getpid(),
        "/nonexistent/status.json",
        TracebackReader(),
        floor_s=5.0,
        script_path=str(SCRIPTS / "grain_noguard.py"),
    )
    dog.step_at, dog.source = step_at, "grain"
    dog.main_cpu = deque((now - k, 1000) for k in range(12, -1, -1))
    return dog


def _worker(seen_at: float, ended_at: float) -> _Process:
    return _Process(4242, 1, _SPAWNED, True, seen_at, ended_at, _EXIT_1)


def _traceback(at: float, frames: tuple[tuple[str, str], ...] = _WORKER_FRAMES) -> Traceback:
    return Traceback(_FLAGS, frames, at)


def test_a_worker_named_with_the_traceback_it_wrote_before_the_last_step_was_counted() -> None:
    """The step counted as the script began to wait (Grain's iterator entered) came after the
    worker wrote its traceback, and before it was seen dead: the traceback is its own."""
    dog = _watchdog(step_at=100.0, now=110.0)
    dog.known[(4242, 1)] = _worker(seen_at=97.0, ended_at=100.5)
    dog.tracebacks.seen.append(_traceback(at=98.5))
    said = dog._decide(110.0)
    assert said is not None
    assert f"a Grain worker process exited (exit code 1): {_FLAGS}; " in said, said
    assert said.endswith('put the training loop under `if __name__ == "__main__":`')


def test_a_traceback_from_before_the_worker_lived_does_not_name_it() -> None:
    """An error the script handled long before (its traceback logged) is not the worker's."""
    dog = _watchdog(step_at=100.0, now=110.0)
    dog.known[(4242, 1)] = _worker(seen_at=97.0, ended_at=100.5)
    dog.tracebacks.seen.append(_traceback(at=97.0 - WATCH_EVERY_S - 0.5))
    said = dog._decide(110.0)
    assert said is not None
    assert "a Grain worker process exited (exit code 1); Grain's workers run" in said, said


def test_a_dead_worker_whose_traceback_has_not_come_is_given_a_look_more() -> None:
    """Seen dead with no traceback read yet: the copy of its stderr may lag; the decision
    waits ``TRACEBACK_WAIT_S``, then names it without one."""
    ended = 104.0
    dog = _watchdog(step_at=95.0, now=ended + 1.0)
    dog.known[(4242, 1)] = _worker(seen_at=97.0, ended_at=ended)
    assert dog._decide(ended + TRACEBACK_WAIT_S - 0.5) is None
    dog.tracebacks.seen.append(_traceback(at=ended + 0.5))
    said = dog._decide(ended + TRACEBACK_WAIT_S - 0.5)
    assert said is not None and f"(exit code 1): {_FLAGS}; " in said, said
    late = _watchdog(step_at=95.0, now=ended + TRACEBACK_WAIT_S)
    late.known[(4242, 1)] = _worker(seen_at=97.0, ended_at=ended)
    said = late._decide(ended + TRACEBACK_WAIT_S)
    assert said is not None and "exited (exit code 1); " in said, said


def test_a_process_first_seen_dead_counts_only_with_a_workers_traceback() -> None:
    """A zombie with no command line left may be anything the script ran: a worker only when
    a worker's traceback came while it could have lived."""
    dog = _watchdog(step_at=100.0, now=110.0)
    dog.known[(4243, 1)] = _Process(4243, 1, "", None, 103.0, 103.0, _EXIT_1)
    assert dog._decide(110.0) is None
    dog.tracebacks.seen.append(_traceback(at=102.5, frames=(("/work/train.py", "<module>"),)))
    assert dog._decide(110.0) is None  # the script's own traceback: not a worker's
    dog.tracebacks.seen.append(_traceback(at=102.6))
    said = dog._decide(110.0)
    assert said is not None and f"(exit code 1): {_FLAGS}" in said, said


def test_no_decision_while_the_main_thread_works_or_before_the_floor() -> None:
    dog = _watchdog(step_at=100.0, now=110.0)
    dog.known[(4242, 1)] = _worker(seen_at=97.0, ended_at=100.5)
    dog.tracebacks.seen.append(_traceback(at=99.0))
    assert dog._decide(104.0) is None  # 4 s without a step, under the 5 s floor
    dog.main_cpu = deque((110.0 - k, 1000 + 100 * (12 - k)) for k in range(12, -1, -1))
    assert dog._decide(110.0) is None  # a whole core busy: compiling, or a loop of its own
