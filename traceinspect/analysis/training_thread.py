"""What the host was doing: intervals of input, sync, compile and other work.

Each category is a set of intervals on the training thread (compilation also on the
compiler threads). The names come from what jax, XLA, Grain, tf.data and
``traceinspect capture`` write into traces (see the field notes):

- input: the training thread waiting for its next batch: Grain iterators'
  ``<Class>.__next__``, ``traceinspect/next_batch``, tf.data ``IteratorGetNext``.
- sync: the training thread blocked reading a device value: ``np.asarray(jax.Array)``
  (``float(x)``, ``print(x)``, ``.item()``), ``traceinspect/host_read``,
  ``CommonPjRtBuffer::Await`` producer/consumer pairs (``.block_until_ready()``; the
  wait is the time between the pair), ``ToLiteral``, TPU ``TransferD2HRequest``.
- compile: XLA compilation on compiler threads, and compile/lowering events on the
  training thread.
- host: any other traced event on the training thread (dispatch, Python when traced), and
  in a capture's trace the loop's own code: ``traceinspect capture`` stamps every batch
  the loop draws, every read of a device value and every dispatch, so the rest of the
  thread's time inside its steps is the loop's own (untraced) Python: a checkpoint's file
  write, a queue, a sleep. capture's stack sampler (the sidecar's ``stack_samples``) names
  it by ``file.py:line function``.

A training thread with the Python tracer on holds millions of events but a few thousand
distinct names: every name is matched once, and events are selected by their name's code,
on arrays of the thread's events (:class:`~traceinspect.trace.LineEvents`), never on a copy
of the events frame.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from traceinspect import names as N
from traceinspect import schema as S
from traceinspect.analysis.arrays import members, most_common
from traceinspect.analysis.steps import Steps
from traceinspect.intervals import Intervals
from traceinspect.trace import LineEvents, Trace, category_codes

if TYPE_CHECKING:
    import pandas as pd

_LIBRARY = re.compile(r"(site-packages|dist-packages|/lib/python\d|<frozen|^jax/|/jax/|/jaxlib/)")

#: What each event of the training thread is, by its name (schema.CATEGORY), in the order
#: of ``ThreadEvents.category_of_name``'s codes; one event has one category, the first that
#: matches of compile > sync > input, else host.
CATEGORIES = ("host", "input", "sync", "compile")

# The thread's events are looked up in blocks of this many, each with the latest end and
# the longest event among its events: the events still running at a given instant lie in
# the few blocks whose latest end is after it (on a thread, nested frames), and the longest
# events of a stretch in the few blocks whose longest event is long enough.
_BLOCK = 256
# Blocks first read for a gap's longest events (those with the longest events): enough for
# the threshold on the 89 MB benchmark capture's gaps (1-28 needed), one pass mostly. (256
# events a block read 4-6 times fewer events there than 1,024: a gap's longest events are
# a few, spread over the blocks.)
_FIRST_BLOCKS = 32
# Blocks read at a time when looking for the longest frames.
_BLOCKS_AT_ONCE = 16
# Longest overlaps first considered when naming a gap's events; more when those hold fewer
# distinct names than asked for.
_FIRST_CANDIDATES = 64
# The names the analysis looks for on the training thread: few events among millions, so
# they are found in one pass over the thread and selected from there afterwards.
_AWAIT = re.compile("^" + re.escape(N.AWAIT) + "$")
_SOUGHT = (N.INPUT_EVENT, N.SYNC_EVENT, N.COMPILE_EVENT, _AWAIT, N.PJIT, N.TRANSFER_EVENT)
# Any of them (each keeps its own anchors): the names worth matching one by one.
_ANY_SOUGHT = re.compile("|".join(f"(?:{regex.pattern})" for regex in _SOUGHT))
# What a name is, as bits: sought, or a step envelope.
_IS_SOUGHT, _IS_ENVELOPE = 1, 2


def _per_block(values: np.ndarray) -> np.ndarray:
    """The largest value in each block of ``_BLOCK`` consecutive events."""
    if len(values) == 0:
        return np.empty(0, dtype=np.int64)
    return np.maximum.reduceat(values, np.arange(0, len(values), _BLOCK))


def _latest_end_per_block(line: LineEvents) -> np.ndarray:
    """:func:`_per_block` of the events' ends, some blocks at a time into one buffer (no
    array of every end; see ``Intervals.union_of_sorted`` on asking for memory again)."""
    step = _BLOCK * max(1, (1 << 16) // _BLOCK)
    buffer = np.empty(min(step, len(line)), dtype=np.int64)
    parts = []
    for lo in range(0, len(line), step):
        ends = buffer[: len(line.starts[lo : lo + step])]
        np.add(line.starts[lo : lo + step], line.durations[lo : lo + step], out=ends)
        parts.append(_per_block(ends))
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)


def _in_blocks(blocks: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """The positions of these blocks inside ``[lo, hi)``, ascending for ascending blocks."""
    positions = (blocks[:, None] * _BLOCK + np.arange(_BLOCK)[None, :]).ravel()
    return positions[(positions >= lo) & (positions < hi)]


def _running_before(reach: np.ndarray, before: int, at_ns: int) -> np.ndarray:
    """Positions before ``before`` in the blocks whose latest end is after ``at_ns`` (so
    every event running at ``at_ns`` that starts before position ``before``), ascending."""
    return _in_blocks(np.flatnonzero(reach[: -(-before // _BLOCK)] > at_ns), 0, before)


def _user_frame(name: str) -> tuple[str, str] | None:
    """(label ``file.py:line function``, file) of a Python-tracer frame of the user's own
    code (not a library's), else None."""
    m = N.PYTHON_FRAME.match(name)
    if m is None or _LIBRARY.search(m.group("file")):
        return None
    return f"{m.group('file')}:{m.group('line')} {m.group('func')}", m.group("file")


@dataclass(frozen=True, eq=False)
class ThreadEvents:
    """The training thread's events (arrays in order of start), which of their names count
    (step envelopes do not) and each name's category."""

    line: LineEvents
    kept: np.ndarray  # one bool per name code: False for the step envelope events
    category_of_name: np.ndarray  # one code per name code, into CATEGORIES
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_frame(cls, events: pd.DataFrame) -> ThreadEvents:
        """Events of one thread given as a frame (``name`` categorical, ``start_ns``,
        ``duration_ns``), every name kept, all of category host: for tests and notebooks."""
        starts = events[S.START_NS].to_numpy(dtype=np.int64)
        durations = events[S.DURATION_NS].to_numpy(dtype=np.int64)
        codes = category_codes(events[S.NAME])
        names = [str(n) for n in events[S.NAME].cat.categories]
        order = np.argsort(starts, kind="stable")
        line = LineEvents(-1, starts[order], durations[order], codes[order], names, 0, order)
        return cls(line, np.ones(len(names), bool), np.zeros(len(names), np.int8))

    def __len__(self) -> int:
        return len(self.line)

    @property
    def starts(self) -> np.ndarray:
        return self.line.starts

    def matching(self, regex: re.Pattern[str]) -> np.ndarray:
        """One bool per name code: does the name match ``regex`` (``search``)? (Once per
        pattern: a thread has thousands of names.)"""
        key = f"match:{regex.pattern}"
        if key not in self._cache:
            if any(regex.pattern == sought.pattern for sought in _SOUGHT):
                # Only the few names that match one of them at all are matched again.
                if "any" not in self._cache:
                    self._cache["any"] = np.flatnonzero(self.line.names_matching(_ANY_SOUGHT))
                candidates = self._cache["any"]
                hit = np.zeros(len(self.line.names), dtype=bool)
                names = self.line.names
                hit[candidates] = [regex.search(str(names[int(c)])) is not None for c in candidates]
                self._cache[key] = hit
            else:
                self._cache[key] = self.line.names_matching(regex)
        matched: np.ndarray = self._cache[key]
        return matched

    @property
    def user_frame_names(self) -> dict[int, tuple[str, str]]:
        """Name code -> (label, file) of the counted names that are the user's own Python
        frames."""
        if "user" not in self._cache:
            names = self.line.names
            found = {c: _user_frame(names[c]) for c in np.flatnonzero(self.kept).tolist()}
            self._cache["user"] = {c: f for c, f in found.items() if f is not None}
        frames: dict[int, tuple[str, str]] = self._cache["user"]
        return frames

    def with_kind(self, bit: int) -> np.ndarray:
        """Positions of the events whose name has this bit (``_IS_SOUGHT``,
        ``_IS_ENVELOPE``): both rare, found in one pass over the thread."""
        key = f"kind:{bit}"
        if key not in self._cache:
            table = np.zeros(len(self.line.names), dtype=np.uint8)
            for regex in _SOUGHT:
                table[self.matching(regex) & self.kept] |= _IS_SOUGHT
            table[~self.kept] |= _IS_ENVELOPE
            # A part of the thread at a time, into one buffer (see _latest_end_per_block).
            codes, step = self.line.codes, 1 << 16
            buffer = np.empty(min(step, len(codes)), dtype=np.uint8)
            index = np.empty(len(buffer), dtype=np.intp)  # take() would convert codes anew
            found = [np.empty(0, np.int64)]
            for lo in range(0, len(codes), step):
                chunk = codes[lo : lo + step]
                part, at = buffer[: len(chunk)], index[: len(chunk)]
                np.copyto(at, chunk)
                np.take(table, at, out=part, mode="clip")  # (clip: unbuffered)
                found.append(np.flatnonzero(part) + lo)
            rare = np.concatenate(found)
            bits = table[codes[rare]]
            for one in (_IS_SOUGHT, _IS_ENVELOPE):
                self._cache[f"kind:{one}"] = rare[(bits & one) != 0]
        positions: np.ndarray = self._cache[key]
        return positions

    def named(self, regex: re.Pattern[str], *, envelopes: bool = False) -> np.ndarray:
        """Positions (in order of start) of the counted events whose name matches
        ``regex`` (``search``); with ``envelopes``, the step envelopes' too."""
        hit = self.matching(regex) if envelopes else self.matching(regex) & self.kept
        if not hit.any():
            return np.empty(0, dtype=np.int64)
        if (
            any(regex.pattern == sought.pattern for sought in _SOUGHT)
            and not (hit & ~self.kept).any()
        ):
            # A few events: picked from those found once for every name sought.
            positions = self.with_kind(_IS_SOUGHT)
            return positions[hit[self.line.codes[positions]]]
        return np.flatnonzero(self.line.name_mask(hit))

    def category(self, position: int) -> str:
        return CATEGORIES[int(self.category_of_name[int(self.line.codes[position])])]

    @property
    def block_reach(self) -> np.ndarray:
        """The latest end in each block of events."""
        if "reach" not in self._cache:
            self._cache["reach"] = _latest_end_per_block(self.line)
        reach: np.ndarray = self._cache["reach"]
        return reach

    @property
    def block_longest(self) -> np.ndarray:
        """The longest event of each block."""
        if "longest" not in self._cache:
            self._cache["longest"] = _per_block(self.line.durations)
        longest: np.ndarray = self._cache["longest"]
        return longest

    def busy(self) -> Intervals:
        """The union of the counted events (every event but the step envelopes)."""
        return Intervals.union_of_sorted(
            self.starts, self.line.durations, self.with_kind(_IS_ENVELOPE)
        )

    def longest_names(self, lo: int, hi: int, top: int) -> list[tuple[str, str, int]]:
        """The ``top`` distinct names overlapping ``[lo, hi)`` the most: each name's longest
        overlap (its first event in the thread's order among equals), longest first."""
        line, codes = self.line, self.line.codes
        starts, durations = line.starts, line.durations
        # Candidates: the events running at lo (started before it), and those starting
        # inside [lo, hi), whose overlap is at most their duration: only the blocks whose
        # longest event reaches the threshold can hold one that counts.
        inside = int(np.searchsorted(starts, lo, side="left"))
        past = int(np.searchsorted(starts, hi, side="left"))
        before = _running_before(self.block_reach, inside, lo)
        before_overlap = np.minimum(line.end_at(before), hi) - lo
        first_block = inside // _BLOCK
        blocks = np.arange(first_block, -(-past // _BLOCK))
        longest = self.block_longest[blocks]
        by_length = blocks[np.argsort(-longest, kind="stable")]
        longest = np.sort(longest)[::-1]
        wanted, taken = _FIRST_CANDIDATES, min(_FIRST_BLOCKS, len(blocks))
        while True:
            pos = np.concatenate((before, _in_blocks(np.sort(by_length[:taken]), inside, past)))
            overlap = np.concatenate(
                (
                    before_overlap,
                    np.minimum(durations[pos[len(before) :]], hi - starts[pos[len(before) :]]),
                )
            )
            # Only events at least as long as the wanted-th longest can name the gap, as
            # long as they hold enough distinct names (ties at the threshold all count).
            threshold = 1
            if len(overlap) > wanted:
                kth = np.partition(overlap, len(overlap) - wanted)[len(overlap) - wanted]
                threshold = max(int(kth), 1)
            needed = int(np.count_nonzero(longest >= threshold))
            if needed > taken:
                taken = needed  # blocks not read yet may hold events that long
                continue
            chosen = np.flatnonzero(overlap >= threshold)
            chosen_pos, ov = pos[chosen], overlap[chosen]
            counted = self.kept[codes[chosen_pos]]
            chosen_pos, ov = chosen_pos[counted], ov[counted]
            order = np.lexsort((line.stored_order(chosen_pos), -ov))
            chosen_pos, ov = chosen_pos[order], ov[order]
            _, first = np.unique(codes[chosen_pos], return_index=True)
            first = np.sort(first)[:top]
            if len(first) >= top or threshold == 1:
                break
            wanted *= 4
        names = line.names
        return [
            (str(names[int(codes[chosen_pos[i]])]), self.category(int(chosen_pos[i])), int(ov[i]))
            for i in first
        ]


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


@dataclass(frozen=True, eq=False)
class SampledStack:
    """capture's samples of the training thread's stack, on the trace's clock."""

    t_ns: np.ndarray  # int64, trace time, ascending
    site: np.ndarray  # int index into sites
    sites: tuple[str, ...]
    #: The thread's CPU clock at each sample (int64 ns), or None where it was not read.
    cpu_ns: np.ndarray | None = None

    @classmethod
    def of(cls, trace: Trace) -> SampledStack | None:
        sidecar = trace.sidecar
        samples = sidecar.stack_samples if sidecar is not None else None
        base = trace.metadata.get("profile_start_time")
        if samples is None or not isinstance(base, int) or not samples.t_unix_ns:
            return None
        t = np.asarray(samples.t_unix_ns, dtype=np.int64) - base
        order = np.argsort(t, kind="stable")
        cpu = None if samples.cpu_ns is None else np.asarray(samples.cpu_ns, dtype=np.int64)[order]
        return cls(t[order], np.asarray(samples.site, dtype=np.int64)[order], samples.sites, cpu)

    def sites_in(self, spans: Intervals) -> list[tuple[str, int]]:
        """(site, samples) of the samples inside ``spans``, the most frequent first; samples
        outside any of the user's frames are left out."""
        if len(spans) == 0 or len(self.t_ns) == 0:
            return []
        k = np.searchsorted(spans.starts, self.t_ns, side="right") - 1
        inside = (k >= 0) & (self.t_ns < spans.ends[np.maximum(k, 0)])
        counts = np.bincount(self.site[inside], minlength=len(self.sites))
        order = np.argsort(-counts, kind="stable")
        return [
            (self.sites[i], int(counts[i])) for i in order.tolist() if counts[i] and self.sites[i]
        ]


@dataclass(frozen=True, eq=False)
class LoopCode:
    """The loop's own code: the training thread's time inside its steps that no event
    covers (a capture's trace only), where it sits, and what the sampler saw there."""

    spans: Intervals
    #: The starts and ends of what capture stamps (batches, reads, dispatches) and the
    #: kind of each (``next()``, ``read``, ``dispatch``), ordered by end.
    marks_end: np.ndarray
    marks_kind: list[str]
    samples: SampledStack | None

    def described(self, lo: int, hi: int) -> tuple[int, str, list[tuple[str, int]]] | None:
        """(ns of ``[lo, hi)`` in the loop's own code, where it sits, sampled sites), or
        None when none of it is."""
        part = self.spans.clip(lo, hi)
        total = part.total
        if total <= 0:
            return None
        # Where: after the last stamped event that ended before the longest stretch began.
        longest = int(np.argmax(part.ends - part.starts))
        at = int(part.starts[longest])
        k = int(np.searchsorted(self.marks_end, at, side="right")) - 1
        where = _WHERE[self.marks_kind[k]] if k >= 0 else "before anything else of the step"
        sites = self.samples.sites_in(part) if self.samples is not None else []
        return total, where, sites


_WHERE = {
    "input": "after next() returned a batch",
    "sync": "after a read of a device value",
    "dispatch": "after the dispatch",
}


@dataclass(frozen=True, eq=False)
class HostActivity:
    """Category intervals of the host, and the events behind them (for evidence)."""

    main_line_row: int | None
    input: Intervals
    sync: Intervals
    compile: Intervals
    host: Intervals
    events: ThreadEvents | None  # the training thread's events (None: no thread found)
    sync_events: Reads  # the blocking reads (Await pairs become one)
    frames: PythonFrames | None = None  # the user's own Python frames (Python tracer on)
    #: The loop's own untraced code (part of ``host``; a capture's trace only).
    loop_code: LoopCode | None = None

    def read_ending_at(self, at_ns: int) -> tuple[str, int, int, str | None] | None:
        """The blocking read that was still waiting at ``at_ns`` (began before, ended at or
        after it): (name, start, end, the user's source line if traced). The outermost
        one: ``float(x)`` rather than the ``Await`` inside it."""
        waits = self.sync_events
        hit = np.flatnonzero((waits.starts < at_ns) & (waits.ends >= at_ns))
        if len(hit) == 0:
            return None
        first = int(hit[0])
        start = int(waits.starts[first])
        site = self.frames.innermost_at(start) if self.frames else None
        return waits.names[first], start, int(waits.ends[first]), site or waits.site(first)

    def events_in(self, lo: int, hi: int, top: int = 3) -> list[tuple[str, str, int]]:
        """The ``top`` distinct event names of the training thread overlapping
        ``[lo, hi)`` the most: (name, category, overlap ns), longest first."""
        if self.events is None:
            return []
        return self.events.longest_names(lo, hi, top)


@dataclass(frozen=True, eq=False)
class PythonFrames:
    """The training thread's Python-tracer frames from the user's own files (not
    libraries): the thread's events whose names are in ``labels``."""

    thread: ThreadEvents
    labels: dict[int, str]  # name code -> "file.py:line function"
    files: dict[int, str]  # name code -> file
    #: One bool per name code: frames of the script the thread runs (its outermost frame's
    #: file); found when first needed.
    main_names: np.ndarray | None = None
    _cache: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    def in_main_file(self) -> np.ndarray:
        if self.main_names is not None:
            return self.main_names
        if "main" not in self._cache:
            # The outermost frame's file (the longest frame; the first of equals in the
            # thread's order) is the script's.
            line = self.thread.line
            longest = self._longest_frames()
            outermost = longest[np.argmin(line.stored_order(longest))]
            main_file = self.files[int(line.codes[outermost])]
            main = np.zeros(len(line.names), dtype=bool)
            main[[c for c, f in self.files.items() if f == main_file]] = True
            self._cache["main"] = main
        return self._cache["main"]

    def _longest_frames(self) -> np.ndarray:
        """Positions of the longest user frames, found from the blocks with the longest
        events down, until a block's longest event is shorter than the longest frame."""
        line = self.thread.line
        user = np.zeros(len(line.names), dtype=bool)
        user[list(self.labels)] = True
        block_longest = self.thread.block_longest
        by_length = np.argsort(-block_longest, kind="stable")
        best, found = -1, [np.empty(0, np.int64)]
        for k in range(0, len(by_length), _BLOCKS_AT_ONCE):
            blocks = by_length[k : k + _BLOCKS_AT_ONCE]
            if block_longest[blocks[0]] < best:
                break
            rows = _in_blocks(np.sort(blocks), 0, len(line))
            rows = rows[user[line.codes[rows]]]
            if len(rows) == 0:
                continue
            durations = line.durations[rows]
            top = int(durations.max())
            if top > best:
                best, found = top, []
            if top == best:
                found.append(rows[durations == top])
        return np.sort(np.concatenate(found))

    def innermost_at(self, at_ns: int) -> str | None:
        """The innermost user frame running at ``at_ns``, preferring the main script's own
        frames (the tracer may record bare file names, so libraries are not always
        recognisable by their path)."""
        line = self.thread.line
        started = int(np.searchsorted(line.starts, at_ns, side="right"))
        # Events started by at_ns and still running at it (ends >= at_ns), of user frames;
        # the latest to start (the first of equals, in the thread's order) is the innermost.
        candidates = _running_before(self.thread.block_reach, started, at_ns - 1)
        codes = line.codes[candidates]
        user = np.zeros(len(line.names), dtype=bool)
        user[list(self.labels)] = True
        running = (line.end_at(candidates) >= at_ns) & user[codes]
        for rows in (candidates[running & self.in_main_file()[codes]], candidates[running]):
            if len(rows):
                starts = line.starts[rows]
                innermost = rows[int(np.searchsorted(starts, starts[-1], side="left"))]
                return self.labels[int(line.codes[innermost])]
        return None


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


def guess_training_line(trace: Trace) -> int | None:
    """The host line that dispatches programs or draws batches most often, when no step
    annotation says which thread trains (None when no line does either)."""
    c = trace.columns
    hit = np.array(
        [
            N.INPUT_EVENT.search(n) is not None or N.PJIT.search(n) is not None
            for n in c.event_names
        ],
        dtype=bool,
    )
    if not hit.any():
        return None
    rows = np.flatnonzero(hit[c.events[S.NAME]])
    if len(rows) == 0:
        return None
    return most_common(c.events[S.LINE_ROW][rows])


def _compile_line_spans(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """Starts and ends of the events with a duration on the compiler threads."""
    names = trace.columns.line_name()
    rows = [row for row, name in enumerate(names) if N.COMPILE_LINE.match(name)]
    starts, ends = [np.empty(0, np.int64)], [np.empty(0, np.int64)]
    for row in rows:
        line = trace.line_events(row)
        real = line.durations > 0
        starts.append(line.starts[real])
        ends.append(line.end_at(real))
    return np.concatenate(starts), np.concatenate(ends)


def _rows_at(line: LineEvents, positions: np.ndarray) -> np.ndarray:
    """The event rows of these positions, in the stored order."""
    return np.sort(line.rows(positions))


def thread_events(trace: Trace, line_row: int, markers: tuple[str, ...] = ()) -> ThreadEvents:
    """The events of the thread on line ``line_row``; ``markers`` are step envelope events
    (``StepTraceAnnotation`` names): they span whole steps and are not work."""
    line = trace.line_events(line_row)
    names = line.names
    kept = np.fromiter((n not in markers for n in names), bool, len(names))
    thread = ThreadEvents(line, kept, np.zeros(len(names), dtype=np.int8))
    input_name = thread.matching(N.INPUT_EVENT) & kept
    sync_name = thread.matching(N.SYNC_EVENT) & kept
    compile_name = thread.matching(N.COMPILE_EVENT) & kept
    category = np.where(compile_name, 3, np.where(sync_name, 2, np.where(input_name, 1, 0)))
    thread.category_of_name[:] = category  # (the names matched once, for both)
    return thread


def host_activity(
    trace: Trace,
    main_line_row: int | None,
    markers: tuple[str, ...] = (),
    thread: ThreadEvents | None = None,
    own_code: bool = False,
) -> HostActivity:
    """Categorised activity of the training thread ``main_line_row``; ``markers`` are
    step envelope events (``StepTraceAnnotation`` names): they span whole steps and are
    not work, so they are left out. ``thread``: that thread's events, when the caller has
    them (:func:`thread_events`). ``own_code``: the thread's untraced time inside the step
    envelopes is the loop's own code (``host``): true of a capture's trace, where every
    batch, read and dispatch is stamped."""
    compile_starts, compile_ends = _compile_line_spans(trace)
    if main_line_row is None:
        empty = Intervals.empty()
        return HostActivity(
            None,
            empty,
            empty,
            Intervals.union_of(compile_starts, compile_ends),
            empty,
            None,
            Reads.empty(),
        )
    if thread is None or thread.line.line_row != main_line_row:
        thread = thread_events(trace, main_line_row, markers)
    line = thread.line
    starts = line.starts
    is_input = thread.named(N.INPUT_EVENT)
    is_compile = thread.named(N.COMPILE_EVENT)
    # The few sync and Await events, by event row.
    wait_starts, wait_ends = _await_waits(trace, _rows_at(line, thread.named(_AWAIT)))
    sync_rows = _rows_at(line, thread.named(N.SYNC_EVENT))
    sync_starts, sync_ends = trace.columns.spans(sync_rows)
    labels, sites = _sync_labels(trace, sync_rows)
    sync_events = Reads.of(
        np.concatenate((sync_starts, wait_starts)),
        np.concatenate((sync_ends, wait_ends)),
        labels + [_AWAIT_LABEL] * len(wait_starts),
        sites + [None] * len(wait_starts),
    )
    compile_iv = Intervals.union_of(
        np.concatenate((compile_starts, starts[is_compile])),
        np.concatenate((compile_ends, line.end_at(is_compile))),
    )
    busy = thread.busy()
    loop = _loop_code(trace, thread, busy) if own_code else None
    return HostActivity(
        main_line_row=main_line_row,
        input=Intervals.union_of(starts[is_input], line.end_at(is_input)),
        sync=Intervals.union_of(sync_events.starts, sync_events.ends),
        compile=compile_iv,
        host=busy if loop is None else busy.union(loop.spans),
        events=thread,
        sync_events=sync_events,
        frames=user_frames(thread),
        loop_code=loop,
    )


def _loop_code(trace: Trace, thread: ThreadEvents, busy: Intervals) -> LoopCode | None:
    """The thread's time inside its steps (the step envelopes) that no event covers."""
    line = thread.line
    envelopes = thread.with_kind(_IS_ENVELOPE)
    if len(envelopes) == 0:
        return None
    steps = Intervals.union_of(line.starts[envelopes], line.end_at(envelopes))
    marks = [
        (kind, thread.named(regex))
        for kind, regex in (("input", N.INPUT_EVENT), ("sync", N.SYNC_EVENT), ("dispatch", N.PJIT))
    ]
    ends = np.concatenate([line.end_at(pos) for _, pos in marks])
    kinds = [kind for kind, pos in marks for _ in range(len(pos))]
    order = np.argsort(ends, kind="stable")
    return LoopCode(
        steps.difference(busy),
        ends[order],
        [kinds[i] for i in order.tolist()],
        SampledStack.of(trace),
    )


def user_frames(thread: ThreadEvents) -> PythonFrames | None:
    """The user's own Python frames among the training thread's events, if traced."""
    found = thread.user_frame_names
    if not found:
        return None
    labels = {code: label for code, (label, _) in found.items()}
    files = {code: file for code, (_, file) in found.items()}
    return PythonFrames(thread, labels, files)


def training_thread_activity(
    trace: Trace, steps: Steps, thread: ThreadEvents | None = None
) -> HostActivity:
    """What the thread driving ``steps`` did: the one carrying the step annotations, else
    the one dispatching programs or drawing batches most often (one rule for the analysis
    and its plots). ``thread``: the events of the steps' thread, when the caller has them."""
    main_line = steps.main_line_row
    if main_line is None:
        main_line = guess_training_line(trace)
    captured = trace.sidecar is not None and N.ANN_STEP in steps.marker_names
    return host_activity(trace, main_line, steps.marker_names, thread, own_code=captured)
