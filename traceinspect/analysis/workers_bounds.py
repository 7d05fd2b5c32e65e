"""A worker count's bounds: its headroom, the pace a batch must beat, the core and memory caps."""

from __future__ import annotations

import math
from typing import Any

from traceinspect.analysis.workers_inputs import WorkerInputs
from traceinspect.thresholds import MATTERS

HEADROOM = 1.25
# A Grain worker is a Python process holding the pipeline's modules: what one costs in RAM
# besides its buffered batches (measured on this project's machine: ~150-250 MB RSS).
WORKER_OVERHEAD_BYTES = 256 << 20
MEMORY_SHARE = 0.8  # of the memory available at capture time


def _per_worker_bytes(inputs: WorkerInputs) -> int:
    # The probe's memory of every worker it saw, not only of those that made a batch in the
    # window (``inputs.measured`` is None where none did: a window of buffered batches).
    rss = inputs.worker_rss_bytes or (inputs.measured.rss_bytes if inputs.measured else None)
    overhead = rss or WORKER_OVERHEAD_BYTES
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


def _never_slower(rec: dict[str, Any], measured_ms: float, current_ms: float | None = None) -> str:
    """Keep the count in use where the count the model chose expects a step slower than both
    the one just measured (``measured_ms``, the run's step) and the one the same model
    expects at the count in use (``current_ms``; None: not known): the model's floors are
    lower bounds, and a change it expects to lose time is no advice (Grain's tutorial loop,
    told 3 workers and captured again at 37.3 ms a step, was told "at most 2 ... expected
    52.39 ms", its workers' batch over 2). A floor that lies above the measured step bounds
    every count alike and says nothing about the change: there the count stands on its own
    terms, its expected step the one measured (MaxText's tiny config at 4 idle workers, its
    device's 391 ms of work per step a mean over a window whose typical step was 2% above
    it, was told to keep 4 in 1 of 4 CI captures where the mean crossed the typical step).
    More workers must also gain: a count above the one in use whose expected step is not
    faster than the measured one by :data:`~traceinspect.thresholds.MATTERS` is kept too
    (more processes, memory and CPU for nothing the model can show). Without that margin the
    advice flipped with each capture's noise: records that compute on 4 read threads beside
    a slow device step, told "2 workers" where the host's CPU floor came 2% under the step
    and "keep 0" where it came 0.6% over, 2 workers timed 23-33% slower than expected.
    Returns the clause the reason adds ("" where the count stands)."""
    value, current, expected = rec["value"], rec["current"], rec["expected_step_ms"]
    if value is None or current is None or value == current or measured_ms <= 0:
        return ""
    # Both as printed (the expected step is rounded to the µs).
    bar = round(measured_ms * (1.0 - MATTERS) if value > current else measured_ms, 3)
    if expected is None or expected <= bar:
        return ""
    if current_ms is not None and expected <= round(current_ms, 3):
        rec["expected_step_ms"] = round(measured_ms, 3)
        return ""
    rec["value"] = current
    rec["expected_step_ms"] = round(measured_ms, 3)
    rec["bounded_by"] = "measurement"
    than = "slower than" if expected > measured_ms else f"no faster by {MATTERS:.0%} than"
    return (
        f"; at {value} worker(s) the step would be about {expected:.2f} ms, {than} the "
        f"{measured_ms:.2f} ms measured at {current}, so keep {current}"
    )
