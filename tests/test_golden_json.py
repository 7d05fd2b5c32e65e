"""`analyze` on the bundled traces: its numbers exactly on every trace, its words on a few.

Two stores, one per kind of change (STYLE.md: numbers first, words last):

- ``tests/golden/numbers/<trace>.json``: ``analyze --json`` of every bundled trace of
  ``sample_traces/manifest.json`` with the prose taken out (:data:`PROSE_KEYS`). It keeps
  every number, flag, id and order: the verdict, ``decided_by``, the fractions, the
  per-step ledger, the gaps' steps, times and causes, the findings' kinds, every
  recommendation's kind and figures (``expected_step_ms``, ``value``, ``current``,
  ``bounded_by``...), the workers' and stages' figures, the stall. Floats are compared as
  the JSON writes them. A change here changes what the tool measures or decides: review
  the diff like code (``tests/test_decisions.py`` names the decisions that moved).
- ``tests/golden/prose/<trace>.txt``: the text report (``analyze`` without ``--json``) of
  one trace per kind of verdict (:data:`PROSE_TRACES`). A change of wording touches only
  these.

Every key whose value is a string must be classified, as prose (dropped) or as data
(:data:`DATA_KEYS`, kept); a new one fails here until it is added to one of the two, so
a message cannot slip into the numbers nor a figure out of them.

Regenerate both after an intended change, then read the diff::

    TRACEINSPECT_UPDATE_GOLDEN=1 python -m pytest tests/test_golden_json.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from traceinspect.cli import main

REPO = Path(__file__).resolve().parents[1]
GOLDEN = Path(__file__).parent / "golden"
NUMBERS = GOLDEN / "numbers"
PROSE = GOLDEN / "prose"
MANIFEST = json.loads((REPO / "sample_traces" / "manifest.json").read_text(encoding="utf-8"))
PATHS = [e["path"] for e in MANIFEST["traces"] if "error" not in e]
UPDATE = bool(os.environ.get("TRACEINSPECT_UPDATE_GOLDEN"))

#: Keys whose strings are sentences for a reader: dropped from the numbers golden (each holds
#: a string, a list of strings or null; anything else fails) and left to the prose snapshots.
PROSE_KEYS: dict[str, str] = {
    "summary": "the verdict in a sentence",
    "message": "a recommendation or finding, said",
    "fix": "a finding's remedy, said",
    "reason": "why a window, worker count or rule was chosen, said",
    "notes": "caveats printed under the report",
    "cause_reason": "why a gap got its cause, said",
    "evidence": "the host activity under a gap, one line each",
}

#: Keys whose strings are data (ids, enums, names, paths, code sites): kept and compared.
DATA_KEYS: dict[str, str] = {
    "path": "the trace as given",
    "location": "a pod host's file",
    "run": "a pod's run directory",
    "backend": "gpu, tpu or cpu",
    "devices": "device names",
    "host": "a host name",
    "hosts": "host names a recommendation is for",
    "slowest_host": "a host name",
    "starved_host": "a host name",
    "role": "a pod host's role: straggler, waits for HOST or empty",
    "verdict": "the verdict",
    "rule": "the id of the rule that fired",
    "cause": "an idle cause",
    "runner_up": "an idle cause",
    "basis": "observed or measured",
    "kind": "a recommendation's or finding's id",
    "severity": "info or warning",
    "bounded_by": "the limit on a worker count",
    "source": "where the steps came from",
    "sync_sites": "code sites that read a device value",
    "where": "a recommendation's code sites; an input stage's process",
    "what": "a recurring stall's kind",
    "stage": "an input stage",
    "dominant": "an input stage",
    # input_stages.where: stage -> the process it runs in (workers, main, threads)
    "read": "where the read stage runs",
    "preprocessing": "where the preprocessing stage runs",
    "batch": "where the batch stage runs",
    "prefetch": "where the prefetch stage runs",
    "transfer": "where the transfer stage runs",
}

#: The tool's own run time (a pod host's analysis ``seconds``): no two runs share it.
RUN_TIME_KEYS = frozenset({"seconds"})

#: One trace per kind of verdict whose full text report is kept.
PROSE_TRACES = {
    "gpu/input_bound": "input-bound, with an input stage and a worker count",
    "gpu/sync_bound": "sync-bound, with a finding and a note",
    "gpu/device_bound": "device-bound",
    "gpu/checkpoint_long": "host-bound by a recurring stall",
    "pod/straggler": "a pod with a straggler",
}


def _name(path: str) -> str:
    return path.replace("/", "__").removesuffix(".xplane.pb")


def _analyze(path: str, *options: str) -> str:
    # --no-cache and -j 1: the output of this code, in this process, every time.
    args = ["analyze", f"sample_traces/{path}", *options, "--no-cache", "-j", "1"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    return result.stdout


def _numbers(value: Any, key: str, unclassified: set[str]) -> Any:
    """``value`` without its prose; the string-valued keys neither list names go into
    ``unclassified``."""
    if isinstance(value, dict):
        kept: dict[str, Any] = {}
        for k, v in value.items():
            if k in PROSE_KEYS:
                texts = v if isinstance(v, list) else [v]
                assert all(t is None or isinstance(t, str) for t in texts), (
                    f"prose key {k!r} holds data: {v!r}"
                )
            elif k in RUN_TIME_KEYS:
                kept[k] = None
            else:
                kept[k] = _numbers(v, k, unclassified)
        return kept
    if isinstance(value, list):
        return [_numbers(v, key, unclassified) for v in value]
    if isinstance(value, str) and key not in DATA_KEYS:
        unclassified.add(key)
    return value


def _dumps(value: Any, indent: str = "") -> str:
    """Sorted JSON, a container on one line when it fits, else one item per line: compact,
    and a diff shows the step, gap or recommendation that changed."""
    flat = json.dumps(value, sort_keys=True, separators=(",", ":"))
    if not isinstance(value, (dict, list)) or not value or len(indent) + len(flat) <= 200:
        return flat
    inner = indent + " "
    if isinstance(value, dict):
        items = [f"{inner}{json.dumps(k)}:{_dumps(v, inner)}" for k, v in sorted(value.items())]
        return "{\n" + ",\n".join(items) + "\n" + indent + "}"
    items = [inner + _dumps(v, inner) for v in value]
    return "[\n" + ",\n".join(items) + "\n" + indent + "]"


def _compare(out: str, stored: Path) -> None:
    if UPDATE:
        stored.parent.mkdir(exist_ok=True)
        stored.write_text(out, encoding="utf-8")
    assert stored.exists(), f"{stored} is missing: regenerate (see this module's docstring)"
    assert out == stored.read_text(encoding="utf-8"), (
        f"{stored.relative_to(REPO)} differs; if intended, regenerate (module docstring)"
    )


@pytest.mark.parametrize("path", PATHS)
def test_analyze_numbers_are_unchanged(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Relative paths, from the repository root: the output names the path it was given.
    monkeypatch.chdir(REPO)
    unclassified: set[str] = set()
    numbers = _numbers(json.loads(_analyze(path, "--json")), "", unclassified)
    assert not unclassified, (
        f"string keys {sorted(unclassified)} are neither prose nor data: add each to "
        "PROSE_KEYS or DATA_KEYS in tests/test_golden_json.py"
    )
    _compare(_dumps(numbers) + "\n", NUMBERS / f"{_name(path)}.json")


@pytest.mark.parametrize("path", sorted(PROSE_TRACES))
def test_analyze_text_is_unchanged(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    _compare(_analyze(path), PROSE / f"{_name(path)}.txt")


def test_stores_hold_only_current_traces() -> None:
    """A trace dropped from the manifest or the prose list leaves no stale file behind."""
    numbers = {p.name for p in NUMBERS.glob("*.json")}
    prose = {p.name for p in PROSE.glob("*.txt")}
    assert numbers == {f"{_name(p)}.json" for p in PATHS}, "delete the stale numbers files"
    assert prose == {f"{_name(p)}.txt" for p in PROSE_TRACES}, "delete the stale snapshots"
    assert set(PROSE_TRACES) <= set(PATHS)
