"""Small array helpers the analyses share."""

from __future__ import annotations

import numpy as np


def members(values: np.ndarray, of: np.ndarray) -> np.ndarray:
    """One bool per value: is it among ``of``? (``np.isin`` for the few values of
    ``of`` the analyses look up: one sort and a binary search each.)"""
    if len(of) == 0 or len(values) == 0:
        return np.zeros(len(values), dtype=bool)
    table = np.sort(of)
    at = np.minimum(np.searchsorted(table, values), len(table) - 1)
    return np.asarray(table[at] == values)


def most_common(values: np.ndarray) -> int:
    """The value occurring most often (of equals, the first to occur)."""
    distinct, first, counts = np.unique(values, return_index=True, return_counts=True)
    best = np.flatnonzero(counts == counts.max())
    return int(distinct[best[np.argmin(first[best])]])
