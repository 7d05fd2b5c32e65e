"""``--json`` on every command: one JSON document on stdout, errors included, and the exit
codes (0 done, 1 a runtime or data error, 2 a usage error); a flag with no effect in a mode
is refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from traceinspect.cli import main
from traceinspect.cli.sample import sample_path

SAMPLE = str(sample_path())


def _invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def _one_document(text: str) -> Any:
    """The one JSON document ``text`` holds (json.loads refuses anything after it)."""
    return json.loads(text)


def test_every_command_has_json() -> None:
    ctx = click.Context(main)
    # mcp speaks JSON-RPC on stdio: its tools return each command's --json.
    for name in set(main.list_commands(ctx)) - {"mcp"}:
        command = main.get_command(ctx, name)
        assert command is not None
        flags = {opt for p in command.params for opt in getattr(p, "opts", [])}
        assert "--json" in flags, name


@pytest.mark.parametrize(
    "args",
    [
        ["analyze", SAMPLE],
        ["info", SAMPLE],
        ["events", SAMPLE, "--limit", "3"],
        ["compare", SAMPLE, SAMPLE],
        ["sample"],
        ["sample", "--list"],
    ],
)
def test_json_is_one_document(args: list[str]) -> None:
    code, out, _ = _invoke(*args, "--json")
    assert code == 0
    _one_document(out)


def test_export_json_says_what_it_wrote(tmp_path: Path) -> None:
    code, out, err = _invoke("export", SAMPLE, "-o", str(tmp_path / "t.json.gz"), "--json")
    assert code == 0 and err == ""
    data = _one_document(out)
    assert data["output"] == str(tmp_path / "t.json.gz")
    assert data["bytes"] == (tmp_path / "t.json.gz").stat().st_size
    assert data["events"] > 0 and data["left_out"] == 0


def test_export_writes_a_default_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = _invoke("export", SAMPLE)
    assert code == 0, err
    assert (tmp_path / "sync_bound.perfetto.json.gz").is_file()
    assert "sync_bound.perfetto.json.gz" in err


def test_a_data_error_is_a_json_error_with_exit_code_1(tmp_path: Path) -> None:
    missing = str(tmp_path / "nowhere.xplane.pb")
    for command in ("analyze", "info", "events", "export"):
        code, out, err = _invoke(command, missing, "--json")
        assert code == 1, command
        error = _one_document(out)["error"]
        assert error["type"] == "TraceNotFoundError"
        assert error["path"] == missing
        assert error["message"].startswith(f"{missing}: no such file")
        assert err == ""
    bad = tmp_path / "bad.xplane.pb"
    bad.write_bytes(b"\x0a\xff\xff")
    code, out, _ = _invoke("analyze", str(bad), "--json")
    assert code == 1
    assert _one_document(out)["error"]["type"] == "TraceDecodeError"
    assert _one_document(out)["error"]["path"] == str(bad)


def test_without_json_an_error_is_one_line_on_stderr(tmp_path: Path) -> None:
    code, out, err = _invoke("analyze", str(tmp_path / "nowhere"))
    assert code == 1 and out == ""
    assert err.startswith("Error: ") and len(err.splitlines()) == 1


@pytest.mark.parametrize(
    ("args", "kind"),
    [
        (["analyze", "--json"], "MissingParameter"),
        (["analyze", SAMPLE, "--json", "--no-such-option"], "NoSuchOption"),
        (["analyze", SAMPLE, "--json", "--top", "x"], "BadParameter"),
        (["analyze", SAMPLE, "--json", "--jobs", "0"], "UsageError"),
        (["capture", "--json", "--", "ls"], "CaptureUsageError"),
        (["sweep", "--json", "--worker-counts", "1,x", "--", "train.py"], "BadParameter"),
    ],
)
def test_a_usage_error_is_a_json_error_with_exit_code_2(args: list[str], kind: str) -> None:
    code, out, _ = _invoke(*args)
    assert code == 2
    error = _one_document(out)["error"]
    assert error["type"] == kind
    assert error["message"] and "\n" not in error["message"]
    assert set(error) == {"type", "message", "path"}


def test_without_json_a_usage_error_exits_2() -> None:
    code, _, err = _invoke("analyze", SAMPLE, "--no-such-option")
    assert code == 2 and "No such option" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["analyze", SAMPLE, "--all-gaps"], "--all-gaps goes with --json"),
        (["analyze", SAMPLE, "--json", "--top", "3"], "--top sets the gaps of the text"),
        (["info", SAMPLE, "--json", "--all-lines"], "--all-lines is for the text"),
        (["events", SAMPLE, "--json", "--format", "csv"], "--format cannot go with --json"),
        (["sample", "sync_bound", "--list"], "NAME cannot go with --list"),
        (["view", SAMPLE, "--no-analyze", "--top", "3"], "--top lists the analysis' gaps"),
    ],
)
def test_a_flag_without_effect_is_refused(args: list[str], message: str) -> None:
    code, out, err = _invoke(*args)
    assert code == 2
    if "--json" in args:
        assert _one_document(out)["error"]["message"].startswith(message)
    else:
        assert err.startswith(f"Error: {message}") and len(err.splitlines()) == 1


def test_capture_attach_json_is_one_document(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two snapshots analysed and compared: the runs, each analysis and the comparison in
    one document (they were three JSON documents one after the other)."""
    import traceinspect.attach
    from traceinspect.attach import Snapshot
    from traceinspect.capture.attach import AttachResult

    runs = [str(Path(SAMPLE).parent), str(Path(SAMPLE).parent)]

    def taken(*args: Any, **kwargs: Any) -> list[Snapshot]:
        return [
            Snapshot(AttachResult(run, (SAMPLE,), ("localhost:9999",), 3.0), 8, 21.9)
            for run in runs
        ]

    monkeypatch.setattr(traceinspect.attach, "snapshots", taken)
    args = ["capture", "--attach", "localhost:9999", "--count", "2", "--every", "1"]
    code, out, _ = _invoke(*args, "--analyze", "--json")
    assert code == 0
    data = _one_document(out)
    assert [r["run_dir"] for r in data["runs"]] == runs
    assert [a["verdict"] for a in data["analyses"]] == ["sync-bound", "sync-bound"]
    assert data["comparison"] == _one_document(_invoke("compare", *runs, "--json")[1])
