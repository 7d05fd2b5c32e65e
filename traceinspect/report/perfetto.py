"""Chrome trace-event JSON for Perfetto UI: a trace's events, and the analysis' findings.

The file is the "JSON Object Format" of the Trace Event Format: ``{"traceEvents": [...],
"displayTimeUnit": "ms", "metadata": {...}}``. Every XPlane plane is a process and every line
a thread, named by ``M`` events; each event is a complete (``X``) event. traceinspect's
findings are a process of their own: a ``steps`` thread (one slice per analysed step), an
``idle gaps`` thread (one slice per gap, named by its cause, its evidence in ``args``), and
the verdict as a global instant event at the window's start.

Times: ``ts`` and ``dur`` are microseconds from the trace's first event, the origin
``analyze`` prints ``start_ms`` from, written to the nanosecond (three decimals) so that
events that nest in the trace nest in the file. Absolute epoch microseconds would need 19
significant digits, more than a JSON number keeps.

The tracks (traceinspect's own, and the trace's processes, threads and lanes) are
``perfetto_tracks.py``; the trace's events as JSON text ``perfetto_events.py``.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from traceinspect import schema as S
from traceinspect._version import __version__
from traceinspect.analysis.result import Analysis
from traceinspect.errors import UsageError
from traceinspect.report.perfetto_events import _trace_events
from traceinspect.report.perfetto_tracks import (
    _lanes,
    _misnested,
    _tool_events,
    _tool_tids,
    _Tracks,
)
from traceinspect.trace import Trace

__all__ = [
    "KINDS",
    "MAX_EVENTS",
    "PERFETTO_UI",
    "PerfettoTrace",
    "_lanes",
    "_misnested",
    "perfetto_trace",
]

#: Events written at most by default: Perfetto UI opens a file of this many in a browser tab
#: (about 100 MB of JSON; chrome://tracing slows down well before).
MAX_EVENTS = 1_000_000
PERFETTO_UI = "https://ui.perfetto.dev"
#: The kinds of a trace's own events, in the order they are kept when the cap is hit: the
#: device's work and the training thread (what the gaps are about) before other host threads.
KINDS = ("device", "training thread", "other host")
# gzip.open's default, 9, costs 2.7x the time for 7% less: on the benchmark's 94 MB of
# JSON, 3.3 s for 8.1 MB against 1.2 s for 8.8 MB (level 1: 0.5 s for 11.2 MB).
_GZIP_LEVEL = 6
_CHUNK = 20_000  # events joined and written at a time


@dataclass(frozen=True, eq=False)
class PerfettoTrace:
    """A trace in Chrome trace-event JSON, ready to write. ``events`` holds each event as
    JSON text (building dicts for a million events would cost more than the analysis)."""

    events: list[str]
    metadata: dict[str, Any]
    #: Events of the trace written (the rest of ``events`` are traceinspect's and names).
    kept: int
    #: Events of the trace left out to stay within ``max_events``, by kind (:data:`KINDS`).
    dropped: dict[str, int]

    @property
    def event_count(self) -> int:
        return len(self.events)

    @property
    def dropped_count(self) -> int:
        return sum(self.dropped.values())

    def chunks(self) -> Iterator[str]:
        """The file's text, in pieces."""
        yield '{"traceEvents":[\n'
        for i in range(0, len(self.events), _CHUNK):
            yield (",\n" if i else "") + ",\n".join(self.events[i : i + _CHUNK])
        yield '\n],"displayTimeUnit":"ms","metadata":' + json.dumps(self.metadata) + "}\n"

    def to_dict(self) -> dict[str, Any]:
        """The whole document as Python objects (for tests and small traces)."""
        loaded: dict[str, Any] = json.loads("".join(self.chunks()))
        return loaded

    def write(self, path: str | Path) -> int:
        """Write the file (gzip-compressed when the name ends in ``.gz``); its size in bytes."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.name.endswith(".gz"):
            with gzip.open(path, "wb", compresslevel=_GZIP_LEVEL) as gz:
                for chunk in self.chunks():
                    gz.write(chunk.encode())
        else:
            with path.open("w", encoding="utf-8") as f:
                f.writelines(self.chunks())
        return path.stat().st_size


def perfetto_trace(
    trace: Trace,
    analysis: Analysis,
    *,
    steps: slice | None = None,
    window_ms: tuple[float, float] | None = None,
    max_events: int = MAX_EVENTS,
) -> PerfettoTrace:
    """The events of the analysed window with traceinspect's tracks, as trace-event JSON.

    ``steps`` picks analysed steps by position (``slice(2, 5)``: the third to the fifth,
    as ``per_step.iloc[2:5]``); ``window_ms`` a span in ms from the trace's first event;
    both given, their overlap. By default the window is the analysed steps. Events of the
    trace overlapping the window are written whole. Past ``max_events`` (every event of
    the file counted), the shortest events of the trace are left out, other host threads'
    first, then the training thread's, then the device's; traceinspect's tracks are always
    written.
    """
    if analysis.timeline is None:
        raise UsageError(
            f"{analysis.path}: this analysis kept no timeline (a pod's per-host result); "
            "export the host's own analysis, traceinspect.analyze(trace)."
        )
    origin = trace.start_ns
    lo, hi = _window(trace, analysis, steps, window_ms)
    ours = _tool_events(analysis, _tool_tids(trace), origin, lo, hi)
    events = trace.select(start_ns=lo, end_ns=hi)
    kinds = _line_kinds(trace, analysis)[events[S.LINE_ROW].to_numpy()]
    used_lines = np.unique(events[S.LINE_ROW].to_numpy())
    n_planes = len(np.unique(trace.lines[S.PLANE_ROW].to_numpy()[used_lines]))
    naming_bound = 2 * (n_planes + 1) + 2 * (len(used_lines) + 2)
    keep = _keep(events, kinds, max_events - len(ours) - naming_bound)
    kept = events[keep]
    lanes = _lanes(
        kept[S.LINE_ROW].to_numpy(),
        kept[S.START_NS].to_numpy(),
        (kept[S.START_NS] + kept[S.DURATION_NS]).to_numpy(),
    )
    tracks = _Tracks(trace, analysis, kept[S.LINE_ROW].to_numpy(), lanes)
    naming = tracks.naming_events()
    excess = len(ours) + len(naming) + len(kept) - max_events
    if excess > 0 and len(kept):
        # Lanes are threads too: naming them can take the file past the cap, so the shortest
        # kept events make room.
        trim = _keep(kept, kinds[keep], len(kept) - excess)
        keep[np.flatnonzero(keep)[~trim]] = False
        kept, lanes = kept[trim], lanes[trim]
        tracks = _Tracks(trace, analysis, kept[S.LINE_ROW].to_numpy(), lanes)
        naming = tracks.naming_events()
    lost = np.bincount(kinds[~keep], minlength=len(KINDS))
    dropped = {k: int(n) for k, n in zip(KINDS, lost, strict=True)}
    written = naming + ours + _trace_events(trace, kept, tracks.tids, origin)
    metadata = _metadata(
        trace, analysis, origin, lo, hi, len(written), len(kept), max_events, dropped
    )
    return PerfettoTrace(events=written, metadata=metadata, kept=len(kept), dropped=dropped)


# --- the window -------------------------------------------------------------------------------


def _window(
    trace: Trace, analysis: Analysis, steps: slice | None, window_ms: tuple[float, float] | None
) -> tuple[int, int]:
    """``[lo, hi)`` in absolute ns: the chosen steps' span, the chosen window, or both's
    overlap; the analysed steps by default."""
    per_step = analysis.per_step
    starts = per_step[S.START_NS].to_numpy(dtype=np.int64)
    ends = starts + per_step[S.WALL_NS].to_numpy(dtype=np.int64)
    lo, hi = int(starts[0]), int(ends[-1])
    if steps is not None:
        if steps.step not in (None, 1):
            raise UsageError(f"steps {_spec(steps)}: a range of consecutive steps, no stride.")
        picked = range(len(per_step))[steps]
        if len(picked) == 0:
            raise UsageError(
                f"{trace.path}: steps {_spec(steps)} select none of the {len(per_step)} "
                f"analysed steps; pick a range within 0:{len(per_step)}."
            )
        lo, hi = int(starts[picked[0]]), int(ends[picked[-1]])
    if window_ms is not None:
        w0, w1 = (trace.start_ns + round(ms * 1e6) for ms in window_ms)
        if w1 <= w0:
            raise UsageError(f"window {_ms_spec(window_ms)} ms: the end must come after the start.")
        lo, hi = (max(lo, w0), min(hi, w1)) if steps is not None else (w0, w1)
        lo = max(lo, trace.start_ns)  # nothing comes before the origin
        if hi <= lo or hi <= trace.start_ns or lo >= trace.end_ns:
            span = f"0:{(trace.end_ns - trace.start_ns) / 1e6:.3f}"
            raise UsageError(
                f"{trace.path}: window {_ms_spec(window_ms)} ms holds nothing"
                + (f" of steps {_spec(steps)}" if steps is not None else "")
                + f"; the trace spans {span} ms from its first event."
            )
    return lo, hi


def _spec(steps: slice) -> str:
    return (
        f"{'' if steps.start is None else steps.start}:{'' if steps.stop is None else steps.stop}"
    )


def _ms_spec(window_ms: tuple[float, float]) -> str:
    return f"{window_ms[0]:g}:{window_ms[1]:g}"


# --- which events to keep ---------------------------------------------------------------------


def _line_kinds(trace: Trace, analysis: Analysis) -> np.ndarray:
    """Each line's kind, as its position in :data:`KINDS`, by line row: the device's are
    device planes' lines and the lines the analysis took device work from (XLA's CPU
    threads); the training thread is the analysis' own."""
    lines = trace.lines
    kinds = np.full(len(lines), 2, dtype=np.int64)
    on_device = lines[S.PLANE].astype(str).str.startswith("/device:").to_numpy()
    kinds[on_device] = 0
    timeline = analysis.timeline
    assert timeline is not None
    kinds[list(timeline.device_lines)] = 0
    if timeline.training_line_row is not None:
        kinds[timeline.training_line_row] = 1
    return kinds


def _keep(events: pd.DataFrame, kinds: np.ndarray, budget: int) -> np.ndarray:
    """Which events fit in ``budget``: kind by kind in :data:`KINDS` order, and within the
    kind that overflows, the longest (so a kept event's parent is kept: it is no shorter)."""
    keep = np.zeros(len(events), dtype=bool)
    left = max(budget, 0)
    durations = events[S.DURATION_NS].to_numpy()
    for kind in range(len(KINDS)):
        rows = np.flatnonzero(kinds == kind)
        if len(rows) <= left:
            keep[rows] = True
            left -= len(rows)
            continue
        if left:
            longest = np.argpartition(-durations[rows], left - 1)[:left]
            keep[rows[longest]] = True
        break
    return keep


# --- metadata ---------------------------------------------------------------------------------


def _metadata(
    trace: Trace,
    analysis: Analysis,
    origin: int,
    lo: int,
    hi: int,
    events: int,
    kept: int,
    max_events: int,
    dropped: dict[str, int],
) -> dict[str, Any]:
    per_step = analysis.per_step
    starts = per_step[S.START_NS].to_numpy(dtype=np.int64)
    ends = starts + per_step[S.WALL_NS].to_numpy(dtype=np.int64)
    shown = np.flatnonzero((starts < hi) & (ends > lo))
    return {
        "traceinspect_version": __version__,
        "source": str(trace.path),
        "run": trace.run_name,
        "backend": analysis.backend,
        "verdict": analysis.verdict,
        "summary": analysis.summary,
        "sync_sites": list(analysis.sync_sites),
        "time_origin": "the trace's first event (where analyze's start_ms counts from); "
        "ts and dur are microseconds from it",
        "time_origin_ns": origin,
        "window_ms": [(lo - origin) / 1e6, (hi - origin) / 1e6],
        "steps": [int(shown[0]), int(shown[-1]) + 1] if len(shown) else [],
        "events": events,
        "trace_events": kept,  # of the events, the trace's own (the rest are traceinspect's)
        "max_events": max_events,
        "dropped_events": sum(dropped.values()),
        "dropped_by_kind": dropped,
    }
