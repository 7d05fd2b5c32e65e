"""The Perfetto file's tracks: traceinspect's own (steps, gaps, the verdict), and the
processes, threads and lanes the trace's events are written on."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from traceinspect import schema as S
from traceinspect.analysis.result import Analysis
from traceinspect.trace import Trace
from traceinspect.vocabulary import CAUSES

_TOOL_PID = 1
_CATEGORY = "traceinspect"


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
