"""The training thread's blocking reads of device values (the sync category): their events,
``Await`` pairs made one wait, and how each read is named."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from traceinspect import names as N
from traceinspect import schema as S
from traceinspect.analysis.arrays import members
from traceinspect.analysis.thread_events import _AWAIT, ThreadEvents
from traceinspect.trace import LineEvents, Trace


@dataclass(frozen=True, eq=False)
class Reads:
    """The training thread's blocking reads of device values, in order of start (of equal
    starts, the longest first: ``float(x)`` before the ``Await`` inside it)."""

    starts: np.ndarray  # int64 ns
    ends: np.ndarray  # int64 ns
    names: list[str]  # the event's name, with the kind of read capture recorded
    #: Where the read was made (``train.py:57 train``), as capture recorded it; None where
    #: the trace does not say.
    sites: list[str | None] = field(default_factory=list)

    @classmethod
    def empty(cls) -> Reads:
        return cls(np.empty(0, np.int64), np.empty(0, np.int64), [], [])

    @classmethod
    def of(
        cls,
        starts: np.ndarray,
        ends: np.ndarray,
        names: list[str],
        sites: list[str | None] | None = None,
    ) -> Reads:
        starts, ends = np.asarray(starts, np.int64), np.asarray(ends, np.int64)
        order = np.lexsort((-ends, starts)).tolist()
        where = sites if sites is not None else [None] * len(names)
        return cls(starts[order], ends[order], [names[i] for i in order], [where[i] for i in order])

    def site(self, position: int) -> str | None:
        return self.sites[position] if position < len(self.sites) else None

    def __len__(self) -> int:
        return len(self.starts)


_AWAIT_LABEL = "block_until_ready (Await)"
# How the user spelled each kind of read capture records.
_SPELLING = {
    "__float__": "float()",
    "__int__": "int()",
    "__bool__": "bool()",
    "__index__": "operator.index()",
    "item": ".item()",
    "tolist": ".tolist()",
    "__array__": "np.asarray()",
    "block_until_ready": ".block_until_ready()",
    "device_get": "jax.device_get()",
}
_KIND_IN_LABEL = re.compile(r"\((?P<kind>[^()]+)\)$")


def read_site_label(name: str, site: str | None) -> str:
    """How the analysis names a read: ``float() at train.py:57 train`` when the site is
    known (capture records it; the Python tracer shows it), else the event's name."""
    if not site:
        return name
    m = _KIND_IN_LABEL.search(name)
    spelled = _SPELLING.get(m.group("kind")) if m else None
    return f"{spelled} at {site}" if spelled else site


def _await_waits(trace: Trace, awaits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``CommonPjRtBuffer::Await`` producer (``_p``) / consumer (``_c``) pairs (``awaits``:
    their event rows) -> the waits' starts and ends."""
    c = trace.columns

    def first_per_pair(stat: str) -> dict[int, int]:
        """Pair id -> the first of ``awaits`` carrying it as ``stat``."""
        rows = c.stat_rows(stat)
        mine = members(rows["owner"], awaits)
        out: dict[int, int] = {}
        for pair, row in zip(
            rows[S.INT_VALUE][mine].tolist(), rows["owner"][mine].tolist(), strict=True
        ):
            out.setdefault(pair, row)
        return out

    if len(awaits) == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    producers, consumers = first_per_pair("_p"), first_per_pair("_c")
    both = [pair for pair in producers if pair in consumers]
    start = c.events[S.START_NS][np.array([producers[p] for p in both], dtype=np.int64)]
    _, end = c.spans(np.array([consumers[p] for p in both], dtype=np.int64))
    keep = end > start
    return start[keep], end[keep]


def _string_stat(trace: Trace, rows: np.ndarray, stat: str) -> dict[int, str]:
    """Event row -> the string value of ``stat`` for those of ``rows`` that carry it."""
    c = trace.columns
    found = c.stat_rows(stat)
    mine = members(found["owner"], rows)
    out: dict[int, str] = {}
    strings = c.strings(found[S.STR_VALUE][mine])
    for row, value in zip(found["owner"][mine].tolist(), strings, strict=True):
        out.setdefault(row, str(value))
    return out


def _sync_labels(trace: Trace, rows: np.ndarray) -> tuple[list[str], list[str | None]]:
    """Event names, with the kind of read ``traceinspect capture`` recorded when present
    (``traceinspect/host_read (__float__)``), and the site it recorded (the user's
    ``file.py:line function`` that made the read) or None."""
    c = trace.columns
    kind_of = _string_stat(trace, rows, N.READ_KIND_STAT)
    site_of = _string_stat(trace, rows, N.READ_SITE_STAT)
    names = [c.event_names[k] for k in c.events[S.NAME][rows].tolist()]
    labels = [
        f"{name} ({kind_of[row]})" if row in kind_of else name
        for row, name in zip(rows.tolist(), names, strict=True)
    ]
    return labels, [site_of.get(row) or None for row in rows.tolist()]


def _rows_at(line: LineEvents, positions: np.ndarray) -> np.ndarray:
    """The event rows of these positions, in the stored order."""
    return np.sort(line.rows(positions))


def blocking_reads(trace: Trace, thread: ThreadEvents) -> Reads:
    """The thread's blocking reads: its sync events, and its ``Await`` pairs as one wait each."""
    line = thread.line
    # The few sync and Await events, by event row.
    wait_starts, wait_ends = _await_waits(trace, _rows_at(line, thread.named(_AWAIT)))
    sync_rows = _rows_at(line, thread.named(N.SYNC_EVENT))
    sync_starts, sync_ends = trace.columns.spans(sync_rows)
    labels, sites = _sync_labels(trace, sync_rows)
    return Reads.of(
        np.concatenate((sync_starts, wait_starts)),
        np.concatenate((sync_ends, wait_ends)),
        labels + [_AWAIT_LABEL] * len(wait_starts),
        sites + [None] * len(wait_starts),
    )
