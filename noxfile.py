"""The support matrix: the tests on every Python, jax and Grain that pyproject.toml declares.

`python -m pytest` runs the whole suite on the environment at hand (CI's: Python 3.11 with
what pip gives it). `nox` runs the rest of the matrix, each stack in a virtual environment
of its own (made with uv, in seconds):

- ``stack(oldest)``: the oldest Python we declare (3.10) with the oldest core dependencies
  pyproject.toml declares, and no jax: the reader's and the analysis' tests (all but the
  slow ones). Capture's floors (jax 0.10.2, Grain 0.2.18) do not install on 3.10;
- CI's own environment (``python -m pytest``: Python 3.11, jax 0.10.2, Grain 0.2.18) is the
  oldest stack capture is tested on;
- ``stack(newest-3.12)``, ``stack(newest-3.13)``: the newest jax, jaxlib and Grain each
  Python allows (unpinned: whatever the registry serves the day it runs, printed first),
  with the tests marked ``stack`` (real captures of real JAX + Grain loops, analysed);
- ``maxtext``: MaxText's own training loop under ``traceinspect capture``, on Python 3.12 with
  MaxText's training-path dependencies (``tests/maxtext_loop/``);
- ``keras``: Keras 3 ``model.fit`` (JAX backend) on a Grain dataset under ``traceinspect
  capture``, on Python 3.12 with the newest Keras, jax and Grain (``tests/capture/test_keras.py``);
- ``flax``: a Flax NNX training loop under ``traceinspect capture``, on Python 3.12 with the
  newest Flax (``tests/capture/test_flax.py``);
- ``orbax``: Flax NNX loops checkpointed by Orbax's ``CheckpointManager`` (synchronously,
  asynchronously) under ``traceinspect capture``, on Python 3.12 with the newest Flax and
  Orbax (``tests/capture/test_orbax.py``);
- ``tunix``: Tunix's ``PeftTrainer`` training a tiny NNX model under ``traceinspect
  capture``, on Python 3.12 with google-tunix 0.1.7 (``tests/capture/test_tunix.py``);
- ``docs``: the documentation site (``mkdocs.yml``), built with warnings as errors.

    nox                      # the whole matrix (what CI runs after pytest)
    nox -s 'stack(newest-3.12)'
    nox -s maxtext
    nox -s keras
    nox -s flax
    nox -s orbax
    nox -s tunix
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
# uv leaves packages uncompiled (pip compiles them), and CI's machine sets
# PYTHONDONTWRITEBYTECODE=1: every process then compiled jax from source, 2-3 s per import of
# jax 0.12 against 0.5 s compiled, in every capture child, Grain worker and MaxText run.
os.environ.setdefault("UV_COMPILE_BYTECODE", "1")
nox.options.sessions = ["stack", "maxtext", "keras", "flax", "orbax", "tunix", "docs"]
nox.options.error_on_missing_interpreters = True

# The oldest stack: the oldest Python we declare, with the oldest core dependencies
# pyproject.toml declares (uv's lowest-direct resolution: numpy 1.26, pandas 2.1, ...), and
# neither jax nor Grain. Capture needs jax >= 0.10.2 and Grain >= 0.2.18 (its extra's
# floors), which Python 3.10 does not get (its newest are jax 0.6.2 and Grain 0.2.13): on
# 3.10 traceinspect reads and analyses traces. CI's own environment (Python 3.11, jax
# 0.10.2, Grain 0.2.18) is the oldest that capture is tested on.
OLDEST = ("3.10", ())
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
        "import sys, importlib.metadata as m\n"
        "def v(d):\n"
        "    try:\n"
        "        return m.version(d)\n"
        "    except m.PackageNotFoundError:\n"
        "        return '-'\n"
        "names = 'jax jaxlib grain numpy pandas protobuf matplotlib'.split()\n"
        "print('stack: python', sys.version.split()[0], *(f'{d} {v(d)}' for d in names))",
    )


@nox.session(name="stack")
@nox.parametrize(
    ("python", "pins"),
    [nox.param(python, pins, id=name) for name, (python, pins) in STACKS.items()],
)
def stack(session: nox.Session, pins: tuple[str, ...]) -> None:
    """The tests on one Python/jax/Grain stack."""
    if session.python == OLDEST[0]:
        # The reader and the analysis (the tests that run no real capture), on the oldest
        # declared dependencies. UV_RESOLUTION is uv's; pip (nox's fallback) ignores it.
        session.install("-e", ".[test-tools]", env={"UV_RESOLUTION": "lowest-direct"})
        _versions(session)
        # Old pandas and numpy warn where newer ones changed behaviour: a warning a user
        # would see on every command fails here (numpy 1.24 with pandas 2.1 printed a
        # RuntimeWarning on every `analyze`).
        warnings_are_errors = ("-W", "error::FutureWarning", "-W", "error::RuntimeWarning")
        session.run(
            "python", "-m", "pytest", "-q", "-m", FAST, *warnings_are_errors, *session.posargs
        )
        return
    # The pins first, then the package: one resolution of everything at once backtracks for
    # minutes on old pins.
    session.install(*pins)
    session.install("-e", ".[test]", *pins)
    _versions(session)
    # The real captures and their analysis (marked ``stack``); the other slow tests (sweep's
    # and isolate's runs, the plain install) exercise no more of the stack and run once, in
    # CI's own environment. The fast suite runs on the oldest stack (above), whose numpy and
    # pandas differ; on the newest it would repeat CI's own.
    # On 3.13, whose jax and Grain are 3.12's, the tests marked newest_once (the heavier
    # captures of habits already run on CI's stack and 3.12) are left out: CI's time.
    marks = "stack and not newest_once" if session.python == "3.13" else "stack"
    session.run("python", "-m", "pytest", "-q", "-m", marks, *session.posargs)


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


@nox.session(python="3.12")
def keras(session: nox.Session) -> None:
    """Keras 3 ``model.fit`` (JAX backend) on a Grain dataset under traceinspect capture
    (tests/capture/test_keras.py), on the newest jax, Grain and Keras that Python 3.12 gets."""
    # Keras picks its backend at import (TensorFlow unless told).
    session.env["KERAS_BACKEND"] = "jax"
    session.install("-e", ".[test]", "keras", "jax", "jaxlib", "grain")
    _versions(session)
    session.run("python", "-c", "import keras; print('keras', keras.__version__)")
    _framework_tests(session, "keras")


@nox.session(python="3.12")
def flax(session: nox.Session) -> None:
    """A Flax NNX training loop under traceinspect capture (tests/capture/test_flax.py)."""
    # The newest Flax (and the jax, optax and Grain it takes), as a user's fresh install.
    session.install("-e", ".[capture,test]", "flax")
    _versions(session)
    session.run("python", "-c", "import flax; print('flax', flax.__version__)")
    _framework_tests(session, "flax")


@nox.session(python="3.12")
def orbax(session: nox.Session) -> None:
    """Flax NNX loops checkpointed by Orbax under traceinspect capture
    (tests/capture/test_orbax.py)."""
    # The newest Flax and Orbax (and the jax, optax and Grain they take), as a user's fresh
    # install.
    session.install("-e", ".[capture,test]", "flax", "orbax-checkpoint")
    _versions(session)
    session.run(
        "python",
        "-c",
        "import importlib.metadata as m\n"
        "print(*(f'{d} {m.version(d)}' for d in ('flax', 'orbax-checkpoint', 'optax')))",
    )
    _framework_tests(session, "orbax")


@nox.session(python="3.12")
def tunix(session: nox.Session) -> None:
    """Tunix's PeftTrainer on a tiny NNX model under traceinspect capture
    (tests/capture/test_tunix.py)."""
    # Pinned: the trainer's API (TrainingConfig, train(train_ds, eval_ds), its hooks) is
    # what the loop is written against. It brings Flax, Orbax, optax and Grain.
    session.install("-e", ".[capture,test]", "google-tunix==0.1.7")
    _versions(session)
    session.run(
        "python",
        "-c",
        "import importlib.metadata as m\n"
        "print(*(f'{d} {m.version(d)}' for d in ('google-tunix', 'flax', 'orbax-checkpoint')))",
    )
    _framework_tests(session, "tunix")


def _framework_tests(session: nox.Session, name: str) -> None:
    """A framework's tests (tests/capture/test_NAME.py), told to fail rather than skip where
    the framework does not import (TRACEINSPECT_NAME=require)."""
    session.run(
        "python",
        "-m",
        "pytest",
        "-q",
        f"tests/capture/test_{name}.py",
        *session.posargs,
        env={f"TRACEINSPECT_{name.upper()}": "require"},
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
