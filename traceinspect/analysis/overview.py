"""What a trace holds: run, backend, hosts, planes and lines, step annotations, profiler."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from traceinspect import names as N
from traceinspect import schema as S
from traceinspect.backends import BackendInfo, detect_backend
from traceinspect.trace import Trace


@dataclass(frozen=True)
class StepAnnotations:
    """Which step markers a trace carries."""

    sources: tuple[str, ...]  # e.g. ("StepTraceAnnotation",), ("group_id", "Steps line")
    names: tuple[str, ...]  # the annotated event names (e.g. "train")
    count: int  # events carrying step_num, else distinct group ids, else Steps events

    @property
    def present(self) -> bool:
        return bool(self.sources)


@dataclass(frozen=True)
class LineSummary:
    host: str
    plane: str
    line: str
    line_id: int
    line_row: int
    event_count: int
    first_start_ns: int | None
    last_end_ns: int | None

    @property
    def span_ns(self) -> int:
        if self.first_start_ns is None or self.last_end_ns is None:
            return 0
        return self.last_end_ns - self.first_start_ns


@dataclass(frozen=True)
class Overview:
    """Everything ``traceinspect info`` shows, as data."""

    path: str
    run: str
    runs: tuple[str, ...]
    chose_newest: bool
    files: tuple[tuple[str, str, int], ...]  # (host, path, bytes)
    backend: BackendInfo
    hosts: tuple[str, ...]
    event_count: int
    aggregated_event_count: int
    start_ns: int
    end_ns: int
    plane_event_counts: tuple[tuple[str, str, int, int], ...]  # (host, plane, lines, events)
    lines: tuple[LineSummary, ...]
    steps: StepAnnotations
    profiler: dict[str, Any]
    decoder: str
    load_seconds: float
    errors: tuple[str, ...]
    warnings: tuple[str, ...]

    @property
    def span_ns(self) -> int:
        return self.end_ns - self.start_ns

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["backend"] = self.backend.to_dict()
        out["span_ns"] = self.span_ns
        out["files"] = [{"host": h, "path": p, "bytes": b} for h, p, b in self.files]
        out["planes"] = [
            {"host": h, "plane": p, "line_count": nl, "event_count": ne}
            for h, p, nl, ne in self.plane_event_counts
        ]
        del out["plane_event_counts"]
        out["lines"] = [{**asdict(ln), "span_ns": ln.span_ns} for ln in self.lines]
        out["steps"] = {**asdict(self.steps), "present": self.steps.present}
        return out


def step_annotations(trace: Trace) -> StepAnnotations:
    stats = trace.event_stats
    sources: list[str] = []
    names: list[str] = []
    count = 0
    present = set(stats[S.STAT].astype(str).unique()) if len(stats) else set()
    if N.STEP_NUM in present:
        rows = stats.loc[stats[S.STAT] == N.STEP_NUM, S.EVENT_ROW]
        sources.append("StepTraceAnnotation")
        annotated = trace.events[S.NAME].iloc[rows.to_numpy()].astype(str)
        names.extend(sorted(set(annotated)))
        count = len(rows)
    if N.ANN_STEP in trace.events[S.NAME].cat.categories:
        marked = int((trace.events[S.NAME] == N.ANN_STEP).sum())
        if marked:
            sources.append("traceinspect capture")
            names.append(N.ANN_STEP)
            count = count or marked
    if N.GROUP_ID in present:
        sources.append(N.GROUP_ID)
        if not count:
            count = int(stats.loc[stats[S.STAT] == N.GROUP_ID, S.INT_VALUE].nunique())
    if N.ITER_NUM in present:
        sources.append(N.ITER_NUM)
    lines = trace.lines
    steps_lines = lines[
        (lines[S.LINE] == N.STEPS_LINE)
        & lines[S.PLANE].astype(str).str.startswith("/device:")
        & (lines[S.EVENT_COUNT] > 0)
    ]
    if len(steps_lines):
        sources.append("Steps line")
        if not count:
            count = int(steps_lines[S.EVENT_COUNT].max())
    return StepAnnotations(sources=tuple(sources), names=tuple(names), count=count)


def _profiler(trace: Trace) -> dict[str, Any]:
    meta = trace.metadata
    out: dict[str, Any] = {k: meta[k] for k in ("jax_version", "jaxlib_version") if k in meta}
    if "profile_options" in meta:
        # Imported here: protobuf, for this one field, only where the overview is made.
        from traceinspect.xplane.proto import decode_profile_options

        options = decode_profile_options(str(meta["profile_options"]))
        if options is not None:
            out["options"] = options
    for key in ("profile_start_time", "profile_stop_time"):
        if key in meta:
            out[f"{key}_ns"] = int(meta[key])
    return out


def overview(trace: Trace) -> Overview:
    """Summarize a trace (pure: reads the frames, changes nothing)."""
    lines = trace.lines
    first = lines[S.FIRST_START_NS].astype(object).where(lines[S.FIRST_START_NS].notna(), None)
    last = lines[S.LAST_END_NS].astype(object).where(lines[S.LAST_END_NS].notna(), None)
    line_summaries = tuple(
        LineSummary(
            host=str(host),
            plane=str(plane),
            line=str(line),
            line_id=int(line_id),
            line_row=int(row),
            event_count=int(count),
            first_start_ns=None if f is None else int(f),
            last_end_ns=None if e is None else int(e),
        )
        for row, host, plane, line, line_id, count, f, e in zip(
            lines.index,
            lines[S.HOST],
            lines[S.PLANE],
            lines[S.LINE],
            lines[S.LINE_ID].to_numpy(),
            lines[S.EVENT_COUNT].to_numpy(),
            first,
            last,
            strict=True,
        )
    )
    planes = trace.planes
    run = trace.located.run
    return Overview(
        path=str(trace.path),
        run=run.name,
        runs=tuple(r.name for r in trace.located.all_runs),
        chose_newest=trace.located.chose_newest,
        files=tuple((f.host, f.location, f.size) for f in run.files),
        backend=detect_backend(trace),
        hosts=tuple(trace.hosts),
        event_count=trace.event_count,
        aggregated_event_count=len(trace.aggregated_events),
        start_ns=trace.start_ns,
        end_ns=trace.end_ns,
        plane_event_counts=tuple(
            (str(h), str(p), int(nl), int(ne))
            for h, p, nl, ne in zip(
                planes[S.HOST],
                planes[S.PLANE],
                planes[S.LINE_COUNT],
                planes[S.EVENT_COUNT],
                strict=True,
            )
        ),
        lines=line_summaries,
        steps=step_annotations(trace),
        profiler=_profiler(trace),
        decoder=trace.load_info.decoder,
        load_seconds=trace.load_info.seconds,
        errors=trace.frames.errors,
        warnings=trace.frames.warnings,
    )
