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
from dataclasses import dataclass, replace
from typing import Any

from traceinspect.analysis.counterfactual import expected_without
from traceinspect.analysis.result import GRAIN_WORKER_COUNT, Recommendation
from traceinspect.sidecar import GrainSettings, Sidecar, WorkersMeasured
from traceinspect.vocabulary import KNEE_TOLERANCE

HEADROOM = 1.25
# A Grain worker is a Python process holding the pipeline's modules: what one costs in RAM
# besides its buffered batches (measured on this project's machine: ~150-250 MB RSS).
WORKER_OVERHEAD_BYTES = 256 << 20
MEMORY_SHARE = 0.8  # of the memory available at capture time


@dataclass(frozen=True)
class WorkerInputs:
    """What the recommendation is computed from (times in ms)."""

    verdict: str
    step_ms: float  # median step time
    device_busy_ms: float  # device busy time per step (median)
    input_wait_ms: float  # training thread waiting for input per step (median)
    current: int | None  # grain worker count in use (None: unknown)
    cpus: int | None  # cores the process may use
    memory_available_bytes: int | None
    bytes_per_batch: int | None
    per_worker_buffer_size: int | None
    read_threads: int | None
    measured: WorkerMeasurement | None = None
    #: From capture's stage timers (ms), or None: with workers, their thread time per batch;
    #: without, the pipeline stages' time per batch over the read threads that run them.
    stage_batch_ms: float | None = None
    #: Whether the run was MaxText's (its setting is ``grain_worker_count``); None: unknown.
    maxtext: bool | None = None
    #: Without workers: the share of the read threads' stage time spent on a CPU (capture's
    #: schedstat of those threads), or None.
    stage_cpu_share: float | None = None
    #: Without workers: the training process's CPU time per step (ms), or None.
    host_cpu_ms_per_step: float | None = None
    #: The fastest step the host allows (ms) where it was measured otherwise than as the
    #: host's CPU per step over the cores, and how, in words (isolate on XLA's CPU backend:
    #: its step with free input plus the pipeline's CPU per batch over the cores, the
    #: pipeline in workers or in the training process). It stands where it is the higher.
    host_floor_ms: float | None = None
    host_floor_basis: str | None = None
    #: The step a loop that reads a device value every step runs at with its input free
    #: (ms): its read, its own work and the device's then run one after another, so the
    #: loop needs a batch no more often than that. None where the loop does not read every
    #: step (or the run is sync-bound, whose advice says the read limits).
    read_floor_ms: float | None = None


@dataclass(frozen=True)
class WorkerMeasurement:
    """The worker processes over the traced window, from capture's probe (times in ms)."""

    workers: int
    batch_ms: float  # one worker's wall time to produce one batch
    cpu_share: float  # CPU time / producing time, 0..1
    busy_share: float  # producing time / wall time, 0..1 (the rest: blocked or idle)
    rss_bytes: int | None  # the largest worker's resident memory
    #: CPU time per step of the whole host side: the training process (on XLA's CPU backend
    #: that includes the device's own work) plus the workers' CPU per batch (ms).
    host_cpu_ms_per_step: float | None = None
    #: Time ready to run but waiting for a core / producing time, 0..1 (0: not recorded).
    cpu_wait_share: float = 0.0
    #: The workers' CPU time (all their threads) per batch they made (ms).
    cpu_ms_per_batch: float = 0.0

    @property
    def core_share(self) -> float:
        """The CPU share a worker would have on a core of its own: its CPU time over its
        producing time less the time it waited for a core. Workers that share their cores
        (with one another, the training process, XLA's threads) wait for them, so their CPU
        share alone drops (two CPU-bound workers on one core: 24-48%) and they would look
        as if they waited on reads."""
        rest = 1.0 - self.cpu_wait_share
        return 1.0 if rest <= self.cpu_share else self.cpu_share / rest

    @classmethod
    def from_sidecar(cls, measured: WorkersMeasured | None) -> WorkerMeasurement | None:
        if measured is None:
            return None
        workers = [w for w in measured.workers if w.timed_elements]
        elements = sum(w.elements for w in workers)
        if not workers or elements <= 0:
            return None
        # Grain takes the workers' outputs in turn (mp_prefetch interleaves them, one from
        # each), so they all deliver at one pace. Where some were busy and others mostly
        # blocked on a full buffer, the blocked ones made their elements on read-ahead
        # threads while their main thread waited in the put, which the probe counts as
        # blocked (the family's two waiting workers, drained by isolate's loader phase: one
        # busy 100% at 43.5 ms an element, the other 2% at 1.1 ms, for 23 elements each). The
        # busy ones set the pace: a batch's cost, and their shares, are theirs. The workers'
        # CPU per batch and their memory count every worker.
        busy = [w for w in workers if w.produce_s >= IDLE_WORKERS * w.wall_s and w.elements]
        paced = busy if busy and len(busy) < len(workers) else workers
        paced_elements = sum(w.elements for w in paced)
        produce = sum(w.produce_s for w in paced)
        wall = sum(w.wall_s for w in paced)
        if paced_elements <= 0 or produce <= 0 or wall <= 0:
            return None
        batches = measured.batches
        per_batch = elements / batches if batches > 0 else 1.0
        rss = [w.rss_bytes for w in workers if w.rss_bytes]
        workers_cpu = sum(w.cpu_s for w in workers)
        paced_cpu = sum(w.cpu_s for w in paced)
        cpu_wait = sum(w.cpu_wait_s or 0.0 for w in paced)
        main_cpu = measured.main_process_cpu_s
        host_cpu = (
            (main_cpu + workers_cpu) / batches * 1000.0
            if main_cpu is not None and batches > 0
            else None
        )
        return cls(
            workers=len(workers),
            batch_ms=produce / paced_elements * per_batch * 1000.0,
            cpu_share=min(1.0, paced_cpu / produce),
            busy_share=min(1.0, produce / wall),
            rss_bytes=max(rss) if rss else None,
            host_cpu_ms_per_step=host_cpu,
            # Summed over a worker's threads the wait can exceed what is left of its
            # producing time: at most the rest.
            cpu_wait_share=max(0.0, min(1.0 - paced_cpu / produce, cpu_wait / produce)),
            cpu_ms_per_batch=workers_cpu / elements * per_batch * 1000.0,
        )


# Workers producing less than this share of the window were mostly blocked on a full buffer:
# their main thread's time per batch is then a hand-over, not the batch's cost.
IDLE_WORKERS = 0.5
# A CPU share below this counts as "waiting on reads" in the advice.
WAITING_SHARE = 0.5


def _per_worker_bytes(inputs: WorkerInputs) -> int:
    measured = inputs.measured
    overhead = measured.rss_bytes if measured and measured.rss_bytes else WORKER_OVERHEAD_BYTES
    return overhead + (inputs.bytes_per_batch or 0) * (inputs.per_worker_buffer_size or 1)


def _limits(inputs: WorkerInputs) -> tuple[int | None, int | None]:
    by_cores = inputs.cpus if inputs.cpus else None
    measured = inputs.measured
    # Workers that wait on reads leave their core free while they wait: measured in the
    # workers, or, without workers, in the read threads that ran the stages.
    share = measured.core_share if measured is not None else inputs.stage_cpu_share
    if by_cores is not None and share is not None:
        by_cores = max(1, math.floor(by_cores / max(share, 1 / 64)))
    by_memory = None
    if inputs.memory_available_bytes:
        by_memory = max(
            1, int(inputs.memory_available_bytes * MEMORY_SHARE // _per_worker_bytes(inputs))
        )
    return by_cores, by_memory


def _capped(inputs: WorkerInputs, needed: int) -> tuple[int, str | None, int | None, int | None]:
    """``needed`` within the core and memory limits: (value, the limit that bound it or
    None, the core limit, the memory limit)."""
    by_cores, by_memory = _limits(inputs)
    value, bound = needed, None
    if by_cores is not None and value > by_cores:
        value, bound = by_cores, "cores"
    if by_memory is not None and value > by_memory:
        value, bound = by_memory, "memory"
    return value, bound, by_cores, by_memory


def recommend_workers(
    inputs: WorkerInputs, input_limits: bool = True, read_floor_ms: float | None = None
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
    4 ran within 2% of the best, 10.1 ms at 4 against 9.96 at 7)."""
    if read_floor_ms is not None:
        inputs = replace(inputs, read_floor_ms=read_floor_ms)
    rec = _recommend(inputs)
    if not input_limits and rec["value"] is not None:
        rec["expected_step_ms"] = round(inputs.step_ms, 3)
        rec["unchanged"] = True
        rec.pop("read_limits", None)
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


def _setting(maxtext: bool | None, value: object) -> str:
    """The worker count's name in the user's code: MaxText's config key, or Grain's option;
    both when the run is not known (no capture sidecar)."""
    grain = f"MultiprocessingOptions(num_workers={value})"
    return grain if maxtext is False else f"{grain}, grain_worker_count in MaxText"


def _message(rec: dict[str, Any], maxtext: bool | None = True) -> str:
    current = "unknown" if rec["current"] is None else rec["current"]
    keep = rec["value"] == (rec["current"] or 0)
    if maxtext:
        if rec["value"] is None:
            return f"No change to grain_worker_count is needed: {rec['reason']}."
        head = (
            f"Keep grain_worker_count at {rec['value']}"
            if keep
            else f"Set grain_worker_count to {rec['value']} (now {current})"
        )
    elif rec["value"] is None:
        setting = _setting(maxtext, "N")
        return f"No change to the Grain worker count ({setting}) is needed: {rec['reason']}."
    elif maxtext is False:
        setting = _setting(maxtext, rec["value"])
        head = f"Keep {setting}" if keep else f"Set {setting} (now {current})"
    else:
        setting = _setting(maxtext, rec["value"])
        head = (
            f"Keep the Grain worker count at {rec['value']} ({setting})"
            if keep
            else f"Set the Grain worker count to {rec['value']} (now {current}; {setting})"
        )
    if rec.get("unchanged"):
        return (
            f"{head}: {rec['reason']}; the step stays at about {rec['expected_step_ms']:.2f} ms "
            "(input is not what holds it back)."
        )
    if rec.get("read_limits"):
        return (
            f"{head}: {rec['reason']}; expected step time {rec['expected_step_ms']:.2f} ms, "
            "where the read of a device value every step then limits it (remove it next)."
        )
    return f"{head}: {rec['reason']}; expected step time {rec['expected_step_ms']:.2f} ms."


def _recommend(inputs: WorkerInputs) -> dict[str, Any]:
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
        "expected_step_ms": round(inputs.step_ms, 3),
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
            expected_without("input", inputs.step_ms - x, {"device": d}), 3
        )
        rec["bounded_by"] = "measurement"
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
        return _from_measurement(inputs, rec, inputs.measured)
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
    rec["expected_step_ms"] = round(expected_without("input", cost / value, {"pace": pace}), 3)
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
            if share < WAITING_SHARE
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
    rec["reason"] = reason + assumption
    return rec


def _host_floor(inputs: WorkerInputs, cpu_ms: float | None) -> tuple[float, bool]:
    """The fastest step the host allows (ms; 0 when unknown): the host's CPU work per step
    ``cpu_ms`` over the cores, or the floor measured otherwise (``inputs.host_floor_ms``)
    where that is higher; and whether the latter stands."""
    floor = cpu_ms / inputs.cpus if cpu_ms and inputs.cpus else 0.0
    if inputs.host_floor_ms is not None and inputs.host_floor_ms > floor:
        return inputs.host_floor_ms, True
    return floor, False


def _pace(
    inputs: WorkerInputs, floor: float, measured_floor: bool, cpu_ms: float | None
) -> tuple[float, str, bool]:
    """How often the loop needs a batch (ms), in words, and whether a per-step read sets it.

    The device's work, or the host's floor where higher (``_host_floor``'s figure, whether it
    was measured otherwise, and the host's CPU work per step it came from). A loop that reads
    a device value every step runs its read, its own work and the device's one after another,
    so its read floor (``inputs.read_floor_ms``, which holds the device's work) stands in
    where it is higher still."""
    d = inputs.device_busy_ms
    read = inputs.read_floor_ms
    if read is None or read <= max(d, floor):
        if floor <= d:
            return d, f"the device needs one every {d:.2f} ms", False
        if measured_floor:
            basis = f"{inputs.host_floor_basis} allow"
        else:
            basis = (
                f"the host's CPU work per step ({cpu_ms or 0:.2f} ms on {inputs.cpus} core(s)) "
                "allows"
            )
        return floor, f"{basis} a step every {floor:.2f} ms at best", False
    return (
        read,
        f"the loop reads a device value every step, so its steps run one after another (the "
        f"device's {d:.2f} ms of work among them) and need one every "
        f"{read:.2f} ms",
        True,
    )


def _from_measurement(
    inputs: WorkerInputs, rec: dict[str, Any], measured: WorkerMeasurement
) -> dict[str, Any]:
    """The recommendation from the workers' measured cost per batch (see the module doc)."""
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
    rec["expected_step_ms"] = round(
        expected_without("input", w / value, {"pace": d, "workers_cpu": cpu_ms / cores}), 3
    )
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
    waits = measured.core_share < WAITING_SHARE
    on_cpu = f"{measured.cpu_share:.0%} of their time on CPU"
    if measured.cpu_wait_share >= 0.005:
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
    rec["reason"] = reason
    return rec


def worker_inputs(
    verdict: str,
    step_ms: float,
    device_busy_ms: float,
    input_wait_ms: float,
    sidecar: Sidecar | None,
    stage_batch_ms: float | None = None,
    stage_cpu_share: float | None = None,
    host_cpu_ms_per_step: float | None = None,
) -> WorkerInputs:
    """Gather the inputs from the analysis numbers and the capture sidecar (may be None)."""
    grain = (sidecar.grain if sidecar is not None else None) or GrainSettings(worker_count=None)
    host = sidecar.host if sidecar is not None else None
    current: int | None = None
    if sidecar is not None:
        # A capture that saw no MultiprocessingOptions: batches are made in-process.
        current = grain.worker_count or 0
    return WorkerInputs(
        verdict=verdict,
        step_ms=step_ms,
        device_busy_ms=device_busy_ms,
        input_wait_ms=input_wait_ms,
        current=current,
        cpus=host.cores if host is not None else None,
        memory_available_bytes=host.memory_available_bytes if host is not None else None,
        bytes_per_batch=grain.bytes_per_batch,
        per_worker_buffer_size=grain.per_worker_buffer_size,
        read_threads=grain.read_threads,
        measured=WorkerMeasurement.from_sidecar(grain.measured),
        stage_batch_ms=stage_batch_ms,
        maxtext=sidecar.ran_maxtext if sidecar is not None else None,
        stage_cpu_share=stage_cpu_share,
        host_cpu_ms_per_step=host_cpu_ms_per_step,
    )
