"""One self-contained HTML page of an analysis: verdict, numbers, what to do, gaps, plots.

Self-contained means one file to attach to a bug or a chat: inline CSS, figures embedded
as base64 PNG, no scripts and no links to fetch. Every piece of text from the trace or the
analysis is escaped (event names are user code and may hold ``<``, ``&`` or quotes).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from html import escape
from typing import TYPE_CHECKING, Any

import pandas as pd

from traceinspect import schema as S
from traceinspect.analysis.result import Analysis, Finding
from traceinspect.analysis.straggler import PodAnalysis
from traceinspect.report.input_plots import STAGE_COLORS
from traceinspect.report.plots import (
    BUSY_COLOR,
    CAUSE_COLORS,
    analysis_figures,
    figure_png,
)
from traceinspect.report.titles import finding
from traceinspect.trace import Trace
from traceinspect.vocabulary import CAUSES, STAGES, band

if TYPE_CHECKING:
    from matplotlib.figure import Figure

FIGURE_CAPTIONS = {
    "timeline": (
        "A few steps in time. Grey: the device is busy; hatched colour: the device is idle "
        "because of that cause. Bottom lane: what the training thread was doing."
    ),
    "step_breakdown": "Each step's time: device busy, then idle time by cause.",
    "gap_distribution": "Every idle gap by duration, grouped by the cause of most of it.",
    "input_stages": (
        "Where a batch's time goes, by input-pipeline stage (worker stages divided by the "
        "worker count), against the device's work per step (dashed): a batch that takes "
        "longer than the line makes the device wait."
    ),
    "step_curve": (
        "The whole run: every step's host time as capture saw it, the traced window shaded "
        "(blue: opened once the run was steady; orange: traced before it was)."
    ),
}

_CSS = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #222;
       max-width: 1100px; margin: 2em auto; padding: 0 1em; }
h1 { font-size: 1.4em; margin-bottom: 0.2em; }
h2 { font-size: 1.15em; margin-top: 1.8em; border-bottom: 1px solid #ddd; }
.path { color: #666; font-family: ui-monospace, monospace; font-size: 0.9em; }
.verdict { font-size: 1.15em; padding: 0.7em 1em; border-left: 6px solid #888;
           background: #f6f6f6; }
table { border-collapse: collapse; margin: 0.5em 0; }
th, td { padding: 0.25em 0.8em; text-align: left; vertical-align: top;
         border-bottom: 1px solid #eee; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.chip { display: inline-block; width: 0.9em; height: 0.9em; margin-right: 0.4em;
        vertical-align: -0.1em; border-radius: 2px; }
ul.evidence { margin: 0; padding-left: 1.1em; font-size: 0.92em; }
p.why { margin: 0.2em 0 0; font-size: 0.92em; font-style: italic; }
figure { margin: 1.2em 0; }
figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { color: #555; font-size: 0.9em; }
.note { color: #8a5a00; }
"""


def _chip(color: str) -> str:
    return f'<span class="chip" style="background:{escape(color)}"></span>'


def _numbers(a: Analysis) -> str:
    s = a.steps
    rows = [
        ("Backend", f"{a.backend} ({', '.join(a.devices)})"),
        ("Steps", f"{s.count} complete steps from {s.source}"),
        (
            "Step time",
            f"median {s.median_ms:,.2f} ms, p90 {s.p90_ms:,.2f} ms, mean {s.mean_ms:,.2f} ms"
            + (" (bursty: figures use the mean)" if s.bursty else ""),
        ),
        ("Device", f"busy {a.busy_fraction:.1%} of step time, idle {a.idle_fraction:.1%}"),
        ("Device work", f"{a.device_busy_ms_per_step:,.2f} ms/step"),
        ("Input work", f"{a.input_ms_per_step:,.2f} ms/step on the training thread"),
    ]
    head = "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in rows)
    causes = "".join(
        f"<tr><td>{_chip(CAUSE_COLORS[c])}{escape(c)}</td>"
        f'<td class="num">{a.idle_by_cause_ms[c]:,.2f}</td>'
        f'<td class="num">{a.cause_fractions[c]:.1%}</td>'
        f"<td>{escape(band(a.cause_fractions[c]))}</td></tr>"
        for c in CAUSES
    )
    return (
        f"<table>{head}</table>"
        "<h2>Idle time by cause</h2>"
        "<table><tr><th>cause</th><th>idle ms (all steps)</th><th>of step time</th>"
        f"<th></th></tr>{causes}</table>"
        + _stages_table(a)
        + _findings_list(a.findings, [r.message for r in a.recommendations])
    )


def _findings_list(findings: Sequence[Finding], todo: Sequence[str] = ()) -> str:
    """What is set up wrong, when anything is; a fix already listed under What to do (at
    the top of the page, ``todo``) points there instead of repeating it."""
    if not findings:
        return ""
    items = "".join(
        f"<li><b>{escape(f.rule)}</b> ({escape(f.severity)}): {escape(f.message)}"
        "<br><i>Fix:</i> "
        + ("under What to do, at the top." if f.fix in todo else escape(f.fix))
        + "</li>"
        for f in findings
    )
    return f"<h2>Findings</h2><ul>{items}</ul>"


def _stages_table(a: Analysis) -> str:
    """The input pipeline's stages, when capture measured them: per batch, how many ran at
    once, per step, and their sum against the step."""
    st = a.input_stages
    if st is None:
        return ""
    parallel = st.parallel or {}
    rows = "".join(
        f"<tr><td>{_chip(STAGE_COLORS[s])}{escape(s)}</td>"
        f'<td class="num">{st.ms_per_batch[s]:,.2f}</td>'
        f'<td class="num">{parallel.get(s, 1.0):,.3g}</td>'
        f'<td class="num">{st.effective_ms[s]:,.2f}</td><td>{escape(st.where[s])}</td></tr>'
        for s in STAGES
    )
    total = st.pipeline_ms_per_step()
    return (
        f"<h2>Input pipeline by stage</h2><p>Largest share of a step: <b>{escape(st.dominant)}"
        f"</b>. The stages make a batch every {total:,.2f} ms, against a "
        f"{a.steps.typical_ms:,.2f} ms step and {st.budget_ms:,.2f} ms of device work per step. "
        "A stage's ms per step is its time per batch over how many ran at once (workers x "
        "read threads).</p>"
        "<table><tr><th>stage</th><th>ms per batch</th><th>at once</th><th>ms per step</th>"
        f"<th>where</th></tr>{rows}"
        '<tr><td><b>read + preprocessing + batch</b></td><td></td><td></td><td class="num">'
        f"<b>{total:,.2f}</b></td><td></td></tr></table>"
    )


def _gaps(a: Analysis, top: int) -> str:
    gaps = a.gaps.sort_values(S.DURATION_NS, ascending=False).head(top)
    if gaps.empty:
        return "<p>No idle gaps inside the analysed steps.</p>"
    rows = []
    for g in gaps.itertuples():
        cause = str(g.cause)
        evidence = "".join(f"<li>{escape(str(line))}</li>" for line in g.evidence)
        reason = getattr(g, S.CAUSE_REASON)
        why = f'<p class="why">why: {escape(reason)}</p>' if isinstance(reason, str) else ""
        rows.append(
            f'<tr><td class="num">{int(g.step)}</td>'
            f'<td class="num">{float(g.start_ms):,.3f}</td>'
            f'<td class="num">{g.duration_ns / 1e6:,.3f}</td>'
            f"<td>{_chip(CAUSE_COLORS.get(cause, BUSY_COLOR))}{escape(cause)}</td>"
            f'<td><ul class="evidence">{evidence}</ul>{why}</td></tr>'
        )
    return (
        f"<p>The {len(gaps)} longest of {len(a.gaps)} gaps.</p>"
        "<table><tr><th>step</th><th>at ms</th><th>ms</th><th>cause</th><th>evidence</th></tr>"
        + "".join(rows)
        + "</table>"
    )


def _figures(
    figures: Mapping[str, Figure],
    captions: Mapping[str, str] | None = None,
    alts: Mapping[str, str] | None = None,
) -> str:
    """Each figure as an inline PNG with its caption; its alt text says what it shows in
    numbers where ``alts`` has them (a reader that cannot see the picture gets its
    content), else its caption."""
    captions = FIGURE_CAPTIONS if captions is None else captions
    alts = alts or {}
    out = []
    for name, fig in figures.items():
        data = base64.b64encode(figure_png(fig)).decode("ascii")
        caption = captions.get(name, name.replace("_", " "))
        alt = alts.get(name, caption)
        out.append(
            f'<figure><img src="data:image/png;base64,{data}" alt="{escape(alt)}">'
            f"<figcaption>{escape(caption)}</figcaption></figure>"
        )
    return "".join(out)


def figure_alts(a: Analysis) -> dict[str, str]:
    """What the analysis figures show, in numbers, by figure name (their alt text). The
    step breakdown's are means over its steps, so they add up to the step."""
    s, rows = a.steps, a.per_step
    idle = sorted(
        ((c, ms) for c, ms in a.idle_by_cause_ms.items() if ms > 0), key=lambda cm: -cm[1]
    )
    alts: dict[str, str] = {
        "gap_distribution": (
            f"{len(a.gaps)} idle gaps by duration; idle time by cause over all steps: "
            + (", ".join(f"{c} {ms:,.2f} ms" for c, ms in idle) or "none")
            + "."
        ),
    }
    if len(rows):
        per_step = ", ".join(
            f"{c} {rows[S.idle_cause_ns(c)].mean() / 1e6:,.2f} ms" for c, _ in idle
        )
        alts["step_breakdown"] = (
            f"Bars for {len(rows)} steps (median {s.median_ms:,.2f} ms, p90 {s.p90_ms:,.2f}); "
            f"on average {rows[S.WALL_NS].mean() / 1e6:,.2f} ms a step: the device busy "
            f"{rows[S.BUSY_NS].mean() / 1e6:,.2f} ms"
            + (f", idle by cause {per_step}." if per_step else ", never idle.")
        )
    st = a.input_stages
    if st is not None:
        alts["input_stages"] = (
            "Per input-pipeline stage, ms per step: "
            + ", ".join(f"{stage} {st.effective_ms[stage]:,.2f}" for stage in STAGES)
            + f"; the device's work {st.budget_ms:,.2f} ms per step; largest: {st.dominant}."
        )
    return alts


def render_html(
    trace: Trace,
    analysis: Analysis,
    *,
    figures: Mapping[str, Figure] | None = None,
    top_gaps: int = 10,
) -> str:
    """The page for ``analyze --html``. ``figures`` defaults to
    :func:`~traceinspect.report.plots.analysis_figures` (pass them when already drawn)."""
    a = analysis
    if figures is None:
        figures = analysis_figures(trace, a)
    recs = "".join(f"<li>{escape(r.message or r.kind)}</li>" for r in a.recommendations)
    notes = "".join(f'<p class="note">Note: {escape(n)}</p>' for n in a.notes)
    title = f"traceinspect: {a.verdict} ({trace.path.name})"
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{_CSS}</style></head><body>"
        f"<h1>{escape(finding(a))}</h1>"
        f'<p class="path">{escape(str(a.path))}</p>'
        f'<p class="verdict"><b>{escape(a.verdict)}</b>: {escape(a.summary)}</p>'
        f"{notes}"
        f"<h2>What to do</h2><ul>{recs or '<li>Nothing to change.</li>'}</ul>"
        f"<h2>Numbers</h2>{_numbers(a)}"
        f"<h2>Plots</h2>{_figures(figures, alts=figure_alts(a))}"
        f"<h2>Longest gaps</h2>{_gaps(a, top_gaps)}"
        "</body></html>\n"
    )


POD_FIGURE_CAPTIONS = {
    "hosts": (
        "Each host's median step: device compute (grey), time inside collectives (hatched "
        "grey: the device waits there for the other hosts) and idle time by cause."
    ),
    "host_steps": (
        "Step time of every host, step by step; the straggler's input idle time (its device "
        "idle, waiting for input) as bars."
    ),
}


def render_pod_html(pod: PodAnalysis, *, figures: Mapping[str, Figure] | None = None) -> str:
    """The page for ``analyze --html`` on a run with several hosts."""
    from traceinspect.report.pod_plots import pod_figures

    if figures is None:
        figures = pod_figures(pod)
    recs = "".join(f"<li>{escape(r.message or r.kind)}</li>" for r in pod.recommendations)
    notes = "".join(f'<p class="note">Note: {escape(n)}</p>' for n in pod.notes)
    columns = [
        (S.VERDICT, "verdict", None),
        (S.MEDIAN_STEP_MS, "step ms", ",.2f"),
        (S.P90_STEP_MS, "p90 ms", ",.2f"),
        (S.BUSY_MS_PER_STEP, "busy ms", ",.2f"),
        (S.COLLECTIVE_MS_PER_STEP, "in collectives ms", ",.2f"),
        (S.INPUT_IDLE_MS_PER_STEP, "input idle ms", ",.2f"),
        (S.ROLE, "role", None),
    ]
    head = "".join(f"<th>{escape(label)}</th>" for _, label, _ in columns)
    rows = []
    for host, row in pod.hosts.iterrows():
        cells = []
        for key, _, fmt in columns:
            value: Any = row.get(key)
            missing = value is None or pd.isna(value)
            if fmt is None or missing:
                text = "" if missing else str(value)
                if key == S.VERDICT and value == "error":
                    text = f"error: {row.get(S.ERROR)}"
                cells.append(f"<td>{escape(text)}</td>")
            else:
                cells.append(f'<td class="num">{format(float(value), fmt)}</td>')
        rows.append(f"<tr><td>{escape(str(host))}</td>{''.join(cells)}</tr>")
    table = f"<table><tr><th>host</th>{head}</tr>{''.join(rows)}</table>"
    captions = {**FIGURE_CAPTIONS, **POD_FIGURE_CAPTIONS}
    title = f"traceinspect: {pod.verdict} ({pod.run})"
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{_CSS}</style></head><body>"
        f"<h1>{escape(pod.verdict)}: {len(pod.results)} hosts</h1>"
        f'<p class="path">{escape(pod.path)}</p>'
        f'<p class="verdict"><b>{escape(pod.verdict)}</b>: {escape(pod.summary)}</p>'
        f"{notes}"
        f"<h2>What to do</h2><ul>{recs or '<li>Nothing to change.</li>'}</ul>"
        f"<h2>Hosts (per step, median)</h2>{table}"
        f"{_findings_list(pod.findings, [r.message for r in pod.recommendations])}"
        f"<h2>Plots</h2>{_figures(figures, captions)}"
        "</body></html>\n"
    )
