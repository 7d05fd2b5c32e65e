"""Result columns are named in traceinspect.schema only: no bare string elsewhere.

Names with a unit (``wall_ns``, ...) may not appear as a string literal anywhere in the
package but schema.py; the short ones that are also plain words or JSON keys (``step``,
``cause``, ``evidence``) may not be used to index a frame (``frame["cause"]``). capture is
exempt: it runs in the user's process and imports nothing of the package's (its stat names
are trace annotations, not columns)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from traceinspect import schema as S

PACKAGE = Path(__file__).resolve().parents[1] / "traceinspect"
WITH_UNITS = {
    S.WALL_NS,
    S.BUSY_NS,
    S.IDLE_NS,
    S.COLLECTIVE_NS,
    S.INPUT_WORK_NS,
    S.DEVICE_WORK_NS,
    S.PERIOD_START_NS,
    S.AFTER_SYNC,
    S.CAUSE_REASON,
    S.STEP_INDEX,
    S.START_MS,
    *(S.idle_cause_ns(c) for c in ("input", "sync", "compile", "host", "unknown")),
    # pod tables
    S.FILE_MB,
    S.MEDIAN_STEP_MS,
    S.P90_STEP_MS,
    S.BUSY_MS_PER_STEP,
    S.COLLECTIVE_MS_PER_STEP,
    S.INPUT_WORK_MS_PER_STEP,
    S.INPUT_IDLE_MS_PER_STEP,
    S.SLOWEST_MS,
    S.FASTEST_MS,
    S.STARVED_INPUT_IDLE_MS,
}
AS_INDEX = {
    S.STEP,
    S.CAUSE,
    S.EVIDENCE,
    S.CATEGORY,
    # pod tables
    S.ROLE,
    S.SLOWEST_HOST,
    S.STARVED_HOST,
    S.IDLE_FRACTION,
    S.GRAIN_WORKERS,
}


def _bare(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and node.value in WITH_UNITS:
            found.append(f"{path.name}:{node.lineno} {node.value!r}")
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.slice, ast.Constant)
            and node.slice.value in AS_INDEX
        ):
            found.append(f"{path.name}:{node.lineno} [{node.slice.value!r}]")
    return found


SOURCES = [
    p
    for p in sorted(PACKAGE.rglob("*.py"))
    if p.name != "schema.py" and "capture" not in p.relative_to(PACKAGE).parts
]


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE.parent)))
def test_no_bare_result_column(path: Path) -> None:
    assert _bare(path) == []


def test_a_bare_column_is_caught(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        'x = per_step["wall_ns"]\ny = gaps["cause"]\nz = {"cause": 1}\n'
        'h = {"median_step_ms": 1.0}\nr = pod.hosts["role"]\n'
    )
    assert sorted(_bare(bad)) == [
        "bad.py:1 'wall_ns'",
        "bad.py:2 ['cause']",
        "bad.py:4 'median_step_ms'",
        "bad.py:5 ['role']",
    ]
