"""Trace: the columns and frames of one profiling run, and the lookups a notebook user wants.

Its columns' helpers (LineEvents, typed stat values, categorical lookups) are
``trace_arrays.py``; how a run was read (LoadInfo) and its capture sidecar
``trace_source.py``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from traceinspect import schema as S
from traceinspect.errors import EmptyTraceError
from traceinspect.sidecar import Sidecar
from traceinspect.trace_arrays import (
    LineEvents,
    _category_match,
    _combine,
    _stat_column,
    category_codes,
    category_mask,
    stat_values,
    typed_values,
)
from traceinspect.trace_source import LoadInfo, ProgressCallback, read_sidecar
from traceinspect.xplane.columns import Columns, merge_columns
from traceinspect.xplane.fs import Location, URLPath
from traceinspect.xplane.locate import Located, locate
from traceinspect.xplane.raw import Raw, event_count
from traceinspect.xplane.reader import DecoderName, read_run, resolve_decoder

if TYPE_CHECKING:
    import pandas as pd

    from traceinspect.xplane.frames import Frames

__all__ = [
    "LineEvents",
    "LoadInfo",
    "ProgressCallback",
    "category_codes",
    "category_mask",
    "read_sidecar",
    "stat_values",
    "typed_values",
]

log = logging.getLogger(__name__)

_METADATA_PLANE = "/host:metadata"
_TASK_PLANE = "Task Environment"


@dataclass(frozen=True, eq=False)
class Trace:
    """The frames of one run (one XPlane file per host), with lookups.

    ``columns`` holds the decoded tables as numpy arrays (what the analysis reads); the
    frames are built from them when first asked for (pandas DataFrames, names as
    categoricals, times in integer ns):

    - ``planes``: one row per XPlane (index ``plane_row``)
    - ``lines``: one row per XLine, with event counts and time spans (``line_row``)
    - ``events``: one row per XEvent: host, plane, line, line_row, name, start_ns,
      duration_ns (index ``event_row``)
    - ``event_stats``: one row per XStat of an event (``event_row`` column)
    - ``plane_stats``, ``event_metadata``, ``metadata_stats``
    - ``aggregated_events`` / ``aggregated_stats``: XEvents that carry
      ``num_occurrences`` instead of a start time (no place on a timeline)
    """

    columns: Columns
    located: Located
    load_info: LoadInfo
    #: The run's ``traceinspect.capture.json`` when ``traceinspect capture`` made it.
    sidecar: Sidecar | None = field(default=None, repr=False)

    # --- frames ---------------------------------------------------------------------------
    @cached_property
    def frames(self) -> Frames:
        """Every frame, built from the columns when first asked for (pandas is imported
        then, not before: ``analyze`` never needs it)."""
        from traceinspect.xplane.frames import frames_of

        return frames_of(self.columns)

    @property
    def planes(self) -> pd.DataFrame:
        return self.frames.planes

    @property
    def lines(self) -> pd.DataFrame:
        return self.frames.lines

    @property
    def events(self) -> pd.DataFrame:
        return self.frames.events

    @property
    def event_stats(self) -> pd.DataFrame:
        return self.frames.event_stats

    @property
    def plane_stats(self) -> pd.DataFrame:
        return self.frames.plane_stats

    @property
    def event_metadata(self) -> pd.DataFrame:
        return self.frames.event_metadata

    @property
    def metadata_stats(self) -> pd.DataFrame:
        return self.frames.metadata_stats

    @property
    def aggregated_events(self) -> pd.DataFrame:
        return self.frames.aggregated_events

    # --- facts ----------------------------------------------------------------------------
    @property
    def path(self) -> Location:
        """What the user asked for: a local Path, or a URLPath that prints as their URL."""
        return self.located.requested

    @property
    def run_name(self) -> str:
        return self.located.run.name

    @property
    def files(self) -> tuple[Location, ...]:
        return tuple(f.path for f in self.located.run.files)

    @property
    def hosts(self) -> list[str]:
        return list(self.columns.hosts)

    @property
    def event_count(self) -> int:
        return len(self.columns.events[S.START_NS])

    @property
    def start_ns(self) -> int:
        """Earliest event start (ns on the trace's clock: ``schema``'s docstring)."""
        # The decoders record each line's span: a few rows, not a pass over every event.
        lines = self.columns.lines
        spans = lines[S.FIRST_START_NS][lines[S.EVENT_COUNT] > 0]
        return int(spans.min()) if len(spans) else 0

    @property
    def end_ns(self) -> int:
        """Latest event end (ns on the trace's clock: ``schema``'s docstring)."""
        lines = self.columns.lines
        spans = lines[S.LAST_END_NS][lines[S.EVENT_COUNT] > 0]
        return int(spans.max()) if len(spans) else 0

    @property
    def span_ns(self) -> int:
        return self.end_ns - self.start_ns

    @cached_property
    def _line_offsets(self) -> np.ndarray:
        """Where each line's events begin among the events' rows: the decoders write them
        grouped by line, in line order (``offsets[r]:offsets[r + 1]``)."""
        counts = self.columns.lines[S.EVENT_COUNT]
        return np.concatenate(([0], np.cumsum(counts))).astype(np.int64)

    def line_events(self, line_row: int) -> LineEvents:
        """The events of line ``line_row`` as arrays sorted by start (views where the
        columns store them so, as they do for profilers' traces)."""
        ev = self.columns.events
        names = self.columns.event_names
        offsets = self._line_offsets
        lo, hi = int(offsets[line_row]), int(offsets[line_row + 1])
        line_rows = ev[S.LINE_ROW]
        stored: np.ndarray | None = None
        if offsets[-1] != len(line_rows) or (
            hi > lo and not (line_rows[lo] == line_rows[hi - 1] == line_row)
        ):
            # Not grouped by line (columns built otherwise): find the rows.
            stored = np.flatnonzero(line_rows == line_row)
            lo = 0
        pick: slice | np.ndarray = slice(lo, hi) if stored is None else stored
        starts = ev[S.START_NS][pick]
        durations = ev[S.DURATION_NS][pick]
        codes = ev[S.NAME][pick]
        order = None
        if len(starts) > 1 and not (starts[1:] >= starts[:-1]).all():
            order = np.argsort(starts, kind="stable")
            starts, durations, codes = starts[order], durations[order], codes[order]
        return LineEvents(line_row, starts, durations, codes, names, lo, order, stored)

    def plane_stat_values(self, plane: str) -> dict[str, Any]:
        """``{stat: value}`` of the first plane named ``plane`` (empty if none)."""
        c = self.columns
        if plane not in c.plane_names:
            return {}
        rows = np.flatnonzero(c.planes[S.PLANE] == c.plane_names.index(plane))
        st = c.stats["plane_stats"]
        mine = np.flatnonzero(st["owner"] == rows[0])
        values = stat_values(
            st[S.KIND][mine], st[S.INT_VALUE][mine], st[S.FLOAT_VALUE][mine],
            c.strings(st[S.STR_VALUE][mine]),
        )  # fmt: skip
        names = [c.stat_names[k] for k in st[S.STAT][mine].tolist()]
        return dict(zip(names, values, strict=True))

    @property
    def metadata(self) -> dict[str, Any]:
        """What the profiler recorded about itself: jax/jaxlib versions, profile options,
        start and stop times (from the ``/host:metadata`` and ``Task Environment`` planes).
        """
        out: dict[str, Any] = {}
        out.update(self.plane_stat_values(_METADATA_PLANE))
        out.update(self.plane_stat_values(_TASK_PLANE))
        return out

    # --- selection ------------------------------------------------------------------------
    def select(
        self,
        *,
        plane: str | None = None,
        line: str | None = None,
        name: str | None = None,
        host: str | None = None,
        start_ns: int | None = None,
        end_ns: int | None = None,
    ) -> pd.DataFrame:
        """Events whose plane, line, name and host match these regular expressions
        (``re.search``) and that overlap ``[start_ns, end_ns)``.

        >>> trace.select(plane="/host:CPU", line="python", name=r"^PjitFunction")
        """
        ev = self.events
        mask = np.ones(len(ev), dtype=bool)
        for column, pattern in ((S.PLANE, plane), (S.LINE, line), (S.NAME, name), (S.HOST, host)):
            if pattern is not None:
                mask &= _category_match(ev[column], pattern, column)
        if start_ns is not None:
            mask &= (ev[S.START_NS] + ev[S.DURATION_NS]).to_numpy() > start_ns
        if end_ns is not None:
            mask &= ev[S.START_NS].to_numpy() < end_ns
        return ev[mask]

    def window(self, start_ns: int, end_ns: int) -> pd.DataFrame:
        """Events overlapping ``[start_ns, end_ns)``."""
        return self.select(start_ns=start_ns, end_ns=end_ns)

    def stats_of(self, events: pd.DataFrame | Iterable[int]) -> pd.DataFrame:
        """The stat rows of these events (a frame or event row numbers)."""
        import pandas as pd

        rows = events.index if isinstance(events, pd.DataFrame) else pd.Index(list(events))
        st = self.event_stats
        return st[st[S.EVENT_ROW].isin(rows)]

    def with_stats(
        self, events: pd.DataFrame | None = None, stats: Iterable[str] | None = None
    ) -> pd.DataFrame:
        """``events`` (default: all) with one column per stat (default: every stat they
        carry), holding each stat's typed value; metadata stats count as the event's own
        (as in XProf) unless the event sets the same stat itself.
        """
        import pandas as pd

        events = self.events if events is None else events
        rows = self.stats_of(events)
        meta = self._metadata_stats_for(events)
        wanted = None if stats is None else list(stats)
        out = events.copy()
        names = pd.unique(pd.concat([rows[S.STAT].astype(str), meta[S.STAT].astype(str)]))
        for stat in wanted if wanted is not None else names:
            values = _stat_column(rows, stat, S.EVENT_ROW)
            meta_values = _stat_column(meta, stat, S.EVENT_ROW)
            if meta_values is not None:
                values = meta_values if values is None else _combine(values, meta_values)
            column = stat if stat not in out.columns else f"stat:{stat}"
            out[column] = values.reindex(out.index) if values is not None else pd.NA
        return out

    def _metadata_stats_for(self, events: pd.DataFrame) -> pd.DataFrame:
        """Metadata stats expanded to the events in ``events`` (column ``event_row``)."""
        import pandas as pd

        ms = self.metadata_stats
        if len(ms) == 0 or len(events) == 0:
            return ms.rename(columns={S.METADATA_ROW: S.EVENT_ROW}).iloc[0:0]
        md = self.event_metadata
        key = pd.MultiIndex.from_arrays(
            [md[S.PLANE_ROW].to_numpy(), md[S.NAME].cat.codes.to_numpy()]
        )
        md_rows = np.flatnonzero(np.isin(md.index, ms[S.METADATA_ROW].unique()))
        lookup = pd.Series(md.index[md_rows], index=key[md_rows])
        lookup = lookup[~lookup.index.duplicated(keep="first")]
        plane_rows = self.lines[S.PLANE_ROW].to_numpy()[events[S.LINE_ROW].to_numpy()]
        ev_key = pd.MultiIndex.from_arrays([plane_rows, events[S.NAME].cat.codes.to_numpy()])
        md_of_event = pd.Series(lookup.reindex(ev_key).to_numpy(), index=events.index).dropna()
        if md_of_event.empty:
            return ms.rename(columns={S.METADATA_ROW: S.EVENT_ROW}).iloc[0:0]
        pairs = pd.DataFrame(
            {
                S.EVENT_ROW: md_of_event.index,
                S.METADATA_ROW: md_of_event.to_numpy().astype(np.int64),
            }
        )
        merged = pairs.merge(ms, on=S.METADATA_ROW)
        return merged.drop(columns=[S.METADATA_ROW])

    # --- display (notebooks: traceinspect.report.notebook.trace_html) ----------------------
    def __repr__(self) -> str:
        return (
            f"<Trace {self.run_name!r}: {len(self.hosts)} host(s), {len(self.planes)} planes, "
            f"{len(self.lines)} lines, {self.event_count:,} events, "
            f"{self.span_ns / 1e6:,.1f} ms>"
        )


def load(
    path: str | Path | URLPath | Located,
    *,
    run: str | None = None,
    decoder: DecoderName | None = None,
    use_cache: bool = True,
    progress: ProgressCallback | None = None,
) -> Trace:
    """Read a trace: a ``*.xplane.pb[.gz]`` file, a run directory or a log directory.

    A log directory with several runs gives the newest (``run=`` picks another). Every
    host file of the run is read. ``path`` may be a URL (``gs://bucket/logdir``, any
    fsspec URL) when fsspec and the filesystem's package are installed: each file is
    downloaded to a temporary file, decoded and deleted (a cached file is not downloaded).
    Raises a :class:`~traceinspect.errors.TraceInspectError` subclass naming the path when
    the input is missing, unreadable or empty.
    (:func:`traceinspect.loading.load_in_background` reads one on another thread.)
    """
    t0 = time.perf_counter()
    # A Located (what locate() made of a path) is not looked up again.
    located = path if isinstance(path, Located) else locate(path, run)
    chosen = resolve_decoder(decoder)
    raws, cached = read_run(located, chosen, use_cache, progress)
    return trace_of(located, raws, chosen, cached, time.perf_counter() - t0)


def trace_of(located: Located, raws: list[Raw], decoder: str, cached: int, seconds: float) -> Trace:
    """The Trace of a run whose files were read (:func:`~traceinspect.xplane.reader.read_run`):
    ``cached`` of them from the cache, in ``seconds`` so far."""
    t0 = time.perf_counter()
    files = located.run.files
    if sum(event_count(r) for r in raws) == 0:
        names = ", ".join(f.location for f in files)
        raise EmptyTraceError(
            f"{names}: the trace holds no events. The profiler stopped before anything "
            "ran; capture again over more steps (traceinspect capture --steps N).",
            path=located.requested,
        )
    columns = merge_columns(raws, [f.host for f in files])
    info = LoadInfo(
        decoder=decoder,
        seconds=seconds + time.perf_counter() - t0,
        bytes_read=sum(f.size for f in files),
        cached_files=cached,
    )
    log.info(
        "read %s (%d file(s), %.1f MB, %d from the decode cache) with the %s decoder in %.2f s",
        located.run.path,
        len(files),
        info.bytes_read / 1e6,
        cached,
        decoder,
        info.seconds,
    )
    return Trace(columns=columns, located=located, load_info=info, sidecar=read_sidecar(located))
