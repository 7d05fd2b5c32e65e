"""`traceinspect view`: XProf on the run's log directory, the worst gaps at XProf's times,
a one-line error without XProf, and a clean stop on Ctrl-C."""

from __future__ import annotations

import gzip
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import traceinspect
from traceinspect import schema as S
from traceinspect.cli import main
from traceinspect.report.view import XPROF_MS, render_view, worst_gaps
from traceinspect.viewer import RUNS_ROUTE, free_port, xprof_installed, xprof_logdir
from traceinspect.xplane.locate import locate

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "sample_traces" / "scenarios" / "sync_bound" / "vm.xplane.pb"
POD = REPO / "sample_traces" / "pod" / "straggler"


def test_a_file_outside_a_log_directory_is_served_through_links(tmp_path: Path) -> None:
    logdir = xprof_logdir(locate(SAMPLE), tmp_path)
    assert logdir.private and logdir.run == "sync_bound"
    link = Path(str(logdir.path), "plugins", "profile", "sync_bound", "vm.xplane.pb")
    assert link.is_symlink() and link.resolve() == SAMPLE.resolve()


def test_a_run_in_a_log_directory_is_served_from_it(tmp_path: Path) -> None:
    logdir = xprof_logdir(locate(POD), tmp_path)
    assert (Path(str(logdir.path)), logdir.run, logdir.private) == (POD, "straggler", False)
    assert list(tmp_path.iterdir()) == []


def test_without_xprof_view_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import traceinspect.viewer

    monkeypatch.setattr(traceinspect.viewer, "xprof_installed", lambda: False)
    result = CliRunner().invoke(main, ["view", str(SAMPLE)])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "Error: traceinspect view runs XProf, which is not installed: "
        "pip install 'traceinspect[xprof]'."
    ]


def test_gaps_are_placed_on_xprofs_clock() -> None:
    trace = traceinspect.load(SAMPLE)
    analysis = traceinspect.analyze(trace)
    gaps = worst_gaps({"vm": analysis}, 3)
    longest = analysis.gaps.sort_values(S.DURATION_NS, ascending=False).iloc[0]
    assert [g["duration_ms"] for g in gaps] == sorted(
        (g["duration_ms"] for g in gaps), reverse=True
    )
    assert gaps[0][S.STEP] == longest[S.STEP] == 46
    # XProf's clock is the trace's own: analyze's start_ms plus the first event's time.
    assert gaps[0][XPROF_MS] == pytest.approx(gaps[0][S.START_MS] + trace.start_ns / 1e6, abs=1e-3)
    assert gaps[0][XPROF_MS] == 135.128
    text = render_view("http://localhost:1/", "sync_bound", ["sync_bound"], {"vm": analysis}, 3, [])
    assert "step   46  at      135.128 ms      8.634 ms  sync" in text
    assert "Verdict  sync-bound" in text and text.endswith("Serving until Ctrl-C.")


# -- a real XProf ---------------------------------------------------------------------------


def _get(port: int, route: str) -> Any:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{route}", timeout=30) as response:
        data = response.read()
        if response.headers.get("Content-Encoding") == "gzip":
            data = gzip.decompress(data)
    return json.loads(data)


def _json_object(lines: queue.Queue[str], timeout_s: float) -> Any:
    """The first JSON object the command prints (it goes on serving afterwards)."""
    text, deadline = "", time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            text += lines.get(timeout=1)
        except queue.Empty:
            continue
        if text.endswith("}\n") and text.startswith("{"):
            try:
                return json.loads(text)
            except ValueError:
                continue
    raise AssertionError(f"no JSON object in {timeout_s} s: {text[:500]!r}")


@pytest.mark.slow
@pytest.mark.skipif(not xprof_installed(), reason="xprof is not installed")
def test_view_serves_the_run_and_stops_on_ctrl_c() -> None:
    before = sorted(p.name for p in SAMPLE.parent.iterdir())
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "traceinspect", "view", str(SAMPLE), "--port", str(port), "--json"],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    assert proc.stdout is not None and proc.stderr is not None
    stdout = proc.stdout

    def read() -> None:
        for line in stdout:
            lines.put(line)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        shown = _json_object(lines, 180)
        assert shown["url"] == f"http://localhost:{port}/"
        assert shown["run"] == "sync_bound" and shown["verdicts"] == {"vm": "sync-bound"}
        # XProf answers and lists the run, with its trace viewer.
        assert _get(port, RUNS_ROUTE) == ["sync_bound"]
        tools = _get(port, "/data/plugin/profile/run_tools?run=sync_bound")
        assert any(tool.startswith("trace_viewer") for tool in tools)
        # The longest gap is where view says in XProf's trace: the device's work resumes
        # at its end, on XProf's own clock (us; view rounds ms to 3 decimals).
        gap = shown["gaps"][0]
        events = _get(port, "/data/plugin/profile/data?run=sync_bound&tag=trace_viewer@&host=vm")
        starts = [e["ts"] for e in events["traceEvents"] if e.get("ph") == "X"]
        end_us = (gap[XPROF_MS] + gap["duration_ms"]) * 1000
        assert min(abs(start - end_us) for start in starts) < 2.0
        private = Path(shown["logdir"])
        assert private.exists()
    finally:
        proc.send_signal(signal.SIGINT)
        returncode = proc.wait(timeout=60)
        reader.join(timeout=10)
    stderr = proc.stderr.read()
    assert returncode in (0, 130), stderr
    assert "Traceback" not in stderr
    # XProf stopped with it, its private log directory is gone, and the sample untouched.
    with pytest.raises(OSError):
        _get(port, RUNS_ROUTE)
    assert not private.exists()
    assert sorted(p.name for p in SAMPLE.parent.iterdir()) == before
