"""Text rendering of a :class:`~traceinspect.analysis.compare.Comparison`, side by side."""

from __future__ import annotations

from traceinspect import schema as S
from traceinspect.analysis.compare import Comparison, ledger_part
from traceinspect.vocabulary import CAUSES

#: Marks the ledger's part that moved most.
MOVED_MOST = "<- moved most"
#: What each run part is, in the table (the detectors' causes).
RUN_PART_NAMES = {
    "stall": "recurring stall, spread over the run",
    "callback": "host callbacks",
    "loop_cpu": "the loop's CPU on the program's cores",
    "pipeline_cpu": "the pipeline's read threads",
}


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
    ]
    rows += _ledger_rows(c)
    for part, moved in c.run_parts_change_ms_per_step.items():
        was, now = b.run_parts_ms_per_step.get(part, 0.0), a.run_parts_ms_per_step.get(part, 0.0)
        label = f"Run part: {RUN_PART_NAMES.get(part, part)} (ms/step)"
        rows.append((label, f"{was:,.2f}", f"{now:,.2f}", f"{moved:+,.2f}"))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for name, x, y, d in rows:
        line = f"{name:<{widths[0]}}  {x:>{widths[1]}}  {y:>{widths[2]}}  {d}"
        out.append(line.rstrip())
    for note in c.notes:
        out.append(f"Note: {note}")
    return "\n".join(out)


def _ledger_rows(c: Comparison) -> list[tuple[str, str, str, str]]:
    """The per-step ledger, ms per step: the wall, then its parts (the device's busy time,
    its idle time and that by cause), the part that moved most marked."""
    b, a, change = (
        c.before.ledger_ms_per_step,
        c.after.ledger_ms_per_step,
        c.ledger_change_ms_per_step,
    )
    idle = ledger_part(S.IDLE_NS)

    def row(label: str, part: str) -> tuple[str, str, str, str]:
        if part == idle:  # the idle causes' sum, as the table had it
            x, y, d = c.before.idle_ms_per_step, c.after.idle_ms_per_step, c.idle_change_ms_per_step
        else:
            x, y, d = b[part], a[part], change[part]
        mark = f"  {MOVED_MOST}" if part == c.moved_most else ""
        return label, f"{x:,.2f}", f"{y:,.2f}", f"{d:+,.2f}{mark}"

    return [
        row("Step wall (ms/step)", ledger_part(S.WALL_NS)),
        row("  device busy", ledger_part(S.BUSY_NS)),
        row("  idle", idle),
        *(row(f"    {cause}", ledger_part(S.idle_cause_ns(cause))) for cause in CAUSES),
    ]
