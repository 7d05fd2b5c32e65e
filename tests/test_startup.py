"""Start-up stays light (progress on stderr: tests/test_progress.py)."""

from __future__ import annotations

import subprocess
import sys

from traces import SAMPLES

import traceinspect


def test_cli_import_does_not_import_pandas() -> None:
    code = "import sys, traceinspect.cli; print('pandas' in sys.modules, 'jax' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


# Every command's --help, in a fresh interpreter: what it imported afterwards.
_HELP_IMPORTS = """
import contextlib, io, sys
import click
from traceinspect.cli import main

names = main.list_commands(click.Context(main))
for args in [["--help"], *([name, "--help"] for name in names)]:
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            main(args, prog_name="traceinspect")
        except SystemExit as exc:
            assert exc.code == 0, (args, exc.code)
heavy = ("pandas", "matplotlib", "numpy", "jax", "grain", "xprof", "pyarrow", "fsspec", "dask")
print(len(main.commands), *(name for name in heavy if name in sys.modules))
"""


def test_help_imports_no_heavy_library() -> None:
    """`traceinspect --help` and every `traceinspect COMMAND --help` stay fast: no pandas,
    matplotlib, numpy, jax or an optional extra is imported to print them."""
    out = subprocess.run(
        [sys.executable, "-c", _HELP_IMPORTS], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr[-2000:]
    count, *imported = out.stdout.split()
    assert int(count) >= 8  # every command's help was printed
    assert imported == []


def test_load_reports_progress_in_bytes() -> None:
    seen: list[tuple[int, int]] = []
    traceinspect.load(SAMPLES[0], progress=lambda done, total: seen.append((done, total)))
    size = SAMPLES[0].stat().st_size
    assert seen[-1] == (size, size)
    assert all(total == size and 0 <= done <= size for done, total in seen)


# An uncached `analyze` in a fresh interpreter: what it imported afterwards, and that the
# frames a notebook asks for are still there (built then, from the same columns).
_ANALYZE_IMPORTS = """
import contextlib, io, sys
from traceinspect.cli import main

for args in (["--no-cache"], ["--no-cache", "--json"]):
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            main(["analyze", sys.argv[1], *args], prog_name="traceinspect")
        except SystemExit as exc:
            assert exc.code == 0, (args, exc.code)
print(*(name for name in ("pandas", "matplotlib", "pyarrow") if name in sys.modules))
"""


def test_analyze_imports_neither_pandas_nor_matplotlib() -> None:
    """The analysis runs on the decoded columns: pandas (a third of a second to import)
    and matplotlib are for frames and figures, which `analyze` without `--plots` or
    `--html` does not make."""
    out = subprocess.run(
        [sys.executable, "-c", _ANALYZE_IMPORTS, str(SAMPLES[0])],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == []


def test_frames_of_an_analysis_match_its_columns() -> None:
    """``Analysis.per_step`` and ``gaps`` are frames of the columns the analysis computed."""
    from traceinspect import schema as S
    from traceinspect.analysis.analyze import analyze

    a = analyze(traceinspect.load(SAMPLES[0], use_cache=False))
    assert list(a.per_step.columns) == list(a.per_step_columns)
    assert list(a.gaps.columns) == list(a.gap_columns)
    assert len(a.per_step) == a.steps.count
    assert (a.per_step[S.WALL_NS].to_numpy() == a.per_step_columns[S.WALL_NS]).all()
    assert a.gaps[S.CAUSE].dtype == object and a.gaps[S.EVIDENCE].dtype == object
    longest = a.gaps.sort_values(S.DURATION_NS, ascending=False, kind="stable").index
    assert a.longest_gaps(5) == longest[:5].tolist()
