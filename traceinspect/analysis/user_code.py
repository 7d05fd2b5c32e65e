"""The user's own code on the training thread: its Python-tracer frames, and the loop's
untraced time inside its steps with what capture's stack sampler saw there."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from traceinspect import names as N
from traceinspect.analysis.thread_events import (
    _IS_ENVELOPE,
    ThreadEvents,
    _in_blocks,
    _running_before,
)
from traceinspect.intervals import Intervals
from traceinspect.trace import Trace

# Blocks read at a time when looking for the longest frames.
_BLOCKS_AT_ONCE = 16


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

    @cached_property
    def _ours(self) -> np.ndarray:
        """One bool per site: a look in capture's own bookkeeping."""
        return np.array([is_capture_look(s) for s in self.sites], dtype=bool)

    def _counts_in(self, spans: Intervals) -> np.ndarray:
        """Looks inside ``spans``, per site."""
        if len(spans) == 0 or len(self.t_ns) == 0:
            return np.zeros(len(self.sites), dtype=np.int64)
        k = np.searchsorted(spans.starts, self.t_ns, side="right") - 1
        inside = (k >= 0) & (self.t_ns < spans.ends[np.maximum(k, 0)])
        return np.bincount(self.site[inside], minlength=len(self.sites))

    def looks_in(self, spans: Intervals) -> tuple[list[tuple[str, int]], float]:
        """:meth:`sites_in` and :meth:`capture_share` of ``spans``, its looks counted once."""
        counts = self._counts_in(spans)
        return self._sites_of(counts), self._share_of(counts)

    def sites_in(self, spans: Intervals) -> list[tuple[str, int]]:
        """(site, samples) of the samples inside ``spans``, the most frequent first; samples
        outside any of the user's frames, and those in capture's own bookkeeping, are left
        out."""
        return self._sites_of(self._counts_in(spans))

    def capture_share(self, spans: Intervals) -> float:
        """Of the looks inside ``spans``, the share in capture's own bookkeeping (step
        detection, completion stamps, its status file): time the script does not spend
        without the profiler."""
        return self._share_of(self._counts_in(spans))

    def _sites_of(self, counts: np.ndarray) -> list[tuple[str, int]]:
        order = np.argsort(-counts, kind="stable")
        return [
            (self.sites[i], int(counts[i]))
            for i in order.tolist()
            if counts[i] and self.sites[i] and not self._ours[i]
        ]

    def _share_of(self, counts: np.ndarray) -> float:
        total = int(counts.sum())
        return int(counts[self._ours].sum()) / total if total else 0.0


#: How capture's sampler names a look in capture's own code (``capture/_child/sampler.py``:
#: ``CAPTURE_LOOK``).
_CAPTURE_LOOK = "(in traceinspect capture "


def is_capture_look(site: str) -> bool:
    """Whether a sampled site is capture's own bookkeeping, not the script's code."""
    return _CAPTURE_LOOK in site


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
        None when none of it is. The time capture's own bookkeeping took there (the share
        of the sampler's looks in it) is not the loop's and is left out."""
        part = self.spans.clip(lo, hi)
        total = part.total
        sites: list[tuple[str, int]] = []
        if total > 0 and self.samples is not None:
            sites, ours = self.samples.looks_in(part)
            total = round(total * (1.0 - ours))
        if total <= 0:
            return None
        # Where: after the last stamped event that ended before the longest stretch began.
        longest = int(np.argmax(part.ends - part.starts))
        at = int(part.starts[longest])
        k = int(np.searchsorted(self.marks_end, at, side="right")) - 1
        where = _WHERE[self.marks_kind[k]] if k >= 0 else "before anything else of the step"
        return total, where, sites


_WHERE = {
    "input": "after next() returned a batch",
    "sync": "after a read of a device value",
    "dispatch": "after the dispatch",
}


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


def loop_code(trace: Trace, thread: ThreadEvents, busy: Intervals) -> LoopCode | None:
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
