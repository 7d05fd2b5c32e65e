"""`python -m traceinspect` runs the CLI."""

from __future__ import annotations

from traceinspect.cli import run

if __name__ == "__main__":
    run()
