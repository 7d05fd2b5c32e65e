"""Interval arithmetic on sorted, disjoint half-open integer intervals ``[start, end)``.

An :class:`Intervals` is two int64 arrays. Every operation is vectorised (no Python loop
per interval), because device timelines hold millions of kernels. Invariants, checked by
``tests/test_intervals.py`` with Hypothesis: starts are sorted, each interval is
non-empty, and an interval ends strictly before the next one starts (touching intervals
are merged), so no time is ever counted twice.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True, eq=False)
class Intervals:
    """Sorted, disjoint, non-empty half-open intervals (ns)."""

    starts: np.ndarray
    ends: np.ndarray

    @staticmethod
    def empty() -> Intervals:
        return Intervals(np.empty(0, np.int64), np.empty(0, np.int64))

    @staticmethod
    def union_of(starts: np.ndarray, ends: np.ndarray) -> Intervals:
        """The union of possibly overlapping, unsorted intervals (empty ones dropped)."""
        starts = np.asarray(starts, dtype=np.int64)
        ends = np.asarray(ends, dtype=np.int64)
        if len(starts) == 0:
            return Intervals.empty()
        # A thread's events come sorted by start: sort only when they are not.
        if not (starts[1:] >= starts[:-1]).all():
            order = np.argsort(starts, kind="stable")
            starts, ends = starts[order], ends[order]
        # Running maximum of ends: an interval starts a new block when it begins after
        # every earlier interval has ended; a block ends at the running maximum where the
        # next block begins. Empty intervals never reach past an earlier end: alone they
        # make empty blocks, dropped at the end (no copy of the intervals without them).
        reach = np.maximum.accumulate(ends)
        new_block = np.empty(len(starts), dtype=bool)
        new_block[0] = True
        np.greater(starts[1:], reach[:-1], out=new_block[1:])
        first = np.flatnonzero(new_block)
        last = np.append(first[1:] - 1, len(starts) - 1)
        block_starts, block_ends = starts[first], reach[last]
        keep = block_ends > block_starts
        return Intervals(block_starts[keep], block_ends[keep])

    @staticmethod
    def union_of_sorted(
        starts: np.ndarray,
        durations: np.ndarray,
        left_out: np.ndarray | None = None,
        chunk: int = 1 << 16,
    ) -> Intervals:
        """:meth:`union_of` for intervals sorted by start, given as starts and durations
        (a thread's events), without ``left_out`` (positions): read ``chunk`` at a time into
        the same two buffers, so no array of the intervals' size is made (a thread has
        millions of events) and no memory is asked for again per chunk (where the allocator
        hands out fresh pages for every large array, as in Dask's workers, that is half of
        an analysis' time)."""
        starts = np.asarray(starts, dtype=np.int64)
        durations = np.asarray(durations, dtype=np.int64)
        skipped = np.sort(left_out) if left_out is not None else np.empty(0, np.int64)
        firsts: list[np.ndarray] = []
        lasts: list[np.ndarray] = []  # the running maximum where each block ends
        carry = np.iinfo(np.int64).min  # the latest end before this chunk
        reach_buffer = np.empty(min(chunk, len(starts)), dtype=np.int64)
        new_block_buffer = np.empty(len(reach_buffer), dtype=bool)
        for lo in range(0, len(starts), chunk):
            s = starts[lo : lo + chunk]
            reach = reach_buffer[: len(s)]
            np.add(s, durations[lo : lo + chunk], out=reach)
            out = skipped[(skipped >= lo) & (skipped < lo + len(s))] - lo
            reach[out] = s[out]  # left out: made empty
            np.maximum.accumulate(reach, out=reach)
            np.maximum(reach, carry, out=reach)
            new_block = new_block_buffer[: len(s)]
            new_block[0] = s[0] > carry
            np.greater(s[1:], reach[:-1], out=new_block[1:])
            first = np.flatnonzero(new_block)
            if len(first) and first[0] == 0:
                lasts.append(np.array([carry], dtype=np.int64))  # the previous chunk's last
            lasts.append(reach[first[first > 0] - 1])
            firsts.append(first + lo)
            carry = int(reach[-1])
        if not firsts:
            return Intervals.empty()
        first_all = np.concatenate(firsts)
        ends = np.concatenate([*lasts, np.array([carry], dtype=np.int64)])[1:]
        block_starts = starts[first_all]
        keep = ends > block_starts
        return Intervals(block_starts[keep], ends[keep])

    def __len__(self) -> int:
        return len(self.starts)

    @property
    def total(self) -> int:
        """Total covered length."""
        return int((self.ends - self.starts).sum())

    def clip(self, lo: int, hi: int) -> Intervals:
        """The part inside ``[lo, hi)``."""
        if hi <= lo or len(self) == 0:
            return Intervals.empty()
        i = int(np.searchsorted(self.ends, lo, side="right"))
        j = int(np.searchsorted(self.starts, hi, side="left"))
        starts = np.maximum(self.starts[i:j], lo)
        ends = np.minimum(self.ends[i:j], hi)
        keep = ends > starts
        return Intervals(starts[keep], ends[keep])

    def complement(self, lo: int, hi: int) -> Intervals:
        """The gaps: the parts of ``[lo, hi)`` not covered."""
        inside = self.clip(lo, hi)
        starts = np.concatenate(([lo], inside.ends))
        ends = np.concatenate((inside.starts, [hi]))
        keep = ends > starts
        return Intervals(starts[keep].astype(np.int64), ends[keep].astype(np.int64))

    def union(self, other: Intervals) -> Intervals:
        return Intervals.union_of(
            np.concatenate((self.starts, other.starts)), np.concatenate((self.ends, other.ends))
        )

    def intersect(self, other: Intervals) -> Intervals:
        """The parts covered by both."""
        if len(self) == 0 or len(other) == 0:
            return Intervals.empty()
        # Each pair that overlaps: for every interval of self, the range of other's
        # intervals it touches, found with two binary searches.
        lo = np.searchsorted(other.ends, self.starts, side="right")
        hi = np.searchsorted(other.starts, self.ends, side="left")
        counts = np.maximum(hi - lo, 0)
        if counts.sum() == 0:
            return Intervals.empty()
        mine = np.repeat(np.arange(len(self)), counts)
        offsets = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
        theirs = np.repeat(lo, counts) + offsets
        starts = np.maximum(self.starts[mine], other.starts[theirs])
        ends = np.minimum(self.ends[mine], other.ends[theirs])
        keep = ends > starts
        return Intervals.union_of(starts[keep], ends[keep])

    def difference(self, other: Intervals) -> Intervals:
        """The parts of ``self`` not covered by ``other``."""
        if len(self) == 0 or len(other) == 0:
            return self
        lo = min(int(self.starts[0]), int(other.starts[0]))
        hi = max(int(self.ends[-1]), int(other.ends[-1]))
        return self.intersect(other.complement(lo, hi))

    @staticmethod
    def claim_in_order(sources: Sequence[tuple[K, Intervals]]) -> dict[K, Intervals]:
        """Give each instant to the first source that covers it: each key gets the part of
        its intervals that no earlier source claimed. (The rule that gives each idle instant
        one cause, in the analysis and in the plots alike.)"""
        claimed = Intervals.empty()
        out: dict[K, Intervals] = {}
        for key, iv in sources:
            out[key] = iv.difference(claimed)
            claimed = claimed.union(iv)
        return out

    def overlap_with(self, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """For each query interval ``[starts[k], ends[k])``, the covered length inside it."""
        starts = np.asarray(starts, dtype=np.int64)
        ends = np.asarray(ends, dtype=np.int64)
        if len(self) == 0:
            return np.zeros(len(starts), dtype=np.int64)
        # Prefix sums of covered length let each query be answered by two lookups.
        cum = np.concatenate(([0], np.cumsum(self.ends - self.starts)))

        def covered_before(t: np.ndarray) -> np.ndarray:
            k = np.searchsorted(self.starts, t, side="right")  # intervals starting <= t
            full = cum[np.maximum(k - 1, 0)]
            last = np.where(k > 0, np.minimum(t, self.ends[np.maximum(k - 1, 0)]), 0)
            partial = np.where(k > 0, last - self.starts[np.maximum(k - 1, 0)], 0)
            return np.where(k > 0, full + np.maximum(partial, 0), 0)

        return np.maximum(covered_before(ends) - covered_before(starts), 0)
