"""What every module of the capture child shares: our notes on stderr, the atomic JSON write,
the exceptions that end the script early, capture's annotation names and the step sources."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import pathlib
import sys
import types
from collections.abc import Mapping
from typing import Any


def _load_names() -> types.ModuleType:
    """``traceinspect/names.py``, loaded by path: the child runs without the package on the
    user's path, and the analysis matches the very names the capture writes."""
    path = pathlib.Path(__file__).resolve().parents[2] / "names.py"
    spec = importlib.util.spec_from_file_location("_traceinspect_names", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_NAMES = _load_names()
# Our trace annotations. They are only emitted while the trace window is open.
ANN_STEP: str = _NAMES.ANN_STEP
ANN_NEXT_BATCH: str = _NAMES.ANN_NEXT_BATCH
ANN_HOST_READ: str = _NAMES.ANN_HOST_READ
ANNOTATIONS: tuple[str, ...] = _NAMES.ANNOTATIONS

# Step sources, best first: a better source seen later replaces a worse one.
SOURCE_ANNOTATION = "annotation"
SOURCE_GRAIN = "grain"
SOURCE_JIT = "jit"
SOURCE_TIME = "time"
_PRIORITY = {SOURCE_ANNOTATION: 0, SOURCE_GRAIN: 1, SOURCE_JIT: 2, SOURCE_TIME: 3}

# The phases of ``traceinspect isolate`` (the config's ``timing``): the script runs with host
# timing only, no profiler, and stops once its steady steps are timed.
TIMING_TARGET = "target"  # the outermost Grain next() returns the first batch it drew: no input
TIMING_LOADER = "loader"  # the first Grain iterator drawn from is drained alone: no training
TIMING_REAL = "real"  # the script as it is
TIMING_MODES = (TIMING_TARGET, TIMING_LOADER, TIMING_REAL)


def _warn(message: str) -> None:
    # stdout belongs to the user's script; our own notes go to stderr with a clear prefix.
    with contextlib.suppress(Exception):
        sys.stderr.write(f"traceinspect: {message}\n")
        sys.stderr.flush()


def _write_json_atomic(path: str, data: Mapping[str, Any]) -> None:
    tmp = pathlib.Path(f"{path}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    tmp.replace(path)


class _Terminated(BaseException):
    """Raised in the main thread by our SIGTERM handler so the trace can be saved."""


class _StopAfter(BaseException):
    """Raised in the main thread to end the run once the window is captured (``--stop-after``)."""
