"""What the tools of `traceinspect mcp` return: each tool's output schema, the error object
every failure is, and analyze's JSON cut to the detail asked for (imports pydantic, which the
MCP SDK brings: only ``_mcp_server`` imports this module)."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

#: How much of an analysis a tool returns: "full" is the command's --json; "summary" leaves
#: out the per-step rows and, of a multi-host run, each host's own analysis.
Detail = Literal["summary", "full"]
#: The gaps "summary" keeps when no ``top`` is given: as many as the text report shows.
SUMMARY_GAPS = 5
#: The gaps ``analyze --json`` holds without --all-gaps.
JSON_GAPS = 50


def compact(data: Any) -> str:
    """JSON without indentation or spaces: what the tools' text content holds."""
    return json.dumps(data, separators=(",", ":"))


def error_object(kind: str, message: str, path: str | None = None) -> dict[str, Any]:
    """The ``{"error": {type, message, path}}`` object of every command's --json."""
    return {"error": {"type": kind, "message": message, "path": path}}


# --------------------------------------------------------------------------------------------
# Output schemas: the fields an agent reads first, each described; every command prints more
# (additionalProperties), as docs/agents.md and the skill say.
# --------------------------------------------------------------------------------------------


class _Output(BaseModel):
    model_config = ConfigDict(extra="allow")


class AnalyzeOutput(_Output):
    """The JSON of ``traceinspect analyze --json`` (one host, or a multi-host run's pod view,
    which has ``hosts_table`` and ``straggler`` instead of ``gaps`` and ``per_step``)."""

    path: str = Field(description="The trace file, run directory or log directory analysed.")
    verdict: str = Field(
        description="input-bound, sync-bound, compile-bound, host-bound, device-bound or "
        "unknown; a multi-host run: straggler, or error when no host could be analysed "
        "(docs/verdicts.md)."
    )
    summary: str = Field(description="One paragraph saying why, with the numbers.")
    decided_by: dict[str, Any] | None = Field(
        None, description="The rule of the decision table that named the verdict, and its figures."
    )
    recommendations: list[dict[str, Any]] = Field(
        default_factory=list, description="What to do, most useful first."
    )
    findings: list[dict[str, Any]] = Field(
        default_factory=list, description="What is set up wrong, each with its fix."
    )
    notes: list[str] = Field(default_factory=list, description="Caveats on the numbers.")
    gaps: list[dict[str, Any]] | None = Field(
        None, description="One host: the longest idle gaps, longest first, with their evidence."
    )
    hosts_table: list[dict[str, Any]] | None = Field(
        None, description="A multi-host run: one row per host (verdict, step time, role)."
    )
    omitted: dict[str, int] | None = Field(
        None,
        description="Present when detail or top left entries out: how many, by field "
        "(per_step, gaps, steps, hosts[].analysis).",
    )


class InfoOutput(_Output):
    """The JSON of ``traceinspect info --json``."""

    path: str
    run: str | None = Field(None, description="The run read (of a log directory: one of runs).")
    hosts: list[Any] = Field(default_factory=list)
    backend: dict[str, Any] | None = None
    event_count: int = Field(description="How many events the trace holds.")
    planes: list[dict[str, Any]] = Field(default_factory=list)
    lines: list[dict[str, Any]] = Field(
        default_factory=list, description="The lines (threads) with their event counts and spans."
    )
    steps: dict[str, Any] | None = None


class EventsOutput(_Output):
    """``traceinspect events --json``'s array, as ``events`` (structured content is an
    object; the text content is the array itself)."""

    events: list[dict[str, Any]] = Field(
        description="One object per event: start_ns and duration_ns (ns on the trace's clock), "
        "host, plane, line, name, and a column per stat."
    )


class CompareOutput(_Output):
    """The JSON of ``traceinspect compare --json``."""

    before: dict[str, Any]
    after: dict[str, Any]
    change: dict[str, Any] = Field(description="What changed, per figure.")
    finding: str = Field(description="One sentence saying what changed.")
    notes: list[str] = Field(default_factory=list)


class AttachOutput(_Output):
    """The JSON of ``traceinspect capture --attach ADDRESSES --analyze --json``."""

    runs: list[dict[str, Any]] = Field(description="The snapshots: each run directory written.")
    analyses: list[dict[str, Any]] | None = Field(
        None, description="Each run's analysis, as the analyze tool returns it."
    )
    comparison: dict[str, Any] | None = Field(
        None, description="Several snapshots: the first against the last, as compare returns it."
    )


class Sample(BaseModel):
    name: str
    path: str
    about: str | None = None
    where: Literal["package", "sample_traces"] = Field(
        description="package: shipped inside traceinspect; sample_traces: a source checkout's."
    )


class SamplesOutput(_Output):
    """The JSON of ``traceinspect sample --list --json``."""

    samples: list[Sample]
    sample_traces: str | None = Field(
        None, description="The checkout's sample_traces/ listed, or null where none was found."
    )
    note: str | None = Field(None, description="Where sample_traces/ was looked for, if not found.")


# --------------------------------------------------------------------------------------------
# detail and top
# --------------------------------------------------------------------------------------------


def needs_all_gaps(top: int | None) -> bool:
    """Whether the command must print every gap (--all-gaps) for ``top`` to be honoured."""
    return top is not None and top > JSON_GAPS


def trim_analysis(data: dict[str, Any], detail: Detail, top: int | None) -> dict[str, Any]:
    """``analyze --json``'s document (one host's or a pod's) cut to ``detail`` and ``top``
    gaps, with ``omitted`` counting what was left out (absent when nothing was)."""
    omitted: dict[str, int] = {}
    if top is None and detail == "summary":
        top = SUMMARY_GAPS
    out = dict(data)
    if "hosts_table" in out:  # a multi-host run
        if detail == "summary":
            _cut(out, "steps", 0, omitted)
            hosts = [dict(h) for h in out.get("hosts") or []]
            dropped = sum(h.pop("analysis", None) is not None for h in hosts)
            out["hosts"] = hosts
            if dropped:
                omitted["hosts[].analysis"] = dropped
        elif top is not None:
            hosts = [dict(h) for h in out.get("hosts") or []]
            for h in hosts:
                if isinstance(h.get("analysis"), dict):
                    h["analysis"] = dict(h["analysis"])
                    _cut(h["analysis"], "gaps", top, omitted, "hosts[].analysis.gaps")
            out["hosts"] = hosts
    else:
        if detail == "summary":
            _cut(out, "per_step", 0, omitted)
        if top is not None:
            _cut(out, "gaps", top, omitted)
    if omitted:
        out["omitted"] = omitted
    return out


def _cut(
    data: dict[str, Any], key: str, keep: int, omitted: dict[str, int], name: str | None = None
) -> None:
    rows = data.get(key)
    if isinstance(rows, list) and len(rows) > keep:
        data[key] = rows[:keep]
        name = name or key
        omitted[name] = omitted.get(name, 0) + len(rows) - keep
