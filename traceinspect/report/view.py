"""What ``traceinspect view`` says next to XProf's address: the verdict, and where the worst
gaps are on the clock XProf's trace viewer shows, so they can be found there."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from traceinspect import schema as S
from traceinspect.analysis.result import Analysis

# XProf's trace viewer places events at their time in the trace's own clock (XPlane ns, as
# traceinspect's start_ns; checked against xprof 2.24's trace data, event by event), not from
# the first event as analyze's start_ms: the two differ by the first event's offset.
XPROF_MS = "xprof_ms"


def worst_gaps(analyses: Mapping[str, Analysis], top: int) -> list[dict[str, Any]]:
    """The ``top`` longest gaps over every host's analysis, longest first: host, step,
    XProf time, analyze's start_ms, duration, cause and evidence."""
    rows: list[dict[str, Any]] = []
    for host, analysis in analyses.items():
        gaps = analysis.gaps.sort_values(S.DURATION_NS, ascending=False).head(top)
        for gap in gaps.to_dict("records"):
            rows.append(
                {
                    "host": host,
                    S.STEP: int(gap[S.STEP]),
                    XPROF_MS: round(gap[S.START_NS] / 1e6, 3),
                    S.START_MS: round(float(gap[S.START_MS]), 3),
                    "duration_ms": round(gap[S.DURATION_NS] / 1e6, 3),
                    S.CAUSE: gap[S.CAUSE],
                    S.EVIDENCE: list(gap[S.EVIDENCE]),
                }
            )
    rows.sort(key=lambda row: -row["duration_ms"])
    return rows[:top]


def render_view(
    url: str,
    run: str,
    runs: list[str],
    analyses: Mapping[str, Analysis],
    top: int,
    notes: list[str],
) -> str:
    """The address, which run to pick, the verdict per host and the worst gaps."""
    others = f" ({len(runs)} runs there: pick {run})" if len(runs) > 1 else ""
    out = [f"XProf    {url}  run {run}{others}; the trace viewer is under Tools: trace_viewer"]
    for host, analysis in analyses.items():
        where = f" on {host}" if len(analyses) > 1 else ""
        out.append(f"Verdict  {analysis.verdict}{where}: {analysis.summary}")
    gaps = worst_gaps(analyses, top)
    if gaps:
        out.append("")
        out.append(
            "Worst gaps, at their time in XProf's trace viewer (ms on the trace's clock; "
            "analyze's start_ms counts from the first event)"
        )
        several = len(analyses) > 1
        for gap in gaps:
            host = f"{gap['host']}  " if several else ""
            out.append(
                f"  {host}step {gap[S.STEP]:>4}  at {gap[XPROF_MS]:12,.3f} ms  "
                f"{gap['duration_ms']:9,.3f} ms  {gap[S.CAUSE]}"
            )
            out.extend(f"      {line}" for line in gap[S.EVIDENCE][:2])
    out.extend(f"Note: {note}" for note in notes)
    out.append("")
    out.append("Serving until Ctrl-C.")
    return "\n".join(out)
