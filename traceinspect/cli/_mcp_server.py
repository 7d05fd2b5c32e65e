"""The MCP server of `traceinspect mcp` and its tools (imports the MCP SDK: only that command
imports this module). Each tool runs the command of its name with ``--json`` in this process
and returns what that prints, as compact JSON text and as structured content; every failure,
the SDK's own (an unknown tool, arguments that fail the input schema) included, is the
command's ``{"error": ...}`` object."""

from __future__ import annotations

import contextlib
import inspect
import io
import json
import threading
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field, ValidationError

from traceinspect._version import __version__
from traceinspect.cli._mcp_output import (
    JSON_GAPS,
    SUMMARY_GAPS,
    AnalyzeOutput,
    AttachOutput,
    CompareOutput,
    Detail,
    EventsOutput,
    InfoOutput,
    SamplesOutput,
    compact,
    error_object,
    needs_all_gaps,
    trim_analysis,
)

INSTRUCTIONS = f"""\
traceinspect reads JAX profiler traces (*.xplane.pb files, run directories, TensorBoard log
directories, gs:// URLs) and says why the accelerator idles. Start with `analyze` (verdict,
idle time by cause, gaps with evidence, findings, recommendations); detail "summary" returns
the verdict, numbers and advice without the per-step rows and the per-host analyses of a
multi-host run, and top N the N longest gaps (summary: {SUMMARY_GAPS}). `info` says what a
trace holds; `events` looks up raw events (e.g. in a window around a gap: window
"START_MS:END_MS", ms from the trace's first event, as analyze's start_ms); `compare`
compares two runs; `attach` traces a job that serves its profiler (jax.profiler.start_server)
and analyses it. Each returns the JSON of `traceinspect <command> --json` (compact), also as
structured content; every error is {{"error": {{"type", "message", "path"}}}}. `samples` lists
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


def error_result(kind: str, message: str, path: str | None = None) -> CallToolResult:
    """A tool error: the ``{"error": ...}`` object as text and as structured content."""
    data = error_object(kind, message, path)
    return CallToolResult(
        content=[TextContent(type="text", text=compact(data))],
        structured_content=data,
        is_error=True,
    )


def command_result(
    args: list[str], reshape: Callable[[Any], Any] = lambda data: data, key: str | None = None
) -> CallToolResult:
    """Run ``traceinspect ARGS --json``: its document (``reshape``d) as compact text and as
    structured content (under ``key`` where the document is not an object); its error object
    as a tool error."""
    ok, text = run_json(args)
    try:
        data = json.loads(text)
    except ValueError:
        shown = text[:300] or "nothing"
        return error_result("InternalError", f"traceinspect {args[0]} printed {shown!r}, not JSON.")
    if not ok:
        if isinstance(data, dict) and "error" in data:
            return CallToolResult(
                content=[TextContent(type="text", text=compact(data))],
                structured_content=data,
                is_error=True,
            )
        return error_result("InternalError", f"traceinspect {args[0]} failed: {compact(data)}")
    data = reshape(data)
    structured = {key: data} if key is not None else data
    return CallToolResult(
        content=[TextContent(type="text", text=compact(data))], structured_content=structured
    )


# Argument types, described in the input schema.
_PATH = Annotated[
    str,
    Field(
        description="A *.xplane.pb file, a run directory or a TensorBoard log directory "
        "(or a gs:// or s3:// URL of one)."
    ),
]
_RUN = Annotated[
    str | None, Field(description="Which run of a log directory to read (default: the newest).")
]
_DETAIL = Annotated[
    Detail,
    Field(
        description='"full": the command\'s --json; "summary": without the per-step rows '
        "and, of a multi-host run, each host's own analysis (the pod's verdict, host table, "
        f"straggler and advice stay), and at most {SUMMARY_GAPS} gaps unless top says."
    ),
]
_NAME_RE = Annotated[str | None, Field(description="Regular expression on the event name.")]
_LINE_RE = Annotated[str | None, Field(description="Regular expression on the line (thread) name.")]
_PLANE_RE = Annotated[str | None, Field(description="Regular expression on the plane name.")]
_HOST_RE = Annotated[str | None, Field(description="Regular expression on the host name.")]
_TOP = Annotated[
    int | None,
    Field(
        ge=0,
        description=f"At most this many gaps (longest first), per analysis (default: "
        f"{JSON_GAPS}, all_gaps: all; summary: {SUMMARY_GAPS}).",
    ),
]


def _read_only(title: str, open_world: bool = True) -> ToolAnnotations:
    # A path may be a gs:// or s3:// URL: those tools reach outside this machine.
    return ToolAnnotations(
        title=title,
        read_only_hint=True,
        destructive_hint=False,
        idempotent_hint=True,
        open_world_hint=open_world,
    )


def analyze(
    path: _PATH,
    run: _RUN = None,
    all_gaps: Annotated[bool, Field(description="Every gap (default: the 50 longest).")] = False,
    host: Annotated[
        list[str] | None, Field(description="A multi-host run: analyse only these hosts.")
    ] = None,
    detail: _DETAIL = "full",
    top: _TOP = None,
) -> Annotated[CallToolResult, AnalyzeOutput]:
    """Why the device idled: the verdict (input-bound, sync-bound, compile-bound,
    host-bound, device-bound, unknown; a multi-host run: straggler), idle time by cause,
    the longest idle gaps with their evidence, findings (what is set up wrong, with fixes)
    and recommendations. The JSON of `traceinspect analyze --json`; detail "summary" and
    top return less (a 4-host run: about 4 KB instead of 40), saying what they left out in
    `omitted`."""
    flags = _flags(run=run, all_gaps=all_gaps or needs_all_gaps(top), host=host)
    return command_result(
        ["analyze", path, *flags], reshape=lambda data: trim_analysis(data, detail, top)
    )


def info(path: _PATH, run: _RUN = None) -> Annotated[CallToolResult, InfoOutput]:
    """What a trace holds: hosts, planes, lines (threads) with their event counts and
    spans, backend, steps, profiler options. The JSON of `traceinspect info --json`."""
    return command_result(["info", path, *_flags(run=run)])


def events(
    path: _PATH,
    name: _NAME_RE = None,
    line: _LINE_RE = None,
    plane: _PLANE_RE = None,
    host_re: _HOST_RE = None,
    window: Annotated[
        str | None,
        Field(
            description='"START_MS:END_MS" in ms from the trace\'s first event (either end '
            "may be left out); analyze's gap start_ms is on that clock."
        ),
    ] = None,
    sort: Annotated[
        Literal["start", "duration", "none"],
        Field(description='Order of the events; "duration": longest first.'),
    ] = "start",
    limit: Annotated[int, Field(ge=0, description="At most this many events; 0: all.")] = 50,
    no_stats: Annotated[bool, Field(description="Leave out the stat columns.")] = False,
    run: _RUN = None,
) -> Annotated[CallToolResult, EventsOutput]:
    """The trace's events, filtered by regular expressions and a time window, sorted, at
    most limit of them. The JSON array of `traceinspect events --json` (start_ns,
    duration_ns: ns on the trace's clock); structured content holds it as `events`."""
    flags = _flags(name=name, line=line, plane=plane, host_re=host_re, window=window, sort=sort)
    flags += _flags(limit=limit, no_stats=no_stats, run=run)
    return command_result(["events", path, *flags], key="events")


def compare(
    before: _PATH,
    after: _PATH,
    run_before: _RUN = None,
    run_after: _RUN = None,
) -> Annotated[CallToolResult, CompareOutput]:
    """Two traces of one training loop, before and after a change: step time, device
    busy time, idle time per step by cause and the verdict of each, and what changed.
    The JSON of `traceinspect compare --json`."""
    flags = _flags(run_before=run_before, run_after=run_after)
    return command_result(["compare", before, after, *flags])


def attach(
    addresses: Annotated[
        str,
        Field(
            description='"HOST:PORT[,HOST:PORT...]" of jobs serving their profiler '
            "(jax.profiler.start_server(PORT)); several hosts of a pod trace as one run."
        ),
    ],
    duration_s: Annotated[
        float | None,
        Field(gt=0, description="How long to trace (default: 3 s, or long enough for 20 steps)."),
    ] = None,
    analyze: Annotated[bool, Field(description="Analyse each snapshot too.")] = True,
    logdir: Annotated[
        str, Field(description="Where the traces are written.")
    ] = "traceinspect_logs",
    detail: _DETAIL = "full",
    top: _TOP = None,
) -> Annotated[CallToolResult, AttachOutput]:
    """Trace jobs already running, through their profiler servers, and analyse the
    snapshots. The JSON of `traceinspect capture --attach ADDRESSES --analyze --json`: the
    runs written under logdir, and their analyses (detail and top as for analyze)."""

    def reshape(data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("analyses"), list):
            data["analyses"] = [
                trim_analysis(a, detail, top) if isinstance(a, dict) else a
                for a in data["analyses"]
            ]
        return data

    flags = _flags(duration=duration_s, analyze=analyze, logdir=logdir)
    return command_result(["capture", "--attach", addresses, *flags], reshape=reshape)


def samples() -> Annotated[CallToolResult, SamplesOutput]:
    """The traces bundled with traceinspect and, in a source checkout (the server's working
    directory or one above it), those of its sample_traces/ with their expected verdicts,
    with their paths, to try the other tools on. The JSON of `traceinspect sample --list
    --json`."""
    return command_result(["sample", "--list"])


#: Each tool, with its annotations: all but attach only read (attach writes traces under
#: logdir and talks to the jobs' profiler servers); none deletes or overwrites anything.
TOOLS: dict[str, tuple[Callable[..., CallToolResult], ToolAnnotations]] = {
    "analyze": (analyze, _read_only("Analyze a trace: why the device idles")),
    "info": (info, _read_only("What a trace holds")),
    "events": (events, _read_only("Look up a trace's events")),
    "compare": (compare, _read_only("Compare two traces, before and after a change")),
    "attach": (
        attach,
        ToolAnnotations(
            title="Trace and analyse a running job",
            read_only_hint=False,
            destructive_hint=False,
            idempotent_hint=False,
            open_world_hint=True,
        ),
    ),
    "samples": (samples, _read_only("List the sample traces", open_world=False)),
}


class TraceInspectServer(MCPServer[Any]):
    """The SDK's server, whose every failed call is a tool error holding the ``{"error":
    ...}`` object: the SDK answers an unknown tool and arguments that fail the input schema
    with plain text, which a client that reads every error as JSON cannot parse. Arguments
    a tool does not take are refused too (the SDK ignores them)."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        if name not in TOOLS:
            return error_result(
                "UnknownTool", f"No tool named {name!r}; the tools are {', '.join(TOOLS)}."
            )
        takes = list(inspect.signature(TOOLS[name][0]).parameters)
        unknown = sorted(set(arguments) - set(takes))
        if unknown:
            return error_result(
                "NoSuchOption",
                f"{name} takes no argument {', '.join(map(repr, unknown))}; it takes "
                f"{', '.join(takes) or 'none'}.",
            )
        try:
            return await super().call_tool(name, arguments, context)
        except UnexpectedToolError as exc:
            cause = exc.__cause__
            why = f"{type(cause).__name__}: {cause}" if cause is not None else str(exc)
            return error_result("InternalError", f"the {name} tool failed unexpectedly ({why}).")
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                return _invalid(name, exc.__cause__)
            return error_result("ToolError", str(exc))


def _invalid(tool: str, error: ValidationError) -> CallToolResult:
    """Arguments that fail the input schema, as Click names such errors: a missing
    argument (MissingParameter), else a bad value (BadParameter), one line."""
    problems = error.errors(include_url=False)
    missing = [str(p["loc"][0]) for p in problems if p["type"] == "missing" and p["loc"]]
    if missing:
        return error_result(
            "MissingParameter",
            f"{tool} needs the argument(s) {', '.join(map(repr, missing))} (see its input schema).",
        )
    said = "; ".join(
        f"{'.'.join(str(part) for part in p['loc']) or 'arguments'}: {p['msg']}" for p in problems
    )
    return error_result("BadParameter", f"{tool}: invalid argument(s): {said}.")


def build_server() -> MCPServer[Any]:
    """The MCP server with traceinspect's tools (needs the MCP SDK: ImportError without it)."""
    server = TraceInspectServer(name="traceinspect", version=__version__, instructions=INSTRUCTIONS)
    for name, (tool, hints) in TOOLS.items():
        server.add_tool(
            tool,
            name=name,
            title=hints.title,
            annotations=hints,
            structured_output=True,
        )
    return server
