"""How results look in a notebook: the HTML of a trace, an analysis, a comparison, a pod and
a sweep. ``traceinspect/__init__.py`` registers these functions with IPython's HTML
formatter, so the objects render as HTML and their own layers never import the report."""

from __future__ import annotations

import base64
from html import escape
from typing import TYPE_CHECKING

from traceinspect import schema as S
from traceinspect.report.axes import figure_of as _figure_of
from traceinspect.report.axes import new_axes as _new_axes
from traceinspect.report.plots import BUSY_COLOR, CAUSE_COLORS, draw_timeline, figure_png
from traceinspect.report.sweep import choice_sentence
from traceinspect.report.titles import top_cause
from traceinspect.sweep._summary import RUN_DIR
from traceinspect.vocabulary import CAUSES, STAGES, band

if TYPE_CHECKING:
    from traceinspect.analysis.compare import Comparison
    from traceinspect.analysis.result import Analysis
    from traceinspect.analysis.straggler import PodAnalysis
    from traceinspect.sweep._summary import SweepResult
    from traceinspect.trace import Trace


def trace_html(trace: Trace) -> str:
    """The run, its size and how it was decoded, and the events per host and plane."""
    summary = trace.lines.groupby([S.HOST, S.PLANE], observed=True)[S.EVENT_COUNT].sum()
    table = summary.to_frame("events").to_html()
    return (
        f"<p><b>Trace</b> <code>{trace.run_name}</code>: {len(trace.hosts)} host(s), "
        f"{trace.event_count:,} events over {trace.span_ns / 1e6:,.1f} ms "
        f"(decoded with {trace.load_info.decoder} in {trace.load_info.seconds:.2f} s)</p>" + table
    )


# The notebook summary: the longest gaps it lists, the steps its timeline shows, and the
# image's size (one small figure: the summary renders in well under a second).
NOTEBOOK_GAPS = 5
NOTEBOOK_TIMELINE_STEPS = 3
_TIMELINE_DPI = 72


def _cause_swatch(cause: str) -> str:
    color = CAUSE_COLORS.get(cause, BUSY_COLOR)
    return (
        f'<span style="display:inline-block;width:0.8em;height:0.8em;margin-right:0.3em;'
        f'background:{color};border-radius:2px"></span>'
    )


def timeline_img(a: Analysis, steps: int = NOTEBOOK_TIMELINE_STEPS) -> str:
    """A few steps' timeline as an inline PNG (``<img>``), drawn from the analysis alone;
    empty when it has no timeline (a pod's compact per-host results) or no step."""
    if a.timeline is None or a.per_step.empty:
        return ""
    ax = _new_axes(9.0, 1.7 + 0.4 * max(1, len(a.devices)))
    draw_timeline(a, a.timeline, steps, ax)
    data = base64.b64encode(figure_png(_figure_of(ax), dpi=_TIMELINE_DPI)).decode("ascii")
    # The alt text says what this run's picture shows: its title holds the finding and
    # the steps drawn.
    alt = (
        "Timeline of the device (busy in grey, idle time hatched in its cause's colour) and "
        f"of what the training thread was doing. {ax.get_title(loc='left')}"
    )
    return f'<img src="data:image/png;base64,{data}" style="max-width:100%" alt="{escape(alt)}">'


def _gap_rows(a: Analysis, top: int) -> str:
    gaps = a.gaps.sort_values(S.DURATION_NS, ascending=False).head(top)
    if gaps.empty:
        return "<p>No idle gaps inside the analysed steps.</p>"
    rows = "".join(
        f"<tr><td>{int(g.step)}</td><td>{float(g.start_ms):,.3f}</td>"
        f"<td>{g.duration_ns / 1e6:,.3f}</td>"
        f"<td>{_cause_swatch(str(g.cause))}{escape(str(g.cause))}</td>"
        f'<td style="text-align:left">{escape(str(g.evidence[0]) if len(g.evidence) else "")}'
        "</td></tr>"
        for g in gaps.itertuples()
    )
    return (
        f"<p><b>Longest gaps</b> ({len(gaps)} of {len(a.gaps)}; ms from the trace's first "
        "event)</p><table><tr><th>step</th><th>at ms</th><th>ms</th><th>cause</th>"
        f'<th style="text-align:left">evidence</th></tr>{rows}</table>'
    )


def analysis_html(a: Analysis) -> str:
    """The verdict, the step time and busy share, a small timeline, idle time by cause, the
    input stages (when measured), the longest gaps, the findings and what to do."""
    cause = top_cause(a)
    color = CAUSE_COLORS.get(cause, BUSY_COLOR) if cause is not None else BUSY_COLOR
    s = a.steps
    causes = "".join(
        f"<tr><td>{_cause_swatch(c)}{c}</td><td>{a.idle_by_cause_ms[c]:,.1f}</td>"
        f"<td>{a.cause_fractions[c]:.1%}</td><td>{band(a.cause_fractions[c])}</td></tr>"
        for c in CAUSES
    )
    recs = "".join(f"<li>{escape(r.message or r.kind)}</li>" for r in a.recommendations)
    notes = "".join(f"<li>{escape(n)}</li>" for n in a.notes)
    found = "".join(
        f"<li><b>{escape(f.rule)}</b> ({escape(f.severity)}): {escape(f.message)}</li>"
        for f in a.findings
    )
    st = a.input_stages
    stages = (
        "<p><b>Input per batch</b>: "
        + ", ".join(f"{s} {st.ms_per_batch[s]:,.2f} ms" for s in STAGES)
        + f"; largest share of a step: <b>{escape(st.dominant)}</b></p>"
        if st is not None
        else ""
    )
    return (
        f'<p><b style="color:{color}">{escape(a.verdict)}</b>: {escape(a.summary)}</p>'
        f"<p>{s.count} steps ({escape(s.source)}): median {s.median_ms:,.2f} ms, p90 "
        f"{s.p90_ms:,.2f} ms; device busy {a.busy_fraction:.1%} of step time, "
        f"{a.device_busy_ms_per_step:,.2f} ms of device work per step</p>"
        + timeline_img(a)
        + "<p><b>Idle time by cause</b> (summed over the steps)</p>"
        "<table><tr><th>cause</th><th>idle ms</th><th>of step time</th><th></th></tr>"
        f"{causes}</table>"
        + stages
        + _gap_rows(a, NOTEBOOK_GAPS)
        + (f"<p><b>Findings</b></p><ul>{found}</ul>" if found else "")
        + (f"<p><b>What to do</b></p><ul>{recs}</ul>" if recs else "")
        + (f'<ul style="color:#8a5a00">{notes}</ul>' if notes else "")
    )


def comparison_html(c: Comparison) -> str:
    """The finding, then before, after and the change, line by line."""
    b, a = c.before, c.after
    rows: list[tuple[str, str, str, str]] = [
        ("verdict", b.verdict, a.verdict, ""),
        (
            "median step (ms)",
            f"{b.median_ms:,.2f}",
            f"{a.median_ms:,.2f}",
            f"{c.median_change_ms:+,.2f} ({c.median_change_pct:+.1f}%)",
        ),
        (
            "p90 step (ms)",
            f"{b.p90_ms:,.2f}",
            f"{a.p90_ms:,.2f}",
            f"{c.p90_change_ms:+,.2f} ({c.p90_change_pct:+.1f}%)",
        ),
        (
            "device busy",
            f"{b.busy_fraction:.1%}",
            f"{a.busy_fraction:.1%}",
            f"{c.busy_fraction_change * 100:+.1f} pts",
        ),
        (
            "idle ms/step",
            f"{b.idle_ms_per_step:,.2f}",
            f"{a.idle_ms_per_step:,.2f}",
            f"{c.idle_change_ms_per_step:+,.2f}",
        ),
    ]
    rows += [
        (
            f"&nbsp;&nbsp;{cause}",
            f"{b.idle_by_cause_ms_per_step[cause]:,.2f}",
            f"{a.idle_by_cause_ms_per_step[cause]:,.2f}",
            f"{c.idle_by_cause_change_ms_per_step[cause]:+,.2f}",
        )
        for cause in CAUSES
    ]
    body = "".join(
        f"<tr><td>{name}</td><td>{escape(x)}</td><td>{escape(y)}</td><td>{escape(d)}</td></tr>"
        for name, x, y, d in rows
    )
    notes = "".join(f"<li>{escape(n)}</li>" for n in c.notes)
    return (
        f"<p>{escape(c.finding)}</p>"
        "<table><tr><th></th><th>before</th><th>after</th><th>change</th></tr>"
        f"{body}</table>" + (f"<ul>{notes}</ul>" if notes else "")
    )


def pod_html(pod: PodAnalysis) -> str:
    """The pod verdict and the host table."""
    table = pod.hosts.to_html(float_format=lambda v: f"{v:,.2f}")
    return f"<p><b>{escape(pod.verdict)}</b>: {escape(pod.summary)}</p>" + table


def sweep_html(result: SweepResult) -> str:
    """The chosen worker count and why, and the sweep's table (without the run
    directories)."""
    table: str = result.rows().drop(columns=[RUN_DIR]).to_html(index=False, na_rep="")
    return f"<p>{escape(choice_sentence(result))}</p>{table}"
