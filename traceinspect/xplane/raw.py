"""The decoders' output: column groups and their dtypes, in one place.

Both decoders return a dict of string lists (``*_names``, ``str_values``, ...) and of
column groups (``events``, ``lines``, ``event_stats``, ...). The compiled decoder hands
out untyped byte buffers; :func:`typed` wraps every column as a numpy array of the dtype
named here, without copying, but for the events' name codes (see :func:`typed`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

_STATS = {
    "owner": "<i4",
    "stat": "<i4",
    "kind": "<i1",
    "int_value": "<i8",
    "float_value": "<f8",
    "str_value": "<i4",
}

DTYPES: dict[str, dict[str, str]] = {
    "planes": {"xplane_id": "<i8"},
    "lines": {
        "plane_row": "<i4",
        "line_id": "<i8",
        "timestamp_ns": "<i8",
        "duration_ps": "<i8",
        "display_id": "<i8",
        "event_count": "<i8",  # XEvents in the line, aggregated ones included
        "timed_events": "<i8",  # events with a start time (rows of the events frame)
        "first_start_ns": "<i8",  # span of those events; 0 and 0 when there are none
        "last_end_ns": "<i8",
    },
    "events": {"line_row": "<i4", "name": "<i4", "start_ns": "<i8", "duration_ns": "<i8"},
    "aggregated": {"line_row": "<i4", "name": "<i4", "occurrences": "<i8", "duration_ps": "<i8"},
    "metadata": {"plane_row": "<i4", "metadata_id": "<i8", "name": "<i4"},
    "event_stats": _STATS,
    "aggregated_stats": _STATS,
    "plane_stats": _STATS,
    "metadata_stats": _STATS,
}

LISTS = (
    "hostnames",
    "errors",
    "warnings",
    "event_names",
    "stat_names",
    "str_values",
    "plane_names",
    "line_names",
    "line_display_names",
    "metadata_display_names",
)

Raw = dict[str, Any]


def typed(raw: Mapping[str, Any]) -> Raw:
    """The same dict with every column a numpy array of its declared dtype (no copies),
    but for the events' name codes: those come narrowed to the dtype pandas keeps category
    codes in (:func:`code_dtype`). The frames would copy them so anyway; done here, the
    decoder's 4-byte column is freed before the frames are built, which was the peak of
    reading a file (22 MiB of the 89 MB capture's 269 MiB)."""
    import numpy as np  # here: a file may decode (on another thread) while numpy loads

    out: Raw = {key: raw[key] for key in LISTS}
    for key in ("event_names", "stat_names"):
        out[key] = _distinct(out[key])
    for group, columns in DTYPES.items():
        out[group] = {
            name: np.frombuffer(raw[group][name], dtype=dtype) for name, dtype in columns.items()
        }
    names = out["events"]["name"]
    out["events"]["name"] = names.astype(code_dtype(len(out["event_names"])), copy=False)
    return out


def printable(text: str) -> str:
    """``text`` with the bytes that are not UTF-8 (stat values keep them as surrogates) as
    ``\\xNN``, as names are: text that every output takes."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return text


def _distinct(names: list[str]) -> list[str]:
    """The names of an interned table, each text once. The decoders intern bytes, and read
    bytes that are not UTF-8 as ``\\xNN`` text, which a name may also hold literally: the
    second of two such names gets `` #2`` (and so on), so that the codes stay categories."""
    if len(set(names)) == len(names):
        return names
    seen: set[str] = set()
    out = []
    for name in names:
        text, k = name, 1
        while text in seen:
            k += 1
            text = f"{name} #{k}"
        seen.add(text)
        out.append(text)
    return out


def code_dtype(n_categories: int) -> np.dtype[Any]:
    """The integer dtype pandas stores codes of ``n_categories`` categories in."""
    import numpy as np

    for dtype in (np.int8, np.int16, np.int32):
        if n_categories < np.iinfo(dtype).max:
            return np.dtype(dtype)
    return np.dtype(np.int64)


def event_count(raw: Raw) -> int:
    return len(raw["events"]["start_ns"]) + len(raw["aggregated"]["name"])
