"""The run's detectors: causes that do not show as idle time of their own, as claims.

Each detector reads what :func:`~traceinspect.analysis.measure.measure` found and returns a
:class:`Found` (its :class:`~traceinspect.analysis.rules.Claim` and the detail its renderer
and advice need), or None. Detectors never decide and never write prose: the rules table
(``analysis/rules.py``) decides, ``analysis/explain.py`` and ``analysis/advice.py`` say it.

Which detectors run is data, :data:`DETECTORS`, chosen by the backend: the loop's CPU
competing with the program is a cost only where the program runs on the same cores.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from traceinspect.analysis.callbacks import Callbacks, host_callbacks
from traceinspect.analysis.executions import others_work_in
from traceinspect.analysis.input_stages import PIPELINE_STAGES, InputStages
from traceinspect.analysis.loop_cpu import LoopCpu, loop_cpu
from traceinspect.analysis.measure import Measured
from traceinspect.analysis.rules import Claim
from traceinspect.analysis.stall_kinds import StallNature, stall_nature
from traceinspect.analysis.stalls import RecurringStall, recurring_stall
from traceinspect.analysis.window import profiled_steps, window_steps
from traceinspect.analysis.workers_inputs import computes
from traceinspect.thresholds import KNEE_TOLERANCE, MATTERS

# The verdict a recurring stall gives the run, by what it is.
STALL_VERDICT: Final = {
    "checkpoint": "host-bound",
    "host": "host-bound",
    "sync": "host-bound",
    "unseen": "host-bound",
    "input": "input-bound",
    "compile": "compile-bound",
    "evaluation": "host-bound",  # device-bound where its programs kept the device busy
    "epoch": "input-bound",
    "gc": "host-bound",
    "logging": "host-bound",
}


@dataclass(frozen=True)
class Found:
    """What a detector found: the claim on the run's step time and the detector's own
    figures (a :class:`Stall`, :class:`~traceinspect.analysis.callbacks.Callbacks`, ...)."""

    claim: Claim
    detail: Any


@dataclass(frozen=True)
class Stall:
    """A stall recurring over the whole run and what its occurrences in the window show."""

    stall: RecurringStall
    nature: StallNature


@dataclass(frozen=True)
class PipelinePace:
    """A pipeline on the training process's read threads that paces the loop: its batch
    time (ms) and its stages."""

    batch_ms: float
    stages: InputStages


def stall(m: Measured) -> Found | None:
    """The stall recurring over the whole run (capture's sidecar), when it costs a share of
    the run's step time that matters, and what it is. A wait for input that the pipeline's
    own pace explains (:func:`_pipeline_pace`) is the input's, not a stall."""
    sidecar = m.trace.sidecar
    if sidecar is None:
        return None
    found = recurring_stall(sidecar.steps, profiled_steps(sidecar), window_steps(sidecar))
    if found is None or found.share < MATTERS:
        return None
    base = m.trace.metadata.get("profile_start_time")
    work_rows = np.array(m.activity.work_line_rows, dtype=np.int64)
    workers = sidecar.grain.worker_count if sidecar.grain is not None else None
    nature = stall_nature(
        found,
        sidecar.steps,
        base if isinstance(base, int) else None,
        m.steps,
        m.gaps,
        m.host,
        sidecar.run_events,
        workers,
        lambda spans, step_program: others_work_in(m.trace, work_rows, spans, step_program),
    )
    if nature.kind == "input" and _pipeline_pace(m, found, workers):
        return None
    verdict = "device-bound" if nature.kind == "evaluation" and nature.device_busy else None
    claim = Claim("stall", found.share, "measured", verdict or STALL_VERDICT[nature.kind])
    return Found(claim, Stall(found, nature))


def _pipeline_pace(m: Measured, found: RecurringStall, workers: int | None) -> bool:
    """Whether a recurring wait for input is the pipeline's pace: its batches come no faster
    than the run's step without the stall (its stage timers: the time a batch takes over
    the workers that make it), or, untimed, the wait recurs every few steps, once per worker
    (or every other step at none or one: the batches come in turns from the workers or the
    prefetch buffers). A slow file or shard switch recurs far apart, the pipeline keeping up
    between."""
    batch_ms = stage_batch_ms(m.stages)
    if batch_ms is not None:
        per_batch_ns = batch_ms * 1e6 / max(1, workers or 0)
        return per_batch_ns * KNEE_TOLERANCE >= found.expected_ns
    return found.period <= max(2, workers or 0)


def callback(m: Measured) -> Found | None:
    """Host callbacks inside the jitted step, by their time per step."""
    found: Callbacks = host_callbacks(m.trace, m.steps, m.activity)
    if not len(found) or not m.mean_step_ns:
        return None
    # A share of the run's step time, as the ledger's: its time per step (a mean over the
    # steps) over the mean step.
    return Found(Claim("callback", found.ms_per_step * 1e6 / m.mean_step_ns, "observed"), found)


def loop_cpu_stretch(m: Measured) -> Found | None:
    """On XLA's CPU backend: the loop's own CPU work on the training thread beside the
    running program, which takes the cores it runs on (an inferred cost: the program's
    stretch; the CPU while the device idles is the ledger's host time already)."""
    if not len(m.steps):
        return None
    host = m.trace.sidecar.host if m.trace.sidecar else None
    found: LoopCpu | None = loop_cpu(
        m.host.loop_code, m.span, len(m.steps), host.cores if host else None, m.busy
    )
    if found is None or not m.mean_step_ns:
        return None
    # Its cost per step is a mean over the steps: a share of the mean step, as the ledger's
    # (over the median, an Orbax loop whose asynchronous saves make its steps 11 ms at the
    # median and 53 ms on average read the copy's 2.5 ms a step as 22% of its step).
    share = found.cost_ms_per_step * 1e6 / m.mean_step_ns
    return Found(Claim("loop_cpu", share, "inferred"), found)


def stage_batch_ms(stages: InputStages | None) -> float | None:
    """What the worker rule sizes from the stage timers: the workers' thread time per batch
    where workers make the batches, else the stages' time per batch over the training
    process's read threads (those that ran on them)."""
    if stages is None:
        return None
    if stages.workers:
        return stages.worker_batch_ms
    threads = [s for s in PIPELINE_STAGES if stages.where[s] == "threads"]
    return sum(stages.effective_ms[s] for s in threads) if threads else None


def pipeline_paces(m: Measured) -> Found | None:
    """A pipeline on the training process's read threads that paces the loop though the
    loop hardly waits in ``next()``.

    Such a pipeline makes a batch no faster than the loop takes a step (within the knee's
    tolerance: it runs flat out) and spends most of its time on a CPU (its read threads'
    share at least WAITING_SHARE): its work then competes with the training thread for the
    GIL and the cores, and what the loop loses shows as slow dispatch and transfers (host
    time; on XLA's CPU backend, a slower program) more than as waiting for a batch. The
    family's records that burn 3 ms of CPU each on one read thread: 25.4 ms a step at 0
    workers, 19.5 at 2 (the sweep's knee), while default captures read the loop host-bound
    with the wait in next() at 7 ms a step. A pipeline that waits on storage leaves the GIL
    and the cores free, and one with time to spare does not pace the loop. Its claim: what
    the loop loses to it, host time and waiting for input."""
    stages, step_ms = m.stages, m.summary.typical_ms
    if stages is None or stages.workers or step_ms <= 0:
        return None
    share = stages.threads_compute_share
    if not computes(share):
        return None
    batch_ms = stage_batch_ms(stages)
    if batch_ms is None or batch_ms * KNEE_TOLERANCE < step_ms:
        return None
    lost = m.fractions["host"] + m.fractions["input"]
    return Found(Claim("pipeline_cpu", lost, "inferred"), PipelinePace(batch_ms, stages))


Detector = Callable[[Measured], "Found | None"]

#: The detectors by backend kind ("any": every backend).
DETECTORS: Final[dict[str, tuple[Detector, ...]]] = {
    "any": (stall, callback, pipeline_paces),
    "cpu": (loop_cpu_stretch,),
}


def detect(m: Measured) -> dict[str, Found]:
    """What the backend's detectors found, by cause."""
    chosen = (*DETECTORS["any"], *DETECTORS.get(m.activity.backend.kind, ()))
    return {f.claim.cause: f for f in (d(m) for d in chosen) if f is not None}


def run_part(m: Measured, found: Found) -> dict[str, object]:
    """A detector's part of the step: ms per step (a stall's own figure, spread over the
    run's steps; else its share of the window's mean step, the share's own denominator),
    share and basis."""
    claim = found.claim
    stalled = found.detail.stall.per_step_ns if isinstance(found.detail, Stall) else None
    ns = stalled if stalled is not None else claim.share * m.mean_step_ns
    return {"ms_per_step": round(ns / 1e6, 4), "share": round(claim.share, 4), "basis": claim.basis}
