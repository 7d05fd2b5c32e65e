"""The worker count from the worker processes' measured cost per batch (capture's probe)."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from traceinspect.analysis.counterfactual import expected_without
from traceinspect.analysis.workers_bounds import (
    HEADROOM,
    _capped,
    _host_floor,
    _never_slower,
    _pace,
    _per_worker_bytes,
)
from traceinspect.analysis.workers_inputs import (
    IDLE_WORKERS,
    WorkerInputs,
    WorkerMeasurement,
    computes,
)
from traceinspect.thresholds import CORE_WAIT_NOTE
from traceinspect.vocabulary import KNEE_TOLERANCE


def _from_measurement(
    inputs: WorkerInputs,
    rec: dict[str, Any],
    measured: WorkerMeasurement,
    stall_ms: float | None = None,
) -> dict[str, Any]:
    """The recommendation from the workers' measured cost per batch (see the doc of
    :mod:`traceinspect.analysis.workers`)."""
    m = inputs.current or measured.workers
    w = measured.batch_ms
    # The probe times the worker's main thread, which waits on its read threads while it
    # is busy: right then. Workers idle most of the window (their output buffer full) have
    # read threads that filled a buffer ahead meanwhile, and hand over ready batches in a
    # few ms (the io scenario at 4 workers: 2.05 ms per batch, busy 3%, against 40 ms of
    # reads). There the stage timers, which see the read threads' work, spread over those
    # threads, say what a batch costs.
    by_stages = (
        inputs.stage_batch_ms / max(1, inputs.read_threads or 1)
        if inputs.stage_batch_ms and measured.busy_share < IDLE_WORKERS
        else 0.0
    )
    from_stages = by_stages > w
    if from_stages:
        # Their CPU share too: of what making a batch took, not of the hand-over.
        share = min(1.0, measured.cpu_ms_per_batch / by_stages) if by_stages else 1.0
        measured = replace(measured, cpu_share=share, cpu_wait_share=0.0)
        inputs = replace(inputs, measured=measured)
    handover = w
    w = max(w, by_stages)
    # The step can go no faster than the device's work, nor than the host's CPU work per
    # step spread over its cores (the CPU floor: on the scenario family it matched the best
    # step a 1-8 worker sweep measured, within 4%, for all three record kinds).
    floor, measured_floor = _host_floor(inputs, measured.host_cpu_ms_per_step)
    d, paced_by, by_read = _pace(inputs, floor, measured_floor, measured.host_cpu_ms_per_step)
    needed = max(1, math.ceil(w * HEADROOM / d))
    enough = m >= 1 and needed > m and w / m <= d * KNEE_TOLERANCE
    if enough:
        # The workers in use already deliver a batch within the knee's tolerance of the
        # fastest step this host can run: more would not help.
        needed = m
    if needed < m and inputs.step_ms > 0:
        # Fewer only where they would still deliver a batch, with headroom, within the step
        # this run measured: the floor and the device's work are lower bounds, and the
        # family's io pipeline at 4 workers (a 14 ms step) was told to keep 3 when its CPU
        # floor read 20 ms, where 3 workers run a 14.4 ms step against 11.2 at 4.
        needed = max(needed, min(m, math.ceil(w * HEADROOM / inputs.step_ms)))
    value, bound, by_cores, by_memory = _capped(inputs, needed)
    cpu_ms = w * measured.cpu_share
    cores = inputs.cpus or value
    rec["value"] = value
    rec["bounded_by"] = bound
    floors = {"pace": d, "workers_cpu": cpu_ms / cores, "stall": stall_ms}
    rec["expected_step_ms"] = round(expected_without("input", w / value, floors), 3)
    at_current = expected_without("input", w / m, floors) if m >= 1 else None
    kept = _never_slower(rec, inputs.step_ms + (stall_ms or 0.0), at_current)
    value = rec["value"]
    if by_read and d >= max(w / value, cpu_ms / cores):
        rec["read_limits"] = True
    rec["measured"] = {
        "batch_ms": round(w, 3),
        "handover_ms": round(handover, 3),
        "cpu_share": round(measured.cpu_share, 3),
        "busy_share": round(measured.busy_share, 3),
        "worker_rss_bytes": measured.rss_bytes,
        "host_cpu_floor_ms": round(floor, 3) if floor else None,
    }
    waits = not computes(measured.core_share)
    on_cpu = f"{measured.cpu_share:.0%} of their time on CPU"
    if measured.cpu_wait_share >= CORE_WAIT_NOTE:
        on_cpu += f", {measured.cpu_wait_share:.0%} waiting for a core"
    kind = (
        f"workers wait on reads ({on_cpu})"
        if waits
        else f"workers are CPU-bound in preprocessing ({on_cpu})"
    )
    sized = (
        f"{m} already deliver one every {w / m:.2f} ms, within {KNEE_TOLERANCE - 1:.0%} of that"
        if enough
        else f"so {needed} worker(s) with {HEADROOM - 1:.0%} headroom"
    )
    timed = (
        f"{w:.2f} ms (their pipeline stages' time, over {max(1, inputs.read_threads or 1)} "
        "read thread(s) each: the workers handed over batches their read threads had made "
        f"ahead, in {handover:.2f} ms)"
        if from_stages
        else f"{w:.2f} ms"
    )
    reason = (
        f"measured in {measured.workers} worker process(es): one batch takes a worker "
        f"{timed}, and they were busy {measured.busy_share:.0%} of the window; {paced_by}; "
        f"{sized}; {kind}"
    )
    if bound == "cores":
        reason += (
            f"; the {inputs.cpus} usable core(s) run at most {by_cores} such worker(s): "
            "beyond that, make preprocessing cheaper or move it offline, or add hosts"
        )
    elif bound == "memory":
        reason += (
            f"; memory allows only {by_memory} worker(s) with their buffers: reduce "
            "per_worker_buffer_size or the batch's size in memory"
        )
    elif waits and value > m:
        reason += (
            "; they may outnumber the cores since they mostly wait (more read threads, or "
            "ArrayRecord files, make each read cheaper)"
        )
    if value < m:
        saved = (m - value) * _per_worker_bytes(inputs)
        reason += (
            f"; {m - value} fewer worker(s) keep up and free about {saved / 2**20:,.0f} MiB of RAM"
        )
    rec["reason"] = reason + kept
    return rec
