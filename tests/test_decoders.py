"""The compiled and the protobuf decoders give identical columns, on real and built traces."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xspace as X
from traces import all_traces

from traceinspect.xplane import pydecode
from traceinspect.xplane.raw import typed
from traceinspect.xplane.reader import compiled_available

pytestmark = pytest.mark.skipif(not compiled_available(), reason="C decoder not built")


def _wire_decode(data: bytes) -> dict[str, Any]:
    from traceinspect.xplane import _wire

    return typed(_wire.decode(data))


def assert_same(a: dict[str, Any], b: dict[str, Any], where: str = "") -> None:
    assert set(a) == set(b), where
    for key, x in a.items():
        y = b[key]
        if isinstance(x, dict):
            assert_same(x, y, f"{where}/{key}")
        elif isinstance(x, list):
            assert x == y, f"{where}/{key}"
        else:
            assert x.dtype == y.dtype, f"{where}/{key}"
            np.testing.assert_array_equal(x, y, err_msg=f"{where}/{key}")


@pytest.mark.parametrize("path", all_traces(), ids=lambda p: p.name)
def test_decoders_agree_on_real_traces(path: Path) -> None:
    data = path.read_bytes()
    assert_same(_wire_decode(data), typed(pydecode.decode(data)))


def _tricky_space() -> Any:
    """Everything the wire format allows that real traces rarely show."""
    xs = X.space()
    xs.hostnames.append(b"host-a")
    xs.errors.append(b"an error")
    p = X.add_plane(xs, "/device:TPU:0")
    p.line(
        "XLA Ops",
        1_000,
        [
            X.Ev("op", 1_500, 2_250, {"flops": 7, "ratio": 0.5, "hlo": "fusion.1"}),
            X.Ev("op", 5_999, 1, {"ref": ("ref", "some-target"), "raw": b"\xff\x00\x01"}),
            X.Ev("neg", -2_500, 1_000, {"big": ("uint", 2**64 - 1)}),
        ],
    )
    # Sparse, hash-like metadata ids (TPU traces use them) and an unknown id.
    md = X.event_metadata(p.plane, 2**61 + 7)
    md.id = 2**61 + 7
    md.name = b"hashed \xc3\xa9 \xff invalid utf8"
    md.display_name = b"display"
    sm = md.stats.add()
    sm.metadata_id = p.stat_id("flops")
    sm.int64_value = 99
    line = p.plane.lines.add()
    line.name = b"agg"
    line.timestamp_ns = 5
    ev = line.events.add()
    ev.metadata_id = 2**61 + 7
    ev.num_occurrences = 12
    ev.duration_ps = 3_000
    st = ev.stats.add()
    st.metadata_id = p.stat_id("flops")
    st.int64_value = 3
    ev2 = line.events.add()
    ev2.metadata_id = 424242  # no such metadata
    ev2.offset_ps = 10
    ps = p.plane.stats.add()
    ps.metadata_id = p.stat_id("device_type_string")
    ps.str_value = b"TPU v6 Lite"
    X.add_plane(xs, "/host:CPU").line("main", 0, [X.Ev("PjitFunction(f)", 0, 10_000)])
    return xs


def test_decoders_agree_on_built_edge_cases() -> None:
    data = _tricky_space().SerializeToString()
    c = _wire_decode(data)
    assert_same(c, typed(pydecode.decode(data)))
    # Aggregated events are kept apart, with their own stats.
    assert c["aggregated"]["occurrences"].tolist() == [12]
    assert c["aggregated_stats"]["int_value"].tolist() == [3]
    # Both ends floored: 1500 ps + 2250 ps from 1000 ns is [1001, 1003) ns; offset -2500 ps
    # with 1000 ps is [997, 998) ns.
    assert c["events"]["start_ns"].tolist()[:3] == [1001, 1005, 997]
    assert c["events"]["duration_ns"].tolist()[:3] == [2, 1, 1]
    # uint64 keeps its bits; ref stats resolve to the referenced name.
    names = c["event_names"]
    assert "hashed é \udcff invalid utf8" in names
    assert "" in names  # the event with an unknown metadata id
    assert "some-target" in c["str_values"]
    assert -1 in c["event_stats"]["int_value"].tolist()


def test_unknown_fields_and_groups_are_skipped() -> None:
    base = X.space()
    X.add_plane(base, "/host:CPU").line("t", 0, [X.Ev("a", 1000, 2000)])
    data = base.SerializeToString()
    # Field 15 as a varint, as a fixed32, and as a group wrapping a varint.
    extra = bytes(
        [15 << 3 | 0, 5, 15 << 3 | 5, 1, 2, 3, 4, 15 << 3 | 3, 1 << 3 | 0, 9, 15 << 3 | 4]
    )
    c = _wire_decode(extra + data)
    p = typed(pydecode.decode(extra + data))
    assert_same(c, p)
    assert c["events"]["start_ns"].tolist() == [1]


def test_repeated_map_key_keeps_last_value() -> None:
    xs = X.space()
    plane = xs.planes.add()
    plane.name = b"p"
    entry1 = b"\x08\x01\x12\x05\x08\x01\x12\x01a"  # key 1 -> name "a"
    entry2 = b"\x08\x01\x12\x05\x08\x01\x12\x01b"  # key 1 -> name "b"
    line = plane.lines.add()
    line.events.add().metadata_id = 1
    raw_plane = plane.SerializeToString() + b"\x22" + bytes([len(entry1)]) + entry1
    raw_plane += b"\x22" + bytes([len(entry2)]) + entry2
    data = b"\x0a" + bytes([len(raw_plane)]) + raw_plane
    c = _wire_decode(data)
    assert_same(c, typed(pydecode.decode(data)))
    assert [c["event_names"][i] for i in c["events"]["name"]] == ["b"]


@pytest.mark.parametrize(
    "data",
    [b"\x0a\x05\x12\x03ab", b"\x0a", b"\x0a\xff", b"\x07", b'{"traceEvents": []}', b"\x0b\x0a"],
    ids=["short-plane", "no-length", "truncated-length", "wire-type-7", "json", "open-group"],
)
def test_malformed_input_raises_value_error_in_both(data: bytes) -> None:
    from traceinspect.xplane import _wire

    with pytest.raises(ValueError, match="malformed"):
        _wire.decode(data)
    with pytest.raises(ValueError, match="malformed"):
        pydecode.decode(data)


def test_progress_is_reported() -> None:
    from traceinspect.xplane import _wire

    seen: list[int] = []
    data = _tricky_space().SerializeToString()
    _wire.decode(data, seen.append)
    assert seen and seen[-1] == len(data)
