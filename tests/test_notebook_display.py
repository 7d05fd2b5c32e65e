"""Notebooks show results as HTML from the report layer: ``import traceinspect`` inside a
running IPython shell registers traceinspect.report.notebook's functions with the shell's
HTML formatter; outside one it imports no IPython and changes nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Each result type, built from the bundled samples, shown by a notebook-like shell: the HTML
# it displays must be the report function's, byte for byte.
_IN_A_SHELL = """
from IPython.core.interactiveshell import InteractiveShell

shell = InteractiveShell.instance()  # a shell runs before the import, as in a notebook

import traceinspect
from traceinspect.report import notebook
from traceinspect.sweep import load_sweep

trace = traceinspect.load("sample_traces/scenarios/sync_bound/vm.xplane.pb")
analysis = traceinspect.analyze(trace)
healthy = traceinspect.analyze(traceinspect.load("sample_traces/scenarios/healthy/vm.xplane.pb"))
objects = {
    "trace_html": trace,
    "analysis_html": analysis,
    "comparison_html": traceinspect.compare(analysis, healthy),
    "pod_html": traceinspect.analyze_run("sample_traces/pod/straggler", jobs=1),
    "sweep_html": load_sweep("sample_traces/sweep"),
}
for name, obj in objects.items():
    data, _ = shell.display_formatter.format(obj)
    expected = getattr(notebook, name)(obj)
    assert data.get("text/html") == expected, (name, data.get("text/html", "")[:200])
    assert expected.startswith("<p>"), name
print("ok", len(objects))
"""

_OUTSIDE_A_SHELL = """
import sys

import traceinspect
assert "IPython" not in sys.modules, "import traceinspect imported IPython"

import IPython  # imported, but no shell runs: nothing to register with, and no error

traceinspect._register_notebook_display()
assert IPython.get_ipython() is None
print("ok")
"""


def _run(code: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_a_notebook_shell_shows_results_with_the_report_functions() -> None:
    pytest.importorskip("IPython")
    assert _run(_IN_A_SHELL).split() == ["ok", "5"]


def test_without_a_shell_nothing_is_registered_and_ipython_is_not_imported() -> None:
    pytest.importorskip("IPython")
    assert _run(_OUTSIDE_A_SHELL).split() == ["ok"]


def test_without_ipython_the_import_works() -> None:
    # IPython made unimportable: registration must not need it.
    code = (
        "import sys; sys.modules['IPython'] = None\n"
        "import traceinspect\n"
        "traceinspect._register_notebook_display()\n"
        "print('ok')\n"
    )
    assert _run(code).split() == ["ok"]


def test_an_analysis_shows_its_verdict_gaps_and_a_small_timeline() -> None:
    import base64
    import re

    import traceinspect
    from traceinspect.report import notebook

    analysis = traceinspect.analyze(traceinspect.load(REPO / "sample_traces/scenarios/sync_bound"))
    html = notebook.analysis_html(analysis)
    assert "sync-bound</b>: The device sits idle 33% of step time" in html
    # The longest gap first, with its first line of evidence.
    assert "<tr><td>46</td><td>135.089</td><td>8.634</td>" in html
    assert "traceinspect/host_read (__float__) blocked the host" in html
    gap_rows = re.findall(r"<tr><td>\d+</td><td>[\d.,]+</td><td>[\d.,]+</td>", html)
    assert len(gap_rows) == notebook.NOTEBOOK_GAPS
    # One inline PNG, small: a few steps at screen resolution.
    (png,) = re.findall(r'src="data:image/png;base64,([^"]+)"', html)
    data = base64.b64decode(png)
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) < 60_000
    # Its alt text says what this run's timeline shows.
    (alt,) = re.findall(r'<img [^>]*alt="([^"]+)"', html)
    assert alt.startswith("Timeline of the device (busy in grey, idle time hatched in its ")
    assert alt.endswith(". Device idle 39% of step time, mostly sync (33%): steps 43-45")
    # A pod's compact per-host results keep no timeline: the summary goes without.
    host = traceinspect.analyze_run(REPO / "sample_traces/pod/straggler", jobs=1).analyses["host2"]
    assert host.timeline is None
    assert "data:image/png" not in notebook.analysis_html(host)


def test_an_analysis_shows_its_input_stages_and_findings() -> None:
    import traceinspect
    from traceinspect.report import notebook

    run = REPO / "sample_traces/scenarios/stages/read_w0"
    html = notebook.analysis_html(traceinspect.analyze(traceinspect.load(run)))
    assert "<p><b>Input per batch</b>: read 17.42 ms, preprocessing 4.32 ms" in html
    assert "largest share of a step: <b>read</b>" in html
    assert "<li><b>no_read_ahead</b> (warning): The run is input-bound" in html
    plain = notebook.analysis_html(
        traceinspect.analyze(traceinspect.load(REPO / "sample_traces/scenarios/healthy"))
    )
    assert "Input per batch" not in plain and "<b>Findings</b>" not in plain
