"""`traceinspect mcp`: an MCP client (the official SDK's) lists the tools and gets the JSON of
each command's --json, errors included, in-process and end to end over stdio."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from traceinspect.cli import main
from traceinspect.cli.sample import sample_path

SAMPLE = str(sample_path())
TOOLS = {"analyze", "info", "events", "compare", "attach", "samples"}


def _cli_json(*args: str) -> Any:
    return json.loads(CliRunner().invoke(main, [*args, "--json"]).stdout)


def _with_client(server: Any, body: Callable[[Any], Awaitable[None]]) -> None:
    from mcp import Client

    async def run() -> None:
        async with Client(server) as client:
            await body(client)

    asyncio.run(run())


def _text(result: Any) -> Any:
    (content,) = result.content
    return json.loads(content.text)


def test_tools_return_what_the_commands_print_with_json() -> None:
    pytest.importorskip("mcp")
    from traceinspect.cli._mcp_server import build_server

    async def body(client: Any) -> None:
        listed = await client.list_tools()
        assert {t.name for t in listed.tools} == TOOLS
        for tool, arguments, args in [
            ("analyze", {"path": SAMPLE}, ["analyze", SAMPLE]),
            ("analyze", {"path": SAMPLE, "all_gaps": True}, ["analyze", SAMPLE, "--all-gaps"]),
            ("info", {"path": SAMPLE}, ["info", SAMPLE]),
            (
                "events",
                {"path": SAMPLE, "window": "10:20", "limit": 3, "sort": "duration"},
                ["events", SAMPLE, "--window", "10:20", "--limit", "3", "--sort", "duration"],
            ),
            ("compare", {"before": SAMPLE, "after": SAMPLE}, ["compare", SAMPLE, SAMPLE]),
            ("samples", {}, ["sample", "--list"]),
        ]:
            result = await client.call_tool(tool, arguments)
            assert not result.is_error, tool
            got, expected = _text(result), _cli_json(*args)
            if tool == "info":  # how long this read took
                got.pop("load_seconds"), expected.pop("load_seconds")
            assert got == expected, tool

    _with_client(build_server(), body)


def test_an_error_is_the_json_error_object() -> None:
    pytest.importorskip("mcp")
    from traceinspect.cli._mcp_server import build_server

    async def body(client: Any) -> None:
        result = await client.call_tool("analyze", {"path": "/no/such/trace.xplane.pb"})
        assert result.is_error
        assert _text(result) == _cli_json("analyze", "/no/such/trace.xplane.pb")
        assert _text(result)["error"]["type"] == "TraceNotFoundError"
        bad = await client.call_tool("events", {"path": SAMPLE, "sort": "sideways"})
        assert bad.is_error and _text(bad)["error"]["type"] == "BadParameter"

    _with_client(build_server(), body)


def test_over_stdio_the_sample_gets_the_verdict_of_analyze_json() -> None:
    """`traceinspect mcp` as an agent starts it: a process spoken to on stdin/stdout."""
    pytest.importorskip("mcp")
    from mcp.client.stdio import StdioServerParameters

    server = StdioServerParameters(
        command=sys.executable, args=["-m", "traceinspect", "mcp"], env=dict(os.environ)
    )

    async def body(client: Any) -> None:
        listed = await client.list_tools()
        assert {t.name for t in listed.tools} == TOOLS
        result = await client.call_tool("analyze", {"path": SAMPLE})
        assert not result.is_error
        assert _text(result)["verdict"] == _cli_json("analyze", SAMPLE)["verdict"]
        assert _text(result) == _cli_json("analyze", SAMPLE)

    _with_client(server, body)


def test_without_the_sdk_the_command_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "traceinspect.cli._mcp_server", None)  # ImportError
    result = CliRunner().invoke(main, ["mcp"])
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: traceinspect mcp needs the MCP Python SDK")
    assert result.stderr.rstrip().endswith("pip install 'traceinspect[mcp]'.")


def test_attach_traces_and_analyses_a_running_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tool runs capture --attach --analyze --json (the snapshot itself stubbed here:
    tests/capture/test_attach.py attaches to real jobs)."""
    pytest.importorskip("mcp")
    import traceinspect.attach
    from traceinspect.attach import Snapshot
    from traceinspect.capture.attach import AttachResult
    from traceinspect.cli._mcp_server import build_server

    seen: dict[str, Any] = {}

    def taken(addresses: tuple[str, ...], duration_s: float | None, *a: Any, **k: Any) -> Any:
        seen.update(addresses=addresses, duration_s=duration_s, logdir=k["logdir"])
        run = str(Path(SAMPLE).parent)
        return [Snapshot(AttachResult(run, (SAMPLE,), addresses, 2.0), 8, 21.9)]

    monkeypatch.setattr(traceinspect.attach, "snapshots", taken)

    async def body(client: Any) -> None:
        arguments = {"addresses": "localhost:9999", "duration_s": 2, "logdir": str(tmp_path)}
        result = await client.call_tool("attach", arguments)
        assert not result.is_error, result.content
        data = _text(result)
        assert data["runs"][0]["run_dir"] == str(Path(SAMPLE).parent)
        assert data["analyses"][0]["verdict"] == "sync-bound"
        bad = await client.call_tool("attach", {"addresses": "nowhere"})
        assert bad.is_error and _text(bad)["error"]["type"] == "CaptureUsageError"

    _with_client(build_server(), body)
    assert seen == {"addresses": ("localhost:9999",), "duration_s": 2.0, "logdir": str(tmp_path)}
