"""The trace window: counting steps and choosing their source, the steady-state rule that
opens the window (``steady``), when it closes, and the untraced steps timed after it. The
profiler started and stopped around it, the time window and how the script's end closes it
are ``tracing.py``; the state it drives ``state.py``; the early trace ``early.py``; the report
``report.py``."""

from __future__ import annotations

import time
from typing import NoReturn

from ._base import (
    _PRIORITY,
    SOURCE_JIT,
    SOURCE_TIME,
    TIMING_TARGET,
    _StopAfter,
)
from .early import EARLY_FROM_STEP, EARLY_MAX_S
from .state import (
    _DONE,
    _MAX_STEPS_KEPT,
    _TRACING,
    _WAITING,
    DEFAULT_STEPS,
    UNTRACED_MIN_S,
    WINDOW_MIN_S,
    _Source,
    _Untraced,
)
from .steady import (
    STALL_WINDOW_PERIODS,
    STEADY_BLOCK_STEPS,
    STEADY_TREND,
    UNTRACED_RETRIES,
    _Steady,
    look_ahead_steps,
    slowed_within,
)
from .tracing import _Tracing

__all__ = ["DEFAULT_STEPS", "WINDOW_MIN_S", "_TRACING", "_Capture", "_Source"]

_MIN_WINDOW_STEPS = 5
# Steps a source must start in a row, while the chosen source starts none, to take its place
# (and more than the chosen one ever did: see _Capture._takes_over).
TAKEOVER_STEPS = STEADY_BLOCK_STEPS


class _Capture(_Tracing):
    """Counts steps, opens and closes the trace window, and writes the child's report."""

    def on_step(self, kind: str, key: str, detail: str, step_num: int | None = None) -> None:
        """Called at the start of every candidate step, on the main thread."""
        try:
            self._on_step(kind, key, detail, step_num)
        finally:
            self.write_status()

    def _cpu_now(self) -> int | None:
        """In a phase of isolate, the process's CPU clock (its threads together; a few
        microseconds a step): isolate's phases then know the CPU time of the steps they
        time, whether or not a full window opened. None in a capture."""
        return time.process_time_ns() if self.timing is not None else None

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
            src.started(now)
            if src is self.chosen and self.last_output is not None:
                key, output = self.last_output
                self.last_output = None
                self.completions.submit(index - 1, key, output)
            if self.early is None and index >= EARLY_FROM_STEP and self.phase == _WAITING:
                self._start_early(index)
            timing_after = src is self.chosen and self._timing_untraced()
            if index < _MAX_STEPS_KEPT or (
                src is self.chosen and (self.phase == _TRACING or timing_after)
            ):
                # Kept after the window too: the whole run's step times show whether the
                # traced window is representative.
                src.keep(index, now, step_num, self._cpu_now())
            if timing_after:
                self._untraced_step(index, now)
            if self.phase == _DONE and self._time_window_taken():
                self._set_time_window_aside(now)
            elif self.phase == _TRACING and self._in_time_window():
                if index < (self._jit_wait() if kind == SOURCE_JIT else EARLY_FROM_STEP):
                    # Not yet a loop (a jitted set-up function, a batch drawn once to peek):
                    # the time window goes on.
                    return
                # Steps began inside the time window (Keras' import and model build outlast
                # --delay on a loaded machine): it ends here and is set aside, as when they
                # begin after it, so the steps get a window of their own.
                self._stop_trace()
                if self._time_window_taken():
                    self._set_time_window_aside(now, "inside")
                    if self.early is None:
                        self._start_early(index)
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
                self._choose(src)
                if self.phase == _TRACING:
                    # A better step marker appeared after the window opened (possible with
                    # --skip-steps 0): count the window in its steps from here.
                    if chosen is not None and chosen.kind == SOURCE_TIME:
                        # Steps began inside the time window (a set-up about as long as
                        # --delay: a Flax loop on a loaded machine began 0.2 s into it, and
                        # its window was 5 s of the first step's compilation). Its trace,
                        # now of steps, is set aside when it closes, as when steps begin
                        # after it: the run gets a window of steady steps.
                        self.steps_in_time_window_ns = now
                    self.window_first = index
                    self._enter_step_annotation(index, step_num)
                    return
            elif src is not chosen:
                if not self._takes_over(src, chosen, index):
                    return
                self.notes.append(
                    f"steps are {src.detail}: {chosen.detail} stopped after "
                    f"{chosen.count} step(s) while these went on ({src.alone} steps)"
                )
                self._choose(src)
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
                    # Past the cap, the window's steps are kept from its first on.
                    src.keep(index, now, step_num, self._cpu_now())
                    self._enter_step_annotation(index, step_num)
            elif self.phase == _TRACING and self.window_first is not None:
                traced = index - self.window_first
                elapsed_s = (now - (self.window_open_ns or now)) / 1e9
                # At least WINDOW_MIN_S long: enough bursts of a worker pipeline, and enough
                # time for the worker probes' 50 ms counters to measure a rate.
                if self._block_done(traced, elapsed_s, self.steps, self.window_min_s):
                    self.window_end = index
                    if traced < self.steps:
                        self.notes.append(
                            f"the window closed after {traced} step(s), its time limit of "
                            f"{self.window_max_s:g} s, before the {self.steps} requested"
                        )
                    self.window_complete = True
                    self._stop_trace()
                    if self.config.get("time_after") and self.trace_files:
                        self._begin_untraced(index, traced, elapsed_s)
                    elif self.config.get("stop_after"):
                        self.stopped_by_us = True
                        raise _StopAfter()
                else:
                    self._enter_step_annotation(index, step_num)

    def _begin_untraced(self, index: int, traced: int, traced_s: float) -> None:
        """Time the steps on without the profiler (config ``time_after``): see ``_Untraced``."""
        workers = self._grain_setting("mp_prefetch", "num_workers") or 0
        steady = _Steady(max(STEADY_BLOCK_STEPS, 2 * int(workers)), trend_above=1.0)
        # Step ``index`` holds the write: blocks begin after it.
        steady.resume_after(index)
        self.untraced = _Untraced(
            resumed_ns=time.time_ns(),
            min_steps=max(traced, _MIN_WINDOW_STEPS),
            # An explicit --steps N (no minimum window time) times N steps after it too.
            min_s=max(traced_s, UNTRACED_MIN_S if self.window_min_s > 0 else 0.0),
            steady=steady,
        )

    def _block_done(self, steps: int, elapsed_s: float, min_steps: int, min_s: float) -> bool:
        """Whether a timed block (the window, or the untraced steps after it) is complete:
        ``min_steps`` steps and ``min_s`` seconds, or ``window_max_s`` and at least
        ``_MIN_WINDOW_STEPS`` steps."""
        if elapsed_s >= self.window_max_s and steps >= _MIN_WINDOW_STEPS:
            return True
        return steps >= min_steps and elapsed_s >= min_s

    def _timing_untraced(self) -> bool:
        u = self.untraced
        return u is not None and u.last is None

    def _untraced_step(self, index: int, now: int) -> None:
        """At a step's start after the window: settle, then time; stop the script once the
        block is complete when ``stop_after`` asks it."""
        u = self.untraced
        assert u is not None
        if u.first is None:
            u.steady.step(index, now)
            waited_s = (now - u.resumed_ns) / 1e9
            if u.steady.is_steady() or waited_s >= self.max_wait_s:
                u.first, u.starts_ns = index, [now]
            return
        u.starts_ns.append(now)
        timed = index - u.first
        # A recurring stall (a checkpoint every N steps): whole periods, each holding as many
        # stalls as the next.
        period = u.steady.period
        if u.block_steps is None:
            elapsed_s = (now - u.starts_ns[0]) / 1e9
            whole = period is None or timed % period == 0
            if self._block_done(timed, elapsed_s, u.min_steps, u.min_s) and whole:
                u.block_steps = timed  # then its look-ahead (steady.UNTRACED_PARTS)
            return
        if timed < u.block_steps + look_ahead_steps(u.block_steps, period):
            return
        slowed = slowed_within(u.starts_ns, u.block_steps, period)
        waited_s = (now - u.resumed_ns) / 1e9
        if slowed and u.retries < UNTRACED_RETRIES and waited_s < self.max_wait_s:
            # Still running down the batches stored during the write: time it again.
            u.retries += 1
            parts = ", ".join(f"{m:.1f}" for m in slowed)
            self.notes.append(
                f"the untraced steps {u.first}-{index - 1} after the window slowed as they "
                f"ran ({parts} ms a step, in order, the last {index - u.first - u.block_steps} "
                f"steps after the block): timed again from step {index}"
            )
            u.first, u.starts_ns, u.block_steps = index, [now], None
            return
        u.last = index - 1
        if self.config.get("stop_after"):
            self.stopped_by_us = True
            raise _StopAfter()

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

    def _takes_over(self, src: _Source, chosen: _Source, index: int) -> bool:
        """Whether ``src``, a source not chosen, replaces the chosen one: before the window,
        once ``src`` has started more steps in a row since the chosen source's last step
        than the chosen one ever did, and at least TAKEOVER_STEPS (a block of the steady
        rule). The chosen source stopped while this one goes on: the loop draws from
        another iterator (Keras' ``fit`` draws two batches from a first one to learn their
        shapes, then trains from another) or calls another function. A source that pauses
        a while (an evaluation) does not take over from one that ran longer before it."""
        alone = src.step_alone(chosen)
        return (
            self.phase == _WAITING
            and chosen.kind != SOURCE_TIME
            and alone >= TAKEOVER_STEPS
            and alone > chosen.count
            and (src.kind != SOURCE_JIT or index >= self._jit_wait())
        )

    def _choose(self, src: _Source) -> None:
        """Follow ``src`` from now on: the steady rule starts again on its steps (those kept
        so far, then each as it starts), the completion stamps of the last source's steps
        are dropped, and the early trace's steps are counted in ``src``'s steps."""
        if self.chosen is not None and self.chosen is not src:
            self.completions.forget()
        self.chosen = src
        self.steady = None
        if self.early in ("tracing", "stopped") and self.early_start_ns is not None:
            self.early_first = src.first_at_or_after(self.early_start_ns)
            self.early_last = None
            if self.early == "stopped" and self.early_stop_ns is not None:
                # The trace stopped inside this step: the one before is its last whole one.
                paused = src.running_at(self.early_stop_ns)
                if paused is not None and self.early_first is not None:
                    self.early_last = paused - 1 if paused > self.early_first else None
                if self.early_last is None:
                    self.early_first = None

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
            # isolate's phases take any order of block means for a settling run, as before
            # (see _Steady.trend_above).
            self.steady = _Steady(
                max(STEADY_BLOCK_STEPS, 2 * int(workers)),
                trend_above=1.0 if self.timing is not None else STEADY_TREND,
            )
            if self.early_stop_ns is not None:
                # The early trace's stop paused the script inside this step of the source:
                # the rule drops its block (as _stop_early does for a rule already made).
                paused = src.running_at(self.early_stop_ns)
                if paused is not None:
                    self.steady.resume_after(paused)
            # The steps the source saw before it was chosen (those kept), then each as it
            # starts: the rule sees every step, kept or not.
            self.steady.add(src.starts_ns, index)
        steady = self.steady
        steady.step(index, now)
        if steady.is_steady():
            self.window_rule = "steady"
            self.window_reason = steady.reason(index)
            if steady.period is not None and self.config.get("steps") is None:
                # The default window holds two of the recurring stalls, so that the trace
                # shows what they are (bounded by --window-max like any window).
                self.steps = max(self.steps, STALL_WINDOW_PERIODS * steady.period)
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
            return True
        return False
