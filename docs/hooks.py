"""MkDocs hooks: the notebooks become pages, and the docstrings' Sphinx roles plain code.

The notebooks stay in notebooks/, where the tests run them and Jupyter users open them,
outside ``docs/``; ``on_files`` adds them to the site's files (no copy, no symlink) before
mkdocs-jupyter turns every ``.ipynb`` file into a page (it runs at the default priority, 0).

The docstrings name other objects as Sphinx does (``:func:`analyze```), which Markdown
renders as ":func:" before the name; ``on_page_content`` keeps the name alone, as Sphinx
shows it (``~a.b.C`` as ``C``)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"
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


def on_page_content(html: str, **kwargs: Any) -> str:
    return _ROLE.sub(_name, html)
