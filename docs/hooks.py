"""MkDocs hooks: the notebooks become pages, with alt text on their plots, and the
docstrings' Sphinx roles plain code.

The notebooks stay in notebooks/, where the tests run them and Jupyter users open them,
outside ``docs/``; ``on_files`` adds them to the site's files (no copy, no symlink) before
mkdocs-jupyter turns every ``.ipynb`` file into a page (it runs at the default priority, 0).

A plot's alt text is its cell's ``alt`` metadata (nbconvert's classic template reads the
same key; it survives running the notebook again, unlike an output's metadata). The lab
template mkdocs-jupyter renders with ignores it and nbconvert gives every image
"No description has been provided for this image"; ``on_page_content`` puts each cell's
text there instead, image by image in order, and a plot without one fails the strict build.

The docstrings name other objects as Sphinx does (``:func:`analyze```), which Markdown
renders as ":func:" before the name; ``on_page_content`` keeps the name alone, as Sphinx
shows it (``~a.b.C`` as ``C``)."""

from __future__ import annotations

import html
import json
import logging
import re
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"
# What nbconvert writes on an image that has no alt text.
DEFAULT_ALT = 'alt="No description has been provided for this image"'
log = logging.getLogger("mkdocs.hooks.traceinspect")  # under "mkdocs": strict counts it
_ROLE = re.compile(r":(?:class|func|meth|attr|data|mod|exc):<code>(~?)([^<]*)</code>")


@event_priority(50)
def on_files(files: Files, config: MkDocsConfig) -> Files:
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        uri = path.relative_to(REPO).as_posix()  # notebooks/01_tour.ipynb
        files.append(File(uri, str(REPO), config.site_dir, config.use_directory_urls))
    return files


def _name(match: re.Match[str]) -> str:
    tilde, target = match.groups()
    return f"<code>{target.rsplit('.', 1)[-1] if tilde else target}</code>"


def image_alts(notebook: dict[str, Any]) -> list[str | None]:
    """The alt text of each image a notebook's outputs show, in order: its cell's ``alt``
    (None where the cell has none). An output with HTML shows that instead of its image."""
    return [
        cell.get("metadata", {}).get("alt")
        for cell in notebook["cells"]
        for out in cell.get("outputs", [])
        if {"image/png", "image/jpeg"} & set(out.get("data", {}))
        and "text/html" not in out.get("data", {})
    ]


def with_alt_text(page_html: str, notebook: dict[str, Any], name: str) -> str:
    """``page_html`` (a notebook rendered by mkdocs-jupyter) with each image's default alt
    text replaced by its cell's; a warning where a plot has none or the images do not match
    the outputs one to one."""
    alts = image_alts(notebook)
    parts = page_html.split(DEFAULT_ALT)
    if len(parts) - 1 != len(alts):
        log.warning(f"{name}: {len(parts) - 1} image(s) without alt text, {len(alts)} plot(s)")
        return page_html
    missing = [i + 1 for i, alt in enumerate(alts) if not alt]
    if missing:
        log.warning(f"{name}: plot(s) {missing} have no alt text (the cell's metadata 'alt')")
        return page_html
    out = [parts[0]]
    for alt, part in zip(alts, parts[1:], strict=True):
        out += [f'alt="{html.escape(str(alt), quote=True)}"', part]
    return "".join(out)


def on_page_content(content: str, page: Page, **kwargs: Any) -> str:
    if page.file.src_uri.endswith(".ipynb"):
        path = Path(page.file.abs_src_path or REPO / page.file.src_uri)
        content = with_alt_text(content, json.loads(path.read_text(encoding="utf-8")), path.name)
    return _ROLE.sub(_name, content)
