"""Helpers for the capture tests: run the tiny training scripts and read what they wrote."""

from __future__ import annotations

import collections
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from traceinspect.capture import CaptureOptions, CaptureResult, run_capture

SCRIPTS = Path(__file__).parent / "scripts"
TRAIN = SCRIPTS / "train.py"
REPO = Path(__file__).resolve().parents[2]


# These tests are about capture's mechanics, on scripts of a few steps: a fixed window (the
# old default) unless a test asks for another. The steady-state default has tests of its own.
FIXED_WINDOW = {"skip_steps": 2, "steps": 5}


def capture(logdir: Path, command: Sequence[str], **options: Any) -> CaptureResult:
    options = {**FIXED_WINDOW, **options}
    return run_capture(list(command), CaptureOptions(logdir=str(logdir), **options))


def train(logdir: Path, *args: str, **options: Any) -> CaptureResult:
    return capture(logdir, [sys.executable, str(TRAIN), *args], **options)


def trace_events(path: str) -> dict[str, list[dict[str, Any]]]:
    """Events of the host plane (/host:CPU), by name, each with its stats, its duration and
    its line, read by traceinspect's own reader (cross-checked against jax's ProfileData by
    tests/test_profiledata.py, which jax before 0.7 does not have)."""
    import traceinspect

    trace = traceinspect.load(path, use_cache=False)
    events = trace.events
    host = events[events["plane"] == "/host:CPU"]
    stats = trace.event_stats
    stats = stats[stats["event_row"].isin(host.index)]
    by_event: dict[int, dict[str, Any]] = collections.defaultdict(dict)
    for row, stat, kind, int_value, float_value, str_value in stats.itertuples(index=False):
        value = {"int64": int_value, "uint64": int_value, "double": float_value}.get(
            str(kind), str_value
        )
        by_event[int(row)][str(stat)] = value
    out: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for row, line, name, duration in zip(
        host.index, host["line"], host["name"], host["duration_ns"], strict=True
    ):
        record = dict(by_event.get(int(row), {}))
        record["duration_ns"] = int(duration)
        record["line"] = str(line)
        out[str(name)].append(record)
    return out


def read_sidecar(result: CaptureResult) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(Path(result.sidecar_path).read_text())
    return data


def traced_indices(sidecar: dict[str, Any]) -> list[int]:
    return [s["index"] for s in sidecar["steps"] if s["traced"]]


def assert_clean_run_dir(result: CaptureResult) -> None:
    """Only finished files in the run directory and no scratch left in the log directory."""
    run_dir = Path(result.run_dir)
    names = sorted(p.name for p in run_dir.iterdir())
    assert not [n for n in names if ".tmp" in n], names
    logdir = run_dir.parents[2]
    assert not list(logdir.glob(".traceinspect-tmp-*"))


def parent_process(
    command: Sequence[str],
    logdir: Path,
    kill_grace_s: float = 20,
    save_grace_s: float | None = None,
    **popen: Any,
) -> subprocess.Popen[str]:
    """Run the capture parent as its own process, as the CLI would, for signal tests: as a
    terminal's foreground job, whatever started the tests (a background job of a
    non-interactive shell ignores SIGINT, nohup SIGHUP, and what a process was started
    with ignored its script inherits)."""
    code = (
        "import signal, sys\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "signal.signal(signal.SIGHUP, signal.SIG_DFL)\n"
        "signal.signal(signal.SIGTERM, signal.SIG_DFL)\n"
        "from traceinspect.capture import CaptureOptions, run_capture\n"
        + (
            ""
            if save_grace_s is None
            else f"import traceinspect.capture._relay as r; r.SAVE_GRACE_S = {save_grace_s}\n"
        )
        + f"r = run_capture(sys.argv[1:], CaptureOptions(logdir={str(logdir)!r},"
        f" kill_grace_s={kill_grace_s}, skip_steps=2, steps=5))\n"
        "sys.exit(r.exit_code)\n"
    )
    env = {**os.environ, **popen.pop("env", {}), "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-c", code, *command], env=env, text=True, **popen)


def framework_measure(session: str, modules: Sequence[str]) -> ModuleType:
    """``sample_traces/frameworks/<session>_measure.py``, loaded by path, where ``modules``
    (parents before their submodules) are importable; else the test skips, or fails where
    ``TRACEINSPECT_<SESSION>=require`` (the nox session that must run it)."""
    for name in modules:
        if importlib.util.find_spec(name) is None:
            if os.environ.get(f"TRACEINSPECT_{session.upper()}") == "require":
                pytest.fail(f"{name} is not importable in the environment this test must run in")
            pytest.skip(f"{name} is not installed here: `nox -s {session}` runs this test")
    path = REPO / "sample_traces" / "frameworks" / f"{session}_measure.py"
    spec = importlib.util.spec_from_file_location(f"{session}_measure", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
