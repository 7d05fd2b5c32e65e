"""The capture's state: what the child knows about the run (its step sources, the window,
the early trace, Grain's settings, the worker probes) and what reads it (the hooks' checks,
the status file for the parent's progress line, the report). ``window.py`` drives it."""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._base import _warn, _write_json_atomic
from .completion import Completions
from .facts import _memory_facts
from .measured import _Snapshot, take_snapshot, workers_measured
from .report import build_report
from .run_events import RunEvents
from .steady import _Steady

if TYPE_CHECKING:  # the sidecar's format (checked, never imported: the child runs by path)
    from traceinspect.sidecar import (
        ChildReportJSON,
        GlobalArrayJSON,
        WorkersMeasuredJSON,
    )

    from .sampler import StackSampler

# Bounded so that a million-step run does not grow the report without limit: the first
# _MAX_STEPS_KEPT steps' start times are kept, and past them the window's steps, up to
# _MAX_WINDOW_STEPS_KEPT more (a loader drained alone in isolate can pass 10,000 batches
# before it settles: 0.2 ms a batch here; the window then lasts >= 1 s, 5,000 batches).
_MAX_STEPS_KEPT = 10_000
_MAX_WINDOW_STEPS_KEPT = 100_000
_MAX_GRAIN_EVENTS = 200
#: Global arrays built from the loop's batches that the report describes: the loop builds
#: the same one every step, so the first few say how.
GLOBAL_ARRAYS_KEPT = 4

_WAITING, _TRACING, _DONE = "waiting", "tracing", "done"
# The status file for the parent's progress line: rewritten at most this often.
_STATUS_EVERY_NS = 250_000_000
# The default window: at least DEFAULT_STEPS steps and at least WINDOW_MIN_S long (more steps
# when steps are short); an explicit --steps N traces exactly N.
DEFAULT_STEPS = 20
WINDOW_MIN_S = 1.0
# The untraced block after the window (config ``time_after``: sweep's count and analyze's
# untraced step; on unless --stop-after). The trace's write holds the script 50-450 ms,
# while the pipeline goes on filling its buffers; the batches
# so stored then go at the device's pace: at 3 waiting workers of the scenario family a
# 293 ms write was followed by 39 steps of 10 ms against 14.5 ms settled. So the steps
# after the write go through the steady rule again, as isolate's phases do (block means in
# any order, a drain's rising ones never agree), and only then does the block begin: as
# many steps as the window traced, for as long as it lasted and, by default, at least
# UNTRACED_MIN_S (2 workers that take 40 ms a batch hand over 100 batches in 2 s: one batch
# more or less moves the mean by 1%). A run not steady again after the capture's
# ``max_wait_s`` is timed from there anyway.
UNTRACED_MIN_S = 2.0


@dataclasses.dataclass
class _Untraced:
    """The steps timed without the profiler after the window (``window.untraced_after``)."""

    #: When the script went on after the trace's write.
    resumed_ns: int
    min_steps: int
    min_s: float
    #: The steady rule over the steps after the write (its ``period``: a recurring stall's,
    #: when it found one; the block then spans whole periods).
    steady: _Steady
    #: The first timed step; the last one (set when the block is complete).
    first: int | None = None
    last: int | None = None
    #: The timed steps' start times (the block's, from ``first``, then its look-ahead's),
    #: the block's length once complete (then the look-ahead runs), and how many times the
    #: block was timed again because it still slowed as it ran (``steady.slowed_within``).
    starts_ns: list[int] = dataclasses.field(default_factory=list)
    block_steps: int | None = None
    retries: int = 0


@dataclasses.dataclass
class _Source:
    kind: str
    key: str
    detail: str
    #: The kept steps (see _MAX_STEPS_KEPT): their indices, start times and step numbers.
    #: Steps 0, 1, ... first, then (past the cap) the window's.
    indices: list[int] = dataclasses.field(default_factory=list)
    starts_ns: list[int] = dataclasses.field(default_factory=list)
    step_nums: list[int | None] = dataclasses.field(default_factory=list)
    #: In a phase of isolate: the process's CPU clock (ns) at each kept step's start.
    cpu_ns: list[int] = dataclasses.field(default_factory=list)
    count: int = 0
    #: The last step's start, and the wall time of the step before it (kept or not).
    latest_ns: int | None = None
    last_wall_ns: int | None = None
    #: Steps this source started in a row while the chosen source started none, and which
    #: chosen source (its identity and step count) that run is counted against.
    alone: int = 0
    alone_since: tuple[int, int] | None = None

    def step_alone(self, chosen: _Source) -> int:
        """One more step of this source (not the chosen one): how many in a row now since
        the chosen source last started one."""
        mark = (id(chosen), chosen.count)
        if self.alone_since != mark:
            self.alone_since, self.alone = mark, 0
        self.alone += 1
        return self.alone

    def first_at_or_after(self, unix_ns: int) -> int | None:
        """The first kept step that started at or after ``unix_ns``."""
        k = bisect.bisect_left(self.starts_ns, unix_ns)
        return self.indices[k] if k < len(self.indices) else None

    def running_at(self, unix_ns: int) -> int | None:
        """The kept step in progress at ``unix_ns`` (the last one started by then)."""
        k = bisect.bisect_right(self.starts_ns, unix_ns)
        return self.indices[k - 1] if k else None

    def started(self, start_ns: int) -> None:
        """A step of this source started: the last one's wall time is known."""
        if self.latest_ns is not None:
            self.last_wall_ns = start_ns - self.latest_ns
        self.latest_ns = start_ns

    def keep(
        self, index: int, start_ns: int, step_num: int | None, cpu_ns: int | None = None
    ) -> None:
        """Keep step ``index`` (once; within the caps), with the process's CPU clock at
        its start where given (a phase of isolate keeps it for every step or none)."""
        if self.indices and self.indices[-1] >= index:
            return
        if len(self.indices) >= _MAX_STEPS_KEPT + _MAX_WINDOW_STEPS_KEPT:
            return
        self.indices.append(index)
        self.starts_ns.append(start_ns)
        self.step_nums.append(step_num)
        if cpu_ns is not None:
            self.cpu_ns.append(cpu_ns)


class _State:
    """Everything the capture knows about the run, and the reports made from it."""

    stop_requested = False
    status_ns = 0

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.pid = os.getpid()
        self.lock = threading.RLock()
        self.phase = _WAITING
        skip = config.get("skip_steps")
        self.skip: int | None = None if skip is None else int(skip)
        # None: the default window, DEFAULT_STEPS steps and at least WINDOW_MIN_S long.
        requested = config.get("steps")
        self.steps = DEFAULT_STEPS if requested is None else int(requested)
        self.window_min_s = WINDOW_MIN_S if requested is None else 0.0
        self.max_wait_s = float(config["max_wait_s"])
        self.window_max_s = float(config["window_max_s"])
        self.steady: _Steady | None = None
        self.window_rule: str | None = None
        self.window_reason: str | None = None
        self.batches_in_window = 0
        self.worker_stats_dir: str | None = None
        #: The input-pipeline stage table of this process (set when Grain is patched).
        self.stage_table: Callable[[], dict[str, dict[str, list[int]]]] | None = None
        self.at_open: _Snapshot | None = None
        self.at_close: _Snapshot | None = None
        self.forced = config.get("step_source") or "auto"
        self.sources: dict[tuple[str, str], _Source] = {}
        self.chosen: _Source | None = None
        self.window_first: int | None = None
        self.window_end: int | None = None  # the step whose start closed the window
        #: The last step of a kept early trace (the window of a run that ended first).
        self.window_last_fixed: int | None = None
        #: The early trace: None (not started), "tracing", "stopped" (its files wait in
        #: ``early_dir`` until the window is captured) or "off" (not for this capture).
        self.early: str | None = (
            "off"
            if config.get("timing") is not None
            or self.skip is not None
            or config.get("no_early_trace")
            else None
        )
        self.early_dir = str(config.get("export_dir", "")) + "-early"
        self.early_first: int | None = None
        self.early_last: int | None = None
        self.early_start_ns: int | None = None
        self.early_stop_ns: int | None = None
        #: What starting and stopping the early trace cost the script's main thread (ms).
        self.early_costs_ms: dict[str, float] = {}
        #: When each step's device work finished (completion.py), and the last jitted call.
        self.completions = Completions()
        self.last_output: tuple[str, Any] | None = None
        self.window_complete = False
        #: The untraced steps after the window (config ``time_after``); None: not timed.
        self.untraced: _Untraced | None = None
        self.trace_start_ns: int | None = None
        #: When the window opened: the trace's start, or later when the early trace went on
        #: as the window's.
        self.window_open_ns: int | None = None
        #: The time window's trace, set aside when steps began after it: (folder, names).
        self.time_aside: tuple[str, list[str]] | None = None
        #: When the first step began, where steps began inside the time window's trace.
        self.steps_in_time_window_ns: int | None = None
        self.trace_stop_ns: int | None = None
        self.trace_files: list[str] = []
        self.notes: list[str] = []
        self.partial_reasons: list[str] = []
        self.stopped_by_us = False
        self.ended_how: str | None = None
        self.script_start_ns = time.time_ns()
        # Before the script takes any. The report is written when the window closes, while
        # the workers and their buffers hold memory (which the buffer_memory check would add
        # once more), and again at exit, with whatever the script still holds then.
        self.memory_at_start = _memory_facts()
        self.step_traceme: Any = None
        self.grain_events: list[dict[str, Any]] = []
        self.batch_bytes: int | None = None
        #: Digests of the first batches the loop drew (grain_patches.FINGERPRINTED_BATCHES).
        self.first_batches: list[str] = []
        #: The leading size of the first batch the loop drew (its first NumPy array's).
        self.batch_rows: int | None = None
        #: ids of the NumPy arrays of the last batch the loop drew, while global arrays are
        #: still wanted: jax_patches matches the arrays the script hands to jax against them.
        self.batch_leaf_ids: frozenset[int] = frozenset()
        self.global_arrays: list[GlobalArrayJSON] = []
        self.device_tracer_applied: bool | None = None
        self.grain_worker_profiling: bool | None = None
        self.distributed: dict[str, int] | None = None
        self.thread_state = threading.local()
        self.main_thread = threading.main_thread()
        #: A phase of ``traceinspect isolate`` (``_base.TIMING_*``), or None for a capture.
        #: A phase times the window's steps on the host: no profiler, no annotations.
        self.timing: str | None = config.get("timing")
        deadline = config.get("deadline_s")
        #: A phase stops at the first step this long after the script started.
        self.deadline_s: float | None = None if deadline is None else float(deadline)
        #: Outermost Grain next() calls on the main thread (batches the loop drew).
        self.batches_drawn = 0
        #: The target phase's batch: the first one the loop drew, returned every time.
        self.first_batch: Any = None
        self.has_first_batch = False
        #: Why a phase ended early (its time limit, the iterator ran out, no Grain).
        self.phase_end: str | None = None
        #: In a phase's window: the main thread's time in Grain next() and in host reads of
        #: device values (ns), and the reads.
        self.window_input_ns = 0
        self.window_read_ns = 0
        self.window_reads = 0
        self.in_host_read = False
        #: The training thread's stack sampler (sampler.py), while the trace is on.
        self.sampler: StackSampler | None = None
        #: Long garbage collections and new Grain iterators over the run (run_events.py).
        self.run_events = RunEvents()

    def active(self) -> bool:
        """Hooks do nothing in forked children and outside the main thread."""
        return os.getpid() == self.pid and threading.current_thread() is self.main_thread

    def wants_global_arrays(self) -> bool:
        return len(self.global_arrays) < GLOBAL_ARRAYS_KEPT

    def tracing(self) -> bool:
        return (self.phase == _TRACING or self.early == "tracing") and os.getpid() == self.pid

    def annotate(self, name: str, **stats: Any) -> contextlib.AbstractContextManager[Any]:
        if not self.tracing() or self.timing is not None:
            return contextlib.nullcontext()
        jax_profiler = sys.modules.get("jax.profiler")
        if jax_profiler is None:
            return contextlib.nullcontext()
        ctx: contextlib.AbstractContextManager[Any] = jax_profiler.TraceAnnotation(name, **stats)
        return ctx

    def _exit_step_annotation(self) -> None:
        traceme, self.step_traceme = self.step_traceme, None
        if traceme is not None:
            with contextlib.suppress(Exception):
                traceme.__exit__(None, None, None)

    def _window_last(self) -> int | None:
        if self.chosen is None or self.window_first is None:
            return None
        seen_last = self.chosen.count - 1
        if self.window_last_fixed is not None:
            return self.window_last_fixed
        if self.window_complete and self.window_end is not None:
            return self.window_end - 1
        return max(self.window_first, seen_last)

    def write_status(self, phase: str | None = None, force: bool = False) -> None:
        """Where the capture is, for the parent's progress line and its watchdog: a small
        file (config ``status_path``, always set by the parent) rewritten at most every
        ``_STATUS_EVERY_NS``, and at once when the window opens or closes."""
        path = self.config.get("status_path")
        now = time.monotonic_ns()
        if not path or (not force and now - self.status_ns < _STATUS_EVERY_NS):
            return
        self.status_ns = now
        with self.lock, contextlib.suppress(Exception):
            chosen = self.chosen
            wall_ns = chosen.last_wall_ns if chosen is not None else None
            status = {
                "phase": phase or self.phase,
                "steps": chosen.count if chosen is not None else 0,
                "last_step_ms": wall_ns / 1e6 if wall_ns is not None else None,
                "first_step": self.window_first,
                "last_step": self._window_last(),
                "rule": self.window_rule,
                "skip_steps": self.skip,
                "source": chosen.kind if chosen is not None else None,
            }
            _write_json_atomic(path, status)

    def report(self) -> ChildReportJSON:
        """What the parent adds to the sidecar (``report.build_report``)."""
        return build_report(self)

    def write_report(self) -> None:
        try:
            _write_json_atomic(self.config["report_path"], self.report())
        except Exception as exc:
            _warn(f"could not write the capture report ({exc})")

    def grain_event(self, kind: str, **fields: Any) -> None:
        if os.getpid() != self.pid or len(self.grain_events) >= _MAX_GRAIN_EVENTS:
            return
        self.grain_events.append({"kind": kind, "unix_ns": time.time_ns(), **fields})

    def _grain_setting(self, kind: str, field: str, before: int | None = None) -> Any:
        """The last value of ``field`` in Grain constructions of ``kind`` seen before
        ``before`` (Unix ns; default now)."""
        before = before or time.time_ns()
        values = [
            e[field]
            for e in self.grain_events
            if e["kind"] == kind and e.get(field) is not None and e["unix_ns"] <= before
        ]
        return values[-1] if values else None

    def worker_probe_dir(self) -> str:
        """Where the worker probes write their counters (made on first use)."""
        if self.worker_stats_dir is None:
            import tempfile

            self.worker_stats_dir = tempfile.mkdtemp(prefix="traceinspect-workers-")
        return self.worker_stats_dir

    def _snapshot(self) -> _Snapshot:
        """This process's CPU time, the worker probes' counters and how busy the machine
        and this process's tree were, now."""
        return take_snapshot(self.worker_stats_dir, self.stage_table, self.pid)

    def _workers_measured(self) -> WorkersMeasuredJSON | None:
        return workers_measured(self.at_open, self.at_close, self.batches_in_window)
