"""The pure-Python decoder: protobuf (upb) parsing, then a Python loop per event.

Used when the compiled decoder (``_wire``) is not built. It returns exactly what
``_wire.decode`` returns, column for column and in the same interning order, so the two
can be compared on every trace (``tests/test_decoders.py``). Keep the two in step: every
rule here (which id wins, what an unknown metadata id becomes, how times are floored)
mirrors a comment in ``_wire.c``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError

from traceinspect.xplane.proto import message_class

_KIND = {
    None: 0,
    "double_value": 1,
    "uint64_value": 2,
    "int64_value": 3,
    "str_value": 4,
    "bytes_value": 5,
    "ref_value": 6,
}
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
#: The same words as the compiled decoder's (OUT_OF_RANGE_MSG in ``_wire.c``).
OUT_OF_RANGE = "an event's start or end is outside the int64 range of nanoseconds"
_PROGRESS_EVERY = 1 << 18


def _text(raw: bytes, errors: str = "backslashreplace") -> str:
    """Names: bytes that are not UTF-8 as ``\\xNN`` text; stat values (``errors=
    "surrogateescape"``) keep every byte. The same rule as ``decode_str`` in ``_wire.c``."""
    return raw.decode("utf-8", errors)


class _Interner:
    def __init__(self, errors: str = "backslashreplace") -> None:
        self.codes: dict[bytes, int] = {}
        self.strings: list[str] = []
        self.errors = errors

    def __call__(self, raw: bytes) -> int:
        code = self.codes.get(raw)
        if code is None:
            code = self.codes[raw] = len(self.strings)
            self.strings.append(_text(raw, self.errors))
        return code


class _Stats:
    """One stats sink: rows of (owner, stat, kind, int, float, str code)."""

    def __init__(self) -> None:
        self.owner: list[int] = []
        self.stat: list[int] = []
        self.kind: list[int] = []
        self.int_value: list[int] = []
        self.float_value: list[float] = []
        self.str_value: list[int] = []

    def columns(self) -> dict[str, np.ndarray]:
        return {
            "owner": np.array(self.owner, dtype=np.int32),
            "stat": np.array(self.stat, dtype=np.int32),
            "kind": np.array(self.kind, dtype=np.int8),
            "int_value": np.array(self.int_value, dtype=np.int64),
            "float_value": np.array(self.float_value, dtype=np.float64),
            "str_value": np.array(self.str_value, dtype=np.int32),
        }


def _entries(entries: Any) -> list[tuple[int, Any]]:
    """Map entries as (key, value) sorted by key, the last of a repeated key winning."""
    return sorted({e.key: e.value for e in entries}.items(), key=lambda kv: kv[0])


def _wrap64(value: int) -> int:
    """uint64 values keep their bits in an int64 column, as in the C decoder."""
    return value - 2**64 if value >= 2**63 else value


class _PlaneDecoder:
    def __init__(self, out: _Decoder, plane: Any) -> None:
        self.out = out
        # Sorted ids, so interning happens in the same order as in the C decoder.
        stat_md = _entries(plane.stat_metadata)
        self.stat_name = {k: out.stat_names(v.name) for k, v in stat_md}
        self.ref_name = {k: v.name for k, v in stat_md}

    def stat(self, sink: _Stats, owner: int, stat: Any) -> None:
        out = self.out
        which = stat.WhichOneof("value")
        kind = _KIND[which]
        ival, fval, sval = 0, math.nan, -1
        if which == "double_value":
            fval = stat.double_value
        elif which in ("uint64_value", "int64_value"):
            ival = _wrap64(getattr(stat, which))
        elif which in ("str_value", "bytes_value"):
            sval = out.str_values(getattr(stat, which))
        elif which == "ref_value":
            ref = stat.ref_value
            target = self.ref_name.get(_wrap64(ref))
            sval = out.str_values(target if target is not None else b"")
            ival = _wrap64(ref)
        code = self.stat_name.get(stat.metadata_id)
        if code is None:
            code = out.stat_names(b"")
        sink.owner.append(owner)
        sink.stat.append(code)
        sink.kind.append(kind)
        sink.int_value.append(ival)
        sink.float_value.append(fval)
        sink.str_value.append(sval)


class _Decoder:
    def __init__(self, progress: Callable[[int], object] | None, size: int) -> None:
        self.progress = progress
        self.size = size
        self.event_names = _Interner()
        self.stat_names = _Interner()
        self.str_values = _Interner("surrogateescape")
        self.event_stats = _Stats()
        self.aggregated_stats = _Stats()
        self.plane_stats = _Stats()
        self.metadata_stats = _Stats()

    def run(self, space: Any) -> dict[str, Any]:
        planes = list(space.planes)
        lines = [(row, line) for row, plane in enumerate(planes) for line in plane.lines]
        total = sum(len(line.events) for _, line in lines)
        ev_line = np.empty(total, dtype=np.int32)
        ev_name = np.empty(total, dtype=np.int32)
        ev_start = np.empty(total, dtype=np.int64)
        ev_dur = np.empty(total, dtype=np.int64)
        ag: dict[str, list[int]] = {"line_row": [], "name": [], "occurrences": [], "dur": []}
        md_plane: list[int] = []
        md_id: list[int] = []
        md_name: list[int] = []
        md_display: list[str] = []
        n = 0
        line_row = 0
        timed: list[int] = []
        first: list[int] = []
        last: list[int] = []
        for plane_row, plane in enumerate(planes):
            dec = _PlaneDecoder(self, plane)
            meta_name: dict[int, int] = {}
            for key, md in _entries(plane.event_metadata):
                row = len(md_plane)
                code = self.event_names(md.name)
                md_plane.append(plane_row)
                md_id.append(key)
                md_name.append(code)
                md_display.append(_text(md.display_name))
                meta_name[key] = code
                for stat in md.stats:
                    dec.stat(self.metadata_stats, row, stat)
            for stat in plane.stats:
                dec.stat(self.plane_stats, plane_row, stat)
            for line in plane.lines:
                ts = line.timestamp_ns
                first_event = n
                for event in line.events:
                    found = meta_name.get(event.metadata_id)
                    code = self.event_names(b"") if found is None else found
                    if event.WhichOneof("data") == "num_occurrences":
                        arow = len(ag["line_row"])
                        for stat in event.stats:
                            dec.stat(self.aggregated_stats, arow, stat)
                        ag["line_row"].append(line_row)
                        ag["name"].append(code)
                        ag["occurrences"].append(event.num_occurrences)
                        ag["dur"].append(event.duration_ps)
                        continue
                    for stat in event.stats:
                        dec.stat(self.event_stats, n, stat)
                    off = event.offset_ps
                    start = ts + off // 1000
                    stop = ts + (off + event.duration_ps) // 1000
                    if not (
                        _INT64_MIN <= start <= _INT64_MAX
                        and _INT64_MIN <= stop <= _INT64_MAX
                        and _INT64_MIN <= stop - start <= _INT64_MAX
                    ):
                        raise ValueError(OUT_OF_RANGE)
                    ev_line[n] = line_row
                    ev_name[n] = code
                    ev_start[n] = start
                    ev_dur[n] = stop - start
                    n += 1
                    if self.progress is not None and n % _PROGRESS_EVERY == 0:
                        self.progress(int(self.size * n / max(total, 1)))
                timed.append(n - first_event)
                if n > first_event:
                    first.append(int(ev_start[first_event:n].min()))
                    last.append(int((ev_start[first_event:n] + ev_dur[first_event:n]).max()))
                else:
                    first.append(0)
                    last.append(0)
                line_row += 1
        if self.progress is not None:
            self.progress(self.size)
        return {
            "hostnames": [_text(h) for h in space.hostnames],
            "errors": [_text(e) for e in space.errors],
            "warnings": [_text(w) for w in space.warnings],
            "event_names": self.event_names.strings,
            "stat_names": self.stat_names.strings,
            "str_values": self.str_values.strings,
            "plane_names": [_text(p.name) for p in planes],
            "line_names": [_text(line.name) for _, line in lines],
            "line_display_names": [_text(line.display_name) for _, line in lines],
            "metadata_display_names": md_display,
            "planes": {"xplane_id": np.array([p.id for p in planes], dtype=np.int64)},
            "lines": {
                "plane_row": np.array([row for row, _ in lines], dtype=np.int32),
                "line_id": np.array([ln.id for _, ln in lines], dtype=np.int64),
                "timestamp_ns": np.array([ln.timestamp_ns for _, ln in lines], dtype=np.int64),
                "duration_ps": np.array([ln.duration_ps for _, ln in lines], dtype=np.int64),
                "display_id": np.array([ln.display_id for _, ln in lines], dtype=np.int64),
                "event_count": np.array([len(ln.events) for _, ln in lines], dtype=np.int64),
                "timed_events": np.array(timed, dtype=np.int64),
                "first_start_ns": np.array(first, dtype=np.int64),
                "last_end_ns": np.array(last, dtype=np.int64),
            },
            "events": {
                "line_row": ev_line[:n],
                "name": ev_name[:n],
                "start_ns": ev_start[:n],
                "duration_ns": ev_dur[:n],
            },
            "aggregated": {
                "line_row": np.array(ag["line_row"], dtype=np.int32),
                "name": np.array(ag["name"], dtype=np.int32),
                "occurrences": np.array(ag["occurrences"], dtype=np.int64),
                "duration_ps": np.array(ag["dur"], dtype=np.int64),
            },
            "metadata": {
                "plane_row": np.array(md_plane, dtype=np.int32),
                "metadata_id": np.array(md_id, dtype=np.int64),
                "name": np.array(md_name, dtype=np.int32),
            },
            "event_stats": self.event_stats.columns(),
            "aggregated_stats": self.aggregated_stats.columns(),
            "plane_stats": self.plane_stats.columns(),
            "metadata_stats": self.metadata_stats.columns(),
        }


def decode(data: bytes | memoryview, progress: Callable[[int], object] | None = None) -> Any:
    """Decode serialized XSpace bytes; same result as ``_wire.decode``.

    Raises ``ValueError`` on malformed input, as the compiled decoder does.
    """
    try:
        space = message_class("XSpace").FromString(bytes(data))
    except DecodeError as exc:
        raise ValueError(f"malformed protobuf: {exc}") from None
    return _Decoder(progress, len(data)).run(space)
