"""The two ways the family's measurement scripts run ``train_family.py``: timed without the
profiler, and under a default capture then analysed (``make_habits.py``, ``apply_advice.py``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).resolve().parent / "train_family.py"
#: Steps left out at the start of a timed run: compiling, filling jax's queue.
WARMUP = 60


def truth_ms(args: list[str], steps: int) -> float:
    """Mean host step time (ms) from step WARMUP to the drained end, without the profiler."""
    out = subprocess.run(
        [sys.executable, str(SCRIPT), *args, "--steps", str(steps), "--stats-json", "-"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    starts = json.loads(out.strip().splitlines()[-1])["starts_s"]
    return float((starts[-1] - starts[WARMUP]) * 1000.0 / (len(starts) - 1 - WARMUP))


def capture_and_analyze(args: list[str], steps: int, keep: Path | None = None) -> dict[str, Any]:
    """``analyze --json`` of a default capture of the loop (``{"verdict": "error: ..."}``
    when the analysis failed); ``keep``: a log folder to keep the capture in (it must not
    hold one already), else a temporary one."""
    with tempfile.TemporaryDirectory() as tmp:
        logdir = str(keep) if keep is not None else tmp
        command = [sys.executable, "-m", "traceinspect", "capture", "--logdir", logdir, "--"]
        command += [sys.executable, str(SCRIPT), *args, "--steps", str(steps)]
        subprocess.run(command, check=True, capture_output=True, text=True)
        (run,) = (Path(logdir) / "plugins" / "profile").iterdir()
        done = subprocess.run(
            [sys.executable, "-m", "traceinspect", "analyze", str(run), "--json"],
            capture_output=True,
            text=True,
            check=False,
        )
    if done.returncode != 0:
        return {"verdict": f"error: {done.stderr.strip()[-300:]}", "recommendations": []}
    result: dict[str, Any] = json.loads(done.stdout)
    return result
