"""One name, one behaviour: no two module-level private helpers in the package share a name
(``_ms`` once meant "ns array to ms axis" in one module and "format ms" in another)."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "traceinspect"


def _helpers(paths: list[Path]) -> dict[str, list[str]]:
    where: dict[str, list[str]] = defaultdict(list)
    for path in paths:
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
                node.name.startswith("_") and not node.name.startswith("__")
            ):
                where[node.name].append(f"{path.name}:{node.lineno}")
    return {name: places for name, places in where.items() if len(places) > 1}


def test_private_helpers_have_distinct_names() -> None:
    assert _helpers(sorted(PACKAGE.rglob("*.py"))) == {}


def test_a_shared_helper_name_is_caught(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("def _ms(ns):\n    return ns / 1e6\n")
    (tmp_path / "b.py").write_text("def _ms(v):\n    return f'{v:.2f}'\n")
    assert _helpers(sorted(tmp_path.glob("*.py"))) == {"_ms": ["a.py:1", "b.py:1"]}
