"""Every bundled trace has its expected verdict in sample_traces/manifest.json, and gets it.

The expectations come from measurements made without the profiler (each entry names where);
the family's worker-count entries check the recommendation against the measured knee, and
where the steps at each count were timed, its expected step against the step at its count."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import traceinspect
from traceinspect.errors import AnalysisError
from traceinspect.vocabulary import MATTERS

ROOT = Path(__file__).resolve().parents[1] / "sample_traces"
MANIFEST = json.loads((ROOT / "manifest.json").read_text(encoding="utf-8"))
ENTRIES: list[dict[str, Any]] = MANIFEST["traces"]
FAMILY = json.loads((ROOT / "scenarios" / "family" / "measurements.json").read_text())


def test_every_bundled_trace_is_in_the_manifest_once() -> None:
    covered: list[Path] = []
    for entry in ENTRIES:
        path = ROOT / entry["path"]
        assert path.exists(), entry["path"]
        covered += [path] if path.is_file() else sorted(path.rglob("*.xplane.pb"))
    found = sorted(ROOT.rglob("*.xplane.pb"))
    assert sorted(covered) == found
    assert len(set(covered)) == len(covered)


@pytest.mark.parametrize("entry", [e for e in ENTRIES if "pod" not in e], ids=lambda e: e["path"])
def test_bundled_trace_gets_its_verdict(entry: dict[str, Any]) -> None:
    trace = traceinspect.load(ROOT / entry["path"], use_cache=False)
    if "error" in entry:
        with pytest.raises(AnalysisError, match=entry["error"]):
            traceinspect.analyze(trace)
        return
    analysis = traceinspect.analyze(trace)
    assert analysis.verdict == entry["verdict"], analysis.summary
    if "findings" in entry:
        assert [f.rule for f in analysis.findings] == entry["findings"], analysis.findings
    if "stage" in entry:
        assert analysis.input_stages is not None
        assert analysis.input_stages.dominant == entry["stage"], analysis.input_stages
    knee_of = entry.get("knee_of")
    knee = FAMILY["knees"][knee_of] if knee_of is not None else entry.get("knee")
    if knee is not None:
        rec = next((r for r in analysis.recommendations if r.kind == "grain_worker_count"), None)
        if rec is None:
            # The worker count is advised only where input matters.
            assert analysis.verdict not in ("input-bound", "sync-bound"), analysis.summary
            assert analysis.cause_fractions["input"] < MATTERS, analysis.cause_fractions
        else:
            assert knee <= rec.value <= knee + 2, (knee, rec)
            timed = entry.get("workers_ms")
            if timed is not None:
                # Applying the advice lands within 20% of the step it expects.
                assert rec.expected_step_ms is not None
                at = timed[str(rec.value)]
                assert rec.expected_step_ms == pytest.approx(at, rel=0.20), (at, rec)


@pytest.mark.parametrize("entry", [e for e in ENTRIES if "pod" in e], ids=lambda e: e["path"])
def test_bundled_pod_gets_its_verdict(entry: dict[str, Any]) -> None:
    pod = traceinspect.analyze_run(ROOT / entry["path"], jobs=1)
    assert pod.verdict == entry["verdict"], pod.summary
    named = None if pod.straggler is None else pod.straggler.host
    assert named == entry["pod"]["straggler"]
