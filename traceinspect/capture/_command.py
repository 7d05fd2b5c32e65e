"""Understanding the command a user wants to capture: which Python, which script or module."""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import shutil
import sys
from collections.abc import Sequence

from traceinspect.errors import CaptureUsageError

# Interpreter options that take a value in the next argument (python -W error -X dev train.py).
_OPTIONS_WITH_VALUE = frozenset({"-W", "-X", "--check-hash-based-pycs"})
_PYTHON_NAME = re.compile(r"^python(\d+(\.\d+)*)?$")


@dataclasses.dataclass(frozen=True)
class ScriptCommand:
    """A Python command split into the parts the child process needs."""

    python: str
    """The interpreter to run (absolute path)."""
    interpreter_options: tuple[str, ...]
    """Options for the interpreter itself, such as ``-u`` or ``-X dev``."""
    mode: str
    """``"path"`` for ``python train.py``, ``"module"`` for ``python -m pkg.mod``."""
    target: str
    """The script path (as typed) or the module name."""
    args: tuple[str, ...]
    """The script's own arguments."""
    original: tuple[str, ...]
    """The command exactly as given."""


def _is_python(word: str) -> bool:
    return bool(_PYTHON_NAME.match(pathlib.Path(word).name))


def _has_python_shebang(path: str) -> bool:
    try:
        with pathlib.Path(path).open("rb") as fh:
            first = fh.readline(200)
    except OSError:
        return False
    return first.startswith(b"#!") and b"python" in first


def parse_command(command: Sequence[str]) -> ScriptCommand:
    """Split ``python [opts] train.py ARGS``, ``python -m mod ARGS`` or ``train.py ARGS``.

    Raises :class:`CaptureUsageError` (exit code 2) for anything that is not a Python script or
    module, or a script that does not exist.
    """
    words = tuple(command)
    if not words:
        raise CaptureUsageError(
            "no command given: put the training command after '--', "
            "e.g. traceinspect capture -- python train.py"
        )
    first = words[0]
    if _is_python(first):
        python = first if os.sep in first else shutil.which(first)
        if python is None or not pathlib.Path(python).exists():
            raise CaptureUsageError(
                f"{first!r} was not found on PATH: give the path of the interpreter"
            )
        rest = list(words[1:])
    elif first.endswith(".py") or (pathlib.Path(first).is_file() and _has_python_shebang(first)):
        # A bare script runs with the interpreter traceinspect runs in: the one with jax.
        python = sys.executable
        rest = list(words)
    else:
        raise CaptureUsageError(
            f"{first!r} is not a Python command: capture runs "
            "'python train.py ...', 'python -m pkg.mod ...' or 'train.py ...'"
        )

    options: list[str] = []
    while rest and rest[0].startswith("-") and rest[0] != "-":
        option = rest.pop(0)
        if option == "-m" or (option.startswith("-m") and len(option) > 2):
            module = option[2:] or (rest.pop(0) if rest else "")
            if not module:
                raise CaptureUsageError("'python -m' needs a module name, e.g. python -m pkg.train")
            return ScriptCommand(
                str(pathlib.Path(python).absolute()),
                tuple(options),
                "module",
                module,
                tuple(rest),
                words,
            )
        if option == "-c" or option.startswith("-c"):
            raise CaptureUsageError(
                "capture needs a script file or a module, not 'python -c': "
                "save the code to a file and run that"
            )
        options.append(option)
        if option in _OPTIONS_WITH_VALUE and rest:
            options.append(rest.pop(0))
    if not rest or rest[0] == "-":
        raise CaptureUsageError(
            "no script given: capture needs 'python train.py ...' or 'python -m pkg.mod ...'"
        )
    script = rest.pop(0)
    if not pathlib.Path(script).is_file():
        raise CaptureUsageError(
            f"script {script!r} not found (working directory {pathlib.Path.cwd()}): check the path"
        )
    return ScriptCommand(
        str(pathlib.Path(python).absolute()), tuple(options), "path", script, tuple(rest), words
    )
