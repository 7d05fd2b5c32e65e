"""The early trace, and waiting for the device.

From the start of step EARLY_FROM_STEP (steps 0 and 1 trace and compile) the default
window's capture traces already. When the run turns steady the same trace goes on as the
window's (no stop and restart: no pause in the run; the sidecar says where the window
opened, and the analysis reads its steps only). When the run ends first, the early trace is
the run's, marked as not steady, so a short run, or one that crashes early, still leaves a
trace. A run not steady after EARLY_MAX_S stops it then (its memory stays bounded), keeps
its files aside in case the run ends before the window opens, and starts a new trace when
the window opens; that stop pauses the script once (writing a trace took 50-450 ms on the
scenario family), so the steady-state rule drops the block the pause fell in and opens the
window only once a block after it agrees with those before (``_Steady.resume_after``)."""

from __future__ import annotations

import contextlib
import shutil
import time

from .profiler import move_exported_files, start_profiler, stop_profiler
from .state import _State

EARLY_FROM_STEP = 2
EARLY_MAX_S = 10.0
# How long the end of a window waits for the device to finish the steps it traced.
DRAIN_TIMEOUT_S = 60.0


class _EarlyTrace(_State):
    """The early trace's start, stop, drop and keep; the drain of the device's queue."""

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
