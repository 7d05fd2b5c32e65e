"""What the analysis decides on every bundled trace is what it decided when the table was frozen.

``tests/golden/decisions.json`` holds, for each bundled trace of
``sample_traces/manifest.json`` that analyses (and for each host of a pod run directory,
keyed ``<path>#<host>``): the verdict; the deciding cause (``device`` where the verdict is
device-bound, else the cause the verdict names: input, sync, compile, host, unknown, or a
run-level one: stall, callback, loop_cpu, pipeline_cpu); every recommendation's kind and
expected step, in order, with the worker count's value, current count and the limit that
bound it; the median and mean step; and the idle time by cause as a share of step time. It
guards the verdict's rules: a change to how the analysis decides may move any figure the
numbers goldens hold (tests/golden/numbers/, refreshed freely), but it must not move a decision
unawares. The cause is compared through ``Analysis.decision.cause`` once the analysis has
one; until then that one comparison is skipped.

A row that changes on purpose goes into :data:`CHANGED` with the reason, naming its
CHANGELOG entry; a listed row must then differ from the table (a stale entry fails too).

Refreeze (after a reviewed change, clearing :data:`CHANGED`)::

    TRACEINSPECT_FREEZE_DECISIONS=1 python -m pytest -q tests/test_decisions.py -p no:cacheprovider

rewrites the table from the code imported, stamped with the commit of its tree. The cause
comes from ``Analysis.decision``. The table committed first was frozen at the commit it
names from code without ``decision``: ``analyze()`` instrumented in a throwaway worktree to
record its final ``_Verdict`` (``verdict.top`` after the stall, callback, loop_cpu and
pipeline_cpu overrides) by trace path in ``traceinspect.analysis.analyze.FROZEN_TOP``, which
the freeze mode reads where ``decision`` is missing.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

import traceinspect
from traceinspect.analysis.result import GRAIN_WORKER_COUNT, Analysis, Recommendation
from traceinspect.xplane.locate import locate

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "sample_traces"
TABLE_PATH = Path(__file__).parent / "golden" / "decisions.json"
MANIFEST = json.loads((SAMPLES / "manifest.json").read_text(encoding="utf-8"))
PATHS = [e["path"] for e in MANIFEST["traces"] if "error" not in e]
FREEZE = os.environ.get("TRACEINSPECT_FREEZE_DECISIONS") == "1"
TABLE: dict[str, Any] = (
    {} if FREEZE else json.loads(TABLE_PATH.read_text(encoding="utf-8"))["traces"]
)

#: Rows allowed to differ from the table on purpose: trace key (``<path>`` or
#: ``<path>#<host>``) -> why, naming the CHANGELOG entry that says so.
CHANGED: dict[str, str] = {
    "scenarios/family/read_block_w0": (
        "CHANGELOG 'Removing a per-step read on XLA's CPU backend keeps the host's work': the "
        "cores floor raises remove_sync's expected step 11.94 -> 12.10 ms (12.52 measured); "
        "CHANGELOG 'The cores floor counts the host's work a step typically holds': 12.10 -> "
        "12.24 ms"
    ),
    "scenarios/sync_bound": (
        "CHANGELOG 'The cores floor counts the host's work a step typically holds': "
        "remove_sync's expected step 13.37 -> 13.68 ms (13.66 measured without the read)"
    ),
    "scenarios/family/read_float_w0": (
        "CHANGELOG 'The cores floor counts the host's work a step typically holds': "
        "remove_sync's expected step 10.50 -> 10.84 ms (11.62 measured with the read one "
        "step late, 12.52 without it)"
    ),
    "scenarios/family/read_device_get_w0": (
        "CHANGELOG 'Removing a per-step read on XLA's CPU backend keeps the host's work': the "
        "cores floor raises remove_sync's expected step 12.36 -> 12.70 ms (12.52 measured); "
        "CHANGELOG 'Expected steps in the run's pace on XLA's CPU backend': the window ran "
        "8.5% slower than its untraced steps, and CHANGELOG 'The cores floor counts the host's "
        "work a step typically holds': 12.70 -> 11.74 ms (11.62 measured with the read one "
        "step late, 12.52 without it)"
    ),
}

# The grain_worker_count recommendation's fields for the count and its limit.
WORKER_FIELDS = ("value", "current", "bounded_by")
NOTE = (
    "What the analysis decides on each bundled trace (tests/test_decisions.py): verdict; "
    "cause (device where device-bound, else the verdict's deciding cause after the run-level "
    "overrides); recommendations in order with their expected step (and the worker count's "
    "value, current and bounded_by); median and mean step (ms); idle share by cause. Keys: "
    "the manifest's path, '#host' for each host of a pod run directory."
)


def _r4(x: float | None) -> float | None:
    return None if x is None else round(float(x), 4)


def _analyses(path: str) -> dict[str, Analysis]:
    """The analysis of a bundled trace by row key: one for a file or a one-host run, one per
    host for a pod run directory (as ``analyze`` does it, without the cache)."""
    located = locate(SAMPLES / path)
    if len(located.run.files) == 1:
        return {path: traceinspect.analyze(traceinspect.load(located, use_cache=False))}
    pod = traceinspect.analyze_run(located, jobs=1, use_cache=False)
    out: dict[str, Analysis] = {}
    for result in pod.results:
        assert result.analysis is not None, f"{path}#{result.host}: {result.error}"
        out[f"{path}#{result.host}"] = result.analysis
    return out


def _cause(analysis: Analysis) -> str | None:
    """The deciding cause: ``Analysis.decision.cause``; None where the analysis has no
    ``decision`` (the freeze mode then reads the instrumented ``FROZEN_TOP``)."""
    decision = getattr(analysis, "decision", None)
    if decision is not None:
        return str(decision.cause)
    if not FREEZE:
        return None
    from traceinspect.analysis import analyze as module

    frozen: dict[str, tuple[str, str]] | None = getattr(module, "FROZEN_TOP", None)
    if frozen is None:
        pytest.fail("freezing needs Analysis.decision, or analyze() instrumented (FROZEN_TOP)")
    verdict, top = frozen[analysis.path]
    assert verdict == analysis.verdict, (analysis.path, verdict, analysis.verdict)
    return "device" if verdict == "device-bound" else top


def _recommendation(r: Recommendation) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": r.kind, "expected_step_ms": _r4(r.expected_step_ms)}
    if r.kind == GRAIN_WORKER_COUNT:
        out.update({name: getattr(r, name) for name in WORKER_FIELDS})
    return out


def _row(analysis: Analysis) -> dict[str, Any]:
    return {
        "verdict": analysis.verdict,
        "cause": _cause(analysis),
        "recommendations": [_recommendation(r) for r in analysis.recommendations],
        "steps": {
            "median_ms": _r4(analysis.steps.median_ms),
            "mean_ms": _r4(analysis.steps.mean_ms),
        },
        "idle_fraction_by_cause": {c: _r4(v) for c, v in analysis.cause_fractions.items()},
    }


def _differences(key: str, frozen: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Each compared field that differs: ``trace: field: frozen X, now Y``."""
    out: list[str] = []

    def differ(name: str, was: Any, now: Any) -> None:
        if was != now:
            out.append(f"{key}: {name}: frozen {was!r}, now {now!r}")

    differ("verdict", frozen["verdict"], new["verdict"])
    if new["cause"] is not None:  # None: the analysis has no decision yet
        differ("cause", frozen["cause"], new["cause"])
    was, now = frozen["recommendations"], new["recommendations"]
    differ("recommendation kinds", [r["kind"] for r in was], [r["kind"] for r in now])
    for i, (a, b) in enumerate(zip(was, now, strict=False)):
        if a["kind"] != b["kind"]:
            continue
        at = f"recommendations[{i}] ({a['kind']})"
        differ(f"{at}.expected_step_ms", a["expected_step_ms"], b["expected_step_ms"])
        if a["kind"] == GRAIN_WORKER_COUNT:
            for name in WORKER_FIELDS:
                differ(f"{at}.{name}", a[name], b[name])
    for name in ("median_ms", "mean_ms"):
        differ(f"steps.{name}", frozen["steps"][name], new["steps"][name])
    for cause in sorted(set(frozen["idle_fraction_by_cause"]) | set(new["idle_fraction_by_cause"])):
        differ(
            f"idle_fraction_by_cause.{cause}",
            frozen["idle_fraction_by_cause"].get(cause),
            new["idle_fraction_by_cause"].get(cause),
        )
    return out


def _head(tree: Path) -> str:
    return subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


@pytest.mark.skipif(not FREEZE, reason="TRACEINSPECT_FREEZE_DECISIONS=1 rewrites the table")
def test_freeze_decisions() -> None:
    rows: dict[str, Any] = {}
    for path in PATHS:
        rows.update({key: _row(a) for key, a in _analyses(path).items()})
    table = {
        "frozen_at": _head(Path(traceinspect.__file__).resolve().parents[1]),
        "note": NOTE,
        "traces": rows,
    }
    text = json.dumps(table, indent=1, sort_keys=True) + "\n"
    TABLE_PATH.write_text(text, encoding="utf-8")


@pytest.mark.skipif(FREEZE, reason="freezing")
def test_table_covers_every_bundled_trace() -> None:
    frozen_paths = {key.split("#")[0] for key in TABLE}
    assert frozen_paths == set(PATHS), frozen_paths ^ set(PATHS)


@pytest.mark.skipif(FREEZE, reason="freezing")
def test_changed_rows_are_in_the_table_with_a_reason() -> None:
    for key, reason in CHANGED.items():
        assert key in TABLE, f"CHANGED names {key!r}, which is no row of the table"
        assert "CHANGELOG" in reason, f"{key}: the reason must name its CHANGELOG entry"


@pytest.mark.skipif(FREEZE, reason="freezing")
@pytest.mark.parametrize("path", PATHS)
def test_decisions_are_unchanged(path: str) -> None:
    analyses = _analyses(path)
    frozen_keys = sorted(k for k in TABLE if k == path or k.startswith(f"{path}#"))
    assert sorted(analyses) == frozen_keys, (
        f"{path}: rows: frozen {frozen_keys}, now {sorted(analyses)}"
    )
    problems: list[str] = []
    for key, analysis in analyses.items():
        differences = _differences(key, TABLE[key], _row(analysis))
        if key in CHANGED:
            if not differences:
                problems.append(
                    f"{key}: listed in CHANGED ({CHANGED[key]}) but decides as frozen: "
                    "remove the entry"
                )
        else:
            problems += differences
    assert not problems, "\n".join(problems)
