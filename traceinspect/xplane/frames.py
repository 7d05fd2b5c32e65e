"""Decoded columns (one dict per host file) -> the pandas frames of a Trace.

Several hosts are merged at the column level: per-file string codes are remapped onto
one category list per column, and row numbers (plane, line, event, metadata) are offset,
so no frame is built twice and categoricals never need a union afterwards.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from traceinspect import schema as S
from traceinspect.xplane.raw import code_dtype

_STRING_TABLES = ("event_names", "stat_names", "str_values")
_STAT_SINKS = {
    "event_stats": S.EVENT_ROW,
    "aggregated_stats": S.AGGREGATED_ROW,
    "plane_stats": S.PLANE_ROW,
    "metadata_stats": S.METADATA_ROW,
}


@dataclass(frozen=True)
class Frames:
    """Every frame of a trace; the fields of :class:`traceinspect.Trace`."""

    planes: pd.DataFrame
    lines: pd.DataFrame
    events: pd.DataFrame
    event_stats: pd.DataFrame
    plane_stats: pd.DataFrame
    event_metadata: pd.DataFrame
    metadata_stats: pd.DataFrame
    aggregated_events: pd.DataFrame
    aggregated_stats: pd.DataFrame
    hostnames: tuple[str, ...]
    errors: tuple[str, ...]
    warnings: tuple[str, ...]


def _col(arr: np.ndarray, dtype: type | str | np.dtype[Any]) -> np.ndarray:
    # Columns are typed already (raw.typed); this only documents what each one is.
    assert arr.dtype == np.dtype(dtype), (arr.dtype, dtype)
    return arr


def _cat(codes: np.ndarray, categories: Sequence[str]) -> pd.Categorical:
    # Codes come from our own decoders and always index the category list. Object
    # categories: names are looked up, not computed on, and stay plain Python strings.
    index: Any = pd.Index(list(categories), dtype=object)
    return pd.Categorical.from_codes(codes, categories=index)


def _small(codes: np.ndarray, n_categories: int) -> np.ndarray:
    """Codes in the dtype pandas would choose for ``n_categories`` (int8, int16 or int32)."""
    return codes.astype(code_dtype(n_categories), copy=False)


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


def build_frames(raws: Sequence[dict[str, Any]], hosts: Sequence[str]) -> Frames:
    """Frames for one run: ``raws[i]`` is the decoder output for host file ``hosts[i]``."""
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
        add("planes", S.XPLANE_ID, _col(raw["planes"]["xplane_id"], np.int64))
        lines = raw["lines"]
        add("lines", S.PLANE_ROW, _shift(_col(lines["plane_row"], np.int32), plane_off))
        for src, dst in (
            ("line_id", S.LINE_ID),
            ("display_id", S.DISPLAY_ID),
            ("timestamp_ns", S.TIMESTAMP_NS),
            ("duration_ps", S.LINE_DURATION_PS),
            ("timed_events", S.EVENT_COUNT),
            ("first_start_ns", S.FIRST_START_NS),
            ("last_end_ns", S.LAST_END_NS),
        ):
            add("lines", dst, _col(lines[src], np.int64))
        ev = raw["events"]
        names = _col(ev["name"], code_dtype(len(raw["event_names"])))  # narrowed: raw.typed
        names = _take(maps["event_names"][i], names)
        add("events", S.LINE_ROW, _shift(_col(ev["line_row"], np.int32), line_off))
        add("events", S.NAME, names)
        add("events", S.START_NS, _col(ev["start_ns"], np.int64))
        add("events", S.DURATION_NS, _col(ev["duration_ns"], np.int64))
        ag = raw["aggregated"]
        add("aggregated", S.LINE_ROW, _shift(_col(ag["line_row"], np.int32), line_off))
        add("aggregated", S.NAME, _take(maps["event_names"][i], _col(ag["name"], np.int32)))
        add("aggregated", S.OCCURRENCES, _col(ag["occurrences"], np.int64))
        add("aggregated", S.TOTAL_DURATION_PS, _col(ag["duration_ps"], np.int64))
        md = raw["metadata"]
        add("metadata", S.PLANE_ROW, _shift(_col(md["plane_row"], np.int32), plane_off))
        add("metadata", S.METADATA_ID, _col(md["metadata_id"], np.int64))
        add("metadata", S.NAME, _take(maps["event_names"][i], _col(md["name"], np.int32)))
        offsets = {
            "event_stats": event_off,
            "aggregated_stats": agg_off,
            "plane_stats": plane_off,
            "metadata_stats": md_off,
        }
        for sink, offset in offsets.items():
            st = raw[sink]
            add(sink, "owner", _shift(_col(st["owner"], np.int32), offset))
            add(sink, S.STAT, _take(maps["stat_names"][i], _col(st["stat"], np.int32)))
            add(sink, S.KIND, _col(st["kind"], np.int8))
            add(sink, S.INT_VALUE, _col(st["int_value"], np.int64))
            add(sink, S.FLOAT_VALUE, _col(st["float_value"], np.float64))
            add(sink, S.STR_VALUE, _take(maps["str_values"][i], _col(st["str_value"], np.int32)))
        plane_off += n_planes
        line_off += len(raw["line_names"])
        event_off += len(names)
        agg_off += len(cols["aggregated"][S.NAME][-1])
        md_off += len(raw["metadata_display_names"])

    def joined(group: str, name: str, dtype: type | str) -> np.ndarray:
        return _concat(cols.get(group, {}).get(name, []), dtype)

    # Planes.
    plane_host_arr = _concat(plane_host, np.int32)
    plane_codes, plane_cats = pd.factorize(pd.Index(plane_names, dtype=object))
    line_plane = joined("lines", S.PLANE_ROW, np.int32)
    line_codes, line_cats = pd.factorize(pd.Index(line_names, dtype=object))
    ev_line = joined("events", S.LINE_ROW, np.int32)
    event_count = joined("lines", S.EVENT_COUNT, np.int64)
    planes = pd.DataFrame(
        {
            S.HOST: _cat(plane_host_arr, hosts),
            S.PLANE: _cat(plane_codes, list(plane_cats)),
            S.XPLANE_ID: joined("planes", S.XPLANE_ID, np.int64),
            S.LINE_COUNT: np.bincount(line_plane, minlength=len(plane_names)).astype(np.int64),
            S.EVENT_COUNT: np.bincount(
                line_plane, weights=event_count, minlength=len(plane_names)
            ).astype(np.int64),
        }
    )

    # Lines, with the time span of their events (computed by the decoders).
    starts = joined("events", S.START_NS, np.int64)
    durations = joined("events", S.DURATION_NS, np.int64)
    empty = event_count == 0
    first = pd.array(joined("lines", S.FIRST_START_NS, np.int64), dtype="Int64")
    last = pd.array(joined("lines", S.LAST_END_NS, np.int64), dtype="Int64")
    first[empty] = pd.NA
    last[empty] = pd.NA
    lines_df = pd.DataFrame(
        {
            S.HOST: _cat(plane_host_arr[line_plane], hosts),
            S.PLANE: _cat(plane_codes[line_plane], list(plane_cats)),
            S.PLANE_ROW: line_plane,
            S.LINE: _cat(line_codes, list(line_cats)),
            S.LINE_ID: joined("lines", S.LINE_ID, np.int64),
            S.DISPLAY_ID: joined("lines", S.DISPLAY_ID, np.int64),
            S.DISPLAY_NAME: pd.array(line_display, dtype=object),
            S.TIMESTAMP_NS: joined("lines", S.TIMESTAMP_NS, np.int64),
            S.LINE_DURATION_PS: joined("lines", S.LINE_DURATION_PS, np.int64),
            S.EVENT_COUNT: event_count,
            S.FIRST_START_NS: first,
            S.LAST_END_NS: last,
        }
    )
    # Per-line lookup tables in the smallest code dtype, so that expanding them to
    # millions of events writes 1-2 bytes per value and pandas need not recode them.
    line_host = _small(plane_host_arr[line_plane], len(hosts))
    line_plane_code = _small(plane_codes[line_plane], len(plane_cats))
    line_code = _small(line_codes, len(line_cats))

    def located(line_rows: np.ndarray, counts: np.ndarray | None = None) -> dict[str, Any]:
        """Host, plane and line of rows given by line; with ``counts`` (events per line,
        rows grouped by line, as the decoders write events) a repeat replaces the gather.
        """

        def expand(table: np.ndarray) -> np.ndarray:
            return np.repeat(table, counts) if counts is not None else table[line_rows]

        return {
            S.HOST: _cat(expand(line_host), hosts),
            S.PLANE: _cat(expand(line_plane_code), list(plane_cats)),
            S.LINE: _cat(expand(line_code), list(line_cats)),
        }

    events = pd.DataFrame(
        {
            **located(ev_line, event_count),
            S.LINE_ROW: ev_line,
            S.NAME: _cat(joined("events", S.NAME, np.int32), tables["event_names"]),
            S.START_NS: starts,
            S.DURATION_NS: durations,
        },
        copy=False,
    )
    ag_line = joined("aggregated", S.LINE_ROW, np.int32)
    aggregated = pd.DataFrame(
        {
            **located(ag_line),
            S.LINE_ROW: ag_line,
            S.NAME: _cat(joined("aggregated", S.NAME, np.int32), tables["event_names"]),
            S.OCCURRENCES: joined("aggregated", S.OCCURRENCES, np.int64),
            S.TOTAL_DURATION_PS: joined("aggregated", S.TOTAL_DURATION_PS, np.int64),
        }
    )
    md_plane = joined("metadata", S.PLANE_ROW, np.int32)
    metadata = pd.DataFrame(
        {
            S.HOST: _cat(plane_host_arr[md_plane], hosts),
            S.PLANE: _cat(plane_codes[md_plane], list(plane_cats)),
            S.PLANE_ROW: md_plane,
            S.METADATA_ID: joined("metadata", S.METADATA_ID, np.int64),
            S.NAME: _cat(joined("metadata", S.NAME, np.int32), tables["event_names"]),
            S.DISPLAY_NAME: pd.array(md_display, dtype=object),
        }
    )
    metadata.index.name = S.METADATA_ROW
    stats = {sink: _stats_frame(cols, sink, owner, tables) for sink, owner in _STAT_SINKS.items()}
    planes.index.name = S.PLANE_ROW
    lines_df.index.name = S.LINE_ROW
    events.index.name = S.EVENT_ROW
    aggregated.index.name = S.AGGREGATED_ROW
    return Frames(
        planes=planes,
        lines=lines_df,
        events=events,
        event_stats=stats["event_stats"],
        plane_stats=stats["plane_stats"],
        event_metadata=metadata,
        metadata_stats=stats["metadata_stats"],
        aggregated_events=aggregated,
        aggregated_stats=stats["aggregated_stats"],
        hostnames=tuple(h for raw in raws for h in raw["hostnames"]),
        errors=tuple(e for raw in raws for e in raw["errors"]),
        warnings=tuple(w for raw in raws for w in raw["warnings"]),
    )


def _stats_frame(
    cols: dict[str, dict[str, list[np.ndarray]]],
    sink: str,
    owner: str,
    tables: dict[str, list[str]],
) -> pd.DataFrame:
    group = cols.get(sink, {})

    def joined(name: str, dtype: type | str) -> np.ndarray:
        return _concat(group.get(name, []), dtype)

    return pd.DataFrame(
        {
            owner: joined("owner", np.int32),
            S.STAT: _cat(joined(S.STAT, np.int32), tables["stat_names"]),
            S.KIND: _cat(joined(S.KIND, np.int8), S.STAT_KINDS),
            S.INT_VALUE: joined(S.INT_VALUE, np.int64),
            S.FLOAT_VALUE: joined(S.FLOAT_VALUE, np.float64),
            S.STR_VALUE: _cat(joined(S.STR_VALUE, np.int32), tables["str_values"]),
        },
        copy=False,
    )
