"""Small array helpers the analyses share."""

from __future__ import annotations

import numpy as np


def lookup(table: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each value is in the sorted ``table``: its position (any position where it is
    not there) and whether it is there. One binary search per value."""
    if len(table) == 0:
        return np.zeros(len(values), dtype=np.intp), np.zeros(len(values), dtype=bool)
    at = np.minimum(np.searchsorted(table, values), len(table) - 1)
    return at, np.asarray(table[at] == values)


def members(values: np.ndarray, of: np.ndarray) -> np.ndarray:
    """One bool per value: is it among ``of``? (``np.isin`` for the few values of
    ``of`` the analyses look up: one sort and a binary search each.)"""
    return lookup(np.sort(of), values)[1]


def longest_first(durations: np.ndarray) -> np.ndarray:
    """Positions by duration, longest first (of equals, the earlier first)."""
    return np.argsort(-durations, kind="stable")


def most_common(values: np.ndarray) -> int:
    """The value occurring most often (of equals, the first to occur)."""
    distinct, first, counts = np.unique(values, return_index=True, return_counts=True)
    best = np.flatnonzero(counts == counts.max())
    return int(distinct[best[np.argmin(first[best])]])
