"""Write docs/cli.md: every command's --help, at a fixed width, so the reference never drifts.

    python docs/make_cli_reference.py

tests/test_docs.py regenerates the text in memory and fails when docs/cli.md differs.
"""

from __future__ import annotations

from pathlib import Path

import click
from click.testing import CliRunner

from traceinspect.cli import main

OUT = Path(__file__).with_name("cli.md")
# Fixed, so the output does not depend on the terminal that runs the script.
WIDTH = 88
HEADER = """\
# CLI reference

Generated from each command's `--help` by `python docs/make_cli_reference.py`; do not
edit by hand (`tests/test_docs.py` fails when this file is out of date).
"""


def command_paths(group: click.Group = main, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command below ``group`` as its argument path, groups before their commands."""
    out: list[tuple[str, ...]] = [prefix]
    ctx = click.Context(group)
    for name in sorted(group.list_commands(ctx)):  # commands load when asked for
        command = group.get_command(ctx, name)
        if command is None or command.hidden:
            continue
        if isinstance(command, click.Group):
            out += command_paths(command, (*prefix, name))
        else:
            out.append((*prefix, name))
    return out


def help_text(path: tuple[str, ...]) -> str:
    result = CliRunner().invoke(
        main, [*path, "--help"], prog_name="traceinspect", terminal_width=WIDTH
    )
    if result.exit_code != 0:
        raise RuntimeError(f"traceinspect {' '.join(path)} --help failed: {result.output}")
    return result.output.rstrip() + "\n"


def render() -> str:
    parts = [HEADER]
    for path in command_paths():
        title = " ".join(("traceinspect", *path))
        parts.append(f"\n## `{title}`\n\n```text\n{help_text(path)}```\n")
    return "".join(parts)


if __name__ == "__main__":
    OUT.write_text(render(), encoding="utf-8")
    print(f"Wrote {OUT}")
