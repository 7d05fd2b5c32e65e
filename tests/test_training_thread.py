"""The training thread's lookups (a gap's longest events, the frame running at an instant)
against a scan over every event in the frame's order, on small random threads: events in
any order, nested or not, ties in start and length, step envelopes left out, and lookup
blocks of a few events so that every path of the block index is taken."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

import traceinspect.analysis.thread_events as te
import traceinspect.analysis.training_thread as tt
import traceinspect.analysis.user_code as uc
from traceinspect.trace import LineEvents

NAMES = ["a", "b", "c", "d", "e"]
events = st.lists(
    st.tuples(st.integers(0, 40), st.integers(0, 15), st.integers(0, len(NAMES) - 1)),
    min_size=1,
    max_size=40,
)


@contextmanager
def small_blocks(block: int, candidates: int) -> Iterator[None]:
    saved = te._BLOCK, te._FIRST_CANDIDATES
    te._BLOCK, te._FIRST_CANDIDATES = block, candidates
    try:
        yield
    finally:
        te._BLOCK, te._FIRST_CANDIDATES = saved


def thread_of(rows: list[tuple[int, int, int]], kept: list[bool]) -> tt.ThreadEvents:
    """Events in the frame's order (``rows``), as ``host_activity`` arranges them."""
    starts = np.array([s for s, _, _ in rows], dtype=np.int64)
    durations = np.array([d for _, d, _ in rows], dtype=np.int64)
    codes = np.array([c for _, _, c in rows], dtype=np.int16)
    order = np.argsort(starts, kind="stable")
    line = LineEvents(0, starts[order], durations[order], codes[order], pd.Index(NAMES), 0, order)
    return tt.ThreadEvents(line, np.array(kept), np.arange(len(NAMES), dtype=np.int8) % 4)


def scan_longest(
    rows: list[tuple[int, int, int]], kept: list[bool], lo: int, hi: int, top: int
) -> list[tuple[str, str, int]]:
    """The rule, as a scan in the frame's order: overlap with [lo, hi), longest first (the
    first event among equals), one entry per name."""
    found: list[tuple[str, str, int]] = []
    scored = [
        (min(s + d, hi) - max(s, lo), i, c)
        for i, (s, d, c) in enumerate(rows)
        if kept[c] and min(s + d, hi) - max(s, lo) > 0
    ]
    seen: set[int] = set()
    for overlap, _, code in sorted(scored, key=lambda x: (-x[0], x[1])):
        if code not in seen:
            seen.add(code)
            found.append((NAMES[code], tt.CATEGORIES[code % 4], overlap))
    return found[:top]


@settings(max_examples=400, deadline=None)
@given(
    events,
    st.lists(st.booleans(), min_size=len(NAMES), max_size=len(NAMES)),
    st.integers(0, 50),
    st.integers(1, 30),
    st.integers(1, 4),
    st.sampled_from([(2, 1), (3, 2), (1024, 64)]),
)
def test_longest_names_match_a_scan(
    rows: list[tuple[int, int, int]],
    kept: list[bool],
    lo: int,
    width: int,
    top: int,
    sizes: tuple[int, int],
) -> None:
    with small_blocks(*sizes):
        thread = thread_of(rows, kept)
        assert thread.longest_names(lo, lo + width, top) == scan_longest(
            rows, kept, lo, lo + width, top
        )


def scan_innermost(rows: list[tuple[int, int, int]], main: list[bool], at: int) -> str | None:
    """The rule, as a scan in the frame's order: of the frames running at ``at`` (main
    script's first), the latest to start, the first of equals."""
    for main_only in (True, False):
        running = [
            (s, i, c)
            for i, (s, d, c) in enumerate(rows)
            if s <= at <= s + d and (main[c] or not main_only)
        ]
        if running:
            latest = max(s for s, _, _ in running)
            first = min(i for s, i, _ in running if s == latest)
            return NAMES[rows[first][2]]
    return None


@settings(max_examples=400, deadline=None)
@given(
    events,
    st.lists(st.booleans(), min_size=len(NAMES), max_size=len(NAMES)),
    st.integers(-2, 60),
    st.sampled_from([2, 3, 1024]),
)
def test_innermost_frame_matches_a_scan(
    rows: list[tuple[int, int, int]], main: list[bool], at: int, block: int
) -> None:
    with small_blocks(block, 64):
        thread = thread_of(rows, [True] * len(NAMES))
        frames = tt.PythonFrames(
            thread, dict(enumerate(NAMES)), dict(enumerate(NAMES)), np.array(main)
        )
        assert frames.innermost_at(at) == scan_innermost(rows, main, at)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 10), st.integers(0, 3), st.integers(0, len(NAMES) - 1)),
        min_size=1,
        max_size=30,
    ),
    st.lists(st.booleans(), min_size=len(NAMES), max_size=len(NAMES)),
    st.sampled_from([1, 2, 1024]),
)
def test_the_main_file_is_the_longest_frames(
    rows: list[tuple[int, int, int]], user: list[bool], block: int
) -> None:
    """The script the thread runs is the file of its longest user frame, the first of
    equals in the frame's order; frames of other names are no candidates."""
    if not any(user[c] for _, _, c in rows):
        return
    files = {c: f"file{c % 2}.py" for c in range(len(NAMES)) if user[c]}
    saved = uc._BLOCKS_AT_ONCE
    uc._BLOCKS_AT_ONCE = 1
    try:
        with small_blocks(block, 64):
            frames = tt.PythonFrames(thread_of(rows, [True] * len(NAMES)), files, files)
            mains = frames.in_main_file()
    finally:
        uc._BLOCKS_AT_ONCE = saved
    longest = max(d for _, d, c in rows if user[c])
    first = next(c for _, d, c in rows if user[c] and d == longest)
    assert {c for c in files if mains[c]} == {c for c in files if files[c] == files[first]}
