"""The one counterfactual: the step expected once a cause is removed, and the floors under it.

Every expected step time the analysis prints (each recommendation's, the worker count's)
comes from :func:`expected_without`: what remains of the step once the cause's own time is
taken out, never below a floor that still holds without it. Which floors hold is data,
:data:`FLOORS_KEPT`, one row per cause, so "the step without X" is one formula whose parts can
be read and tested, instead of one ``max`` per recommendation.

The floors (one unit per call, ms or ns as the caller's figures):

- ``device``: the device's work per step (the step can go no faster than the programs);
- ``input``: the input pipeline's time per step on the training thread (a batch no faster
  than it is made);
- ``read``: where the loop reads a device value every step, its read floor
  (:func:`read_floor_ns`): read, own work and the device's run one after another;
- ``host_cpu``: the host's CPU work per step over its cores;
- ``pace``: the step the pipeline must keep up with (the worker count's: the device, the
  host's CPU floor or the read floor, whichever is highest);
- ``workers_cpu``: the workers' CPU per step over the cores they share;
- ``cores``: on XLA's CPU backend only (:data:`FLOORS_BY_BACKEND`), the device's work
  stretched by the host's work between programs (:func:`cores_floor_ns`). Without a
  per-step read the host prepares step N+1 while step N runs; on an accelerator that
  hides the preparation, but on the CPU backend the "device" is the host's cores, and the
  preparation (dispatch, the transfer, the read threads' turn at the GIL) takes one of the
  cores the program runs on.

And one part that is not a floor but is **added** (:data:`ADDED_UNLESS_REMOVED`): ``stall``, a
recurring stall's time spread over the run's steps (a synchronous checkpoint of 250 ms every
40 steps: ~6 ms a step). The host stops for it and the device with it, so it runs after
whatever else the step is waiting on: removing a per-step read or adding workers leaves it
there. Without it the advice promised a step the loop cannot reach (the family's per-step read
with a checkpoint every 40 steps: "remove the read: expected 10.62 ms", measured 15.8; a slow
pipeline with the same checkpoint: "3 workers: expected 12.61 ms", measured 19.1).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import numpy as np

from traceinspect import schema as S
from traceinspect.analysis.result import Table
from traceinspect.analysis.steps import Steps
from traceinspect.analysis.training_thread import HostActivity
from traceinspect.thresholds import MATTERS, READ_FLOOR_QUANTILE, READS_EVERY_STEP

#: The floors that still hold once a cause is removed. ``loop_cpu`` keeps no device floor:
#: the device's work it shows is stretched by the loop's CPU, and removing that work is what
#: shortens it. A callback keeps the ``cores`` floor as a read does: the host's work between
#: programs takes a core with it or without it (``advice_causes.callback_advice``: less the
#: callback's part of the device's work, as that floor is).
FLOORS_KEPT: Final[dict[str, tuple[str, ...]]] = {
    "sync": ("device", "input", "cores"),
    "callback": ("device", "input", "cores"),
    "loop_cpu": ("input",),
    "host": ("device", "input", "read"),
    "stall": ("device",),
    "input": ("device", "pace", "workers_cpu"),
}


#: The floors that only some backends have, by backend kind: ``cores`` where the program
#: runs on the host's cores (XLA's CPU backend).
FLOORS_BY_BACKEND: Final[dict[str, tuple[str, ...]]] = {"cpu": ("cores",)}


#: The idle causes that are the host's CPU work between programs (the preparation of the next
#: step after a read, the loop's own code, the runtime's launch): on XLA's CPU backend they
#: take a core the program runs on, with a read between steps or without.
HOST_WORK_IDLE: Final[tuple[str, ...]] = ("sync", "host", "runtime")


def cores_floor_ns(
    device_ns: float, host_idle_ns: float, input_ns: float, cores: int | None
) -> float | None:
    """The ``cores`` floor (ns): the device's work per step, stretched by the host's work
    between programs once it runs beside them: that work's time per step (the device's idle
    of the :data:`HOST_WORK_IDLE` causes, ``host_idle_ns``, less the input's, ``input_ns``:
    a wait for a batch holds no core, and the input has a floor of its own) over the
    ``cores`` the process may use, as the loop's own CPU beside a running program costs
    (:mod:`~traceinspect.analysis.loop_cpu`: ``C / N`` a step on ``N`` cores, 10 ms of it
    measured at 4.7 ms on 2). None without the cores.

    Measured (2 cores, jax 0.10.2, without the profiler): a ``.block_until_ready()`` every
    step over records from memory idled the device 1.3-1.9 ms a step after the read, all
    of it the host's work; the device's work alone promised 16-20% off without the read,
    this floor 5-12%, and the loop ran 8.1-10.2 ms without the read against 8.0-8.3 with
    it (no faster: the floor is still short of it there). Where the program leaves a core
    free the host's work hides more: ``print(float(loss))`` over the bundled MLP ran 3.57-3.89
    ms a step with the read and 1.82-2.91 without."""
    if not cores or cores < 1:
        return None
    return device_ns + max(0.0, host_idle_ns - input_ns) / cores


#: The parts of a run's step that are added to the step expected without any other cause:
#: they stop the host and the device together, one after the other with the rest.
ADDED_UNLESS_REMOVED: Final[tuple[str, ...]] = ("stall",)


def _kept(cause: str, floors: Mapping[str, float | None]) -> dict[str, float]:
    """The floors of :data:`FLOORS_KEPT` for ``cause`` that ``floors`` gives (None: unknown);
    a cause with no row is a KeyError."""
    kept = FLOORS_KEPT[cause]
    return {k: v for k, v in floors.items() if k in kept and v is not None}


def expected_without(cause: str, remaining: float, floors: Mapping[str, float | None]) -> float:
    """The step expected without ``cause``: ``remaining`` (the part of today's step that
    stays: 0 where, the cause removed, the host runs ahead and the floors alone set the
    step), never below the floors of :data:`FLOORS_KEPT` for that cause that ``floors``
    gives (None: unknown), plus the parts of :data:`ADDED_UNLESS_REMOVED` that ``floors``
    gives, unless ``cause`` is that part. ``remaining`` and the floors exclude those parts
    (a window's typical step, a run's step without its stalls). The only place a step is
    bounded below by its floors."""
    step = max([remaining, *_kept(cause, floors).values()])
    added = (v for k, v in floors.items() if k in ADDED_UNLESS_REMOVED and k != cause and v)
    return step + sum(added)


def binding_floor(cause: str, remaining: float, floors: Mapping[str, float | None]) -> str | None:
    """The floor that sets the step :func:`expected_without` gives for ``cause``: the highest
    of its :data:`FLOORS_KEPT` that ``floors`` gives, when it is above ``remaining`` (the
    part of today's step that stays); None when ``remaining`` sets it or no floor is known.
    What the advice names as the limit once the cause is gone."""
    kept = _kept(cause, floors)
    if not kept:
        return None
    value, name = max((v, k) for k, v in kept.items())
    return name if value > remaining else None


#: The floors measured in the traced window, in its pace (the others are the run's): the
#: device's work and the input's, the ``cores`` floor made of the device's work and the host's,
#: and the read floor made of the window's steps.
TRACED_FLOORS = frozenset({"device", "input", "cores", "read"})


#: The backends whose programs the profiler slows: XLA's CPU backend runs them on the host's
#: cores, beside the profiler's own work on them (5-20% slower steps traced than untraced,
#: ``analysis/window.py``). An accelerator's programs run at their pace under it.
SLOWED_BY_PROFILER: Final = frozenset({"cpu"})


def run_floors(floors: Mapping[str, float | None], slowdown: float) -> dict[str, float | None]:
    """The window's floors in the run's pace, for every expected step: those of
    :data:`TRACED_FLOORS`, measured under the profiler, over how much slower it ran the
    window's steps than the unprofiled ones (``slowdown``: a recurring stall's
    :attr:`~traceinspect.analysis.stalls.RecurringStall.traced_slowdown`, else, on the
    backends of :data:`SLOWED_BY_PROFILER`, the window's against capture's untraced steps
    after it; at most 1.0 leaves them as they are).

    Measured (2 cores, a per-step read with 4 ms of the loop's own waiting, 900 steps, both
    stacks): the window's device work, 12.34 ms a step in a window traced 12.5% slower than
    its untraced steps, was longer than the whole step measured without the read (11.88 ms):
    "remove the read" was measured 20% faster than expected from the window's floors, 11%
    from the run's; over the four captures of that loop that advised it (1 on Python 3.11 +
    jax 0.10.2, 3 on 3.12 + jax 0.12), -2 to -20% from the window's, -5 to -11% from the
    run's (``two_causes-long-analysed.json``, with the cores floor of a typical step)."""
    if slowdown <= 1.0:
        return dict(floors)
    return {
        k: (v / slowdown if k in TRACED_FLOORS and v is not None else v) for k, v in floors.items()
    }


def gains_nothing(cause: str, floors: Mapping[str, float | None], step_ns: float) -> bool:
    """Whether removing ``cause`` would leave the step where it is: the step expected
    without it (the host running ahead, the floors alone setting the step) no faster, by
    :data:`~traceinspect.thresholds.MATTERS`, than the window's typical step ``step_ns``
    (both in the window's pace, the parts of :data:`ADDED_UNLESS_REMOVED` left out of
    both). The trace's idle time after a read may be no loss: on XLA's CPU backend the
    host's preparation of the next step takes a core the program runs on (the ``cores``
    floor: the family's ``.block_until_ready()`` every step over a pipeline that keeps up
    ran no faster without the read, and analyze called it sync-bound)."""
    return step_ns > 0 and ahead_without(cause, floors) >= step_ns * (1.0 - MATTERS)


def ahead_without(cause: str, floors: Mapping[str, float | None]) -> float:
    """The step expected without ``cause`` once the host runs ahead, the floors alone
    setting it, in the window's pace: the parts of :data:`ADDED_UNLESS_REMOVED` left out,
    as the window's typical step leaves them out (:func:`gains_nothing` compares the two)."""
    kept = {k: v for k, v in floors.items() if k not in ADDED_UNLESS_REMOVED}
    return expected_without(cause, 0.0, kept)


def read_floor_ns(per_step: Table) -> float:
    """The step a loop that reads a device value every step runs at with its input free
    (ns): its read, its own work and the device's then run one after another, as they do
    now between its waits for input. The low tail (``READ_FLOOR_QUANTILE``) of the steps'
    time less that wait, never below the device's work at the same quantile.

    Steps without device work of their own are left out (all are taken when none has
    any): a window's first step can be a sliver of host time before the device's first
    work (both kept GPU captures of the family hold one, 0.87 and 0.49 ms), which in a
    window of under ~10 steps would set the low tail by itself."""
    wall = np.asarray(per_step[S.WALL_NS], dtype=float)
    rest = wall - np.asarray(per_step[S.INPUT_WORK_NS], dtype=float)
    device = np.asarray(per_step[S.DEVICE_WORK_NS], dtype=float)
    worked = np.isfinite(device) & (device > 0)
    if worked.any():
        rest, device = rest[worked], device[worked]
    rest, device = rest[np.isfinite(rest)], device[np.isfinite(device)]
    floors = [float(np.quantile(v, READ_FLOOR_QUANTILE)) for v in (rest, device) if len(v)]
    # The higher of two low tails: the serial part's, and the device's under it.
    return float(np.max(floors)) if floors else 0.0


def reads_every_step(host: HostActivity, steps: Steps) -> bool:
    """Whether the loop blocks on a read of a device value in (nearly) every step
    (``READS_EVERY_STEP`` of them)."""
    reads = host.sync_events
    if len(steps) == 0 or len(reads.starts) == 0:
        return False
    k = np.searchsorted(steps.starts, reads.starts, side="right") - 1
    inside = (k >= 0) & (reads.starts < steps.ends[np.maximum(k, 0)])
    return len(np.unique(k[inside])) >= READS_EVERY_STEP * len(steps)
