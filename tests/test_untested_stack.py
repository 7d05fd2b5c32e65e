"""A capture made with a jax or Grain older than capture is tested with says so in its
analysis (traceinspect.sidecar.CAPTURE_TESTED_FROM)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import traceinspect

SYNC = Path(__file__).resolve().parents[1] / "sample_traces" / "scenarios" / "sync_bound"


def _analysed_with(tmp_path: Path, versions: dict[str, str | None]) -> list[str]:
    run = tmp_path / "run"
    shutil.copytree(SYNC, run)
    sidecar = run / "traceinspect.capture.json"
    data = json.loads(sidecar.read_text(encoding="utf-8"))
    data["versions"] = versions
    sidecar.write_text(json.dumps(data), encoding="utf-8")
    return list(traceinspect.analyze(traceinspect.load(run, use_cache=False)).notes)


def test_an_old_stack_is_named_in_the_notes(tmp_path: Path) -> None:
    notes = _analysed_with(tmp_path, {"jax": "0.6.1", "jaxlib": "0.6.1", "grain": "0.2.12"})
    (note,) = [n for n in notes if n.startswith("Captured with")]
    assert note.startswith("Captured with jax 0.6.1 and grain 0.2.12, older than capture is")


def test_a_tested_stack_adds_no_note(tmp_path: Path) -> None:
    notes = _analysed_with(tmp_path, {"jax": "0.12.0.1", "jaxlib": "0.12.0.1", "grain": "0.2.18"})
    assert not [n for n in notes if n.startswith("Captured with")]
