"""Training steps: where each step starts and ends, and which thread drives them.

Sources, in order of preference (the first that yields at least two steps wins):

1. ``StepTraceAnnotation`` events (stat ``step_num``) on the host.
2. ``traceinspect/step`` events written by ``traceinspect capture``.
3. A device ``Steps`` line (TensorFlow / XProf step events).
4. TensorFlow ``group_id`` stats: one step per group, spanning its events.
5. Repeated executions of the same XLA program: TPU ``XLA Modules`` events, else the
   most called ``PjitFunction(...)`` on the host.
6. The steps ``traceinspect capture`` timed on the host (its sidecar), placed on the
   trace's clock through the profile start time the trace records.

A step runs from its start to the next step's start, so host work between two annotated
bodies (logging, the next batch) belongs to the step before; the last step ends where
its own event ends. Steps that start before the profile began or end after it stopped
are partial and dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from traceinspect import names as N
from traceinspect import schema as S
from traceinspect.analysis.arrays import most_common
from traceinspect.trace import Trace


@dataclass(frozen=True, eq=False)
class Steps:
    """Step windows ``[starts[i], ends[i])`` (ns), sorted, with their numbers."""

    source: str  # e.g. "StepTraceAnnotation 'train'"
    starts: np.ndarray
    ends: np.ndarray
    numbers: np.ndarray  # step_num where known, else 0, 1, 2...
    main_line_row: int | None  # the host thread that drives the steps, when known
    dropped: int  # partial steps left out at the edges
    marker_names: tuple[str, ...] = ()  # step envelope events (not work) on that thread
    #: Each step is one call of a jitted function (no step markers: the most repeated call).
    one_call_each: bool = False

    def __len__(self) -> int:
        return len(self.starts)

    @property
    def wall_ns(self) -> np.ndarray:
        return self.ends - self.starts


def _windows(
    source: str,
    starts: np.ndarray,
    ends: np.ndarray,
    numbers: np.ndarray,
    main_line_row: int | None,
    lo: int,
    hi: int,
    marker_names: tuple[str, ...] = (),
) -> Steps:
    order = np.argsort(starts, kind="stable")
    starts, ends, numbers = starts[order], ends[order], numbers[order]
    # Each step lasts until the next one starts; the last one until its own end.
    window_ends = np.concatenate((starts[1:], ends[-1:])) if len(starts) else ends
    complete = (starts >= lo) & (window_ends <= hi) & (window_ends > starts)
    return Steps(
        source=source,
        starts=starts[complete].astype(np.int64),
        ends=window_ends[complete].astype(np.int64),
        numbers=numbers[complete].astype(np.int64),
        main_line_row=main_line_row,
        dropped=int((~complete).sum()),
        marker_names=marker_names,
    )


def _annotated(trace: Trace, lo: int, hi: int) -> Steps | None:
    c = trace.columns
    line_of = c.events[S.LINE_ROW]
    # The code of the step events `traceinspect capture` writes (-1: none in the trace).
    capture_code = c.event_names.index(N.ANN_STEP) if N.ANN_STEP in c.event_names else -1
    annotations = c.stat_rows(N.STEP_NUM)
    if len(annotations["owner"]) >= 1:
        rows, numbers = annotations["owner"], annotations[S.INT_VALUE]
        # The line holding most of them (annotations may be on several).
        on_line = line_of[rows] == most_common(line_of[rows])
        rows, numbers = rows[on_line], numbers[on_line]
        # One annotation name per step: the user's own, rather than the copy that
        # `traceinspect capture` writes around the same steps.
        codes = c.events[S.NAME][rows]
        own = codes != capture_code
        name = most_common(codes[own] if own.any() else codes)
        rows, numbers = rows[codes == name], numbers[codes == name]
        starts, ends = trace.columns.spans(rows)
        return _windows(
            f"StepTraceAnnotation {c.event_names[name]!r}",
            starts,
            ends,
            numbers,
            int(line_of[rows[0]]),
            lo,
            hi,
            (c.event_names[name], N.ANN_STEP),  # both envelopes, never work
        )
    if capture_code < 0:
        return None
    marked = np.flatnonzero(c.events[S.NAME] == capture_code)
    if len(marked) >= 1:
        marked = marked[line_of[marked] == most_common(line_of[marked])]
        starts, ends = trace.columns.spans(marked)
        return _windows(
            "traceinspect capture steps",
            starts,
            ends,
            np.arange(len(marked)),
            int(line_of[marked[0]]),
            lo,
            hi,
            (N.ANN_STEP,),
        )
    return None


def _device_steps_line(trace: Trace, lo: int, hi: int) -> Steps | None:
    c = trace.columns
    planes = c.plane_of_line()
    counts = c.lines[S.EVENT_COUNT]
    candidates = [
        row
        for row, (name, plane) in enumerate(zip(c.line_name(), planes, strict=True))
        if name == N.STEPS_LINE and plane.startswith("/device:") and counts[row] > 0
    ]
    if not candidates:
        return None
    best = max(candidates, key=lambda row: (counts[row], -row))
    rows = np.flatnonzero(c.events[S.LINE_ROW] == best)
    if len(rows) < 2:
        return None
    starts, ends = trace.columns.spans(rows)
    return _windows(
        f"device Steps line on {planes[best]}",
        starts,
        ends,
        np.arange(len(rows)),
        None,
        lo,
        hi,
    )


def _group_ids(trace: Trace, lo: int, hi: int) -> Steps | None:
    groups = trace.columns.stat_rows(N.GROUP_ID)
    ids = groups[S.INT_VALUE]
    distinct, group = np.unique(ids, return_inverse=True)
    if len(distinct) < 2:
        return None
    starts, ends = trace.columns.spans(groups["owner"])
    first = np.full(len(distinct), np.iinfo(np.int64).max, dtype=np.int64)
    last = np.full(len(distinct), np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(first, group, starts)
    np.maximum.at(last, group, ends)
    return _windows("TensorFlow group_id", first, last, distinct, None, lo, hi)


def _repeated_program(trace: Trace, lo: int, hi: int) -> Steps | None:
    c = trace.columns
    line_of = c.events[S.LINE_ROW]
    planes = c.plane_of_line()
    module_lines = np.array(
        [
            name == "XLA Modules" and plane.startswith("/device:")
            for name, plane in zip(c.line_name(), planes, strict=True)
        ],
        dtype=bool,
    )
    modules = np.flatnonzero(module_lines[line_of]) if module_lines.any() else np.empty(0, int)
    if len(modules):
        first_device = planes[int(line_of[modules[0]])]
        on_device = np.array([p == first_device for p in planes], dtype=bool)
        modules = modules[on_device[line_of[modules]]]
        codes = c.events[S.NAME][modules]
        distinct, counts = np.unique(codes, return_counts=True)
        top = int(np.argmax(counts))
        if counts[top] >= 2:
            name = c.event_names[int(distinct[top])]
            runs = modules[codes == distinct[top]]
            starts, ends = trace.columns.spans(runs)
            return _windows(
                f"repeated XLA module {name!r} on {first_device}",
                starts,
                ends,
                np.arange(len(runs)),
                None,
                lo,
                hi,
            )
    pjit = np.array([N.PJIT.match(n) is not None for n in c.event_names], dtype=bool)
    if not pjit.any():
        return None
    calls = np.flatnonzero(pjit[c.events[S.NAME]])
    # Calls per (line, function), in order of line then name, as a grouping would list them.
    keys = line_of[calls].astype(np.int64) * len(c.event_names) + c.events[S.NAME][calls]
    distinct, counts = np.unique(keys, return_counts=True)
    best = int(np.argmax(counts))
    if counts[best] < 2:
        return None
    line_row, code = divmod(int(distinct[best]), len(c.event_names))
    runs = calls[keys == distinct[best]]
    starts, ends = trace.columns.spans(runs)
    # Nested calls of the same function (a wrapper calling itself) count once.
    outer = ~nested_spans(starts, ends)
    steps = _windows(
        f"repeated calls of {c.event_names[code]}",
        starts[outer],
        ends[outer],
        np.arange(int(outer.sum())),
        line_row,
        lo,
        hi,
    )
    return replace(steps, one_call_each=True)


def nested_spans(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Spans that lie inside an earlier span (by start) of the same frame."""
    order = np.argsort(starts, kind="stable")
    reach = np.maximum.accumulate(ends[order])
    inside = np.zeros(len(starts), dtype=bool)
    inside[order[1:]] = starts[order[1:]] < reach[:-1]
    return inside


def _sidecar_steps(trace: Trace, lo: int, hi: int) -> Steps | None:
    base = trace.metadata.get("profile_start_time")
    if trace.sidecar is None or not isinstance(base, int):
        return None
    # A traced step without a next one (the script ended inside the window) has no end.
    traced = [
        s
        for s in trace.sidecar.steps
        if s.traced and s.start_unix_ns is not None and s.wall_ms is not None
    ]
    if not traced:
        return None
    starts = np.array([s.start_unix_ns or 0 for s in traced], dtype=np.int64) - base
    ends = starts + np.array([round((s.wall_ms or 0.0) * 1e6) for s in traced], dtype=np.int64)
    numbers = np.array(
        [s.index if s.step_num is None else s.step_num for s in traced], dtype=np.int64
    )
    return _windows("steps timed by traceinspect capture", starts, ends, numbers, None, lo, hi)


def find_steps(trace: Trace) -> Steps:
    """The steps of a trace from the best available source (may hold zero steps): those of
    capture's window where the trace began before it (capture's early trace went on as the
    window's)."""
    lo, hi = trace.start_ns, trace.end_ns
    for finder in (_annotated, _device_steps_line, _group_ids, _repeated_program, _sidecar_steps):
        steps = finder(trace, lo, hi)
        if steps is not None and len(steps) >= 1:
            return _from_window(trace, steps)
    return Steps("none", *(np.empty(0, np.int64),) * 3, main_line_row=None, dropped=0)


def window_start(trace: Trace) -> int | None:
    """Where capture's window opened, in the trace's time (ns), when the trace began before
    it: the start of its first step (capture's early trace, from step 2, went on as the
    window's once the run was steady). None otherwise."""
    base = trace.metadata.get("profile_start_time")
    sidecar = trace.sidecar
    window = sidecar.window if sidecar is not None else None
    if window is None or window.first_step is None or not isinstance(base, int):
        return None
    first = next((s for s in sidecar.steps if s.index == window.first_step), None)  # type: ignore[union-attr]
    if first is None or first.start_unix_ns is None:
        return None
    at = first.start_unix_ns - base
    return at if at > trace.start_ns else None


def _from_window(trace: Trace, steps: Steps) -> Steps:
    """``steps`` without those before capture's window (the warm-up the early trace holds;
    not counted as dropped at the edges), and without the last one when the script ended
    inside the window or before it opened: that step's end is the script's way out (the
    interpreter's exit, Grain's workers shutting down), not the next step's start (counted
    as dropped at the edges)."""
    keep = np.ones(len(steps.starts), dtype=bool)
    at = window_start(trace)
    if at is not None:
        keep &= steps.starts >= at
    window = trace.sidecar.window if trace.sidecar is not None else None
    dropped = steps.dropped
    if window is not None and not window.complete and keep.any():
        last = int(np.flatnonzero(keep)[-1])
        if steps.ends[last] >= _last_step_end(trace):
            keep[last] = False
            dropped += 1
    if keep.all():
        return steps
    return replace(
        steps,
        starts=steps.starts[keep],
        ends=steps.ends[keep],
        numbers=steps.numbers[keep],
        dropped=dropped,
    )


def _last_step_end(trace: Trace) -> int:
    """Where the last step of a capture that ended inside its window may end at the
    earliest to be the script's way out: the start of the last step capture saw begin
    (the sidecar's last step), in the trace's time; the trace's end without one."""
    base = trace.metadata.get("profile_start_time")
    sidecar = trace.sidecar
    starts = [s.start_unix_ns for s in sidecar.steps if s.start_unix_ns] if sidecar else []
    if not starts or not isinstance(base, int):
        return trace.end_ns
    return max(starts) - base


# --- the step time ---------------------------------------------------------------------------
# One definition, said once, of what "the step time" of a run is and how much its steps vary:
# sweep's "typical" step and its spread column and compare's step time read these; analyze's
# StepSummary (typical_ms, spread) and window.is_bursty give the same figures
# (tests/test_sweep.py holds them to these).


def step_time_ms(median_ms: float, mean_ms: float, bursty: bool) -> float:
    """The step time: what one step costs. The median of the steps' wall times (robust to
    an outlier: a checkpoint, a GC pause), or their mean, the throughput, when the steps come
    in bursts (``window.is_bursty``): Grain's ``mp_prefetch`` hands a batch per worker at
    once, and a burst's median is one of its fast steps (a family pipeline's bursty runs at
    2 and 3 workers had medians of 5.7 and 0.3 ms against means of 21.3 and 23.6).

    ``isolate`` times each phase's throughput on purpose (the mean over a steady window:
    ``isolate/timing.py``), the figure this gives a bursty run."""
    return mean_ms if bursty else median_ms


def step_spread(p10_ms: float, p90_ms: float, mean_ms: float) -> float:
    """How much the step times vary: ``(p90 - p10) / mean`` (0 without a mean). The figure
    the bursts rule compares (``window.BURSTY_SPREAD``), by the mean so that a bursty run's
    (whose median may be near 0) stays finite and comparable."""
    return (p90_ms - p10_ms) / mean_ms if mean_ms else 0.0
