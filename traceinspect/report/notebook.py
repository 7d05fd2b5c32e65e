"""How results look in a notebook: the HTML of a trace, an analysis, a comparison, a pod and
a sweep. ``traceinspect/__init__.py`` registers these functions with IPython's HTML
formatter, so the objects render as HTML and their own layers never import the report."""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING

from traceinspect import schema as S
from traceinspect.sweep._summary import RUN_DIR
from traceinspect.vocabulary import CAUSES

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


def analysis_html(a: Analysis) -> str:
    """The verdict, idle time by cause, and what to do."""
    rows = "".join(
        f"<tr><td>{c}</td><td>{a.idle_by_cause_ms[c]:,.1f}</td>"
        f"<td>{a.cause_fractions[c]:.1%}</td></tr>"
        for c in CAUSES
    )
    recs = "".join(f"<li>{escape(r.message or r.kind)}</li>" for r in a.recommendations)
    return (
        f"<p><b>{escape(a.verdict)}</b>: {escape(a.summary)}</p>"
        f"<table><tr><th>cause</th><th>idle ms</th><th>of step time</th></tr>{rows}</table>"
        f"<ul>{recs}</ul>"
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
    """The chosen worker count and the sweep's table (without the run directories)."""
    table: str = result.rows().drop(columns=[RUN_DIR]).to_html(index=False, na_rep="")
    return f"<p>chosen: <b>{result.chosen}</b> workers</p>{table}"
