"""The processes a script started, found below it in /proc and ended with it (Linux).

The script stays in capture's process group, so a terminal's Ctrl-C, Ctrl-Z and reads from
the terminal behave as without traceinspect; what it started is found by parentage instead:
its children (Grain's worker processes, a ``subprocess.Popen``), theirs, and so on. A process
that has left the tree (a daemon that double-forked, whose parent has exited) is not found.
Where /proc is missing (macOS), nothing is found and nothing is ended."""

from __future__ import annotations

import contextlib
import os
import pathlib
import signal
import time

#: How long the processes a stopped script started have, after SIGTERM, before SIGKILL.
CHILDREN_GRACE_S = 1.0
_POLL_S = 0.02
_PROC = pathlib.Path("/proc")

# A process by pid and start time (clock ticks since boot): a pid reused meanwhile differs.
_Process = tuple[int, int]


def _process_table() -> dict[int, tuple[int, int, bool]]:
    """Every process: pid -> (parent pid, start time, alive); zombies are not alive."""
    table: dict[int, tuple[int, int, bool]] = {}
    try:
        entries = list(_PROC.iterdir())
    except OSError:
        return table
    for entry in entries:
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_bytes()
        except OSError:
            continue  # it ended meanwhile
        # The name in parentheses may hold spaces and parentheses itself: split after it.
        fields = stat.rsplit(b")", 1)[-1].split()
        if len(fields) < 20:
            continue
        state, ppid, start = fields[0], int(fields[1]), int(fields[19])
        table[int(entry.name)] = (ppid, start, state not in (b"Z", b"X"))
    return table


def descendants(pid: int) -> list[_Process]:
    """The live processes below ``pid`` (children first, then theirs); zombies left out, their
    children kept."""
    table = _process_table()
    below: dict[int, list[int]] = {}
    for child, (ppid, _, _) in table.items():
        below.setdefault(ppid, []).append(child)
    found: list[_Process] = []
    seen = {pid}
    queue = [pid]
    while queue:
        for child in below.get(queue.pop(0), []):
            if child in seen:
                continue
            seen.add(child)
            queue.append(child)
            _, start, alive = table[child]
            if alive:
                found.append((child, start))
    return found


def _alive(process: _Process) -> bool:
    pid, start = process
    try:
        fields = (_PROC / str(pid) / "stat").read_bytes().rsplit(b")", 1)[-1].split()
    except OSError:
        return False
    return fields[0] not in (b"Z", b"X") and int(fields[19]) == start


def _send(processes: list[_Process], sig: int) -> None:
    for pid, _ in processes:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def end_descendants(pid: int, grace_s: float = CHILDREN_GRACE_S) -> int:
    """SIGTERM every process below ``pid``, then SIGKILL those left ``grace_s`` later (at once
    when 0), and wait until they are gone (a second at most). Returns how many were found.

    The ones found first are remembered: one whose parent ended on SIGTERM leaves the tree
    (adopted by init) and is still killed."""
    found = descendants(pid)
    if not found:
        return 0
    known = set(found)
    if grace_s > 0:
        _send(found, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while any(_alive(p) for p in known) and time.monotonic() < deadline:
            time.sleep(_POLL_S)
    # A killed process starts no more: a few rounds catch what was starting meanwhile.
    deadline = time.monotonic() + 1.0
    while True:
        known.update(descendants(pid))
        left = [p for p in known if _alive(p)]
        if not left or time.monotonic() > deadline:
            break
        _send(left, signal.SIGKILL)
        time.sleep(_POLL_S)
    return len(known)


def kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and every process below it; ``pid`` is stopped first, so that it starts
    no more and its children stay its own while they are found."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGSTOP)
    end_descendants(pid, grace_s=0)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
