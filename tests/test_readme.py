"""Every example in README.md and the documentation pages (docs/*.md) is what the command
prints, and every relative link in the README points at a file that exists.

A ```console block shows commands (``$ traceinspect ...``, a trailing ``\\`` continues one)
each followed by what it prints. The commands that read a bundled trace (``analyze``,
``info``, ``events``, ``compare`` and ``export`` on ``sample_traces/...``, or on the sample
shipped in the package, ``$(traceinspect sample)``) run here, from a scratch directory that
links to ``sample_traces/`` (so ``-o FILE`` writes there), and every line shown must be
printed (on stdout or stderr, as a terminal shows them), in order. A line that is exactly
``...`` stands for any number of lines left out; a block that does not end with one shows
the output to its end.

Blocks of ``capture``, ``sweep``, ``isolate`` and ``view`` are not run here: they run a
training script for seconds to minutes, or start XProf's server, and the slow tests cover
them (``tests/capture/``, ``tests/test_isolate.py``, ``tests/test_sweep.py``,
``tests/test_view.py``).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from traceinspect.cli import main
from traceinspect.cli.sample import sample_path

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# Commands that read a trace and print: run on the bundled samples.
RUN = frozenset({"analyze", "info", "events", "compare", "export"})
# Commands that run a script or serve: left to the slow tests (see the docstring).
SKIP = frozenset({"capture", "sweep", "isolate", "view"})
SAMPLE = "$(traceinspect sample)"
# What differs from one run or machine to the next, masked in both the shown and the real
# output: how long decoding took and which decoder did it (C, or the Python fallback
# without a compiler), and a compressed file's size (zlib builds differ in the last byte).
_VOLATILE = (
    (re.compile(r"in \d+\.\d+ s \((c|python) decoder\)"), "in <s> (<decoder>)"),
    (re.compile(r"\(\d+(\.\d+)? kB\)"), "(<size>)"),
)
_BLOCK = re.compile(r"^```console\n(.*?)^```", re.M | re.S)


@dataclass(frozen=True)
class Example:
    page: str
    line: int
    command: str
    shown: tuple[str, ...]

    @property
    def args(self) -> list[str]:
        return shlex.split(self.command.replace(SAMPLE, shlex.quote(str(sample_path()))))[1:]


def _examples(path: Path) -> list[Example]:
    """The ``$ traceinspect`` commands of a page's console blocks, with their output."""
    text = path.read_text(encoding="utf-8")
    out: list[Example] = []
    for block in _BLOCK.finditer(text):
        first = text.count("\n", 0, block.start()) + 2
        lines = block.group(1).splitlines()
        i = 0
        while i < len(lines):
            if not lines[i].startswith("$ traceinspect "):
                i += 1
                continue
            start, command = i, lines[i][2:]
            while command.endswith("\\") and i + 1 < len(lines):
                i += 1
                command = command[:-1].rstrip() + " " + lines[i].strip()
            i += 1
            shown = []
            while i < len(lines) and not lines[i].startswith("$ "):
                shown.append(lines[i])
                i += 1
            name = path.relative_to(REPO).as_posix()
            out.append(Example(name, first + start, command, tuple(shown)))
    return out


EXAMPLES = [example for page in PAGES for example in _examples(page)]


def _runs(example: Example) -> bool:
    command = example.args[0]
    if command in SKIP:
        return False
    assert command in RUN, (
        f"{example.page}:{example.line}: `traceinspect {command}` is in neither RUN nor SKIP "
        "of tests/test_readme.py: say whether its examples run here"
    )
    return True


def _normal(line: str) -> str:
    for pattern, mask in _VOLATILE:
        line = pattern.sub(mask, line)
    return line.rstrip()


def missing_lines(shown: tuple[str, ...], printed: list[str]) -> list[str]:
    """The shown lines not printed where they are shown: each run of lines between ``...``
    must be printed as it stands, after the run before; the first at the very start unless
    a ``...`` comes before it, the last at the very end unless one comes after it."""
    runs: list[list[str]] = [[]]
    for line in shown:
        if line == "...":
            runs.append([])
        else:
            runs[-1].append(_normal(line))
    real = [_normal(line) for line in printed]
    at = 0
    for k, run in enumerate(runs):
        if not run:
            continue
        # Where the run may start: after the run before; the first run starts the
        # output, the last one ends it.
        lo, hi = at, len(real) - len(run)
        if k == 0:
            hi = min(hi, 0)
        if k == len(runs) - 1:
            lo = max(lo, len(real) - len(run))
        found = next((s for s in range(lo, hi + 1) if real[s : s + len(run)] == run), None)
        if found is None:
            return run
        at = found + len(run)
    return []


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: f"{e.page}:{e.line}")
def test_example_prints_what_is_shown(
    example: Example, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not _runs(example):
        pytest.skip(f"`traceinspect {example.args[0]}` runs a script or a server: slow tests")
    assert any(a.startswith("sample_traces/") for a in example.args) or SAMPLE in (
        example.command
    ), f"{example.page}:{example.line}: an example that runs here reads a bundled trace"
    (tmp_path / "sample_traces").symlink_to(REPO / "sample_traces", target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, example.args, prog_name="traceinspect")
    assert result.exit_code == 0, result.output
    # What the terminal shows: stdout and stderr (notes, where a file was written).
    missing = missing_lines(example.shown, result.output.splitlines())
    assert missing == [], (
        f"{example.page}:{example.line}: `{example.command}` does not print, where shown:\n"
        + "\n".join(missing)
        + "\n\nIt prints:\n"
        + result.output
    )


def test_examples_are_found() -> None:
    """The block parser finds the examples (a parser that finds none passes every page)."""
    pages = {e.page for e in EXAMPLES if _runs(e)}
    assert "README.md" in pages
    assert len(pages) >= 5, pages


def test_missing_lines_honours_the_ellipsis() -> None:
    printed = ["a", "b", "c", "d"]
    assert missing_lines(("a", "...", "d"), printed) == []
    assert missing_lines(("...", "b", "c", "..."), printed) == []
    assert missing_lines(("a", "b"), printed) == ["a", "b"]  # the output goes on
    assert missing_lines(("b", "..."), printed) == ["b"]  # not the start
    assert missing_lines(("a", "...", "c", "b"), printed) == ["c", "b"]  # order
    assert missing_lines(("...", "d"), printed) == []


_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def test_readme_links_point_at_files() -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    targets = [t for t in _LINK.findall(text) if not re.match(r"[a-z][a-z0-9+.-]*:|#", t)]
    assert targets, "the README links to no file"
    missing = [t for t in targets if not (REPO / t.split("#", 1)[0]).exists()]
    assert missing == []


def _table(text: str, heading: str) -> list[str]:
    """The first Markdown table after ``heading``."""
    after = text.split(heading, 1)[1].splitlines()
    start = next(i for i, line in enumerate(after) if line.startswith("|"))
    end = next((i for i in range(start, len(after)) if not after[i].startswith("|")), None)
    return after[start:end]


def test_the_tested_stacks_are_the_same_in_the_readme_and_the_docs() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    docs = (REPO / "docs" / "index.md").read_text(encoding="utf-8")
    assert _table(readme, "Tested stacks") == _table(docs, "Tested stacks")
