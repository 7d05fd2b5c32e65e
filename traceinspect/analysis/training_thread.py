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
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from traceinspect import names as N
from traceinspect import schema as S
from traceinspect.analysis.steps import Steps
from traceinspect.intervals import Intervals
from traceinspect.trace import Trace, category_mask

_LIBRARY = re.compile(r"(site-packages|dist-packages|/lib/python\d|<frozen|^jax/|/jax/|/jaxlib/)")


@dataclass(frozen=True, eq=False)
class HostActivity:
    """Category intervals of the host, and the events behind them (for evidence)."""

    main_line_row: int | None
    input: Intervals
    sync: Intervals
    compile: Intervals
    host: Intervals
    events: pd.DataFrame  # training-thread events with a `category` column
    sync_events: pd.DataFrame  # start_ns, end_ns, name (Await pairs become one row)
    frames: PythonFrames | None = None  # the user's own Python frames (Python tracer on)
    _cache: dict[str, tuple[np.ndarray, ...]] = field(default_factory=dict, repr=False)

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
        ev = self.events
        if ev.empty:
            return []
        starts, ends, codes, category = self._arrays()
        overlap = np.minimum(ends, hi) - np.maximum(starts, lo)
        rows = np.flatnonzero(overlap > 0)
        if len(rows) == 0:
            return []
        rows = rows[np.argsort(-overlap[rows], kind="stable")]
        _, first = np.unique(codes[rows], return_index=True)
        chosen = rows[np.sort(first)][:top]
        cats = ev[S.NAME].cat.categories
        return [(str(cats[int(codes[r])]), str(category[r]), int(overlap[r])) for r in chosen]

    def _arrays(self) -> tuple[np.ndarray, ...]:
        """The training thread's events as plain arrays, built once (gaps ask many times)."""
        cached = self._cache.get("arrays")
        if cached is None:
            ev = self.events
            starts = ev[S.START_NS].to_numpy()
            cached = (
                starts,
                starts + ev[S.DURATION_NS].to_numpy(),
                ev[S.NAME].cat.codes.to_numpy(),
                ev[S.CATEGORY].to_numpy(dtype=object),
            )
            self._cache["arrays"] = cached
        return cached


@dataclass(frozen=True, eq=False)
class PythonFrames:
    """The training thread's Python-tracer frames from the user's own files (not libraries)."""

    starts: np.ndarray
    ends: np.ndarray
    labels: list[str]  # "file.py:line function"
    in_main_file: np.ndarray  # frames of the script the thread runs (its outermost frame's)

    def innermost_at(self, at_ns: int) -> str | None:
        """The innermost user frame running at ``at_ns``, preferring the main script's own
        frames (the tracer may record bare file names, so libraries are not always
        recognisable by their path)."""
        running = (self.starts <= at_ns) & (self.ends >= at_ns)
        for candidates in (running & self.in_main_file, running):
            rows = np.flatnonzero(candidates)
            if len(rows):
                return self.labels[int(rows[np.argmax(self.starts[rows])])]
        return None


def _name_mask(events: pd.DataFrame, pattern: re.Pattern[str]) -> np.ndarray:
    return category_mask(events[S.NAME], pattern)


def _await_waits(trace: Trace, main: pd.DataFrame) -> pd.DataFrame:
    """``CommonPjRtBuffer::Await`` producer (``_p``) / consumer (``_c``) pairs -> waits."""
    awaits = main[main[S.NAME] == N.AWAIT]
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
    mask = _name_mask(ev, N.INPUT_EVENT) | _name_mask(ev, N.PJIT)
    if not mask.any():
        return None
    return int(ev.loc[mask, S.LINE_ROW].value_counts().idxmax())


def host_activity(
    trace: Trace, main_line_row: int | None, markers: tuple[str, ...] = ()
) -> HostActivity:
    """Categorised activity of the training thread ``main_line_row``; ``markers`` are
    step envelope events (``StepTraceAnnotation`` names): they span whole steps and are
    not work, so they are left out.
    """
    ev = trace.events
    starts = ev[S.START_NS].to_numpy()
    ends = starts + ev[S.DURATION_NS].to_numpy()
    compile_lines = trace.lines.index[
        trace.lines[S.LINE].astype(str).str.match(N.COMPILE_LINE.pattern)
    ].to_numpy()
    on_compile_line = np.isin(ev[S.LINE_ROW].to_numpy(), compile_lines)
    compile_mask = on_compile_line & (ev[S.DURATION_NS].to_numpy() > 0)
    if main_line_row is None:
        empty = Intervals.empty()
        frame = ev.iloc[0:0].assign(category=pd.Series(dtype=object))
        return HostActivity(
            None,
            empty,
            empty,
            Intervals.union_of(starts[compile_mask], ends[compile_mask]),
            empty,
            frame,
            pd.DataFrame({S.START_NS: [], S.END_NS: [], S.NAME: []}),
        )
    on_main = ev[S.LINE_ROW].to_numpy() == main_line_row
    if markers:
        on_main &= ~ev[S.NAME].isin(markers).to_numpy()
    main = ev[on_main]
    m_start = main[S.START_NS].to_numpy()
    m_end = m_start + main[S.DURATION_NS].to_numpy()
    is_input = _name_mask(main, N.INPUT_EVENT)
    is_sync = _name_mask(main, N.SYNC_EVENT)
    is_compile = _name_mask(main, N.COMPILE_EVENT)
    category = np.where(
        is_compile, "compile", np.where(is_sync, "sync", np.where(is_input, "input", "host"))
    )
    waits = _await_waits(trace, main)
    sync_rows = pd.DataFrame(
        {
            S.START_NS: m_start[is_sync],
            S.END_NS: m_end[is_sync],
            S.NAME: _sync_labels(trace, main[is_sync]),
        }
    )
    sync_events = pd.concat([sync_rows, waits], ignore_index=True).sort_values(S.START_NS)
    compile_iv = Intervals.union_of(
        np.concatenate((starts[compile_mask], m_start[is_compile])),
        np.concatenate((ends[compile_mask], m_end[is_compile])),
    )
    real = m_end > m_start
    return HostActivity(
        main_line_row=main_line_row,
        input=Intervals.union_of(m_start[is_input], m_end[is_input]),
        sync=Intervals.union_of(
            sync_events[S.START_NS].to_numpy(), sync_events[S.END_NS].to_numpy()
        ),
        compile=compile_iv,
        host=Intervals.union_of(m_start[real], m_end[real]),
        events=main.assign(category=pd.Categorical(category)),
        sync_events=sync_events.reset_index(drop=True),
        frames=user_frames(main),
    )


def user_frames(main: pd.DataFrame) -> PythonFrames | None:
    """The user's own Python frames among the training thread's events, if traced."""
    cats = main[S.NAME].cat.categories
    labels: dict[int, str] = {}
    for code, name in enumerate(cats):
        m = N.PYTHON_FRAME.match(str(name))
        if m is not None and not _LIBRARY.search(m.group("file")):
            labels[code] = f"{m.group('file')}:{m.group('line')} {m.group('func')}"
    if not labels:
        return None
    codes = main[S.NAME].cat.codes.to_numpy()
    rows = np.flatnonzero(np.isin(codes, list(labels)))
    starts = main[S.START_NS].to_numpy()[rows]
    ends = starts + main[S.DURATION_NS].to_numpy()[rows]
    frame_labels = [labels[int(c)] for c in codes[rows]]
    files = np.array([label.split(":", 1)[0] for label in frame_labels], dtype=object)
    main_file = files[int(np.argmax(ends - starts))]  # the outermost frame's file
    return PythonFrames(starts, ends, frame_labels, files == main_file)


def training_thread_activity(trace: Trace, steps: Steps) -> HostActivity:
    """What the thread driving ``steps`` did: the one carrying the step annotations, else
    the one dispatching programs or drawing batches most often (one rule for the analysis
    and its plots)."""
    main_line = steps.main_line_row
    if main_line is None:
        main_line = guess_training_line(trace)
    return host_activity(trace, main_line, steps.marker_names)
