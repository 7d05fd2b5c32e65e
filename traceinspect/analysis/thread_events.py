"""The training thread's events as arrays: each name matched once, its category, and
lookups by time through blocks of events.

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
from traceinspect.intervals import Intervals
from traceinspect.trace import LineEvents, Trace, category_codes
from traceinspect.vocabulary import PRECEDENCE

if TYPE_CHECKING:
    import pandas as pd

_LIBRARY = re.compile(r"(site-packages|dist-packages|/lib/python\d|<frozen|^jax/|/jax/|/jaxlib/)")

#: What each event of the training thread is, by its name (schema.CATEGORY), in the order
#: of ``ThreadEvents.category_of_name``'s codes; one event has one category, the first that
#: matches in the claim order (compile > sync > input), else host.
CATEGORIES: tuple[str, ...] = tuple(reversed(PRECEDENCE))
# The event names of each category but the host's (everything else).
_MATCHES = {"input": N.INPUT_EVENT, "sync": N.SYNC_EVENT, "compile": N.COMPILE_EVENT}

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


def thread_events(trace: Trace, line_row: int, markers: tuple[str, ...] = ()) -> ThreadEvents:
    """The events of the thread on line ``line_row``; ``markers`` are step envelope events
    (``StepTraceAnnotation`` names): they span whole steps and are not work."""
    line = trace.line_events(line_row)
    names = line.names
    kept = np.fromiter((n not in markers for n in names), bool, len(names))
    thread = ThreadEvents(line, kept, np.zeros(len(names), dtype=np.int8))
    category = np.zeros(len(names), dtype=np.int8)
    # Lowest precedence first, so that a name matching several takes the first of them.
    for code, cause in enumerate(CATEGORIES):
        if cause in _MATCHES:
            category[thread.matching(_MATCHES[cause]) & kept] = code
    thread.category_of_name[:] = category  # (the names matched once, for both)
    return thread
