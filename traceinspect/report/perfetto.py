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
from traceinspect.trace import Trace, typed_values
from traceinspect.vocabulary import CAUSES
from traceinspect.xplane.raw import printable

#: Events written at most by default: Perfetto UI opens a file of this many in a browser tab
#: (about 100 MB of JSON; chrome://tracing slows down well before).
MAX_EVENTS = 1_000_000
PERFETTO_UI = "https://ui.perfetto.dev"
#: The kinds of a trace's own events, in the order they are kept when the cap is hit: the
#: device's work and the training thread (what the gaps are about) before other host threads.
KINDS = ("device", "training thread", "other host")
_TOOL_PID = 1
_CATEGORY = "traceinspect"
# gzip.open's default, 9, costs 2.7x the time for 7% less: on the benchmark's 94 MB of
# JSON, 3.3 s for 8.1 MB against 1.2 s for 8.8 MB (level 1: 0.5 s for 11.2 MB).
_GZIP_LEVEL = 6
_CHUNK = 20_000  # events joined and written at a time
_JSON_SAFE_INT = 2**53  # larger integers lose digits in JavaScript viewers: written as text


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


# --- traceinspect's own tracks ----------------------------------------------------------------


def _us(ns: int | float) -> str:
    """Microseconds to the nanosecond, as a JSON number."""
    return f"{ns / 1e3:.3f}"


def _tool_events(
    analysis: Analysis, tids: tuple[int, int], origin: int, lo: int, hi: int
) -> list[str]:
    """The steps and gaps overlapping ``[lo, hi)``, and the verdict at ``lo``."""
    steps_tid, gaps_tid = tids
    out = [
        _event(
            "i",
            f"verdict: {analysis.verdict}",
            steps_tid,
            lo - origin,
            None,
            {
                "verdict": analysis.verdict,
                "summary": analysis.summary,
                "recommendations": [r.message for r in analysis.recommendations],
                "notes": list(analysis.notes),
            },
            scope="g",
        )
    ]
    per_step = analysis.per_step
    for index, row in enumerate(per_step.itertuples(index=False)):
        start, wall = int(getattr(row, S.START_NS)), int(getattr(row, S.WALL_NS))
        if start >= hi or start + wall <= lo:
            continue
        args = {
            "step": int(getattr(row, S.STEP)),
            "index": index,
            "wall_ms": round(wall / 1e6, 4),
            "busy_ms": round(getattr(row, S.BUSY_NS) / 1e6, 4),
            "idle_ms": round(getattr(row, S.IDLE_NS) / 1e6, 4),
            "idle_by_cause_ms": {
                c: round(getattr(row, S.idle_cause_ns(c)) / 1e6, 4) for c in CAUSES
            },
        }
        name = f"step {int(getattr(row, S.STEP))}"
        out.append(_event("X", name, steps_tid, start - origin, wall, args))
    gaps = analysis.gaps
    inside = gaps[(gaps[S.START_NS] < hi) & (gaps[S.END_NS] > lo)]
    for gap in inside.to_dict("records"):
        duration = int(gap[S.DURATION_NS])
        args = {
            "step": int(gap[S.STEP]),
            "duration_ms": round(duration / 1e6, 4),
            "evidence": list(gap[S.EVIDENCE]),
            "idle_by_cause_ms": {c: round(gap[c] / 1e6, 4) for c in CAUSES},
        }
        if gap.get(S.SYNC_SITE) is not None:
            args["sync_site"] = gap[S.SYNC_SITE]
        if gap.get(S.CAUSE_REASON) is not None:
            args[S.CAUSE_REASON] = gap[S.CAUSE_REASON]
        cause = str(gap[S.CAUSE])
        out.append(_event("X", cause, gaps_tid, int(gap[S.START_NS]) - origin, duration, args))
    return out


def _event(
    ph: str,
    name: str,
    tid: int,
    ts_ns: int,
    dur_ns: int | None,
    args: dict[str, Any],
    scope: str | None = None,
) -> str:
    event: dict[str, Any] = {"ph": ph, "name": name, "cat": _CATEGORY, "pid": _TOOL_PID, "tid": tid}
    text = json.dumps(event)[:-1] + f', "ts": {_us(ts_ns)}'
    if dur_ns is not None:
        text += f', "dur": {_us(dur_ns)}'
    if scope is not None:
        text += f', "s": "{scope}"'
    return text + ', "args": ' + json.dumps(args) + "}"


_TOOL_THREADS = ("steps", "idle gaps")


def _tool_tids(trace: Trace) -> tuple[int, int]:
    """The tids of traceinspect's threads: above every pid (a thread whose tid is a pid
    would be taken for that process's main thread)."""
    base = len(trace.planes) + 2
    return base, base + 1


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


# --- tracks: processes, threads, lanes --------------------------------------------------------


def _lanes(line_rows: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Each event's lane within its line: 0 where the line's events nest, as almost all do.
    Perfetto drops a slice that overlaps another on its thread without nesting in it (TPU
    ``Async XLA Ops`` do; so does a step annotation that starts inside a Python frame and
    outlasts it), so the events that break the nesting move to further lanes, each into
    the first where it nests."""
    lanes = np.zeros(len(line_rows), dtype=np.int64)
    moved = np.zeros(len(line_rows), dtype=bool)
    check = np.arange(len(line_rows))
    while len(check):
        bad = check[_misnested(line_rows[check], starts[check], ends[check])]
        moved[bad] = True
        # Moving some may leave others misnested on those lines: check them again.
        check = np.flatnonzero(np.isin(line_rows, line_rows[bad]) & ~moved)
    for row in np.unique(line_rows[moved]).tolist():
        rows = np.flatnonzero(moved & (line_rows == row))
        order = rows[np.lexsort((-ends[rows], starts[rows]))]
        open_ends: list[list[int]] = []  # per lane from 1, the ends of events still open
        for r, s, e in zip(
            order.tolist(), starts[order].tolist(), ends[order].tolist(), strict=True
        ):
            for lane, stack in enumerate(open_ends, start=1):
                while stack and stack[-1] <= s:
                    stack.pop()
                if not stack or stack[-1] >= e:
                    stack.append(e)
                    lanes[r] = lane
                    break
            else:
                open_ends.append([e])
                lanes[r] = len(open_ends)
    return lanes


def _misnested(line_rows: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Which events break their line's nesting: True for at least one event of every line
    where two events overlap without one containing the other (for both of a lone pair).

    Vectorised, as bracket matching: each event opens at its start and closes at its end;
    in time order (at one instant closes first, outer events open first and close last)
    an event nests when its close is the first token after its open at which the depth
    falls below the open's.
    """
    out = np.zeros(len(line_rows), dtype=bool)
    real = np.flatnonzero(ends > starts)  # a zero-length event nests anywhere
    line, s, e = line_rows[real], starts[real], ends[real]
    n = len(s)
    if n < 2:
        return out
    idx = np.arange(n)
    order = np.lexsort(
        (
            np.concatenate((idx, -idx)),  # identical events: the later one inside
            np.concatenate((-e, -s)),  # opens: longest first; closes: latest start first
            np.concatenate((np.ones(n), np.zeros(n))),  # at one instant, closes first
            np.concatenate((s, e)),
            np.concatenate((line, line)),
        )
    )
    position = np.empty(2 * n, dtype=np.int64)
    position[order] = np.arange(2 * n)
    depth = np.cumsum(np.where(order < n, 1, -1))  # after each token, in time order
    width = 2 * n
    keys = np.sort(depth * width + np.arange(2 * n))
    open_at = position[:n]
    below = (depth[open_at] - 1) * width
    first = np.minimum(np.searchsorted(keys, below + open_at, "right"), 2 * n - 1)
    out[real] = keys[first] != below + position[n:]
    return out


class _Tracks:
    """pids and tids: traceinspect's process is 1, each plane ``2 + plane_row``; each
    line's tid is above every pid and traceinspect's threads, each extra lane's above every
    line's."""

    def __init__(
        self, trace: Trace, analysis: Analysis, line_rows: np.ndarray, lanes: np.ndarray
    ) -> None:
        self.trace = trace
        self.analysis = analysis
        lines = trace.lines
        self.tool_tids = _tool_tids(trace)
        base = self.tool_tids[1] + 1
        self.line_tid = base + np.arange(len(lines), dtype=np.int64)
        width = int(lanes.max()) + 1 if len(lanes) else 1
        pairs = [divmod(int(k), width) for k in np.unique(line_rows * width + lanes)]
        extra = [p for p in pairs if p[1] > 0]
        self.lane_tid = {p: base + len(lines) + i for i, p in enumerate(extra)}
        self.used = pairs
        tids = self.line_tid[line_rows]
        for (row, lane), tid in self.lane_tid.items():
            tids[(line_rows == row) & (lanes == lane)] = tid
        self.tids = tids

    def naming_events(self) -> list[str]:
        """``M`` events naming and ordering traceinspect's process and threads and every
        plane and line (lane) that holds a written event."""
        trace, lines = self.trace, self.trace.lines
        timeline = self.analysis.timeline
        assert timeline is not None
        out = [
            _meta("process_name", _TOOL_PID, None, "traceinspect"),
            _meta("process_sort_index", _TOOL_PID, None, 0),
        ]
        for i, (tid, name) in enumerate(zip(self.tool_tids, _TOOL_THREADS, strict=True)):
            out += [
                _meta("thread_name", _TOOL_PID, tid, name),
                _meta("thread_sort_index", _TOOL_PID, tid, i),
            ]
        plane_of_line = lines[S.PLANE_ROW].to_numpy()
        plane_rows = sorted({int(plane_of_line[r]) for r, _ in self.used})
        plane_names = trace.planes[S.PLANE].astype(str).tolist()
        hosts = trace.planes[S.HOST].astype(str).tolist()
        # Devices first, in plane order, then the host's planes.
        on_host = [not plane_names[p].startswith("/device:") for p in plane_rows]
        for rank, (_, p) in enumerate(sorted(zip(on_host, plane_rows, strict=True))):
            name = plane_names[p]
            if len(trace.hosts) > 1:
                name = f"{hosts[p]} {name}"
            out += [
                _meta("process_name", 2 + p, None, name),
                _meta("process_sort_index", 2 + p, None, rank + 1),
            ]
        device_lines = set(timeline.device_lines)
        line_names = lines[S.LINE].astype(str).tolist()
        for row, lane in self.used:
            plane = int(plane_of_line[row])
            tid = int(self.line_tid[row]) if lane == 0 else self.lane_tid[(row, lane)]
            name = line_names[row]
            if row == timeline.training_line_row:
                name += " (training thread)"
            elif row in device_lines and not plane_names[plane].startswith("/device:"):
                name += " (device work)"
            if lane:
                name += f" (lane {lane + 1})"
            # The training thread, the device's work, then the other lines in trace order.
            if row == timeline.training_line_row:
                rank = 0
            else:
                rank = 1 + row + (0 if row in device_lines else len(lines))
            out += [
                _meta("thread_name", 2 + plane, tid, name),
                _meta("thread_sort_index", 2 + plane, tid, rank * 1000 + lane),
            ]
        return out


def _meta(kind: str, pid: int, tid: int | None, value: str | int) -> str:
    key = "name" if kind.endswith("_name") else "sort_index"
    event: dict[str, Any] = {"ph": "M", "name": kind, "pid": pid, "tid": tid or 0, "ts": 0}
    event["args"] = {key: value}
    return json.dumps(event)


# --- the trace's own events -------------------------------------------------------------------


def _trace_events(trace: Trace, kept: pd.DataFrame, tids: np.ndarray, origin: int) -> list[str]:
    """One ``X`` event per kept event, its stats as ``args``."""
    names = kept[S.NAME].cat.categories
    pid_of_tid = np.zeros(int(tids.max()) + 1 if len(tids) else 1, dtype=np.int64)
    pid_of_tid[tids] = 2 + trace.lines[S.PLANE_ROW].to_numpy()[kept[S.LINE_ROW].to_numpy()]
    # What comes before "ts" depends on the name and the thread alone: made once per pair
    # (thousands of pairs for a million events).
    pairs, pair_of_event = np.unique(
        kept[S.NAME].cat.codes.to_numpy().astype(np.int64) * len(pid_of_tid) + tids,
        return_inverse=True,
    )
    heads = np.array(
        [
            f'{{"ph":"X","name":{json.dumps(str(names[c]))},"pid":{pid_of_tid[t]},"tid":{t},"ts":'
            for c, t in (divmod(int(k), len(pid_of_tid)) for k in pairs)
        ],
        dtype=object,
    )
    ts = (kept[S.START_NS].to_numpy() - origin) / 1e3
    dur = kept[S.DURATION_NS].to_numpy() / 1e3
    args = np.full(len(kept), "", dtype=object)
    for row, text in _stat_args(trace, kept).items():
        args[row] = text
    return [
        f'{h}{s:.3f},"dur":{d:.3f}{a}}}'
        for h, s, d, a in zip(
            heads[pair_of_event].tolist(), ts.tolist(), dur.tolist(), args.tolist(), strict=True
        )
    ]


def _stat_args(trace: Trace, kept: pd.DataFrame) -> dict[int, str]:
    """``,"args":{...}`` of every kept event that carries stats, by position in ``kept``."""
    stats = trace.stats_of(kept)
    if stats.empty:
        return {}
    position = pd.Series(np.arange(len(kept)), index=kept.index)
    by_event: dict[int, dict[str, Any]] = {}
    for row, stat, value in zip(
        position.loc[stats[S.EVENT_ROW].to_numpy()].tolist(),
        stats[S.STAT].astype(str).tolist(),
        typed_values(stats).tolist(),
        strict=True,
    ):
        big = isinstance(value, int) and abs(value) >= _JSON_SAFE_INT
        # Bytes that are not UTF-8 as \xNN, not as "\udcff".
        shown = printable(value) if isinstance(value, str) else str(value) if big else value
        by_event.setdefault(row, {})[stat] = shown
    return {row: ',"args":' + json.dumps(args) for row, args in by_event.items()}


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
