"""The decoded-columns cache: hits on the second open, misses on change, survives damage."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from traces import SAMPLES

import traceinspect
from traceinspect import schema as S
from traceinspect.xplane import cache


@pytest.fixture
def sample(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(cache, "MIN_BYTES", 0)
    monkeypatch.setattr(cache, "MIN_DECODE_SECONDS", 0.0)
    path = tmp_path / "h.xplane.pb"
    shutil.copyfile(SAMPLES[0], path)
    return path


def _same(a: traceinspect.Trace, b: traceinspect.Trace) -> None:
    for name in ("events", "event_stats", "lines", "planes", "event_metadata", "plane_stats"):
        left, right = getattr(a, name), getattr(b, name)
        assert left.shape == right.shape, name
        assert left.astype(str).equals(right.astype(str)), name


def test_second_open_hits_the_cache(sample: Path) -> None:
    first = traceinspect.load(sample)
    second = traceinspect.load(sample)
    assert first.load_info.cached_files == 0
    assert second.load_info.cached_files == 1
    _same(first, second)


def test_changed_file_misses(sample: Path) -> None:
    traceinspect.load(sample)
    shutil.copyfile(SAMPLES[1], sample)
    st = sample.stat()
    os.utime(sample, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    again = traceinspect.load(sample)
    assert again.load_info.cached_files == 0
    assert again.event_count == traceinspect.load(SAMPLES[1], use_cache=False).event_count


@pytest.mark.parametrize(
    "damage",
    [
        "truncate-array",
        "bad-manifest",
        "missing-array",
        "list-manifest",
        "null-manifest",
        "wrong-values",
    ],
)
def test_corrupt_cache_is_a_miss(sample: Path, damage: str) -> None:
    first = traceinspect.load(sample)
    (entry,) = [p for p in cache.cache_dir().iterdir() if p.is_dir()]
    target = entry / "events.start_ns.npy"
    if damage == "truncate-array":
        target.write_bytes(target.read_bytes()[:100])
    elif damage == "bad-manifest":
        (entry / "manifest.json").write_text("{not json")
    elif damage in ("list-manifest", "null-manifest"):
        (entry / "manifest.json").write_text("[]" if damage == "list-manifest" else "null")
    elif damage == "wrong-values":
        # The right dtype and length, other values (once used as is: "no device activity").
        data = bytearray(target.read_bytes())
        data[-8:] = bytes(8)
        data[-16:-8] = b"\xff" * 8
        target.write_bytes(bytes(data))
    else:
        target.unlink()
    again = traceinspect.load(sample)
    assert again.load_info.cached_files == 0
    _same(first, again)
    assert traceinspect.load(sample).load_info.cached_files == 1  # rewritten


def test_use_cache_false_neither_reads_nor_writes(sample: Path) -> None:
    traceinspect.load(sample, use_cache=False)
    assert not cache.cache_dir().exists() or not any(cache.cache_dir().iterdir())


def test_small_or_fast_files_are_not_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    traceinspect.load(SAMPLES[0])
    assert SAMPLES[0].stat().st_size < cache.MIN_BYTES
    assert not cache.cache_dir().exists() or not any(cache.cache_dir().iterdir())
    monkeypatch.setattr(cache, "MIN_BYTES", 0)
    traceinspect.load(SAMPLES[0])  # large enough now, but decoded in well under 0.3 s
    assert not cache.cache_dir().exists() or not any(cache.cache_dir().iterdir())


def test_cached_frames_are_usable(sample: Path) -> None:
    traceinspect.load(sample)
    trace = traceinspect.load(sample)
    ev = trace.events
    assert (ev[S.START_NS] + ev[S.DURATION_NS] >= ev[S.START_NS]).all()
    assert len(trace.with_stats(trace.select(name="train"))) > 0


@pytest.mark.parametrize("copy", ["cp -p", "rsync -t"])
def test_another_file_of_the_same_size_and_mtime_misses(sample: Path, copy: str) -> None:
    from traceinspect.xplane.locate import locate

    traceinspect.load(sample)
    st = sample.stat()
    other = SAMPLES[1].read_bytes()
    other = (other * (st.st_size // len(other) + 1))[: st.st_size]
    if copy == "cp -p":  # written over in place: the same inode
        with sample.open("r+b") as fh:
            fh.write(other)
    else:  # another file renamed over it
        new = sample.with_name(".new")
        new.write_bytes(other)
        new.replace(sample)
    os.utime(sample, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (sample.stat().st_size, sample.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    assert cache.load(locate(sample).run.files[0]) is None


def test_the_identity_reads_the_ends_of_a_file(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(bytes(300_000))
    before = cache.local_identity(path)
    with path.open("r+b") as fh:  # a byte in the middle: not read (size and times tell)
        fh.seek(150_000)
        fh.write(b"x")
    middle = cache.local_identity(path)
    assert middle["edges"] == before["edges"] and middle["ctime_ns"] >= before["ctime_ns"]
    with path.open("r+b") as fh:
        fh.seek(299_999)
        fh.write(b"x")
    assert cache.local_identity(path)["edges"] != before["edges"]
