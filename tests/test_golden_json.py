"""`analyze --json` on every bundled trace is byte-identical to the stored output.

The stored outputs (tests/golden/*.json) guard refactors: a change that alters any figure,
key or order shows here. After an intended change of behaviour, regenerate them with
``TRACEINSPECT_UPDATE_GOLDEN=1 python -m pytest tests/test_golden_json.py`` and review the
diff like code."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from traceinspect.cli import main

REPO = Path(__file__).resolve().parents[1]
GOLDEN = Path(__file__).parent / "golden"
MANIFEST = json.loads((REPO / "sample_traces" / "manifest.json").read_text(encoding="utf-8"))
PATHS = [e["path"] for e in MANIFEST["traces"] if "error" not in e]


# How long each host took to analyse (the pod JSON's per-host "seconds") is the tool's own
# run time, the one field no two runs share: blanked, everything else compared as bytes.
_RUN_TIME = re.compile(r'"seconds": [0-9.]+')


def _name(path: str) -> str:
    return path.replace("/", "__").removesuffix(".xplane.pb") + ".json"


@pytest.mark.parametrize("path", PATHS)
def test_analyze_json_is_unchanged(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Relative paths, from the repository root: the output names the path it was given.
    monkeypatch.chdir(REPO)
    args = ["analyze", f"sample_traces/{path}", "--json", "--no-cache", "-j", "1"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    out = _RUN_TIME.sub('"seconds": null', result.stdout)
    stored = GOLDEN / _name(path)
    if os.environ.get("TRACEINSPECT_UPDATE_GOLDEN"):
        stored.write_text(out, encoding="utf-8")
    assert out == stored.read_text(encoding="utf-8")
