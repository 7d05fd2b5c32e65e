"""Decoded columns (one dict per host file) -> one run's columns, as numpy arrays.

What the analysis reads without pandas (``traceinspect analyze`` never imports it), and
what the pandas frames of a Trace are built from (:mod:`traceinspect.xplane.frames`).

Several hosts are merged at the column level: per-file string codes are remapped onto
one string table per column, and row numbers (plane, line, event, metadata) are offset.
Every table is a dict of equally long arrays keyed by the frames' column names
(:mod:`traceinspect.schema`); string columns hold codes into :attr:`Columns.strings`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from traceinspect import schema as S
from traceinspect.xplane.raw import code_dtype

_STRING_TABLES = ("event_names", "stat_names", "str_values")
#: The stat tables and the column naming each stat's owner.
STAT_SINKS = {
    "event_stats": S.EVENT_ROW,
    "aggregated_stats": S.AGGREGATED_ROW,
    "plane_stats": S.PLANE_ROW,
    "metadata_stats": S.METADATA_ROW,
}
Table = dict[str, np.ndarray]


@dataclass(frozen=True, eq=False)
class Columns:
    """One run's decoded tables as numpy arrays, keyed by the frames' column names.

    ``planes``: plane (codes into ``plane_names``), host (codes into ``hosts``), xplane_id;
    ``lines``: plane_row, line (codes into ``line_names``) and the lines frame's numbers
    (``first_start_ns``/``last_end_ns`` are 0 on lines without events); ``events``:
    line_row, name (codes into ``event_names``), start_ns, duration_ns, grouped by line in
    line order; ``aggregated`` and ``metadata`` likewise; ``stats[sink]``: owner (the row
    of the frame it belongs to), stat (codes into ``stat_names``), kind (codes into
    :data:`~traceinspect.schema.STAT_KINDS`), int, float and str (codes into
    ``str_values``) values.
    """

    hosts: tuple[str, ...]
    planes: Table
    lines: Table
    events: Table
    aggregated: Table
    metadata: Table
    stats: dict[str, Table]
    plane_names: list[str]
    line_names: list[str]
    line_display_names: list[str]
    metadata_display_names: list[str]
    event_names: list[str]
    stat_names: list[str]
    str_values: list[str]
    hostnames: tuple[str, ...]
    errors: tuple[str, ...]
    warnings: tuple[str, ...]

    # --- lookups the analysis makes -----------------------------------------------------------
    def plane_of_line(self) -> list[str]:
        """The plane's name of every line."""
        codes = self.planes[S.PLANE][self.lines[S.PLANE_ROW]]
        return [self.plane_names[c] for c in codes.tolist()]

    def line_name(self) -> list[str]:
        """Every line's name."""
        return [self.line_names[c] for c in self.lines[S.LINE].tolist()]

    def spans(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The starts and ends (ns) of these events (rows of ``events``)."""
        starts = self.events[S.START_NS][rows]
        return starts, starts + self.events[S.DURATION_NS][rows]

    def stat_rows(self, stat: str, sink: str = "event_stats") -> Table:
        """The rows of one stat in ``sink`` (``owner``, ``kind``, ``int_value``,
        ``float_value``, ``str_value`` codes), in stored order; empty when no row has it."""
        table = self.stats[sink]
        try:
            code = self.stat_names.index(stat)
        except ValueError:
            return {name: column[:0] for name, column in table.items()}
        keep = table[S.STAT] == code
        return {name: column[keep] for name, column in table.items()}

    def strings(self, codes: np.ndarray) -> np.ndarray:
        """The ``str_values`` of these codes, as an object array (None for -1)."""
        table = np.array([*self.str_values, None], dtype=object)
        return table[np.where(codes < 0, len(self.str_values), codes)]


def _shift(rows: np.ndarray, offset: int) -> np.ndarray:
    return rows + np.int32(offset) if offset else rows


def _remap(tables: list[list[str]]) -> tuple[list[str], list[np.ndarray]]:
    """Union of per-file string tables, and for each file old code -> new code."""
    merged: dict[str, int] = {}
    maps = []
    for table in tables:
        maps.append(
            np.fromiter((merged.setdefault(s, len(merged)) for s in table), np.int32, len(table))
        )
    return list(merged), maps


def _take(mapping: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """Apply a code mapping, keeping -1 (missing) as -1."""
    if len(mapping) == 0:
        return codes
    out = mapping[np.maximum(codes, 0)]
    return np.where(codes < 0, -1, out).astype(np.int32) if (codes < 0).any() else out


def _concat(parts: list[np.ndarray], dtype: type | str) -> np.ndarray:
    if len(parts) == 1:
        return parts[0]
    return np.concatenate(parts) if parts else np.empty(0, dtype=dtype)


def _factorize(values: list[str]) -> tuple[np.ndarray, list[str]]:
    """Codes and distinct values in order of first appearance."""
    seen: dict[str, int] = {}
    codes = np.fromiter((seen.setdefault(v, len(seen)) for v in values), np.int32, len(values))
    return codes, list(seen)


def merge_columns(raws: Sequence[dict[str, Any]], hosts: Sequence[str]) -> Columns:
    """One run's columns: ``raws[i]`` is the decoder output for host file ``hosts[i]``."""
    single = len(raws) == 1
    tables: dict[str, list[str]] = {}
    maps: dict[str, list[np.ndarray]] = {}
    for key in _STRING_TABLES:
        if single:
            tables[key] = raws[0][key]
            maps[key] = [np.empty(0, np.int32)]
        else:
            tables[key], maps[key] = _remap([r[key] for r in raws])

    plane_host: list[np.ndarray] = []
    plane_off = line_off = event_off = agg_off = md_off = 0
    cols: dict[str, dict[str, list[np.ndarray]]] = {}

    def add(group: str, name: str, arr: np.ndarray) -> None:
        cols.setdefault(group, {}).setdefault(name, []).append(arr)

    plane_names: list[str] = []
    line_names: list[str] = []
    line_display: list[str] = []
    md_display: list[str] = []
    for i, raw in enumerate(raws):
        n_planes = len(raw["plane_names"])
        plane_names += raw["plane_names"]
        line_names += raw["line_names"]
        line_display += raw["line_display_names"]
        md_display += raw["metadata_display_names"]
        plane_host.append(np.full(n_planes, i, dtype=np.int32))
        add("planes", S.XPLANE_ID, raw["planes"]["xplane_id"])
        lines = raw["lines"]
        add("lines", S.PLANE_ROW, _shift(lines["plane_row"], plane_off))
        for src, dst in (
            ("line_id", S.LINE_ID),
            ("display_id", S.DISPLAY_ID),
            ("timestamp_ns", S.TIMESTAMP_NS),
            ("duration_ps", S.LINE_DURATION_PS),
            ("timed_events", S.EVENT_COUNT),
            ("first_start_ns", S.FIRST_START_NS),
            ("last_end_ns", S.LAST_END_NS),
        ):
            add("lines", dst, lines[src])
        ev = raw["events"]
        names = _take(maps["event_names"][i], ev["name"])  # narrowed: raw.typed
        add("events", S.LINE_ROW, _shift(ev["line_row"], line_off))
        add("events", S.NAME, names)
        add("events", S.START_NS, ev["start_ns"])
        add("events", S.DURATION_NS, ev["duration_ns"])
        ag = raw["aggregated"]
        add("aggregated", S.LINE_ROW, _shift(ag["line_row"], line_off))
        add("aggregated", S.NAME, _take(maps["event_names"][i], ag["name"]))
        add("aggregated", S.OCCURRENCES, ag["occurrences"])
        add("aggregated", S.TOTAL_DURATION_PS, ag["duration_ps"])
        md = raw["metadata"]
        add("metadata", S.PLANE_ROW, _shift(md["plane_row"], plane_off))
        add("metadata", S.METADATA_ID, md["metadata_id"])
        add("metadata", S.NAME, _take(maps["event_names"][i], md["name"]))
        offsets = {
            "event_stats": event_off,
            "aggregated_stats": agg_off,
            "plane_stats": plane_off,
            "metadata_stats": md_off,
        }
        for sink, offset in offsets.items():
            st = raw[sink]
            add(sink, "owner", _shift(st["owner"], offset))
            add(sink, S.STAT, _take(maps["stat_names"][i], st["stat"]))
            add(sink, S.KIND, st["kind"])
            add(sink, S.INT_VALUE, st["int_value"])
            add(sink, S.FLOAT_VALUE, st["float_value"])
            add(sink, S.STR_VALUE, _take(maps["str_values"][i], st["str_value"]))
        plane_off += n_planes
        line_off += len(raw["line_names"])
        event_off += len(names)
        agg_off += len(ag["name"])
        md_off += len(raw["metadata_display_names"])

    def joined(group: str, names: dict[str, type | str]) -> Table:
        parts = cols.get(group, {})
        return {name: _concat(parts.get(name, []), dtype) for name, dtype in names.items()}

    plane_codes, plane_table = _factorize(plane_names)
    line_codes, line_table = _factorize(line_names)
    planes = {
        S.PLANE: plane_codes,
        S.HOST: _concat(plane_host, np.int32),
        **joined("planes", {S.XPLANE_ID: np.int64}),
    }
    lines_ = {
        **joined("lines", {S.PLANE_ROW: np.int32}),
        S.LINE: line_codes,
        **joined(
            "lines",
            dict.fromkeys(
                (
                    S.LINE_ID,
                    S.DISPLAY_ID,
                    S.TIMESTAMP_NS,
                    S.LINE_DURATION_PS,
                    S.EVENT_COUNT,
                    S.FIRST_START_NS,
                    S.LAST_END_NS,
                ),
                np.int64,
            ),
        ),
    }
    events = joined(
        "events",
        {
            S.LINE_ROW: np.int32,
            S.NAME: code_dtype(len(tables["event_names"])).str,
            S.START_NS: np.int64,
            S.DURATION_NS: np.int64,
        },
    )
    aggregated = joined(
        "aggregated",
        {
            S.LINE_ROW: np.int32,
            S.NAME: np.int32,
            S.OCCURRENCES: np.int64,
            S.TOTAL_DURATION_PS: np.int64,
        },
    )
    metadata = joined(
        "metadata", {S.PLANE_ROW: np.int32, S.METADATA_ID: np.int64, S.NAME: np.int32}
    )
    stats = {
        sink: joined(
            sink,
            {
                "owner": np.int32,
                S.STAT: np.int32,
                S.KIND: np.int8,
                S.INT_VALUE: np.int64,
                S.FLOAT_VALUE: np.float64,
                S.STR_VALUE: np.int32,
            },
        )
        for sink in STAT_SINKS
    }
    return Columns(
        hosts=tuple(hosts),
        planes=planes,
        lines=lines_,
        events=events,
        aggregated=aggregated,
        metadata=metadata,
        stats=stats,
        plane_names=plane_table,
        line_names=line_table,
        line_display_names=line_display,
        metadata_display_names=md_display,
        event_names=tables["event_names"],
        stat_names=tables["stat_names"],
        str_values=tables["str_values"],
        hostnames=tuple(h for raw in raws for h in raw["hostnames"]),
        errors=tuple(e for raw in raws for e in raw["errors"]),
        warnings=tuple(w for raw in raws for w in raw["warnings"]),
    )
