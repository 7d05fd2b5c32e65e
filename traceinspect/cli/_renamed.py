"""Old spellings of renamed options, read as the new ones for a release: Renamed and
RenamingCommand."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import click

#: The last release in which a deprecated option spelling (CHANGELOG: Deprecated) still works.
DEPRECATED_UNTIL = "0.2"


@dataclass(frozen=True)
class Renamed:
    """An option's old spelling, kept working for a release: ``old`` is read as ``new``.
    ``nargs`` tokens followed the old spelling, joined with ``join`` into the new one's value
    (``--window 10 20`` -> ``--window 10:20``); ``applies`` says whether the tokens are in the
    old form at all (a spelling whose name did not change)."""

    old: str
    new: str
    nargs: int = 1
    join: str = ""
    applies: Callable[[list[str]], bool] = lambda values: True


class RenamingCommand(click.Command):
    """A command that reads the old spellings of its renamed options (``renamed=``) as the
    new ones, with a deprecation note on stderr, so that one option name means one thing
    across commands (tests/test_option_names.py) without breaking a user's scripts."""

    def __init__(self, *args: Any, renamed: Sequence[Renamed] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.renamed = {r.old: r for r in renamed}

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, self._renamed_args(ctx, args))

    def _renamed_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        takes = {
            opt: param.nargs
            for param in self.params
            if isinstance(param, click.Option) and not param.is_flag and not param.count
            for opt in param.opts
        }
        out: list[str] = []
        i = 0
        while i < len(args):
            token = args[i]
            name, eq, value = token.partition("=")
            if token == "--" or not token.startswith("-") or token == "-":
                if token == "--" or not ctx.allow_interspersed_args:
                    return out + args[i:]  # the script's own arguments from here on
                out.append(token)
                i += 1
                continue
            old = self.renamed.get(name) if name.startswith("--") else None
            values = [value] if eq else args[i + 1 : i + 1 + (old.nargs if old else 0)]
            if old is not None and len(values) == (1 if eq else old.nargs) and old.applies(values):
                click.echo(
                    f"traceinspect: {self.name} {old.old} {' '.join(values)} is deprecated (it "
                    f"works until {DEPRECATED_UNTIL}): use {old.new} {old.join.join(values)}.",
                    err=True,
                )
                out += [old.new, old.join.join(values)]
                i += 1 if eq else 1 + old.nargs
                continue
            out.append(token)
            i += 1
            if not eq and name in takes:
                out += args[i : i + takes[name]]
                i += takes[name]
        return out
