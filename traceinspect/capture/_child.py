"""The child side of ``traceinspect capture``: the user's script run with step hooks and tracing.

The parent runs this file by path (``python [flags] .../_child.py CONFIG.json``) so that it never
imports the ``traceinspect`` package (whose ``__init__`` may pull in pandas) into the user's
process. It must therefore import only the standard library at import time; jax and grain are
patched when the *script* imports them, through a post-import hook, so that a script that sets
``JAX_PLATFORMS`` or ``XLA_FLAGS`` before ``import jax`` behaves exactly as without us.

The parent module imports the constants below from here, so keep this file stdlib-only.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import functools
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import pathlib
import platform
import runpy
import shutil
import signal
import socket
import sys
import threading
import time
import types
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the sidecar's format (checked, never imported: this file runs by path)
    from traceinspect.sidecar import (
        ChildReportJSON,
        GrainJSON,
        HostJSON,
        StepJSON,
        WorkerJSON,
        WorkersMeasuredJSON,
    )

# What jax's profiler writes per host, ``<host><suffix>``: renamed when --host-name is given.
_HOST_FILE_SUFFIXES = (".xplane.pb", ".trace.json.gz", ".memory_profile.json.gz")


def host_file_name(name: str, host: str) -> str:
    """``name`` (a file jax wrote as ``<this machine's hostname><suffix>``) for ``host``."""
    local = socket.gethostname()
    if local and name.startswith(f"{local}."):
        return host + name[len(local) :]
    for suffix in _HOST_FILE_SUFFIXES:
        if name.endswith(suffix):
            return host + suffix
    return name


def _load_names() -> types.ModuleType:
    """``traceinspect/names.py``, loaded by path: this file runs without the package on the
    user's path, and the analysis matches the very names the capture writes."""
    path = pathlib.Path(__file__).resolve().parents[1] / "names.py"
    spec = importlib.util.spec_from_file_location("_traceinspect_names", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_NAMES = _load_names()
# Our trace annotations. They are only emitted while the trace window is open.
ANN_STEP: str = _NAMES.ANN_STEP
ANN_NEXT_BATCH: str = _NAMES.ANN_NEXT_BATCH
ANN_HOST_READ: str = _NAMES.ANN_HOST_READ
ANNOTATIONS: tuple[str, ...] = _NAMES.ANNOTATIONS

# Step sources, best first: a better source seen later replaces a worse one.
SOURCE_ANNOTATION = "annotation"
SOURCE_GRAIN = "grain"
SOURCE_JIT = "jit"
SOURCE_TIME = "time"
_PRIORITY = {SOURCE_ANNOTATION: 0, SOURCE_GRAIN: 1, SOURCE_JIT: 2, SOURCE_TIME: 3}

# Bounded so that a million-step run does not grow the report without limit.
_MAX_STEPS_KEPT = 10_000
_MAX_GRAIN_EVENTS = 200

_WAITING, _TRACING, _DONE = "waiting", "tracing", "done"

# The steady-state rule (the default window; ``--skip-steps N`` replaces it with a fixed skip).
# Host step times are cut into blocks of at least STEADY_BLOCK_STEPS steps (twice the Grain
# worker count when larger: mp_prefetch delivers in bursts of about one batch per worker) and
# at least STEADY_BLOCK_S seconds. The run is steady once the mean step time of the last
# STEADY_BLOCKS blocks agrees within STEADY_TOLERANCE (largest / smallest). Step 0 (tracing and
# compiling) is never in a block. Measured on the scenario family (sample_traces/scenarios/
# family): a loop that never waits dispatches ~30 steps in 0.1-1 ms each while the CPU client's
# queue and the prefetch buffers fill, then settles; settled blocks differ by 3-20% on a shared
# 2-core machine, while a block that still holds the fill phase is 2-30x faster than the next.
STEADY_BLOCK_STEPS = 8
STEADY_BLOCK_S = 0.5
STEADY_BLOCKS = 3
STEADY_TOLERANCE = 1.35


def _warn(message: str) -> None:
    # stdout belongs to the user's script; our own notes go to stderr with a clear prefix.
    with contextlib.suppress(Exception):
        sys.stderr.write(f"traceinspect: {message}\n")
        sys.stderr.flush()


def _write_json_atomic(path: str, data: Mapping[str, Any]) -> None:
    tmp = pathlib.Path(f"{path}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    tmp.replace(path)


class _Terminated(BaseException):
    """Raised in the main thread by our SIGTERM handler so the trace can be saved."""


class _StopAfter(BaseException):
    """Raised in the main thread to end the run once the window is captured (``--stop-after``)."""


@dataclasses.dataclass
class _Source:
    kind: str
    key: str
    detail: str
    starts_ns: list[int] = dataclasses.field(default_factory=list)
    step_nums: list[int | None] = dataclasses.field(default_factory=list)
    count: int = 0


_MIN_WINDOW_STEPS = 5
# The default window: at least DEFAULT_STEPS steps and at least WINDOW_MIN_S long (more steps
# when steps are short); an explicit --steps N traces exactly N.
DEFAULT_STEPS = 20
WINDOW_MIN_S = 1.0


class _Steady:
    """Block means of host step times, to tell when a run has settled (see STEADY_*)."""

    def __init__(self, block_steps: int) -> None:
        self.block_steps = block_steps
        self.block_start = 1  # step 0 compiles: never in a block
        self.blocks: list[tuple[int, int, float]] = []  # (first step, last step, mean ms)

    def add(self, starts_ns: Sequence[int], count: int | None = None) -> None:
        """Close every block complete in the first ``count`` (default all) of ``starts_ns``,
        the start times of steps 0, 1, ..."""
        n = len(starts_ns) if count is None else count
        while True:
            first = self.block_start
            last = first + self.block_steps  # the step whose start ends the block
            if last >= n:
                return
            while last < n - 1 and starts_ns[last] - starts_ns[first] < STEADY_BLOCK_S * 1e9:
                last += 1
            span = starts_ns[last] - starts_ns[first]
            if span < STEADY_BLOCK_S * 1e9:
                return
            self.blocks.append((first, last - 1, span / (last - first) / 1e6))
            self.block_start = last

    def is_steady(self) -> bool:
        if len(self.blocks) < STEADY_BLOCKS:
            return False
        means = [b[2] for b in self.blocks[-STEADY_BLOCKS:]]
        return min(means) > 0 and max(means) / min(means) <= STEADY_TOLERANCE

    def _means(self) -> str:
        return ", ".join(f"{b[2]:.1f}" for b in self.blocks[-STEADY_BLOCKS:])

    def describe(self) -> str:
        means = self._means()
        return f"mean step of the last blocks {means} ms" if means else "no complete block"

    def reason(self, index: int) -> str:
        first = self.blocks[-STEADY_BLOCKS][0]
        return (
            f"steady from step {first}: {STEADY_BLOCKS} blocks of steps since then have mean "
            f"step times within {STEADY_TOLERANCE - 1:.0%} of each other "
            f"({self._means()} ms); traced from step {index}"
        )


def _nbytes(obj: Any, depth: int = 0) -> int | None:
    """Bytes held by the arrays of a batch (numpy or jax leaves in dicts, lists, tuples)."""
    if depth > 6:
        return None
    nbytes = getattr(obj, "nbytes", None)
    if isinstance(nbytes, int):
        return nbytes
    items: Sequence[Any]
    if isinstance(obj, dict):
        items = list(obj.values())
    elif isinstance(obj, (list, tuple)):
        items = obj
    else:
        return None
    total = 0
    seen = False
    for item in items[:1000]:
        n = _nbytes(item, depth + 1)
        if n is not None:
            total += n
            seen = True
    return total if seen else None


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
        self.worker_snapshots: dict[str, dict[str, dict[str, Any]]] = {}
        self.process_cpu_ns: dict[str, int] = {}
        self.forced = config.get("step_source") or "auto"
        self.sources: dict[tuple[str, str], _Source] = {}
        self.chosen: _Source | None = None
        self.window_first: int | None = None
        self.window_end: int | None = None  # the step whose start closed the window
        self.window_complete = False
        self.trace_start_ns: int | None = None
        self.trace_stop_ns: int | None = None
        self.trace_files: list[str] = []
        self.notes: list[str] = []
        self.partial_reasons: list[str] = []
        self.stopped_by_us = False
        self.ended_how: str | None = None
        self.script_start_ns = time.time_ns()
        self.step_traceme: Any = None
        self.grain_events: list[dict[str, Any]] = []
        self.batch_bytes: int | None = None
        self.device_tracer_applied: bool | None = None
        self.grain_worker_profiling: bool | None = None
        self.distributed: dict[str, int] | None = None
        self.thread_state = threading.local()
        self.main_thread = threading.main_thread()

    # -- helpers used by the hooks ------------------------------------------------------------

    def active(self) -> bool:
        """Hooks do nothing in forked children and outside the main thread."""
        return os.getpid() == self.pid and threading.current_thread() is self.main_thread

    def tracing(self) -> bool:
        return self.phase == _TRACING and os.getpid() == self.pid

    def annotate(self, name: str, **stats: Any) -> contextlib.AbstractContextManager[Any]:
        if not self.tracing():
            return contextlib.nullcontext()
        jax_profiler = sys.modules.get("jax.profiler")
        if jax_profiler is None:
            return contextlib.nullcontext()
        ctx: contextlib.AbstractContextManager[Any] = jax_profiler.TraceAnnotation(name, **stats)
        return ctx

    # -- steps --------------------------------------------------------------------------------

    def on_step(self, kind: str, key: str, detail: str, step_num: int | None = None) -> None:
        """Called at the start of every candidate step, on the main thread."""
        if self.forced not in ("auto", kind):
            return
        now = time.time_ns()
        with self.lock:
            src = self.sources.get((kind, key))
            if src is None:
                src = self.sources[(kind, key)] = _Source(kind, key, detail)
            index = src.count
            src.count += 1
            if len(src.starts_ns) < _MAX_STEPS_KEPT:
                # Kept after the window too: the whole run's step times show whether the
                # traced window is representative.
                src.starts_ns.append(now)
                src.step_nums.append(step_num)
            if self.phase == _DONE:
                return
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
            if self.phase == _WAITING and self._window_may_open(src, index, now):
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
            self.window_rule = "steady"
            self.window_reason = steady.reason(index)
            return True
        waited = (now - self.script_start_ns) / 1e9
        if waited >= self.max_wait_s and index >= 2:
            self.window_rule = "time_bound"
            self.window_reason = (
                f"not steady after {waited:.0f} s ({index} steps; {steady.describe()}): "
                f"traced from step {index} anyway (--max-wait)"
            )
            self.notes.append(self.window_reason)
            return True
        return False

    def _enter_step_annotation(self, index: int, step_num: int | None) -> None:
        self._exit_step_annotation()
        jax_profiler = sys.modules.get("jax.profiler")
        if jax_profiler is None:
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

    # -- the profiler -------------------------------------------------------------------------

    def _start_trace(self) -> bool:
        try:
            import jax.profiler

            options = jax.profiler.ProfileOptions()
            options.host_tracer_level = int(self.config["host_tracer_level"])
            options.python_tracer_level = int(self.config["python_tracer_level"])
            level = self.config.get("device_tracer_level")
            if level is not None and hasattr(options, "device_tracer_level"):
                options.device_tracer_level = int(level)
                self.device_tracer_applied = True
            else:
                self.device_tracer_applied = False
            pathlib.Path(self.config["export_dir"]).mkdir(parents=True, exist_ok=True)
            jax.profiler.start_trace(self.config["export_dir"], profiler_options=options)
        except Exception as exc:
            self.phase = _DONE
            self.partial_reasons.append(f"the profiler could not start: {exc}")
            _warn(f"could not start the profiler ({exc}); the script goes on untraced")
            return False
        self.trace_start_ns = time.time_ns()
        self._snapshot("open")
        self.phase = _TRACING
        return True

    def _stop_trace(self) -> None:
        """Stop the profiler and move the exported files into the run directory."""
        self._exit_step_annotation()
        self.phase = _DONE
        self.trace_stop_ns = time.time_ns()
        self._snapshot("close")
        # Now, while the script's jax.distributed client is surely still up.
        self.distributed = _distributed_info()
        try:
            import jax.profiler

            jax_profiler: Any = jax.profiler
            jax_profiler.stop_trace()
            self._move_exported_files()
        except Exception as exc:
            self.partial_reasons.append(f"the trace could not be written: {exc}")
            _warn(f"could not write the trace ({exc})")
            return
        self.write_report()
        if self.trace_files and not self.config.get("quiet"):
            _warn(f"{self._window_text()} captured in {self.config['run_dir']}")

    def _move_exported_files(self) -> None:
        # jax writes <export_dir>/plugins/profile/<its run>/<host>.xplane.pb; each file is
        # complete before we rename it into place, so the run directory never holds a
        # half-written trace.
        # With --host-name the files are renamed for that host; other hosts may be writing to
        # the same run directory, so never replace a file that is already there.
        profile_root = pathlib.Path(self.config["export_dir"], "plugins", "profile")
        run_dir = pathlib.Path(self.config["run_dir"])
        run_dir.mkdir(parents=True, exist_ok=True)
        host = self.config.get("host_name")
        for run in sorted(profile_root.iterdir()):
            for path in sorted(run.iterdir()):
                name = host_file_name(path.name, host) if host else path.name
                target = run_dir / name
                if target.exists():
                    raise FileExistsError(f"'{target}' already exists")
                path.replace(target)
                self.trace_files.append(name)
        shutil.rmtree(self.config["export_dir"], ignore_errors=True)

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
                self._stop_trace()
            elif self.phase == _WAITING:
                seen = self.chosen.count if self.chosen is not None else 0
                waiting_for = (
                    f"{self.skip} to skip"
                    if self.skip is not None
                    else "not yet steady: "
                    + (self.steady.describe() if self.steady else "too few steps")
                    + "; give --skip-steps N to trace after a fixed number of steps"
                )
                self.partial_reasons.append(
                    f"the script {how} before the window opened ({seen} step(s) seen,"
                    f" {waiting_for})"
                )
                self.phase = _DONE
            self.write_report()
            if self.worker_stats_dir is not None:
                shutil.rmtree(self.worker_stats_dir, ignore_errors=True)

    def report(self) -> ChildReportJSON:
        """What the parent adds to the sidecar (traceinspect.sidecar declares the format)."""
        distributed = self.distributed or _distributed_info() or _NOT_DISTRIBUTED
        chosen = self.chosen
        steps: list[StepJSON] = []
        last = self._window_last()
        if chosen is not None and chosen.kind != SOURCE_TIME:
            starts = chosen.starts_ns
            for i, start in enumerate(starts):
                wall_ms = (starts[i + 1] - start) / 1e6 if i + 1 < len(starts) else None
                traced = (
                    self.window_first is not None
                    and last is not None
                    and self.window_first <= i <= last
                    and self.trace_start_ns is not None
                )
                steps.append(
                    {
                        "index": i,
                        "step_num": chosen.step_nums[i],
                        "start_unix_ns": start,
                        "wall_ms": wall_ms,
                        "traced": traced,
                    }
                )
        return {
            "step_source": chosen.kind if chosen is not None else None,
            "step_source_detail": chosen.detail if chosen is not None else None,
            "window": {
                "skip_steps": self.skip,
                "rule": self.window_rule,
                "reason": self.window_reason,
                "requested_steps": self.steps,
                "first_step": self.window_first,
                "last_step": last,
                "complete": self.window_complete,
                "trace_start_unix_ns": self.trace_start_ns,
                "trace_stop_unix_ns": self.trace_stop_ns,
            },
            "steps": steps,
            "steps_seen": chosen.count if chosen is not None else 0,
            "trace_files": self.trace_files,
            "partial_reasons": self.partial_reasons,
            "notes": self.notes,
            "stopped_by_traceinspect": self.stopped_by_us,
            "ended": self.ended_how,
            "script_start_unix_ns": self.script_start_ns,
            "profiler": {
                "host_tracer_level": self.config["host_tracer_level"],
                "python_tracer_level": self.config["python_tracer_level"],
                "device_tracer_level": self.config.get("device_tracer_level"),
                "device_tracer_level_applied": self.device_tracer_applied,
                "grain_worker_profiling": self.grain_worker_profiling,
            },
            "host": _host_info(),
            "versions": _versions(),
            "backend": _backend_info(),
            "grain": self._grain_summary(),
            "process_index": distributed["process_index"],
            "process_count": distributed["process_count"],
        }

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

    def _grain_summary(self) -> GrainJSON | None:
        if "grain" not in sys.modules and not self.grain_events:
            return None

        def last(kind: str, field: str) -> Any:
            return self._grain_setting(kind, field, self.trace_start_ns)

        workers = last("mp_prefetch", "num_workers")
        buffer = last("mp_prefetch", "per_worker_buffer_size")
        if workers is None:
            workers = last("DataLoader", "worker_count")
            buffer = last("DataLoader", "worker_buffer_size")
        read_threads = last("ReadOptions", "num_threads")
        if read_threads is None:
            read_threads = last("DataLoader", "read_threads")
        return {
            "workers_override": self.config.get("workers"),
            "worker_count": workers,
            "per_worker_buffer_size": buffer,
            "read_threads": read_threads,
            "read_prefetch_buffer_size": last("ReadOptions", "prefetch_buffer_size"),
            "batch_size": last("batch", "batch_size"),
            "bytes_per_batch": self.batch_bytes,
            "workers_measured": self._workers_measured(),
            "observed": self.grain_events,
        }

    # -- Grain worker processes ---------------------------------------------------------------

    def worker_probe_dir(self) -> str:
        """Where the worker probes write their counters (made on first use)."""
        if self.worker_stats_dir is None:
            import tempfile

            self.worker_stats_dir = tempfile.mkdtemp(prefix="traceinspect-workers-")
        return self.worker_stats_dir

    def _snapshot(self, when: str) -> None:
        """Counters of the worker probes and this process's CPU time, at ``when``."""
        self.process_cpu_ns[when] = time.process_time_ns()
        self.process_cpu_ns[f"{when}_wall"] = time.time_ns()
        if self.worker_stats_dir is None:
            return
        found: dict[str, dict[str, Any]] = {}
        with contextlib.suppress(OSError):
            for path in pathlib.Path(self.worker_stats_dir).glob("worker-*.json"):
                with contextlib.suppress(OSError, ValueError):
                    found[path.stem] = json.loads(path.read_text(encoding="utf-8"))
        self.worker_snapshots[when] = found

    def _workers_measured(self) -> WorkersMeasuredJSON | None:
        """Each worker's activity over the window: counter differences between its open and
        close (each worker's own clock: a probe writes every ~50 ms)."""
        start = self.worker_snapshots.get("open")
        stop = self.worker_snapshots.get("close")
        if not start or not stop:
            return None
        workers: list[WorkerJSON] = []
        for key, end in sorted(stop.items()):
            begin = start.get(key)
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
                    "rss_bytes": end.get("rss_bytes"),
                    "timed_elements": bool(end.get("timed")),
                }
            )
        if not workers:
            return None
        cpu = self.process_cpu_ns
        wall = (cpu.get("close_wall", 0) - cpu.get("open_wall", 0)) / 1e9
        return {
            "window_s": round(wall, 4),
            "batches": self.batches_in_window,
            "elements": sum(w["elements"] for w in workers),
            "main_process_cpu_s": round((cpu.get("close", 0) - cpu.get("open", 0)) / 1e9, 4),
            "workers": workers,
        }


# -- facts about the machine and the libraries ------------------------------------------------


def _meminfo() -> dict[str, int]:
    out: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in pathlib.Path("/proc/meminfo").read_text(encoding="ascii").splitlines():
            key, _, rest = line.partition(":")
            if key in ("MemTotal", "MemAvailable"):
                out[key] = int(rest.split()[0]) * 1024
    return out


def _host_info() -> HostJSON:
    affinity: list[int] | None = None
    if hasattr(os, "sched_getaffinity"):
        with contextlib.suppress(OSError):
            affinity = sorted(os.sched_getaffinity(0))
    mem = _meminfo()
    return {
        "hostname": socket.gethostname(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": affinity,
        "cpus_available": len(affinity) if affinity is not None else os.cpu_count(),
        "memory_total_bytes": mem.get("MemTotal"),
        "memory_available_bytes": mem.get("MemAvailable"),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }


def _versions() -> dict[str, str | None]:
    from importlib import metadata

    out: dict[str, str | None] = {}
    for dist in ("jax", "jaxlib", "grain"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def _backend_info() -> dict[str, Any] | None:
    # Only when the script imported jax itself: we never initialise a backend on our own.
    jax = sys.modules.get("jax")
    if jax is None or not hasattr(jax, "devices"):
        return None
    try:
        devices = jax.devices()
        return {
            "platform": jax.default_backend(),
            "device_count": len(devices),
            "process_count": jax.process_count(),
            "devices": [
                {
                    "id": d.id,
                    "platform": d.platform,
                    "kind": getattr(d, "device_kind", None),
                    "process_index": d.process_index,
                }
                for d in devices
            ],
        }
    except Exception as exc:
        return {"error": str(exc)}


_NOT_DISTRIBUTED: dict[str, int | None] = {"process_index": None, "process_count": None}


def _distributed_info() -> dict[str, int] | None:
    """This process's index and the process count, if the script called jax.distributed."""
    jax = sys.modules.get("jax")
    is_initialized = getattr(getattr(jax, "distributed", None), "is_initialized", None)
    if jax is None or is_initialized is None:
        return None
    try:
        if not is_initialized():
            return None
        return {
            "process_index": int(jax.process_index()),
            "process_count": int(jax.process_count()),
        }
    except Exception:
        return None


# -- post-import hooks ------------------------------------------------------------------------


class _PatchingLoader(importlib.abc.Loader):
    """Runs the real loader, puts it back in place, then patches the fresh module."""

    def __init__(self, real: Any, spec: Any, patch: Callable[[types.ModuleType], None]) -> None:
        self.real = real
        self.spec = spec
        self.patch = patch

    def create_module(self, spec: Any) -> types.ModuleType | None:
        module: types.ModuleType | None = self.real.create_module(spec)
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        # Restore the real loader first so importlib.resources and pickling see it.
        self.spec.loader = self.real
        module.__loader__ = self.real
        self.real.exec_module(module)
        try:
            self.patch(module)
        except Exception as exc:
            _warn(f"could not hook into {module.__name__} ({exc}); steps may not be found")


class _PostImportFinder(importlib.abc.MetaPathFinder):
    def __init__(self, patches: dict[str, Callable[[types.ModuleType], None]]) -> None:
        self.patches = patches

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        patch = self.patches.pop(fullname, None)
        if patch is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _PatchingLoader(spec.loader, spec, patch)
                return spec
        return None


def _wrap_method(cls: type, name: str, make: Callable[[Any], Any]) -> None:
    original = cls.__dict__.get(name)
    if original is None or getattr(original, "__traceinspect_wrapped__", False):
        return
    wrapped = make(original)
    wrapped.__traceinspect_wrapped__ = True
    setattr(cls, name, wrapped)


def _patch_jax(cap: _Capture, jax: Any) -> None:
    profiler_mod: Any = sys.modules["jax._src.profiler"]
    base = profiler_mod.StepTraceAnnotation

    class StepTraceAnnotation(base):  # type: ignore[misc, valid-type]
        __doc__ = base.__doc__

        def __init__(self, name: str, **kwargs: Any) -> None:
            # Before the base __init__: jax's TraceMe decides at construction whether it is
            # recorded, so the window must already be open for this step's annotation.
            if cap.active():
                step_num = kwargs.get("step_num")
                cap.on_step(
                    SOURCE_ANNOTATION,
                    name,
                    f"StepTraceAnnotation {name!r}",
                    step_num if isinstance(step_num, int) else None,
                )
            super().__init__(name, **kwargs)

    StepTraceAnnotation.__name__ = base.__name__
    StepTraceAnnotation.__qualname__ = base.__qualname__
    StepTraceAnnotation.__module__ = base.__module__
    profiler_mod.StepTraceAnnotation = StepTraceAnnotation
    jax.profiler.StepTraceAnnotation = StepTraceAnnotation

    real_jit = jax.jit

    @functools.wraps(real_jit)
    def jit(fun: Any = None, *args: Any, **kwargs: Any) -> Any:
        if fun is None:
            # jax.jit(static_argnums=...) used as a decorator factory.
            return lambda f: jit(f, *args, **kwargs)
        return _JitProxy(cap, real_jit(fun, *args, **kwargs), fun)

    jax.jit = jit

    array_mod = sys.modules.get("jax._src.array")
    array_impl = getattr(array_mod, "ArrayImpl", None)
    if array_impl is not None:
        for name in (
            "__float__",
            "__int__",
            "__bool__",
            "__index__",
            "item",
            "tolist",
            "__array__",
            "block_until_ready",
        ):
            _wrap_method(array_impl, name, functools.partial(_host_read, cap, kind=name))
    real_device_get = jax.device_get
    jax.device_get = _host_read(cap, real_device_get, kind="device_get")


def _host_read(cap: _Capture, orig: Callable[..., Any], *, kind: str) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if cap.phase != _TRACING:
            return orig(*args, **kwargs)
        with cap.annotate(ANN_HOST_READ, kind=kind):
            return orig(*args, **kwargs)

    wrapper.__name__ = getattr(orig, "__name__", kind)
    wrapper.__doc__ = getattr(orig, "__doc__", None)
    return wrapper


class _JitProxy:
    """Stands in for a jitted function to count its calls; everything else is forwarded."""

    def __init__(self, cap: _Capture, jitted: Any, fun: Any) -> None:
        self._ti_cap = cap
        self._ti_jitted = jitted
        name = getattr(fun, "__qualname__", None) or getattr(fun, "__name__", None) or repr(fun)
        self._ti_key = f"{name}@{id(jitted):x}"
        self._ti_detail = f"calls of jitted {name}"
        with contextlib.suppress(Exception):
            self.__wrapped__ = jitted
            self.__name__ = getattr(fun, "__name__", "jitted")
            self.__doc__ = getattr(fun, "__doc__", None)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        cap = self._ti_cap
        if cap.active():
            cap.on_step(SOURCE_JIT, self._ti_key, self._ti_detail)
        return self._ti_jitted(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_ti_"):
            # Not yet set (copy, pickle): never recurse into ourselves.
            raise AttributeError(name)
        return getattr(self._ti_jitted, name)

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        if instance is None:
            return self
        return types.MethodType(self, instance)

    def __repr__(self) -> str:
        return repr(self._ti_jitted)


def _patch_grain(cap: _Capture, grain: types.ModuleType) -> None:
    dataset_mod = sys.modules["grain._src.python.dataset.dataset"]
    iterator_base = dataset_mod.DatasetIterator
    workers = cap.config.get("workers")
    state = cap.thread_state

    def make_next(orig: Callable[[Any], Any]) -> Callable[[Any], Any]:
        @functools.wraps(orig)
        def __next__(self: Any) -> Any:
            depth = getattr(state, "depth", 0)
            if depth or not cap.active():
                # A pipeline stage calling its parent: only the outermost fetch is a batch.
                state.depth = depth + 1
                try:
                    return orig(self)
                finally:
                    state.depth = depth
            cls_name = type(self).__name__
            cap.on_step(SOURCE_GRAIN, cls_name, f"batches from grain {cls_name}")
            state.depth = 1
            if cap.phase == _TRACING:
                cap.batches_in_window += 1
            try:
                with cap.annotate(ANN_NEXT_BATCH):
                    batch = orig(self)
            finally:
                state.depth = 0
            if cap.batch_bytes is None or cap.phase == _TRACING:
                n = _nbytes(batch)
                if n is not None:
                    cap.batch_bytes = n
            return batch

        return __next__

    def wrap_tree(cls: type) -> None:
        _wrap_method(cls, "__next__", make_next)
        sub: type
        for sub in cls.__subclasses__():
            wrap_tree(sub)

    wrap_tree(iterator_base)
    original_init_subclass = iterator_base.__dict__.get("__init_subclass__")

    def __init_subclass__(cls: type, /, **kwargs: Any) -> None:
        if original_init_subclass is not None:
            original_init_subclass.__func__(cls, **kwargs)
        else:
            super(iterator_base, cls).__init_subclass__(**kwargs)
        _wrap_method(cls, "__next__", make_next)

    iterator_base.__init_subclass__ = classmethod(__init_subclass__)

    loader_mod = sys.modules.get("grain._src.python.data_loader")
    if loader_mod is not None:
        _wrap_method(loader_mod.DataLoaderIterator, "__next__", make_next)
        real_loader_init = loader_mod.DataLoader.__init__

        @functools.wraps(real_loader_init)
        def loader_init(self: Any, *args: Any, **kwargs: Any) -> None:
            if workers is not None:
                kwargs["worker_count"] = workers
            real_loader_init(self, *args, **kwargs)
            read = kwargs.get("read_options")
            batch_size = None
            for op in kwargs.get("operations") or ():
                batch_size = getattr(op, "batch_size", batch_size)
            cap.grain_event(
                "DataLoader",
                worker_count=kwargs.get("worker_count", 0),
                worker_buffer_size=kwargs.get("worker_buffer_size", 1),
                read_threads=getattr(read, "num_threads", None),
            )
            if batch_size is not None:
                cap.grain_event("batch", batch_size=batch_size, where="DataLoader")

        loader_mod.DataLoader.__init__ = loader_init

    options_mod = sys.modules["grain._src.python.options"]
    iter_dataset = dataset_mod.IterDataset
    real_mp_prefetch = iter_dataset.mp_prefetch

    @functools.wraps(real_mp_prefetch)
    def mp_prefetch(
        self: Any, options: Any = None, worker_init_fn: Any = None, *args: Any, **kwargs: Any
    ) -> Any:
        options = options or options_mod.MultiprocessingOptions(num_workers=10)
        if workers is not None:
            options = dataclasses.replace(options, num_workers=workers)
        cap.grain_event(
            "mp_prefetch",
            num_workers=options.num_workers,
            per_worker_buffer_size=options.per_worker_buffer_size,
        )
        if options.num_workers > 0 and os.getpid() == cap.pid:
            # Grain cloudpickles this into each worker process; _worker_probe is pickled by
            # value (this file runs as __main__), so the worker needs nothing of ours.
            worker_init_fn = functools.partial(
                _worker_probe, cap.worker_probe_dir(), worker_init_fn
            )
        return real_mp_prefetch(self, options, worker_init_fn, *args, **kwargs)

    iter_dataset.mp_prefetch = mp_prefetch

    prefetch_mod = sys.modules.get("grain._src.python.dataset.transformations.prefetch")
    if prefetch_mod is not None:
        real_prefetch_init = prefetch_mod.PrefetchIterDataset.__init__

        @functools.wraps(real_prefetch_init)
        def prefetch_init(self: Any, parent: Any, *args: Any, **kwargs: Any) -> None:
            real_prefetch_init(self, parent, *args, **kwargs)
            read = kwargs.get("read_options")
            cap.grain_event(
                "ReadOptions",
                num_threads=_plain(getattr(read, "num_threads", None)),
                prefetch_buffer_size=_plain(getattr(read, "prefetch_buffer_size", None)),
            )

        prefetch_mod.PrefetchIterDataset.__init__ = prefetch_init

    batch_mod = sys.modules.get("grain._src.python.dataset.transformations.batch")
    if batch_mod is not None:
        for cls_name in ("BatchMapDataset", "BatchIterDataset"):
            cls = getattr(batch_mod, cls_name, None)
            if cls is None:
                continue
            real_init = cls.__init__

            def batch_init(
                self: Any,
                parent: Any,
                batch_size: int,
                *args: Any,
                _real: Callable[..., None] = real_init,
                _name: str = cls_name,
                **kwargs: Any,
            ) -> None:
                _real(self, parent, batch_size, *args, **kwargs)
                cap.grain_event("batch", batch_size=batch_size, where=_name)

            cls.__init__ = batch_init

    if cap.config.get("grain_worker_profiling"):
        cap.grain_worker_profiling = _enable_worker_profiling()


def _worker_probe(
    stats_dir: str, user_init: Callable[[int, int], None] | None, index: int, count: int
) -> None:
    """Runs in each Grain ``mp_prefetch`` worker process before it starts producing.

    Times the worker's loop from the outside of each element: Grain's worker produces an
    element (``next``), then puts it in its buffer, blocking while the buffer is full. The put
    is ``grain_queue.add_element_to_queue``; wrapped here, the time between two puts is the
    time spent producing, and the time inside one is the time blocked on a full buffer (the
    consumer did not need the element yet). A thread writes the counters, with the process's
    CPU time and memory, to ``stats_dir/worker-<index>-<pid>.json`` every 50 ms; the training
    process reads them when the trace window opens and closes.

    Self-contained (imports inside, no module globals) because it is pickled by value.
    """
    if user_init is not None:
        user_init(index, count)
    import json as _json
    import os as _os
    import pathlib as _pathlib
    import sys as _sys
    import threading as _threading
    import time as _time

    pid = _os.getpid()
    lock = _threading.Lock()
    state: dict[str, Any] = {
        "elements": 0,
        "produce_ns": 0,
        "blocked_ns": 0,
        "since": _time.perf_counter_ns(),
    }
    phase = ["produce"]
    timed = False
    module = _sys.modules.get("grain._src.python.dataset.transformations.process_prefetch")
    queue_mod: Any = getattr(module, "grain_queue", None)
    real_put = getattr(queue_mod, "add_element_to_queue", None)
    if real_put is not None:

        def add_element_to_queue(*args: Any, **kwargs: Any) -> Any:
            now = _time.perf_counter_ns()
            with lock:
                state["produce_ns"] += now - state["since"]
                state["elements"] += 1
                state["since"] = now
                phase[0] = "blocked"
            try:
                return real_put(*args, **kwargs)
            finally:
                done = _time.perf_counter_ns()
                with lock:
                    state["blocked_ns"] += done - state["since"]
                    state["since"] = done
                    phase[0] = "produce"

        queue_mod.add_element_to_queue = add_element_to_queue
        timed = True
    path = _pathlib.Path(stats_dir, f"worker-{index}-{pid}.json")
    page = _os.sysconf("SC_PAGE_SIZE") if hasattr(_os, "sysconf") else 4096

    def rss() -> int | None:
        try:
            statm = _pathlib.Path(f"/proc/{pid}/statm").read_text(encoding="ascii")
            return int(statm.split()[1]) * page
        except (OSError, ValueError, IndexError):
            return None

    def write() -> None:
        now = _time.perf_counter_ns()
        with lock:
            counters = dict(state)
            running = now - counters.pop("since")
            counters[f"{phase[0]}_ns"] += running
        counters.update(
            index=index,
            count=count,
            pid=pid,
            timed=timed,
            t_ns=_time.time_ns(),
            cpu_ns=_time.process_time_ns(),
            rss_bytes=rss(),
        )
        tmp = path.with_name(f"{path.name}.tmp")
        tmp.write_text(_json.dumps(counters), encoding="utf-8")
        tmp.replace(path)

    def loop() -> None:
        while True:
            try:
                write()
            except OSError:
                return
            _time.sleep(0.05)

    _threading.Thread(target=loop, name="traceinspect-worker-probe", daemon=True).start()


def _plain(value: Any) -> Any:
    return value if isinstance(value, (int, float, str)) or value is None else repr(value)


def _enable_worker_profiling() -> bool:
    """Turn on Grain's worker profiling flag when this jax/grain pair supports it."""
    profiler = sys.modules.get("grain._src.core.profiler")
    if profiler is None or not getattr(profiler, "is_worker_profiling_supported", lambda: False)():
        return False
    try:
        from absl import flags

        # A default, not a value: a script that parses its own flags keeps control.
        flags.FLAGS.set_default("grain_enable_multiprocess_worker_profiling", True)
    except Exception:
        return False
    return True


# -- running the script -----------------------------------------------------------------------


def _user_traceback(tb: types.TracebackType | None) -> types.TracebackType | None:
    """Drop our own and runpy's frames so the traceback starts in the user's code."""
    ours = {__file__, runpy.__file__, "<frozen runpy>"}
    while tb is not None and tb.tb_frame.f_code.co_filename in ours:
        tb = tb.tb_next
    return tb


def _run(config: dict[str, Any]) -> None:
    cap = _Capture(config)

    def on_sigterm(signum: int, frame: Any) -> None:
        if cap.stop_requested:
            raise _StopAfter()
        raise _Terminated()

    finder = _PostImportFinder(
        {
            "jax": lambda m: _patch_jax(cap, m),
            "grain": lambda m: _patch_grain(cap, m),
        }
    )
    terminated = threading.Event()
    atexit.register(_die_by_sigterm_if, terminated)
    sys.meta_path.insert(0, finder)
    for name in list(finder.patches):
        # Already imported (by sitecustomize, say): patch it now.
        module = sys.modules.get(name)
        if module is not None:
            finder.patches.pop(name)(module)
    signal.signal(signal.SIGTERM, on_sigterm)
    if cap.forced in ("auto", SOURCE_TIME):
        cap.start_time_window()

    target: str = config["target"]
    # Python put this file's directory first on sys.path; the script expects its own (or the
    # working directory for -m). Under -P or -I Python adds neither, and neither do we.
    here = pathlib.Path(__file__).resolve().parent
    replace_path0 = bool(sys.path) and pathlib.Path(sys.path[0] or ".").resolve() == here
    if config["mode"] == "module":
        sys.argv = [target, *config["args"]]
        if replace_path0:
            sys.path[0] = str(pathlib.Path.cwd())
    else:
        sys.argv = [config["argv0"], *config["args"]]
        if replace_path0:
            sys.path[0] = str(pathlib.Path(target).resolve().parent)

    try:
        if config["mode"] == "module":
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(target, run_name="__main__")
    except _StopAfter:
        cap.finish("was stopped by traceinspect")
        _flush()
        sys.exit(0)
    except _Terminated:
        cap.finish("was terminated (SIGTERM)")
        # Exit through the interpreter so that atexit handlers run (multiprocessing stops
        # Grain's worker processes there, instead of leaving them orphaned), then die by
        # SIGTERM from our own handler, registered first and so run last.
        terminated.set()
        sys.exit(128 + signal.SIGTERM)
    except SystemExit as exc:
        code = exc.code
        cap.finish("returned" if code in (None, 0) else f"called sys.exit({code!r})")
        raise
    except KeyboardInterrupt as exc:
        cap.finish("was interrupted (SIGINT)")
        _report_uncaught(exc)
        sys.exit(128 + signal.SIGINT)
    except BaseException as exc:
        cap.finish(f"raised {type(exc).__name__}")
        _report_uncaught(exc)
        sys.exit(1)
    else:
        cap.finish("returned")


def _die_by_sigterm_if(terminated: threading.Event) -> None:
    if terminated.is_set():
        # The way the script would have ended without us: the parent sees the signal.
        _flush()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)


def _report_uncaught(exc: BaseException) -> None:
    # What the interpreter would print, without our frames: the user's code comes first.
    tb = _user_traceback(exc.__traceback__)
    # The interpreter prints the exception's own __traceback__, so trim that one too.
    sys.excepthook(type(exc), exc.with_traceback(tb), tb)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


def main(argv: list[str]) -> None:
    _run(json.loads(pathlib.Path(argv[1]).read_text(encoding="utf-8")))


if __name__ == "__main__":
    main(sys.argv)
