"""The analysis cache: a second `analyze` of an unchanged trace reads the stored result and
prints exactly what a fresh analysis prints; a changed trace or sidecar, `--no-cache` and a
damaged entry all mean a fresh analysis."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import traceinspect.loading
import traceinspect.trace
import traceinspect.xplane.reader
from traceinspect.analysis.analyze import analyze
from traceinspect.analysis.result_record import analysis_from_record, analysis_record
from traceinspect.cli import main
from traceinspect.report.analyze import render_analysis
from traceinspect.xplane.cache import cache_dir

REPO = Path(__file__).resolve().parents[1]
MANIFEST = json.loads((REPO / "sample_traces" / "manifest.json").read_text(encoding="utf-8"))
# The bundled traces that analyse as one host.
SINGLE = [
    e["path"] for e in MANIFEST["traces"] if "error" not in e and not e["path"].startswith("pod/")
]


@pytest.mark.parametrize("path", SINGLE)
def test_a_record_reads_back_as_the_same_analysis(path: str) -> None:
    a = analyze(traceinspect.trace.load(REPO / "sample_traces" / path, use_cache=False))
    record, arrays = analysis_record(a)
    b = analysis_from_record(json.loads(json.dumps(record)), arrays)
    assert json.dumps(b.to_dict(max_gaps=None)) == json.dumps(a.to_dict(max_gaps=None))
    assert render_analysis(b, top_gaps=50) == render_analysis(a, top_gaps=50)
    pd.testing.assert_frame_equal(b.per_step, a.per_step)
    pd.testing.assert_frame_equal(b.gaps, a.gaps)
    assert a.timeline is not None and b.timeline is not None
    for mine, theirs in (
        (a.timeline.busy, b.timeline.busy),
        (a.timeline.thread, b.timeline.thread),
    ):
        assert list(mine) == list(theirs)
        for key, iv in mine.items():
            assert (iv.starts == theirs[key].starts).all() and (iv.ends == theirs[key].ends).all()


@pytest.fixture
def run(tmp_path: Path) -> Path:
    """A copy of a bundled capture with its sidecar (sync every step)."""
    dest = tmp_path / "run"
    shutil.copytree(REPO / "sample_traces" / "scenarios" / "sync_bound", dest)
    return dest


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every trace the CLI reads (a cached analysis reads none), on the caller's thread
    (``traceinspect.load``) or in the background (``traceinspect.loading``)."""
    seen: list[str] = []
    real: Callable[..., Any] = traceinspect.xplane.reader.read_run

    def counting(located: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(str(located.requested))
        return real(located, *args, **kwargs)

    monkeypatch.setattr(traceinspect.trace, "read_run", counting)
    monkeypatch.setattr(traceinspect.loading, "read_run", counting)
    return seen


def _analyze(*args: str) -> str:
    result = CliRunner().invoke(main, ["analyze", *args])
    assert result.exit_code == 0, result.output
    return result.stdout


def test_the_second_analyze_reads_the_stored_result(run: Path, loads: list[str]) -> None:
    for args in ([str(run), "--json"], [str(run)]):
        first = _analyze(*args)
        second = _analyze(*args)
        assert second == first
        assert second == _analyze(*args, "--no-cache")
    # Read for the first run and for each --no-cache one; the text reuses the JSON's analysis.
    assert len(loads) == 3
    assert len(list(cache_dir().glob("*.analysis.npz"))) == 1


def test_no_cache_neither_reads_nor_writes(run: Path, loads: list[str]) -> None:
    _analyze(str(run), "--json", "--no-cache")
    _analyze(str(run), "--json", "--no-cache")
    assert len(loads) == 2
    assert not list(cache_dir().glob("*.analysis.npz"))


def test_the_path_printed_is_the_one_asked_for(
    run: Path, loads: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    absolute = json.loads(_analyze(str(run), "--json"))
    monkeypatch.chdir(run.parent)
    relative = json.loads(_analyze("run", "--json"))
    assert len(loads) == 1  # the same trace: one analysis
    assert (absolute["path"], relative["path"]) == (str(run), "run")
    assert {**absolute, "path": None} == {**relative, "path": None}


def _later(path: Path) -> None:
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


@pytest.mark.parametrize("changed", ["vm.xplane.pb", "traceinspect.capture.json"])
def test_a_changed_trace_or_sidecar_is_analysed_again(
    run: Path, loads: list[str], changed: str
) -> None:
    _analyze(str(run), "--json")
    _later(run / changed)
    _analyze(str(run), "--json")
    assert len(loads) == 2


def test_a_new_sidecar_is_analysed_again(run: Path, loads: list[str]) -> None:
    sidecar = run / "traceinspect.capture.json"
    text = sidecar.read_text(encoding="utf-8")
    sidecar.unlink()
    without = _analyze(str(run), "--json")
    sidecar.write_text(text, encoding="utf-8")
    with_sidecar = _analyze(str(run), "--json")
    assert len(loads) == 2
    assert with_sidecar == _analyze(str(run), "--json", "--no-cache")
    assert without != with_sidecar


@pytest.mark.parametrize(
    "damage", ["truncated", "not-npz", "other-identity", "list-record", "null-record", "flipped"]
)
def test_a_damaged_entry_is_a_miss(run: Path, loads: list[str], damage: str) -> None:
    first = _analyze(str(run), "--json")
    _forget_answers()
    (entry,) = cache_dir().glob("*.analysis.npz")
    if damage == "truncated":
        entry.write_bytes(entry.read_bytes()[:200])
    elif damage == "not-npz":
        entry.write_text("{}")
    elif damage in ("list-record", "null-record"):
        with np.load(entry, allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
        shape = b"[]" if damage == "list-record" else b"null"
        arrays["__record__"] = np.frombuffer(shape, dtype=np.uint8)
        with entry.open("wb") as fh:
            np.savez(fh, **arrays)
    elif damage == "flipped":
        # One byte of a stored array changed: the zip member's CRC-32 no longer matches.
        # The byte is taken inside the member's data (the middle of the file may fall on
        # a header field zip does not check, as the record's length moves it).
        with zipfile.ZipFile(entry) as zf:
            info = max(zf.infolist(), key=lambda i: i.compress_size)
        data = bytearray(entry.read_bytes())
        at = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
        data[at + info.compress_size // 2] ^= 0xFF
        entry.write_bytes(bytes(data))
    else:
        # An entry whose record names another file (a digest collision, a moved cache).
        with np.load(entry, allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
        record = json.loads(arrays["__record__"].tobytes().decode())
        record["ident"]["traces"][0][0] = "/elsewhere/vm.xplane.pb"
        arrays["__record__"] = np.frombuffer(json.dumps(record).encode(), dtype=np.uint8)
        with entry.open("wb") as fh:
            np.savez(fh, **arrays)
    assert _analyze(str(run), "--json") == first
    assert len(loads) == 2


def _forget_answers() -> None:
    """Drop the printed answers, so the next run reads the stored analysis."""
    for answer in cache_dir().glob("*.answer.json"):
        answer.unlink()


@pytest.mark.parametrize(
    "damage", ["truncated", "other-identity", "other-path", "list", "null", "other-text"]
)
def test_a_damaged_answer_is_a_miss(run: Path, loads: list[str], damage: str) -> None:
    first = _analyze(str(run), "--json")
    (answer,) = cache_dir().glob("*.answer.json")
    if damage == "truncated":
        answer.write_bytes(answer.read_bytes()[:100])
    elif damage in ("list", "null"):
        answer.write_text("[]" if damage == "list" else "null", encoding="utf-8")
    else:
        stored = json.loads(answer.read_text(encoding="utf-8"))
        if damage == "other-identity":
            stored["ident"]["traces"][0][0] = "/elsewhere/vm.xplane.pb"
        elif damage == "other-path":
            stored["ident"]["requested"] = "elsewhere"
        # other-text: the same identity, the text changed but not its digest
        stored["text"] = "not this"
        answer.write_text(json.dumps(stored), encoding="utf-8")
    assert _analyze(str(run), "--json") == first
    assert len(loads) == 1  # the stored analysis, printed again


def test_each_way_of_printing_keeps_its_own_answer(run: Path, loads: list[str]) -> None:
    outputs = {}
    ways: tuple[list[str], ...] = (["--json"], ["--json", "--all-gaps"], [], ["--top", "1"])
    for args in ways:
        outputs[tuple(args)] = _analyze(str(run), *args)
    assert len(list(cache_dir().glob("*.answer.json"))) == len(ways)
    again = {tuple(a): _analyze(str(run), *a) for a in ways}
    assert again == outputs
    assert len(loads) == 1
    assert outputs[()] != outputs[("--top", "1")]


def test_a_kept_answer_is_printed_without_numpy_or_pandas(run: Path) -> None:
    """What makes a second `analyze` quick: it imports neither (checked in a process of its
    own, with the cache directory of this test)."""
    first = _analyze(str(run), "--json")
    probe = (
        "import sys\n"
        "from traceinspect.cli import main\n"
        "try:\n"
        f"    main(['analyze', {str(run)!r}, '--json'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(m for m in ('numpy', 'pandas', 'matplotlib') if m in sys.modules))\n"
    )
    env = {**os.environ, "TRACEINSPECT_CACHE_DIR": str(cache_dir())}
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True
    ).stdout
    printed, imported = out.rsplit("\n", 2)[0] + "\n", out.rsplit("\n", 2)[1]
    assert printed == first
    assert imported == "[]"


def test_a_pod_reuses_each_hosts_stored_result(tmp_path: Path, loads: list[str]) -> None:
    from traceinspect.pod import SerialEngine, analyze_run

    pod = tmp_path / "straggler"
    shutil.copytree(REPO / "sample_traces" / "pod" / "straggler", pod)
    first = analyze_run(pod, engine=SerialEngine())
    assert len(loads) == 4
    again = analyze_run(pod, engine=SerialEngine())
    assert len(loads) == 4  # every host from the cache
    # Everything but each host's own run time is the same.
    assert _without_times(again.to_dict()) == _without_times(first.to_dict())


def _without_times(result: dict[str, Any]) -> str:
    return re.sub(r'"seconds": [0-9.e-]+', '"seconds": null', json.dumps(result))


def test_the_html_of_a_stored_result_is_the_same(run: Path, loads: list[str]) -> None:
    """The page draws the trace itself, so a stored result reads the trace for it."""
    first, second = run.parent / "first.html", run.parent / "second.html"
    _analyze(str(run), "--html", str(first), "-q")
    _analyze(str(run), "--html", str(second), "-q")
    assert len(loads) == 2  # the analysis once, the trace again for the page
    assert second.read_text(encoding="utf-8") == first.read_text(encoding="utf-8")


def _same_size_traces(tmp_path: Path) -> tuple[Path, Path]:
    """Two sync-bound traces of the same size and mtime that analyse differently (their
    input wait differs), the smaller padded with a longer host name."""
    import xspace as X

    def build(input_ms: float, pad: int) -> bytes:
        xs = X.sync_loop(input_ms)
        xs.hostnames.append(b"h" * pad)
        return bytes(xs.SerializeToString())

    a, b = build(2.0, 0), build(6.0, 0)
    pad = 0
    while len(a) != len(b):
        pad += 1
        a, b = (build(2.0, pad), b) if len(a) < len(b) else (a, build(6.0, pad))
    paths = []
    for name, data in (("a", a), ("b", b)):
        path = tmp_path / name / "vm.xplane.pb"
        path.parent.mkdir()
        path.write_bytes(data)
        os.utime(path, ns=(1_700_000_000 * 10**9, 1_700_000_000 * 10**9))
        paths.append(path)
    return paths[0], paths[1]


@pytest.mark.parametrize("how", ["cp -p", "rename"])
def test_another_trace_of_the_same_size_and_mtime_is_analysed_again(
    tmp_path: Path, loads: list[str], how: str
) -> None:
    a, b = _same_size_traces(tmp_path)
    other = _analyze(str(b), "--json", "--no-cache")
    first = _analyze(str(a), "--json")
    assert first != other
    _analyze(str(a))  # the text report kept too
    if how == "cp -p":  # in place: same inode, the ctime changes
        subprocess.run(["cp", "-p", str(b), str(a)], check=True)
    else:  # rsync -t: a new file renamed over the old one, mtime kept
        tmp = a.with_name(".vm.tmp")
        shutil.copy2(b, tmp)
        tmp.replace(a)
    assert a.stat().st_size == b.stat().st_size
    assert a.stat().st_mtime_ns == b.stat().st_mtime_ns
    again = _analyze(str(a), "--json")
    assert {**json.loads(again), "path": None} == {**json.loads(other), "path": None}
    assert _analyze(str(a)) == _analyze(str(a), "--no-cache")
