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
- host: any other traced event on the training thread (dispatch, Python when traced).

A training thread with the Python tracer on holds millions of events but a few thousand
distinct names: every name is matched once, and events are selected by their name's code,
on arrays of the thread's events (:class:`~traceinspect.trace.LineEvents`), never on a copy
of the events frame.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pandas as pd

from traceinspect import names as N
from traceinspect import schema as S
from traceinspect.analysis.steps import Steps
from traceinspect.intervals import Intervals
from traceinspect.trace import LineEvents, Trace, category_codes, category_mask

_LIBRARY = re.compile(r"(site-packages|dist-packages|/lib/python\d|<frozen|^jax/|/jax/|/jaxlib/)")

#: What each event of the training thread is, by its name (schema.CATEGORY), in the order
#: of ``ThreadEvents.category_of_name``'s codes; one event has one category, the first that
#: matches of compile > sync > input, else host.
CATEGORIES = ("host", "input", "sync", "compile")

# The thread's events are looked up in blocks of this many, each with the latest end among
# its events: the events still running at a given instant lie in the few blocks whose
# latest end is after it (on a thread, nested frames), not anywhere before it.
_BLOCK = 1024
# Longest overlaps first considered when naming a gap's events; more when those hold fewer
# distinct names than asked for.
_FIRST_CANDIDATES = 64
# The names the analysis looks for on the training thread: few events among millions, so
# they are found in one pass over the thread and selected from there afterwards.
_AWAIT = re.compile("^" + re.escape(N.AWAIT) + "$")
_SOUGHT = (N.INPUT_EVENT, N.SYNC_EVENT, N.COMPILE_EVENT, _AWAIT, N.PJIT, N.TRANSFER_EVENT)


def _block_reach(ends: np.ndarray) -> np.ndarray:
    """The latest end in each block of ``_BLOCK`` consecutive events."""
    if len(ends) == 0:
        return np.empty(0, dtype=np.int64)
    return np.maximum.reduceat(ends, np.arange(0, len(ends), _BLOCK))


def _running_before(reach: np.ndarray, before: int, at_ns: int) -> np.ndarray:
    """Positions before ``before`` in the blocks whose latest end is after ``at_ns`` (so
    every event running at ``at_ns`` that starts before position ``before``), ascending."""
    blocks = np.flatnonzero(reach[: -(-before // _BLOCK)] > at_ns)
    positions = (blocks[:, None] * _BLOCK + np.arange(_BLOCK)[None, :]).ravel()
    return positions[positions < before]


@dataclass(frozen=True, eq=False)
class ThreadEvents:
    """The training thread's events (arrays in order of start), which of their names count
    (step envelopes do not) and each name's category."""

    line: LineEvents
    kept: np.ndarray  # one bool per name code: False for the step envelope events
    category_of_name: np.ndarray  # one code per name code, into CATEGORIES

    @classmethod
    def from_frame(cls, events: pd.DataFrame) -> ThreadEvents:
        """Events of one thread given as a frame (``name`` categorical, ``start_ns``,
        ``duration_ns``), every name kept, all of category host: for tests and notebooks."""
        starts = events[S.START_NS].to_numpy(dtype=np.int64)
        durations = events[S.DURATION_NS].to_numpy(dtype=np.int64)
        codes = category_codes(events[S.NAME])
        names = events[S.NAME].cat.categories
        order = np.argsort(starts, kind="stable")
        line = LineEvents(-1, starts[order], durations[order], codes[order], names, 0, order)
        return cls(line, np.ones(len(names), bool), np.zeros(len(names), np.int8))

    def __len__(self) -> int:
        return len(self.line)

    @property
    def starts(self) -> np.ndarray:
        return self.line.starts

    @cached_property
    def _sought(self) -> tuple[np.ndarray, np.ndarray]:
        """Which names match any of the names sought, and the positions of their events."""
        hit = np.zeros(len(self.line.names), dtype=bool)
        for regex in _SOUGHT:
            hit |= self.line.names_matching(regex)
        return hit, np.flatnonzero(self.line.name_mask(hit))

    def named(self, regex: re.Pattern[str]) -> np.ndarray:
        """Positions (in order of start) of the counted events whose name matches
        ``regex`` (``search``)."""
        hit = self.line.names_matching(regex) & self.kept
        if not hit.any():
            return np.empty(0, dtype=np.int64)
        sought, positions = self._sought
        if not (hit & ~sought).any():
            # A few events: picked from those found once for every name sought.
            return positions[hit[self.line.codes[positions]]]
        return np.flatnonzero(self.line.name_mask(hit))

    def category(self, position: int) -> str:
        return CATEGORIES[int(self.category_of_name[int(self.line.codes[position])])]

    @cached_property
    def _block_reach(self) -> np.ndarray:
        return _block_reach(self.line.ends)

    def longest_names(self, lo: int, hi: int, top: int) -> list[tuple[str, str, int]]:
        """The ``top`` distinct names overlapping ``[lo, hi)`` the most: each name's longest
        overlap (its first event in the thread's order among equals), longest first."""
        starts, codes, line = self.starts, self.line.codes, self.line
        # Candidates: the events running at lo (started before it), then those starting
        # inside [lo, hi) (a contiguous range of positions: no index array for them).
        inside = int(np.searchsorted(starts, lo, side="left"))
        past = int(np.searchsorted(starts, hi, side="left"))
        before = _running_before(self._block_reach, inside, lo)
        overlap = np.concatenate(
            (
                np.minimum(line.end_at(before), hi) - lo,
                np.minimum(line.end_at(slice(inside, past)), hi) - starts[inside:past],
            )
        )

        def position(i: np.ndarray) -> np.ndarray:
            out = i - len(before) + inside
            early = i < len(before)
            out[early] = before[i[early]]
            return out

        wanted = _FIRST_CANDIDATES
        while True:
            # Only events at least as long as the wanted-th longest can name the gap, as
            # long as they hold enough distinct names (ties at the threshold all count).
            threshold = 1
            if len(overlap) > wanted:
                kth = np.partition(overlap, len(overlap) - wanted)[len(overlap) - wanted]
                threshold = max(int(kth), 1)
            chosen = np.flatnonzero(overlap >= threshold)
            pos, ov = position(chosen), overlap[chosen]
            counted = self.kept[codes[pos]]
            pos, ov = pos[counted], ov[counted]
            order = np.lexsort((self.line.stored_order(pos), -ov))
            pos, ov = pos[order], ov[order]
            _, first = np.unique(codes[pos], return_index=True)
            first = np.sort(first)[:top]
            if len(first) >= top or threshold == 1:
                break
            wanted *= 4
        names = self.line.names
        return [
            (str(names[int(codes[pos[i]])]), self.category(int(pos[i])), int(ov[i])) for i in first
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
    sync_events: pd.DataFrame  # start_ns, end_ns, name (Await pairs become one row)
    frames: PythonFrames | None = None  # the user's own Python frames (Python tracer on)

    def read_ending_at(self, at_ns: int) -> tuple[str, int, int, str | None] | None:
        """The blocking read that was still waiting at ``at_ns`` (began before, ended at or
        after it): (name, start, end, the user's source line if traced). The outermost
        one: ``float(x)`` rather than the ``Await`` inside it."""
        waits = self.sync_events
        hit = waits[(waits[S.START_NS] < at_ns) & (waits[S.END_NS] >= at_ns)]
        if hit.empty:
            return None
        w = hit.iloc[0]
        start = int(w[S.START_NS])
        site = self.frames.innermost_at(start) if self.frames else None
        return str(w[S.NAME]), start, int(w[S.END_NS]), site

    def events_in(self, lo: int, hi: int, top: int = 3) -> list[tuple[str, str, int]]:
        """The ``top`` distinct event names of the training thread overlapping
        ``[lo, hi)`` the most: (name, category, overlap ns), longest first."""
        if self.events is None:
            return []
        return self.events.longest_names(lo, hi, top)


@dataclass(frozen=True, eq=False)
class PythonFrames:
    """The training thread's Python-tracer frames from the user's own files (not libraries),
    in order of start."""

    starts: np.ndarray
    ends: np.ndarray
    codes: np.ndarray  # name codes
    labels: dict[int, str]  # name code -> "file.py:line function"
    in_main_file: np.ndarray  # frames of the script the thread runs (its outermost frame's)

    def innermost_at(self, at_ns: int) -> str | None:
        """The innermost user frame running at ``at_ns``, preferring the main script's own
        frames (the tracer may record bare file names, so libraries are not always
        recognisable by their path)."""
        started = int(np.searchsorted(self.starts, at_ns, side="right"))
        for reach, main_only in ((self._main_reach, True), (self._reach, False)):
            # Frames started by at_ns and still running at it (ends >= at_ns); the latest
            # to start (the first of equals, in the thread's order) is the innermost.
            candidates = _running_before(reach, started, at_ns - 1)
            running = self.ends[candidates] >= at_ns
            if main_only:
                running &= self.in_main_file[candidates]
            rows = candidates[running]
            if len(rows):
                starts = self.starts[rows]
                innermost = rows[int(np.searchsorted(starts, starts[-1], side="left"))]
                return self.labels[int(self.codes[innermost])]
        return None

    @cached_property
    def _reach(self) -> np.ndarray:
        return _block_reach(self.ends)

    @cached_property
    def _main_reach(self) -> np.ndarray:
        never = np.iinfo(np.int64).min
        return _block_reach(np.where(self.in_main_file, self.ends, never))


def _await_waits(trace: Trace, awaits: pd.DataFrame) -> pd.DataFrame:
    """``CommonPjRtBuffer::Await`` producer (``_p``) / consumer (``_c``) pairs -> waits."""
    if awaits.empty:
        return pd.DataFrame({S.START_NS: [], S.END_NS: [], S.NAME: []})
    stats = trace.stats_of(awaits)
    ids = stats[stats[S.STAT].isin(["_p", "_c"])]
    ends = awaits[S.START_NS] + awaits[S.DURATION_NS]
    producers = ids[ids[S.STAT] == "_p"].set_index(S.INT_VALUE)[S.EVENT_ROW]
    consumers = ids[ids[S.STAT] == "_c"].set_index(S.INT_VALUE)[S.EVENT_ROW]
    producers = producers[~producers.index.duplicated()]
    consumers = consumers[~consumers.index.duplicated()]
    both = producers.index.intersection(consumers.index)
    start = awaits.loc[producers.loc[both].to_numpy(), S.START_NS].to_numpy()
    end = ends.loc[consumers.loc[both].to_numpy()].to_numpy()
    keep = end > start
    return pd.DataFrame(
        {S.START_NS: start[keep], S.END_NS: end[keep], S.NAME: "block_until_ready (Await)"}
    )


def _sync_labels(trace: Trace, events: pd.DataFrame) -> list[str]:
    """Event names, with the kind of read ``traceinspect capture`` recorded when present
    (``traceinspect/host_read (__float__)``)."""
    names = events[S.NAME].astype(str).tolist()
    stats = trace.stats_of(events)
    kinds = stats[stats[S.STAT] == "kind"].set_index(S.EVENT_ROW)[S.STR_VALUE].astype(str)
    return [
        f"{name} ({kinds[row]})" if row in kinds.index else name
        for row, name in zip(events.index, names, strict=True)
    ]


def guess_training_line(trace: Trace) -> int | None:
    """The host line that dispatches programs or draws batches most often, when no step
    annotation says which thread trains (None when no line does either)."""
    ev = trace.events
    mask = category_mask(ev[S.NAME], N.INPUT_EVENT) | category_mask(ev[S.NAME], N.PJIT)
    if not mask.any():
        return None
    return int(ev.loc[mask, S.LINE_ROW].value_counts().idxmax())


def _compile_line_spans(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """Starts and ends of the events with a duration on the compiler threads."""
    names = trace.lines[S.LINE].astype(str).tolist()
    rows = [row for row, name in enumerate(names) if N.COMPILE_LINE.match(name)]
    starts, ends = [np.empty(0, np.int64)], [np.empty(0, np.int64)]
    for row in rows:
        line = trace.line_events(row)
        real = line.durations > 0
        starts.append(line.starts[real])
        ends.append(line.end_at(real))
    return np.concatenate(starts), np.concatenate(ends)


def _events_at(trace: Trace, line: LineEvents, positions: np.ndarray) -> pd.DataFrame:
    """The events frame's rows of these positions, in the frame's order."""
    return trace.events.loc[np.sort(line.rows(positions))]


def host_activity(
    trace: Trace,
    main_line_row: int | None,
    markers: tuple[str, ...] = (),
    line: LineEvents | None = None,
) -> HostActivity:
    """Categorised activity of the training thread ``main_line_row``; ``markers`` are
    step envelope events (``StepTraceAnnotation`` names): they span whole steps and are
    not work, so they are left out. ``line``: that line's events, when the caller has them.
    """
    compile_starts, compile_ends = _compile_line_spans(trace)
    empty_waits = pd.DataFrame({S.START_NS: [], S.END_NS: [], S.NAME: []})
    if main_line_row is None:
        empty = Intervals.empty()
        return HostActivity(
            None,
            empty,
            empty,
            Intervals.union_of(compile_starts, compile_ends),
            empty,
            None,
            empty_waits,
        )
    if line is None or line.line_row != main_line_row:
        line = trace.line_events(main_line_row)
    names = line.names
    kept = ~np.asarray(names.isin(markers)) if markers else np.ones(len(names), dtype=bool)
    input_name = line.names_matching(N.INPUT_EVENT) & kept
    sync_name = line.names_matching(N.SYNC_EVENT) & kept
    compile_name = line.names_matching(N.COMPILE_EVENT) & kept
    category = np.where(compile_name, 3, np.where(sync_name, 2, np.where(input_name, 1, 0)))
    thread = ThreadEvents(line, kept, category.astype(np.int8))
    starts = line.starts
    is_input = thread.named(N.INPUT_EVENT)
    is_compile = thread.named(N.COMPILE_EVENT)
    # The few sync and Await events as frame rows, in the frame's order (as labelled and
    # sorted before).
    waits = _await_waits(trace, _events_at(trace, line, thread.named(_AWAIT)))
    sync_frame = _events_at(trace, line, thread.named(N.SYNC_EVENT))
    sync_rows = pd.DataFrame(
        {
            S.START_NS: sync_frame[S.START_NS].to_numpy(),
            S.END_NS: (sync_frame[S.START_NS] + sync_frame[S.DURATION_NS]).to_numpy(),
            S.NAME: _sync_labels(trace, sync_frame),
        }
    )
    sync_events = pd.concat([sync_rows, waits], ignore_index=True).sort_values(S.START_NS)
    compile_iv = Intervals.union_of(
        np.concatenate((compile_starts, starts[is_compile])),
        np.concatenate((compile_ends, line.end_at(is_compile))),
    )
    # Every event but the step envelopes (empty ones add nothing).
    counted = None if kept.all() else line.name_mask(kept)
    return HostActivity(
        main_line_row=main_line_row,
        input=Intervals.union_of(starts[is_input], line.end_at(is_input)),
        sync=Intervals.union_of(
            sync_events[S.START_NS].to_numpy(), sync_events[S.END_NS].to_numpy()
        ),
        compile=compile_iv,
        host=Intervals.union_of(starts, line.ends, counted, scratch=True),
        events=thread,
        sync_events=sync_events.reset_index(drop=True),
        frames=user_frames(thread),
    )


def user_frames(thread: ThreadEvents) -> PythonFrames | None:
    """The user's own Python frames among the training thread's events, if traced."""
    line = thread.line
    labels: dict[int, str] = {}
    files: dict[int, str] = {}
    for code, name in enumerate(line.names):
        if not thread.kept[code]:
            continue
        m = N.PYTHON_FRAME.match(str(name))
        if m is not None and not _LIBRARY.search(m.group("file")):
            labels[code] = f"{m.group('file')}:{m.group('line')} {m.group('func')}"
            files[code] = m.group("file")
    if not labels:
        return None
    is_user = np.zeros(len(line.names), dtype=bool)
    is_user[list(labels)] = True
    rows = np.flatnonzero(line.name_mask(is_user))
    starts = line.starts[rows]
    ends = line.end_at(rows)
    codes = line.codes[rows]
    # The outermost frame's file (the longest frame; the first of equals in the thread's
    # order) is the script's.
    durations = ends - starts
    longest = np.flatnonzero(durations == durations.max())
    outermost = longest[np.argmin(line.stored_order(rows[longest]))]
    main_file = files[int(codes[outermost])]
    in_main = np.zeros(len(line.names), dtype=bool)
    in_main[[c for c, f in files.items() if f == main_file]] = True
    return PythonFrames(starts, ends, codes, labels, in_main[codes])


def training_thread_activity(
    trace: Trace, steps: Steps, line: LineEvents | None = None
) -> HostActivity:
    """What the thread driving ``steps`` did: the one carrying the step annotations, else
    the one dispatching programs or drawing batches most often (one rule for the analysis
    and its plots). ``line``: the events of the steps' thread, when the caller has them."""
    main_line = steps.main_line_row
    if main_line is None:
        main_line = guess_training_line(trace)
    return host_activity(trace, main_line, steps.marker_names, line)
