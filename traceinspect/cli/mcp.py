"""`traceinspect mcp`: the read-and-analyse commands as tools for coding agents, over MCP.

Each tool runs the command of its name with ``--json`` in this process and returns what that
prints: the same JSON document as ``traceinspect <command> --json`` (compact, and as
structured content under the tool's output schema), errors included (a tool error whose text
is the ``{"error": {...}}`` object; an unknown tool and arguments that fail the input schema
too). The server is the official MCP Python
SDK's (``pip install 'traceinspect[mcp]'``), on stdio (``_mcp_server``). docs/agents.md and the
agent skill docs/skills/traceinspect/SKILL.md say how to use it.
"""

from __future__ import annotations

import click

from traceinspect.cli._options import verbose_option
from traceinspect.errors import TraceInspectError


@click.command()
@verbose_option
def mcp() -> None:
    """Serve analyze, info, events, compare and attach to coding agents over MCP (stdio).

    An MCP server on stdin/stdout, with the official MCP Python SDK
    (pip install 'traceinspect[mcp]'). Each tool returns the JSON of the command's --json
    (compact; also as structured content), every error as {"error": {...}}; analyze can
    return a summary (detail "summary", top N gaps). Register it with an agent as the
    command `traceinspect mcp`; docs/agents.md and docs/skills/traceinspect/SKILL.md say
    more.

    \b
    Examples:
      traceinspect mcp
      claude mcp add traceinspect -- traceinspect mcp
    """
    try:
        from traceinspect.cli._mcp_server import build_server
    except ImportError as exc:
        raise TraceInspectError(
            f"traceinspect mcp needs the MCP Python SDK ({exc}): pip install 'traceinspect[mcp]'."
        ) from None
    build_server().run("stdio")
