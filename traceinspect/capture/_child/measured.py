"""What capture measures besides the trace, between the window's two edges: this process's
CPU time, the Grain worker probes' counters, the input-pipeline stage table and how busy the
machine and the script's process tree were, read at each edge (a :class:`_Snapshot`) and
differenced into the report's measurements."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pathlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from .facts import _machine_busy_s, _tree_cpu_s

if TYPE_CHECKING:  # the sidecar's format (checked, never imported: the child runs by path)
    from traceinspect.sidecar import (
        MachineLoadJSON,
        StagesJSON,
        WorkerJSON,
        WorkersMeasuredJSON,
    )


@dataclasses.dataclass(frozen=True)
class _Snapshot:
    """Counters read at one edge of the trace window, when it opened or when it closed."""

    #: Unix time.
    wall_ns: int
    #: This process's CPU time.
    cpu_ns: int
    #: Each Grain worker probe's last counters, by file name (empty without probes).
    workers: dict[str, dict[str, Any]]
    #: This process's input-pipeline stage table (where -> stage -> [self ns, calls]).
    stages: dict[str, dict[str, list[int]]] = dataclasses.field(default_factory=dict)
    #: CPU seconds the whole machine has been busy, and this process and its descendants
    #: (None where /proc is missing).
    machine_busy_s: float | None = None
    tree_cpu_s: float | None = None
    #: The CPU time and run delay of the threads that ran stages (see stage_thread_clocks).
    stage_threads: dict[str, dict[int, tuple[int, int]]] = dataclasses.field(default_factory=dict)


def take_snapshot(
    worker_stats_dir: str | None,
    stage_table: Callable[[], dict[str, dict[str, list[int]]]] | None,
    machine_pid: int | None,
) -> _Snapshot:
    """This process's CPU time, the worker probes' counters and the stage table, now;
    ``machine_pid``: also how busy the machine and that process's tree were (a scan of
    /proc: about 2 ms with 80 processes, more on a machine running thousands)."""
    cpu_ns = time.process_time_ns()
    wall_ns = time.time_ns()
    workers: dict[str, dict[str, Any]] = {}
    if worker_stats_dir is not None:
        with contextlib.suppress(OSError):
            for path in pathlib.Path(worker_stats_dir).glob("worker-*.json"):
                with contextlib.suppress(OSError, ValueError):
                    workers[path.stem] = json.loads(path.read_text(encoding="utf-8"))
    return _Snapshot(
        wall_ns=wall_ns,
        cpu_ns=cpu_ns,
        workers=workers,
        stages=stage_table() if stage_table is not None else {},
        machine_busy_s=_machine_busy_s() if machine_pid is not None else None,
        tree_cpu_s=_tree_cpu_s(machine_pid) if machine_pid is not None else None,
        stage_threads=stage_thread_clocks(stage_table),
    )


def stage_thread_clocks(
    stage_table: Callable[[], dict[str, dict[str, list[int]]]] | None,
) -> dict[str, dict[int, tuple[int, int]]]:
    """The CPU time and the time waiting for a core (ns; the kernel's schedstat) of each
    of this process's read threads (place ``threads``: not the main thread, whose time is
    the loop's too) that ran pipeline stages, by place and the thread's kernel id.
    Differenced over the window and set against the stages' self time, they say how much of
    it was CPU work and how much waiting (on reads, the GIL, a lock), so that waiting stages
    may be given more parallelism than there are cores. Empty where the kernel keeps no
    schedstat; a thread that has ended is left out."""
    ids_of = getattr(stage_table, "native_ids", None)
    if ids_of is None:
        return {}
    out: dict[str, dict[int, tuple[int, int]]] = {}
    for place, ids in ids_of().items():
        if place != "threads":
            continue
        for tid in ids:
            path = pathlib.Path(f"/proc/self/task/{tid}/schedstat")
            try:
                fields = path.read_text("ascii").split()
                out.setdefault(place, {})[tid] = (int(fields[0]), int(fields[1]))
            except (OSError, ValueError, IndexError):
                continue
    return out


def _run_delay_s(begin: dict[str, Any], end: dict[str, Any]) -> float | None:
    """A worker's time waiting for a core over the window (None where the kernel keeps no
    schedstat). A thread that ended takes its share with it: never below 0."""
    first, last = begin.get("run_delay_ns"), end.get("run_delay_ns")
    if not isinstance(first, int) or not isinstance(last, int):
        return None
    return round(max(0, last - first) / 1e9, 4)


def others_cores(start: _Snapshot | None, stop: _Snapshot | None) -> float | None:
    """Cores other processes kept busy, on average, over the window: the machine's busy
    CPU time less this process's and its descendants' (Grain workers included)."""
    load = _busy_cores(start, stop)
    return None if load is None else load[1]


def machine_load(start: _Snapshot | None, stop: _Snapshot | None) -> MachineLoadJSON | None:
    """How busy the machine was over the window: the cores other processes kept busy and
    the script's own (its process and descendants), on average; None where /proc is
    missing."""
    load = _busy_cores(start, stop)
    if load is None or start is None or stop is None:
        return None
    return {
        "window_s": round((stop.wall_ns - start.wall_ns) / 1e9, 4),
        "cpu_count": os.cpu_count(),
        "others_cpu_cores": load[1],
        "script_cpu_cores": load[0],
    }


def _busy_cores(start: _Snapshot | None, stop: _Snapshot | None) -> tuple[float, float] | None:
    """The cores the script's process tree and other processes kept busy over the window,
    on average: the tree's CPU time, and the machine's busy CPU time (/proc/stat) less it.
    A descendant that ended inside the window takes its CPU time with it, which then counts
    as others' (Grain's workers live as long as their iterator)."""
    if start is None or stop is None:
        return None
    busy = (start.machine_busy_s, stop.machine_busy_s, start.tree_cpu_s, stop.tree_cpu_s)
    if any(v is None for v in busy):
        return None
    machine0, machine1, ours0, ours1 = cast("tuple[float, float, float, float]", busy)
    wall_s = (stop.wall_ns - start.wall_ns) / 1e9
    if wall_s <= 0:
        return None
    ours_s = max(0.0, ours1 - ours0)
    others_s = machine1 - machine0 - (ours1 - ours0)
    return round(ours_s / wall_s, 3), round(max(0.0, others_s) / wall_s, 3)


def stages_measured(
    start: _Snapshot | None, stop: _Snapshot | None, batches: int
) -> StagesJSON | None:
    """Self time per input-pipeline stage over the window, by where it ran: this
    process's table and each worker's, differenced between the window's edges."""
    if start is None or stop is None:
        return None
    seconds: dict[str, dict[str, float]] = {}
    calls: dict[str, dict[str, int]] = {}

    def add(begin: dict[str, Any], end: dict[str, Any], only: str | None) -> None:
        for where, row in end.items():
            if only is not None and where != only:
                continue
            for stage, (ns, n) in row.items():
                ns0, n0 = begin.get(where, {}).get(stage, (0, 0))
                if n - n0 <= 0:
                    continue
                seconds.setdefault(where, {}).setdefault(stage, 0.0)
                seconds[where][stage] += (ns - ns0) / 1e9
                calls.setdefault(where, {}).setdefault(stage, 0)
                calls[where][stage] += n - n0

    add(start.stages, stop.stages, None)
    produced: int | None = None
    for key, end in stop.workers.items():
        begin = start.workers.get(key)
        if begin is not None and end.get("stages") is not None:
            add(begin.get("stages") or {}, end["stages"], "workers")
            produced = (produced or 0) + end["elements"] - begin["elements"]
    if not calls:
        return None
    out: StagesJSON = {
        "window_s": round((stop.wall_ns - start.wall_ns) / 1e9, 4),
        "batches": batches,
        "worker_elements": produced,
        "seconds": {w: {s: round(v, 6) for s, v in row.items()} for w, row in seconds.items()},
        "calls": calls,
    }
    out["process_cpu_s"] = round((stop.cpu_ns - start.cpu_ns) / 1e9, 6)
    clocks = _thread_clocks(start, stop)
    if clocks:
        out["thread_cpu_s"] = {p: round(c / 1e9, 6) for p, (c, _) in clocks.items()}
        out["thread_run_delay_s"] = {p: round(d / 1e9, 6) for p, (_, d) in clocks.items()}
    return out


def _thread_clocks(start: _Snapshot, stop: _Snapshot) -> dict[str, tuple[int, int]]:
    """By place, the CPU time and run delay (ns) over the window of the threads that ran
    stages (one that started inside it counts from zero); none for a place where a thread
    ended inside the window (its stage time stays in the table, its CPU time is gone)."""
    out: dict[str, tuple[int, int]] = {}
    for place, threads in stop.stage_threads.items():
        before = start.stage_threads.get(place, {})
        if not set(before) <= set(threads):
            continue
        cpu = delay = 0
        for tid, (c1, d1) in threads.items():
            c0, d0 = before.get(tid, (0, 0))
            cpu += max(0, c1 - c0)
            delay += max(0, d1 - d0)
        out[place] = (cpu, delay)
    return out


def workers_measured(
    start: _Snapshot | None, stop: _Snapshot | None, batches: int
) -> WorkersMeasuredJSON | None:
    """Each worker's activity over the window: counter differences between its open and
    close (each worker's own clock: a probe writes every ~50 ms)."""
    if start is None or stop is None or not start.workers or not stop.workers:
        return None
    workers: list[WorkerJSON] = []
    for key, end in sorted(stop.workers.items()):
        begin = start.workers.get(key)
        if begin is None:
            continue
        wall_s = (end["t_ns"] - begin["t_ns"]) / 1e9
        if wall_s <= 0:
            continue
        workers.append(
            {
                "index": end.get("index"),
                "pid": end.get("pid"),
                "wall_s": round(wall_s, 4),
                "elements": end["elements"] - begin["elements"],
                "produce_s": round((end["produce_ns"] - begin["produce_ns"]) / 1e9, 4),
                "blocked_s": round((end["blocked_ns"] - begin["blocked_ns"]) / 1e9, 4),
                "cpu_s": round((end["cpu_ns"] - begin["cpu_ns"]) / 1e9, 4),
                "cpu_wait_s": _run_delay_s(begin, end),
                "rss_bytes": end.get("rss_bytes"),
                "timed_elements": bool(end.get("timed")),
            }
        )
    if not workers:
        return None
    return {
        "window_s": round((stop.wall_ns - start.wall_ns) / 1e9, 4),
        "batches": batches,
        "elements": sum(w["elements"] for w in workers),
        "main_process_cpu_s": round((stop.cpu_ns - start.cpu_ns) / 1e9, 4),
        "workers": workers,
    }
