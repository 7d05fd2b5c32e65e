"""docs/cli.md matches every command's --help, and every command's help has examples."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

DOCS = Path(__file__).parent.parent / "docs"


def _script(name: str = "make_cli_reference") -> ModuleType:
    """One of the docs' generator scripts (docs/NAME.py), loaded by path."""
    spec = importlib.util.spec_from_file_location(name, DOCS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SCRIPT = _script()
COMMANDS = SCRIPT.command_paths()


def test_cli_reference_is_up_to_date() -> None:
    expected = SCRIPT.render()
    current = (DOCS / "cli.md").read_text(encoding="utf-8")
    assert current == expected, (
        "docs/cli.md differs from the commands' --help: run python docs/make_cli_reference.py"
    )


def test_every_command_is_documented() -> None:
    names = {" ".join(path) for path in COMMANDS}
    assert {
        "",
        "analyze",
        "compare",
        "info",
        "events",
        "export",
        "view",
        "capture",
        "sweep",
        "isolate",
        "sample",
    } <= names


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(("traceinspect", *p)))
def test_help_has_examples(path: tuple[str, ...]) -> None:
    assert "Examples:" in SCRIPT.help_text(path)


def test_the_rules_and_thresholds_tables_are_up_to_date() -> None:
    script = _script("make_rules_reference")
    current = (DOCS / "causes.md").read_text(encoding="utf-8")
    assert current == script.render(current), (
        "docs/causes.md's rules or thresholds table differs from the code: run "
        "python docs/make_rules_reference.py"
    )
