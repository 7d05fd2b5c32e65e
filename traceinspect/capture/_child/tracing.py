"""The profiler around the window: started and stopped, the step annotations in the trace,
the time window (the last resort when no steps are found) set aside when steps begin, and
how the script's end closes the window. The rules that open and close it are ``window.py``."""

from __future__ import annotations

import contextlib
import pathlib
import shutil
import signal
import sys
import threading
import time
from typing import Any

from ._base import ANN_STEP, SOURCE_TIME, _warn
from .early import _EarlyTrace
from .facts import _distributed_info
from .profiler import move_exported_files, start_profiler, stop_profiler
from .state import _DONE, _TRACING, _WAITING, _Source


class _Tracing(_EarlyTrace):
    """Starts and stops the profiler for the window, the time window and the script's end."""

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

    def _start_trace(self) -> bool:
        if self.timing is not None:
            # A phase of isolate times steps on the host only: the profiler would slow them.
            self.trace_start_ns = self.window_open_ns = time.time_ns()
            self.at_open = self._snapshot()
            self.phase = _TRACING
            return True
        if self.early == "tracing":
            # The early trace goes on as the window's: no stop and restart, so no pause in
            # the run (writing a trace holds the script 50-450 ms, and a 4-worker pipeline
            # then took more than a block to settle again). The analysis reads the window's
            # steps only (the sidecar says where it opened).
            self.early = "window"
            self.trace_start_ns = self.early_start_ns
            self.window_open_ns = time.time_ns()
            self.at_open = self._snapshot()
            self.phase = _TRACING
            self.write_status(force=True)
            return True
        try:
            self.device_tracer_applied = start_profiler(self.config, self.config["export_dir"])
        except Exception as exc:
            self.phase = _DONE
            self.partial_reasons.append(f"the profiler could not start: {exc}")
            _warn(f"could not start the profiler ({exc}); the script goes on untraced")
            return False
        self.trace_start_ns = self.window_open_ns = time.time_ns()
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
            exported = self.early_dir if self.early == "window" else self.config["export_dir"]
            self.trace_files += move_exported_files(
                exported, self.config["run_dir"], self.config.get("host_name")
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
            source = self.chosen = _Source(SOURCE_TIME, "time", detail)
            if not self._start_trace():
                return
            started_ns = self.trace_start_ns
        stop.wait(float(self.config["duration_s"]))
        with self.lock:
            # Not this window's trace any more: steps that began inside it chose another source,
            # or closed it, set it aside and opened their own since.
            if (
                self.phase != _TRACING
                or self.chosen is not source
                or self.trace_start_ns != started_ns
            ):
                return
            self.window_complete = True
            self._stop_trace()
            if self.config.get("stop_after"):
                self.stopped_by_us = True
                self.stop_requested = True
                import _thread

                _thread.interrupt_main(signal.SIGTERM)

    def _in_time_window(self) -> bool:
        chosen = self.chosen
        return chosen is not None and chosen.kind == SOURCE_TIME and self.timing is None

    def _time_window_taken(self) -> bool:
        chosen = self.chosen
        return (
            chosen is not None
            and (chosen.kind == SOURCE_TIME or self.steps_in_time_window_ns is not None)
            and self.timing is None
            and not self.stopped_by_us
            and bool(self.trace_files)
        )

    def _set_time_window_aside(self, now: int, when: str = "after") -> None:
        """Steps began after the time window (a job whose set-up outlasted ``delay_s``:
        MaxText on a loaded machine took over 10 s to its first step): its trace is set
        aside, kept only if no window of steps is captured, and the steps are counted."""
        aside = pathlib.Path(self.early_dir + "-time")
        aside.mkdir(parents=True, exist_ok=True)
        for name in self.trace_files:
            with contextlib.suppress(OSError):
                pathlib.Path(self.config["run_dir"], name).replace(aside / name)
        self.time_aside = (str(aside), list(self.trace_files))
        began = self.steps_in_time_window_ns
        if began is not None:
            when = "inside"
        waited = ((began or now) - self.script_start_ns) / 1e9
        self.notes.append(
            f"steps began {waited:.0f} s after the script started, {when} the time window "
            "(--delay): its trace was set aside for a window of steps"
        )
        self.steps_in_time_window_ns = None
        self.trace_files = []
        self.chosen = None
        self.phase = _WAITING
        self.window_complete = False
        self.trace_start_ns = self.trace_stop_ns = self.window_open_ns = None
        self.at_open = self.at_close = None

    def _restore_time_window(self) -> None:
        """No window of steps was captured: the time window's trace is the run's."""
        aside, names = self.time_aside or ("", [])
        for name in names:
            with contextlib.suppress(OSError):
                pathlib.Path(aside, name).replace(pathlib.Path(self.config["run_dir"], name))
                self.trace_files.append(name)
        shutil.rmtree(aside, ignore_errors=True)
        self.time_aside = None

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
            if self.time_aside is not None:
                if self.trace_files:
                    shutil.rmtree(self.time_aside[0], ignore_errors=True)
                else:
                    self._restore_time_window()
            self.write_report()
            if self.worker_stats_dir is not None:
                shutil.rmtree(self.worker_stats_dir, ignore_errors=True)
