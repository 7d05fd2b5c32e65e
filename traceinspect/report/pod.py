"""Text rendering of a multi-host :class:`~traceinspect.analysis.straggler.PodAnalysis`."""

from __future__ import annotations

import math

import pandas as pd

from traceinspect.analysis.straggler import PodAnalysis

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
        f"{'collect. ms':>11} {'input wait':>10}  role"
    )
    out.append("Hosts (per step, median)")
    out.append(header)
    for host, row in pod.hosts.iterrows():
        if row["verdict"] == "error":
            out.append(f"  {host!s:<20} {'error':<14} {row['error']}")
            continue
        out.append(
            f"  {host!s:<20} {row['verdict']:<14} {_num(row['median_step_ms']):>9} "
            f"{_num(row['p90_step_ms']):>9} {_num(row['busy_ms_per_step']):>9} "
            f"{_num(row['collective_ms_per_step']):>11} "
            f"{_num(row['input_wait_ms_per_step']):>10}  {row['role']}".rstrip()
        )
    if aligned:
        out.append("")
        shown = pod.per_step.head(max_steps)
        out.append("Steps (slowest host, and the host that waited longest for input)")
        for r in shown.itertuples():
            starved = (
                f"starved: {r.starved_host} ({r.starved_input_wait_ms:,.2f} ms input wait)"
                if pd.notna(r.starved_host)
                else "no host waited for input"
            )
            out.append(
                f"  step {r.step:>6}  slowest {r.slowest_host} {r.slowest_ms:,.2f} ms "
                f"(fastest {r.fastest_ms:,.2f})  {starved}"
            )
        if aligned > len(shown):
            out.append(f"  ... {aligned - len(shown)} more step(s) (--json lists them all)")
    if pod.recommendations:
        out.append("")
        out.append("What to do")
        for rec in pod.recommendations:
            where = f"[{rec.on_host}] " if rec.on_host else ""
            out.append(f"  - {where}{rec.message}")
    for note in pod.notes:
        out.append(f"Note: {note}")
    return "\n".join(out)
