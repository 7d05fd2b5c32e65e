"""Every notebook runs top to bottom on the bundled samples, so none of them rots."""

from __future__ import annotations

import html
import importlib.util
import os
import re
from pathlib import Path
from typing import Any

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

import traceinspect  # noqa: E402  (after the skips: nbformat and nbclient come with [test])

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
# What each notebook's last cell must print, so a notebook that runs but says something
# wrong fails too.
LAST_OUTPUT = {
    "01_tour.ipynb": ("Verdict: sync-bound", "- Stop reading a device value every step"),
    "02_digging_in.ipynb": ("Step time fell 52%", "verdict sync-bound -> device-bound"),
    "03_sweep.ipynb": ("* 2 workers: the best median step time",),
    "04_pod.ipynb": ("Straggler: host2 (confirmed: True)", "- Look at host2 first"),
}


def last_text(nb: Any) -> str:
    return "".join(o.get("text", "") for o in nb.cells[-1].get("outputs", []))


def html_cells(nb: Any) -> list[int]:
    """The cells that show HTML (a frame, a Trace, an Analysis, ...)."""
    return [
        i
        for i, cell in enumerate(nb.cells)
        if any("text/html" in out.get("data", {}) for out in cell.get("outputs", []))
    ]


def test_every_notebook_is_checked() -> None:
    assert sorted(p.name for p in NOTEBOOKS) == sorted(LAST_OUTPUT)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebooks_use_the_exported_names_only(path: Path) -> None:
    """What a notebook shows is the public API: ``traceinspect.X`` with X in ``__all__``,
    never a submodule (``traceinspect.pod.load_host``, ``from traceinspect.sweep import``)."""
    nb = nbformat.read(path, as_version=4)
    used: set[str] = set()
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        assert not re.search(r"^\s*(from|import) traceinspect\.", cell.source, re.M), cell.source
        used |= set(re.findall(r"\btraceinspect\.(\w+)", cell.source))
        for names in re.findall(r"^\s*from traceinspect import (.+)$", cell.source, re.M):
            used |= {name.split(" as ")[0].strip() for name in names.split(",")}
    assert used, "the notebook does not use traceinspect"
    assert used <= set(traceinspect.__all__), sorted(used - set(traceinspect.__all__))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_saved_with_outputs(path: Path) -> None:
    """The notebooks are read on GitHub without running them: they keep their outputs,
    with plots as images."""
    nb = nbformat.read(path, as_version=4)
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert all(cell.get("execution_count") for cell in code), "run it and save it with outputs"
    outputs = [out for cell in code for out in cell.get("outputs", [])]
    assert not [out for out in outputs if out.get("output_type") == "error"]
    assert any("image/png" in out.get("data", {}) for out in outputs)
    for expected in LAST_OUTPUT[path.name]:
        assert expected in last_text(nb)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The kernel imports this checkout's traceinspect, whatever else is installed.
    paths = [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))
    nb = nbformat.read(path, as_version=4)
    saved_html = html_cells(nb)
    client = nbclient.NotebookClient(
        nb, timeout=180, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    client.execute()
    errors = [
        out
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
        if out.get("output_type") == "error"
    ]
    assert not errors
    for expected in LAST_OUTPUT[path.name]:
        assert expected in last_text(nb)
    # Results still show as HTML where the saved notebook shows it: traceinspect registers
    # the report layer's HTML with the kernel's formatter (the objects have no _repr_html_).
    assert html_cells(nb) == saved_html


def _plot_cells(nb: Any) -> list[Any]:
    return [
        cell
        for cell in nb.cells
        if any("image/png" in out.get("data", {}) for out in cell.get("outputs", []))
    ]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_plot_has_alt_text(path: Path) -> None:
    """The cell's ``alt`` metadata, which docs/hooks.py puts on the page's image: a
    description of that plot (what its axes and marks show), not nbconvert's default."""
    cells = _plot_cells(nbformat.read(path, as_version=4))
    alts = [cell.metadata.get("alt", "") for cell in cells]
    assert all(len(alt) > 120 for alt in alts), alts
    assert len(set(alts)) == len(alts)
    assert not any("No description" in alt for alt in alts)
    # One image a cell: the hook pairs images with cells in order.
    assert all(len(cell.outputs) == 1 for cell in cells)


def test_the_notebooks_are_numbered_as_their_files_in_titles_and_nav() -> None:
    yaml = pytest.importorskip("yaml")
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))
    (section,) = [entry["Notebooks"] for entry in config["nav"] if "Notebooks" in entry]
    nav = [next(iter(entry.items())) for entry in section]
    assert [target for _, target in nav] == [f"notebooks/{p.name}" for p in NOTEBOOKS]
    for (title, _), path in zip(nav, NOTEBOOKS, strict=True):
        number = path.name[:2]
        assert title.startswith(f"{number} · "), title
        heading = nbformat.read(path, as_version=4).cells[0].source.splitlines()[0]
        assert heading.startswith(f"# {number} · "), heading


def test_the_docs_hook_gives_each_plot_its_cells_alt_text() -> None:
    pytest.importorskip("mkdocs")
    spec = importlib.util.spec_from_file_location("hooks", REPO / "docs" / "hooks.py")
    assert spec is not None and spec.loader is not None
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    nb = nbformat.read(NOTEBOOKS[0], as_version=4)
    alts = [cell.metadata["alt"] for cell in _plot_cells(nb)]
    page = "".join(f'<img src="data:{i}" {hooks.DEFAULT_ALT}>' for i in range(len(alts)))
    out = hooks.with_alt_text(page, nb, "01_tour.ipynb")
    assert hooks.DEFAULT_ALT not in out and out.count("<img ") == len(alts)
    assert all(f'alt="{html.escape(alt, quote=True)}"' in out for alt in alts)
