"""Where a batch's time goes: the input pipeline's stages, per batch, and which one to fix.

Stages (:data:`~traceinspect.vocabulary.STAGES`):

- ``read``, ``preprocessing``, ``batch``: measured by ``traceinspect capture`` wherever
  the pipeline runs (Grain worker processes, the training process's threads, the training
  thread): the self time of Grain's source, transformation and batching calls over the
  traced window (the sidecar's ``grain.stages``). Grain's own trace annotations cannot
  give this: a ``MapDataset`` pipeline tags only its source reads and the prefetch
  iterator, and ``mp_prefetch`` workers are other processes, absent from the trace.
- ``prefetch``: the training thread waiting for a batch beyond the pipeline work it did
  itself (its input time per step, from the trace, less the stages it ran): the buffer
  handing over batches made elsewhere.
- ``transfer``: host-to-device copies on the training thread (``DevicePut``), from the trace.

Costs are per batch: per batch the loop drew for the training process's stages, per
element the workers made for theirs (one element is one batch when the pipeline batches
before ``mp_prefetch``); a stage's time is the time of the threads that ran it, summed.
Per step, the unit a user compares with the step, a stage costs its time per batch over how
many ran at once (:func:`parallelism`): ``n`` worker processes with ``t`` read threads each
run up to ``n x t`` batches at once, the training process's read threads ``t``, its main
thread one. Threads that share one GIL and are all at work wait for it, and their summed
time grows with their number: divided by it, a CPU-bound stage's time is the GIL's time it
took, so the same division holds. What the measurement says overrides the settings: the
stages' summed thread time over the window's wall time is how many ran at once on average.
More than the settings say means threads they do not show (Grain's default ReadOptions, 16
threads, leaves no setting to read); fewer, while the pipeline ran flat out (its worker
processes busy producing at least half the window; for the training process's threads,
the loop waiting for input beyond the knee's tolerance of the device's step), is what the
GIL, the cores and the buffers allowed (the stages scenario's 2 workers of 2 read threads
each ran 1.96 at once, busy 99%), and the stages per step then add up to the step. The
*dominant* stage is the largest per step. The wait is
dominant only when it exceeds the whole pipeline's share of a step
by :data:`HANDOVER_MARGIN`: the loop then waits for batches the pipeline made in time, so
the hand-over (buffers, copying the batch out of the worker), not a stage, holds it up.
When the pipeline is the bottleneck the wait equals its share: measured 0.96-1.03 times
it in 12 captures with saturated workers (``sample_traces/scenarios/stages``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from traceinspect import names as N
from traceinspect.analysis.steps import Steps
from traceinspect.analysis.training_thread import ThreadEvents
from traceinspect.sidecar import Sidecar, StagesMeasured
from traceinspect.thresholds import GIL_HELD
from traceinspect.vocabulary import KNEE_TOLERANCE, PLACES, STAGES, Place, Stage

#: The stages capture measures inside the pipeline.
PIPELINE_STAGES: tuple[Stage, ...] = ("read", "preprocessing", "batch")
#: How far the wait must exceed the pipeline's share of a step to be the hand-over's
#: fault: well clear of the 0.96-1.03 measured when the pipeline itself is the bottleneck.
HANDOVER_MARGIN = 1.25
#: Worker processes producing at least this share of the window ran flat out (the worker
#: rule's IDLE_WORKERS: below it they were mostly blocked on a full buffer).
FLAT_OUT_BUSY = 0.5


@dataclass(frozen=True)
class InputStages:
    """Milliseconds per batch by stage, where each ran, and the stage to fix first."""

    dominant: Stage
    ms_per_batch: dict[Stage, float]
    where: dict[Stage, Place]
    #: Worker processes making batches (0: in the training process).
    workers: int
    #: Each stage's share of a step once parallel workers are accounted for (ms per batch).
    effective_ms: dict[Stage, float]
    #: The device's work per step: the time a batch must beat.
    budget_ms: float
    batches: int
    #: Thread time the worker processes spent per batch they made, all pipeline stages
    #: summed (ms; 0 without workers): what making one batch costs, whether or not the
    #: worker's main thread waited for it (its read threads fill a buffer ahead).
    worker_batch_ms: float = 0.0
    #: How many of each stage ran at once (``ms_per_batch / effective_ms``; 1 for the
    #: training thread's own and the hand-over); None in tables written before it.
    parallel: dict[Stage, float] | None = None
    #: Of the stages' time on the training process's read threads, the share they ran on a
    #: CPU (their CPU time over their time less waits for a core; the rest waited on reads,
    #: the GIL, a lock); None where capture did not measure it or no stage ran there.
    threads_cpu_share: float | None = None
    #: Without workers: the training process's CPU time per batch the loop drew (ms; all
    #: its threads, the pipeline's included; on XLA's CPU backend the device's work too):
    #: over the cores, the fastest step the host's CPU allows. None where not measured.
    host_cpu_ms_per_step: float | None = None

    @property
    def threads_cores(self) -> float | None:
        """Cores the training process's read threads kept busy with the stages, on average:
        their CPU share times how many ran at once. None where not measured."""
        if self.threads_cpu_share is None:
            return None
        on_threads = [s for s in PIPELINE_STAGES if self.where[s] == "threads"]
        if not on_threads:
            return None
        running = max((self.parallel or {}).get(s, 1.0) for s in on_threads)
        return self.threads_cpu_share * running

    @property
    def threads_compute_share(self) -> float | None:
        """The read threads' work as a share that computes (0..1): their CPU share, or 1
        where together they hold the GIL (``GIL_HELD`` cores or more): many threads each on
        a CPU a small share of their time, taking turns with the GIL, are not waiting on
        reads, and the same work in a worker process of its own would keep a core busy."""
        share = self.threads_cpu_share
        if share is None:
            return None
        return 1.0 if self.threads_hold_gil else share

    @property
    def threads_hold_gil(self) -> bool:
        """Whether the read threads kept ``GIL_HELD`` cores or more busy together."""
        cores = self.threads_cores
        return cores is not None and cores >= GIL_HELD

    @property
    def gil_held_in_process(self) -> bool:
        """Whether the pipeline runs on the training process's read threads (no workers)
        and they hold the GIL together: the training thread's untraced time is then its
        wait for it, the pipeline's cost."""
        return not self.workers and self.threads_hold_gil

    def to_dict(self) -> dict[str, Any]:
        """What ``analyze --json`` prints under ``input_stages``."""
        out: dict[str, Any] = {
            "dominant": self.dominant,
            "ms_per_batch": {s: self.ms_per_batch[s] for s in STAGES},
            "ms_per_step": {s: self.effective_ms[s] for s in STAGES},
            "where": {s: self.where[s] for s in STAGES},
        }
        if self.parallel is not None:
            out["parallel"] = {s: round(self.parallel[s], 2) for s in STAGES}
        if self.threads_cpu_share is not None:
            out["threads_cpu_share"] = round(self.threads_cpu_share, 3)
        if self.host_cpu_ms_per_step is not None:
            out["host_cpu_ms_per_step"] = round(self.host_cpu_ms_per_step, 3)
        return out

    def to_record(self) -> dict[str, Any]:
        """Every field, for files that keep the table (a sweep's ``sweep.json``)."""
        return {
            **self.to_dict(),
            "effective_ms": {s: self.effective_ms[s] for s in STAGES},
            "budget_ms": self.budget_ms,
            "workers": self.workers,
            "batches": self.batches,
            "worker_batch_ms": self.worker_batch_ms,
        }

    def pipeline_ms_per_step(self) -> float:
        """The pipeline stages' time per step, summed (read, preprocessing, batch): how
        often the pipeline can make a batch, to set against the step. Running flat out, it
        is the step (the stages scenario: 11.64 ms against an 11.97 ms step, 2 workers;
        21.97 against 22.52 on the training thread). The hand-over's wait and the transfer
        are the training thread's, beside it: in worker processes or threads the stages
        run while the loop waits."""
        return sum(self.effective_ms[s] for s in PIPELINE_STAGES)

    @classmethod
    def from_record(cls, data: Mapping[str, Any]) -> InputStages:
        """The table :meth:`to_record` wrote."""
        return cls(
            dominant=data["dominant"],
            ms_per_batch={s: float(data["ms_per_batch"][s]) for s in STAGES},
            where={s: data["where"][s] for s in STAGES},
            workers=int(data["workers"]),
            effective_ms={s: float(data["effective_ms"][s]) for s in STAGES},
            budget_ms=float(data["budget_ms"]),
            batches=int(data["batches"]),
            worker_batch_ms=float(data.get("worker_batch_ms") or 0.0),
            parallel=(
                {s: float(data["parallel"][s]) for s in STAGES} if data.get("parallel") else None
            ),
            threads_cpu_share=_float_or_none(data.get("threads_cpu_share")),
            host_cpu_ms_per_step=_float_or_none(data.get("host_cpu_ms_per_step")),
        )


def transfer_ns_per_step(events: ThreadEvents | None, steps: Steps) -> float:
    """Mean host-to-device transfer time per step on the training thread (``events``: its
    events, as :class:`~traceinspect.analysis.training_thread.HostActivity` holds them)."""
    if len(steps) == 0 or events is None or len(events) == 0:
        return 0.0
    transfers = events.named(N.TRANSFER_EVENT)
    starts = events.starts[transfers]
    ends = events.line.end_at(transfers)
    lo, hi = int(steps.starts[0]), int(steps.ends[-1])
    inside = np.clip(np.minimum(ends, hi) - np.maximum(starts, lo), 0, None)
    return float(inside.sum()) / len(steps)


def input_stages(
    sidecar: Sidecar | None,
    *,
    input_wait_ns_per_step: float,
    transfer_ns_per_step: float,
    device_ns_per_step: float,
) -> InputStages | None:
    """The stage table, or None when capture measured no Grain pipeline stages."""
    grain = sidecar.grain if sidecar is not None else None
    measured = grain.stages if grain is not None else None
    if grain is None or measured is None or measured.batches <= 0:
        return None
    # Workers' time went into the elements they made in the window, which differ from the
    # batches the loop drew by what their buffers gained or lost (one element is one batch
    # when the pipeline batches before mp_prefetch, as it should).
    made = measured.worker_elements or measured.batches
    per: dict[Place, int] = {"workers": made, "threads": measured.batches, "main": measured.batches}
    per_place: dict[Place, dict[Stage, float]] = {
        place: {
            stage: measured.seconds.get(place, {}).get(stage, 0.0) * 1e3 / per[place]
            for stage in PIPELINE_STAGES
        }
        for place in PLACES
    }
    if not any(v > 0 for row in per_place.values() for v in row.values()):
        return None
    workers = grain.worker_count or 0
    input_wait_ms = input_wait_ns_per_step / 1e6
    # Ran flat out: the workers busy producing at least half the window; the training
    # process's threads while the loop waited for input beyond the knee's tolerance.
    probe = grain.measured
    produce = sum(w.produce_s for w in probe.workers) if probe is not None else 0.0
    wall = sum(w.wall_s for w in probe.workers) if probe is not None else 0.0
    flat_out = {
        "workers": wall > 0 and produce / wall >= FLAT_OUT_BUSY,
        "threads": input_wait_ns_per_step > (KNEE_TOLERANCE - 1) * device_ns_per_step > 0,
        "main": False,
    }
    parallel = {
        place: parallelism(
            place,
            workers=workers,
            read_threads=grain.read_threads,
            thread_s=sum(measured.seconds.get(place, {}).values()),
            window_s=measured.window_s,
            flat_out=flat_out[place],
        )
        for place in PLACES
    }
    ms: dict[Stage, float] = {}
    eff: dict[Stage, float] = {}
    where: dict[Stage, Place] = {}
    # A stage that took no time is placed where the pipeline ran.
    busiest = max(PLACES, key=lambda p: sum(per_place[p].values()))
    at_once: dict[Stage, float] = {}
    for stage in PIPELINE_STAGES:
        ms[stage] = sum(per_place[p][stage] for p in PLACES)
        eff[stage] = sum(per_place[p][stage] / parallel[p] for p in PLACES)
        top = max(PLACES, key=lambda p: per_place[p][stage])
        where[stage] = top if per_place[top][stage] > 0 else busiest
        at_once[stage] = ms[stage] / eff[stage] if eff[stage] > 0 else parallel[where[stage]]
    on_main = sum(per_place["main"].values())
    ms["prefetch"] = eff["prefetch"] = max(0.0, input_wait_ms - on_main)
    at_once["prefetch"] = at_once["transfer"] = 1.0
    ms["transfer"] = eff["transfer"] = transfer_ns_per_step / 1e6
    where["prefetch"] = where["transfer"] = "main"
    pipeline = sum(eff[s] for s in PIPELINE_STAGES)
    if eff["prefetch"] > HANDOVER_MARGIN * pipeline:
        dominant: Stage = "prefetch"
    else:
        dominant = max(("read", "preprocessing", "batch", "transfer"), key=lambda s: eff[s])
    return InputStages(
        dominant=dominant,
        ms_per_batch={s: round(ms[s], 4) for s in STAGES},
        where=where,
        workers=workers,
        effective_ms={s: round(eff[s], 4) for s in STAGES},
        budget_ms=round(device_ns_per_step / 1e6, 4),
        batches=measured.batches,
        worker_batch_ms=round(sum(per_place["workers"].values()), 4) if workers else 0.0,
        parallel=at_once,
        threads_cpu_share=threads_cpu_share(measured),
        host_cpu_ms_per_step=(
            round(measured.process_cpu_s * 1e3 / measured.batches, 4)
            if measured.process_cpu_s is not None and not workers
            else None
        ),
    )


def _float_or_none(value: Any) -> float | None:
    return None if value is None else float(value)


def threads_cpu_share(measured: StagesMeasured) -> float | None:
    """The share of the read threads' stage time spent on a CPU: their CPU time over their
    stages' self time less the time they waited for a core (0..1), or None where capture
    did not measure it. A stage that waits on storage (the family's slow records, a 3 ms
    wait each) reads near 0, and such threads, or workers doing the same, may outnumber the
    cores; one that computes reads near 1 once its waits for a core are taken out."""
    stage_s = sum(measured.seconds.get("threads", {}).values())
    cpu_s = measured.thread_cpu_s.get("threads")
    if cpu_s is None or stage_s <= 0:
        return None
    running_s = stage_s - measured.thread_run_delay_s.get("threads", 0.0)
    return 1.0 if running_s <= cpu_s else cpu_s / running_s


def parallelism(
    place: Place,
    *,
    workers: int,
    read_threads: int | None,
    thread_s: float,
    window_s: float | None,
    flat_out: bool = False,
) -> float:
    """How many batches a place's stages work on at once: ``workers x read threads`` in the
    worker processes, the read threads in the training process, one on its main thread
    (read threads unknown: one); the measurement overrides it (the stages' thread time over
    the window's wall time, how many ran at once on average) where it says more, and where
    it says fewer while the place ran ``flat_out`` (see the module's doc)."""
    if place == "main":
        return 1.0
    threads = max(1, read_threads or 1)
    nominal = float(max(1, workers) * threads if place == "workers" else threads)
    if not window_s or window_s <= 0 or thread_s <= 0:
        return nominal
    observed = thread_s / window_s
    if flat_out:
        return max(1.0, observed)
    return max(nominal, observed)


def stage_advice(stages: InputStages) -> str:
    """What to do about the dominant stage, in Grain's terms."""
    d = stages.dominant
    cost = f"{stages.ms_per_batch[d]:.2f} ms per batch"
    if stages.workers and stages.where.get(d) == "workers":
        cost += f" in each of {stages.workers} worker(s)"
    head = f"The input pipeline's largest stage is {d} ({cost})"
    if d == "read":
        return (
            f"{head}: reading records. Read with more threads (grain.ReadOptions("
            "num_threads=...)), store records in ArrayRecord rather than one file per record "
            "or Parquet to decode, or cache the data on local disk."
        )
    if d == "preprocessing":
        return (
            f"{head}: the map transformations. Add workers while CPU is left (see the worker "
            "count), make the transformations cheaper or run them offline, or move "
            "augmentation onto the device (inside the jitted step)."
        )
    if d == "batch":
        return (
            f"{head}: stacking records into batches. Keep records as fixed-shape NumPy arrays "
            "(no Python objects per record) and batch inside the workers, before mp_prefetch."
        )
    if d == "transfer":
        return (
            f"{head}: host-to-device copies on the training thread. Transfer fewer, larger "
            "batches, and put the next batch on the device while the step runs (prefetch to "
            "device)."
        )
    return (
        f"{head}: the training thread waits "
        f"{stages.ms_per_batch['prefetch']:.2f} ms per batch for batches the pipeline makes "
        "faster than that. Raise the buffers (MultiprocessingOptions(per_worker_buffer_size="
        "...), ReadOptions(prefetch_buffer_size=...))."
    )
