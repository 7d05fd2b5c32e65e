"""``capture --attach``: snapshots of running jobs through their profiler servers, long
enough to hold the steps an analysis needs, and several of them compared.

The mechanics (XProf's client, the run directory, the errors) are
:mod:`traceinspect.capture.attach`; this module decides how long to trace: a job's step can
be 10 ms or 10 s, so by default a first snapshot of :data:`FIRST_S` seconds is read for its
steps, and when it holds fewer than :data:`MIN_STEPS` it is replaced by one long enough for
:data:`STEPS_WANTED` of them (at most :data:`MAX_S`).
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from traceinspect.capture.attach import AttachResult, attach

FIRST_S = 3.0
MIN_STEPS = 10
STEPS_WANTED = 20
MAX_S = 60.0


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """One attached capture and what sizing it found."""

    result: AttachResult
    #: Steps found in the first host's trace, and their median (ms); None when no step
    #: was found (the analysis says why).
    steps: int | None
    median_step_ms: float | None
    #: How the duration was chosen, when it was not given.
    note: str | None = None


def steps_in(run_dir: str) -> tuple[int, float] | None:
    """Steps of the first host's trace in ``run_dir`` and their median duration (ms)."""
    from traceinspect.analysis.steps import find_steps
    from traceinspect.trace import load

    first = sorted(Path(run_dir).glob("*.xplane.pb"))[0]
    steps = find_steps(load(first, use_cache=False))
    if len(steps) == 0:
        return None
    return len(steps), float(np.median(steps.ends - steps.starts)) / 1e6


def snapshot(
    addresses: tuple[str, ...],
    duration_s: float | None = None,
    **options: object,
) -> Snapshot:
    """One capture of the jobs at ``addresses``: ``duration_s`` long, or sized to hold
    :data:`STEPS_WANTED` steps when None (see the module doc)."""
    if duration_s is not None:
        result = attach(addresses, duration_s, **options)  # type: ignore[arg-type]
        found = steps_in(result.run_dir)
        return Snapshot(result, *(found or (None, None)))
    result = attach(addresses, FIRST_S, **options)  # type: ignore[arg-type]
    found = steps_in(result.run_dir)
    if found is None or found[0] >= MIN_STEPS:
        return Snapshot(result, *(found or (None, None)))
    count, median_ms = found
    longer = min(MAX_S, STEPS_WANTED * median_ms / 1000 * 1.1)
    if longer <= FIRST_S:
        return Snapshot(result, count, median_ms)
    shutil.rmtree(result.run_dir, ignore_errors=True)
    again = attach(addresses, longer, **options)  # type: ignore[arg-type]
    found_again = steps_in(again.run_dir)
    note = (
        f"a {FIRST_S:g} s trace held {count} step(s) of ~{median_ms:,.0f} ms: traced "
        f"{longer:.0f} s instead"
    )
    steps, median = found_again or (None, None)
    return Snapshot(again, steps, median, note)


def snapshots(
    addresses: tuple[str, ...],
    duration_s: float | None,
    every_s: float,
    count: int,
    on_snapshot: Callable[[int, Snapshot], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    **options: object,
) -> list[Snapshot]:
    """``count`` snapshots, one every ``every_s`` seconds (start to start)."""
    taken = []
    for i in range(count):
        began = time.monotonic()
        shot = snapshot(addresses, duration_s, **options)
        taken.append(shot)
        if on_snapshot is not None:
            on_snapshot(i, shot)
        if i + 1 < count:
            sleep(max(0.0, every_s - (time.monotonic() - began)))
    return taken
