"""The dependency arrow points one way (docs/architecture.md): every import inside the
package goes to its own layer or a lower one, capture imports only the standard library and
traceinspect's base modules, and the analysis layer reads no files."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "traceinspect"

# Lowest first. A module may import modules of its own layer or of a lower one.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("_version", "errors", "schema", "vocabulary", "names", "sidecar"),  # base: names, errors
    ("xplane",),  # reading: files -> frames
    ("trace", "intervals"),  # the trace model
    ("backends",),  # device activity per layout
    ("analysis",),  # pure functions over the model
    ("sweep", "pod"),  # orchestration: capture, analyse, combine
    ("report",),  # text, JSON, HTML, plots
    ("cli",),  # thin commands
    ("__init__", "__main__"),  # the public API and the entry point
)
# capture runs inside the user's process: the standard library and the base alone.
CAPTURE_MAY_IMPORT = frozenset({"capture", "_version", "errors", "names", "sidecar"})
# The analysis layer is pure: it never locates, reads or decodes a trace.
ANALYSIS_MUST_NOT_IMPORT = frozenset(
    {
        "traceinspect.xplane.reader",
        "traceinspect.xplane.locate",
        "traceinspect.xplane.fs",
        "traceinspect.xplane.cache",
        "traceinspect.trace.load",
    }
)


def _unit(module: str) -> str:
    """``traceinspect.analysis.steps`` -> ``analysis``; ``traceinspect`` -> ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _rank(unit: str) -> int:
    for rank, layer in enumerate(LAYERS):
        if unit in layer:
            return rank
    raise AssertionError(f"traceinspect.{unit} is in no layer: add it to LAYERS")


def _imports(path: Path, root: Path) -> list[tuple[int, str, tuple[str, ...]]]:
    """(line, imported traceinspect module, full names it brings in) for every import in a
    file, nested ones too."""
    module = ".".join(path.relative_to(root.parent).with_suffix("").parts)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    out: list[tuple[int, str, tuple[str, ...]]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name, (a.name,)) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            names = tuple(f"{base}.{a.name}" for a in node.names)
            if base == "traceinspect":
                out += [(node.lineno, name, (name,)) for name in names]  # submodules
            else:
                out.append((node.lineno, base, names))
    return [i for i in out if i[1].split(".")[0] == "traceinspect"]


def _violations(path: Path, root: Path = PACKAGE) -> list[str]:
    module = ".".join(path.relative_to(root.parent).with_suffix("").parts)
    unit = _unit(module.removesuffix(".__init__"))
    found = []
    for line, name, names in _imports(path, root):
        target = _unit(name)
        where = f"{path.relative_to(root.parent)}:{line} imports {name}"
        if unit == "capture":
            if target not in CAPTURE_MAY_IMPORT:
                found.append(f"{where}: capture may import only {sorted(CAPTURE_MAY_IMPORT)}")
            continue
        if target == "capture":
            if _rank(unit) < _rank("sweep"):
                found.append(f"{where}: only orchestration and above may run captures")
            continue
        if _rank(target) > _rank(unit):
            found.append(
                f"{where}: {unit} (layer {_rank(unit)}) -> {target} (layer {_rank(target)})"
            )
        for full in (name, *names):
            if unit == "analysis" and full in ANALYSIS_MUST_NOT_IMPORT:
                where = f"{path.relative_to(root.parent)}:{line} imports {full}"
                found.append(f"{where}: the analysis layer reads no files")
    return found


SOURCES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE.parent)))
def test_no_import_points_up(path: Path) -> None:
    assert _violations(path) == []


def test_an_upward_import_is_caught(tmp_path: Path) -> None:
    """The check itself: a backend importing the analysis, a capture module importing pandas'
    side of the package, and the analysis loading a trace are all reported."""
    fake = tmp_path / "traceinspect"
    for rel, text in {
        "backends/bad.py": "from traceinspect.analysis.steps import find_steps\n",
        "capture/bad.py": "from traceinspect import schema\n",
        "analysis/bad.py": "def f():\n    from traceinspect.trace import load\n",
        "analysis/good.py": "from traceinspect.backends.activity import device_activity\n",
    }.items():
        (fake / rel).parent.mkdir(parents=True, exist_ok=True)
        (fake / rel).write_text(text)
    assert _violations(fake / "backends/bad.py", fake) == [
        "traceinspect/backends/bad.py:1 imports traceinspect.analysis.steps: "
        "backends (layer 3) -> analysis (layer 4)"
    ]
    assert len(_violations(fake / "capture/bad.py", fake)) == 1
    assert _violations(fake / "analysis/bad.py", fake) == [
        "traceinspect/analysis/bad.py:2 imports traceinspect.trace.load: "
        "the analysis layer reads no files"
    ]
    assert _violations(fake / "analysis/good.py", fake) == []


@pytest.mark.parametrize("name", ["names.py", "sidecar.py"])
def test_base_modules_of_capture_import_only_the_standard_library(name: str) -> None:
    """capture/_child.py loads names.py by path, without the package, and capture writes the
    sidecar format in the user's interpreter: they may import nothing of traceinspect, nor
    anything outside the standard library."""
    import sys

    tree = ast.parse((PACKAGE / name).read_text(encoding="utf-8"))
    imported = {
        (a.name if isinstance(node, ast.Import) else node.module or "").split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for a in node.names
    }
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported
