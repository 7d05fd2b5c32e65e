"""load(): files, run directories, log directories, gzip, and every kind of bad input."""

from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import xspace as X
from traces import SAMPLES

import traceinspect
from traceinspect import schema as S
from traceinspect.errors import (
    AmbiguousRunError,
    EmptyTraceError,
    TraceDecodeError,
    TraceNotFoundError,
)
from traceinspect.xplane.reader import compiled_available

SAMPLE = SAMPLES[0]


def _run(logdir: Path, name: str, hosts: dict[str, Path], mtime: int | None = None) -> Path:
    run = logdir / "plugins" / "profile" / name
    run.mkdir(parents=True)
    for host, src in hosts.items():
        dst = run / f"{host}.xplane.pb"
        shutil.copyfile(src, dst)
        if mtime is not None:
            os.utime(dst, ns=(mtime, mtime))
    return run


def test_single_file_host_from_file_name(decoder: str) -> None:
    trace = traceinspect.load(SAMPLE, decoder=decoder)  # type: ignore[arg-type]
    assert trace.hosts == [SAMPLE.name.removesuffix(".xplane.pb")]
    S.check_events(trace.events)
    assert trace.event_count == len(trace.events) > 1000
    assert trace.load_info.decoder == decoder


def test_gzip_file_gives_the_same_frames(tmp_path: Path) -> None:
    gz = tmp_path / "h.xplane.pb.gz"
    gz.write_bytes(gzip.compress(SAMPLE.read_bytes()))
    a = traceinspect.load(SAMPLE).events
    b = traceinspect.load(gz).events
    assert b[S.START_NS].tolist() == a[S.START_NS].tolist()
    assert b[S.NAME].astype(str).tolist() == a[S.NAME].astype(str).tolist()


def test_logdir_picks_newest_run_and_run_selects(tmp_path: Path) -> None:
    old = _run(tmp_path, "2026_01_01_00_00_00", {"h": SAMPLES[0]}, mtime=1_000_000_000)
    new = _run(tmp_path, "2026_01_02_00_00_00", {"h": SAMPLES[1]}, mtime=2_000_000_000)
    trace = traceinspect.load(tmp_path)
    assert trace.located.run.path == new
    assert trace.located.chose_newest
    assert [r.name for r in trace.located.all_runs] == [
        "plugins/profile/2026_01_01_00_00_00",
        "plugins/profile/2026_01_02_00_00_00",
    ]
    picked = traceinspect.load(tmp_path, run="2026_01_01_00_00_00")
    assert picked.located.run.path == old
    assert picked.event_count == traceinspect.load(SAMPLES[0]).event_count
    with pytest.raises(AmbiguousRunError, match=r"no run named 'nope'.*2026_01_02"):
        traceinspect.load(tmp_path, run="nope")


def test_runs_from_several_profile_dirs_are_ambiguous(tmp_path: Path) -> None:
    _run(tmp_path / "train", "r1", {"h": SAMPLE})
    _run(tmp_path / "eval", "r1", {"h": SAMPLE})
    with pytest.raises(AmbiguousRunError, match="choose one with --run"):
        traceinspect.load(tmp_path)
    trace = traceinspect.load(tmp_path, run="eval/plugins/profile/r1")
    assert trace.run_name == "eval/plugins/profile/r1"
    with pytest.raises(AmbiguousRunError, match=r"2 runs are named 'r1'"):
        traceinspect.load(tmp_path, run="r1")


def test_run_directory_with_several_hosts_merges_them(tmp_path: Path) -> None:
    run = _run(tmp_path, "r", {"host-a": SAMPLES[0], "host-b": SAMPLES[1]})
    trace = traceinspect.load(run)
    a, b = traceinspect.load(SAMPLES[0]), traceinspect.load(SAMPLES[1])
    assert trace.hosts == ["host-a", "host-b"]
    assert trace.event_count == a.event_count + b.event_count
    ev = trace.events
    counts = ev[S.HOST].astype(str).value_counts()
    assert counts["host-a"] == a.event_count and counts["host-b"] == b.event_count
    # Row numbers stay consistent across hosts: every event's line belongs to its host.
    line_hosts = trace.lines[S.HOST].astype(str).to_numpy()[ev[S.LINE_ROW].to_numpy()]
    assert (line_hosts == ev[S.HOST].astype(str).to_numpy()).all()
    # Stats of host-b's events point at host-b rows with the same names as when alone.
    b_stats = trace.event_stats[trace.event_stats[S.EVENT_ROW] >= a.event_count]
    assert len(b_stats) == len(b.event_stats)
    assert b_stats[S.STAT].astype(str).tolist() == b.event_stats[S.STAT].astype(str).tolist()
    assert (b_stats[S.EVENT_ROW] - a.event_count).tolist() == b.event_stats[S.EVENT_ROW].tolist()


def test_missing_path() -> None:
    with pytest.raises(TraceNotFoundError, match=r"no-such\.xplane\.pb: no such file"):
        traceinspect.load("no-such.xplane.pb")


def test_directory_without_traces(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(TraceNotFoundError, match=r"no \*\.xplane\.pb file"):
        traceinspect.load(tmp_path)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "the file is empty"),
        (b'{"traceEvents": []}', "looks like JSON"),
        (b"hello, this is plain text\n", "not a readable XPlane trace"),
        (bytes(range(256)) * 4, "not a readable XPlane trace"),
    ],
    ids=["empty", "json", "text", "random"],
)
def test_unreadable_files(tmp_path: Path, content: bytes, message: str, decoder: str) -> None:
    path = tmp_path / "bad.xplane.pb"
    path.write_bytes(content)
    with pytest.raises(TraceDecodeError, match=message) as info:
        traceinspect.load(path, decoder=decoder)  # type: ignore[arg-type]
    assert str(path) in str(info.value)
    assert "\n" not in str(info.value)


def test_truncated_file(tmp_path: Path, decoder: str) -> None:
    data = SAMPLE.read_bytes()
    path = tmp_path / "cut.xplane.pb"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceDecodeError, match=r"cut\.xplane\.pb: not a readable XPlane trace"):
        traceinspect.load(path, decoder=decoder)  # type: ignore[arg-type]


def test_truncated_gzip(tmp_path: Path) -> None:
    data = gzip.compress(SAMPLE.read_bytes())
    path = tmp_path / "cut.xplane.pb.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceDecodeError, match="gzip stream is truncated"):
        traceinspect.load(path)


def test_trace_with_zero_events(tmp_path: Path, decoder: str) -> None:
    xs = X.space()
    X.add_plane(xs, "/host:CPU").line("python", 0, [])
    path = X.write(xs, tmp_path / "empty.xplane.pb")
    with pytest.raises(EmptyTraceError, match=r"empty\.xplane\.pb: the trace holds no events"):
        traceinspect.load(path, decoder=decoder)  # type: ignore[arg-type]


@pytest.mark.parametrize("decoder", ["c", "python"])
def test_loading_in_the_background_gives_the_same_trace(tmp_path: Path, decoder: str) -> None:
    """``load_in_background`` reads what ``load`` reads (here: two hosts, one gzipped)."""
    from traceinspect.loading import load_in_background

    host_b = tmp_path / "b.xplane.pb.gz"
    host_b.write_bytes(gzip.compress(SAMPLES[1].read_bytes()))
    run = _run(tmp_path / "logs", "r1", {"a": SAMPLE, "b": host_b})
    loading = load_in_background(run, decoder=decoder, use_cache=False)  # type: ignore[arg-type]
    background = loading.result()
    here = traceinspect.load(run, decoder=decoder, use_cache=False)  # type: ignore[arg-type]
    assert background.hosts == here.hosts == ["a", "b"]
    assert background.load_info.decoder == decoder
    a, b = background.columns, here.columns
    for table in ("planes", "lines", "events", "aggregated", "metadata"):
        for name, column in getattr(a, table).items():
            np.testing.assert_array_equal(column, getattr(b, table)[name], err_msg=name)
    for sink, columns in a.stats.items():
        for name, column in columns.items():
            np.testing.assert_array_equal(column, b.stats[sink][name], err_msg=sink)
    assert (a.event_names, a.stat_names, a.str_values) == (
        b.event_names,
        b.stat_names,
        b.str_values,
    )


def test_loading_in_the_background_raises_in_the_callers_thread(tmp_path: Path) -> None:
    from traceinspect.loading import load_in_background

    with pytest.raises(TraceNotFoundError):
        load_in_background(tmp_path / "missing.xplane.pb")
    bad = tmp_path / "bad.xplane.pb"
    bad.write_bytes(SAMPLE.read_bytes()[:1000])
    loading = load_in_background(bad, use_cache=False)
    with pytest.raises(TraceDecodeError, match=r"bad\.xplane\.pb"):
        loading.result()


@pytest.mark.skipif(not compiled_available(), reason="C decoder not built")
@pytest.mark.parametrize(
    ("env", "flag", "used"),
    [
        ("python", None, "python"),
        ("c", None, "c"),
        ("python", "c", "c"),
        ("python", "auto", "python"),
    ],
)
def test_the_decoder_setting_is_honoured_by_the_cli_too(
    monkeypatch: pytest.MonkeyPatch, env: str, flag: str | None, used: str
) -> None:
    from click.testing import CliRunner

    from traceinspect.cli import main

    monkeypatch.setenv("TRACEINSPECT_DECODER", env)
    args = ["info", str(SAMPLES[0]), "--no-cache", *(["--decoder", flag] if flag else [])]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert f"({used} decoder)" in result.stdout
    # The library the same way: None and "auto" defer to the environment.
    trace = traceinspect.load(SAMPLES[0], use_cache=False, decoder=flag)  # type: ignore[arg-type]
    assert trace.load_info.decoder == used


def test_a_gzip_bomb_stops_at_the_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from traceinspect.xplane import reader

    monkeypatch.setattr(reader, "INFLATE_FLOOR", 1 << 20)
    bomb = tmp_path / "bomb.xplane.pb.gz"
    bomb.write_bytes(gzip.compress(bytes(8 << 20), compresslevel=9))  # 8 MiB of zeros
    with pytest.raises(TraceDecodeError) as info:
        traceinspect.load(bomb, use_cache=False)
    message = str(info.value)
    assert message.startswith(f"{bomb}: the gzip stream inflates past 1 MiB from 0.0 MiB")
    assert "\n" not in message
    # A real trace is far from the ratio: with no floor at all it still reads.
    monkeypatch.setattr(reader, "INFLATE_FLOOR", 0)
    real = tmp_path / "real.xplane.pb.gz"
    real.write_bytes(gzip.compress(SAMPLE.read_bytes(), compresslevel=9))
    assert (
        traceinspect.load(real, use_cache=False).event_count
        == traceinspect.load(SAMPLE, use_cache=False).event_count
    )
