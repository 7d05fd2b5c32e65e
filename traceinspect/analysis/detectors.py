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

from traceinspect.analysis.callbacks import Callbacks, host_callbacks
from traceinspect.analysis.input_stages import PIPELINE_STAGES, InputStages
from traceinspect.analysis.loop_cpu import LoopCpu, loop_cpu
from traceinspect.analysis.measure import Measured
from traceinspect.analysis.rules import Claim
from traceinspect.analysis.stalls import RecurringStall, StallNature, recurring_stall, stall_nature
from traceinspect.analysis.workers import WAITING_SHARE
from traceinspect.thresholds import KNEE_TOLERANCE, MATTERS

# The verdict a recurring stall gives the run, by what it is (evaluation is device work).
STALL_VERDICT: Final = {
    "checkpoint": "host-bound",
    "host": "host-bound",
    "sync": "host-bound",
    "unseen": "host-bound",
    "input": "input-bound",
    "compile": "compile-bound",
    "evaluation": "device-bound",
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
    the run's step time that matters, and what its occurrences in the window show."""
    sidecar = m.trace.sidecar
    if sidecar is None:
        return None
    found = recurring_stall(sidecar.steps)
    if found is None or found.share < MATTERS:
        return None
    base = m.trace.metadata.get("profile_start_time")
    nature = stall_nature(
        found, sidecar.steps, base if isinstance(base, int) else None, m.steps, m.gaps, m.host
    )
    claim = Claim("stall", found.share, "measured", STALL_VERDICT[nature.kind])
    return Found(claim, Stall(found, nature))


def callback(m: Measured) -> Found | None:
    """Host callbacks inside the jitted step, by their time per step."""
    found: Callbacks = host_callbacks(m.trace, m.steps, m.activity)
    if not len(found) or not m.step_ns:
        return None
    return Found(Claim("callback", found.ms_per_step * 1e6 / m.step_ns, "observed"), found)


def loop_cpu_stretch(m: Measured) -> Found | None:
    """On XLA's CPU backend: the loop's own CPU work on the training thread, which takes
    the cores the program runs on (an inferred cost: the program's stretch)."""
    if not len(m.steps):
        return None
    host = m.trace.sidecar.host if m.trace.sidecar else None
    found: LoopCpu | None = loop_cpu(
        m.host.loop_code, m.span, len(m.steps), host.cores if host else None
    )
    if found is None or not m.step_ns:
        return None
    return Found(Claim("loop_cpu", found.cost_ms_per_step * 1e6 / m.step_ns, "inferred"), found)


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
    if share is None or share < WAITING_SHARE:
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
