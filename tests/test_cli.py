"""The CLI through CliRunner: output, formats, exit codes, one-line errors."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from traces import SAMPLES

from traceinspect.cli import main

SAMPLE = next(p for p in SAMPLES if "sync" in p.name)


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_info_text() -> None:
    code, out, _ = run("info", str(SAMPLE))
    assert code == 0
    assert "Backend   cpu: no device planes; XLA CPU executions on 3 host threads" in out
    assert "Steps     StepTraceAnnotation on 'train': 8 marked" in out
    assert "python tracer 0" in out
    assert "tf_XLAPjRtCpuClient" in out


def test_info_json_counts_add_up() -> None:
    code, out, _ = run("info", str(SAMPLE), "--json")
    assert code == 0
    data = json.loads(out)
    assert data["backend"]["kind"] == "cpu"
    assert data["event_count"] == sum(line["event_count"] for line in data["lines"]) > 1000
    assert data["steps"]["present"] is True
    assert data["profiler"]["jax_version"]


def test_events_table_and_filters() -> None:
    code, out, err = run(
        "events", str(SAMPLE), "--line", "^python$", "--name", "^train$", "--limit", "3"
    )
    assert code == 0
    assert out.count("train") >= 3
    assert "step_num" in out
    assert "3 of 8 matching events" in err


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
def test_events_formats_round_trip(tmp_path: Path, fmt: str) -> None:
    out_file = tmp_path / f"events.{fmt}"
    code, _, _ = run(
        "events", str(SAMPLE), "--name", "^train$", "--format", fmt, "-o", str(out_file)
    )
    assert code == 0
    if fmt == "csv":
        df = pd.read_csv(out_file)
    elif fmt == "json":
        df = pd.DataFrame(json.loads(out_file.read_text()))
    else:
        df = pd.read_parquet(out_file)
    assert len(df) == 8
    assert sorted(df["step_num"].tolist()) == list(range(8))
    if fmt != "parquet":  # parquet keeps event_row as the index
        assert df["event_row"].is_monotonic_increasing
    assert (df["start_ns"].diff().dropna() > 0).all()


def test_events_window_and_sort_by_duration() -> None:
    code, out, _ = run(
        "events",
        str(SAMPLE),
        "--window",
        "0:1000",
        "--sort",
        "duration",
        "--format",
        "csv",
        "--limit",
        "5",
        "--no-stats",
    )
    assert code == 0
    df = pd.read_csv(io.StringIO(out))
    assert list(df.columns) == [
        "event_row",
        "host",
        "plane",
        "line",
        "line_row",
        "name",
        "start_ns",
        "duration_ns",
    ]
    assert df["duration_ns"].is_monotonic_decreasing


def _assert_clean_error(code: int, err: str, *needles: str, exit_code: int = 2) -> None:
    assert code == exit_code  # 1: the data; 2: the call
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("Error: ")
    assert "Traceback" not in err
    for needle in needles:
        assert needle in lines[0]


def test_missing_path_is_a_clean_error() -> None:
    code, _, err = run("info", "nowhere/trace.xplane.pb")
    _assert_clean_error(code, err, "nowhere/trace.xplane.pb", "no such file", exit_code=1)


@pytest.mark.parametrize(
    ("content", "needle"),
    [(b"", "empty"), (b"\x0a\xff\xff", "not a readable XPlane trace"), (b"[1,2]", "JSON")],
)
def test_bad_files_are_clean_errors(tmp_path: Path, content: bytes, needle: str) -> None:
    bad = tmp_path / "bad.xplane.pb"
    bad.write_bytes(content)
    for command in ("info", "events"):
        code, _, err = run(command, str(bad))
        _assert_clean_error(code, err, str(bad), needle, exit_code=1)


def test_bad_regex_and_parquet_to_stdout() -> None:
    code, _, err = run("events", str(SAMPLE), "--name", "(")
    _assert_clean_error(code, err, "invalid regular expression")
    code, _, err = run("events", str(SAMPLE), "--format", "parquet")
    _assert_clean_error(code, err, "-o FILE")


def test_help_has_examples() -> None:
    for command in ("info", "events"):
        code, out, _ = run(command, "--help")
        assert code == 0
        assert "Examples:" in out


def test_events_help_says_what_start_ns_counts_from() -> None:
    """start_ns is on the trace's clock (from the profiling session's start), not Unix time:
    the sample's first event starts 35,076 ns in."""
    code, out, _ = run("events", "--help")
    assert code == 0
    assert "from the start of the profiling" in out and "not Unix time" in out
    code, out, _ = run("events", str(SAMPLE), "--format", "json", "--limit", "1", "--no-stats")
    assert code == 0
    assert json.loads(out)[0]["start_ns"] == 35076


def test_events_limit_0_means_every_event() -> None:
    total = json.loads(run("info", str(SAMPLE), "--json")[1])["event_count"]
    code, out, _ = run("events", str(SAMPLE), "--limit", "0", "--no-stats", "--json")
    assert code == 0 and len(json.loads(out)) == total
    code, out, err = run("events", str(SAMPLE), "--limit", "0", "--no-stats")
    assert code == 0 and len(out.splitlines()) > total  # and the header
    assert err.strip() == f"{total:,} of {total:,} matching events ({total:,} in all)"


@pytest.mark.parametrize(
    "args",
    [
        ["info", "{file}", "--run", "r1"],
        ["analyze", "{file}", "--run", "r1"],
        ["events", "{file}", "--run", "r1"],
        ["compare", "{file}", "{file}", "--run-after", "r1"],
    ],
)
def test_run_names_on_a_single_file_are_refused(args: list[str]) -> None:
    option = args[-2]
    code, out, err = run(*[a.format(file=SAMPLE) for a in args])
    assert (code, out) == (2, "")
    assert err == (
        f"Error: {option} r1 picks a run of a log directory, but {SAMPLE} is one trace file: "
        f"leave {option} out, or pass the log directory.\n"
    )
    as_json = json.loads(run(*[a.format(file=SAMPLE) for a in args], "--json")[1])
    assert as_json["error"]["type"] == "UsageError" and as_json["error"]["path"] == str(SAMPLE)
