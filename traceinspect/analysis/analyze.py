"""Why was the device idle? The analysis of one host's trace, step by step.

:func:`analyze` puts the pieces together: the device's busy time (``backends``), the steps
and the training thread (``steps``, ``host``), each step's own device work
(``executions``), the window's edges and bursts (``window``), each idle instant given to
one cause (``attribution``), the verdict (here), and what to do (``advice``, ``workers``).

The verdict: the known cause with the largest share of step time if it reaches
:data:`~traceinspect.vocabulary.MATTERS` (XProf's bands), else ``device-bound``; ``unknown``
when unexplained idle time outweighs every known cause. Sync-bound means a read every step.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from traceinspect import schema as S
from traceinspect.analysis import invariants
from traceinspect.analysis.advice import recommendations, summary_text
from traceinspect.analysis.attribution import (
    MIN_GAP_NS,
    attach_evidence,
    attach_sync_sites,
    close_short_gaps,
    gap_table,
    sync_sites,
)
from traceinspect.analysis.callbacks import Callbacks, host_callbacks
from traceinspect.analysis.executions import StepWork, step_work
from traceinspect.analysis.findings import count_dispatches, findings
from traceinspect.analysis.input_stages import (
    PIPELINE_STAGES,
    InputStages,
    input_stages,
    stage_advice,
    transfer_ns_per_step,
)
from traceinspect.analysis.loop_cpu import LoopCpu, loop_cpu
from traceinspect.analysis.reads import ReadsBehind, reads_behind
from traceinspect.analysis.result import (
    INPUT_STAGE,
    Analysis,
    Recommendation,
    StepSummary,
    Table,
    Timeline,
)
from traceinspect.analysis.stalls import RecurringStall, StallNature, recurring_stall, stall_nature
from traceinspect.analysis.steps import Steps, find_steps, window_start
from traceinspect.analysis.training_thread import (
    HostActivity,
    thread_events,
    training_thread_activity,
)
from traceinspect.analysis.window import (
    FEW_STEPS,
    check_own_work,
    drop_contextless_first_step,
    median,
    step_summary,
    typical,
    window_check,
)
from traceinspect.analysis.workers import (
    WAITING_SHARE,
    WorkerMeasurement,
    recommend_workers,
    worker_inputs,
)
from traceinspect.backends.activity import DeviceActivity, device_activity
from traceinspect.errors import AnalysisError
from traceinspect.intervals import Intervals
from traceinspect.sidecar import Sidecar
from traceinspect.trace import Trace
from traceinspect.vocabulary import (
    CAUSES,
    DOMINATES,
    KNEE_TOLERANCE,
    MATTERS,
    PRECEDENCE,
    VERDICTS,
)

log = logging.getLogger(__name__)

# Sync-bound means the loop reads a device value every step. A read every N steps (logging
# every N steps, as MaxText recommends) idles the device once per N steps: a cost worth a
# note, not the verdict (scenario family: reading every 10th step costs no measurable time,
# sample_traces/scenarios/family/MEASUREMENTS.md). The sync is the verdict only when its idle
# time recurs in at least this share of the steps.
SYNC_RECURS = 0.5

__all__ = ["Analysis", "StepSummary", "analyze"]


def analyze(trace: Trace) -> Analysis:
    """Find every idle gap of the device within complete steps and name its cause.

    Raises :class:`~traceinspect.errors.AnalysisError` when the trace shows no device
    activity or no steps, or when its steps have no device work of their own, saying what
    was found and what to capture instead.
    """
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
    summary_of_steps = step_summary(steps, per_step[S.WALL_NS] / 1e6)
    # Input work per step against device work per step decides whether a sync or the
    # pipeline is to blame for what happens after a blocking read. Per step as a step
    # typically costs: the mean when steps come in bursts (a burst's fast steps wait for
    # nothing, its slow step waits for the whole burst), else the median.
    input_per_step = typical(per_step[S.INPUT_WORK_NS], summary_of_steps.bursty)
    device_per_step = typical(per_step[S.DEVICE_WORK_NS], False)
    stages = input_stages(
        trace.sidecar,
        input_wait_ns_per_step=input_per_step,
        transfer_ns_per_step=transfer_ns_per_step(host.events, steps),
        device_ns_per_step=device_per_step,
    )
    input_bound = _input_limits(input_per_step, device_per_step, stages)
    gaps = gap_table(steps, busy, host, input_bound, device_per_step, waiting)
    attach_evidence(gaps, host, input_bound, trace.start_ns)
    attach_sync_sites(gaps, host)
    for c in CAUSES:
        idle = np.zeros(len(steps), dtype=np.int64)
        np.add.at(idle, gaps[S.STEP_INDEX], gaps[c])
        per_step[S.idle_cause_ns(c)] = idle
    per_step[S.IDLE_NS] = per_step[S.WALL_NS] - per_step[S.BUSY_NS]

    total_wall = int(per_step[S.WALL_NS].sum())
    by_cause = {c: int(gaps[c].sum()) for c in CAUSES}
    idle_total = sum(by_cause.values())
    fractions: dict[str, float] = {
        c: by_cause[c] / total_wall if total_wall else 0.0 for c in CAUSES
    }
    verdict = _verdict(fractions, per_step)
    sites = sync_sites(gaps)
    stall, nature = _recurring_stall(trace, steps, gaps, host)
    if stall is not None and nature is not None:
        verdict = _stall_verdict(verdict, fractions, stall, nature)
    callbacks = host_callbacks(trace, steps, activity)
    step_ns = summary_of_steps.typical_ms * 1e6
    callback_share = callbacks.ms_per_step * 1e6 / step_ns if len(callbacks) and step_ns else 0.0
    if callback_share >= MATTERS and verdict.top != "stall":
        verdict = _callback_verdict(verdict, fractions, callback_share)
    competing = (
        loop_cpu(
            host.loop_code,
            (int(steps.starts[0]), int(steps.ends[-1])),
            len(steps),
            trace.sidecar.host.cores if trace.sidecar and trace.sidecar.host else None,
        )
        if activity.backend.kind == "cpu" and len(steps)
        else None
    )
    competing_share = competing.cost_ms_per_step * 1e6 / step_ns if competing and step_ns else 0.0
    # An inferred cost (the loop's CPU over the cores), not idle time the trace shows: it
    # decides the verdict only where it dominates (a Flax NNX loop's own 1.3-1.7 ms of Python
    # a step came out at 5-6% and flipped its verdict from one capture to the next; the
    # family's 10 ms of CPU a step, 35%).
    if (
        verdict.verdict in ("device-bound", "host-bound")
        and verdict.top not in ("stall", "callback")
        and competing_share >= DOMINATES
        and competing_share > _largest_but_host(fractions)
    ):
        # The device reads busy (or idles less than the host's work lasts) because the
        # loop's CPU work stretches the program beside it.
        verdict = _Verdict("host-bound", "loop_cpu", verdict.occasional_sync, verdict.sync_steps)
    paces = _pipeline_paces(stages, summary_of_steps.typical_ms)
    if (
        paces is not None
        and verdict.verdict in ("device-bound", "host-bound")
        and verdict.top not in ("stall", "callback", "loop_cpu")
    ):
        verdict = _Verdict(
            "input-bound", "pipeline_cpu", verdict.occasional_sync, verdict.sync_steps
        )
    window_info, window_note = window_check(trace.sidecar)
    behind = None if work is None else reads_behind(host.sync_events, work, steps)
    notes = _notes(trace, verdict, fractions, summary_of_steps, work, outside, steps, window_note)
    notes += _runtime_notes(behind, fractions, summary_of_steps.typical_ms)
    if competing is not None and verdict.top != "loop_cpu" and competing_share >= MATTERS:
        at = f" at {competing.site}" if competing.site else ""
        notes.append(
            f"The loop's own CPU work{at} ({competing.cpu_ms_per_step:.2f} ms a step) competes "
            f"with XLA's CPU backend for the {competing.cores} core(s): about "
            f"{competing.cost_ms_per_step:.2f} ms of each step ({competing_share:.0%}), an "
            "estimate that decides the verdict only from 20%."
        )
    # The run's step: over the whole run when a stall recurs (the window's median is a step
    # of the burst after one).
    run_step_ms = stall.mean_ns / 1e6 if stall is not None else summary_of_steps.typical_ms
    advice = _advice(
        trace.sidecar, verdict, fractions, sites, run_step_ms, input_per_step,
        device_per_step, stages,
        _read_floor_ns(per_step) if _reads_every_step(host, steps) else None,
    )  # fmt: skip
    if verdict.top == "callback" or callback_share >= MATTERS:
        # The callback's own advice replaces the generic word on the host's work.
        rest = tuple(r for r in advice if r.kind not in ("reduce_host_overhead", "device_bound"))
        expected = _callback_expected_ns(callbacks, step_ns, device_per_step, input_per_step)
        advice = (_callback_advice(callbacks, step_ns, expected), *rest)
    if verdict.top == "loop_cpu" and competing is not None:
        rest = tuple(r for r in advice if r.kind not in ("reduce_host_overhead", "device_bound"))
        advice = (_loop_cpu_advice(competing, device_per_step, input_per_step), *rest)
    if verdict.top == "pipeline_cpu":
        # The host's time is the pipeline's doing: the worker count (first) and the stage.
        advice = tuple(r for r in advice if r.kind not in ("reduce_host_overhead", "device_bound"))
    if stall is not None and nature is not None:
        own = _stall_advice(stall, nature, device_per_step)
        advice = with_stall_advice(advice, own, is_verdict=verdict.top == "stall")
    elif (
        host.loop_code is not None
        and fractions["host"] >= MATTERS
        and verdict.top not in ("loop_cpu", "pipeline_cpu")
    ):
        step_ns = summary_of_steps.typical_ms * 1e6
        advice = tuple(
            _loop_code_advice(r, host, steps, gaps, step_ns, device_per_step)
            if r.kind == "reduce_host_overhead"
            else r
            for r in advice
        )
    grain = trace.sidecar.grain if trace.sidecar is not None else None
    checks = findings(
        verdict=verdict.verdict,
        fractions=fractions,
        recommendations=advice,
        sidecar=trace.sidecar,
        measured=WorkerMeasurement.from_sidecar(grain.measured if grain else None),
        step_ms=summary_of_steps.typical_ms,
        dispatches=count_dispatches(host.events, steps, int(np.nansum(per_step[S.DEVICE_WORK_NS]))),
        steps_one_call_each=steps.one_call_each,
    )
    analysis = Analysis(
        path=str(trace.path),
        backend=activity.backend.kind,
        devices=tuple(activity.busy),
        steps=summary_of_steps,
        busy_fraction=(total_wall - idle_total) / total_wall if total_wall else 0.0,
        idle_fraction=idle_total / total_wall if total_wall else 0.0,
        idle_by_cause_ms={c: round(by_cause[c] / 1e6, 4) for c in CAUSES},
        cause_fractions={c: round(fractions[c], 4) for c in CAUSES},
        verdict=verdict.verdict,
        summary=(
            _stall_summary(stall, nature)
            if verdict.top == "stall" and stall is not None and nature is not None
            else _callback_summary(callbacks, step_ns)
            if verdict.top == "callback"
            else _loop_cpu_summary(competing, step_ns)
            if verdict.top == "loop_cpu" and competing is not None
            else _pipeline_cpu_summary(paces, stages, fractions, input_per_step, step_ns)
            if verdict.top == "pipeline_cpu" and paces is not None and stages is not None
            else summary_text(
                verdict.verdict, verdict.top, fractions, input_per_step, device_per_step
            )
        ),
        input_ms_per_step=round(input_per_step / 1e6, 4),
        device_busy_ms_per_step=round(device_per_step / 1e6, 4),
        sync_sites=sites,
        recommendations=advice,
        per_step_columns=per_step,
        gap_columns=gaps,
        notes=tuple(notes),
        collective_ms_per_step=round(median(per_step[S.COLLECTIVE_NS]) / 1e6, 4),
        window=window_info,
        input_stages=stages,
        findings=checks,
        first_batches=grain.first_batches if grain is not None else (),
        recurring_stall=(
            None
            if stall is None or nature is None
            else {**stall.to_dict(), "what": nature.kind, "in_window": nature.in_window}
        ),
        timeline=Timeline(
            busy=activity.busy,
            thread=Intervals.claim_in_order([(c, getattr(host, c)) for c in PRECEDENCE]),
            training_line_row=host.main_line_row,
            device_lines=activity.work_line_rows,
            origin_ns=trace.start_ns,
        ),
    )
    if invariants.enabled():
        invariants.check_invariants(analysis)
    return analysis


def _advice(
    sidecar: Sidecar | None,
    verdict: _Verdict,
    fractions: dict[str, float],
    sites: tuple[str, ...],
    step_ms: float,
    input_per_step: float,
    device_per_step: float,
    stages: InputStages | None,
    read_floor_ns: float | None = None,
) -> tuple[Recommendation, ...]:
    """What to do, in order: the worker count first when input is the problem, after
    "remove the sync" otherwise; the input stage to fix last. ``read_floor_ns``: where the
    loop reads a device value every step, the step it runs at with its input free
    (``_read_floor_ns``): the worker count is sized to that pace, and its expected step
    never goes below it."""
    advice = recommendations(
        verdict.verdict, fractions, sites, input_per_step, device_per_step, verdict.occasional_sync
    )
    # The worker count where input matters, or where idle workers are to be let go: "keep 2
    # workers, expected step time 2.78 ms" said of a loop held back by its own checkpoints
    # tells the user nothing true.
    input_matters = (
        verdict.verdict in ("input-bound", "sync-bound") or fractions["input"] >= MATTERS
    )
    # The pipeline's stages in the training process (no workers): their CPU measurements.
    in_process = stages if stages is not None and not stages.workers else None
    if (sidecar is not None and sidecar.grain is not None) or input_per_step > 0:
        workers = recommend_workers(
            worker_inputs(
                verdict.verdict,
                step_ms=step_ms,
                device_busy_ms=device_per_step / 1e6,
                input_wait_ms=input_per_step / 1e6,
                sidecar=sidecar,
                stage_batch_ms=_stage_batch_ms(stages),
                stage_cpu_share=in_process.threads_cpu_share if in_process else None,
                host_cpu_ms_per_step=in_process.host_cpu_ms_per_step if in_process else None,
            ),
            input_limits=input_matters,
            read_floor_ms=(
                read_floor_ns / 1e6
                # A sync-bound run's worker advice already says the read then limits.
                if read_floor_ns is not None and verdict.verdict != "sync-bound"
                else None
            ),
        )
        # Where input does not hold the step back, only fewer workers are worth a word.
        fewer = workers.value is not None and workers.value < (workers.current or 0)
        if not input_matters and not fewer:
            return advice
        first = verdict.verdict == "input-bound"
        advice = (workers, *advice) if first else (*advice, workers)
    if stages is not None and verdict.verdict == "input-bound":
        advice = (*advice, Recommendation(INPUT_STAGE, stage_advice(stages), stage=stages.dominant))
    return advice


def _stage_batch_ms(stages: InputStages | None) -> float | None:
    """What the worker rule sizes from the stage timers: the workers' thread time per batch
    where workers make the batches, else the stages' time per batch over the training
    process's read threads (those that ran on them)."""
    if stages is None:
        return None
    if stages.workers:
        return stages.worker_batch_ms
    threads = [s for s in PIPELINE_STAGES if stages.where[s] == "threads"]
    return sum(stages.effective_ms[s] for s in threads) if threads else None


# The low tail of a read-every-step loop's serial part (its step less its wait for input),
# which stands for the step it runs at with its input free. Measured on the scenario family's
# starved loops (one waiting worker, 40 ms a batch, under a per-step read), against the loop
# run with enough workers: on a GPU (H200) the median read 10.7 ms and the 10th percentile
# 10.3-10.5 against 9.96-10.1 timed; on the 2-core CPU machine the median read 0-40% high
# (13.3-14.4 against 10.1-10.3: the steps' serial part swells with the starved pipeline's
# and the machine's noise, 9.4-16.4 ms within one capture) and the 10th percentile within
# 12% (6 of 6 captures).
READ_FLOOR_QUANTILE = 0.1


def _read_floor_ns(per_step: Table) -> float:
    """The step a loop that reads a device value every step runs at with its input free
    (ns): its read, its own work and the device's then run one after another, as they do
    now between its waits for input. The low tail (``READ_FLOOR_QUANTILE``) of the steps'
    time less that wait, never below the device's work at the same quantile.

    Steps without device work of their own are left out (all are taken when none has
    any): a window's first step can be a sliver of host time before the device's first
    work (both kept GPU captures of the family hold one, 0.87 and 0.49 ms), which in a
    window of under ~10 steps would set the low tail by itself."""
    wall = np.asarray(per_step[S.WALL_NS], dtype=float)
    rest = wall - np.asarray(per_step[S.INPUT_WORK_NS], dtype=float)
    device = np.asarray(per_step[S.DEVICE_WORK_NS], dtype=float)
    worked = np.isfinite(device) & (device > 0)
    if worked.any():
        rest, device = rest[worked], device[worked]
    rest, device = rest[np.isfinite(rest)], device[np.isfinite(device)]
    floors = [float(np.quantile(v, READ_FLOOR_QUANTILE)) for v in (rest, device) if len(v)]
    return max(floors, default=0.0)


def _reads_every_step(host: HostActivity, steps: Steps, share: float = 0.9) -> bool:
    """Whether the loop blocks on a read of a device value in (nearly) every step."""
    reads = host.sync_events
    if len(steps) == 0 or len(reads.starts) == 0:
        return False
    k = np.searchsorted(steps.starts, reads.starts, side="right") - 1
    inside = (k >= 0) & (reads.starts < steps.ends[np.maximum(k, 0)])
    return len(np.unique(k[inside])) >= share * len(steps)


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
        if hi <= busy.starts[0] <= hi + 1_000_000_000:
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


@dataclass(frozen=True)
class _Verdict:
    verdict: str
    top: str  # the cause it names ("unknown" for unexplained idle time)
    occasional_sync: bool  # sync idle time that matters but recurs in few steps
    sync_steps: float  # share of steps with sync idle time


def _verdict(fractions: dict[str, float], per_step: Table) -> _Verdict:
    known = {c: fractions[c] for c in VERDICTS}
    sync_idle = per_step[S.idle_cause_ns("sync")]
    sync_steps = float((sync_idle > 0).mean()) if len(sync_idle) else 0.0
    occasional_sync = fractions["sync"] >= MATTERS and sync_steps < SYNC_RECURS
    if occasional_sync:
        known["sync"] = 0.0
    top = max(known, key=lambda c: known[c])
    verdict = VERDICTS[top] if known[top] >= MATTERS else "device-bound"
    if fractions["unknown"] >= MATTERS and fractions["unknown"] > known[top]:
        # Idle time that nothing on the host explains: say so rather than pick a cause.
        top, verdict = "unknown", "unknown"
    log.info(
        "verdict %s: idle time as a share of step time: %s; the known cause (%s) with the "
        "largest share names the verdict from %.0f%% on (else device-bound), unless "
        "unexplained idle time is larger; sync idle time recurs in %.0f%% of the steps%s",
        verdict,
        ", ".join(f"{c} {fractions[c]:.1%}" for c in fractions),
        ", ".join(VERDICTS),
        MATTERS * 100,
        sync_steps * 100,
        " (too few to name the verdict: an occasional read)" if occasional_sync else "",
    )
    return _Verdict(verdict, top, occasional_sync, sync_steps)


def _input_limits(
    input_per_step: float, device_per_step: float, stages: InputStages | None
) -> bool:
    """Is the input pipeline slower than the device, whatever the loop reads?

    Batches made on the training thread: when making one takes longer than the device's
    step. Batches made ahead by read threads or worker processes: also when the loop still
    waits for them after its own share (capture's ``prefetch`` stage: the wait in ``next()``
    beyond the pipeline stages run on the training thread) by more than the knee's tolerance
    of the device's step. A loop that reads its loss every step gives the pipeline the whole
    step to make the next batch: if the loop still waits, the pipeline is the limit and
    removing the read would not shorten the step (2.5x slower input on one read thread, a
    per-step read: 22.7 ms a step with the read, 22.2 without, on jax 0.12)."""
    if input_per_step > device_per_step and input_per_step > 0:
        return True
    if stages is None or device_per_step <= 0:
        return False
    waiting = stages.effective_ms["prefetch"] * 1e6
    return waiting > (KNEE_TOLERANCE - 1) * device_per_step


def _callback_verdict(verdict: _Verdict, fractions: dict[str, float], share: float) -> _Verdict:
    """Host callbacks inside the jitted step that take more of the step than any cause of idle
    time (other than the host's, which on a GPU is where their idle time goes) make the run
    host-bound: on the CPU backend the device even reads busy meanwhile."""
    if share <= _largest_but_host(fractions):
        return verdict
    return _Verdict("host-bound", "callback", verdict.occasional_sync, verdict.sync_steps)


def _largest_but_host(fractions: dict[str, float]) -> float:
    """The largest share of step time of a cause other than the host's (where a callback's
    or a stall's own idle time goes), which a run-level cause must beat to be the verdict."""
    return max(fractions[c] for c in VERDICTS if c != "host")


def _callback_what(callbacks: Callbacks) -> str:
    api = callbacks.apis[0] if callbacks.apis else "a host callback"
    named = [f for f in callbacks.functions if f]
    function = f" to {named[0]}" if named else ""
    return f"{api}{function} ({callbacks.names[0]})"


def _callback_summary(callbacks: Callbacks, step_ns: float) -> str:
    return (
        f"A host callback inside the jitted step, {_callback_what(callbacks)}, runs "
        f"{callbacks.ms_per_step:.2f} ms of each {step_ns / 1e6:.2f} ms step "
        f"({callbacks.ms_per_step * 1e6 / step_ns:.0%}): the step cannot end, nor the next be "
        "prepared, until the host returns from it."
    )


def _callback_expected_ns(
    callbacks: Callbacks, step_ns: float, device_per_step: float, input_per_step: float
) -> float:
    """The step without the callback: where the device idled all along the callback (a
    GPU), the device's work per step (the rest of that idle period was the callback's too:
    the host prepared the next step only after it); else the step less the callback's time.
    Never below the device's work, nor the input's."""
    alone = callbacks.alone_ms_per_step / max(callbacks.ms_per_step, 1e-9)
    without = device_per_step if alone >= 0.9 else step_ns - callbacks.ms_per_step * 1e6
    return max(without, device_per_step, input_per_step)


def _callback_advice(callbacks: Callbacks, step_ns: float, expected_ns: float) -> Recommendation:
    return Recommendation(
        "host_callback",
        f"A host callback inside the jitted step, {_callback_what(callbacks)}, holds each step "
        f"{callbacks.ms_per_step:.2f} ms of {step_ns / 1e6:.2f}: return the values from the "
        "step and log them from the loop (a step behind, or every N steps), or make the "
        "callback return at once (hand the values to a queue a thread of yours drains); "
        "ordered=False is no fix (it is the default); expected step time "
        f"{expected_ns / 1e6:.2f} ms.",
        where=callbacks.names[:3] or None,
        expected_step_ms=round(expected_ns / 1e6, 4),
    )


# The verdict a recurring stall gives the run, by what it is (evaluation is device work).
_STALL_VERDICT = {
    "checkpoint": "host-bound",
    "host": "host-bound",
    "sync": "host-bound",
    "unseen": "host-bound",
    "input": "input-bound",
    "compile": "compile-bound",
    "evaluation": "device-bound",
}


def _recurring_stall(
    trace: Trace, steps: Steps, gaps: Table, host: HostActivity
) -> tuple[RecurringStall | None, StallNature | None]:
    """The stall recurring over the whole run (capture's sidecar), when it costs a share of
    the run's step time that matters, and what its occurrences in the window show."""
    sidecar = trace.sidecar
    if sidecar is None:
        return None, None
    stall = recurring_stall(sidecar.steps)
    if stall is None or stall.share < MATTERS:
        return None, None
    base = trace.metadata.get("profile_start_time")
    nature = stall_nature(
        stall, sidecar.steps, base if isinstance(base, int) else None, steps, gaps, host
    )
    return stall, nature


def _stall_verdict(
    verdict: _Verdict, fractions: dict[str, float], stall: RecurringStall, nature: StallNature
) -> _Verdict:
    """The run is judged by its stall when the stall costs more of the run's step time than
    any cause does inside the window (a 20-step window may hold one occurrence or none)."""
    if stall.share <= _largest_but_host(fractions):
        return verdict
    return _Verdict(_STALL_VERDICT[nature.kind], "stall", False, verdict.sync_steps)


def _stall_summary(stall: RecurringStall, nature: StallNature) -> str:
    return (
        f"Every {stall.period} steps the loop stalls {stall.cost_ns / 1e6:,.0f} ms "
        f"({nature.what()}): {stall.per_step_ns / 1e6:.2f} ms per step over the run, "
        f"{stall.share:.0%} of its step time ({len(stall.indices)} stalls in "
        f"{stall.period * len(stall.indices)} steps seen)."
    )


def _pipeline_paces(stages: InputStages | None, step_ms: float) -> float | None:
    """The batch time (ms) of a pipeline on the training process's read threads that paces
    the loop though the loop hardly waits in ``next()``, else None.

    Such a pipeline makes a batch no faster than the loop takes a step (within the knee's
    tolerance: it runs flat out) and spends most of its time on a CPU (its read threads'
    share at least WAITING_SHARE): its work then competes with the training thread for the
    GIL and the cores, and what the loop loses shows as slow dispatch and transfers (host
    time; on XLA's CPU backend, a slower program) more than as waiting for a batch. The
    family's records that burn 3 ms of CPU each on one read thread: 25.4 ms a step at 0
    workers, 19.5 at 2 (the sweep's knee), while default captures read the loop host-bound
    with the wait in next() at 7 ms a step. A pipeline that waits on storage leaves the GIL
    and the cores free, and one with time to spare does not pace the loop."""
    if stages is None or stages.workers or step_ms <= 0:
        return None
    share = stages.threads_cpu_share
    if share is None or share < WAITING_SHARE:
        return None
    batch_ms = _stage_batch_ms(stages)
    return batch_ms if batch_ms is not None and batch_ms * KNEE_TOLERANCE >= step_ms else None


def _pipeline_cpu_summary(
    batch_ms: float,
    stages: InputStages,
    fractions: dict[str, float],
    input_per_step: float,
    step_ns: float,
) -> str:
    share = stages.threads_cpu_share or 0.0
    return (
        f"The input pipeline on the training process's read thread(s) makes a batch every "
        f"{batch_ms:.2f} ms against a {step_ns / 1e6:.2f} ms step, on a CPU {share:.0%} of "
        "its time: it runs flat out and paces the loop. Its work competes with the training "
        "thread for the GIL and the cores, so the loop's loss shows as slow dispatch and "
        f"transfers (host time, {fractions['host']:.0%} of the step) more than as waiting in "
        f"next() ({input_per_step / 1e6:.2f} ms a step)."
    )


def _loop_cpu_summary(competing: LoopCpu, step_ns: float) -> str:
    at = f" at {competing.site}" if competing.site else ""
    return (
        f"The loop's own CPU work{at}, {competing.cpu_ms_per_step:.2f} ms a step on the training "
        f"thread, competes with XLA's CPU backend for the {competing.cores} core(s): the "
        f"program runs about {competing.cost_ms_per_step:.2f} ms longer a step beside it "
        f"({competing.cost_ms_per_step * 1e6 / step_ns:.0%} of the {step_ns / 1e6:.2f} ms "
        "step): the device's work it shows is stretched by the host's."
    )


def _loop_cpu_advice(
    competing: LoopCpu, device_per_step: float, input_per_step: float
) -> Recommendation:
    """Move the loop's CPU work off the cores the program needs; the step expected without
    it: the device's work less what it cost the program, never below the input's."""
    expected = max(device_per_step / 1e6 - competing.cost_ms_per_step, input_per_step / 1e6)
    at = f" at {competing.site}" if competing.site else ""
    return Recommendation(
        "reduce_host_overhead",
        f"The loop's own CPU work{at} ({competing.cpu_ms_per_step:.2f} ms a step, "
        f"{competing.own_cpu_share:.0%} of its own code's time on CPU) takes a core from the "
        "program on this CPU backend: do it less often, cheaper, or outside the training loop "
        "(on an accelerator it would overlap the device's step); expected step time "
        f"{expected:.2f} ms.",
        where=(competing.site,) if competing.site else None,
        expected_step_ms=round(expected, 4),
    )


def _loop_code_advice(
    rec: Recommendation,
    host: HostActivity,
    steps: Steps,
    gaps: Table,
    step_ns: float,
    device_per_step: float,
) -> Recommendation:
    """The host's-work advice, naming the loop's own code when most of the host's idle time
    is spent there (where it sits in the step, what the stack sampler saw), with the step
    expected without it (never below the device's work per step)."""
    assert host.loop_code is not None
    lo, hi = int(steps.starts[0]), int(steps.ends[-1])
    found = host.loop_code.described(lo, hi)
    idle_host = int(gaps["host"].sum())
    # Of the device's idle time given to the host, the part in the loop's own code.
    own_idle = int(host.loop_code.spans.overlap_with(gaps[S.START_NS], gaps[S.END_NS]).sum())
    if found is None or own_idle < idle_host / 2:
        return rec
    total, where, sites = found
    per_step = total / len(steps)
    expected = max(device_per_step, step_ns - per_step) / 1e6
    what = f"at {sites[0][0]} " if sites else ""
    return Recommendation(
        rec.kind,
        f"The loop's own code {what}({where}, {per_step / 1e6:.2f} ms a step on the "
        f"training thread, with nothing traced) leaves the device idle "
        f"{idle_host / max(1, int(steps.wall_ns.sum())):.0%} of step time: move that work off "
        "the training thread (a background thread or queue), do it less often, or overlap it "
        f"with the device's step (after dispatching it); expected step time {expected:.2f} ms.",
        where=tuple(site for site, _ in sites[:3]) or None,
        expected_step_ms=round(expected, 4),
    )


def with_stall_advice(
    advice: tuple[Recommendation, ...], own: Recommendation, *, is_verdict: bool
) -> tuple[Recommendation, ...]:
    """The run's advice with a recurring stall's own, which replaces the generic word on
    the host's work: first where the stall is the verdict, else after the verdict's own
    advice (an input-bound run whose stall costs 7% of its step is told its worker count
    first)."""
    rest = tuple(r for r in advice if r.kind != "reduce_host_overhead")
    if is_verdict or not rest:
        return (own, *rest)
    return (rest[0], own, *rest[1:])


def _stall_advice(
    stall: RecurringStall, nature: StallNature, device_per_step: float
) -> Recommendation:
    """What to do about the stall, with the run's step time expected without it (never
    below the device's work per step)."""
    expected = max(stall.expected_ns, device_per_step) / 1e6
    cost = f"{stall.cost_ns / 1e6:,.0f} ms every {stall.period} steps"
    fixes = {
        "checkpoint": (
            f"Checkpoint asynchronously ({cost} now): Orbax's CheckpointManager with "
            "enable_async_checkpointing=True copies the arrays to the host and writes them in "
            "the background (MaxText: async_checkpointing=true); or checkpoint less often"
        ),
        "host": (
            f"Move the loop's own work ({cost}) off the training thread (a background thread "
            "or queue), or do it less often"
        ),
        "sync": f"Read device values less often or one step late ({cost})",
        "evaluation": (
            f"Evaluate less often or on fewer batches ({cost}: device time spent outside "
            "training steps)"
        ),
        "input": (
            f"Prefetch deeper so the recurring wait for input ({cost}) is hidden: more "
            "prefetch buffer per worker, or more read threads"
        ),
        "compile": f"Keep shapes fixed so that jit does not recompile ({cost})",
        "unseen": (
            f"Trace a window that holds one of these stalls ({cost}; capture --steps "
            f"{2 * stall.period}) to see what it is"
        ),
    }
    where = f" ({nature.sites[0][0]})" if nature.sites else ""
    return Recommendation(
        "recurring_stall",
        f"{fixes[nature.kind]}{where}; expected step time {expected:.2f} ms "
        f"(the run's mean is {stall.mean_ns / 1e6:.2f} ms).",
        expected_step_ms=round(expected, 4),
        where=tuple(site for site, _ in nature.sites[:3]) or None,
    )


# Below this share of step time, idle time with a program waiting is not worth a note.
_RUNTIME_NOTE = 0.01


def _runtime_notes(
    behind: ReadsBehind | None, fractions: dict[str, float], step_ms: float
) -> list[str]:
    """What the device's runtime and reads one step behind cost, besides the verdict (the
    reads when they recur and hold the host a share of the step that matters)."""
    notes = []
    if (
        behind is not None
        and behind.steps_with_behind >= SYNC_RECURS
        and behind.wait_ms >= MATTERS * step_ms
    ):
        notes.append(
            f"The loop reads device values after dispatching the next step ({behind.behind} of "
            f"{behind.reads} reads, in {behind.steps_with_behind:.0%} of the steps): they wait "
            f"{behind.wait_ms:.2f} ms a step (median) for the step before to finish while the "
            "device runs the next, so they hold the host to one step ahead and are no per-step "
            "sync; "
            f"the device's idle time after reads is {fractions['sync']:.1%} of step time."
        )
    if fractions["runtime"] >= _RUNTIME_NOTE:
        notes.append(
            f"The device idled {fractions['runtime']:.1%} of step time with its next program "
            "already dispatched (runtime: the launch and scheduling latency between programs, "
            "which the host does not owe)."
        )
    return notes


def _notes(
    trace: Trace,
    verdict: _Verdict,
    fractions: dict[str, float],
    steps_summary: StepSummary,
    work: StepWork | None,
    outside: float,
    steps: Steps,
    window_note: str | None,
) -> list[str]:
    """What a reader should know besides the verdict."""
    notes = []
    if verdict.occasional_sync:
        notes.append(
            f"A read of a device value idles the device in {verdict.sync_steps:.0%} of the "
            f"steps ({fractions['sync']:.1%} of step time): an occasional read (logging every "
            "N steps), not a per-step sync, so not the verdict."
        )
    if steps_summary.bursty:
        notes.append(
            f"Steps come in bursts (p10 {steps_summary.p10_ms:.2f} ms, median "
            f"{steps_summary.median_ms:.2f} ms, p90 {steps_summary.p90_ms:.2f} ms): several "
            "batches arrive at once (one per Grain worker), then the loop waits for the next "
            f"ones. The figures use throughput, {steps_summary.mean_ms:.2f} ms per step over "
            "the window."
        )
    if work is not None and work.queued > 1:
        notes.append(
            f"The host ran {work.queued} step(s) ahead of the device; each step's device work "
            "is that of the programs it dispatched (linked by execution order), not what ran "
            "during it."
        )
    if fractions["unknown"] >= MATTERS:
        notes.append(
            f"{fractions['unknown']:.0%} of step time is idle with nothing traced on the "
            "training thread to explain it; capture with --python-tracer to see Python code."
        )
    if outside >= 0.5:
        notes.append(
            f"{outside:.0%} of the device's work lies outside the analysed steps (the host ran "
            "ahead of the device, or host and device clocks are skewed); capture more steps."
        )
    if steps.dropped:
        notes.append(
            f"{steps.dropped} step(s) at the edges of the trace left out (partial, or idle "
            "from the trace's start with nothing traced before to say why)."
        )
    if window_note:
        notes.append(window_note)
    elif trace.sidecar is None and len(steps) < FEW_STEPS:
        notes.append(
            f"Only {len(steps)} complete steps, and nothing says whether they are steady: a "
            "window opened right after compilation holds warm-up steps (MaxText profiles 5 "
            "steps from step 1 by default). For a verdict that holds, trace more steps later "
            "in the run (MaxText: skip_first_n_steps_for_profiler=20 profiler_steps=20), or "
            "traceinspect capture, which waits until the run is steady."
        )
    if trace.sidecar is not None and trace.sidecar.untested_note:
        notes.append(trace.sidecar.untested_note)
    if trace.sidecar is not None and trace.sidecar.ignored_note:
        notes.append(trace.sidecar.ignored_note)
    if len(trace.hosts) > 1:
        notes.append(
            f"This trace merges {len(trace.hosts)} hosts into one timeline (their clocks "
            "differ); traceinspect.analyze_run() analyses each host and compares them, as "
            "`traceinspect analyze` does for a run directory."
        )
    return notes
