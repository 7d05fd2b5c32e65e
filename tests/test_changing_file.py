"""A trace that changes while it is read: a one-line error or the old content, never a signal.

The compiled decoder reads its input twice (an index pass counting events, then a fill
pass writing them into columns sized by that count); the reader holds the file in the
process's own memory, with size and time stamps compared around the read.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import xspace as X
from test_decoders import assert_same
from traces import DECODERS

import traceinspect
from traceinspect.errors import TraceDecodeError
from traceinspect.xplane import reader
from traceinspect.xplane.raw import typed
from traceinspect.xplane.reader import CHANGED, compiled_available


def _space(per_line: list[int], pad: int = 0) -> bytes:
    """One plane (its name padded by ``pad`` bytes) with ``per_line[k]`` events in line k."""
    xs = X.space()
    plane = X.add_plane(xs, "/host:CPU" + "_" * pad)
    for k, events in enumerate(per_line):
        plane.line(f"l{k}", 1000, [X.Ev("op", 10 * i, 5) for i in range(events)])
    return bytes(xs.SerializeToString())


def _same_size(before: list[int], after: list[int]) -> tuple[bytes, bytes]:
    """Two traces of the same size (their plane too, so that the decoder's first pass over
    the file finds the plane of the second at the same place): the smaller one padded."""
    a, b = _space(before), _space(after)
    short, other = (before, b) if len(a) <= len(b) else (after, a)
    gap = abs(len(a) - len(b))
    for pad in range(max(0, gap - 8), gap + 8):  # the name's length varint may grow
        padded = _space(short, pad=pad)
        if len(padded) == len(other):
            return (padded, b) if short is before else (a, padded)
    raise AssertionError("no padding gives the same size")


# events per line before -> after the change
CHANGES = {
    "more-events": ([4, 4], [12, 12]),
    "fewer-events": ([12, 12], [4, 4]),
    "more-lines": ([4, 4], [4, 4, 4, 4]),
    "events-moved-between-lines": ([8, 8], [9, 7]),
}


@pytest.mark.skipif(not compiled_available(), reason="C decoder not built")
@pytest.mark.parametrize("change", list(CHANGES))
def test_c_decoder_refuses_input_rewritten_between_its_passes(change: str) -> None:
    from traceinspect.xplane import _wire

    first, second = _same_size(*CHANGES[change])
    buf = bytearray(first)

    def rewrite() -> None:
        buf[:] = second

    with pytest.raises(ValueError) as info:
        _wire.decode(buf, between_passes=rewrite)
    assert str(info.value) == CHANGED
    # Unchanged, the same input decodes as usual: the hook alone changes nothing.
    assert_same(
        typed(_wire.decode(bytearray(first), between_passes=lambda: None)),
        typed(_wire.decode(first)),
    )


def _change_during_read(monkeypatch: pytest.MonkeyPatch, path: Path, new: bytes | None) -> None:
    """Rewrite (``new``) or truncate (None) ``path`` right after the reader's first look at
    it, before it reads the bytes."""
    real_fstat = os.fstat
    calls = []

    def fstat(fd: int) -> os.stat_result:
        st = real_fstat(fd)
        calls.append(fd)
        if len(calls) == 1:
            with path.open("r+b") as fh:
                if new is None:
                    fh.truncate(st.st_size // 2)
                else:
                    fh.write(new)
        return st

    monkeypatch.setattr(os, "fstat", fstat)


@pytest.mark.parametrize("decoder", DECODERS)
@pytest.mark.parametrize("how", ["rewritten", "truncated"])
def test_a_file_changed_while_read_gives_one_line_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, decoder: str, how: str
) -> None:
    first, second = _same_size([4, 4], [12, 12])
    path = tmp_path / "live.xplane.pb"
    path.write_bytes(first)
    _change_during_read(monkeypatch, path, second if how == "rewritten" else None)
    with pytest.raises(TraceDecodeError) as info:
        traceinspect.load(path, decoder=decoder, use_cache=False)  # type: ignore[arg-type]
    assert str(info.value) == f"{path}: {CHANGED}."


@pytest.mark.skipif(not compiled_available(), reason="C decoder not built")
@pytest.mark.parametrize("how", ["rewritten", "truncated"])
def test_a_mapped_file_changed_between_the_passes_gives_one_line_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """The compiled decoder reads the file mapped: truncated between its passes, the fill
    pass meets pages past the file's end (SIGBUS); rewritten, more events than it counted."""
    first, second = _same_size([400, 400], [1200, 1200])
    path = tmp_path / "live.xplane.pb"
    path.write_bytes(first)
    real = reader._compiled_decode
    assert real is not None

    def change() -> None:
        with path.open("r+b") as fh:
            if how == "truncated":
                fh.truncate(10)
            else:
                fh.write(second)

    def decode(data: Any, *args: Any, **kwargs: Any) -> Any:
        return real(data, *args, between_passes=change, **kwargs)

    monkeypatch.setattr(reader, "_compiled_decode", decode)
    with pytest.raises(TraceDecodeError) as info:
        traceinspect.load(path, decoder="c", use_cache=False)
    assert str(info.value) == f"{path}: {CHANGED}."


@pytest.mark.skipif(not compiled_available(), reason="C decoder not built")
def test_sigbus_reading_a_mapping_is_the_decoders_error(tmp_path: Path) -> None:
    """Pages past the end of a truncated file, read by the decoder: its ValueError, not a
    signal (faulthandler, on under pytest, stays in place for any other SIGBUS)."""
    import faulthandler
    import mmap

    from traceinspect.xplane import _wire

    first = _space([2000, 2000])
    assert len(first) > 3 * mmap.PAGESIZE
    path = tmp_path / "t.xplane.pb"
    path.write_bytes(first)
    assert faulthandler.is_enabled()
    with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        with pytest.raises(ValueError) as info:
            # Cut at a page: the pages after it raise SIGBUS when the fill pass reads them.
            _wire.decode(mapped, between_passes=lambda: os.truncate(path, mmap.PAGESIZE))
        assert str(info.value) == CHANGED
        with pytest.raises(ValueError, match="changed while it was read"):
            _wire.decode(mapped, release_every=4096)  # every page past the end at once
    path.write_bytes(first)
    with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        assert_same(typed(_wire.decode(mapped)), typed(_wire.decode(first)))


@pytest.mark.skipif(not compiled_available(), reason="C decoder not built")
def test_a_file_truncated_while_decoded_on_another_thread(tmp_path: Path) -> None:
    """The decoder without the GIL on a thread (as ``analyze`` reads), the file cut at 24
    delays across its decoding: each time the columns or a one-line error, never a
    signal."""
    import threading
    import time

    from traces import SAMPLES

    from traceinspect.xplane.locate import locate

    # XSpaces concatenated are one XSpace (its planes repeated): ~23 MB, ~40 ms to decode.
    data = max(SAMPLES, key=lambda p: p.stat().st_size).read_bytes() * 8
    path = tmp_path / "live.xplane.pb"
    path.write_bytes(data)
    (host,) = locate(path).run.files

    def read(into: list[object]) -> None:
        try:
            into.append(reader.decode_file(host, "c", release_gil=True))
        except TraceDecodeError as exc:
            into.append(exc)

    whole = reader.decode_file(host, "c")  # and numpy imported: the next one is timed
    started = time.perf_counter()
    reader.decode_file(host, "c")
    took = time.perf_counter() - started
    outcomes = []
    for k in range(24):
        path.write_bytes(data)
        done: list[object] = []
        reading = threading.Thread(target=read, args=(done,))
        reading.start()
        time.sleep(took * k / 16)
        os.truncate(path, len(data) // 3)
        reading.join()
        (outcome,) = done
        if isinstance(outcome, TraceDecodeError):
            # Cut before the reader first looked: a truncated file, nothing changed since.
            truncated = str(outcome).startswith(f"{path}: not a readable XPlane trace")
            assert truncated or str(outcome) == f"{path}: {CHANGED}."
            outcomes.append("truncated" if truncated else "changed")
        else:
            assert_same(outcome, whole)  # type: ignore[arg-type]
            outcomes.append("read")
    assert set(outcomes) - {"read"}, outcomes
