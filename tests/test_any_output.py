"""Every output takes any string and any destination: names that are not UTF-8 in every
format, and a missing folder, a directory, a full disk as one-line errors."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from traces import DECODERS

import traceinspect
from traceinspect.cli import main
from traceinspect.xplane.proto import message_class

SAMPLE = Path(traceinspect.__file__).parent / "_samples" / "sync_bound" / "vm.xplane.pb"
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def broken(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled sample with bytes that are not UTF-8 (truncated multi-byte characters,
    0xff) in event, stat, line and plane names, a host name and a bytes stat value; step
    names left whole, so that the analysis still finds its steps."""
    xs = message_class("XSpace").FromString(SAMPLE.read_bytes())
    for plane in xs.planes:
        for entry in plane.event_metadata:
            name = entry.value.name
            if name and b"train" not in name.lower() and b"step" not in name.lower():
                entry.value.name = name + b"\xe2\x82"
        for entry in plane.stat_metadata:
            if entry.value.name not in (b"step_num", b"group_id", b"device_type_string"):
                entry.value.name += b"\xff"
        for line in plane.lines:
            line.name += b"\xc3"
            for event in line.events[:50]:
                stat = event.stats.add()
                stat.metadata_id = next(iter(plane.stat_metadata)).key
                stat.bytes_value = b"raw\xff\x00"
        plane.name += b"\xf0\x9f"
    xs.hostnames.append(b"host\xff")
    path = tmp_path_factory.mktemp("broken") / "vm.xplane.pb"
    path.write_bytes(xs.SerializeToString())
    return path


def _cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, [*args, "--no-cache"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize("decoder", DECODERS)
def test_names_that_are_not_utf8_are_text(broken: Path, decoder: str) -> None:
    trace = traceinspect.load(broken, decoder=decoder, use_cache=False)  # type: ignore[arg-type]
    names = trace.columns.event_names
    assert any(n.endswith("\\xe2\\x82") for n in names)
    assert all(n.encode("utf-8") for n in names)  # no surrogates: every output takes them
    assert any(n.endswith("\\xff") for n in trace.columns.stat_names)
    assert all(n.encode("utf-8") for n in trace.columns.stat_names)


def test_every_format_takes_such_names(broken: Path, tmp_path: Path) -> None:
    code, out, err = _cli("analyze", str(broken))
    assert code == 0, err
    code, out, err = _cli("analyze", str(broken), "--json")
    assert code == 0, err
    json.loads(out)
    html = tmp_path / "a.html"
    code, _, err = _cli("analyze", str(broken), "--html", str(html))
    assert code == 0, err
    assert "\\xe2\\x82" in html.read_text(encoding="utf-8")
    perfetto = tmp_path / "e.json.gz"
    code, _, err = _cli("export", str(broken), "-o", str(perfetto))
    assert code == 0, err
    doc = json.loads(gzip.decompress(perfetto.read_bytes()))
    text = json.dumps(doc)
    assert "\\\\xc3" in text and "\\udc" not in text
    code, out, err = _cli("events", str(broken), "--format", "csv")
    assert code == 0, err
    # (Python 3.10's csv writes a NUL only escaped, with a backslash: other backslashes double.)
    unescaped = out.replace("\\\\", "\\") if sys.version_info < (3, 11) else out
    assert "raw\\xff" in unescaped and "\\xe2\\x82" in unescaped
    code, out, err = _cli("events", str(broken), "--format", "json")
    assert code == 0, err
    values = [v for row in json.loads(out) for v in row.values()]
    assert "raw\\xff\x00" in values
    parquet = tmp_path / "e.parquet"
    code, _, err = _cli("events", str(broken), "--format", "parquet", "-o", str(parquet))
    assert code == 0, err
    assert pd.read_parquet(parquet)["name"].str.endswith("\\xe2\\x82").any()
    code, out, err = _cli("events", str(broken))
    assert code == 0, err
    code, out, err = _cli("info", str(broken))
    assert code == 0, err


def test_the_text_report_reaches_a_strict_utf8_terminal(broken: Path) -> None:
    env = {**os.environ, "PYTHONIOENCODING": "utf-8:strict", "PYTHONPATH": str(ROOT)}
    for args in (["analyze", str(broken)], ["events", str(broken)], ["info", str(broken)]):
        done = subprocess.run(
            [sys.executable, "-m", "traceinspect", *args, "--no-cache"],
            capture_output=True,
            env=env,
            check=False,
        )
        assert done.returncode == 0, done.stderr.decode()
        assert b"Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--format", "csv", "-o", "{tmp}/missing/events.csv"], "No such file or directory"),
        (["--format", "json", "-o", "/dev/full"], "No space left on device"),
        (["--format", "csv", "-o", "/dev/full"], "No space left on device"),
    ],
    ids=["missing-folder", "json-full-disk", "csv-full-disk"],
)
def test_events_output_errors_are_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    if "/dev/full" in args and not Path("/dev/full").exists():
        pytest.skip("no /dev/full")
    code, _, err = _cli("events", str(SAMPLE), *[a.format(tmp=tmp_path) for a in args])
    assert code == 2
    line = err.strip()
    assert line.startswith("Error: ") and "\n" not in line and message in line
    assert "pick another -o" in line


def test_events_refuses_a_directory_for_its_output(tmp_path: Path) -> None:
    """Click's own check of -o (a file, not a directory): a usage error naming the path."""
    code, _, err = _cli("events", str(SAMPLE), "--format", "parquet", "-o", str(tmp_path))
    assert code == 2
    last = err.strip().splitlines()[-1]
    assert last.startswith("Error: ") and str(tmp_path) in last and "is a directory" in last
    assert "Traceback" not in err


@pytest.mark.parametrize("window", [["nan", "inf"], ["0", "inf"], ["-inf", "5"]])
def test_events_window_must_be_finite(window: list[str]) -> None:
    code, _, err = _cli("events", str(SAMPLE), "--window", ":".join(window))
    assert code == 2
    start, end = (float(w) for w in window)
    assert err.strip() == (
        f"Error: --window needs finite times in ms (got {start}:{end}); leave an end out for "
        "the trace's own."
    )


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
@pytest.mark.parametrize(
    "args",
    [["analyze"], ["analyze", "--json"], ["events", "--format", "json"]],
    ids=["analyze", "analyze-json", "events"],
)
def test_a_full_standard_output_is_one_line(args: list[str]) -> None:
    with Path("/dev/full").open("w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "traceinspect", args[0], str(SAMPLE), *args[1:], "--no-cache"],
            stdout=full,
            stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            check=False,
        )
    err = done.stderr.decode().strip()
    assert done.returncode == 2, err
    assert err == (
        "Error: standard output: cannot write (No space left on device); redirect it "
        "elsewhere, or use -o where the command has it."
    )
