"""The `traceinspect` command line: thin Click commands over the library."""

from __future__ import annotations

from traceinspect.cli._main import main, run

__all__ = ["main", "run"]
