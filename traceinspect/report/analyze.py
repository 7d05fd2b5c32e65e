"""Text rendering of an :class:`~traceinspect.analysis.analyze.Analysis`."""

from __future__ import annotations

from traceinspect import schema as S
from traceinspect.analysis.input_stages import InputStages
from traceinspect.analysis.result import Analysis, Finding
from traceinspect.vocabulary import CAUSES, STAGES, band


def findings_lines(
    findings: tuple[Finding, ...], title: str = "Findings", todo: tuple[str, ...] = ()
) -> list[str]:
    """A findings section (a blank line, the title, each finding and its fix), or nothing.
    A fix that "What to do" (``todo``, printed below) gives word for word points there."""
    if not findings:
        return []
    out = ["", title]
    for f in findings:
        out.append(f"  [{f.severity}] {f.rule}: {f.message}")
        out.append(f"      fix: {'under What to do, below' if f.fix in todo else f.fix}")
    return out


def _stages_line(st: InputStages, step_ms: float | None = None) -> str:
    """``Input     per step: read 0.26 ms (4.10 ms a batch, 16 at once; workers), ...``:
    a stage's time per batch over how many ran at once, both where they differ, and the
    stages' sum against the step."""
    parts = []
    for stage in STAGES:
        name = "prefetch wait" if stage == "prefetch" else stage
        per_step, per_batch = st.effective_ms[stage], st.ms_per_batch[stage]
        where = st.where[stage] if stage not in ("prefetch", "transfer") else ""
        inner = []
        if abs(per_batch - per_step) > 0.005:
            at_once = (st.parallel or {}).get(stage)
            together = f", {at_once:,.3g} at once" if at_once else ""
            inner.append(f"{per_batch:,.2f} ms a batch{together}")
        if where:
            inner.append(where)
        detail = f" ({'; '.join(inner)})" if inner else ""
        parts.append(f"{name} {per_step:,.2f} ms{detail}")
    workers = f"{st.workers} worker process(es)" if st.workers else "no worker processes"
    step = f"the step takes {step_ms:,.2f} ms, " if step_ms else ""
    return (
        f"Input     per step: {', '.join(parts)}; {workers}: the stages make a batch every "
        f"{st.pipeline_ms_per_step():,.2f} ms; {step}the device's work "
        f"{st.budget_ms:,.2f} ms; the largest is {st.dominant}"
    )


def decided_line(a: Analysis) -> str | None:
    """Which rule of the decision table named the verdict, on what figure, and the
    runner-up (``decided_by``); None for an analysis without a decision."""
    d = a.decision
    if d is None:
        return None
    if d.cause == "device":
        what = f"the device busy {d.share:.0%} of step time"
    else:
        basis = {
            "observed": "idle time",
            "inferred": "inferred",
            "measured": "measured over the run",
        }[d.basis]
        what = f"{d.cause}, {d.share:.0%} of step time ({basis})"
    runner = f"; runner-up {d.runner_up} {d.runner_up_share:.0%}" if d.runner_up else ""
    return f"Decided   by rule {d.rule}: {what}{runner}"


def render_analysis(a: Analysis, *, top_gaps: int = 5) -> str:
    decided = decided_line(a)
    out = [f"Verdict   {a.verdict}: {a.summary}", *([decided] if decided else []), ""]
    devices = ", ".join(a.devices)
    out.append(f"Backend   {a.backend} ({devices})")
    s = a.steps
    out.append(
        f"Steps     {s.count} complete steps from {s.source}; median {s.median_ms:,.2f} ms, "
        f"p90 {s.p90_ms:,.2f} ms, mean {s.mean_ms:,.2f} ms"
        + (" (bursty: figures use the mean)" if s.bursty else "")
    )
    w = a.window
    if w and w.get("reason"):
        rep = ""
        if w.get("representative") is not None:
            side = "before" if w.get("before_mean_ms") is not None else "after"
            rep = (
                f"; the {w[f'{side}_steps']} untraced steps {side} it ran at "
                f"{w[f'{side}_mean_ms']:,.2f} ms/step"
            )
        done = w.get("traced_completed_ms")
        if done is not None:
            rep += f"; completed steps {done:,.2f} ms each (the device's throughput)"
        out.append(f"Window    {w['reason']}{rep}")
    out.append(
        f"Device    busy {a.busy_fraction:.1%} of step time, idle {a.idle_fraction:.1%}; "
        f"device work {a.device_busy_ms_per_step:,.2f} ms/step, training thread in input "
        f"(fetching or waiting for batches) {a.input_ms_per_step:,.2f} ms/step"
    )
    if a.input_stages is not None:
        out.append(_stages_line(a.input_stages, a.steps.typical_ms))
    out.append("")
    out.append("Idle time by cause (summed over the steps)")
    for cause in CAUSES:
        ms = a.idle_by_cause_ms[cause]
        frac = a.cause_fractions[cause]
        label = band(frac)
        out.append(f"  {cause:<8} {ms:>12,.2f} ms  {frac:6.1%} of step time  {label}".rstrip())
    g = a.gap_columns
    longest = a.longest_gaps(top_gaps)
    if longest:
        out.append("")
        out.append(f"Longest gaps (of {len(g[S.DURATION_NS])})")
        for i in longest:
            out.append(
                f"  step {g[S.STEP][i]:>4}  at {g[S.START_MS][i]:10,.3f} ms  "
                f"{g[S.DURATION_NS][i] / 1e6:9,.3f} ms  {g[S.CAUSE][i]}"
            )
            for line in g[S.EVIDENCE][i]:
                out.append(f"      {line}")
            if g[S.CAUSE_REASON][i] is not None:
                out.append(f"      why: {g[S.CAUSE_REASON][i]}")
    out += findings_lines(a.findings, todo=tuple(r.message for r in a.recommendations))
    if a.recommendations:
        out.append("")
        out.append("What to do")
        for rec in a.recommendations:
            out.append(f"  - {rec.message}")
    for note in a.notes:
        out.append(f"Note: {note}")
    return "\n".join(out)
