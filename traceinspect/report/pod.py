"""Text rendering of a multi-host :class:`~traceinspect.analysis.straggler.PodAnalysis`."""

from __future__ import annotations

import math

import pandas as pd

from traceinspect import schema as S
from traceinspect.analysis.straggler import PodAnalysis
from traceinspect.report.analyze import findings_lines

# Recommendations that already name their host in the message.


def _num(value: object, fmt: str = ",.2f") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, fmt)


def render_pod(pod: PodAnalysis, *, max_steps: int = 10) -> str:
    """The pod verdict, every host side by side, the slowest host per step, what to do."""
    out = [f"Verdict   {pod.verdict}: {pod.summary}", ""]
    n_ok = len(pod.analyses)
    aligned = len(pod.per_step)
    out.append(
        f"Run       {pod.run}: {len(pod.results)} host(s), {n_ok} analysed, "
        f"{aligned} step(s) traced by every host (aligned by step number)"
    )
    out.append("")
    header = (
        f"  {'host':<20} {'verdict':<14} {'step ms':>9} {'p90 ms':>9} {'busy ms':>9} "
        f"{'collect. ms':>11} {'input idle':>10}  role"
    )
    out.append("Hosts (per step, median)")
    out.append(header)
    for host, row in pod.hosts.iterrows():
        if row[S.VERDICT] == "error":
            out.append(f"  {host!s:<20} {'error':<14} {row[S.ERROR]}")
            continue
        out.append(
            f"  {host!s:<20} {row[S.VERDICT]:<14} {_num(row[S.MEDIAN_STEP_MS]):>9} "
            f"{_num(row[S.P90_STEP_MS]):>9} {_num(row[S.BUSY_MS_PER_STEP]):>9} "
            f"{_num(row[S.COLLECTIVE_MS_PER_STEP]):>11} "
            f"{_num(row[S.INPUT_IDLE_MS_PER_STEP]):>10}  {row[S.ROLE]}".rstrip()
        )
    if aligned:
        out.append("")
        shown = pod.per_step.head(max_steps)
        out.append("Steps (slowest host, and the host whose device waited longest for input)")
        for r in shown.to_dict(orient="records"):
            starved = (
                f"starved: {r[S.STARVED_HOST]} ({r[S.STARVED_INPUT_IDLE_MS]:,.2f} ms input idle)"
                if pd.notna(r[S.STARVED_HOST])
                else "no host waited for input"
            )
            out.append(
                f"  step {r[S.STEP]:>6}  slowest {r[S.SLOWEST_HOST]} {r[S.SLOWEST_MS]:,.2f} ms "
                f"(fastest {r[S.FASTEST_MS]:,.2f})  {starved}"
            )
        if aligned > len(shown):
            out.append(f"  ... {aligned - len(shown)} more step(s) (--json lists them all)")
    out += findings_lines(
        pod.findings,
        "Findings across hosts (each analysed host's own: analyze HOST_FILE)",
        todo=tuple(r.message for r in pod.recommendations),
    )
    if pod.recommendations:
        out.append("")
        out.append("What to do")
        for rec in pod.recommendations:
            where = f"[{rec.on_host}] " if rec.on_host else ""
            out.append(f"  - {where}{rec.message}")
    for note in pod.notes:
        out.append(f"Note: {note}")
    return "\n".join(out)
