"""The trace's columns as arrays and typed values: one line's events (LineEvents), each stat
row's value of the kind the trace stored, and codes and matches of categorical columns."""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import numpy as np

from traceinspect import schema as S
from traceinspect.errors import UsageError
from traceinspect.xplane.raw import printable

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True, eq=False)
class LineEvents:
    """The events of one line as plain arrays, in order of their start: what an analysis
    of millions of events reads without copying them.

    The arrays are views of the events' columns (:attr:`Trace.columns`, which the events
    frame shares) when the line's events are stored in start order (as profilers write
    them); otherwise sorted copies, with ``order`` giving each position's place among the
    line's stored rows. Names are codes into ``names``, the categories of
    ``trace.events[NAME]``.
    """

    line_row: int
    starts: np.ndarray  # int64, sorted
    durations: np.ndarray  # int64
    codes: np.ndarray  # name codes
    names: list[str]  # the name categories
    #: The events frame's row of each position: ``first_row + position`` when ``order`` is
    #: None, else ``rows[position]``.
    first_row: int
    order: np.ndarray | None = None  # positions among the stored rows (unsorted lines)
    rows_stored: np.ndarray | None = None  # event rows when the line's rows are not one run

    def __len__(self) -> int:
        return len(self.starts)

    @property
    def ends(self) -> np.ndarray:
        """Every event's end: a new array (take :meth:`end_at` of the few you need)."""
        return self.starts + self.durations

    def end_at(self, positions: np.ndarray | slice) -> np.ndarray:
        """The ends of these positions."""
        return self.starts[positions] + self.durations[positions]

    def rows(self, positions: np.ndarray) -> np.ndarray:
        """The events frame's row numbers (``event_row``, as ``load`` numbers them) of these
        positions."""
        stored = positions if self.order is None else self.order[positions]
        if self.rows_stored is not None:
            return self.rows_stored[stored]
        return np.asarray(stored, dtype=np.int64) + self.first_row

    def stored_order(self, positions: np.ndarray) -> np.ndarray:
        """Where these positions come among the line's rows as stored: ties between events
        are broken in that order, as a pass over the frame would."""
        return positions if self.order is None else self.order[positions]

    def name_mask(self, hit: np.ndarray) -> np.ndarray:
        """Positions whose name's entry in ``hit`` (one bool per name code) is set."""
        if len(hit) == 0:
            return np.zeros(len(self.codes), dtype=bool)
        return np.asarray(hit[self.codes])

    def names_matching(self, regex: re.Pattern[str]) -> np.ndarray:
        """One bool per name code: does the name match ``regex`` (``search``)?"""
        return np.fromiter(
            (regex.search(str(n)) is not None for n in self.names), bool, len(self.names)
        )


def stat_values(
    kinds: np.ndarray, ints: np.ndarray, floats: np.ndarray, strings: np.ndarray
) -> np.ndarray:
    """One Python value per stat row, of the type the trace stored (int, float or str):
    ``kinds`` are codes into :data:`~traceinspect.schema.STAT_KINDS`, ``strings`` the
    rows' string values."""
    values = np.empty(len(kinds), dtype=object)
    for i, code in enumerate(kinds.tolist()):
        kind = S.STAT_KINDS[code]
        if kind == "double":
            values[i] = float(floats[i])
        elif kind == "int64":
            values[i] = int(ints[i])
        elif kind == "uint64":
            values[i] = int(ints[i]) & 0xFFFFFFFFFFFFFFFF
        elif kind in S.STRING_KINDS:
            values[i] = str(strings[i])
        else:
            values[i] = None
    return values


def typed_values(stats: pd.DataFrame) -> pd.Series:
    """One Python value per stat row, of the type the trace stored (int, float or str)."""
    import pandas as pd

    values = stat_values(
        category_codes(stats[S.KIND]),
        stats[S.INT_VALUE].to_numpy(),
        stats[S.FLOAT_VALUE].to_numpy(),
        stats[S.STR_VALUE].to_numpy(dtype=object),  # once: .iat per row is slow
    )
    return pd.Series(values, index=stats.index, dtype=object)


def _combine(own: pd.Series, inherited: pd.Series) -> pd.Series:
    """``own`` where set, else ``inherited``. pandas 2.1-2.2 warn (FutureWarning) that the
    dtype of such a combination with all-missing parts will change; pandas 3 made that
    change, and both give the values the same."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "The behavior of array concatenation", FutureWarning)
        return own.combine_first(inherited)


def _stat_column(rows: pd.DataFrame, stat: str, owner: str) -> pd.Series | None:
    """The values of one stat, indexed by owner row, typed by the stat's kinds."""
    import pandas as pd

    sub = rows[rows[S.STAT] == stat]
    if sub.empty:
        return None
    sub = sub.drop_duplicates(subset=owner, keep="last")
    kinds = set(sub[S.KIND].astype(str))
    if kinds <= S.INTEGER_KINDS and "uint64" not in kinds:
        # Nullable, so events without the stat do not turn ids into floats.
        values: pd.Series = sub[S.INT_VALUE].astype("Int64")
    elif kinds == {"double"}:
        values = sub[S.FLOAT_VALUE]
    elif kinds <= S.STRING_KINDS:
        # Text (bytes that are not UTF-8 as \xNN), computed once per distinct value.
        column = sub[S.STR_VALUE]
        table = np.array([*map(printable, column.cat.categories), None], dtype=object)
        codes = category_codes(column)
        values = pd.Series(table[np.where(codes < 0, len(table) - 1, codes)], dtype=object)
    else:
        values = typed_values(sub)
        values = values.map(lambda v: printable(v) if isinstance(v, str) else v)
    return pd.Series(values.array, index=sub[owner].to_numpy())


def category_codes(column: pd.Series) -> np.ndarray:
    """The codes of a categorical column, without a copy (``.cat.codes`` makes a Series)."""
    import pandas as pd

    return np.asarray(cast(pd.Categorical, column.array).codes)


def category_mask(column: pd.Series, regex: re.Pattern[str]) -> np.ndarray:
    """Rows of a categorical column whose value matches ``regex`` (``search``): the regex
    runs once per category, not once per row."""
    cats = column.cat.categories
    hit = np.fromiter((regex.search(str(c)) is not None for c in cats), bool, len(cats))
    codes = category_codes(column)
    if len(hit) == 0:
        return np.zeros(len(codes), dtype=bool)
    return np.asarray(hit[codes] & (codes >= 0))


def _category_match(column: pd.Series, pattern: str, what: str) -> np.ndarray:
    try:
        regex = re.compile(pattern)
    except re.error as exc:
        raise UsageError(f"invalid regular expression for {what}: {pattern!r} ({exc}).") from None
    return category_mask(column, regex)
