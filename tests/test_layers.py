"""The dependency arrow points one way (docs/architecture.md): every import inside the
package goes to its own layer or a lower one, capture imports only the standard library and
traceinspect's base modules (its child package the standard library and its own modules
alone), and the analysis layer reads no files."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "traceinspect"

# Lowest first. A module may import modules of its own layer or of a lower one.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("_version", "errors", "schema", "thresholds", "vocabulary", "names", "sidecar"),  # base
    ("xplane",),  # reading: files -> frames
    # the trace model (its arrays, where it came from; read in the background: loading)
    ("trace", "trace_arrays", "trace_source", "intervals", "loading"),
    ("backends",),  # device activity per layout
    ("analysis",),  # pure functions over the model
    (
        "sweep",
        "pod",
        "viewer",
        "results",
        "answers",
        "isolate",
        "attach",
    ),  # orchestration: capture, analyse, combine, serve
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
    """The capture child (capture/_child/) loads names.py by path, without the package, and
    capture writes the sidecar format in the user's interpreter: they may import nothing of
    traceinspect, nor anything outside the standard library."""
    tree = ast.parse((PACKAGE / name).read_text(encoding="utf-8"))
    imported = {
        (a.name if isinstance(node, ast.Import) else node.module or "").split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for a in node.names
    }
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported


# The capture child runs by path in the user's interpreter, where traceinspect may be missing.
CHILD = PACKAGE / "capture" / "_child"
# Types of the sidecar's format, for mypy: imported under ``if TYPE_CHECKING:`` only.
CHILD_TYPE_ONLY = frozenset({"traceinspect.sidecar"})
# The script's own libraries, used inside functions once the script has imported them (the
# profiler, Grain's absl flags); never at import time, so the child starts without them.
CHILD_RUN_TIME = frozenset({"jax", "absl"})


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _inside(blocks: list[ast.If] | list[ast.FunctionDef | ast.AsyncFunctionDef]) -> set[int]:
    """Ids of the nodes in the bodies of ``blocks``."""
    return {
        id(node) for block in blocks for statement in block.body for node in ast.walk(statement)
    }


def _child_violations(path: Path) -> list[str]:
    """Imports of a child module other than the standard library, ``__future__``, its sibling
    modules (relative, one level), the sidecar's types under ``if TYPE_CHECKING:``, and the
    script's own jax and absl inside functions."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    siblings = {p.stem for p in path.parent.glob("*.py")}
    allowed = set(sys.stdlib_module_names) | {"__future__"}
    nodes = list(ast.walk(tree))
    type_only = _inside([n for n in nodes if isinstance(n, ast.If) and _is_type_checking(n.test)])
    in_functions = _inside(
        [n for n in nodes if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    )
    found: list[tuple[int, str]] = []
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.level:
            parts = [node.module] if node.module else [a.name for a in node.names]
            if node.level > 1 or not all(p.split(".")[0] in siblings for p in parts):
                found += [(node.lineno, "." * node.level + p) for p in parts]
            continue
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if (
                top in allowed
                or (name in CHILD_TYPE_ONLY and id(node) in type_only)
                or (top in CHILD_RUN_TIME and id(node) in in_functions)
            ):
                continue
            found.append((node.lineno, name))
    return [f"{path.name}:{line} imports {name}" for line, name in sorted(found)]


CHILD_SOURCES = sorted(CHILD.glob("*.py"))


def test_the_child_package_is_checked() -> None:
    names = {p.name for p in CHILD_SOURCES}
    assert {"__init__.py", "__main__.py", "run.py", "window.py"} <= names
    # Its modules are in the layer check too (as capture).
    assert set(CHILD_SOURCES) <= set(SOURCES)


@pytest.mark.parametrize("path", CHILD_SOURCES, ids=lambda p: p.name)
def test_the_child_imports_only_the_standard_library_and_its_siblings(path: Path) -> None:
    assert _child_violations(path) == []


def test_a_child_import_from_outside_is_caught(tmp_path: Path) -> None:
    """The check itself: a third-party import, jax at import time, traceinspect (outside
    TYPE_CHECKING, or any module other than the sidecar's types), a relative import out of the
    package or of a missing sibling are reported; the stdlib, siblings, the sidecar's types and
    jax inside a function are not."""
    (tmp_path / "sibling.py").write_text("")
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import numpy\n"
        "from traceinspect.sidecar import HostJSON\n"
        "from .. import names\n"
        "from .missing import x\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from traceinspect.schema import START_NS\n"
        "import jax.profiler\n"
    )
    good = tmp_path / "good.py"
    good.write_text(
        "from __future__ import annotations\n"
        "import importlib.util, json\n"
        "from collections.abc import Mapping\n"
        "from typing import TYPE_CHECKING\n"
        "from .sibling import thing\n"
        "from . import sibling\n"
        "if TYPE_CHECKING:\n"
        "    from traceinspect.sidecar import HostJSON\n"
        "def start():\n"
        "    import jax.profiler\n"
    )
    assert _child_violations(bad) == [
        "bad.py:1 imports numpy",
        "bad.py:2 imports traceinspect.sidecar",
        "bad.py:3 imports ..names",
        "bad.py:4 imports .missing",
        "bad.py:7 imports traceinspect.schema",
        "bad.py:8 imports jax.profiler",
    ]
    assert _child_violations(good) == []


def _import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (every import, nested ones too, but not
    those under ``if TYPE_CHECKING:``, which never run). A name brought in by ``from package
    import name`` counts as the submodule when one of that name exists, else the package."""
    modules = {
        ".".join(p.relative_to(root.parent).with_suffix("").parts).removesuffix(".__init__"): p
        for p in sorted(root.rglob("*.py"))
    }
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        nodes = list(ast.walk(tree))
        type_only = _inside(
            [n for n in nodes if isinstance(n, ast.If) and _is_type_checking(n.test)]
        )
        skipped = {
            (n.lineno, n.col_offset)
            for n in nodes
            if isinstance(n, ast.Import | ast.ImportFrom) and id(n) in type_only
        }
        targets = set()
        for line, name, names in _imports(path, root):
            if any(line == s[0] for s in skipped):
                continue
            for full in names if names != (name,) else (name,):
                target = full if full in modules else full.rsplit(".", 1)[0]
                while target not in modules and "." in target:
                    target = target.rsplit(".", 1)[0]
                if target in modules and target != module:
                    targets.add(target)
        graph[module] = targets
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected sets of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            members = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                members.append(top)
                if top == node:
                    break
            if len(members) > 1:
                found.append(sorted(members))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _without_package_inits(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """A package's ``__init__`` re-exporting its submodules, which import siblings through the
    package, is Python's normal layout, not a circle: edges into a package's own parents are
    dropped for its submodules."""
    return {
        module: {t for t in targets if not module.startswith(t + ".")}
        for module, targets in graph.items()
    }


def test_no_import_circle_between_modules() -> None:
    assert _cycles(_without_package_inits(_import_graph())) == []


def test_an_import_circle_is_caught(tmp_path: Path) -> None:
    fake = tmp_path / "traceinspect"
    for rel, text in {
        "__init__.py": "",
        "report/__init__.py": "",
        "report/a.py": "from traceinspect.report.b import x\n",
        "report/b.py": "def f():\n    from traceinspect.report import a\n",
        "report/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from traceinspect.report.a import y\n",
    }.items():
        (fake / rel).parent.mkdir(parents=True, exist_ok=True)
        (fake / rel).write_text(text)
    graph = _without_package_inits(_import_graph(fake))
    assert graph["traceinspect.report.c"] == set()
    assert _cycles(graph) == [["traceinspect.report.a", "traceinspect.report.b"]]
