"""Start-up stays light, and progress is reported only when decoding takes a while."""

from __future__ import annotations

import io
import subprocess
import sys
import time

import pytest
from traces import SAMPLES

import traceinspect
from traceinspect.cli import _options


def test_cli_import_does_not_import_pandas() -> None:
    code = "import sys, traceinspect.cli; print('pandas' in sys.modules, 'jax' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_load_reports_progress_in_bytes() -> None:
    seen: list[tuple[int, int]] = []
    traceinspect.load(SAMPLES[0], progress=lambda done, total: seen.append((done, total)))
    size = SAMPLES[0].stat().st_size
    assert seen[-1] == (size, size)
    assert all(total == size and 0 <= done <= size for done, total in seen)


def test_progress_bar_waits_a_second_and_needs_enabling(monkeypatch: pytest.MonkeyPatch) -> None:
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    clock = iter([0.0, 0.5, 1.5, 2.0])
    monkeypatch.setattr(time, "monotonic", lambda: next(clock))
    bar = _options.ProgressBar("Reading x", enabled=True)
    bar(10, 100)  # at 0.5 s: nothing yet
    assert err.getvalue() == ""
    bar(50, 100)  # at 1.5 s: shown
    assert "Reading x" in err.getvalue() and "50%" in err.getvalue()
    bar.close()
    assert err.getvalue().endswith("\r\033[K")
    quiet = _options.ProgressBar("Reading x", enabled=False)
    quiet(50, 100)
    quiet.close()
    assert err.getvalue().count("Reading x") == 1
