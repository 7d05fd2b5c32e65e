"""What the host was doing: intervals of input, sync, compile and other work.

Each category is a set of intervals on the training thread (compilation also on the
compiler threads). The names come from what jax, XLA, Grain, tf.data and
``traceinspect capture`` write into traces (see the field notes):

- input: the training thread waiting for its next batch: Grain iterators'
  ``<Class>.__next__``, ``traceinspect/next_batch``, tf.data ``IteratorGetNext``.
- sync: the training thread blocked reading a device value: ``np.asarray(jax.Array)``
  (``float(x)``, ``print(x)``, ``.item()``), ``traceinspect/host_read``,
  ``CommonPjRtBuffer::Await`` producer/consumer pairs (``.block_until_ready()``; the
  wait is the time between the pair), ``ToLiteral``, TPU ``TransferD2HRequest``.
- compile: XLA compilation on compiler threads, and compile/lowering events on the
  training thread.
- host: any other traced event on the training thread (dispatch, Python when traced), and
  in a capture's trace the loop's own code: ``traceinspect capture`` stamps every batch
  the loop draws, every read of a device value and every dispatch, so the rest of the
  thread's time inside its steps is the loop's own (untraced) Python: a checkpoint's file
  write, a queue, a sleep. capture's stack sampler (the sidecar's ``stack_samples``) names
  it by ``file.py:line function``.

The thread's events and their categories are ``thread_events.py``; its blocking reads
``sync_reads.py``; the user's own code in it (Python frames, the loop's untraced time)
``user_code.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from traceinspect import names as N
from traceinspect import schema as S
from traceinspect.analysis.arrays import most_common
from traceinspect.analysis.steps import Steps
from traceinspect.analysis.sync_reads import Reads, blocking_reads, read_site_label
from traceinspect.analysis.thread_events import CATEGORIES, ThreadEvents, thread_events
from traceinspect.analysis.user_code import (
    LoopCode,
    PythonFrames,
    SampledStack,
    loop_code,
    user_frames,
)
from traceinspect.intervals import Intervals
from traceinspect.trace import Trace

__all__ = [
    "CATEGORIES",
    "HostActivity",
    "LoopCode",
    "PythonFrames",
    "Reads",
    "SampledStack",
    "ThreadEvents",
    "guess_training_line",
    "host_activity",
    "read_site_label",
    "thread_events",
    "training_thread_activity",
    "user_frames",
]


@dataclass(frozen=True, eq=False)
class HostActivity:
    """Category intervals of the host, and the events behind them (for evidence)."""

    main_line_row: int | None
    input: Intervals
    sync: Intervals
    compile: Intervals
    host: Intervals
    events: ThreadEvents | None  # the training thread's events (None: no thread found)
    sync_events: Reads  # the blocking reads (Await pairs become one)
    frames: PythonFrames | None = None  # the user's own Python frames (Python tracer on)
    #: The loop's own untraced code (part of ``host``; a capture's trace only).
    loop_code: LoopCode | None = None

    def read_ending_at(self, at_ns: int) -> tuple[str, int, int, str | None] | None:
        """The blocking read that was still waiting at ``at_ns`` (began before, ended at or
        after it): (name, start, end, the user's source line if traced). The outermost
        one: ``float(x)`` rather than the ``Await`` inside it."""
        waits = self.sync_events
        hit = np.flatnonzero((waits.starts < at_ns) & (waits.ends >= at_ns))
        if len(hit) == 0:
            return None
        first = int(hit[0])
        start, end = int(waits.starts[first]), int(waits.ends[first])
        site = self.frames.innermost_at(start) if self.frames else None
        return (
            waits.names[first],
            start,
            end,
            site or waits.site(first) or self._sampled(start, end),
        )

    def _sampled(self, start: int, end: int) -> str | None:
        """Where the sampler saw the thread during a read capture did not stamp (one inside
        a library: an Orbax save waiting for the arrays it copies): the user's line and the
        library's function, the most looks first."""
        samples = self.loop_code.samples if self.loop_code is not None else None
        if samples is None:
            return None
        found = samples.sites_in(Intervals.union_of(np.array([start]), np.array([end])))
        return found[0][0] if found else None

    def events_in(self, lo: int, hi: int, top: int = 3) -> list[tuple[str, str, int]]:
        """The ``top`` distinct event names of the training thread overlapping
        ``[lo, hi)`` the most: (name, category, overlap ns), longest first."""
        if self.events is None:
            return []
        return self.events.longest_names(lo, hi, top)


def guess_training_line(trace: Trace) -> int | None:
    """The host line that dispatches programs or draws batches most often, when no step
    annotation says which thread trains (None when no line does either)."""
    c = trace.columns
    hit = np.array(
        [
            N.INPUT_EVENT.search(n) is not None or N.PJIT.search(n) is not None
            for n in c.event_names
        ],
        dtype=bool,
    )
    if not hit.any():
        return None
    rows = np.flatnonzero(hit[c.events[S.NAME]])
    if len(rows) == 0:
        return None
    return most_common(c.events[S.LINE_ROW][rows])


def _compile_line_spans(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """Starts and ends of the events with a duration on the compiler threads."""
    names = trace.columns.line_name()
    rows = [row for row, name in enumerate(names) if N.COMPILE_LINE.match(name)]
    starts, ends = [np.empty(0, np.int64)], [np.empty(0, np.int64)]
    for row in rows:
        line = trace.line_events(row)
        real = line.durations > 0
        starts.append(line.starts[real])
        ends.append(line.end_at(real))
    return np.concatenate(starts), np.concatenate(ends)


def host_activity(
    trace: Trace,
    main_line_row: int | None,
    markers: tuple[str, ...] = (),
    thread: ThreadEvents | None = None,
    own_code: bool = False,
) -> HostActivity:
    """Categorised activity of the training thread ``main_line_row``; ``markers`` are
    step envelope events (``StepTraceAnnotation`` names): they span whole steps and are
    not work, so they are left out. ``thread``: that thread's events, when the caller has
    them (:func:`thread_events`). ``own_code``: the thread's untraced time inside the step
    envelopes is the loop's own code (``host``): true of a capture's trace, where every
    batch, read and dispatch is stamped."""
    compile_starts, compile_ends = _compile_line_spans(trace)
    if main_line_row is None:
        empty = Intervals.empty()
        return HostActivity(
            None,
            empty,
            empty,
            Intervals.union_of(compile_starts, compile_ends),
            empty,
            None,
            Reads.empty(),
        )
    if thread is None or thread.line.line_row != main_line_row:
        thread = thread_events(trace, main_line_row, markers)
    line = thread.line
    starts = line.starts
    is_input = thread.named(N.INPUT_EVENT)
    is_compile = thread.named(N.COMPILE_EVENT)
    sync_events = blocking_reads(trace, thread)
    compile_iv = Intervals.union_of(
        np.concatenate((compile_starts, starts[is_compile])),
        np.concatenate((compile_ends, line.end_at(is_compile))),
    )
    busy = thread.busy()
    loop = loop_code(trace, thread, busy) if own_code else None
    return HostActivity(
        main_line_row=main_line_row,
        input=Intervals.union_of(starts[is_input], line.end_at(is_input)),
        sync=Intervals.union_of(sync_events.starts, sync_events.ends),
        compile=compile_iv,
        host=busy if loop is None else busy.union(loop.spans),
        events=thread,
        sync_events=sync_events,
        frames=user_frames(thread),
        loop_code=loop,
    )


def training_thread_activity(
    trace: Trace, steps: Steps, thread: ThreadEvents | None = None
) -> HostActivity:
    """What the thread driving ``steps`` did: the one carrying the step annotations, else
    the one dispatching programs or drawing batches most often (one rule for the analysis
    and its plots). ``thread``: the events of the steps' thread, when the caller has them."""
    main_line = steps.main_line_row
    if main_line is None:
        main_line = guess_training_line(trace)
    captured = trace.sidecar is not None and N.ANN_STEP in steps.marker_names
    return host_activity(trace, main_line, steps.marker_names, thread, own_code=captured)
