"""What the worker count is computed from: the run's numbers, the measured worker processes,
the cores other processes left the script."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from traceinspect.sidecar import GrainSettings, MachineLoad, Sidecar, WorkersMeasured
from traceinspect.thresholds import OTHERS_LOAD


@dataclass(frozen=True)
class WorkerInputs:
    """What the recommendation is computed from (times in ms)."""

    verdict: str
    step_ms: float  # median step time
    device_busy_ms: float  # device busy time per step (median)
    input_wait_ms: float  # training thread waiting for input per step (median)
    current: int | None  # grain worker count in use (None: unknown)
    #: The cores the process may use (its affinity, else the machine's), less those other
    #: processes kept busy while traced where that reached OTHERS_LOAD (:func:`cores_left`).
    cpus: int | None
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
    #: The cores the process may use, however busy the machine was (``cpus`` before others'
    #: load), and the cores other processes kept busy over the traced window, on average
    #: (capture's ``machine_load``; None: not recorded).
    host_cores: int | None = None
    others_cpu_cores: float | None = None
    #: The largest worker's resident memory as capture's probe saw it (bytes), whether or not
    #: a worker made a batch in the window (:func:`largest_worker_rss`); None: not measured.
    worker_rss_bytes: int | None = None


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
            rss_bytes=largest_worker_rss(measured),
            host_cpu_ms_per_step=host_cpu,
            # Summed over a worker's threads the wait can exceed what is left of its
            # producing time: at most the rest.
            cpu_wait_share=max(0.0, min(1.0 - paced_cpu / produce, cpu_wait / produce)),
            cpu_ms_per_batch=workers_cpu / elements * per_batch * 1000.0,
        )


def largest_worker_rss(measured: WorkersMeasured | None) -> int | None:
    """The largest worker's resident memory as capture's probe last saw it, whether or not the
    worker made a batch in the window: what a worker holds does not depend on it producing. A
    window of buffered batches has none made in it (the buffer check's capture under load: 10
    steps in 47 ms, 0 elements from either worker, 1 run in 5), and no WorkerMeasurement."""
    rss = [w.rss_bytes for w in measured.workers if w.rss_bytes] if measured else []
    return max(rss) if rss else None


def machine_busy(sidecar: Sidecar | None) -> MachineLoad | None:
    """The machine's load over the traced window when other processes kept at least
    ``OTHERS_LOAD`` of its cores busy (the worker count is then sized for the cores they
    left); else None."""
    load = sidecar.machine_load if sidecar is not None else None
    host = sidecar.host if sidecar is not None else None
    machine = (load.cpu_count if load is not None else None) or (host.cores if host else None)
    if load is None or not machine or load.others_cpu_cores < OTHERS_LOAD * machine:
        return None
    return load


def cores_left(sidecar: Sidecar | None) -> int | None:
    """The cores the script had while traced: those it may use (:attr:`HostFacts.cores`),
    less those other processes kept busy where that reached ``OTHERS_LOAD`` of the machine
    (:meth:`MachineLoad.cores_left`: to the nearest core, at least 1). None without the
    host's cores."""
    host = sidecar.host if sidecar is not None else None
    cores = host.cores if host is not None else None
    busy = machine_busy(sidecar)
    return busy.cores_left(cores) if busy is not None else cores


def machine_load_record(sidecar: Sidecar | None) -> dict[str, Any] | None:
    """``analyze --json``'s ``machine_load``: the capture's figures, the cores the script
    may use and those it had (``cores_left``), and whether others' load reached
    ``OTHERS_LOAD`` (``busy``: the worker count is sized for ``cores_left``); None when the
    capture recorded none."""
    load = sidecar.machine_load if sidecar is not None else None
    if sidecar is None or load is None:
        return None
    return {
        "window_s": load.window_s,
        "cpu_count": load.cpu_count,
        "others_cpu_cores": load.others_cpu_cores,
        "script_cpu_cores": load.script_cpu_cores,
        "cores": sidecar.host.cores if sidecar.host is not None else None,
        "cores_left": cores_left(sidecar),
        "busy": machine_busy(sidecar) is not None,
    }


# Workers producing less than this share of the window were mostly blocked on a full buffer:
# their main thread's time per batch is then a hand-over, not the batch's cost.
IDLE_WORKERS = 0.5
# A CPU share below this counts as "waiting on reads" in the advice.
WAITING_SHARE = 0.5


def computes(cpu_share: float | None) -> bool:
    """Whether a pipeline whose stages (or workers) ran on a CPU ``cpu_share`` of their time
    computes rather than waits on reads: at least :data:`WAITING_SHARE`. Unknown (None):
    no. The one comparison the worker count, the input advice, the findings, the pipeline
    detector and isolate make with it."""
    return cpu_share is not None and cpu_share >= WAITING_SHARE


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
        cpus=cores_left(sidecar),
        memory_available_bytes=host.memory_available_bytes if host is not None else None,
        bytes_per_batch=grain.bytes_per_batch,
        per_worker_buffer_size=grain.per_worker_buffer_size,
        read_threads=grain.read_threads,
        measured=WorkerMeasurement.from_sidecar(grain.measured),
        stage_batch_ms=stage_batch_ms,
        maxtext=sidecar.ran_maxtext if sidecar is not None else None,
        stage_cpu_share=stage_cpu_share,
        host_cpu_ms_per_step=host_cpu_ms_per_step,
        host_cores=host.cores if host is not None else None,
        others_cpu_cores=(
            sidecar.machine_load.others_cpu_cores
            if sidecar is not None and sidecar.machine_load is not None
            else None
        ),
        worker_rss_bytes=largest_worker_rss(grain.measured),
    )
