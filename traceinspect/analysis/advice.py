"""What to do: the recommendations for the verdict, in order, each expected step from the one
counterfactual (``analysis/counterfactual.py``)."""

from __future__ import annotations

from traceinspect.analysis.advice_causes import (
    GENERIC,
    Floors,
    callback_advice,
    loop_code_advice,
    loop_cpu_advice,
    slowdown_of,
    stall_advice,
    window_floors,
    with_stall_advice,
)
from traceinspect.analysis.counterfactual import (
    binding_floor,
    expected_without,
    read_floor_ns,
    reads_every_step,
    run_floors,
)
from traceinspect.analysis.detectors import Found, stage_batch_ms
from traceinspect.analysis.input_stages import stage_advice
from traceinspect.analysis.measure import Measured
from traceinspect.analysis.result import INPUT_STAGE, Recommendation
from traceinspect.analysis.rules import Decision
from traceinspect.analysis.workers import TracedOnly, recommend_workers, worker_inputs
from traceinspect.analysis.workers_inputs import WorkerInputs, computes
from traceinspect.thresholds import MATTERS

_INPUT = (
    "Make batches faster than the step: prefetch in the background (Grain mp_prefetch with "
    "more worker processes, more read threads), or make preprocessing cheaper."
)
# A CPU-bound pipeline's read threads take turns with the GIL: Grain's tutorial loop at 2
# workers ran its first ~500 steps at 30-40 ms with 16 read threads a worker, 11-15 with 1-2,
# and the same work cost 3x the CPU (grain_tutorial_MEASUREMENTS.md, "Phases").
_INPUT_CPU = (
    "Make batches faster than the step: more Grain mp_prefetch worker processes, or cheaper "
    "preprocessing. The pipeline's stages ran on a CPU most of their time: more read threads "
    "do not help a Python map, whose threads take turns with the GIL (with workers, "
    "grain.ReadOptions(num_threads=1 or 2) can be faster than the default 16)."
)


# What limits the step once the read is gone, by the floor that sets it
# (:func:`~traceinspect.analysis.counterfactual.binding_floor`).
_LIMITS = {
    "device": "the device's work limits",
    "input": "the input limits",
    "cores": (
        "the cores limit: on XLA's CPU backend they run the programs and the host's work "
        "between them"
    ),
}


def recommendations(
    verdict: str,
    fractions: dict[str, float],
    sync_sites: tuple[str, ...],
    floors: Floors,
    occasional_sync: bool = False,
    cpu_bound_pipeline: bool = False,
    measured: Floors | None = None,
) -> tuple[Recommendation, ...]:
    """The advice of each idle cause that matters, in the claim order. ``floors``: the
    counterfactual's, in the run's pace (:func:`advise`), whose stall
    stays in the step expected without the read. ``cpu_bound_pipeline``: the pipeline's
    stages ran on a CPU most of their time (:func:`_cpu_bound_pipeline`), where more read
    threads are no advice. ``measured``: the window's floors (:func:`~traceinspect.analysis.
    advice_causes.window_floors`), whose input and device figures the input's advice quotes
    (default: ``floors``)."""
    stall_ns = floors["stall"]
    quoted = measured if measured is not None else floors
    recs: list[Recommendation] = []
    if fractions["sync"] >= MATTERS:
        where = f" ({sync_sites[0]})" if sync_sites else ""
        # Without the read the host prepares the next step while the device runs this one:
        # the floors then set the step (the device's work, the input's, or on XLA's CPU
        # backend the cores', which run both).
        expected = expected_without("sync", 0.0, floors) / 1e6
        # No floor known: the device's work, as before the floors were named.
        limit = _LIMITS[binding_floor("sync", 0.0, floors) or "device"]
        if stall_ns:
            limit += f", and the recurring stall's {stall_ns / 1e6:.2f} ms a step stays"
        message = (
            f"Stop reading a device value every step{where}: log the previous step's "
            "metrics instead (keep last step's loss and print it after dispatching the "
            "next step), or log every N steps, so the host can run ahead; expected step "
            f"time {expected:.2f} ms (then {limit})."
        )
        expected_ms: float | None = round(expected, 4)
        if occasional_sync and sync_sites and "(in " in sync_sites[0]:
            # Not the loop's own read: the sampler saw it inside a library's function.
            expected_ms = None
            message = (
                f"The occasional read of a device value{where} idles the device "
                f"{fractions['sync']:.1%} of step time: the library called there waits for "
                "the step's values (a checkpoint's copy to the host, a metric read); call it "
                "less often, or where it offers one, use its asynchronous form."
            )
        elif occasional_sync:
            expected_ms = None
            message = (
                f"The occasional read of a device value{where} idles the device "
                f"{fractions['sync']:.1%} of step time: read the previous step's value when "
                "you log (keep it, print it after dispatching the next step) to hide it too."
            )
        recs.append(
            Recommendation("remove_sync", message, where=sync_sites, expected_step_ms=expected_ms)
        )
    if fractions["input"] >= MATTERS:
        recs.append(
            Recommendation(
                "input_pipeline",
                _INPUT_CPU if cpu_bound_pipeline else _INPUT,
                input_ms_per_step=round((quoted["input"] or 0.0) / 1e6, 4),
                device_busy_ms_per_step=round((quoted["device"] or 0.0) / 1e6, 4),
            )
        )
    if fractions["compile"] >= MATTERS:
        recs.append(
            Recommendation(
                "avoid_recompilation",
                "jit recompiles during training: keep input shapes and static arguments "
                "fixed (pad to a few bucket sizes), and check jax.config "
                "jax_log_compiles to see what changes.",
            )
        )
    if fractions["host"] >= MATTERS:
        recs.append(
            Recommendation(
                "reduce_host_overhead",
                "The host's own work between steps leaves the device idle: fuse small "
                "jitted calls into one step function and move logging or checkpointing "
                "off the training thread.",
            )
        )
    if fractions["runtime"] >= MATTERS:
        recs.append(
            Recommendation(
                "runtime_latency",
                f"The device idles {fractions['runtime']:.1%} of step time between programs the "
                "host had already dispatched: each program pays the runtime's launch and "
                "scheduling latency. Fewer, larger programs pay it less often (one jitted step "
                "function; lax.scan over repeated layers).",
            )
        )
    if verdict == "device-bound":
        recs.append(
            Recommendation(
                "device_bound", "The input pipeline and host keep up; speed up the model itself."
            )
        )
    return tuple(recs)


def advise(m: Measured, found: dict[str, Found], decision: Decision) -> tuple[Recommendation, ...]:
    """What to do, in order: the verdict's own advice (the worker count first when input
    is the problem, after "remove the sync" otherwise; the input stage to fix last), the
    loop's own code named where the host's idle time matters, then each run-level cause's
    own advice, which replaces the generic word on the host's work."""
    stall = found.get("stall")
    detail = stall.detail if stall is not None else None
    # Every expected step in the run's pace: the window's floors over how much slower the
    # profiler ran its steps.
    window, slowdown = window_floors(m, detail), slowdown_of(m, detail)
    floors = run_floors(window, slowdown)
    advice = _idle_advice(m, found, decision, floors, window)
    if m.host.loop_code is not None and m.fractions["host"] >= MATTERS and "stall" not in found:
        advice = tuple(
            loop_code_advice(m, r, floors) if r.kind == "reduce_host_overhead" else r
            for r in advice
        )
    callbacks = found.get("callback")
    if callbacks is not None and (decision.cause == "callback" or callbacks.claim.share >= MATTERS):
        rest = tuple(r for r in advice if r.kind not in GENERIC)
        advice = (callback_advice(m, callbacks.detail, floors, slowdown), *rest)
    if decision.cause == "loop_cpu":
        rest = tuple(r for r in advice if r.kind not in GENERIC)
        advice = (loop_cpu_advice(m, found["loop_cpu"].detail, floors, slowdown), *rest)
    if decision.cause == "pipeline_cpu":
        # The host's time is the pipeline's doing: the worker count (first) and the stage.
        advice = tuple(r for r in advice if r.kind not in GENERIC)
    elif m.stages is not None and m.stages.gil_held_in_process:
        # The training thread's untraced time is its wait for the GIL the read threads
        # hold: the pipeline's cost, not the loop's own code (Grain's tutorial loop at 0
        # workers, captured under load: input-bound by its idle time, and its `for` line
        # blamed for the rest).
        advice = tuple(r for r in advice if r.kind != "reduce_host_overhead")
    if stall is not None:
        own = stall_advice(m, stall.detail, floors)
        advice = with_stall_advice(advice, own, is_verdict=decision.cause == "stall")
    return advice


def _why_traced_only(m: Measured) -> TracedOnly | None:
    """Why capture timed no step without the profiler, where it made the window and timed
    none: the script stopped after the window (``--stop-after``), or it ended first."""
    window = m.trace.sidecar.window if m.trace.sidecar is not None else None
    if window is None or m.window is None or m.untraced_ns:
        return None
    return "stopped" if window.stopped_after else "ended"


def _cpu_bound_pipeline(inputs: WorkerInputs, in_process: bool) -> bool:
    """Whether the pipeline's stages ran on a CPU most of their time (WAITING_SHARE, the
    share that tells CPU-bound stages from those that wait on reads elsewhere): the training
    process's read threads' compute share without workers (``in_process``), the workers'
    share on a core (on it, or waiting for one) with them."""
    if in_process:
        share = inputs.stage_cpu_share
    else:
        share = inputs.measured.core_share if inputs.measured is not None else None
    return computes(share)


def _idle_advice(
    m: Measured, found: dict[str, Found], decision: Decision, floors: Floors, window: Floors
) -> tuple[Recommendation, ...]:
    """The advice of the idle causes and the worker count (``floors`` in the run's pace,
    ``window`` as measured, the figures the input's advice quotes). The worker count where input
    matters, or where idle workers are to be let go: "keep 2 workers, expected step time
    2.78 ms" said of a loop held back by its own checkpoints tells the user nothing true."""
    verdict, sidecar, stages = decision.verdict, m.trace.sidecar, m.stages
    input_matters = verdict in ("input-bound", "sync-bound") or m.fractions["input"] >= MATTERS
    # The pipeline's stages in the training process (no workers): their CPU measurements.
    in_process = stages if stages is not None and not stages.workers else None
    # The run's step: over the whole run when a stall recurs (the window's median is a step
    # of the burst after one), without the stalls, which no worker count removes: the
    # counterfactual adds their time per step back to every expected step.
    stall = found.get("stall")
    step_ms = stall.detail.stall.expected_ns / 1e6 if stall is not None else m.summary.typical_ms
    # The device's work per step in the same pace as that step (the run's, where a stall
    # sets it, as ``floors`` are; else the window's).
    device_ns = (floors["device"] or 0.0) if stall is not None else m.device_ns
    stall_ms = floors["stall"] / 1e6 if floors["stall"] else None
    # Where the loop reads a device value every step, the step it runs at with its input
    # free: the worker count is sized to that pace, and its expected step never goes below
    # it (a sync-bound run's worker advice already says the read then limits).
    reads = reads_every_step(m.host, m.steps) and verdict != "sync-bound"
    inputs = worker_inputs(
        verdict,
        step_ms=step_ms,
        device_busy_ms=device_ns / 1e6,
        input_wait_ms=m.input_ns / 1e6,
        sidecar=sidecar,
        stage_batch_ms=stage_batch_ms(stages),
        stage_cpu_share=in_process.threads_compute_share if in_process else None,
        host_cpu_ms_per_step=in_process.host_cpu_ms_per_step if in_process else None,
    )
    advice = recommendations(
        verdict,
        m.fractions,
        m.sync_sites,
        floors,
        decision.occasional_sync,
        _cpu_bound_pipeline(inputs, in_process is not None),
        measured=window,
    )
    if (sidecar is not None and sidecar.grain is not None) or m.input_ns > 0:
        workers = recommend_workers(
            inputs,
            input_limits=input_matters,
            read_floor_ms=read_floor_ns(m.per_step) / 1e6 if reads else None,
            stall_ms=stall_ms,
            untraced_ms=m.untraced_ns / 1e6 if m.untraced_ns else None,
            traced_only=_why_traced_only(m),
        )
        # Where input does not hold the step back, only fewer workers are worth a word.
        fewer = workers.value is not None and workers.value < (workers.current or 0)
        if not input_matters and not fewer:
            return advice
        first = verdict == "input-bound"
        advice = (workers, *advice) if first else (*advice, workers)
    if stages is not None and verdict == "input-bound":
        advice = (*advice, Recommendation(INPUT_STAGE, stage_advice(stages), stage=stages.dominant))
    return advice
