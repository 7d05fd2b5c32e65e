"""Reads of device values made while the next program already waits on the device.

A loop that dispatches step N and then reads step N-1's loss (MaxText's metric logger: a
buffer of one step) blocks until step N-1 ends, but the device goes straight on to step N:
the read holds the host to one step ahead of the device and costs the device nothing. Such
a read is no per-step sync, and "log the previous step's metrics instead" is what the loop
already does. What it costs is the device's idle time after the read, measured as usual.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from traceinspect.analysis.executions import StepWork
from traceinspect.analysis.steps import Steps, nested_spans
from traceinspect.analysis.training_thread import Reads


@dataclass(frozen=True)
class ReadsBehind:
    """The training thread's blocking reads that returned while its next program waited."""

    reads: int  # outermost blocking reads inside the steps
    behind: int  # of them, those that returned while a dispatched program waited
    steps_with_behind: float  # share of steps with such a read
    wait_ms: float  # median over those steps of the time such reads blocked the host


def reads_behind(sync_events: Reads, work: StepWork, steps: Steps) -> ReadsBehind:
    """Count the outermost reads inside the steps, and those that began after the host had
    dispatched a program that then ran on past the read's end: the value read was an
    earlier program's, and the device had the next one."""
    starts, ends = sync_events.starts, sync_events.ends
    if len(starts):
        order = np.argsort(starts, kind="stable")
        starts, ends = starts[order], ends[order]
        outer = ~nested_spans(starts, ends)
        starts, ends = starts[outer], ends[outer]
    inside = (starts >= steps.starts[0]) & (ends <= steps.ends[-1])
    starts, ends = starts[inside], ends[inside]
    # The latest end of the executions dispatched before each read began: past the read's
    # end, the read waited for an earlier one (a read of a step's own value ends with it:
    # the host wakes once its program ends).
    order = np.argsort(work.dispatched_ns, kind="stable")
    latest = np.maximum.accumulate(work.exec_end_ns[order]) if len(order) else order
    k = np.searchsorted(work.dispatched_ns[order], starts, side="right") - 1
    behind = np.zeros(len(starts), dtype=bool)
    ok = k >= 0
    behind[ok] = latest[k[ok]] > ends[ok]
    step_of = np.searchsorted(steps.starts, starts[behind], side="right") - 1
    per_step = np.bincount(step_of, weights=(ends - starts)[behind], minlength=len(steps))
    waited = per_step[np.bincount(step_of, minlength=len(steps)) > 0]
    return ReadsBehind(
        reads=len(starts),
        behind=int(behind.sum()),
        steps_with_behind=len(waited) / len(steps) if len(steps) else 0.0,
        wait_ms=float(np.median(waited)) / 1e6 if len(waited) else 0.0,
    )
