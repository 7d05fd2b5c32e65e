"""A run's columns -> the pandas frames of a Trace (built when first asked for).

The columns (:mod:`traceinspect.xplane.columns`) merged several hosts already: string
codes index one list per column, so no frame is built twice and categoricals never need a
union afterwards.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from traceinspect import schema as S
from traceinspect.xplane.columns import STAT_SINKS, Columns, merge_columns
from traceinspect.xplane.raw import code_dtype


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


def _cat(codes: np.ndarray, categories: Sequence[str]) -> pd.Categorical:
    # Codes come from our own decoders and always index the category list. Object
    # categories: names are looked up, not computed on, and stay plain Python strings.
    index: Any = pd.Index(list(categories), dtype=object)
    return pd.Categorical.from_codes(codes, categories=index)


def _small(codes: np.ndarray, n_categories: int) -> np.ndarray:
    """Codes in the dtype pandas would choose for ``n_categories`` (int8, int16 or int32)."""
    return codes.astype(code_dtype(n_categories), copy=False)


def build_frames(raws: Sequence[dict[str, Any]], hosts: Sequence[str]) -> Frames:
    """Frames for one run: ``raws[i]`` is the decoder output for host file ``hosts[i]``."""
    return frames_of(merge_columns(raws, hosts))


def frames_of(columns: Columns) -> Frames:
    """The pandas frames of a run's columns (the arrays are shared, not copied)."""
    c = columns
    hosts = list(c.hosts)
    plane_cats = c.plane_names
    line_cats = c.line_names
    plane_codes = c.planes[S.PLANE]
    plane_host_arr = c.planes[S.HOST]
    line_plane = c.lines[S.PLANE_ROW]
    event_count = c.lines[S.EVENT_COUNT]
    n_planes = len(plane_codes)
    planes = pd.DataFrame(
        {
            S.HOST: _cat(plane_host_arr, hosts),
            S.PLANE: _cat(plane_codes, plane_cats),
            S.XPLANE_ID: c.planes[S.XPLANE_ID],
            S.LINE_COUNT: np.bincount(line_plane, minlength=n_planes).astype(np.int64),
            S.EVENT_COUNT: np.bincount(line_plane, weights=event_count, minlength=n_planes).astype(
                np.int64
            ),
        }
    )

    # Lines, with the time span of their events (computed by the decoders).
    empty = event_count == 0
    first = pd.array(c.lines[S.FIRST_START_NS], dtype="Int64")
    last = pd.array(c.lines[S.LAST_END_NS], dtype="Int64")
    first[empty] = pd.NA
    last[empty] = pd.NA
    lines_df = pd.DataFrame(
        {
            S.HOST: _cat(plane_host_arr[line_plane], hosts),
            S.PLANE: _cat(plane_codes[line_plane], plane_cats),
            S.PLANE_ROW: line_plane,
            S.LINE: _cat(c.lines[S.LINE], line_cats),
            S.LINE_ID: c.lines[S.LINE_ID],
            S.DISPLAY_ID: c.lines[S.DISPLAY_ID],
            S.DISPLAY_NAME: pd.array(c.line_display_names, dtype=object),
            S.TIMESTAMP_NS: c.lines[S.TIMESTAMP_NS],
            S.LINE_DURATION_PS: c.lines[S.LINE_DURATION_PS],
            S.EVENT_COUNT: event_count,
            S.FIRST_START_NS: first,
            S.LAST_END_NS: last,
        }
    )
    # Per-line lookup tables in the smallest code dtype, so that expanding them to
    # millions of events writes 1-2 bytes per value and pandas need not recode them.
    line_host = _small(plane_host_arr[line_plane], len(hosts))
    line_plane_code = _small(plane_codes[line_plane], len(plane_cats))
    line_code = _small(c.lines[S.LINE], len(line_cats))

    def located(line_rows: np.ndarray, counts: np.ndarray | None = None) -> dict[str, Any]:
        """Host, plane and line of rows given by line; with ``counts`` (events per line,
        rows grouped by line, as the decoders write events) a repeat replaces the gather.
        """

        def expand(table: np.ndarray) -> np.ndarray:
            return np.repeat(table, counts) if counts is not None else table[line_rows]

        return {
            S.HOST: _cat(expand(line_host), hosts),
            S.PLANE: _cat(expand(line_plane_code), plane_cats),
            S.LINE: _cat(expand(line_code), line_cats),
        }

    ev = c.events
    events = pd.DataFrame(
        {
            **located(ev[S.LINE_ROW], event_count),
            S.LINE_ROW: ev[S.LINE_ROW],
            S.NAME: _cat(ev[S.NAME], c.event_names),
            S.START_NS: ev[S.START_NS],
            S.DURATION_NS: ev[S.DURATION_NS],
        },
        copy=False,
    )
    ag = c.aggregated
    aggregated = pd.DataFrame(
        {
            **located(ag[S.LINE_ROW]),
            S.LINE_ROW: ag[S.LINE_ROW],
            S.NAME: _cat(ag[S.NAME], c.event_names),
            S.OCCURRENCES: ag[S.OCCURRENCES],
            S.TOTAL_DURATION_PS: ag[S.TOTAL_DURATION_PS],
        }
    )
    md = c.metadata
    md_plane = md[S.PLANE_ROW]
    metadata = pd.DataFrame(
        {
            S.HOST: _cat(plane_host_arr[md_plane], hosts),
            S.PLANE: _cat(plane_codes[md_plane], plane_cats),
            S.PLANE_ROW: md_plane,
            S.METADATA_ID: md[S.METADATA_ID],
            S.NAME: _cat(md[S.NAME], c.event_names),
            S.DISPLAY_NAME: pd.array(c.metadata_display_names, dtype=object),
        }
    )
    metadata.index.name = S.METADATA_ROW
    stats = {sink: _stats_frame(c, sink, owner) for sink, owner in STAT_SINKS.items()}
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
        hostnames=c.hostnames,
        errors=c.errors,
        warnings=c.warnings,
    )


def _stats_frame(columns: Columns, sink: str, owner: str) -> pd.DataFrame:
    st = columns.stats[sink]
    return pd.DataFrame(
        {
            owner: st["owner"],
            S.STAT: _cat(st[S.STAT], columns.stat_names),
            S.KIND: _cat(st[S.KIND], S.STAT_KINDS),
            S.INT_VALUE: st[S.INT_VALUE],
            S.FLOAT_VALUE: st[S.FLOAT_VALUE],
            S.STR_VALUE: _cat(st[S.STR_VALUE], columns.str_values),
        },
        copy=False,
    )
