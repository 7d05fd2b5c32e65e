"""How many Grain workers a run needs, from what one capture measured.

The target (MaxText's rule): a batch must be ready at least as fast as the device finishes
a step. From the trace: the device's busy time per step ``D`` and the step time ``T``;
from the capture sidecar: the worker count ``M`` in use, the cores the process may use,
the host memory, and the bytes per batch.

- Cost of one batch for one worker, ``C``: with ``M >= 1`` workers in an input-bound run,
  every worker is busy all the time, so each delivers a batch every ``M * T``: ``C = M*T``.
  With no worker processes (``M = 0``) the training thread makes batches itself, and ``C``
  is the input work it does per step.
- Workers needed: ``N = ceil(C * HEADROOM / D)``, with 25% headroom because workers are
  not perfectly parallel (jitter, the GIL of the parent, shared memory bandwidth).
- Never above the cores the process may use, nor what memory allows (each worker holds
  ``per_worker_buffer_size`` batches plus a Python process); say which limit binds.
- Sync-bound runs keep their count (the pipeline already keeps up; removing the sync
  comes first).

When ``traceinspect capture`` measured the worker processes (its probe in each
``mp_prefetch`` worker: time producing each element, time blocked on a full buffer, CPU
time, RSS), the measurement replaces the assumptions (tf.data's autotune model: the target
is one batch per device step; add parallelism until one is ready that often, within the CPU
and RAM budgets):

- ``W``: a worker's wall time to produce one batch (elements per batch included), measured;
  ``N = ceil(W * HEADROOM / D)`` whether or not the run is input-bound, so a run that keeps
  up with idle workers is told how many fewer would do, and the RAM that saves.
- CPU share ``f``: the workers' CPU time over their producing time, less the time they were
  ready to run but waited for a core (shared cores): the share they would have on cores of
  their own. Workers that wait on reads
  (small ``f``) may outnumber the cores; CPU-bound ones cannot: the core cap is
  ``floor(cores / f)``. The advice differs: more workers or read threads, ArrayRecord for
  reads; cheaper or offline preprocessing, more hosts, for CPU.
- Memory per worker: its measured RSS plus ``per_worker_buffer_size`` batches.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Literal

from traceinspect.analysis.counterfactual import expected_without
from traceinspect.analysis.result import GRAIN_WORKER_COUNT, Recommendation
from traceinspect.analysis.workers_bounds import (
    HEADROOM,
    MEMORY_SHARE,
    WORKER_OVERHEAD_BYTES,
    _capped,
    _host_floor,
    _never_slower,
    _pace,
)
from traceinspect.analysis.workers_inputs import (
    IDLE_WORKERS,
    WAITING_SHARE,
    WorkerInputs,
    WorkerMeasurement,
    computes,
    worker_inputs,
)
from traceinspect.analysis.workers_measured import _from_measurement
from traceinspect.analysis.workers_words import _message

#: Why capture timed no step without the profiler: the script ended within the window (or
#: its write), or ``capture --stop-after`` stopped it there.
TracedOnly = Literal["ended", "stopped"]

__all__ = [
    "HEADROOM",
    "IDLE_WORKERS",
    "MEMORY_SHARE",
    "WAITING_SHARE",
    "WORKER_OVERHEAD_BYTES",
    "TracedOnly",
    "WorkerInputs",
    "WorkerMeasurement",
    "computes",
    "recommend_workers",
    "worker_inputs",
]


def recommend_workers(
    inputs: WorkerInputs,
    input_limits: bool = True,
    read_floor_ms: float | None = None,
    stall_ms: float | None = None,
    untraced_ms: float | None = None,
    traced_only: TracedOnly | None = None,
) -> Recommendation:
    """The ``grain_worker_count`` recommendation. ``input_limits``: whether input is what
    holds the step back; when it is not (the loop's own work, a checkpoint, the device), a
    change of count frees cores or memory but leaves the step as it is, and says so.
    ``read_floor_ms``: the step the loop runs at with its input free while it still reads a
    device value every step (``WorkerInputs.read_floor_ms``, which it replaces when given):
    workers are sized to deliver a batch at that pace, not the device's, and the expected
    step is never below it; the message then says the read limits (a slow pipeline under a
    per-step read: 2 workers were expected to give 9.0-12.7 ms a step and gave 13.8, the
    read-every-step loop's own pace; sized by the device's 8.3 ms on a GPU, 7 workers where
    4 ran within 2% of the best, 10.1 ms at 4 against 9.96 at 7). ``stall_ms``: a recurring
    stall's time per step, which no worker count removes: ``inputs.step_ms`` is then the
    run's step without it, and every expected step adds it back (the counterfactual's
    ``stall``). ``untraced_ms``: the run's step as capture timed it without the profiler
    after the window (stalls and all), the expected step of a count kept: the step stays
    the run's, not the traced window's (a `.block_until_ready()` every step, kept at 0
    workers: 7.45-7.99 ms traced, 6.31-6.57 untraced, 6.06-6.40 timed without capture).
    ``traced_only``: why capture timed no step without the profiler (the script ended within
    the window or the write, or ``--stop-after`` stopped it): a kept count's expected step is
    then the traced one, the profiler's cost in it (16-25% on that loop's 300-step
    captures), and says so."""
    if read_floor_ms is not None:
        inputs = replace(inputs, read_floor_ms=read_floor_ms)
    rec = _recommend(inputs, stall_ms)
    if not input_limits and rec["value"] is not None:
        rec["expected_step_ms"] = round(inputs.step_ms + (stall_ms or 0.0), 3)
        rec["unchanged"] = True
        rec.pop("read_limits", None)
    kept = rec["value"] is not None and rec["value"] == rec["current"]
    if untraced_ms and kept:
        rec["expected_step_ms"] = round(untraced_ms, 3)
        rec["untraced"] = True
    elif traced_only and kept:
        rec["traced_only"] = traced_only
    return Recommendation(
        GRAIN_WORKER_COUNT,
        _message(rec, inputs.maxtext),
        value=rec["value"],
        current=rec["current"],
        reason=rec["reason"],
        expected_step_ms=rec["expected_step_ms"],
        bounded_by=rec["bounded_by"],
        measured=rec.get("measured"),
    )


def _recommend(inputs: WorkerInputs, stall_ms: float | None = None) -> dict[str, Any]:
    """The recommendation's fields, in the order ``analyze --json`` prints them."""
    current = inputs.current
    assumed = current is None
    m = 0 if current is None else current
    d = inputs.device_busy_ms
    rec: dict[str, Any] = {
        "kind": "grain_worker_count",
        "value": m,
        "current": current,
        "reason": "",
        "expected_step_ms": round(inputs.step_ms + (stall_ms or 0.0), 3),
        "bounded_by": None,
    }
    assumption = (
        " (no capture sidecar: assumed no worker processes; capture with traceinspect "
        "capture to record the real count)"
        if assumed
        else ""
    )
    if d <= 0:
        rec["reason"] = "no device work measured per step; nothing to size the pipeline against"
        return rec
    if inputs.verdict == "sync-bound" and current == 0 and inputs.input_wait_ms > 0:
        # The training process makes each batch itself, after the read returns: the device
        # idles for it every step. A worker makes it during the read instead (scenario
        # family: a per-step float(loss) ran 18.3 ms at 0 workers, 14.2 at 2, 12.5 with no
        # read; on 2026-11-25, 14.2, 9.6 and 7.9). Removing the read closes the gap.
        x = inputs.input_wait_ms
        rec["value"] = 1
        rec["reason"] = (
            f"the run is sync-bound, and the training process makes each batch itself after "
            f"the read ({x:.2f} ms a step, while the device idles): one Grain worker makes it "
            "during the read instead, which narrows the gap; removing the per-step sync "
            "closes it"
        )
        # The batch leaves the step; what the read itself costs stays.
        rec["expected_step_ms"] = round(
            expected_without("input", inputs.step_ms - x, {"device": d, "stall": stall_ms}), 3
        )
        rec["bounded_by"] = "measurement"
        # A worker must gain what matters here too: a batch made in 0.07 ms after a
        # `.block_until_ready()` promised 1%, and 1 worker ran that loop 8-20% slower than
        # expected (a process beside the program's 2 cores).
        kept = _never_slower(rec, inputs.step_ms + (stall_ms or 0.0))
        if kept:
            rec["reason"] = (
                "the run is sync-bound, and the training process makes each batch itself "
                f"after the read ({x:.2f} ms a step){kept}; removing the per-step sync closes "
                "the gap"
            )
        return rec
    if inputs.verdict == "sync-bound":
        rec["reason"] = (
            f"the run is sync-bound and input work per step ({inputs.input_wait_ms:.2f} ms) "
            f"already fits in the device's {d:.2f} ms, so more workers would not help; "
            "remove the per-step sync first"
        )
        if assumed:
            rec["value"] = None
            rec["reason"] += "; this trace does not say how many Grain workers the run uses"
        rec["bounded_by"] = "measurement"
        return rec
    if inputs.measured is not None:
        return _from_measurement(inputs, rec, inputs.measured, stall_ms)
    if inputs.verdict != "input-bound" and assumed:
        # Nothing says how many workers the run uses: no count to keep or change.
        rec["value"] = None
        rec["reason"] = (
            f"batches are ready when the device needs them (waiting "
            f"{inputs.input_wait_ms:.2f} ms/step for input against {d:.2f} ms of device "
            "work); this trace does not say how many Grain workers the run uses, nor how many "
            "fewer would keep up: traceinspect capture measures them, traceinspect sweep "
            "times each count"
        )
        rec["bounded_by"] = "measurement"
        return rec
    if inputs.verdict != "input-bound":
        where = f"{m} worker process(es)" if m else "the training process"
        rec["reason"] = (
            f"batches from {where} are ready when the device needs them (waiting "
            f"{inputs.input_wait_ms:.2f} ms/step for input against {d:.2f} ms of device "
            "work); the pipeline is not saturated, so this capture cannot measure how many "
            f"fewer workers would still keep up{assumption}"
        )
        rec["bounded_by"] = "measurement"
        return rec
    # Cost of one batch for one worker. Without workers: what the training thread waits for
    # each batch, or, when read threads make batches during the step (and the wait shows only
    # the part the step did not hide), the pipeline stages' time per batch over those threads
    # (the family's slow records on one read thread under a per-step read: the loop waited
    # 17.7 ms a batch, the batch took 24; 2 workers ran 14.0 ms a step, 4 ran 9.1).
    in_threads = m == 0 and (inputs.stage_batch_ms or 0.0) > inputs.input_wait_ms
    cost = (
        m * inputs.step_ms
        if m >= 1
        else (inputs.stage_batch_ms or 0.0)
        if in_threads
        else inputs.input_wait_ms
    )
    # Nor faster than the host's CPU work per step over its cores (the CPU floor, as for
    # measured workers): moved into workers, the pipeline's CPU work stays the host's (the
    # family's records that wait 2.5 ms and compute 1.5 on one read thread: expected 9.2-9.6
    # ms at 4-5 workers by the device alone, measured 16.3-16.9).
    cpu_ms = inputs.host_cpu_ms_per_step if m == 0 else None
    floor, measured_floor = _host_floor(inputs, cpu_ms)
    pace, paced_by, by_read = _pace(inputs, floor, measured_floor, cpu_ms)
    needed = max(1, math.ceil(cost * HEADROOM / pace))
    value, bound, by_cores, by_memory = _capped(inputs, needed)
    rec["value"] = value
    rec["bounded_by"] = bound
    # With `value` workers a batch is ready every cost/value ms, never faster than the device.
    floors = {"pace": pace, "stall": stall_ms}
    rec["expected_step_ms"] = round(expected_without("input", cost / value, floors), 3)
    at_current = expected_without("input", cost / m, floors) if m >= 1 else None
    kept = _never_slower(rec, inputs.step_ms + (stall_ms or 0.0), at_current)
    value = rec["value"]
    if by_read and pace >= cost / value:
        rec["read_limits"] = True
    made = (
        f"one batch costs a worker {cost:.2f} ms ({m} worker(s) x {inputs.step_ms:.2f} ms/step)"
        if m >= 1
        else f"the pipeline's stages take {cost:.2f} ms a batch on the training process's read "
        "thread(s)"
        + (
            f" (the training thread waits {inputs.input_wait_ms:.2f} ms/step for it)"
            if inputs.input_wait_ms > 0
            else ""
        )
        if in_threads
        else f"the training thread spends {cost:.2f} ms/step making each batch"
    )
    reason = f"{made}; {paced_by}, so {needed} worker(s) with {HEADROOM - 1:.0%} headroom"
    share = inputs.stage_cpu_share
    if in_threads and share is not None:
        reason += f"; the stages ran on a CPU {share:.0%} of their time" + (
            " (they mostly wait on reads: workers doing the same may outnumber the cores)"
            if not computes(share)
            else ""
        )
    if bound == "cores" and by_cores != inputs.cpus:
        reason += (
            f"; the {inputs.cpus} usable core(s) run at most {by_cores} such worker(s): beyond "
            "that, make batches cheaper (lighter or offline preprocessing, ArrayRecord files) "
            "or add hosts"
        )
    elif bound == "cores":
        reason += (
            f", but the process may use only {by_cores} core(s); beyond that, make batches "
            "cheaper (lighter or offline preprocessing, ArrayRecord files) or add hosts"
        )
    elif bound == "memory":
        reason += (
            f", but memory allows only {by_memory} worker(s) with their buffers; reduce "
            "per_worker_buffer_size or the batch's size in memory"
        )
    rec["reason"] = reason + kept + assumption
    return rec
