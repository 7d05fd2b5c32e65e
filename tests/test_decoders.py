"""The compiled and the protobuf decoders give identical columns, on real and built traces."""

from __future__ import annotations

import mmap
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xspace as X
from traces import all_traces

import traceinspect
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


def _mapped_rss_kib(address: int) -> int:
    """This process's resident KiB of the mapping that holds ``address`` (smaps)."""
    text = Path("/proc/self/smaps").read_text()
    inside = False
    for line in text.splitlines():
        head = line.split(maxsplit=1)[0]
        if "-" in head and ":" not in head:
            lo, hi = (int(x, 16) for x in head.split("-"))
            inside = lo <= address < hi
        elif inside and head == "Rss:":
            return int(line.split()[1])
    raise AssertionError(f"no mapping at {address:#x}")


@pytest.mark.parametrize("path", all_traces(), ids=lambda p: p.name)
def test_released_pages_decode_the_same(path: Path) -> None:
    """Pages dropped behind the event pass (every page here) are read back unchanged:
    interned strings and map entries point into them."""
    from traceinspect.xplane import _wire

    with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
        released = typed(_wire.decode(m, None, release_every=mmap.PAGESIZE))
    assert_same(released, _wire_decode(path.read_bytes()))


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _resident_while_decoding(path: Path, release_every: int) -> tuple[tuple[int, int], int]:
    """(bytes decoded, resident KiB of the mapped file) at the first progress report, and
    the resident KiB once decoding is done."""
    from traceinspect.xplane import _wire

    with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
        address = np.frombuffer(m, np.uint8).ctypes.data
        during: list[tuple[int, int]] = []
        _wire.decode(
            m,
            lambda done: during.append((done, _mapped_rss_kib(address))),
            release_every=release_every,
        )
        return during[0], _mapped_rss_kib(address)


@pytest.mark.skipif(sys.platform != "linux", reason="pages are released on Linux only")
def test_decoded_pages_leave_the_process(tmp_path: Path) -> None:
    """While the event pass runs, the pages behind it are no longer resident; after it,
    none of the file is (every plane decoded)."""
    # One line of 1.2M 8-byte events (metadata_id 1, offset 2, duration 3), written as
    # wire bytes: past the 2**20 events after which the decoder reports progress.
    line = b"\x08\x01" + b"\x22\x06\x08\x01\x10\x02\x18\x03" * 1_200_000
    plane = b"\x1a" + _varint(len(line)) + line
    path = tmp_path / "big.xplane.pb"
    path.write_bytes(b"\x0a" + _varint(len(plane)) + plane)
    size_kib = path.stat().st_size // 1024
    every = 256 << 10
    for release in (0, every):
        (done, rss), after = _resident_while_decoding(path, release)
        assert 0 < done < size_kib * 1024
        if release:
            # What is left: the file ahead of the pass, and at most `every` behind it.
            assert rss <= size_kib - done // 1024 + every // 1024 + 8, (done, rss)
            assert after <= 8
        else:
            assert rss >= size_kib and after >= size_kib


def test_release_needs_a_read_only_mapping(tmp_path: Path) -> None:
    """Dropped pages of the process's own memory would read back as zeros."""
    from traceinspect.xplane import _wire

    data = _tricky_space().SerializeToString()
    (tmp_path / "t.pb").write_bytes(data)
    with (tmp_path / "t.pb").open("r+b") as fh:
        writable = mmap.mmap(fh.fileno(), 0)
        for bad in (data, bytearray(data), memoryview(data), writable):
            with pytest.raises(ValueError, match="read-only mmap"):
                _wire.decode(bad, None, release_every=4096)
        writable.close()
    with pytest.raises(ValueError, match="read-only mmap"):
        _wire.decode(data, None, release_every=-1)


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
    assert "hashed é \\xff invalid utf8" in names  # names: \\xNN for bytes not UTF-8
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


@pytest.mark.parametrize("path", all_traces(), ids=lambda p: p.name)
def test_decoding_without_the_gil_gives_the_same_columns(path: Path) -> None:
    """``release_gil``: every string is made after the parse, from the same bytes."""
    from traceinspect.xplane import _wire

    with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
        free = typed(_wire.decode(m, None, release_every=mmap.PAGESIZE, release_gil=True))
    assert_same(free, _wire_decode(path.read_bytes()))


def _python_runs_during_decode(data: bytes, release_gil: bool) -> bool:
    """Whether another thread ran Python in the middle half of one decode of ``data``."""
    import threading
    import time

    from traceinspect.xplane import _wire

    done = threading.Event()
    ticks: list[float] = []

    def count() -> None:
        while not done.is_set():
            ticks.append(time.perf_counter())

    counter = threading.Thread(target=count)
    counter.start()
    try:
        t0 = time.perf_counter()
        _wire.decode(data, release_gil=release_gil)
        t1 = time.perf_counter()
    finally:
        done.set()
        counter.join()
    quarter = (t1 - t0) / 4
    return any(t0 + quarter < t < t1 - quarter for t in ticks)


def test_decoding_without_the_gil_lets_python_run() -> None:
    """While one thread decodes without the GIL, another runs Python (with the GIL held,
    a thread switch can only happen before or after the call)."""
    # Repeated XSpace fields are one XSpace (its planes, several times over).
    data = _tricky_space().SerializeToString() * 20_000
    assert _python_runs_during_decode(data, release_gil=True)
    assert not _python_runs_during_decode(data, release_gil=False)


@pytest.mark.parametrize(
    "data",
    [b"\x0a\x05\x12\x03ab", b"\x0a\xff", b"\x07", b"\x0b\x0a"],
    ids=["short-plane", "truncated-length", "wire-type-7", "open-group"],
)
def test_malformed_input_raises_without_the_gil_too(data: bytes) -> None:
    from traceinspect.xplane import _wire

    with pytest.raises(ValueError, match="malformed"):
        _wire.decode(data, release_gil=True)


def test_release_gil_refuses_a_progress_callback_and_writable_data() -> None:
    from traceinspect.xplane import _wire

    data = _tricky_space().SerializeToString()
    with pytest.raises(ValueError, match="no progress"):
        _wire.decode(data, print, release_gil=True)
    with pytest.raises(ValueError, match="read-only"):
        _wire.decode(bytearray(data), release_gil=True)


# --- inputs the two decoders once read differently (issue 34) ---------------------------


def _ld(tag: int, payload: bytes) -> bytes:
    return bytes([tag]) + _varint(len(payload)) + payload


def _one_event(timestamp_ns: int, offset_ps: int, duration_ps: int) -> bytes:
    xs = X.space()
    X.add_plane(xs, "/host:CPU").line("t", timestamp_ns, [X.Ev("a", offset_ps, duration_ps)])
    return bytes(xs.SerializeToString())


def _both(data: bytes) -> tuple[Any, Any]:
    """Each decoder's columns, or the ValueError it raised."""
    from traceinspect.xplane import _wire

    out: list[Any] = []
    for decode in (_wire.decode, pydecode.decode):
        try:
            out.append(typed(decode(data)))
        except ValueError as exc:
            out.append(exc)
    return out[0], out[1]


def test_offset_plus_duration_past_int64_picoseconds_is_exact() -> None:
    # 9.0e18 + 9.0e18 ps overflows int64; the end, 1.8e16 ns, does not (C gave -9.2e9 ms).
    c, p = _both(_one_event(1_000, 9 * 10**18, 9 * 10**18 + 999))
    assert_same(c, p)
    assert c["events"]["start_ns"].tolist() == [1_000 + 9 * 10**15]
    assert c["events"]["duration_ns"].tolist() == [9 * 10**15]
    assert c["lines"]["last_end_ns"].tolist() == [1_000 + 18 * 10**15]


@pytest.mark.parametrize(
    ("timestamp_ns", "offset_ps", "duration_ps"),
    [
        (2**63 - 1_000, 2 * 10**6, 0),  # the start past int64 (C wrapped to 1970)
        (2**63 - 10**6, 0, 2 * 10**9),  # the end past it
        (-(2**63) + 1_000, -(2 * 10**6), 0),  # the start before it
    ],
    ids=["start", "end", "negative-start"],
)
def test_times_past_int64_nanoseconds_are_refused_by_both(
    timestamp_ns: int, offset_ps: int, duration_ps: int
) -> None:
    c, p = _both(_one_event(timestamp_ns, offset_ps, duration_ps))
    assert isinstance(c, ValueError) and isinstance(p, ValueError)
    assert str(c) == str(p) == pydecode.OUT_OF_RANGE


def _groups(n: int, field: int = 15) -> bytes:
    return bytes([field << 3 | 3]) * n + bytes([field << 3 | 4]) * n


# Where unknown groups sit: each wraps them in the messages above (plane, line, event...).
_NESTING: dict[str, Callable[[bytes], bytes]] = {
    "space": lambda g: g,
    "plane": lambda g: _ld(0x0A, g),
    "line": lambda g: _ld(0x0A, _ld(0x1A, g)),
    "event": lambda g: _ld(0x0A, _ld(0x1A, _ld(0x22, g))),
    "event-stat": lambda g: _ld(0x0A, _ld(0x1A, _ld(0x22, _ld(0x22, g)))),
    "plane-stat": lambda g: _ld(0x0A, _ld(0x32, g)),
    "metadata-entry": lambda g: _ld(0x0A, _ld(0x22, g)),
    "metadata": lambda g: _ld(0x0A, _ld(0x22, b"\x08\x01" + _ld(0x12, g))),
    "metadata-stat": lambda g: _ld(0x0A, _ld(0x22, b"\x08\x01" + _ld(0x12, _ld(0x2A, g)))),
    "stat-metadata": lambda g: _ld(0x0A, _ld(0x2A, b"\x08\x01" + _ld(0x12, g))),
}
# The message depth of each place (the XSpace is 0): protobuf's limit of 100 counts it.
_DEPTH = {"space": 0, "plane": 1, "line": 2, "event": 3, "event-stat": 4, "plane-stat": 2}
_DEPTH |= {"metadata-entry": 2, "metadata": 3, "metadata-stat": 4, "stat-metadata": 3}


@pytest.mark.parametrize("where", list(_NESTING))
def test_deeply_nested_unknown_groups_read_alike(where: str) -> None:
    deepest = 100 - _DEPTH[where]  # groups that still fit (C refused past 64 anywhere)
    for n in (65, 66, deepest - 1, deepest, deepest + 1, deepest + 40):
        c, p = _both(_NESTING[where](_groups(n)))
        if n <= deepest:
            assert_same(c, p, f"{where} {n}")
        else:
            assert isinstance(c, ValueError) and isinstance(p, ValueError), f"{where} {n}"
            assert "malformed" in str(c) and "malformed" in str(p)


@pytest.mark.parametrize("first", [b"\x12\x05ab", b"\x2a\x03\x08", b"\x0b"])
def test_map_value_given_twice_with_the_first_corrupt_is_refused_by_both(first: bytes) -> None:
    # An event metadata entry: key 1, a corrupt value, then a good one (C kept the last).
    entry = b"\x08\x01" + _ld(0x12, first) + _ld(0x12, b"\x12\x01a")
    plane = _ld(0x22, entry) + _ld(0x1A, _ld(0x22, b"\x08\x01"))
    c, p = _both(_ld(0x0A, plane))
    assert isinstance(c, ValueError) and isinstance(p, ValueError)
    assert "malformed" in str(c) and "malformed" in str(p)


def test_map_value_given_twice_is_merged_by_both() -> None:
    # Protobuf merges a message field given twice: the name of the first, the display name
    # of the second, the stats of both (C kept only the second value).
    first = b"\x12\x01a" + _ld(0x2A, b"\x08\x01\x20\x07")
    second = b"\x22\x01d" + _ld(0x2A, b"\x08\x01\x20\x08")
    for repeats in (2, 3):
        values = [first, second, second][:repeats]
        entry = b"\x08\x01" + b"".join(_ld(0x12, v) for v in values)
        plane = _ld(0x22, entry) + _ld(0x1A, _ld(0x22, b"\x08\x01"))
        c, p = _both(_ld(0x0A, plane))
        assert_same(c, p)
        assert c["event_names"] == ["a"] and c["metadata_display_names"] == ["d"]
        assert c["metadata_stats"]["int_value"].tolist() == [7, 8, 8][:repeats]


def test_a_name_spelling_out_bytes_that_are_not_utf8_stays_apart(tmp_path: Path) -> None:
    # b"a\xff" reads as the text "a\\xff", which another name may hold literally.
    xs = X.space()
    plane = X.add_plane(xs, "/host:CPU")
    plane.line("t", 0, [X.Ev("a\\xff", 0, 10), X.Ev("b", 20, 10)])
    X.event_metadata(plane.plane, plane.event_id("b")).name = b"a\xff"
    path = X.write(xs, tmp_path / "t.xplane.pb")
    names = []
    for decoder in ("c", "python"):
        trace = traceinspect.load(path, decoder=decoder, use_cache=False)
        names.append(trace.events["name"].astype(str).tolist())
    assert names[0] == names[1] == ["a\\xff", "a\\xff #2"]
