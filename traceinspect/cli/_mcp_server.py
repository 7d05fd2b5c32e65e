"""The MCP server of `traceinspect mcp` and its tools (imports the MCP SDK: only that command
imports this module). Each tool runs the command of its name with ``--json`` in this process
and returns what that prints, errors included."""

from __future__ import annotations

import contextlib
import io
import threading
from collections.abc import Sequence
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp_types import CallToolResult, TextContent

from traceinspect._version import __version__

INSTRUCTIONS = """\
traceinspect reads JAX profiler traces (*.xplane.pb files, run directories, TensorBoard log
directories, gs:// URLs) and says why the accelerator idles. Start with `analyze` (verdict,
idle time by cause, gaps with evidence, findings, recommendations); `info` says what a
trace holds; `events` looks up raw events (e.g. in a window around a gap: window
"START_MS:END_MS", ms from the trace's first event, as analyze's start_ms); `compare`
compares two runs; `attach` traces a job that serves its profiler (jax.profiler.start_server)
and analyses it. Each returns the JSON of `traceinspect <command> --json`. `samples` lists
bundled traces to try."""

# Tools run on the SDK's worker threads; the command's stdout is captured process-wide.
_STDOUT_LOCK = threading.Lock()


def run_json(args: Sequence[str]) -> tuple[bool, str]:
    """``traceinspect ARGS --json``, run in this process: whether it succeeded, and the JSON
    text it printed (on failure, the ``{"error": ...}`` object)."""
    from traceinspect.cli._main import main

    out = io.StringIO()
    with _STDOUT_LOCK, contextlib.redirect_stdout(out):
        try:
            code = main.main([*args, "--json"], prog_name="traceinspect", standalone_mode=False)
        except SystemExit as exc:
            code = exc.code
    return code in (0, None), out.getvalue().strip()


def _flags(**options: Any) -> list[str]:
    """Command-line options from keyword arguments: None left out, True a bare flag, a list
    repeated (``hosts=["a", "b"]`` -> ``--host a --host b``)."""
    out: list[str] = []
    for name, value in options.items():
        option = "--" + name.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            out.append(option)
        elif isinstance(value, list):
            for item in value:
                out += [option, str(item)]
        else:
            out += [option, str(value)]
    return out


def build_server() -> MCPServer[Any]:
    """The MCP server with traceinspect's tools (needs the MCP SDK: ImportError without it)."""
    server = MCPServer(name="traceinspect", version=__version__, instructions=INSTRUCTIONS)

    def call(args: list[str]) -> CallToolResult:
        # The command's JSON as it printed it; an error is the same {"error": ...} object,
        # marked as a tool error.
        ok, text = run_json(args)
        return CallToolResult(content=[TextContent(type="text", text=text)], is_error=not ok)

    def analyze(
        path: str, run: str | None = None, all_gaps: bool = False, host: list[str] | None = None
    ) -> CallToolResult:
        """Why the device idled: the verdict (input-bound, sync-bound, compile-bound,
        host-bound, device-bound, unknown; a multi-host run: straggler), idle time by cause,
        the longest idle gaps with their evidence (all_gaps: every gap, else the 50
        longest), findings (what is set up wrong, with fixes) and recommendations. path: a
        *.xplane.pb file, a run directory or a log directory (run picks one of its runs);
        host: analyse only these hosts of a multi-host run. The JSON of `traceinspect
        analyze --json`."""
        return call(["analyze", path, *_flags(run=run, all_gaps=all_gaps, host=host)])

    def info(path: str, run: str | None = None) -> CallToolResult:
        """What a trace holds: hosts, planes, lines (threads) with their event counts and
        spans, backend, steps, profiler options. The JSON of `traceinspect info --json`."""
        return call(["info", path, *_flags(run=run)])

    def events(
        path: str,
        name: str | None = None,
        line: str | None = None,
        plane: str | None = None,
        host_re: str | None = None,
        window: str | None = None,
        sort: str = "start",
        limit: int = 50,
        no_stats: bool = False,
        run: str | None = None,
    ) -> CallToolResult:
        """The trace's events, filtered: name, line, plane, host_re are regular expressions;
        window "START_MS:END_MS" in ms from the trace's first event (either end may be
        left out; analyze's gap start_ms is on that clock); sort "start", "duration"
        (longest first) or "none"; at most limit events; no_stats leaves out the stat
        columns. A JSON array of events (start_ns, duration_ns: ns on the trace's clock), as
        `traceinspect events --json`."""
        flags = _flags(name=name, line=line, plane=plane, host_re=host_re, window=window, sort=sort)
        flags += _flags(limit=limit, no_stats=no_stats, run=run)
        return call(["events", path, *flags])

    def compare(
        before: str, after: str, run_before: str | None = None, run_after: str | None = None
    ) -> CallToolResult:
        """Two traces of one training loop, before and after a change: step time, device
        busy time, idle time per step by cause and the verdict of each, and what changed.
        The JSON of `traceinspect compare --json`."""
        flags = _flags(run_before=run_before, run_after=run_after)
        return call(["compare", before, after, *flags])

    def attach(
        addresses: str,
        duration_s: float | None = None,
        analyze: bool = True,
        logdir: str = "traceinspect_logs",
    ) -> CallToolResult:
        """Trace jobs already running, through their profiler servers
        (jax.profiler.start_server(PORT) in the job): addresses "HOST:PORT[,HOST:PORT...]"
        (several hosts of a pod as one run); duration_s: how long (default: 3 s, or long
        enough for 20 steps); analyze: each snapshot's analysis too. The JSON of
        `traceinspect capture --attach ADDRESSES --analyze --json`: the runs written under
        logdir, and their analyses."""
        flags = _flags(duration=duration_s, analyze=analyze, logdir=logdir)
        return call(["capture", "--attach", addresses, *flags])

    def samples() -> CallToolResult:
        """The traces bundled with traceinspect (and, in a source checkout, those of
        sample_traces/ with their expected verdicts), with their paths, to try the other
        tools on. The JSON of `traceinspect sample --list --json`."""
        return call(["sample", "--list"])

    for tool in (analyze, info, events, compare, attach, samples):
        server.add_tool(tool, structured_output=False)
    return server
