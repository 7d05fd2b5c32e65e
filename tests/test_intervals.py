"""Interval arithmetic against a brute-force model on small integer timelines."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from traceinspect.intervals import Intervals

SPAN = 60
raw = st.lists(st.tuples(st.integers(0, SPAN), st.integers(0, 12)), max_size=25)


def build(pairs: list[tuple[int, int]]) -> Intervals:
    starts = np.array([s for s, _ in pairs], dtype=np.int64)
    ends = np.array([s + d for s, d in pairs], dtype=np.int64)
    return Intervals.union_of(starts, ends)


def cells(pairs: list[tuple[int, int]]) -> set[int]:
    """The model: the set of unit time cells covered."""
    return {t for s, d in pairs for t in range(s, s + d)}


def cells_of(iv: Intervals) -> set[int]:
    return {t for s, e in zip(iv.starts, iv.ends, strict=True) for t in range(int(s), int(e))}


def assert_canonical(iv: Intervals) -> None:
    assert iv.starts.dtype == np.int64 and iv.ends.dtype == np.int64
    assert (iv.ends > iv.starts).all()
    assert (iv.starts[1:] > iv.ends[:-1]).all()  # sorted, disjoint, not touching


@settings(max_examples=300, deadline=None)
@given(raw)
def test_union_covers_exactly_once(pairs: list[tuple[int, int]]) -> None:
    iv = build(pairs)
    assert_canonical(iv)
    assert cells_of(iv) == cells(pairs)
    assert iv.total == len(cells(pairs))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, SPAN), st.integers(-3, 12)), max_size=25))
def test_union_ignores_empty_and_negative_intervals(pairs: list[tuple[int, int]]) -> None:
    """Empty and negative intervals (end <= start) cover nothing, wherever they fall."""
    iv = build(pairs)
    assert_canonical(iv)
    assert cells_of(iv) == cells([(s, d) for s, d in pairs if d > 0])


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, SPAN), st.integers(0, 12), st.booleans()), max_size=25),
    st.integers(1, 6),
)
def test_union_of_sorted_in_chunks(rows: list[tuple[int, int, bool]], chunk: int) -> None:
    """The chunked union of sorted spans is the union of the spans not left out, whatever
    the chunk size."""
    rows = sorted(rows, key=lambda r: r[0])
    starts = np.array([s for s, _, _ in rows], dtype=np.int64)
    durations = np.array([d for _, d, _ in rows], dtype=np.int64)
    left_out = np.array([i for i, (_, _, out) in enumerate(rows) if out], dtype=np.int64)
    iv = Intervals.union_of_sorted(starts, durations, left_out, chunk=chunk)
    assert_canonical(iv)
    assert cells_of(iv) == cells([(s, d) for s, d, out in rows if not out])


@settings(max_examples=300, deadline=None)
@given(raw, st.integers(0, SPAN), st.integers(0, SPAN + 15))
def test_busy_plus_idle_is_the_span(pairs: list[tuple[int, int]], lo: int, hi: int) -> None:
    iv = build(pairs)
    busy = iv.clip(lo, hi)
    idle = iv.complement(lo, hi)
    assert_canonical(busy)
    assert_canonical(idle)
    span = set(range(lo, hi))
    assert cells_of(busy) == cells(pairs) & span
    assert cells_of(idle) == span - cells(pairs)
    assert busy.total + idle.total == max(hi - lo, 0)


@settings(max_examples=300, deadline=None)
@given(raw, raw)
def test_union_and_intersection(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> None:
    x, y = build(a), build(b)
    both = x.intersect(y)
    either = x.union(y)
    assert_canonical(both)
    assert_canonical(either)
    assert cells_of(both) == cells(a) & cells(b)
    assert cells_of(either) == cells(a) | cells(b)


@settings(max_examples=300, deadline=None)
@given(raw, st.lists(st.tuples(st.integers(0, SPAN + 10), st.integers(0, 20)), max_size=10))
def test_overlap_with_queries(pairs: list[tuple[int, int]], queries: list[tuple[int, int]]) -> None:
    iv = build(pairs)
    qs = np.array([q for q, _ in queries], dtype=np.int64)
    qe = np.array([q + d for q, d in queries], dtype=np.int64)
    got = iv.overlap_with(qs, qe)
    covered = cells(pairs)
    want = [len(covered & set(range(s, e))) for s, e in zip(qs, qe, strict=True)]
    assert got.tolist() == want


def test_exact_example() -> None:
    iv = Intervals.union_of(np.array([10, 0, 5, 30]), np.array([20, 5, 12, 31]))
    assert iv.starts.tolist() == [0, 30] and iv.ends.tolist() == [20, 31]
    gaps = iv.complement(-5, 40)
    assert list(zip(gaps.starts.tolist(), gaps.ends.tolist(), strict=True)) == [
        (-5, 0),
        (20, 30),
        (31, 40),
    ]


@settings(max_examples=300, deadline=None)
@given(raw, raw)
def test_difference(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> None:
    got = build(a).difference(build(b))
    assert_canonical(got)
    assert cells_of(got) == cells(a) - cells(b)


@settings(max_examples=200, deadline=None)
@given(st.lists(raw, min_size=1, max_size=5))
def test_claim_in_order_gives_each_instant_to_the_first_source(
    sources: list[list[tuple[int, int]]],
) -> None:
    owned = Intervals.claim_in_order([(k, build(p)) for k, p in enumerate(sources)])
    assert list(owned) == list(range(len(sources)))
    seen: set[int] = set()
    for k, pairs in enumerate(sources):
        assert_canonical(owned[k])
        assert cells_of(owned[k]) == cells(pairs) - seen
        seen |= cells(pairs)
    # Disjoint, and together exactly the union of the sources.
    assert sum(iv.total for iv in owned.values()) == len(seen)
