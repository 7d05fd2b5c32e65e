"""An isolation's text: the three figures, the verdict, the rule that decided and why."""

from __future__ import annotations

from traceinspect.isolate import DESCRIPTIONS, LOADER, PHASE_NAMES, Isolation, PhaseTiming


def _row(timing: PhaseTiming) -> list[str]:
    unit = "batches" if timing.phase == LOADER else "steps"
    if timing.timed_by == "completed":
        unit = f"completed {unit}"
    what = DESCRIPTIONS[timing.phase].split(" (", 1)[1].rstrip(")")
    how = "" if timing.how == "steady" else f", {timing.how.replace('_', '-')}"
    runs = ""
    if timing.spread is not None:
        runs = f"; best of {len(timing.runs_ms)} runs, up to {timing.runs_ms[-1]:,.2f} ms"
    return [
        PHASE_NAMES[timing.phase],
        f"{timing.mean_ms:,.2f} ms",
        f"({timing.count} {unit}{how}{runs}; {what})",
    ]


def render_isolation(result: Isolation) -> str:
    """The figures as a small table, then the verdict, the rule and any notes."""
    rows = [_row(t) for t in result.phases]
    widths = [max(len(r[i]) for r in rows) for i in range(2)]
    lines = [f"{r[0]:<{widths[0]}}  {r[1]:>{widths[1]}}  {r[2]}" for r in rows]
    lines += ["", f"Verdict  {result.verdict}: {result.reason}", f"Rule     {result.rule}"]
    if result.suggested_workers is not None:
        expected = result.workers.expected_step_ms if result.workers is not None else None
        then = f"; expected step time {expected:.2f} ms" if expected is not None else ""
        lines.append(f"Workers  {result.suggested_workers} (now {result.evidence.workers}{then})")
    lines += [f"Note     {note}" for note in result.notes]
    if any(t.timed_by == "completed" for t in result.phases):
        lines.append(
            "Steps    timed when their device work finished (the device's throughput, not "
            "the host's dispatch rate)"
        )
    return "\n".join(lines)
