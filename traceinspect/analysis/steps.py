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
import pandas as pd

from traceinspect import names as N
from traceinspect import schema as S
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


def _on_busiest_line(events: pd.DataFrame) -> pd.DataFrame:
    """The events on the line holding most of them (annotations may be on several)."""
    top = events[S.LINE_ROW].value_counts().idxmax()
    return events[events[S.LINE_ROW] == top]


def _annotated(trace: Trace, lo: int, hi: int) -> Steps | None:
    stats = trace.event_stats
    rows = stats.loc[stats[S.STAT] == N.STEP_NUM, [S.EVENT_ROW, S.INT_VALUE]]
    if len(rows) >= 1:
        events = trace.events.loc[rows[S.EVENT_ROW].to_numpy()]
        events = events.assign(**{S.STEP: rows[S.INT_VALUE].to_numpy()})
        events = _on_busiest_line(events)
        # One annotation name per step: the user's own, rather than the copy that
        # `traceinspect capture` writes around the same steps.
        counts = events[S.NAME].astype(str).value_counts()
        own = [n for n in counts.index if n != N.ANN_STEP] or list(counts.index)
        events = events[events[S.NAME].astype(str) == own[0]]
        names = [own[0]]
        return _windows(
            f"StepTraceAnnotation {', '.join(repr(n) for n in names)}",
            events[S.START_NS].to_numpy(),
            (events[S.START_NS] + events[S.DURATION_NS]).to_numpy(),
            events[S.STEP].to_numpy(),
            int(events[S.LINE_ROW].iloc[0]),
            lo,
            hi,
            (names[0], N.ANN_STEP),  # both envelopes, never work
        )
    marked = trace.events[trace.events[S.NAME] == N.ANN_STEP]
    if len(marked) >= 1:
        marked = _on_busiest_line(marked)
        return _windows(
            "traceinspect capture steps",
            marked[S.START_NS].to_numpy(),
            (marked[S.START_NS] + marked[S.DURATION_NS]).to_numpy(),
            np.arange(len(marked)),
            int(marked[S.LINE_ROW].iloc[0]),
            lo,
            hi,
            (N.ANN_STEP,),
        )
    return None


def _device_steps_line(trace: Trace, lo: int, hi: int) -> Steps | None:
    lines = trace.lines
    steps_lines = lines[
        (lines[S.LINE] == N.STEPS_LINE)
        & lines[S.PLANE].astype(str).str.startswith("/device:")
        & (lines[S.EVENT_COUNT] > 0)
    ]
    if steps_lines.empty:
        return None
    best = steps_lines[S.EVENT_COUNT].idxmax()
    events = trace.events[trace.events[S.LINE_ROW] == best]
    if len(events) < 2:
        return None
    return _windows(
        f"device Steps line on {lines.loc[best, S.PLANE]}",
        events[S.START_NS].to_numpy(),
        (events[S.START_NS] + events[S.DURATION_NS]).to_numpy(),
        np.arange(len(events)),
        None,
        lo,
        hi,
    )


def _group_ids(trace: Trace, lo: int, hi: int) -> Steps | None:
    stats = trace.event_stats
    rows = stats.loc[stats[S.STAT] == N.GROUP_ID, [S.EVENT_ROW, S.INT_VALUE]]
    if rows[S.INT_VALUE].nunique() < 2:
        return None
    ev = trace.events.loc[rows[S.EVENT_ROW].to_numpy(), [S.START_NS, S.DURATION_NS]]
    frame = pd.DataFrame(
        {
            "group": rows[S.INT_VALUE].to_numpy(),
            "start": ev[S.START_NS].to_numpy(),
            "end": (ev[S.START_NS] + ev[S.DURATION_NS]).to_numpy(),
        }
    )
    spans = frame.groupby("group").agg(start=("start", "min"), end=("end", "max"))
    return _windows(
        "TensorFlow group_id",
        spans["start"].to_numpy(),
        spans["end"].to_numpy(),
        spans.index.to_numpy(),
        None,
        lo,
        hi,
    )


def _repeated_program(trace: Trace, lo: int, hi: int) -> Steps | None:
    ev = trace.events
    modules = ev[(ev[S.LINE] == "XLA Modules") & ev[S.PLANE].astype(str).str.startswith("/device:")]
    if len(modules):
        first_device = modules[S.PLANE].iloc[0]
        modules = modules[modules[S.PLANE] == first_device]
        top = modules[S.NAME].value_counts()
        if top.iloc[0] >= 2:
            runs = modules[modules[S.NAME] == top.index[0]]
            return _windows(
                f"repeated XLA module {top.index[0]!r} on {first_device}",
                runs[S.START_NS].to_numpy(),
                (runs[S.START_NS] + runs[S.DURATION_NS]).to_numpy(),
                np.arange(len(runs)),
                None,
                lo,
                hi,
            )
    names = ev[S.NAME].cat.categories
    pjit = [n for n in names if N.PJIT.match(str(n))]
    if not pjit:
        return None
    calls = ev[ev[S.NAME].isin(pjit)]
    counts = calls.groupby([S.LINE_ROW, S.NAME], observed=True).size()
    (line_row, name), n = counts.idxmax(), counts.max()
    if n < 2:
        return None
    runs = calls[(calls[S.LINE_ROW] == line_row) & (calls[S.NAME] == name)]
    # Nested calls of the same function (a wrapper calling itself) count once.
    runs = runs[~nested(runs)]
    steps = _windows(
        f"repeated calls of {name}",
        runs[S.START_NS].to_numpy(),
        (runs[S.START_NS] + runs[S.DURATION_NS]).to_numpy(),
        np.arange(len(runs)),
        int(line_row),
        lo,
        hi,
    )
    return replace(steps, one_call_each=True)


def nested(events: pd.DataFrame) -> np.ndarray:
    """Events (sorted by start) that lie inside an earlier event of the same frame."""
    starts = events[S.START_NS].to_numpy()
    return nested_spans(starts, starts + events[S.DURATION_NS].to_numpy())


def nested_spans(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """:func:`nested` for spans given as arrays."""
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
    not counted as dropped at the edges)."""
    at = window_start(trace)
    if at is None:
        return steps
    keep = steps.starts >= at
    if keep.all():
        return steps
    return replace(
        steps, starts=steps.starts[keep], ends=steps.ends[keep], numbers=steps.numbers[keep]
    )
