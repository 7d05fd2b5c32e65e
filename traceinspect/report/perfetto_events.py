"""The trace's own events in the Perfetto file: one ``X`` event each, as JSON text, its
stats as ``args``."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

from traceinspect import schema as S
from traceinspect.trace import Trace, typed_values
from traceinspect.xplane.raw import printable

_JSON_SAFE_INT = 2**53  # larger integers lose digits in JavaScript viewers: written as text


def _trace_events(trace: Trace, kept: pd.DataFrame, tids: np.ndarray, origin: int) -> list[str]:
    """One ``X`` event per kept event, its stats as ``args``."""
    names = kept[S.NAME].cat.categories
    pid_of_tid = np.zeros(int(tids.max()) + 1 if len(tids) else 1, dtype=np.int64)
    pid_of_tid[tids] = 2 + trace.lines[S.PLANE_ROW].to_numpy()[kept[S.LINE_ROW].to_numpy()]
    # What comes before "ts" depends on the name and the thread alone: made once per pair
    # (thousands of pairs for a million events).
    pairs, pair_of_event = np.unique(
        kept[S.NAME].cat.codes.to_numpy().astype(np.int64) * len(pid_of_tid) + tids,
        return_inverse=True,
    )
    heads = np.array(
        [
            f'{{"ph":"X","name":{json.dumps(str(names[c]))},"pid":{pid_of_tid[t]},"tid":{t},"ts":'
            for c, t in (divmod(int(k), len(pid_of_tid)) for k in pairs)
        ],
        dtype=object,
    )
    ts = (kept[S.START_NS].to_numpy() - origin) / 1e3
    dur = kept[S.DURATION_NS].to_numpy() / 1e3
    args = np.full(len(kept), "", dtype=object)
    for row, text in _stat_args(trace, kept).items():
        args[row] = text
    return [
        f'{h}{s:.3f},"dur":{d:.3f}{a}}}'
        for h, s, d, a in zip(
            heads[pair_of_event].tolist(), ts.tolist(), dur.tolist(), args.tolist(), strict=True
        )
    ]


def _stat_args(trace: Trace, kept: pd.DataFrame) -> dict[int, str]:
    """``,"args":{...}`` of every kept event that carries stats, by position in ``kept``."""
    stats = trace.stats_of(kept)
    if stats.empty:
        return {}
    position = pd.Series(np.arange(len(kept)), index=kept.index)
    by_event: dict[int, dict[str, Any]] = {}
    for row, stat, value in zip(
        position.loc[stats[S.EVENT_ROW].to_numpy()].tolist(),
        stats[S.STAT].astype(str).tolist(),
        typed_values(stats).tolist(),
        strict=True,
    ):
        big = isinstance(value, int) and abs(value) >= _JSON_SAFE_INT
        # Bytes that are not UTF-8 as \xNN, not as "\udcff".
        shown = printable(value) if isinstance(value, str) else str(value) if big else value
        by_event.setdefault(row, {})[stat] = shown
    return {row: ',"args":' + json.dumps(args) for row, args in by_event.items()}
