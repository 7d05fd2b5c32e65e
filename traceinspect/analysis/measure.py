"""What the trace shows, measured once: the steps, the per-step ledger and the idle gaps.

:func:`measure` builds :class:`Measured`, which the detectors, the decision, the
counterfactual and the renderers all read: the device's busy time (``backends``), the steps
and the training thread (``steps``, ``training_thread``), each step's own device work
(``executions``), each idle instant given to one cause (``attribution``), and the per-step
ledger, whose parts sum to each step's wall time (``invariants``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from traceinspect import schema as S
from traceinspect.analysis.attribution import (
    MIN_GAP_NS,
    attach_evidence,
    attach_sync_sites,
    close_short_gaps,
    gap_table,
    sync_sites,
)
from traceinspect.analysis.executions import StepWork, step_work
from traceinspect.analysis.input_stages import InputStages, input_stages, transfer_ns_per_step
from traceinspect.analysis.result import StepSummary, Table
from traceinspect.analysis.steps import Steps, find_steps, window_start
from traceinspect.analysis.training_thread import (
    HostActivity,
    thread_events,
    training_thread_activity,
)
from traceinspect.analysis.window import (
    check_own_work,
    drop_contextless_first_step,
    step_summary,
    typical,
    window_check,
)
from traceinspect.backends.activity import DeviceActivity, device_activity
from traceinspect.errors import AnalysisError
from traceinspect.intervals import Intervals
from traceinspect.thresholds import HOST_AHEAD_NS, KNEE_TOLERANCE
from traceinspect.trace import Trace
from traceinspect.vocabulary import CAUSES


@dataclass(frozen=True, eq=False)
class Measured:
    """One host's trace, measured. ``per_step``: the ledger (one row per step: wall, busy,
    collective, input and device work, idle by cause); ``gaps``: one row per idle gap
    piece; ``input_ns``/``device_ns``: input and device work per step as a step typically
    costs (the mean when steps come in bursts, else the median); ``fractions``: each
    cause's idle time as a share of the steps' wall time; ``sync_steps``: the share of
    steps with idle time after a read; ``sync_sites``: where the reads are, most idle
    first; ``window``/``window_note``: how capture chose the window and what a reader should
    know of it (from the sidecar); ``outside``: the share of the device's work (from
    the window's opening) outside the analysed steps."""

    trace: Trace
    activity: DeviceActivity
    steps: Steps
    work: StepWork | None
    host: HostActivity
    per_step: Table
    gaps: Table
    summary: StepSummary
    input_ns: float
    device_ns: float
    stages: InputStages | None
    input_limits: bool
    by_cause_ns: dict[str, int]
    fractions: dict[str, float]
    total_wall_ns: int
    sync_steps: float
    outside: float
    sync_sites: tuple[str, ...]
    window: dict[str, Any] | None
    window_note: str | None
    #: The device's busy time as the ledger counts it (any device; gaps shorter than
    #: MIN_GAP_NS closed).
    busy: Intervals

    @property
    def step_ns(self) -> float:
        """What one step costs (ns): the mean when steps come in bursts, else the median."""
        return self.summary.typical_ms * 1e6

    @property
    def mean_step_ns(self) -> float:
        """The analysed steps' mean wall time (ns): the denominator of every share of the
        run's step time (the ledger's idle fractions, a detector's claim), whose numerators
        are sums over all the steps."""
        return self.total_wall_ns / len(self.steps) if len(self.steps) else 0.0

    @property
    def untraced_ns(self) -> float | None:
        """The run's step as capture timed it without the profiler, after the window (the
        untraced steps' mean, ns); None where it timed none."""
        after = (self.window or {}).get("after_mean_ms")
        return after * 1e6 if after else None

    @property
    def traced_slowdown(self) -> float:
        """How much slower the window's steps ran under the profiler than capture's untraced
        steps after it (their means' ratio, at least 1.0; 1.0 where it timed none)."""
        traced = (self.window or {}).get("traced_mean_ms")
        after = (self.window or {}).get("after_mean_ms")
        return max(1.0, traced / after) if traced and after else 1.0

    @property
    def idle_ns(self) -> int:
        return sum(self.by_cause_ns.values())

    @property
    def span(self) -> tuple[int, int]:
        """The analysed steps' first start and last end (ns)."""
        return int(self.steps.starts[0]), int(self.steps.ends[-1])


def measure(trace: Trace) -> Measured:
    """Everything the trace shows about its steps, or an
    :class:`~traceinspect.errors.AnalysisError` saying why it cannot be analysed."""
    activity, steps, busy = _device_and_steps(trace)
    # The device's work outside the analysed steps, of the work from the window's opening on:
    # capture's early trace holds the warm-up before the window, which is not missing.
    opened = window_start(trace)
    after = busy if opened is None else busy.clip(opened, trace.end_ns)
    inside = busy.clip(int(steps.starts[0]), int(steps.ends[-1])).total
    outside = 1 - inside / after.total if after.total else 0.0
    steps = drop_contextless_first_step(trace, steps, busy)
    work_rows = np.array(activity.work_line_rows, dtype=np.int64)
    # The steps' thread, read once for the device work it dispatched and what it did.
    thread = (
        None
        if steps.main_line_row is None
        else thread_events(trace, steps.main_line_row, steps.marker_names)
    )
    work = step_work(trace, steps, work_rows, thread)
    check_own_work(trace, steps, work)
    # While a program the host already dispatched waits to run, the device's idle time is
    # the runtime's (launch, scheduling: 5-19 ms between MaxText's steps on a loaded 2-core
    # CPU, jax 0.12), not the host's.
    waiting = Intervals.empty() if work is None else work.waiting
    host = training_thread_activity(trace, steps, thread)
    per_step = _per_step(steps, busy, activity, host, work)
    summary = step_summary(steps, per_step[S.WALL_NS] / 1e6)
    # Input work per step against device work per step decides whether a sync or the
    # pipeline is to blame for what happens after a blocking read. Per step as a step
    # typically costs: the mean when steps come in bursts (a burst's fast steps wait for
    # nothing, its slow step waits for the whole burst), else the median.
    input_ns = typical(per_step[S.INPUT_WORK_NS], summary.bursty)
    device_ns = typical(per_step[S.DEVICE_WORK_NS], False)
    stages = input_stages(
        trace.sidecar,
        input_wait_ns_per_step=input_ns,
        transfer_ns_per_step=transfer_ns_per_step(host.events, steps),
        device_ns_per_step=device_ns,
    )
    limits = input_limits(input_ns, device_ns, stages)
    gaps = gap_table(steps, busy, host, limits, device_ns, waiting)
    # Read threads of the training process that hold the GIL make the loop's untraced time
    # a wait for it (or a core), which the gaps' evidence says.
    gil = stages is not None and stages.gil_held_in_process
    attach_evidence(gaps, host, limits, trace.start_ns, gil_held=gil)
    attach_sync_sites(gaps, host)
    for c in CAUSES:
        idle = np.zeros(len(steps), dtype=np.int64)
        np.add.at(idle, gaps[S.STEP_INDEX], gaps[c])
        per_step[S.idle_cause_ns(c)] = idle
    per_step[S.IDLE_NS] = per_step[S.WALL_NS] - per_step[S.BUSY_NS]
    total_wall = int(per_step[S.WALL_NS].sum())
    by_cause: dict[str, int] = {c: int(gaps[c].sum()) for c in CAUSES}
    sync_idle = per_step[S.idle_cause_ns("sync")]
    window, window_note = window_check(trace.sidecar)
    return Measured(
        trace=trace,
        activity=activity,
        steps=steps,
        work=work,
        host=host,
        per_step=per_step,
        gaps=gaps,
        summary=summary,
        input_ns=input_ns,
        device_ns=device_ns,
        stages=stages,
        input_limits=limits,
        by_cause_ns=by_cause,
        fractions={c: by_cause[c] / total_wall if total_wall else 0.0 for c in CAUSES},
        total_wall_ns=total_wall,
        sync_steps=float((sync_idle > 0).mean()) if len(sync_idle) else 0.0,
        outside=outside,
        sync_sites=sync_sites(gaps),
        window=window,
        window_note=window_note,
        busy=busy,
    )


def input_limits(input_per_step: float, device_per_step: float, stages: InputStages | None) -> bool:
    """Is the input pipeline slower than the device, whatever the loop reads?

    Batches made on the training thread: when making one takes longer than the device's
    step by more than the knee's tolerance (within it, the host's work after a read would not
    hold the device back without the read: the family's per-step ``.item()`` with batches
    made on the training thread, 13.9 ms a step and 7.7 without the read, was read
    input-bound in one CI capture at 6.00 ms of input against 5.77 of device work, the
    stage timers' own cost inside ``next()`` among it). Batches made ahead by read threads
    or worker processes: also when the loop still waits for them after its own share
    (capture's ``prefetch`` stage: the wait in ``next()`` beyond the pipeline stages run on
    the training thread) by more than the knee's tolerance of the device's step. A loop
    that reads its loss every step gives the pipeline the whole step to make the next
    batch: if the loop still waits, the pipeline is the limit and removing the read would
    not shorten the step (2.5x slower input on one read thread, a per-step read: 22.7 ms a
    step with the read, 22.2 without, on jax 0.12)."""
    if input_per_step > device_per_step * KNEE_TOLERANCE and input_per_step > 0:
        return True
    if stages is None or device_per_step <= 0:
        return False
    waiting = stages.effective_ms["prefetch"] * 1e6
    return waiting > (KNEE_TOLERANCE - 1) * device_per_step


def _device_and_steps(trace: Trace) -> tuple[DeviceActivity, Steps, Intervals]:
    """The device's activity, the steps, and the busy time (launch gaps closed), or an
    error saying why the trace cannot be analysed."""
    activity = device_activity(trace)
    if not activity.busy or activity.union.total == 0:
        raise AnalysisError(
            f"{trace.path}: no device activity found ({activity.backend.evidence}). "
            "Capture a window where the training loop runs (traceinspect capture -- python "
            "train.py) with the device tracer on."
        )
    steps = find_steps(trace)
    if len(steps) < 2:
        found = "no steps" if len(steps) == 0 else "only one complete step"
        raise AnalysisError(
            f"{trace.path}: {found} in the trace (source: {steps.source}). Capture more "
            "steps (traceinspect capture --steps 5), or mark each step with "
            "jax.profiler.StepTraceAnnotation."
        )
    busy = close_short_gaps(activity.union, MIN_GAP_NS)
    lo, hi = int(steps.starts[0]), int(steps.ends[-1])
    if busy.clip(lo, hi).total == 0 and busy.total > 0:
        # The device's first work after the steps, though it worked before them (earlier
        # steps, done while the host waited for its buffered batches, 1 loaded run in 8).
        later = busy.starts[busy.starts >= hi]
        if later.size and later[0] <= hi + HOST_AHEAD_NS:
            raise AnalysisError(
                f"{trace.path}: the host dispatched all {len(steps)} traced steps before the "
                "device started on them, so no step shows its own device work. Capture more "
                "steps, so the window covers the steady state (on the CPU backend jax "
                "queues about 32 steps ahead)."
            )
        raise AnalysisError(
            f"{trace.path}: the device's activity and the host's steps do not overlap in time "
            f"(device {busy.starts[0]}-{busy.ends[-1]} ns, steps {lo}-{hi} ns): clock skew "
            "between host and device lines? Re-capture, or report the trace layout."
        )
    return activity, steps, busy


def _per_step(
    steps: Steps,
    busy: Intervals,
    activity: DeviceActivity,
    host: HostActivity,
    work: StepWork | None,
) -> Table:
    """One row per step: wall, busy, collective and input time, and its own device work."""
    busy_ns = busy.overlap_with(steps.starts, steps.ends)
    return {
        S.STEP: steps.numbers,
        S.START_NS: steps.starts,
        S.WALL_NS: steps.wall_ns,
        S.BUSY_NS: busy_ns,
        S.COLLECTIVE_NS: activity.collective_union.overlap_with(steps.starts, steps.ends),
        S.INPUT_WORK_NS: host.input.overlap_with(steps.starts, steps.ends),
        # The device work each step needs: from the executions it dispatched where the
        # trace links them, else the device's busy time inside the step's host window.
        S.DEVICE_WORK_NS: work.work_ns if work is not None else busy_ns,
    }
