"""Each thing said once: a finding's fix is not repeated word for word under "What to do"
(text and HTML)."""

from __future__ import annotations

from pathlib import Path

import traceinspect
from traceinspect.analysis.analyze import analyze
from traceinspect.report.analyze import render_analysis
from traceinspect.report.html import render_html

# A capture whose worker finding's fix is also the worker recommendation.
ONE_WORKER = Path(__file__).resolve().parents[1] / "sample_traces" / "scenarios" / "one_worker"


def test_a_fix_given_by_a_finding_is_not_repeated_under_what_to_do() -> None:
    trace = traceinspect.load(ONE_WORKER, use_cache=False)
    a = analyze(trace)
    (finding,) = [f for f in a.findings if f.fix in {r.message for r in a.recommendations}]
    text = render_analysis(a)
    assert text.count(finding.fix) == 1
    findings, todo = text.split("\nFindings\n", 1)[1].split("\nWhat to do\n", 1)
    assert "      fix: under What to do, below" in findings.splitlines()
    assert f"  - {finding.fix}" in todo.splitlines()
    html = render_html(trace, a, figures={})
    assert html.count(finding.fix) == 1  # under What to do, at the top
    assert "<i>Fix:</i> under What to do, at the top." in html
    assert html.index(finding.fix) < html.index("<h2>Findings</h2>")
