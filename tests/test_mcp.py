"""`traceinspect mcp` as an agent meets it: the official SDK's client (stdio_client and
ClientSession) starts ``python -m traceinspect mcp`` and reads six tools, with annotations
and output schemas, whose results are each command's --json as compact text and structured
content; every error, the SDK's own included, is the JSON error object; analyze returns less
on request (detail "summary", top)."""

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

REPO = Path(__file__).resolve().parents[1]
SAMPLE = str(sample_path())
POD = str(REPO / "sample_traces" / "pod" / "straggler")
TOOLS = {"analyze", "info", "events", "compare", "attach", "samples"}
# The tools that change nothing: attach writes traces and talks to the jobs it traces.
READ_ONLY = TOOLS - {"attach"}


def _cli_json(*args: str) -> Any:
    return json.loads(CliRunner().invoke(main, [*args, "--json"]).stdout)


def _over_stdio(body: Callable[[Any], Awaitable[None]]) -> None:
    """``body(session)`` against ``python -m traceinspect mcp``, as an agent starts it."""
    pytest.importorskip("mcp")
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    server = StdioServerParameters(
        command=sys.executable, args=["-m", "traceinspect", "mcp"], env=dict(os.environ)
    )

    async def run() -> None:
        async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            await body(session)

    asyncio.run(run())


def _text(result: Any) -> Any:
    """The text content, parsed; it is compact JSON and the structured content too (which
    holds events' array as ``events``)."""
    (content,) = result.content
    data = json.loads(content.text)
    assert content.text == json.dumps(data, separators=(",", ":"))
    structured = result.structured_content
    assert structured == ({"events": data} if isinstance(data, list) else data)
    return data


def _error(result: Any) -> dict[str, Any]:
    assert result.is_error
    data = _text(result)
    assert set(data) == {"error"} and set(data["error"]) == {"type", "message", "path"}
    assert isinstance(data["error"]["message"], str) and "\n" not in data["error"]["message"]
    return dict(data["error"])


def test_tools_return_what_the_commands_print_with_json() -> None:
    async def body(session: Any) -> None:
        listed = await session.list_tools()
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
            # The client checks the structured content against the tool's output schema.
            result = await session.call_tool(tool, arguments)
            assert not result.is_error, tool
            got, expected = _text(result), _cli_json(*args)
            if tool == "info":  # how long this read took
                got.pop("load_seconds"), expected.pop("load_seconds")
            assert got == expected, tool
        every = await session.call_tool("events", {"path": SAMPLE, "limit": 0, "no_stats": True})
        assert len(_text(every)) == _cli_json("info", SAMPLE)["event_count"]

    _over_stdio(body)


def test_every_tool_has_annotations_and_schemas() -> None:
    async def body(session: Any) -> None:
        listed = {t.name: t for t in (await session.list_tools()).tools}
        for name, tool in listed.items():
            hints = tool.annotations
            assert hints is not None and hints.title and tool.title == hints.title, name
            assert hints.read_only_hint is (name in READ_ONLY), name
            assert hints.destructive_hint is False, name
            assert hints.idempotent_hint is (name in READ_ONLY), name
            # Paths may be gs:// or s3:// URLs; attach talks to the jobs' profiler servers.
            assert hints.open_world_hint is (name != "samples"), name
            assert tool.output_schema["type"] == "object", name
            for argument, schema in tool.input_schema["properties"].items():
                assert schema.get("description"), (name, argument)
        analyze = listed["analyze"]
        assert {"path", "verdict", "summary"} <= set(analyze.output_schema["required"])
        assert analyze.input_schema["properties"]["detail"]["enum"] == ["summary", "full"]
        assert listed["events"].output_schema["required"] == ["events"]
        assert listed["samples"].output_schema["required"] == ["samples"]

    _over_stdio(body)


def test_every_error_is_the_json_error_object() -> None:
    """The commands' errors, and the SDK's own: an unknown tool, a missing argument, a value
    of the wrong type or out of range, an argument the tool does not take."""

    async def body(session: Any) -> None:
        missing = await session.call_tool("analyze", {"path": "/no/such/trace.xplane.pb"})
        assert _error(missing) == _cli_json("analyze", "/no/such/trace.xplane.pb")["error"]
        assert _error(missing)["type"] == "TraceNotFoundError"
        for tool, arguments, kind, words in [
            ("analyze", {}, "MissingParameter", "analyze needs the argument(s) 'path'"),
            ("analyze", {"path": 3}, "BadParameter", "path: Input should be a valid string"),
            ("events", {"path": SAMPLE, "limit": "many"}, "BadParameter", "limit: "),
            ("events", {"path": SAMPLE, "limit": -1}, "BadParameter", "limit: "),
            ("events", {"path": SAMPLE, "sort": "sideways"}, "BadParameter", "sort: "),
            ("analyze", {"path": SAMPLE, "detail": "some"}, "BadParameter", "detail: "),
            ("analyze", {"path": SAMPLE, "topp": 3}, "NoSuchOption", "no argument 'topp'"),
            ("nope", {}, "UnknownTool", "No tool named 'nope'; the tools are analyze, "),
            ("attach", {"addresses": "nowhere"}, "CaptureUsageError", "nowhere"),
        ]:
            error = _error(await session.call_tool(tool, arguments))
            assert error["type"] == kind, (tool, arguments, error)
            assert words in error["message"], (tool, arguments, error)
            assert error["path"] is None

    _over_stdio(body)


def test_analyze_returns_less_on_request() -> None:
    """A 4-host run: 40 KB of compact JSON in full, a few KB as a summary (the pod's verdict,
    host table, straggler and advice), saying what it left out."""

    async def body(session: Any) -> None:
        async def call(**arguments: Any) -> tuple[dict[str, Any], int]:
            result = await session.call_tool("analyze", arguments)
            assert not result.is_error, result.content
            return _text(result), len(result.content[0].text)

        full, full_size = await call(path=POD)
        expected = _cli_json("analyze", POD)
        for hosts in (full["hosts"], expected["hosts"]):
            for host in hosts:
                host.pop("seconds")  # how long its analysis took
        assert full == expected and "omitted" not in full
        summary, summary_size = await call(path=POD, detail="summary")
        assert summary_size < 8_000 and full_size > 30_000
        assert summary["omitted"] == {"steps": len(full["steps"]), "hosts[].analysis": 4}
        assert summary["steps"] == [] and all("analysis" not in h for h in summary["hosts"])
        for key in ("verdict", "summary", "decided_by", "straggler", "hosts_table"):
            assert summary[key] == full[key], key
        top, _ = await call(path=POD, top=1)
        assert all(len(h["analysis"]["gaps"]) <= 1 for h in top["hosts"])

        one, _ = await call(path=SAMPLE, detail="summary")
        whole = _cli_json("analyze", SAMPLE)
        assert one["per_step"] == [] and one["gaps"] == whole["gaps"][:5]
        assert one["omitted"] == {"per_step": len(whole["per_step"]), "gaps": 9}
        assert {k: v for k, v in one.items() if k not in ("per_step", "gaps", "omitted")} == {
            k: v for k, v in whole.items() if k not in ("per_step", "gaps")
        }
        more, _ = await call(path=SAMPLE, top=60)  # past the 50 of --json: every gap
        assert more["gaps"] == _cli_json("analyze", SAMPLE, "--all-gaps")["gaps"]

    _over_stdio(body)


def test_without_the_sdk_the_command_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "traceinspect.cli._mcp_server", None)  # ImportError
    result = CliRunner().invoke(main, ["mcp"])
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: traceinspect mcp needs the MCP Python SDK")
    assert result.stderr.rstrip().endswith("pip install 'traceinspect[mcp]'.")


def test_attach_traces_and_analyses_a_running_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tool runs capture --attach --analyze --json (the snapshot itself stubbed here, so
    the server runs in this process, with the SDK's in-memory client:
    tests/capture/test_attach.py attaches to real jobs)."""
    pytest.importorskip("mcp")
    from mcp import Client

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

    async def run() -> None:
        async with Client(build_server()) as client:
            arguments = {"addresses": "localhost:9999", "duration_s": 2, "logdir": str(tmp_path)}
            result = await client.call_tool("attach", arguments)
            assert not result.is_error, result.content
            data = _text(result)
            assert data["runs"][0]["run_dir"] == str(Path(SAMPLE).parent)
            assert data["analyses"][0]["verdict"] == "sync-bound"
            assert len(data["analyses"][0]["gaps"]) == 14
            short = _text(await client.call_tool("attach", {**arguments, "detail": "summary"}))
            assert len(short["analyses"][0]["gaps"]) == 5
            assert short["analyses"][0]["omitted"] == {"per_step": 7, "gaps": 9}

    asyncio.run(run())
    assert seen == {"addresses": ("localhost:9999",), "duration_s": 2.0, "logdir": str(tmp_path)}


def test_trim_leaves_a_document_without_those_lists_alone() -> None:
    pytest.importorskip("pydantic")
    from traceinspect.cli._mcp_output import trim_analysis

    data = {"verdict": "unknown", "summary": "s", "gaps": [], "per_step": []}
    assert trim_analysis(data, "summary", None) == data
    assert trim_analysis(data, "full", 3) == data
