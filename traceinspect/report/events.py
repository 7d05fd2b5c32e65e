"""Rendering selected events as a table, CSV, Parquet or JSON (``traceinspect events``)."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from traceinspect import schema as S
from traceinspect.errors import UsageError
from traceinspect.trace import Trace


@dataclass(frozen=True)
class Rendered:
    text: str | None  # what to print or write; None when a binary file was written
    note: str  # one line for stderr (what was selected, what was cut)


def events_frame(
    trace: Trace, selected: pd.DataFrame, *, sort: str, limit: int | None, stats: bool
) -> pd.DataFrame:
    """The rows to export: sorted, cut to ``limit``, stats joined as columns."""
    if sort == "start":
        selected = selected.sort_values(S.START_NS, kind="stable")
    elif sort == "duration":
        selected = selected.sort_values(S.DURATION_NS, ascending=False, kind="stable")
    if limit is not None:
        selected = selected.iloc[:limit]
    if stats:
        selected = trace.with_stats(selected)
    return selected


def _table(trace: Trace, frame: pd.DataFrame) -> str:
    view = frame.drop(columns=[S.LINE_ROW])
    if len(trace.hosts) == 1:
        view = view.drop(columns=[S.HOST])
    view.insert(
        list(view.columns).index(S.START_NS),
        S.START_MS,
        ((frame[S.START_NS] - trace.start_ns) / 1e6).round(3),
    )
    view.insert(
        list(view.columns).index(S.DURATION_NS),
        "duration_us",
        (frame[S.DURATION_NS] / 1e3).round(3),
    )
    view = view.drop(columns=[S.START_NS, S.DURATION_NS])
    if view.empty:
        return "(no events match)"
    return view.to_string(max_colwidth=60)


def render_events(
    trace: Trace,
    selected: pd.DataFrame,
    *,
    fmt: str,
    sort: str,
    limit: int | None,
    stats: bool,
    output: Path | None,
) -> Rendered:
    frame = events_frame(trace, selected, sort=sort, limit=limit, stats=stats)
    note = f"{len(frame):,} of {len(selected):,} matching events ({trace.event_count:,} in all)"
    if fmt == "table":
        return Rendered(_table(trace, frame), note)
    if fmt == "csv":
        try:
            return Rendered(frame.to_csv(), note)
        except csv.Error:
            # Python 3.10's csv cannot write a NUL character (a name holding one) without an
            # escape character ("need to escape"): a backslash then, which doubles the
            # backslashes of other names too.
            return Rendered(frame.to_csv(escapechar="\\"), note)
    if fmt == "json":
        records = frame.reset_index()  # keep event_row, the key into event_stats
        return Rendered(records.to_json(orient="records", indent=1, default_handler=str), note)
    if fmt == "parquet":
        assert output is not None
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise UsageError(
                "--format parquet needs pyarrow: pip install 'traceinspect[parquet]'."
            ) from None
        # Mixed-type stat columns (object) are written as text.
        for column in frame.columns:
            if frame[column].dtype == object:
                frame[column] = frame[column].astype("string")
        frame.to_parquet(output)
        return Rendered(None, f"{note}; wrote {output}")
    raise UsageError(f"unknown format {fmt!r}")
