"""The analysed steps as a window of a run: their spread (bursts), the step at the window's
edge that lacks context, whether the steps have device work of their own, and whether the
window represents the run (from the capture sidecar)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from traceinspect.analysis.executions import StepWork
from traceinspect.analysis.result import StepSummary
from traceinspect.analysis.stalls import SKIP_FIRST
from traceinspect.analysis.steps import Steps
from traceinspect.errors import AnalysisError
from traceinspect.intervals import Intervals
from traceinspect.sidecar import HostStep, Sidecar
from traceinspect.trace import Trace

# Steps come in bursts when (p90 - p10) / mean of their times exceeds this: Grain's
# mp_prefetch hands over a batch per worker at once, then none for a while (the scenario
# family's bursty runs: 1.5-3; steady runs: 0.05-0.4). Then throughput (the mean) is what a
# step costs, and the verdict and the worker count use it.
BURSTY_SPREAD = 1.0
# Bursts are told from at least this many steps (a block of capture's steady-state rule):
# fewer, and p10 and p90 are single steps; one warm-up step in MaxText's own 5-step profile
# (15.8 ms against 436 ms) read as bursts.
BURSTY_MIN_STEPS = 8
# A trace without capture's sidecar and with fewer steps than this says nothing about
# whether its window was steady (MaxText profiles 5 steps from step 1 by default).
FEW_STEPS = 10
# Below this share of steps with their own device work found, the window holds none.
MIN_LINKED = 0.5

# The traced window is representative when its mean host step time is within this share of
# the untraced steps after it (the profiler itself slows CPU-backend steps by 5-20%).
REPRESENTATIVE = 0.25
_MIN_STEPS_AFTER = 5


def median(values: np.ndarray) -> float:
    return float(np.median(values)) if len(values) else 0.0


def typical(values: np.ndarray, bursty: bool) -> float:
    """The median of the known values, or their mean when steps come in bursts."""
    values = values[np.isfinite(values)]
    if not len(values):
        return 0.0
    return float(np.mean(values)) if bursty else float(np.median(values))


def is_bursty(p10_ms: float, p90_ms: float, mean_ms: float, count: int) -> bool:
    """Whether steps with these figures come in bursts (see BURSTY_SPREAD): then the mean,
    the throughput, is what a step costs."""
    return count >= BURSTY_MIN_STEPS and mean_ms > 0 and (p90_ms - p10_ms) / mean_ms > BURSTY_SPREAD


def step_summary(steps: Steps, wall_ms: np.ndarray) -> StepSummary:
    p10, p50, p90 = (float(np.percentile(wall_ms, q)) for q in (10, 50, 90))
    mean = float(np.mean(wall_ms))
    return StepSummary(
        count=len(steps),
        source=steps.source,
        median_ms=round(p50, 4),
        p90_ms=round(p90, 4),
        dropped=steps.dropped,
        mean_ms=round(mean, 4),
        p10_ms=round(p10, 4),
        bursty=is_bursty(p10, p90, mean, len(wall_ms)),
    )


def drop_contextless_first_step(trace: Trace, steps: Steps, busy: Intervals) -> Steps:
    """Leave out the first step of a window that ``traceinspect capture`` opened when the
    device was idle from the start of the trace until after that step began. capture starts
    the trace at a step boundary, so the end of the step before (where a blocking read would
    be) is never in the trace: what opened that idle period cannot be known, and one
    context-less step must not flip a verdict (a loop reading every step was judged
    input-bound in 1 of 3 captures for this). A trace started elsewhere usually begins
    mid-step, and the partial step already left out gives the first complete one its
    context."""
    if len(steps) < 3 or trace.sidecar is None or trace.sidecar.window is None:
        return steps
    if busy.clip(trace.start_ns, int(steps.starts[0]) + 1).total > 0:
        # Busy when the step began, or the idle period began inside the trace: either way
        # what opened it is traced.
        return steps
    return replace(
        steps,
        starts=steps.starts[1:],
        ends=steps.ends[1:],
        numbers=steps.numbers[1:],
        dropped=steps.dropped + 1,
    )


def _holds(step: HostStep, when_ns: int) -> bool:
    """Whether ``when_ns`` (Unix ns) falls inside ``step``."""
    if step.start_unix_ns is None or step.wall_ms is None:
        return False
    end_ns = step.start_unix_ns + step.wall_ms * 1e6
    return step.start_unix_ns <= when_ns < end_ns


def _untraced_walls(sidecar: Sidecar) -> list[float]:
    """The wall times (ms) of the steps run without the profiler after the window: capture's
    block once the run settled after the trace's write (``Window.untraced_after``), else,
    in a sidecar without that block, the steps after the write and after as long again
    as it took.

    The step that holds the write is never one: the profiler's stop and export hold the
    script 50-500 ms inside it (a 491 ms step among 8 ms ones put the 60 steps after a
    ``.block_until_ready()`` loop's window at 17.3 ms a step, against 8.0-8.3 timed without
    capture, and called the window unrepresentative). Nor are the steps right after it:
    the workers went on making batches during the write, and the loop takes those at the
    device's pace (13 steps after a 2-worker loop's window read 6.2 ms against its 13 ms).
    With workers that make a batch every ``p`` ms and a loop that takes stored ones every
    ``f`` ms, the batches stored in a write of ``W`` ms are gone ``W f / (p - f)`` ms after
    it: within ``W`` wherever stored batches go at least twice as fast as made ones."""
    window = sidecar.window
    last = window.last_step if window is not None else None
    if window is None or last is None:
        return []
    if window.untraced_after is not None:
        # Whole, or cut short by the script's end (its last step, whose successor never
        # began, has no wall time).
        first, end = window.untraced_after
        block = [s.wall_ms for s in sidecar.steps if first <= s.index <= end]
        return [w for w in block if w is not None]
    after = [s for s in sidecar.steps if not s.traced and s.index > last]
    stop = window.trace_stop_unix_ns
    write = next(
        (k for k, s in enumerate(after) if stop is not None and _holds(s, stop)),
        # Without the stop's time (an older sidecar): the step right after the window.
        0 if after and after[0].index == last + 1 else None,
    )
    if write is None:
        return [s.wall_ms for s in after if s.wall_ms is not None]
    held = after[write]
    if held.start_unix_ns is None or held.wall_ms is None:
        return [s.wall_ms for s in after[write + 1 :] if s.wall_ms is not None]
    resumed_ns = held.start_unix_ns + held.wall_ms * 1e6
    settled_ns = resumed_ns + held.wall_ms * 1e6
    return [
        s.wall_ms
        for s in after[write + 1 :]
        if s.wall_ms is not None and s.start_unix_ns is not None and s.start_unix_ns >= settled_ns
    ]


def window_check(sidecar: Sidecar | None) -> tuple[dict[str, Any] | None, str | None]:
    """The capture's window (why it opened there) against the untraced steps after it."""
    window = sidecar.window if sidecar is not None else None
    if sidecar is None or window is None:
        return None, None
    traced = sidecar.traced_step_walls_ms()
    completed = sidecar.traced_throughput_ms()
    last = window.last_step
    after = _untraced_walls(sidecar)
    out: dict[str, Any] = {
        "rule": window.rule,
        "reason": window.reason,
        "first_step": window.first_step,
        "last_step": last,
        "traced_mean_ms": round(float(np.mean(traced)), 4) if traced else None,
        # The device's throughput over the traced steps, where capture stamped completions.
        "traced_completed_ms": None if completed is None else round(completed[0], 4),
        "after_mean_ms": None,
        "after_steps": len(after),
        "representative": None,
    }
    notes = []
    if traced and completed is not None:
        host_ms, device_ms = float(np.mean(traced)), completed[0]
        if device_ms > 0 and abs(host_ms / device_ms - 1) > REPRESENTATIVE:
            notes.append(
                f"The host started the traced steps every {host_ms:.2f} ms, the device finished "
                f"them every {device_ms:.2f} ms: "
                + (
                    "the host ran ahead while the device's queue filled, so step times read "
                    f"from the host are not the run's; its step is {device_ms:.2f} ms"
                    if host_ms < device_ms
                    else "the device ran down steps queued before the window, faster than the "
                    f"loop feeds it; the run's pace is the host's {host_ms:.2f} ms"
                )
                + " (the slower of the two)."
            )
    # The untraced steps the window is judged against: those after it, else the steady ones
    # before it.
    reference, side = after, "after"
    if traced and len(after) < _MIN_STEPS_AFTER:
        before = _steady_walls_before(sidecar, len(traced))
        if len(before) >= _MIN_STEPS_AFTER:
            reference, side = before, "before"
            out["before_steps"] = len(before)
    if traced and len(reference) >= _MIN_STEPS_AFTER:
        t_mean, a_mean = float(np.mean(traced)), float(np.mean(reference))
        out[f"{side}_mean_ms"] = round(a_mean, 4)
        off = t_mean / a_mean - 1 if a_mean > 0 else 0.0
        out["representative"] = abs(off) <= REPRESENTATIVE
        if not out["representative"]:
            notes.append(
                f"The traced steps ran at {t_mean:.2f} ms/step, the {len(reference)} untraced "
                f"steps {side} them at {a_mean:.2f} ms/step ({off:+.0%}): the window may not "
                "represent the run (the pace changed, or the profiler slowed it); capture "
                "again, later in the run (--skip-steps) or with more steps."
            )
    return out, " ".join(notes) or None


def window_steps(sidecar: Sidecar) -> frozenset[int]:
    """The steps of the traced window (capture's ``traced`` steps)."""
    return frozenset(s.index for s in sidecar.steps if s.traced)


def profiled_steps(sidecar: Sidecar) -> frozenset[int]:
    """The steps capture ran under the profiler: the window's, and the early trace's (from
    step 2 until the run was first steady: a Flax NNX + Orbax loop's steps 49-101, slowed
    by it, hid its checkpoint every 10 steps as strays)."""
    traced = set(window_steps(sidecar))
    early: dict[str, Any] = dict(sidecar.data.get("early_trace") or {})
    first, last = early.get("first_step"), early.get("last_step")
    if isinstance(first, int) and isinstance(last, int) and last >= first:
        traced.update(range(first, last + 1))
    return frozenset(traced)


def _steady_walls_before(sidecar: Sidecar, count: int) -> list[float]:
    """Where too few steps ran after the window to compare it with (the script ended), the
    wall times (ms) of the last ``count`` steps before it that ran without the profiler (the
    first :data:`~traceinspect.analysis.stalls.SKIP_FIRST`, which compile, left out), when
    capture opened the window because those steps were steady (its ``steady`` rule), else
    none: the steps before another rule's window may still be warming up. Measured: a loop
    shaped like Grain's tutorial, 240 steps, traced 537 ms a step from step 174 with one
    step after it, where the steady rule had timed 133-142 ms a step just before."""
    window = sidecar.window
    if window is None or window.rule != "steady" or window.first_step is None:
        return []
    profiled = profiled_steps(sidecar)
    before = [
        s.wall_ms
        for s in sidecar.steps
        if SKIP_FIRST <= s.index < window.first_step
        and s.index not in profiled
        and s.wall_ms is not None
    ]
    return before[-count:]


def check_own_work(trace: Trace, steps: Steps, work: StepWork | None) -> None:
    """No verdict from a window whose steps' device work is not in the trace."""
    if work is None or work.linked >= MIN_LINKED * len(steps):
        return
    raise AnalysisError(
        f"{trace.path}: only {work.linked} of the {len(steps)} traced steps have their device "
        f"work in the trace: the host ran {work.queued} or more steps ahead of the device, "
        "which ran the window's steps after the trace stopped. Capture with traceinspect "
        "capture's default window (it waits until the run is steady), or trace more steps "
        "(--steps)."
    )
