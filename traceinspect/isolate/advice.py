"""The worker count an input-bound verdict advises (``analyze``'s model) and its words."""

from __future__ import annotations

import dataclasses

from traceinspect.analysis.result import Recommendation
from traceinspect.analysis.workers import (
    WorkerInputs,
    computes,
    recommend_workers,
    worker_inputs,
)
from traceinspect.isolate.evidence import Evidence


def _worker_advice(target_ms: float, loader_ms: float, evidence: Evidence) -> Recommendation | None:
    """The worker count by ``analyze``'s model (:mod:`traceinspect.analysis.workers`): the
    step with free input is the pace a batch must beat; the loader phase's measurement of
    its workers (a batch's cost to one worker, their CPU share) sizes the count, within the
    cores and memory; without it, each worker is taken to make a batch every
    ``workers x loader`` ms. Without workers, the count to move the pipeline into. None when
    no phase saw how the run uses Grain."""
    if evidence.workers is None:
        return None
    if evidence.workers == 0 or evidence.loader is not None:
        # Without workers the pipeline ran on the training process's read threads: alone it
        # made a batch every loader_ms, as a worker process running it would; the read
        # threads' CPU share says how many such workers the cores run (the Evidence holds
        # the share only then). With workers, their measurement in the loader phase sizes
        # the count, and the host's CPU work per step with them bounds the pace.
        inputs = worker_inputs(
            "input-bound",
            step_ms=loader_ms,
            device_busy_ms=target_ms,
            input_wait_ms=evidence.input_wait_ms or 0.0,
            sidecar=evidence.loader,
            stage_batch_ms=loader_ms if evidence.workers == 0 else None,
            stage_cpu_share=evidence.threads_cpu_share,
            host_cpu_ms_per_step=evidence.host_cpu_ms_per_step,
        )
        inputs = dataclasses.replace(
            inputs, current=evidence.workers, cpus=inputs.cpus or evidence.cores
        )
        measured = inputs.measured
        floor_cpu = _host_cpu_with_workers(evidence)
        if measured is not None and evidence.workers and floor_cpu is not None:
            bound = _cpu_backend_floor(
                evidence, target_ms, evidence.workers_cpu_ms_per_batch, floor_cpu, inputs.cpus
            )
            inputs = dataclasses.replace(
                inputs, measured=dataclasses.replace(measured, host_cpu_ms_per_step=floor_cpu)
            )
        elif evidence.workers == 0 and evidence.host_cpu_ms_per_step is not None:
            bound = _cpu_backend_floor(
                evidence,
                target_ms,
                _pipeline_cpu_in_process(evidence),
                evidence.host_cpu_ms_per_step,
                inputs.cpus,
            )
        else:
            bound = None
        if bound is not None:
            inputs = dataclasses.replace(inputs, host_floor_ms=bound[0], host_floor_basis=bound[1])
    else:
        inputs = WorkerInputs(
            verdict="input-bound",
            step_ms=loader_ms,
            device_busy_ms=target_ms,
            input_wait_ms=evidence.input_wait_ms or 0.0,
            current=evidence.workers,
            cpus=evidence.cores,
            memory_available_bytes=None,
            bytes_per_batch=None,
            per_worker_buffer_size=None,
            read_threads=None,
            maxtext=False,
        )
    return recommend_workers(inputs)


def _host_cpu_with_workers(evidence: Evidence) -> float | None:
    """The host's CPU work per step once the workers keep up (ms): the training process's
    per step in the real phase (the step's own work, taking batches from the workers, on
    XLA's CPU backend the device's work too), else the target phase's, plus what the
    workers spend on a batch (in the real phase, else the loader's). Over the cores it
    bounds the step, as analyze's CPU floor does. The family's one waiting worker: a target
    step of 7.0-7.8 ms took 13-14 ms of CPU, a real step 15-17 ms, the worker 3-4 ms a
    batch; sized by the target step alone isolate said 7-8 workers where the timed sweep's
    best step was 9.1-10.6 ms and its knee 4; with the floor (8.0-10.8 ms), 6 in 7 of 9
    runs on three such loops, 7 in two."""
    step = evidence.host_cpu_ms_per_step or evidence.target_cpu_ms_per_step
    batch = evidence.workers_cpu_ms_per_batch
    if step is None or batch is None:
        return None
    return step + batch


def _pipeline_cpu_in_process(evidence: Evidence) -> float | None:
    """Without workers, the pipeline's CPU per batch in the training process (ms): the real
    phase's CPU per step less the target phase's (the same loop with input free), or None
    without both clocks. Moved into workers, that work runs on the same cores. The real
    loop, starved for input, also spends CPU waking from its waits: the figure errs high,
    toward fewer workers and a slower step expected."""
    real, target = evidence.host_cpu_ms_per_step, evidence.target_cpu_ms_per_step
    if real is None or target is None:
        return None
    return max(0.0, real - target)


def _cpu_backend_floor(
    evidence: Evidence,
    target_ms: float,
    batch: float | None,
    host_cpu_ms: float,
    cores: int | None,
) -> tuple[float, str] | None:
    """On XLA's CPU backend, the step with free input plus the pipeline's CPU per batch
    (``batch``, ms: the workers', or without workers the training process's
    :func:`_pipeline_cpu_in_process`) over the cores (ms), and how it was reached, in
    words, where that bounds the step more tightly than the host's CPU per step
    (``host_cpu_ms``: :func:`_host_cpu_with_workers`, or without workers the real phase's)
    over the cores; None elsewhere, or without the figures.

    Both bound the step once the workers keep up. The CPU over the cores takes the step's
    work to pack perfectly on them, which on the CPU backend it does not: XLA splits a step
    over the cores and waits for its slowest part (the family's target steps kept 2 cores
    82-91% busy). The target step measured that packing, and the workers' work has to run
    on the same cores. On 13 isolate runs of one and two waiting workers (2026-11-27) the
    CPU over the cores read 8.8-10.9 ms, and 7 workers twice, where the best timed step was
    10.3-10.7 ms and the knee 4; the tighter of the two read 9.2-10.9 ms and 5-6 workers.
    With it, 18 runs on both stacks gave every count within [knee, knee + 2] and every
    expected step within 20% of the step timed at that count (the target step scaled by the
    real loop's CPU, tried first, read 16-22% high on a loop under a per-step read: that
    CPU, clocked while the loop starved, holds the wake-ups of an idle step). A pipeline on
    the training process's read threads, moved into workers, is the same case: on 18 runs
    of three such loops (2026-11-28) the real phase's CPU over the cores expected up to 27%
    below the step timed at the count (5 beyond 20%), this bound up to 22% (3 beyond 20%;
    9 of them run with it: 1); worker processes cost more CPU per batch than the read
    thread did, which neither bound sees. Off the CPU backend the device's work runs beside
    the host's, and the CPU over the cores stands."""
    if not evidence.cpu_backend or not cores or batch is None:
        return None
    floor = target_ms + batch / cores
    if floor <= host_cpu_ms / cores:
        return None
    whose = "the workers'" if evidence.workers else "the pipeline's (in the training process)"
    basis = (
        f"the step with free input ({target_ms:.2f} ms, on XLA's CPU backend the cores' work) "
        f"and {whose} {batch:.2f} ms of CPU per batch on {cores} core(s)"
    )
    return floor, basis


def _input_advice(advice: Recommendation | None, evidence: Evidence) -> str:
    if advice is None or advice.value is None:
        return (
            " The pipeline runs in the training process: move it into Grain worker processes "
            "(mp_prefetch), or give it more read threads."
        )
    text = f" {advice.message}"
    share = evidence.workers_cpu_share
    if computes(share) and advice.bounded_by != "cores":
        text += (
            f" The workers were on CPU {share:.0%} of the time they produced a batch: "
            f"CPU-bound workers beyond the {evidence.cores or 'available'} cores will not "
            "help; make the preprocessing cheaper or do it offline."
        )
    if evidence.workers == 0 and advice.value >= 1:
        # Sized from the training process's own pipeline: on 18 isolate runs of three such
        # loops (2026-11-28, `sample_traces/scenarios/family/MEASUREMENTS.md`) every expected
        # step that missed by over 20% (3) lay below the step timed at the count, never above.
        text += (
            " Worker processes spend CPU of their own on each batch and on handing it to the "
            "training process, which a run without workers does not measure: the step may "
            "land above this; traceinspect sweep times each count."
        )
    return text
