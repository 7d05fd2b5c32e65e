"""Text rendering of a :class:`~traceinspect.analysis.compare.Comparison`, side by side."""

from __future__ import annotations

from traceinspect.analysis.compare import Comparison
from traceinspect.vocabulary import CAUSES


def render_comparison(c: Comparison) -> str:
    b, a = c.before, c.after
    out = [c.finding, ""]
    out.append(f"Before  {b.path}  ({b.steps} steps, {b.backend})")
    out.append(f"After   {a.path}  ({a.steps} steps, {a.backend})")
    out.append("")
    rows: list[tuple[str, str, str, str]] = [
        ("", "before", "after", "change"),
        ("Verdict", b.verdict, a.verdict, ""),
        (
            "Step time median (ms)",
            f"{b.median_ms:,.2f}",
            f"{a.median_ms:,.2f}",
            f"{c.median_change_ms:+,.2f} ({c.median_change_pct:+.1f}%)",
        ),
        (
            "Step time p90 (ms)",
            f"{b.p90_ms:,.2f}",
            f"{a.p90_ms:,.2f}",
            f"{c.p90_change_ms:+,.2f} ({c.p90_change_pct:+.1f}%)",
        ),
        (
            "Device busy",
            f"{b.busy_fraction:.1%}",
            f"{a.busy_fraction:.1%}",
            f"{c.busy_fraction_change * 100:+.1f} pts",
        ),
        (
            "Device work (ms/step)",
            f"{b.device_busy_ms_per_step:,.2f}",
            f"{a.device_busy_ms_per_step:,.2f}",
            f"{c.device_busy_change_ms_per_step:+,.2f}",
        ),
        (
            "Idle (ms/step)",
            f"{b.idle_ms_per_step:,.2f}",
            f"{a.idle_ms_per_step:,.2f}",
            f"{c.idle_change_ms_per_step:+,.2f}",
        ),
    ]
    rows += [
        (
            f"  {cause}",
            f"{b.idle_by_cause_ms_per_step[cause]:,.2f}",
            f"{a.idle_by_cause_ms_per_step[cause]:,.2f}",
            f"{c.idle_by_cause_change_ms_per_step[cause]:+,.2f}",
        )
        for cause in CAUSES
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for name, x, y, d in rows:
        line = f"{name:<{widths[0]}}  {x:>{widths[1]}}  {y:>{widths[2]}}  {d}"
        out.append(line.rstrip())
    for note in c.notes:
        out.append(f"Note: {note}")
    return "\n".join(out)
