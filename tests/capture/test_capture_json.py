"""``capture --json``: stdout holds the JSON alone, the script's own output goes to stderr."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from capture_helpers import REPO, TRAIN

pytestmark = pytest.mark.slow


def test_capture_json_parses_and_the_script_output_goes_to_stderr(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            *(sys.executable, "-m", "traceinspect", "capture", "--json"),
            *("--logdir", str(tmp_path / "logs"), "--skip-steps", "2", "--steps", "3"),
            *("--", sys.executable, str(TRAIN), "--steps", "8"),
        ],
        check=False,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)  # one document, nothing of the script's
    assert result["trace_paths"] and Path(result["trace_paths"][0]).is_file()
    assert "final loss" in done.stderr
    assert "final loss" not in done.stdout
