"""A capture never waits silently: a script whose Grain workers died is named and stopped by
capture's watchdog, and one SIGINT ends capture and everything it started, from a terminal
(the whole process group) or sent to capture alone (as `timeout` does)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from capture_helpers import REPO, SCRIPTS, TRAIN

from traceinspect.capture import INTERRUPT_GRACE_S, SIDECAR_NAME
from traceinspect.capture._stderr import ScriptStderr
from traceinspect.capture._watchdog import STALL_ENV, has_main_guard

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")

NOGUARD = SCRIPTS / "grain_noguard.py"
# The CLI as a terminal's foreground job runs it, whatever started the tests (a background
# job of a non-interactive shell starts them with SIGINT ignored, which capture keeps).
_CLI = (
    "import signal, sys\n"
    "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
    "from traceinspect.cli import run\n"
    "sys.argv[0] = 'traceinspect'\n"
    "run()\n"
)
_FIX = 'put the training loop under `if __name__ == "__main__":`'


def _start(tmp_path: Path, *args: str, stall_s: str = "5") -> subprocess.Popen[str]:
    """`traceinspect capture ARGS` in a session of its own (its pid is its process group's),
    its stderr in ``tmp_path/err.txt``."""
    return subprocess.Popen(
        [sys.executable, "-c", _CLI, "capture", "--logdir", str(tmp_path / "logs"), *args],
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "err.txt").open("w"),
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO), STALL_ENV: stall_s},
        start_new_session=True,
    )


def _group(pgid: int) -> set[int]:
    """The live processes of process group ``pgid`` (zombies left out)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            found.add(int(entry.name))
    return found


def _wait(proc: subprocess.Popen[str], timeout_s: float, seen: set[int]) -> float:
    """Wait for ``proc``, adding the processes of its group to ``seen`` meanwhile; the
    seconds it took."""
    started = time.monotonic()
    while proc.poll() is None:
        seen |= _group(proc.pid)
        if time.monotonic() - started > timeout_s:
            break
        time.sleep(0.2)
    took = time.monotonic() - started
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        pytest.fail(f"capture still ran {timeout_s:g} s on")
    return took


def _survivors(pgid: int, seen: set[int]) -> list[int]:
    """Processes of the capture left alive a moment after it ended (none are awaited); any
    found are killed."""
    time.sleep(0.5)
    left = sorted(_group(pgid))
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert seen, "no process of the capture was ever seen"
    return left


def _sidecar(tmp_path: Path) -> dict[str, object]:
    (path,) = (tmp_path / "logs" / "plugins" / "profile").glob(f"*/{SIDECAR_NAME}")
    data: dict[str, object] = json.loads(path.read_text())
    return data


def _said(tmp_path: Path, start: str) -> list[str]:
    lines = (tmp_path / "err.txt").read_text().splitlines()
    return [line for line in lines if line.startswith(f"traceinspect: {start}")]


@pytest.mark.slow
@pytest.mark.parametrize("steps_before", [0, 40], ids=["at-once", "after-40-steps"])
def test_workers_that_run_the_script_again_are_named_and_the_script_stopped(
    tmp_path: Path, steps_before: int
) -> None:
    """Grain's tutorial without a main guard: its spawned workers run it again and die, and
    its iterator waits for ever. Capture says so, with the worker's error and the fix, stops
    the script with its workers, keeps what it traced and exits non-zero."""
    seen: set[int] = set()
    proc = _start(tmp_path, "--", sys.executable, str(NOGUARD), "--steps-before", f"{steps_before}")
    took = _wait(proc, 60, seen)
    left = _survivors(proc.pid, seen)

    assert proc.returncode != 0
    assert took < 60
    assert not left, f"left running: {left}"
    (said,) = _said(tmp_path, "no step for")
    # On a failure, what the script and its workers wrote: which traceback was missed.
    why = f"{said}\n--- stderr ---\n{(tmp_path / 'err.txt').read_text()[-6000:]}"
    assert "a Grain worker process exited (exit code 1): " in said, why
    assert "UnparsedFlagAccessError" in said, why
    rerun = "Grain's workers run your script again as they start"
    assert said.endswith(f"{rerun}: {_FIX}; stopping the script"), said
    sidecar = _sidecar(tmp_path)
    reasons = sidecar["partial_reasons"]
    assert isinstance(reasons, list)
    assert reasons[0].startswith("traceinspect stopped the script: no step for"), reasons
    if steps_before:
        # What was traced before the workers died is kept (the early trace, from step 2).
        assert sidecar["trace_files"], reasons
        (run_dir,) = (tmp_path / "logs" / "plugins" / "profile").iterdir()
        assert list(run_dir.glob("*.xplane.pb"))
    else:
        assert sidecar["trace_files"] == []


@pytest.mark.slow
@pytest.mark.parametrize("to", ["group", "capture"])
def test_one_sigint_ends_capture_and_the_grain_workers(tmp_path: Path, to: str) -> None:
    """A terminal's Ctrl-C (the whole process group) or a SIGINT sent to capture alone, in the
    window with 2 Grain workers running: the script has it once, everything ends within
    10 s and the partial trace's summary is printed."""
    marker = tmp_path / "in_window"
    proc = _start(
        tmp_path,
        *("--skip-steps", "2", "--steps", "5", "--", sys.executable, str(TRAIN)),
        *("--steps", "40", "--workers", "2", "--hang-at", "4", "--marker", str(marker)),
    )
    seen: set[int] = set()
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert proc.poll() is None, (tmp_path / "err.txt").read_text()[-3000:]
        assert time.monotonic() < deadline, "the run never reached the marker"
        seen |= _group(proc.pid)
        time.sleep(0.1)
    seen |= _group(proc.pid)
    # capture, the script, its 2 workers (and multiprocessing's resource tracker).
    assert len(seen) >= 4, seen
    if to == "group":
        os.killpg(proc.pid, signal.SIGINT)
    else:
        os.kill(proc.pid, signal.SIGINT)
    took = _wait(proc, 30, seen)
    left = _survivors(proc.pid, seen)

    assert proc.returncode == 130
    assert took < 10
    assert not left, f"left running: {left}"
    err = (tmp_path / "err.txt").read_text()
    # The script's own KeyboardInterrupt, raised where its loop waited: once.
    assert err.count("time.sleep(120)\nKeyboardInterrupt") == 1, err[-3000:]
    (summary,) = _said(tmp_path, "traced steps 2-")
    assert "partial: the script was interrupted (SIGINT) inside the window" in summary
    assert _sidecar(tmp_path)["trace_files"]


@pytest.mark.slow
def test_one_sigint_ends_a_script_stuck_on_dead_workers(tmp_path: Path) -> None:
    """The script of the first test, its watchdog off: one SIGINT to capture alone ends it,
    though its way out waits for ever on its dead workers: SIGTERM INTERRUPT_GRACE_S later,
    then its end."""
    proc = _start(tmp_path, "--", sys.executable, str(NOGUARD), stall_s="0")
    seen: set[int] = set()
    deadline = time.monotonic() + 120
    while (
        len(_said(tmp_path, "")) < 1
        or "UnparsedFlagAccessError" not in (tmp_path / "err.txt").read_text()
    ):
        assert proc.poll() is None
        assert time.monotonic() < deadline, "the workers never died"
        seen |= _group(proc.pid)
        time.sleep(0.2)
    time.sleep(1)
    seen |= _group(proc.pid)
    os.kill(proc.pid, signal.SIGINT)
    took = _wait(proc, 60, seen)
    left = _survivors(proc.pid, seen)

    assert proc.returncode == 128 + signal.SIGKILL
    assert took < 2 * INTERRUPT_GRACE_S + 5
    assert not left, f"left running: {left}"
    (killed,) = _said(tmp_path, "the script was killed")
    assert f"it went on {2 * INTERRUPT_GRACE_S:g} s after Ctrl-C" in killed
    assert not _said(tmp_path, "no step for")


@pytest.mark.slow
def test_ctrl_c_while_the_grain_workers_start_ends_the_script(tmp_path: Path) -> None:
    """A terminal's Ctrl-C while 2 Grain workers import: they die of it, and the script has
    its KeyboardInterrupt at once. With Grain's worker profiling on (capture's default
    before 2026-11-30), the main process waited for the dead worker's profiler server in
    jax's ``register_subprocess`` holding the GIL: nothing of the script ran again, and
    capture killed it 21 s later, what it had traced lost (Grain's tutorial loop, Ctrl-C 6 s
    in: 3 runs of 4)."""
    marker = tmp_path / "starting"
    script = SCRIPTS / "grain_start_interrupted.py"
    proc = _start(tmp_path, "--", sys.executable, str(script), str(marker), stall_s="0")
    seen: set[int] = set()
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert proc.poll() is None, (tmp_path / "err.txt").read_text()[-3000:]
        assert time.monotonic() < deadline, "the script never started its workers"
        time.sleep(0.05)
    time.sleep(0.3)  # the workers are importing
    seen |= _group(proc.pid)
    os.killpg(proc.pid, signal.SIGINT)
    took = _wait(proc, 40, seen)
    left = _survivors(proc.pid, seen)

    assert proc.returncode == 130, (tmp_path / "err.txt").read_text()[-3000:]
    assert took < 2 * INTERRUPT_GRACE_S, took
    assert not left, f"left running: {left}"
    profiler = _sidecar(tmp_path)["profiler"]
    assert isinstance(profiler, dict) and profiler["grain_worker_profiling"] is False


# Two Grain workers that died together, as they wrote it (a caret line lost its indent where
# their writes met), then a note of Grain's and an error of the script's own main thread.
_WORKERS_DIED = """\
Traceback (most recent call last):
  File "<string>", line 1, in <module>
  File "/usr/lib/python3.11/multiprocessing/spawn.py", line 122, in spawn_main
    exitcode = _main(fd, parent_sentinel)
  File "/usr/lib/python3.11/multiprocessing/spawn.py", line 297, in _fixup_main_from_path
    main_content = runpy.run_path(main_path,
  File "/home/me/train.py", line 49, in <module>
    for i, batch in enumerate(ds):
    return self.__get_result()
^^^^^^^
absl.flags._exceptions.UnparsedFlagAccessError: Trying to access flag --x before flags were parsed.
--------------------
For simplicity, Grain has removed its internal frames from the traceback of the following exception.
Exception ignored in: <function SharedMemoryArray.__del__ at 0x7f6956520d60>
Traceback (most recent call last):
  File "/usr/lib/python3.11/site-packages/grain/shared_memory_array.py", line 170, in __del__
AttributeError: 'NoneType' object has no attribute 'mmap'
"""


def test_the_script_stderr_is_passed_on_unchanged_and_its_tracebacks_read() -> None:
    out_read, out_write = os.pipe()
    stderr = ScriptStderr(out_fd=out_write)
    script_end = os.dup(stderr.write_fd)
    stderr.start()
    data = _WORKERS_DIED.encode()
    for k in range(0, len(data), 97):  # in pieces, as a pipe delivers them
        os.write(script_end, data[k : k + 97])
    os.close(script_end)
    stderr.close()
    os.close(out_write)
    with os.fdopen(out_read, "rb") as passed:
        assert passed.read() == data

    worker = stderr.tracebacks.last(worker=True)
    assert worker is not None and worker.reran_main()
    assert worker.error.startswith("absl.flags._exceptions.UnparsedFlagAccessError: Trying")
    last = stderr.tracebacks.last()
    assert last is not None and not last.in_worker()
    assert last.error == "AttributeError: 'NoneType' object has no attribute 'mmap'"


def test_the_main_guard_is_found() -> None:
    assert has_main_guard(str(NOGUARD)) is False
    assert has_main_guard(str(TRAIN)) is True


# A worker spawned by multiprocessing (not Grain) that fails or returns, while the main
# thread sleeps: no jax, a capture of a few seconds.
_WORKER = """\
import multiprocessing, sys, time

def work(code):
    if code:
        raise ValueError("the worker failed")

if __name__ == "__main__":
    worker = multiprocessing.get_context("spawn").Process(target=work, args=(int(sys.argv[1]),))
    worker.start()
    time.sleep(float(sys.argv[2]))
"""


@pytest.mark.parametrize(("code", "sleep_s"), [(1, 60), (0, 5)], ids=["fails", "returns"])
def test_a_worker_that_failed_stops_a_script_without_steps(
    tmp_path: Path, code: int, sleep_s: int
) -> None:
    """A worker's error and a main thread that waits: stopped after the floor (2 s here),
    the fix not named (the script has its guard). A worker that returned stops nothing."""
    script = tmp_path / "worker.py"
    script.write_text(_WORKER)
    proc = _start(tmp_path, "--", sys.executable, str(script), str(code), str(sleep_s), stall_s="2")
    seen: set[int] = set()
    took = _wait(proc, 60, seen)
    left = _survivors(proc.pid, seen)

    assert not left, f"left running: {left}"
    said = _said(tmp_path, "no step for")
    if code:
        assert proc.returncode == 128 + signal.SIGTERM
        assert said == [
            "traceinspect: no step for 2 s; a worker process of the script exited (exit code 1):"
            " ValueError: the worker failed; stopping the script"
        ]
        assert took < 20
    else:
        assert proc.returncode == 0
        assert said == []
