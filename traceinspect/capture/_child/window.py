"""The trace window: counting steps, the steady-state rule that opens the window, the
profiler started and stopped around it, and the child's report written at the end."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

from ._base import (
    _PRIORITY,
    ANN_STEP,
    SOURCE_JIT,
    SOURCE_TIME,
    TIMING_TARGET,
    _StopAfter,
    _warn,
    _write_json_atomic,
)
from .completion import Completions
from .facts import _distributed_info, _memory_facts
from .measured import _Snapshot, take_snapshot, workers_measured
from .profiler import move_exported_files, start_profiler, stop_profiler
from .report import build_report
from .steady import STEADY_BLOCK_STEPS, _Steady

if TYPE_CHECKING:  # the sidecar's format (checked, never imported: the child runs by path)
    from traceinspect.sidecar import (
        ChildReportJSON,
        GlobalArrayJSON,
        WorkersMeasuredJSON,
    )

# Bounded so that a million-step run does not grow the report without limit.
_MAX_STEPS_KEPT = 10_000
_MAX_GRAIN_EVENTS = 200
#: Global arrays built from the loop's batches that the report describes: the loop builds
#: the same one every step, so the first few say how.
GLOBAL_ARRAYS_KEPT = 4

_WAITING, _TRACING, _DONE = "waiting", "tracing", "done"
# The status file for the parent's progress line: rewritten at most this often.
_STATUS_EVERY_NS = 250_000_000


@dataclasses.dataclass
class _Source:
    kind: str
    key: str
    detail: str
    starts_ns: list[int] = dataclasses.field(default_factory=list)
    step_nums: list[int | None] = dataclasses.field(default_factory=list)
    count: int = 0


_MIN_WINDOW_STEPS = 5
# The early trace (the default window only): from the start of step EARLY_FROM_STEP (steps 0
# and 1 trace and compile) until the run is first steady, at most EARLY_MAX_S. It is kept only
# when the run ends before the steady window opens, so a short run, or one that crashes
# early, still leaves a trace. Stopping it pauses the script once (it writes the trace): the
# steady-state rule drops the block that pause fell in and opens the window only once a block
# after it agrees with those before (``_Steady.resume_after``), so the pause is never inside
# a block nor in the window.
EARLY_FROM_STEP = 2
EARLY_MAX_S = 10.0
# How long the end of a window waits for the device to finish the steps it traced.
DRAIN_TIMEOUT_S = 60.0
# The default window: at least DEFAULT_STEPS steps and at least WINDOW_MIN_S long (more steps
# when steps are short); an explicit --steps N traces exactly N.
DEFAULT_STEPS = 20
WINDOW_MIN_S = 1.0


class _Capture:
    """Counts steps, opens and closes the trace window, and writes the child's report."""

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
        self.trace_start_ns: int | None = None
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

    # -- helpers used by the hooks ------------------------------------------------------------

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

    # -- steps --------------------------------------------------------------------------------

    def on_step(self, kind: str, key: str, detail: str, step_num: int | None = None) -> None:
        """Called at the start of every candidate step, on the main thread."""
        try:
            self._on_step(kind, key, detail, step_num)
        finally:
            self.write_status()

    def _on_step(self, kind: str, key: str, detail: str, step_num: int | None) -> None:
        if self.forced not in ("auto", kind):
            return
        now = time.time_ns()
        with self.lock:
            src = self.sources.get((kind, key))
            if src is None:
                src = self.sources[(kind, key)] = _Source(kind, key, detail)
            index = src.count
            src.count += 1
            if src is self.chosen and self.last_output is not None:
                key, output = self.last_output
                self.last_output = None
                self.completions.submit(index - 1, key, output)
            if self.early is None and index >= EARLY_FROM_STEP and self.phase == _WAITING:
                self._start_early(index)
            if len(src.starts_ns) < _MAX_STEPS_KEPT:
                # Kept after the window too: the whole run's step times show whether the
                # traced window is representative.
                src.starts_ns.append(now)
                src.step_nums.append(step_num)
            if self.phase == _DONE:
                return
            if self.deadline_s is not None and now - self.script_start_ns >= self.deadline_s * 1e9:
                self.stop_phase(
                    f"the phase's time limit ({self.deadline_s:g} s) was reached at step {index}"
                )
            chosen = self.chosen
            if chosen is None or _PRIORITY[kind] < _PRIORITY[chosen.kind]:
                if kind == SOURCE_JIT and index < self._jit_wait():
                    # Not yet known to be the most dispatched function: wait until one
                    # of them has been called that often.
                    return
                self.chosen = src
                self.steady = None
                if self.phase == _TRACING:
                    # A better step marker appeared after the window opened (possible with
                    # --skip-steps 0): count the window in its steps from here.
                    self.window_first = index
                    self._enter_step_annotation(index, step_num)
                    return
            elif src is not chosen:
                return
            if self.early == "tracing":
                if self.early_first is None:
                    self.early_first = index
                self.early_last = index
                if (now - (self.early_start_ns or now)) / 1e9 >= EARLY_MAX_S:
                    self._stop_early(index)
                else:
                    self._enter_step_annotation(index, step_num)
            if self.phase == _WAITING and self._window_may_open(src, index, now):
                if self.timing == TIMING_TARGET and not self.batches_drawn:
                    # Nothing to repeat: the steps drew no batch from a Grain iterator.
                    self.stop_phase(f"no Grain batch was drawn in {index} steps ({src.detail})")
                if self._start_trace():
                    self.window_first = index
                    self._enter_step_annotation(index, step_num)
            elif self.phase == _TRACING and self.window_first is not None:
                traced = index - self.window_first
                elapsed_s = (now - (self.trace_start_ns or now)) / 1e9
                long_enough = elapsed_s >= self.window_max_s and traced >= _MIN_WINDOW_STEPS
                # At least WINDOW_MIN_S long: enough bursts of a worker pipeline, and enough
                # time for the worker probes' 50 ms counters to measure a rate.
                enough = traced >= self.steps and elapsed_s >= self.window_min_s
                if enough or long_enough:
                    self.window_end = index
                    if traced < self.steps:
                        self.notes.append(
                            f"the window closed after {traced} step(s), its time limit of "
                            f"{self.window_max_s:g} s, before the {self.steps} requested"
                        )
                    self.window_complete = True
                    self._stop_trace()
                    if self.config.get("stop_after"):
                        self.stopped_by_us = True
                        raise _StopAfter()
                else:
                    self._enter_step_annotation(index, step_num)

    def timing_window(self) -> bool:
        """In a phase of isolate, inside the timed window, on the main thread."""
        return self.timing is not None and self.phase == _TRACING and self.active()

    def stop_phase(self, why: str) -> NoReturn:
        """End a phase of isolate now (at a step's start, on the main thread): the window as
        it is, and the script stopped."""
        with self.lock:
            self.phase_end = why
            self.notes.append(why)
            if self.phase == _TRACING:
                self._stop_trace()
            self.phase = _DONE
            self.stopped_by_us = True
        raise _StopAfter()

    def _jit_wait(self) -> int:
        return self.skip if self.skip is not None else STEADY_BLOCK_STEPS

    def _window_may_open(self, src: _Source, index: int, now: int) -> bool:
        """Whether the window opens at step ``index``: after a fixed skip when one was given,
        else once the run is steady (or has waited ``max_wait_s``)."""
        if self.skip is not None:
            if index >= self.skip:
                self.window_rule = "skip"
                self.window_reason = f"skipped {self.skip} step(s) (--skip-steps)"
                return True
            return False
        if self.steady is None:
            workers = self._grain_setting("mp_prefetch", "num_workers") or 0
            self.steady = _Steady(max(STEADY_BLOCK_STEPS, 2 * int(workers)))
        steady = self.steady
        steady.add(src.starts_ns, index + 1)
        if steady.is_steady():
            if self.early == "tracing":
                # Stop the early trace first; the window opens once a block after that
                # pause agrees with the blocks before it.
                self._stop_early(index)
                return False
            self.window_rule = "steady"
            self.window_reason = steady.reason(index)
            return True
        waited = (now - self.script_start_ns) / 1e9
        if waited >= self.max_wait_s and index >= 2:
            self.window_rule = "time_bound"
            self.window_reason = (
                f"not steady after {waited:.0f} s ({index} steps; {steady.describe()}): "
                f"{'timed' if self.timing else 'traced'} from step {index} anyway "
                f"({self.config.get('max_wait_option', '--max-wait')})"
            )
            self.notes.append(self.window_reason)
            if self.early == "tracing":
                self._stop_early(index)
            return True
        return False

    def _enter_step_annotation(self, index: int, step_num: int | None) -> None:
        self._exit_step_annotation()
        jax_profiler = sys.modules.get("jax.profiler")
        if jax_profiler is None or self.timing is not None:
            return
        stats: dict[str, Any] = {"step_index": index}
        if step_num is not None:
            stats["step_num"] = step_num
        # Opened here and closed at the next step's start: a step with no user annotation
        # spans from one batch fetch (or jit call) to the next.
        traceme = jax_profiler.TraceAnnotation(ANN_STEP, **stats)
        traceme.__enter__()
        self.step_traceme = traceme

    def _exit_step_annotation(self) -> None:
        traceme, self.step_traceme = self.step_traceme, None
        if traceme is not None:
            with contextlib.suppress(Exception):
                traceme.__exit__(None, None, None)

    # -- the early trace ----------------------------------------------------------------------

    def _start_early(self, index: int) -> None:
        """Trace from step ``index`` on, in case the run ends before the window opens."""
        began = time.perf_counter_ns()
        try:
            self.device_tracer_applied = start_profiler(self.config, self.early_dir)
        except Exception as exc:
            self.early = "off"
            self.notes.append(f"no early trace: the profiler could not start ({exc})")
            return
        self.early = "tracing"
        self.early_start_ns = time.time_ns()
        self.early_costs_ms["start"] = (time.perf_counter_ns() - began) / 1e6

    def _stop_early(self, index: int) -> None:
        """Stop the early trace at the start of step ``index``; its files wait in
        ``early_dir``. The steady-state rule drops the block this pause falls in."""
        self._exit_step_annotation()
        began = time.perf_counter_ns()
        self.early_stop_ns = time.time_ns()
        if self.early_first is not None:
            self.early_last = index - 1
        try:
            stop_profiler()
            self.early = "stopped"
        except Exception as exc:
            self.early = "off"
            self.notes.append(f"the early trace could not be written ({exc})")
        self.early_costs_ms["stop"] = (time.perf_counter_ns() - began) / 1e6
        if self.steady is not None:
            self.steady.resume_after(index)

    def _drop_early(self) -> None:
        if self.early == "tracing":
            with contextlib.suppress(Exception):
                stop_profiler()
        if self.early in ("tracing", "stopped"):
            self.early = "dropped"
        shutil.rmtree(self.early_dir, ignore_errors=True)

    def _keep_early(self, how: str) -> None:
        """The run ended before the window opened: the early trace becomes the capture's,
        marked as not steady."""
        if self.early == "tracing":
            chosen = self.chosen
            self._stop_early(chosen.count if chosen is not None else 0)
        if self.early != "stopped":
            return
        try:
            self.trace_files += move_exported_files(
                self.early_dir, self.config["run_dir"], self.config.get("host_name")
            )
        except Exception as exc:
            self.partial_reasons.append(f"the early trace could not be kept: {exc}")
            return
        self.early = "kept"
        self.window_rule = "early"
        self.trace_start_ns, self.trace_stop_ns = self.early_start_ns, self.early_stop_ns
        self.window_first = self.early_first
        self.window_last_fixed = self.early_last
        first, last = self.early_first, self.early_last
        steps = f"steps {first}-{last}" if first is not None and last is not None else "a trace"
        why = self.steady.describe() if self.steady else "too few steps"
        self.window_reason = (
            f"the script {how} before the run was steady ({why}): kept the early trace, "
            f"{steps} after compilation; not a steady window (run more steps, or give "
            "--skip-steps N, for one)"
        )

    # -- the profiler -------------------------------------------------------------------------

    def _start_trace(self) -> bool:
        if self.timing is not None:
            # A phase of isolate times steps on the host only: the profiler would slow them.
            self.trace_start_ns = time.time_ns()
            self.at_open = self._snapshot()
            self.phase = _TRACING
            return True
        try:
            self.device_tracer_applied = start_profiler(self.config, self.config["export_dir"])
        except Exception as exc:
            self.phase = _DONE
            self.partial_reasons.append(f"the profiler could not start: {exc}")
            _warn(f"could not start the profiler ({exc}); the script goes on untraced")
            return False
        self.trace_start_ns = time.time_ns()
        self.at_open = self._snapshot()
        self.phase = _TRACING
        self.write_status(force=True)
        return True

    def _stop_trace(self) -> None:
        """Stop the profiler and move the exported files into the run directory."""
        self._exit_step_annotation()
        self.phase = _DONE
        self.trace_stop_ns = time.time_ns()
        self.at_close = self._snapshot()
        self._drain()
        # Now, while the script's jax.distributed client is surely still up.
        self.distributed = _distributed_info()
        if self.timing is not None:
            self.write_report()
            return
        self.write_status("writing", force=True)
        try:
            stop_profiler()
            self.trace_files += move_exported_files(
                self.config["export_dir"], self.config["run_dir"], self.config.get("host_name")
            )
        except Exception as exc:
            self.partial_reasons.append(f"the trace could not be written: {exc}")
            _warn(f"could not write the trace ({exc})")
            return
        finally:
            self.write_status(force=True)
        if self.trace_files:
            self._drop_early()
        self.write_report()
        if self.trace_files and not self.config.get("quiet"):
            _warn(f"{self._window_text()} captured in {self.config['run_dir']}")

    def _window_text(self) -> str:
        chosen = self.chosen
        if chosen is None or self.window_first is None:
            return "time window"
        last = self._window_last()
        return f"steps {self.window_first}-{last} ({chosen.detail})"

    def _window_last(self) -> int | None:
        if self.chosen is None or self.window_first is None:
            return None
        seen_last = self.chosen.count - 1
        if self.window_last_fixed is not None:
            return self.window_last_fixed
        if self.window_complete and self.window_end is not None:
            return self.window_end - 1
        return max(self.window_first, seen_last)

    # -- time window --------------------------------------------------------------------------

    def start_time_window(self) -> None:
        thread = threading.Thread(target=self._time_window, name="traceinspect-time", daemon=True)
        thread.start()

    def _time_window(self) -> None:
        stop = threading.Event()
        stop.wait(float(self.config["delay_s"]))
        with self.lock:
            # Any candidate step seen (even a jitted function not yet chosen) means steps
            # will be found: the time window is only the last resort.
            if self.phase != _WAITING or (self.forced == "auto" and self.sources):
                return
            if "jax" not in sys.modules:
                self.notes.append("time window skipped: the script had not imported jax")
                return
            detail = f"time window of {self.config['duration_s']} s"
            self.chosen = _Source(SOURCE_TIME, "time", detail)
            if not self._start_trace():
                return
        stop.wait(float(self.config["duration_s"]))
        with self.lock:
            if self.phase != _TRACING:
                return
            self.window_complete = True
            self._stop_trace()
            if self.config.get("stop_after"):
                self.stopped_by_us = True
                self.stop_requested = True
                import _thread

                _thread.interrupt_main(signal.SIGTERM)

    stop_requested = False

    # -- the end ------------------------------------------------------------------------------

    def finish(self, how: str) -> None:
        """Close the trace window however the script ended, then write the report."""
        # A second Ctrl-C must not cut the trace file in half.
        saved = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            self._finish(how)
        finally:
            for sig, handler in saved.items():
                signal.signal(sig, handler)

    def _finish(self, how: str) -> None:
        with self.lock:
            self.ended_how = how
            if self.phase == _TRACING:
                if how != "returned":
                    self.partial_reasons.append(f"the script {how} inside the window")
                else:
                    self.partial_reasons.append("the script ended inside the window")
                # The step in progress never ended: its annotation would run on through the
                # script's way out (Grain's workers shutting down: 776 ms of "idle" in a
                # 14 ms step). Left unrecorded: the profiler stops before it is let go.
                unfinished, self.step_traceme = self.step_traceme, None
                self._stop_trace()
                del unfinished
            elif self.phase == _WAITING:
                self._drain()
                self._keep_early(how)
                seen = self.chosen.count if self.chosen is not None else 0
                waiting_for = (
                    f"{self.skip} to skip"
                    if self.skip is not None
                    else "not yet steady: "
                    + (self.steady.describe() if self.steady else "too few steps")
                    + "; give --skip-steps N to trace after a fixed number of steps"
                )
                if self.early != "kept":
                    self.partial_reasons.append(
                        f"the script {how} before the window opened ({seen} step(s) seen,"
                        f" {waiting_for})"
                    )
                else:
                    self.partial_reasons.append(f"the script {how} before the run was steady")
                    if not self.config.get("quiet"):
                        _warn(f"{self._window_text()} captured in {self.config['run_dir']}")
                self.phase = _DONE
            self._drop_early()
            self.write_report()
            if self.worker_stats_dir is not None:
                shutil.rmtree(self.worker_stats_dir, ignore_errors=True)

    def _drain(self) -> None:
        """Wait for the device to finish the steps dispatched so far (their completion
        stamps; the last jitted call's output counts for the step in progress)."""
        if self.last_output is not None:
            key, output = self.last_output
            self.last_output = None
            # Waited on, so the trace holds the device's work of every step dispatched, but
            # not stamped: submitted now, not when its step ended, its stamp would be late
            # by whatever ran since (the script's way out).
            self.completions.submit(-1, key, output)
        if not self.completions.drain(DRAIN_TIMEOUT_S):
            self.notes.append(
                f"the device had not finished the traced steps {DRAIN_TIMEOUT_S:g} s after the "
                "window closed: the step times after that are the host's"
            )

    # -- progress -----------------------------------------------------------------------------

    def write_status(self, phase: str | None = None, force: bool = False) -> None:
        """Where the capture is, for the parent's progress line: a small file (config
        ``status_path``, absent unless the parent shows progress) rewritten at most every
        ``_STATUS_EVERY_NS``, and at once when the window opens or closes."""
        path = self.config.get("status_path")
        now = time.monotonic_ns()
        if not path or (not force and now - self.status_ns < _STATUS_EVERY_NS):
            return
        self.status_ns = now
        with self.lock, contextlib.suppress(Exception):
            chosen = self.chosen
            starts = chosen.starts_ns if chosen is not None else []
            complete = chosen is not None and len(starts) == chosen.count >= 2
            status = {
                "phase": phase or self.phase,
                "steps": chosen.count if chosen is not None else 0,
                "last_step_ms": (starts[-1] - starts[-2]) / 1e6 if complete else None,
                "first_step": self.window_first,
                "last_step": self._window_last(),
                "rule": self.window_rule,
                "skip_steps": self.skip,
                "source": chosen.kind if chosen is not None else None,
            }
            _write_json_atomic(path, status)

    status_ns = 0

    def report(self) -> ChildReportJSON:
        """What the parent adds to the sidecar (``report.build_report``)."""
        return build_report(self)

    def write_report(self) -> None:
        try:
            _write_json_atomic(self.config["report_path"], self.report())
        except Exception as exc:
            _warn(f"could not write the capture report ({exc})")

    # -- grain observations -------------------------------------------------------------------

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

    # -- Grain worker processes ---------------------------------------------------------------

    def worker_probe_dir(self) -> str:
        """Where the worker probes write their counters (made on first use)."""
        if self.worker_stats_dir is None:
            import tempfile

            self.worker_stats_dir = tempfile.mkdtemp(prefix="traceinspect-workers-")
        return self.worker_stats_dir

    def _snapshot(self) -> _Snapshot:
        """This process's CPU time and the worker probes' counters, now (and, in a phase of
        isolate, how busy the machine was)."""
        return take_snapshot(
            self.worker_stats_dir, self.stage_table, self.pid if self.timing is not None else None
        )

    def _workers_measured(self) -> WorkersMeasuredJSON | None:
        return workers_measured(self.at_open, self.at_close, self.batches_in_window)
